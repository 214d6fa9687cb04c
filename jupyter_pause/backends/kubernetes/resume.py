"""Resuming a workspace from outside the pod, single flight.

Both the CLI (``jupyter pause resume``) and the backends (which clear the
lock when the server comes back, :meth:`.common.KubeBackend.came_back`) speak
this protocol, so it lives here, next to the annotations it reads and writes:

1. the lock: ``jupyter-pause.io/resume-operation = {id, started, by}`` on the
   state object (the Workspace, or the ConfigMap ``jupyter-pause-<statefulset>``),
   set with a compare-and-swap on ``metadata.resourceVersion`` -- a 409 means
   somebody changed it first, so it is read again; a lock already there means another resume is
   in progress (unless ``force``);
2. the resume itself: ``spec.paused=false`` with a JSON patch that tests the
   current value (a Workspace), or the StatefulSet scaled back to the
   replicas recorded at pause;
3. if 2 fails, the lock is released and the state put back to ``paused``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from . import compat, status
from .client import Conflict, KubeClient, KubeError
from .common import (
    A_FINGERPRINT,
    A_MESSAGE,
    A_REPLICAS,
    A_RESUME_AT,
    A_RESUME_OP,
    A_STATE,
    annotations,
    json_annotation,
)

#: compare-and-swap attempts before giving up ("keeps changing")
CAS_ATTEMPTS = 10


@dataclass
class ResumeStart:
    """What happened when a resume was asked for."""

    outcome: str  # "started" | "in-progress" | "not-paused"
    kind: str
    operation: dict[str, Any]
    compatibility: dict[str, Any] = field(default_factory=dict)


def _target(kind: str, owner: dict) -> dict[str, Any]:
    """What the resumed pod will have, read from its template (for the compatibility check)."""
    if kind == "StatefulSet":
        return compat.from_pod_spec(
            (((owner.get("spec") or {}).get("template") or {}).get("spec")) or {}
        )
    options = (((owner.get("spec") or {}).get("podTemplate") or {}).get("options")) or {}
    out = {}
    if options.get("imageConfig"):
        out["image_config"] = options["imageConfig"]
    if options.get("podConfig"):
        out["pod_config"] = options["podConfig"]
    return out


def compatibility(kind: str, owner: dict, state: dict, targets: dict[str, str]) -> dict[str, Any]:
    recorded = json_annotation(state, A_FINGERPRINT) or {}
    target = {**_target(kind, owner), **targets}
    diffs = compat.compare(recorded, target)
    return {
        "recorded": recorded,
        "target": target,
        "differences": [d.to_json() for d in diffs],
        "unchecked": compat.unknown(recorded, target),
    }


def start_resume(
    client: KubeClient,
    name: str,
    op: dict[str, Any],
    *,
    kind: str = "auto",
    targets: dict[str, str] | None = None,
    force: bool = False,
) -> ResumeStart:
    """Take the lock and ask the platform to bring the workspace back.

    Raises :class:`KubeError` when the platform refuses (the lock is released).
    """
    for _attempt in range(CAS_ATTEMPTS):
        found, owner = status.find_owner(client, name, kind)
        state = status.state_of(client, found, name, owner)
        current = json_annotation(state, A_RESUME_OP)
        if current and not force:
            return ResumeStart("in-progress", found, current)
        if not status.pause_intent(found, owner):
            return ResumeStart("not-paused", found, op)
        report = compatibility(found, owner, state, targets or {})
        patch = {
            "metadata": {
                # Compare-and-swap: a 409 means somebody else changed it first.
                "resourceVersion": state["metadata"].get("resourceVersion"),
                # the resume uses up (or, by hand, cancels) a scheduled one
                "annotations": {
                    A_RESUME_OP: json.dumps(op),
                    A_STATE: "resuming",
                    A_MESSAGE: None,
                    A_RESUME_AT: None,
                },
            }
        }
        try:
            state = status.patch_state(client, found, name, patch)
            break
        except Conflict:
            continue  # re-read: another resume took the lock, or something unrelated changed
    else:
        raise KubeError(f"{name} keeps changing; try again")
    try:
        if found == "Workspace":
            client.patch_workspace(
                name,
                [
                    {"op": "test", "path": "/spec/paused", "value": True},
                    {"op": "replace", "path": "/spec/paused", "value": False},
                ],
            )
        else:
            client.scale_statefulset(name, int(annotations(state).get(A_REPLICAS) or 1))
    except KubeError:
        release_lock(client, found, name)
        raise
    return ResumeStart("started", found, op, report)


def release_lock(client: KubeClient, kind: str, name: str) -> None:
    """Give the lock back after a resume that could not start; best effort."""
    patch = {"metadata": {"annotations": {A_RESUME_OP: None, A_STATE: "paused"}}}
    with contextlib.suppress(KubeError):
        status.patch_state(client, kind, name, patch)
