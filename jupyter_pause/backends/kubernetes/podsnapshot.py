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
it only gets, lists and deletes them.  When the trigger fails, the snapshot
is not ready within ``snapshot_timeout``, or any later step fails, the pod is
left running, the trigger and every snapshot it made are deleted (retried
until they are gone), and :class:`BackendError` says so.

No stale snapshot may survive: GKE restores *every* new pod from the most
recent matching snapshot, so one left behind by a pause that did not finish
would roll the session back at each later pod start (node upgrade, Spot
preemption, eviction).  Hence every exit from ``release`` other than a
finished pause, and every come-back (restored or cold, whatever the state
annotation says), deletes all snapshots labelled with this pod's trigger.

A frozen process cannot time itself out: while GKE checkpoints, the pod is
frozen, deadlines included.  The escape is outside the pod: ``jupyter pause
status`` shows ``snapshotting`` since the trigger's creation, and ``jupyter
pause abort`` deletes the trigger and snapshots (and, when the pod stays
frozen, the pod).

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
import contextlib
import time
from typing import Any

from traitlets import Float

from ...ledger import EventType
from ..base import BackendError, ReleaseFacts
from .client import Conflict, Forbidden, Invalid, KubeError, NotFound, retrying_until
from .common import (
    A_SNAPSHOT,
    A_TRIGGER,
    MANAGED_BY,
    KubeBackend,
    Restored,
    released_node,
    state_configmap,
    trigger_name_for,
)
from .gc import delete_trigger_snapshots
from .objects import Pod, StatefulSet, StateObject

