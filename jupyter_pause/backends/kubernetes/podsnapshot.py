"""``gke-pod-snapshot``: plain GKE with Pod Snapshots; release the GPU by snapshotting the pod.

Pause (:meth:`GkePodSnapshotBackend.release`), after the manager has written
every running kernel's application checkpoint to the home volume:

1. record the environment fingerprint and the checkpoints on the pod's
   StatefulSet (annotations; the CLI reads them from outside the pod);
2. quiesce: wait ``settle_seconds`` so sockets settle;
3. create a ``PodSnapshotManualTrigger`` for this pod (name
   ``jupyter-pause-<statefulset>``, so the RBAC Role can name it);
4. wait until the trigger completes (``Triggered=True``, reason ``Complete``)
   and its ``PodSnapshot`` is ``Ready=True``;  ``status.snapshotCreated`` may
   be a string or ``{name}``;
5. scale the StatefulSet to 0: the pod goes, and its GPU node can be released.

It never writes ``PodSnapshot`` objects (GKE's admission policy forbids it);
it only gets, lists and deletes them.  When the trigger fails or the snapshot
is not ready within ``snapshot_timeout``, the pod is left running, the trigger
(and any partial snapshot) is deleted, and :class:`BackendError` says so.

The restored copy: the snapshot holds this very process, frozen inside step 4.
When the pod is restored the process carries on from there, sees the snapshot
ready, and finds that its pod has a new UID: it is the restored copy.  It then
does *not* scale anything down; ``release`` returns
``{"restored_from": "snapshot", ...}`` and the manager brings its sessions
back to running.  A new server process (cold start or restore of a pod whose
server had not started) goes through :meth:`startup` instead.

Resume is outside the pod (``jupyter pause resume``): scale the StatefulSet
back up; GKE restores the new pod from the matching snapshot, or cold-starts it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from traitlets import Bool, Float

from ...ledger import EventType
from ..base import BackendError
from .client import Conflict, Forbidden, Invalid, KubeError, NotFound
from .common import (
    A_SNAPSHOT,
    A_TRIGGER,
    MANAGED_BY,
    TRIGGER_PREFIX,
    TRIGGERED_BY_LABEL,
    KubeBackend,
    Restored,
    annotations,
    checkpoint_summary,
    condition,
    condition_true,
    now_iso,
    owner_statefulset,
    snapshot_created,
)

LEFT_RUNNING = (
    " The pod keeps running and nothing was lost: every notebook is also checkpointed "
    "on the home volume."
)


def trigger_name_for(statefulset: str) -> str:
    return (TRIGGER_PREFIX + statefulset)[:253]


class SnapshotFailed(BackendError):
    pass


class GkePodSnapshotBackend(KubeBackend):
    """Pause by GKE pod snapshot of this server's own pod, then scale its StatefulSet to 0."""

    name = "gke-pod-snapshot"

    snapshot_timeout = Float(
        1800.0,
        help="seconds to wait for the trigger to complete and the PodSnapshot to be Ready "
        "(GPU snapshots of tens of GB take 5-15 min); then the pause fails and the pod keeps running",
    ).tag(config=True)
    delete_snapshot_after_resume = Bool(
        True,
        help="delete this pod's snapshots once the server runs again: a snapshot is single "
        "use, and GKE would otherwise restore the stale one at the next pod restart",
    ).tag(config=True)

    def __init__(self, ledger=None, client=None, **kwargs):
        super().__init__(ledger=ledger, client=client, **kwargs)
        self._statefulset: str | None = None

    # -- owner --------------------------------------------------------------

    async def statefulset(self) -> str:
        if self._statefulset is None:
            pod = await self.call("get_pod", self.own_pod_name())
            sts = owner_statefulset(pod)
            if not sts:
                raise BackendError(
                    f"{self.name}: pod {pod['metadata']['name']} is not owned by a StatefulSet; "
                    "pausing needs an owner that can be scaled to 0 and back"
                )
            self._statefulset = sts
        return self._statefulset

    async def get_owner(self) -> dict:
        return await self.call("get_statefulset", await self.statefulset())

    async def patch_owner(self, patch: dict) -> dict:
        return await self.call("patch_statefulset", await self.statefulset(), patch)

    # -- pause --------------------------------------------------------------

    async def release(self, sessions, shutdown_kernel) -> dict[str, Any]:
        pod_name = self.own_pod_name()
        pod = await self.call("get_pod", pod_name)
        start_uid = pod["metadata"]["uid"]
        sts_name = owner_statefulset(pod)
        if not sts_name:
            raise BackendError(
                f"{self.name}: pod {pod_name} is not owned by a StatefulSet; cannot release it"
            )
        self._statefulset = sts_name
        sts = await self.call("get_statefulset", sts_name)
        replicas = int((sts.get("spec") or {}).get("replicas") or 1)
        trigger = trigger_name_for(sts_name)
        fingerprint = await self.fingerprint(pod)
        await self.annotate(
            state="snapshotting",
            message="taking the pod snapshot",
            backend=self.name,
            paused_at=now_iso(),
            fingerprint=fingerprint,
            checkpoints=checkpoint_summary(sessions),
            replicas=str(replicas),
            trigger=trigger,
            snapshot=None,
            restored_from=None,
            resume_operation=None,
        )
        if self.settle_seconds > 0:
            await asyncio.sleep(self.settle_seconds)

        started = time.monotonic()
        try:
            await self._create_trigger(trigger, pod_name, sts)
            self.record(EventType.SNAPSHOT_REQUESTED, name=trigger, pod=pod_name)
            snapshot = await self._wait_for_snapshot(trigger, pod_name, start_uid, started)
        except Restored as r:
            return await self._restored(r.pod)
        except BackendError as e:
            return await self._fail(str(e), trigger)

        # The restored copy also sees the snapshot Ready: check who we are.
        restored_pod = await self.is_restored_copy(start_uid, pod_name)
        if restored_pod is not None:
            return await self._restored(restored_pod)
        seconds = round(time.monotonic() - started, 3)
        self.record(EventType.SNAPSHOT_READY, name=snapshot, seconds=seconds)
        await self.annotate(state="paused", message=None, snapshot=snapshot)
        try:
            await self.call("scale_statefulset", sts_name, 0)
        except KubeError as e:
            # The snapshot exists but the pod stays: nothing is released.
            return await self._fail(f"could not scale StatefulSet {sts_name} to 0: {e}", trigger)
        gpus = fingerprint.get("gpu_count") or fingerprint.get("gpus_visible")
        self.record(EventType.WORKSPACE_STOPPED, statefulset=sts_name, pod=pod_name)
        self.record(
            EventType.ACCELERATOR_RELEASED,
            gpus=gpus,
            gpu_model=fingerprint.get("gpu_model") or fingerprint.get("accelerator"),
        )
        return {
            "backend": self.name,
            "snapshot": snapshot,
            "trigger": trigger,
            "statefulset": sts_name,
            "pod": pod_name,
            "snapshot_seconds": seconds,
        }

    async def _create_trigger(self, trigger: str, pod_name: str, sts: dict) -> None:
        body = {
            "apiVersion": "podsnapshot.gke.io/v1",
            "kind": "PodSnapshotManualTrigger",
            "metadata": {
                "name": trigger,
                "labels": {MANAGED_BY: "jupyter-pause"},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "StatefulSet",
                        "name": sts["metadata"]["name"],
                        "uid": sts["metadata"]["uid"],
                    }
                ],
            },
            "spec": {"targetPod": pod_name},
        }
        for attempt in (1, 2):
            try:
                await self.call("create_trigger", body)
                return
            except Conflict:
                if attempt == 2:
                    raise
                # A trigger left by an earlier pause: a trigger is single use.
                await self._delete_quietly("delete_trigger", trigger)
            except NotFound as e:
                raise SnapshotFailed(
                    "the podsnapshot.gke.io/v1 API is not served: enable Pod Snapshots on the "
                    f"cluster (--enable-pod-snapshots) ({e})"
                ) from None
            except (Forbidden, Invalid) as e:
                raise SnapshotFailed(f"the snapshot trigger was refused: {e}") from None

    async def _wait_for_snapshot(
        self, trigger: str, pod_name: str, start_uid: str, started: float
    ) -> str:
        """The name of the ready PodSnapshot; raises SnapshotFailed or Restored."""
        deadline = started + self.snapshot_timeout
        snapshot = None
        while True:
            try:
                obj = await self.call("get_trigger", trigger)
            except NotFound:
                obj = None
            if obj is None:
                await self._check_restored(start_uid, pod_name)
                raise SnapshotFailed(f"the snapshot trigger {trigger} disappeared")
            triggered = condition(obj, "Triggered")
            if (
                triggered
                and triggered.get("status") == "False"
                and triggered.get("reason") in ("Failed", "Error")
            ):
                await self._check_restored(start_uid, pod_name)
                raise SnapshotFailed(
                    f"the pod snapshot failed: {triggered.get('message') or triggered.get('reason')}"
                )
            snapshot = snapshot_created(obj) or snapshot
            if snapshot:
                try:
                    snap = await self.call("get_snapshot", snapshot)
                except NotFound:
                    snap = None
                if snap is not None:
                    if condition_true(snap, "Ready"):
                        return snapshot
                    checkpoint = condition(snap, "Checkpoint")
                    if checkpoint and checkpoint.get("reason") == "Failed":
                        await self._check_restored(start_uid, pod_name)
                        raise SnapshotFailed(
                            f"the pod snapshot {snapshot} failed: {checkpoint.get('message') or 'Failed'}"
                        )
            if time.monotonic() > deadline:
                await self._check_restored(start_uid, pod_name)
                where = f"PodSnapshot {snapshot}" if snapshot else f"trigger {trigger}"
                raise SnapshotFailed(
                    f"the pod snapshot was not ready after {self.snapshot_timeout:g} s ({where})"
                )
            await asyncio.sleep(self.poll_interval)

    async def _check_restored(self, start_uid: str, pod_name: str) -> None:
        pod = await self.is_restored_copy(start_uid, pod_name)
        if pod is not None:
            raise Restored(pod)

    async def _delete_quietly(self, method: str, name: str) -> None:
        try:
            await self.call(method, name)
        except NotFound:
            pass
        except KubeError as e:
            self.log.warning("jupyter-pause: could not %s %s: %s", method, name, e)

    async def _fail(self, reason: str, trigger: str) -> dict[str, Any]:
        """Clean up a pause that cannot finish; the pod keeps running."""
        self.record(EventType.SNAPSHOT_FAILED, error=reason, trigger=trigger)
        await self._cleanup_trigger(trigger)
        await self.mark_failed(reason + "; the pod keeps running")
        raise BackendError(reason + "." + LEFT_RUNNING)

    async def _cleanup_trigger(self, trigger: str) -> None:
        """Delete a trigger and its snapshots, so that no stale snapshot is restored later."""
        try:
            snaps = await self.call("list_snapshots", f"{TRIGGERED_BY_LABEL}={trigger}")
        except KubeError:
            snaps = []
        for snap in snaps:
            await self._delete_quietly("delete_snapshot", snap["metadata"]["name"])
        await self._delete_quietly("delete_trigger", trigger)

    # -- coming back ------------------------------------------------------------

    async def _restored(self, pod: dict) -> dict[str, Any]:
        """This process is the copy restored from the snapshot: do not stop anything."""
        self.client.reset()  # connections were cut by the snapshot
        info = await self.came_back(pod, restored=True)
        await self.after_came_back(info)
        return {
            "backend": self.name,
            "restored_from": "snapshot",
            "pod": pod["metadata"]["name"],
            "snapshot": info.get("snapshot"),
            "info": info,
        }

    async def after_came_back(self, info: dict[str, Any]) -> None:
        if not self.delete_snapshot_after_resume or not info.get("was_paused"):
            return
        owner = await self.get_owner()
        trigger = annotations(owner).get(A_TRIGGER)
        if trigger:
            await self._cleanup_trigger(trigger)
        if annotations(owner).get(A_SNAPSHOT):
            await self.annotate(snapshot=None, trigger=None)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(statefulset=self._statefulset, snapshot_timeout=self.snapshot_timeout)
        return out
