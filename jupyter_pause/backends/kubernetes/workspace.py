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

``release`` then waits for one of three outcomes: the pod is being deleted
(the pause went through: the process is about to end); the pod has a new UID
(this process is the copy restored from the add-on's snapshot: it returns
``{"restored_from": "snapshot"}``); or ``stop_timeout`` passes with the pod
still running (the pause failed; :class:`BackendError`, nothing is lost).

Resume: ``spec.paused=false`` (``jupyter pause resume`` or the dashboard).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from traitlets import Float, Unicode

from ...ledger import EventType
from ..base import BackendError
from .client import Conflict, Invalid, KubeError, NotFound
from .common import (
    WORKSPACE_LABEL,
    KubeBackend,
    annotations,
    checkpoint_summary,
    now_iso,
)

ADDON_ENABLED = "podsnapshot.gke.kubeflow.org/enabled"
ADDON_STATE = "podsnapshot.gke.kubeflow.org/checkpoint-state"
ADDON_LAST = "podsnapshot.gke.kubeflow.org/last-checkpoint-name"


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
            pod = await self.call("get_pod", self.own_pod_name())
            name = ((pod.get("metadata") or {}).get("labels") or {}).get(WORKSPACE_LABEL)
            if not name:
                raise BackendError(
                    f"{self.name}: pod {pod['metadata']['name']} has no {WORKSPACE_LABEL} label; "
                    "set KubeflowWorkspaceBackend.workspace_name"
                )
            self._workspace = name
        return self._workspace

    async def get_owner(self) -> dict:
        return await self.call("get_workspace", await self.workspace())

    async def patch_owner(self, patch) -> dict:
        return await self.call("patch_workspace", await self.workspace(), patch)

    async def release(self, sessions, shutdown_kernel) -> dict[str, Any]:
        pod_name = self.own_pod_name()
        pod = await self.call("get_pod", pod_name)
        start_uid = pod["metadata"]["uid"]
        ws_name = await self.workspace()
        ws = await self.call("get_workspace", ws_name)
        snapshots = annotations(ws).get(ADDON_ENABLED) == "true"
        fingerprint = await self.fingerprint(pod)
        options = ((ws.get("spec") or {}).get("podTemplate") or {}).get("options") or {}
        if options.get("imageConfig"):
            fingerprint["image_config"] = options["imageConfig"]
        if options.get("podConfig"):
            fingerprint["pod_config"] = options["podConfig"]
        await self.annotate(
            state="snapshotting" if snapshots else "paused",
            message="taking the pod snapshot" if snapshots else None,
            backend=self.name,
            paused_at=now_iso(),
            fingerprint=fingerprint,
            checkpoints=checkpoint_summary(sessions),
            restored_from=None,
            resume_operation=None,
        )
        if self.settle_seconds > 0:
            await asyncio.sleep(self.settle_seconds)
        try:
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
        started = time.monotonic()
        deadline = started + self.stop_timeout
        while True:
            try:
                current = await self.call("get_pod", pod_name)
            except NotFound:
                current = None
            if current is not None and current["metadata"].get("uid") != start_uid:
                return await self._restored(current)
            if current is None or current["metadata"].get("deletionTimestamp"):
                return await self._stopping(ws_name, pod_name, snapshots, fingerprint, started)
            if time.monotonic() > deadline:
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
            await asyncio.sleep(self.poll_interval)

    async def _stopping(self, ws_name, pod_name, snapshots, fingerprint, started) -> dict[str, Any]:
        facts: dict[str, Any] = {"backend": self.name, "workspace": ws_name, "pod": pod_name}
        try:
            ws = await self.get_owner()
        except KubeError:
            ws = {}
        ann = annotations(ws)
        snapshot = ann.get(ADDON_LAST) if snapshots else None
        if snapshot:
            self.record(
                EventType.SNAPSHOT_READY,
                name=snapshot,
                seconds=round(time.monotonic() - started, 3),
            )
            facts["snapshot"] = snapshot
        with contextlib.suppress(KubeError):
            await self.annotate(state="paused", message=None, snapshot=snapshot)
        self.record(EventType.WORKSPACE_STOPPED, workspace=ws_name, pod=pod_name)
        self.record(
            EventType.ACCELERATOR_RELEASED,
            gpus=fingerprint.get("gpu_count") or fingerprint.get("gpus_visible"),
            gpu_model=fingerprint.get("gpu_model") or fingerprint.get("accelerator"),
        )
        return facts

    async def _restored(self, pod: dict) -> dict[str, Any]:
        self.client.reset()
        info = await self.came_back(pod, restored=True)
        return {
            "backend": self.name,
            "restored_from": "snapshot",
            "pod": pod["metadata"]["name"],
            "snapshot": info.get("snapshot"),
            "info": info,
        }

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["workspace"] = self._workspace
        return out