LEFT_RUNNING = (
    " The pod keeps running and nothing was lost: every notebook is also checkpointed "
    "on the home volume."
)


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
    cleanup_timeout = Float(
        300.0,
        help="seconds to keep retrying the deletion of the trigger and its snapshots after a "
        "pause that did not finish (GKE would restore a leftover at every later pod start)",
    ).tag(config=True)

    def __init__(self, ledger=None, client=None, **kwargs):
        super().__init__(ledger=ledger, client=client, **kwargs)
        self._statefulset: str | None = None

    # -- owner --------------------------------------------------------------

    async def statefulset(self) -> str:
        if self._statefulset is None:
            pod = await self.kube.get_pod(self.own_pod_name())
            if not pod.owner_statefulset:
                raise BackendError(
                    f"{self.name}: pod {pod.name} is not owned by a StatefulSet; "
                    "pausing needs an owner that can be scaled to 0 and back"
                )
            self._statefulset = pod.owner_statefulset
        return self._statefulset

    async def get_owner(self) -> StateObject:
        """The state ConfigMap (see :mod:`.common`): the StatefulSet itself is never patched."""
        name = state_configmap(await self.statefulset())
        try:
            return await self.kube.get_configmap(name)
        except NotFound:
            raise BackendError(self._no_state(name)) from None

    async def patch_owner(self, patch: dict) -> None:
        name = state_configmap(await self.statefulset())
        try:
            await self.kube.patch_configmap(name, patch)
        except NotFound:
            raise BackendError(self._no_state(name)) from None

    def _no_state(self, name: str) -> str:
        return (
            f"{self.name}: the ConfigMap {name} that holds the pause state does not exist; "
            "create it with the deploy kit (deploy/gke-pod-snapshot). Nothing was paused."
        )

    # -- pause --------------------------------------------------------------

    async def release(self, sessions, shutdown_kernel) -> ReleaseFacts:
        pod_name = self.own_pod_name()
        deadline = time.monotonic() + self.snapshot_timeout
        with retrying_until(deadline):
            pod = await self.kube.get_pod(pod_name)
            start_uid = pod.uid
            sts_name = pod.owner_statefulset
            if not sts_name:
                raise BackendError(
                    f"{self.name}: pod {pod_name} is not owned by a StatefulSet; cannot release it"
                )
            self._statefulset = sts_name
            sts = await self.kube.get_statefulset(sts_name)
        replicas = sts.replicas or 1
        trigger = trigger_name_for(sts_name)
        fingerprint = await self.fingerprint(pod)
        with retrying_until(deadline):
            await self.annotate_release(
                sessions,
                fingerprint,
                state="snapshotting",
                message="taking the pod snapshot",
                replicas=str(replicas),
                trigger=trigger,
            )
        if self.settle_seconds > 0:
            await asyncio.sleep(self.settle_seconds)

        started = time.monotonic()
        deadline = started + self.snapshot_timeout
        try:
            with retrying_until(deadline):
                await self._create_trigger(trigger, pod_name, sts)
                self.record(EventType.SNAPSHOT_REQUESTED, name=trigger, pod=pod_name)
                snapshot = await self._wait_for_snapshot(trigger, pod_name, start_uid, deadline)
                # The restored copy also sees the snapshot Ready: check who we are.
                await self._check_restored(start_uid, pod_name)
                seconds = round(time.monotonic() - started, 3)
                left = released_node(pod, fingerprint, self.clock.time())
                await self.annotate(
                    state="paused",
                    message=None,
                    snapshot=snapshot,
                    pause_recorded="true",
                    node=left.to_json() if left else None,
                    node_follow=None,
                )
                try:
                    await self.kube.scale_statefulset(sts_name, 0)
                except KubeError as e:
                    # The snapshot exists but the pod stays: nothing is released.
                    raise BackendError(
                        f"could not scale StatefulSet {sts_name} to 0: {e}"
                    ) from None
        except Restored as r:
            return await self._restored(r.pod)
        except BackendError as e:
            return await self._fail(str(e), trigger)
        released = self.clock.time()  # scaled to 0: the pod lets go of its node
        self.record(EventType.SNAPSHOT_READY, time_=released, name=snapshot, seconds=seconds)
        gpus = fingerprint.get("gpu_count") or fingerprint.get("gpus_visible")
        self.record(EventType.WORKSPACE_STOPPED, time_=released, statefulset=sts_name, pod=pod_name)
        self.record(
            EventType.ACCELERATOR_RELEASED,
            time_=released,
            gpus=gpus,
            gpu_model=fingerprint.get("gpu_model") or fingerprint.get("accelerator"),
        )
        return ReleaseFacts(
            released_at=released,
            details={
                "backend": self.name,
                "snapshot": snapshot,
                "trigger": trigger,
                "statefulset": sts_name,
                "pod": pod_name,
                "snapshot_seconds": seconds,
                "node": left.node if left else None,
            },
        )

    async def _create_trigger(self, trigger: str, pod_name: str, sts: StatefulSet) -> None:
        for attempt in (1, 2):
            try:
                await self.kube.create_trigger(
                    trigger, target_pod=pod_name, owner=sts, labels={MANAGED_BY: "jupyter-pause"}
                )
                return
            except Conflict:
                if attempt == 2:
                    raise
                # A trigger left by an earlier pause: a trigger is single use.
                with contextlib.suppress(NotFound):
                    await self.kube.delete_trigger(trigger)
            except NotFound as e:
                raise SnapshotFailed(
                    "the podsnapshot.gke.io/v1 API is not served: enable Pod Snapshots on the "
                    f"cluster (--enable-pod-snapshots) ({e})"
                ) from None
            except (Forbidden, Invalid) as e:
                raise SnapshotFailed(f"the snapshot trigger was refused: {e}") from None

    async def _wait_for_snapshot(
        self, trigger: str, pod_name: str, start_uid: str, deadline: float
    ) -> str:
        """The name of the ready PodSnapshot; raises SnapshotFailed or Restored."""
        snapshot = None
        while True:
            try:
                obj = await self.kube.get_trigger(trigger)
            except NotFound:
                obj = None
            if obj is None:
                await self._check_restored(start_uid, pod_name)
                raise SnapshotFailed(f"the snapshot trigger {trigger} disappeared")
            triggered = obj.triggered
            if (
                triggered
                and triggered.status == "False"
                and triggered.reason in ("Failed", "Error")
            ):
                await self._check_restored(start_uid, pod_name)
                raise SnapshotFailed(
                    f"the pod snapshot failed: {triggered.message or triggered.reason}"
                )
            snapshot = obj.snapshot or snapshot
            if snapshot:
                try:
                    snap = await self.kube.get_snapshot(snapshot)
                except NotFound:
                    snap = None
                if snap is not None:
                    if snap.ready:
                        return snapshot
                    checkpoint = snap.checkpoint
                    if checkpoint and checkpoint.reason == "Failed":
                        await self._check_restored(start_uid, pod_name)
                        raise SnapshotFailed(
                            f"the pod snapshot {snapshot} failed: {checkpoint.message or 'Failed'}"
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

    async def _fail(self, reason: str, trigger: str) -> ReleaseFacts:
        """Clean up a pause that cannot finish; the pod keeps running."""
        self.record(EventType.SNAPSHOT_FAILED, error=reason, trigger=trigger)
        left = await self.delete_snapshots(trigger, self.cleanup_timeout)
        if left:
            reason += (
                f"; the snapshot(s) {', '.join(left)} could not be deleted and GKE would restore "
                "them at the next pod start: run `jupyter pause abort "
                f"{self._statefulset}` or delete them"
            )
        await self.mark_failed(reason + "; the pod keeps running")
        raise BackendError(reason + "." + LEFT_RUNNING)

    async def delete_snapshots(self, trigger: str, timeout: float) -> list[str]:
        """Delete the trigger and its snapshots (:func:`.gc.delete_trigger_snapshots`).

        Returns what is still there after ``timeout`` (empty: all gone).
        """
        with retrying_until(time.monotonic() + timeout):
            try:
                _deleted, left = await asyncio.to_thread(
                    delete_trigger_snapshots, self.client, trigger, timeout, self.poll_interval
                )
            except KubeError as e:
                self.log.warning("jupyter-pause: cleaning up %s: %s", trigger, e)
                return [f"(the snapshots of trigger {trigger}: {e})"]
        return left

    # -- coming back ------------------------------------------------------------

    async def after_came_back(self, info: dict[str, Any], pod: Pod, *, restored: bool) -> None:
        """Delete every snapshot of this pod's trigger, whatever the state says.

        A snapshot is single use; left behind, GKE would restore it at the
        next pod start and roll the session back.  A restored pod first has
        to be Ready with ``PodRestored=True``.
        """
        sts = await self.statefulset()
        trigger = trigger_name_for(sts)
        if restored:
            await self.wait_until_settled(pod, restored=True)
        left = await self.delete_snapshots(trigger, self.settle_timeout)
        info["snapshots_left"] = left
        if left:
            self.log.error(
                "jupyter-pause: could not delete the snapshot(s) %s of %s; GKE will restore them "
                "at the next pod start: delete them (jupyter pause abort %s)",
                ", ".join(left),
                trigger,
                sts,
            )
            return
        with retrying_until(time.monotonic() + self.settle_timeout):
            owner = await self.get_owner()
            if owner.annotations.get(A_SNAPSHOT) or owner.annotations.get(A_TRIGGER):
                await self.annotate(snapshot=None, trigger=None)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(statefulset=self._statefulset, snapshot_timeout=self.snapshot_timeout)
        return out
