"""Resuming ahead of the user: what scheduled and predicted resumes gave and cost.

``resume_ahead(events, since, until)`` replays each session's events and
follows every resume that a schedule or the predictor started
(``SCHEDULED_RESUME_STARTED``, or a ``RESUME_REQUESTED`` with
``data.scheduled``) to its outcome.  Definitions (also in
``docs/accounting.md``):

* **hit**: the resume became ready (``FIRST_CELL_RUNNABLE``) and the user's
  first cell (``CELL_EXECUTED``, its start) came after that, before any
  pause: the user waited for nothing.
* **late**: the user's first cell (or a manual ``RESUME_REQUESTED``) came
  while the resume was still under way: the user waited for the rest.
* **unused**: ready, and paused again before the user came
  (``PREDICTED_RESUME_UNUSED``, or any ``PAUSE_REQUESTED``).
* **came first**: a schedule cancelled because the user came back before it
  fired (``RESUME_SCHEDULE_CANCELLED`` with reason ``resumed by hand``, or
  ``the notebook runs again in a new kernel``); **cancelled**: any other
  cancellation (replaced, deleted, resumed at a server's start).
* **failed**: the resume failed (``OPERATION_FAILED`` of a resume).
* **accelerator-hours waiting for users**: per started resume, from ready
  until the user's first cell (hit), the accelerator's release (unused) or
  the period's end (still waiting), times the session's GPUs.
* **user waiting saved**: per hit, that resume's own latency (its request
  to ready), which the user did not wait; per late resume, the part of it
  that lay before the user came.

A resume belongs to the period when it started in ``[since, until)``; a
schedule or cancellation when it was recorded then.

JSON shape::

    {"kinds": {KIND: {"scheduled", "started", "hits", "late", "unused",
                      "came_first", "cancelled", "failed", "pending",
                      "waiting_for_users_h", "user_waiting_saved_min"}},
     "total": {same keys},
     "resumes": [{"path", "user", "kind", "started", "ready", "user_came",
                  "paused_again", "outcome", "latency_s", "waiting_for_user_s",
                  "saved_s", "gpus"}]}

``outcome`` is ``hit``, ``late``, ``unused``, ``failed``, ``waiting``
(ready, the user not back yet) or ``resuming``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..formatting import format_time, text_table
from ..ledger import EventType, LedgerEvent

KINDS = ("scheduled", "predicted")
COUNTS = (
    "scheduled",
    "started",
    "hits",
    "late",
    "unused",
    "came_first",
    "cancelled",
    "failed",
    "pending",
)
#: cancellation reasons that mean the user came back before the schedule fired
USER_CAME_FIRST = ("resumed by hand", "the notebook runs again in a new kernel")


@dataclass
class AheadResume:
    """One resume that started ahead of the user, followed to its outcome."""

    path: str
    user: str
    kind: str
    started: float
    gpus: int = 1
    requested: float | None = None
    ready: float | None = None
    user_came: float | None = None
    paused_again: float | None = None  # the re-pause's request
    released: float | None = None  # ... and its release
    outcome: str | None = None

    def waiting_for_user_s(self, until: float) -> float:
        if self.ready is None or self.outcome in ("late", "failed"):
            return 0.0
        end = {
            "hit": self.user_came,
            "unused": self.released or self.paused_again,
        }.get(self.outcome or "", until)
        return max(0.0, min(end or until, until) - self.ready)

    @property
    def latency_s(self) -> float | None:
        if self.ready is None:
            return None
        return self.ready - (self.requested if self.requested is not None else self.started)

    @property
    def saved_s(self) -> float:
        begun = self.requested if self.requested is not None else self.started
        if self.outcome == "hit" and self.latency_s is not None:
            return self.latency_s
        if self.outcome == "late" and self.user_came is not None:
            return max(0.0, self.user_came - begun)
        return 0.0

    def to_json(self, until: float) -> dict[str, Any]:
        return {
            "path": self.path,
            "user": self.user,
            "kind": self.kind,
            "started": self.started,
            "ready": self.ready,
            "user_came": self.user_came,
            "paused_again": self.paused_again,
            "outcome": self.outcome,
            "latency_s": self.latency_s,
            "waiting_for_user_s": self.waiting_for_user_s(until),
            "saved_s": self.saved_s,
            "gpus": self.gpus,
        }


def _kind(value: Any) -> str:
    return value if value in KINDS else "scheduled"


def resume_ahead(events: Iterable[LedgerEvent], since: float, until: float) -> dict[str, Any]:
    """Scheduled and predicted resumes in ``[since, until)``, their outcomes and their cost."""
    counts = {k: dict.fromkeys(COUNTS, 0) for k in KINDS}
    current: dict[tuple[str, str], AheadResume] = {}
    gpus: dict[tuple[str, str], int] = {}
    done: list[AheadResume] = []

    def inside(t: float) -> bool:
        return since <= t < until

    def close(key: tuple[str, str], outcome: str | None = None) -> None:
        r = current.pop(key)
        if outcome:
            r.outcome = outcome
        done.append(r)

    for e in sorted(events, key=lambda e: (e.time, e.id or 0)):
        if not e.path or e.time >= until:
            continue
        key, d, t, T = (e.user, e.path), e.data or {}, e.time, e.type
        if isinstance(d.get("gpus"), (int, float)) and d["gpus"] >= 0:
            gpus[key] = int(d["gpus"])
        r = current.get(key)
        if T == EventType.RESUME_SCHEDULED:
            if inside(t):
                counts[_kind(d.get("kind"))]["scheduled"] += 1
        elif T == EventType.RESUME_SCHEDULE_CANCELLED:
            if inside(t):
                reason = str(d.get("reason", "") or "")
                first = reason in USER_CAME_FIRST
                counts[_kind(d.get("kind"))]["came_first" if first else "cancelled"] += 1
        elif T == EventType.SCHEDULED_RESUME_STARTED or (
            T == EventType.RESUME_REQUESTED and d.get("scheduled") and r is None
        ):
            if r is not None:
                close(key, r.outcome or "failed")
            kind = _kind(d.get("kind") or d.get("scheduled"))
            current[key] = AheadResume(e.path, e.user, kind, t, gpus.get(key, 1))
            if T == EventType.RESUME_REQUESTED:
                current[key].requested = t
        elif r is None:
            continue
        elif T == EventType.RESUME_REQUESTED:
            if d.get("scheduled"):
                r.requested = t if r.requested is None else r.requested
            elif r.ready is None and r.user_came is None:
                r.user_came = t  # the user asked while it was under way
        elif T == EventType.FIRST_CELL_RUNNABLE:
            if r.ready is None:
                r.ready = t
                if r.user_came is not None:
                    close(key, "late")
        elif T == EventType.CELL_EXECUTED:
            came = t - float(d.get("duration", 0) or 0)
            if r.ready is not None and r.paused_again is None:
                r.user_came = came
                close(key, "hit" if came >= r.ready else "late")
            elif r.ready is None and r.user_came is None:
                r.user_came = came
        elif T in (EventType.PREDICTED_RESUME_UNUSED, EventType.PAUSE_REQUESTED):
            if r.ready is not None and r.paused_again is None:
                r.paused_again, r.outcome = t, "unused"
        elif T in (EventType.ACCELERATOR_RELEASED, EventType.PAUSED):
            if r.outcome == "unused":
                r.released = t
                close(key)
        elif T == EventType.OPERATION_FAILED and d.get("operation") == "resume":
            close(key, "failed")
    for key in list(current):
        r = current[key]
        if r.outcome is None:
            r.outcome = "waiting" if r.ready is not None else "resuming"
        close(key)

    resumes = sorted((r for r in done if inside(r.started)), key=lambda r: (r.started, r.path))
    for r in resumes:
        c = counts[r.kind]
        c["started"] += 1
        name = {"hit": "hits", "late": "late", "unused": "unused", "failed": "failed"}
        c[name.get(r.outcome or "", "pending")] += 1
    kinds: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [r for r in resumes if r.kind == kind]
        kinds[kind] = {
            **counts[kind],
            "waiting_for_users_h": sum(r.waiting_for_user_s(until) * r.gpus for r in mine) / 3600,
            "user_waiting_saved_min": sum(r.saved_s for r in mine) / 60,
        }
    total = {k: sum(kinds[kind][k] for kind in KINDS) for k in kinds["scheduled"]}
    return {"kinds": kinds, "total": total, "resumes": [r.to_json(until) for r in resumes]}


def any_ahead(data: dict[str, Any] | None) -> bool:
    """Whether the period saw any schedule or resume ahead of the user (else the section is left out)."""
    if not data:
        return False
    t = data["total"]
    return bool(t["scheduled"] or t["started"] or t["came_first"] or t["cancelled"])


def ahead_text(data: dict[str, Any]) -> list[str]:
    """The report's terminal section."""
    shown = [c for c in COUNTS if c != "pending"]
    head = [
        "kind",
        *(c.replace("_", " ") for c in shown),
        "waiting for users h",
        "user waiting saved min",
    ]
    rows = []
    for kind in (*KINDS, "total"):
        k = data["total"] if kind == "total" else data["kinds"][kind]
        rows.append(
            [
                kind,
                *(str(k[c]) for c in shown),
                f"{k['waiting_for_users_h']:.2f}",
                f"{k['user_waiting_saved_min']:.1f}",
            ]
        )
    lines = ["Resumes ahead of the user (scheduled and predicted)"]
    lines += text_table(head, rows, right=range(1, 11))
    for r in data["resumes"]:
        lines.append(
            f"  {format_time(r['started'])}  {r['kind']:<9}  {r['outcome']:<8}  {r['path']}"
            + (f"  ({r['user']})" if r["user"] else "")
        )
    return lines
