"""One home for setting and cancelling a notebook's scheduled resume.

A schedule lives in the notebook's session (``sessions.json``, the store port every
platform's server keeps), so it survives a restart of the server; it is persisted
before :meth:`Schedules.set` returns.  Every change is a ledger row and sets
:attr:`Schedules.changed`, the event the resume scheduler (server/scheduler.py) waits
on to re-arm.  Who fires a due schedule is the scheduler's business, not this module's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..clock import SYSTEM, Clock
from ..ledger import EventType
from ..lifecycle import OPERATION_STATES, Session, SessionStore
from ..schedule import ResumeSchedule
from .errors import Conflict, Unavailable
from .recorder import Recorder


class Schedules:
    def __init__(self, *, store: SessionStore, recorder: Recorder, clock: Clock = SYSTEM):
        self.store = store
        self.clock = clock
        self.recorder = recorder
        #: set whenever a schedule is set or cancelled (the scheduler wakes up)
        self.changed = asyncio.Event()

    def set(
        self,
        path: str,
        at: float,
        *,
        kind: str = "scheduled",
        by: str = "user",
        confidence: float | None = None,
    ) -> dict[str, Any]:
        """Resume ``path`` by itself at ``at`` (epoch seconds).

        Only a notebook that is paused (or failed, with checkpoints), or whose
        pause is under way, can be scheduled; a new schedule replaces the old
        one.  It is persisted before this returns (else ``503``, nothing
        changed), so a server restart keeps it.
        """
        session = self.store.sessions.get(path)
        pausing = session is not None and session.busy and session.operation.kind == "pause"
        resumable = (
            session is not None
            and not session.busy
            and session.state in (OPERATION_STATES["resume"])
        )
        if not (pausing or resumable):
            what = session.operation.kind + " under way" if session and session.busy else None
            state = what or (session.state.value if session else "not paused")
            raise Conflict(
                f"{path!r} is {state}; only a paused notebook can be scheduled to resume"
            )
        previous = session.schedule
        schedule = ResumeSchedule(
            at=float(at), kind=kind, by=by, set_at=self.clock.time(), confidence=confidence
        )
        session.schedule = schedule.to_json()
        try:
            self.store.save()
        except OSError as e:
            session.schedule = previous
            raise Unavailable(f"could not record the schedule of {path!r}: {e}") from e
        if previous:
            self.record_cancel(session, previous, "replaced by a new schedule")
        self.recorder.record(
            EventType.RESUME_SCHEDULED,
            session,
            None,
            at=schedule.at,
            kind=kind,
            confidence=confidence,
            by=by,
        )
        self.changed.set()
        return session.schedule

    def cancel(self, path: str, reason: str) -> bool:
        """Drop the notebook's schedule, if any, saying why; True if there was one."""
        session = self.store.sessions.get(path)
        if session is None or not session.schedule:
            return False
        previous, session.schedule = session.schedule, None
        self.recorder.save()
        self.record_cancel(session, previous, reason)
        self.changed.set()
        return True

    def record_cancel(self, session: Session, schedule: dict, reason: str) -> None:
        self.recorder.record(
            EventType.RESUME_SCHEDULE_CANCELLED,
            session,
            None,
            at=schedule.get("at"),
            kind=schedule.get("kind"),
            reason=reason,
        )

    def take(self, session: Session) -> dict[str, Any]:
        """Use up the notebook's schedule, now that its resume starts (saying so)."""
        schedule, session.schedule = session.schedule, None
        self.recorder.save()
        kind = schedule.get("kind") or "scheduled"
        self.recorder.record(
            EventType.SCHEDULED_RESUME_STARTED, session, None, at=schedule["at"], kind=kind
        )
        return schedule
