"""Abort a pause from outside the pod: the way out of a hung checkpoint.

While GKE checkpoints a pod, every process in it is frozen, jupyter-pause's
own deadlines included; a checkpoint that hangs (seen on large GPU pods)
leaves the notebook unreachable with nothing inside the pod able to notice.
:func:`abort` is run by a person (``jupyter pause abort WORKSPACE``):

1. on a Workspace, remove the GKE Workspaces add-on's ``checkpoint-state``
   annotation: the add-on stops checkpointing and its readiness gate opens
   again (``reconcileActive``);
2. delete the trigger and every PodSnapshot it made, until they are gone
   (a partial or late snapshot must never be restored);
3. wait up to ``frozen_limit`` seconds for the pod to be Ready again (its
   process thawed: it sees the trigger gone, fails its pause and keeps
   running); if it stays unready, delete the pod.  Its StatefulSet creates a
   new one, nothing is left to restore it from, and the server comes back
   cold: the notebooks are restored from their application checkpoints.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from . import status
from .client import KubeClient, NotFound
from .common import A_MESSAGE, A_STATE, ADDON_STARTED, ADDON_STATE, condition_true
from .gc import delete_trigger_snapshots


@dataclass
class AbortReport:
    workspace: str
    kind: str
    trigger: str
    deleted_snapshots: list[str] = field(default_factory=list)
    snapshots_left: list[str] = field(default_factory=list)
    cleared_addon_state: bool = False
    pod: str | None = None
    pod_deleted: bool = False
    outcome: str = ""  # "thawed" | "pod-deleted" | "no-pod"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def abort(
    client: KubeClient,
    name: str,
    *,
    kind: str = "auto",
    by: str = "",
    frozen_limit: float = 120.0,
    delete_timeout: float = 300.0,
    poll_interval: float = 2.0,
) -> AbortReport:
    """Stop the snapshot of ``name`` and, if its pod stays frozen, restart the pod."""
    found, owner = status.find_owner(client, name, kind)
    state = status.state_of(client, found, name, owner)
    report = AbortReport(name, found, status.trigger_of(found, name, state))
    who = f" by {by}" if by else ""

    def record(outcome_state: str, message: str) -> None:
        """The owner's state annotation, and why."""
        annotations = {A_STATE: outcome_state, A_MESSAGE: message}
        status.patch_state(client, found, name, {"metadata": {"annotations": annotations}})

    if found == "Workspace":
        status.patch_state(
            client,
            found,
            name,
            {"metadata": {"annotations": {ADDON_STATE: None, ADDON_STARTED: None}}},
        )
        report.cleared_addon_state = True
    report.deleted_snapshots, report.snapshots_left = delete_trigger_snapshots(
        client, report.trigger, delete_timeout, poll_interval
    )
    pod = status.find_pod(client, found, name, owner)
    if pod is None:
        report.outcome = "no-pod"
        return report
    report.pod = pod["metadata"]["name"]
    deadline = time.monotonic() + frozen_limit
    while not condition_true(pod, "Ready"):
        if time.monotonic() > deadline:
            # Frozen past the limit: the pod goes; its StatefulSet makes a new one,
            # which starts cold and restores the notebooks from their checkpoints.
            record(
                "paused",
                f"pause aborted{who}: the pod stayed frozen and was restarted; "
                "notebooks come back from their checkpoints",
            )
            with contextlib.suppress(NotFound):
                client.delete_pod(report.pod)
            report.pod_deleted = True
            report.outcome = "pod-deleted"
            return report
        time.sleep(poll_interval)
        try:
            pod = client.get_pod(report.pod)
        except NotFound:
            report.outcome = "no-pod"
            return report
    record("failed", f"pause aborted{who}; the pod keeps running")
    report.outcome = "thawed"
    return report


__all__ = ["AbortReport", "abort"]
