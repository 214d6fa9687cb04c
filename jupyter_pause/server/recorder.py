"""The one way a session moves: its state changes, ``sessions.json`` is written, and
the ledger gets its row, in that order, here and nowhere else.

The manager and its collaborators (reconcile, recovery, schedules, the catalogue)
move sessions through a :class:`Recorder`; it knows nothing of them.
"""

from __future__ import annotations

from typing import Any

from ..clock import SYSTEM, Clock
from ..ledger import EventType, Ledger
from ..lifecycle import LostState, Operation, Session, SessionStore, State


class Recorder:
    def __init__(
        self,
        *,
        store: SessionStore,
        ledger: Ledger,
        log,
        kernel_gpus: int = 1,
        clock: Clock = SYSTEM,
    ):
        self.store = store
        #: the server's clock: every time a session or an operation records
        self.clock = clock
        self.ledger = ledger
        self.log = log
        #: the accelerators a kernel holds when it starts, for the report: what its last
        #: checkpoint found it holding, else this (the server's setting or detection)
        self.kernel_gpus = kernel_gpus

    def move(
        self,
        session: Session,
        to: State,
        op: Operation | None,
        step: str = "",
        *,
        error: str | None = None,
    ) -> None:
        now = self.clock.time()
        previous = session.move(to, at=now, error=error)
        if op is not None:
            op.heartbeat = now
            if step:
                op.step = step
        self.save()
        if previous != to:
            self.record(
                EventType.STATE_CHANGED, session, op, **{"from": previous.value, "to": to.value}
            )

    def save(self) -> None:
        """Persist the sessions.  Once an operation is claimed, a failed write
        (a full disk) must not stop it half way: the state in memory is the
        truth, and the next write carries it."""
        try:
            self.store.save()
        except OSError as e:
            self.log.error("jupyter-pause: could not save %s: %s", self.store.path, e)

    def finish(self, session: Session, op: Operation) -> None:
        op.step = "done"
        op.finished = self.clock.time()
        op.outcome = "succeeded"
        self.save()

    def fail(self, session: Session, op: Operation, error: str) -> None:
        op.finished = self.clock.time()
        op.outcome = "failed"
        op.error = error
        self.save()
        self.record(
            EventType.OPERATION_FAILED,
            session,
            op,
            operation=op.kind,
            error=error,
            timeline=list(op.timeline),
        )

    def record(
        self,
        type: EventType,
        session: Session,
        op: Operation | None,
        *,
        time_: float | None = None,
        kernel_id: str | None = None,
        **data: Any,
    ) -> None:
        if type == EventType.KERNEL_STARTED and "gpus" not in data:
            data["gpus"] = session.gpus if session.gpus is not None else self.kernel_gpus
        self.ledger.record(
            type,
            path=session.path,
            kernel_id=kernel_id or session.kernel_id or "",
            operation_id=op.id if op else "",
            workload_class=session.workload_class or "",
            time_=time_,
            **data,
        )

    def note_lost(
        self,
        session: Session,
        op: Operation,
        lost: dict[str, str],
        what: str,
        why: str | None = None,
    ) -> None:
        """Say what ``what`` (a checkpoint just written or restored) lacks of the notebook's
        state, lost involuntarily, and which checkpoints still hold it (they are kept)."""
        if not lost:
            session.lost = None
            return
        why = why or (session.lost.why if session.lost else "a restore could not bring them back")
        session.lost = LostState(why=why, names=dict(lost))
        held = {h: sorted(n for n, k in lost.items() if k == h) for h in set(lost.values())}
        said = [
            f"{', '.join(names)}: still in checkpoint {h}, which is kept (resume from it to "
            "get them back)"
            if h
            else f"{', '.join(names)}: no checkpoint has a copy that verifies"
            for h, names in sorted(held.items())
        ]
        op.messages.append(
            f"{what[0].upper()}{what[1:]} does not have {', '.join(sorted(lost))} ({why}). "
            + "; ".join(said)
            + "."
        )
