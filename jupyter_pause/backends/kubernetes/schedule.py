"""Scheduled resumes of paused workspaces, kept and fired from outside the pod.

A paused workspace has no pod, so nothing inside it can wake it up.  The
schedule is an annotation on the state object (the Workspace, or the
ConfigMap ``jupyter-pause-<statefulset>``): ``jupyter-pause.io/resume-at =
{at, kind, by, set_at}``.  It is written by the pod itself when a pause
carries a schedule (``%pause --resume-at``, the Pause dialog), or from
outside by ``jupyter pause schedule WORKSPACE AT``.

``jupyter pause scheduler`` (a CronJob, or a loop) calls :func:`fire_due`:
each workspace whose time has come is resumed through the same single-flight
protocol as ``jupyter pause resume`` (:func:`.resume.start_resume`), so a
resume already under way is never doubled.  When the pod starts, the server
finds the same schedule in its own session file and restores the notebooks
from their checkpoints (a cold start), or reports the live process back
(a snapshot restore).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from . import status
from .client import KubeClient, KubeError
from .common import A_RESUME_AT, json_annotation, now_iso
from .resume import start_resume


def _state(client: KubeClient, name: str, kind: str) -> tuple[str, dict, dict]:
    found, owner = status.find_owner(client, name, kind)
    return found, owner, status.state_of(client, found, name, owner)


def set_schedule(
    client: KubeClient, name: str, schedule: dict[str, Any], kind: str = "auto"
) -> str:
    """Record ``schedule`` on a paused workspace; returns its kind.  Raises
    :class:`ValueError` when the workspace is not paused."""
    found, owner, _state_obj = _state(client, name, kind)
    if not status.pause_intent(found, owner):
        raise ValueError(f"{name} is not paused: nothing to schedule")
    status.patch_state(
        client, found, name, {"metadata": {"annotations": {A_RESUME_AT: json.dumps(schedule)}}}
    )
    return found


def cancel_schedule(client: KubeClient, name: str, kind: str = "auto") -> bool:
    """Remove the workspace's schedule; True if there was one."""
    found, _owner, state = _state(client, name, kind)
    if json_annotation(state, A_RESUME_AT) is None:
        return False
    status.patch_state(client, found, name, {"metadata": {"annotations": {A_RESUME_AT: None}}})
    return True


def fire_due(
    client: KubeClient, workspaces: list[tuple[str, str]], now: float | None = None
) -> list[dict[str, Any]]:
    """Resume each of ``workspaces`` (``(kind, name)``) whose schedule is due.

    Returns one result per schedule found: ``{workspace, at, kind, outcome}``
    with ``outcome`` ``waiting`` (not due yet), ``started``, ``in-progress``
    (a resume was under way: not doubled), ``not-paused`` (resumed by hand
    already) or ``failed: …``.  A schedule that was acted on is removed.
    """
    now = time.time() if now is None else now
    results = []
    for kind, name in workspaces:
        found, _owner, state = _state(client, name, kind)
        schedule = json_annotation(state, A_RESUME_AT)
        if not isinstance(schedule, dict) or not isinstance(schedule.get("at"), (int, float)):
            continue
        result = {"workspace": name, "at": schedule["at"], "kind": schedule.get("kind")}
        results.append(result)
        if schedule["at"] > now:
            result["outcome"] = "waiting"
            continue
        op = {
            "id": uuid.uuid4().hex[:12],
            "started": now_iso(now),
            "by": "schedule",
            "scheduled": schedule.get("kind") or "scheduled",
        }
        try:
            result["outcome"] = start_resume(client, name, op, kind=found.lower()).outcome
        except KubeError as e:
            result["outcome"] = f"failed: {e}"
            continue  # kept: the next round tries again
        cancel_schedule(client, name, found.lower())
    return results
