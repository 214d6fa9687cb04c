"""``kubeflow-workspace``: the server runs in a Kubeflow Workspace (``kubeflow.org/v1beta1``).

Pause (:meth:`KubeflowWorkspaceBackend.release`), after the manager has
written every running kernel's application checkpoint to the home volume (the
fallback path): record the fingerprint and the checkpoints on the Workspace,
then set ``spec.paused=true`` with a JSON patch that tests the current value
(like the Workspaces backend's own pause action).  The platform does the rest:

* GKE Workspaces with its snapshot add-on: the add-on's webhook turns the
  pause into a snapshot (``checkpoint-state=Checkpointing``), takes it, and only
  then lets ``paused=true`` through; the controller scales the workspace down.
* Kubeflow without the add-on: the controller scales the workspace down at
  once; the checkpoints are the way back.

Whether the add-on snapshots this pod is read from the pod itself, which the
add-on's webhook mutated (its readiness gate ``podsnapshot.gke.kubeflow.org/active``
or its ``jupyter-ipc-config`` volume), not from an annotation: GKE's own
kind enables the add-on on the WorkspaceKind, and the add-on also honours an
explicit ``"false"`` on the Workspace and never snapshots TPU pods
(gke-labs/workspaces ``cache.go snapshotEnabled``, ``webhook.go``).

``release`` then waits for one of these outcomes: the pod is being deleted
(the pause went through: the process is about to end); the pod has a new UID
(this process is the copy restored from the add-on's snapshot: it returns
``{"restored_from": "snapshot"}``); the add-on's trigger reports
``Triggered=False`` (the pause fails at once, and the add-on's
``checkpoint-state`` is cleared so that its readiness gate lets users in
again); or ``stop_timeout`` passes with the pod still running (the pause
failed; :class:`BackendError`, nothing is lost).

With the add-on, the policy is ``postCheckpoint: stop``: the process is frozen
by the checkpoint and never runs again, so it cannot record the end of its
own pause.  The next server (restored or cold) does, in
:meth:`KubeflowWorkspaceBackend.record_unseen_pause`, from the add-on's
annotations (``last-checkpoint-name``) and the Workspace's ``status.pauseTime``.

API errors after ``spec.paused=true`` was applied are retried until
``stop_timeout``: the platform may be stopping the pod, so a failure to *see*
that must not be reported as a failed pause.

Resume: ``spec.paused=false`` (``jupyter pause resume`` or the dashboard).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from traitlets import Float, Unicode

from ...ledger import EventType
from ..base import BackendError, ReleaseFacts
from .client import Conflict, Invalid, KubeError, NotFound, retrying_until
from .common import (
    A_FINGERPRINT,
    A_SNAPSHOT,
    ADDON_ENABLED,
    ADDON_GATE,
    ADDON_IPC_VOLUME,
    ADDON_LAST,
    ADDON_STARTED,
    ADDON_STATE,
    WORKSPACE_LABEL,
    KubeBackend,
    addon_trigger_name,
    annotations,
    released_node,
)
from .objects import Pod, StateObject

#: the pod annotation the add-on sets on a pod it restores from a snapshot
RESTORE_FROM = "podsnapshot.gke.io/ps-name"


def addon_snapshots(pod: dict, workspace: dict) -> bool:
    """Whether the GKE Workspaces add-on will snapshot this pod when it is paused.

    The add-on's webhook mutates the pods it snapshots; those marks are the
    answer.  An explicit ``"false"`` on the Workspace switches the add-on off
    for it, and TPU pods are never snapshotted.
    """
    if annotations(workspace).get(ADDON_ENABLED, "").strip().lower() == "false":
        return False
    spec = pod.get("spec") or {}
    for c in spec.get("containers") or []:
        resources = c.get("resources") or {}
        if any("google.com/tpu" in (resources.get(k) or {}) for k in ("limits", "requests")):
            return False
    gates = {g.get("conditionType") for g in spec.get("readinessGates") or []}
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    return ADDON_GATE in gates or ADDON_IPC_VOLUME in volumes


def pause_time(workspace: dict) -> float | None:
    """``status.pauseTime`` of a Workspace (UNIX seconds; milliseconds tolerated)."""
    value = (workspace.get("status") or {}).get("pauseTime")
    if not isinstance(value, (int, float)) or value <= 0:
        return None
    return value / 1000 if value > 1e11 else float(value)


class KubeflowWorkspaceBackend(KubeBackend):
    """Pause by setting the Workspace's ``spec.paused``; the platform snapshots and scales down."""

    name = "kubeflow-workspace"

    workspace_name = Unicode(
        "", help=f"the Workspace; empty: the pod's {WORKSPACE_LABEL} label"
    ).tag(config=True)
    stop_timeout = Float(
        1800.0,
        help="seconds to wait, after spec.paused=true, for the platform to snapshot and stop "
        "the pod; then the pause is reported as failed and the pod keeps running",
    ).tag(config=True)

    def __init__(self, ledger=None, client=None, **kwargs):
        super().__init__(ledger=ledger, client=client, **kwargs)
        self._workspace: str | None = self.workspace_name or None

    async def workspace(self) -> str:
        if self._workspace is None:
            pod = await self.kube.get_pod(self.own_pod_name())
            name = pod.labels.get(WORKSPACE_LABEL)
            if not name:
                raise BackendError(
                    f"{self.name}: pod {pod.name} has no {WORKSPACE_LABEL} label; "
                    "set KubeflowWorkspaceBackend.workspace_name"
                )
            self._workspace = name
        return self._workspace

    async def get_owner(self) -> StateObject:
        return await self.kube.get_workspace(await self.workspace())

    async def patch_owner(self, patch: dict | list) -> None:
        await self.kube.patch_workspace(await self.workspace(), patch)

    async def release(self, sessions, shutdown_kernel) -> ReleaseFacts:
        pod_name = self.own_pod_name()
        started = time.monotonic()
        deadline = started + self.stop_timeout
        with retrying_until(deadline):
            pod = await self.kube.get_pod(pod_name)
            start_uid = pod.uid
            ws_name = await self.workspace()
            ws = await self.kube.get_workspace(ws_name)
        snapshots = addon_snapshots(pod.obj, ws.obj)
        fingerprint = await self.fingerprint(pod)
        options = ((ws.obj.get("spec") or {}).get("podTemplate") or {}).get("options") or {}
        if options.get("imageConfig"):
            fingerprint["image_config"] = options["imageConfig"]
        if options.get("podConfig"):
            fingerprint["pod_config"] = options["podConfig"]
        left = released_node(pod, fingerprint, self.clock.time())
        with retrying_until(deadline):
            await self.annotate_release(
                sessions,
                fingerprint,
                node=left.to_json() if left else None,
                node_follow=None,
                state="snapshotting" if snapshots else "paused",
                message="taking the pod snapshot" if snapshots else None,
            )
        if self.settle_seconds > 0:
            await asyncio.sleep(self.settle_seconds)
        try:
            with retrying_until(deadline):
                await self.patch_owner(
                    [
                        {"op": "test", "path": "/spec/paused", "value": False},
                        {"op": "replace", "path": "/spec/paused", "value": True},
                    ]
                )
        except (Conflict, Invalid):
            # The test failed: the workspace is already being paused (culler, dashboard).
            self.log.info("jupyter-pause: workspace %s is already paused or pausing", ws_name)
        except KubeError as e:
            await self.mark_failed(f"could not pause workspace {ws_name}: {e}")
            raise BackendError(
                f"could not pause workspace {ws_name}: {e}. The pod keeps running; every "
                "notebook is checkpointed on the home volume."
            ) from None
        if snapshots:
            self.record(EventType.SNAPSHOT_REQUESTED, name=ws_name, pod=pod_name)
        # From here on spec.paused=true may be applied: the platform may be
        # stopping the pod.  Not being able to see it is not a failed pause.
        unseen: KubeError | None = None
        while True:
            try:
                with retrying_until(deadline):
                    current = await self._get_pod_or_none(pod_name)
                    if current is not None and current.uid != start_uid:
                        return await self._restored(current)
                    if current is None or current.deleting:
                        facts = await self._stopping(
                            ws_name, pod_name, snapshots, fingerprint, started
                        )
                        facts.details["node"] = left.node if left else None
                        return facts
                    if snapshots:
                        await self._check_addon_trigger(ws_name)
                unseen = None
            except KubeError as e:
                unseen = e
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(self.poll_interval)
        if unseen is not None:
            reason = (
                f"could not tell whether workspace {ws_name} stopped within "
                f"{self.stop_timeout:g} s after spec.paused=true ({unseen})"
            )
        else:
            reason = (
                f"workspace {ws_name} did not stop within {self.stop_timeout:g} s after "
                "spec.paused=true"
            )
        if snapshots:
            self.record(EventType.SNAPSHOT_FAILED, error=reason)
        await self.mark_failed(reason + "; the pod keeps running")
        raise BackendError(
            reason + ". The pod keeps running; every notebook is checkpointed on the "
            "home volume. If the platform finishes the pause later, resume restores "
            "from the snapshot or the checkpoints."
        )

    async def _get_pod_or_none(self, name: str) -> Pod | None:
        try:
            return await self.kube.get_pod(name)
        except NotFound:
            return None

    async def _check_addon_trigger(self, ws_name: str) -> None:
        """Fail fast when the add-on's trigger failed: the add-on never recovers on its own.

        Its reconciler keeps the pod's readiness gate False (nobody can reach
        JupyterLab) until ``checkpoint-state`` is removed; so remove it.
        """
        name = addon_trigger_name(ws_name)
        try:
            trigger = await self.kube.get_trigger(name)
        except NotFound:
            return  # not created yet
        triggered = trigger.triggered
        if not triggered or triggered.status != "False":
            return
        why = triggered.message or triggered.reason or "Triggered=False"
        reason = f"the snapshot add-on's trigger {name} failed: {why}"
        self.record(EventType.SNAPSHOT_FAILED, error=reason, trigger=name)
        try:
            await self.patch_owner(
                {"metadata": {"annotations": {ADDON_STATE: None, ADDON_STARTED: None}}}
            )
            recovery = (
                f"the add-on's {ADDON_STATE} annotation was removed, so the pod is reachable again"
            )
        except KubeError as e:
            recovery = (
                f"the pod stays unreachable until the add-on's checkpoint state is cleared: "
                f"kubectl annotate workspace {ws_name} {ADDON_STATE}- ({e})"
            )
        await self.mark_failed(reason + "; the pod keeps running")
        raise BackendError(
            f"{reason}. The pod keeps running and nothing was lost: every notebook is "
            f"checkpointed on the home volume; {recovery}. Delete the trigger "
            f"({name}) before the next pause; see docs/kubernetes.md (recovery)."
        )

    async def _stopping(self, ws_name, pod_name, snapshots, fingerprint, started) -> ReleaseFacts:
        facts: dict[str, Any] = {"backend": self.name, "workspace": ws_name, "pod": pod_name}
        try:
            ann = (await self.get_owner()).annotations
        except KubeError:
            ann = {}
        snapshot = ann.get(ADDON_LAST) if snapshots else None
        if snapshot:
            self.record(
                EventType.SNAPSHOT_READY,
                name=snapshot,
                seconds=round(time.monotonic() - started, 3),
            )
            facts["snapshot"] = snapshot
        with contextlib.suppress(KubeError):
            await self.annotate(
                state="paused", message=None, snapshot=snapshot, pause_recorded="true"
            )
        self.record(EventType.WORKSPACE_STOPPED, workspace=ws_name, pod=pod_name)
        self.record(
            EventType.ACCELERATOR_RELEASED,
            gpus=fingerprint.get("gpu_count") or fingerprint.get("gpus_visible"),
            gpu_model=fingerprint.get("gpu_model") or fingerprint.get("accelerator"),
        )
        return ReleaseFacts(details=facts)

    async def record_unseen_pause(self, owner: StateObject, pod: Pod, info: dict[str, Any]) -> None:
        """The add-on finished the pause while this process was frozen (postCheckpoint stop).

        The snapshot's name is the add-on's ``last-checkpoint-name`` (or the
        restored pod's ``podsnapshot.gke.io/ps-name``); the pod stopped at the
        Workspace's ``status.pauseTime``.
        """
        ann = owner.annotations
        snapshot = ann.get(ADDON_LAST) or pod.annotations.get(RESTORE_FROM) or ann.get(A_SNAPSHOT)
        stopped = pause_time(owner.obj)
        fingerprint = owner.json(A_FINGERPRINT) or {}
        ws_name = owner.name
        if snapshot:
            self.record(EventType.SNAPSHOT_READY, time_=stopped, name=snapshot, seconds=None)
            info["snapshot"] = snapshot
            await self.annotate(snapshot=snapshot)
        self.record(EventType.WORKSPACE_STOPPED, time_=stopped, workspace=ws_name, recorded="later")
        self.record(
            EventType.ACCELERATOR_RELEASED,
            time_=stopped,
            gpus=fingerprint.get("gpu_count") or fingerprint.get("gpus_visible"),
            gpu_model=fingerprint.get("gpu_model") or fingerprint.get("accelerator"),
        )
        info["pause_recorded_later"] = True

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["workspace"] = self._workspace
        return out
