"""What a stopping server saves: every live notebook paused on its checkpoint, within a grace.

This stands above the manager, as the idle watcher does: each save is an ordinary
pause (``reason`` ``server-shutdown``), and what could not be saved in time is said
in the log and the ledger (``not-saved``), with the truth in the notebook's session.

With a bucket as the checkpoint root, each pause commits its checkpoint in the local
cache and then uploads only what the bucket lacks, if it can before the grace ends
(server/staging.py); each notebook ends with its ``final_save``: the bucket holds its
last cell's state, an older staged one (which, and how old), or none (why), said in the
log, the ledger and the bucket's record, so that the node that resumes it tells what
was lost.
"""

from __future__ import annotations

import asyncio
import dataclasses

from ..ledger import EventType
from ..lifecycle import SHUTDOWN_REASON, LostState, OperationInProgress, State
from .collaborators import Collaborators
from .errors import PauseError
from .manager import PauseManager
from .recovery import SERVER_STOPPED_UNDER_IT
from .releasing import RELEASING
from .staging import describe_final_save, final_save

#: of the grace, what a bucket's uploads leave for the records that say how they ended
RECORD_MARGIN = 2.0


@dataclasses.dataclass(frozen=True)
class NotSaved:
    """A live notebook whose state a stopping server could not save."""

    path: str
    why: str  # "kernel busy" | "timeout" | "error"
    detail: str


@dataclasses.dataclass(frozen=True)
class ShutdownReport:
    """What :func:`save_all` did: the notebooks paused, those not saved."""

    paused: list[str]
    not_saved: list[NotSaved]


async def save_all(
    manager: PauseManager, parts: Collaborators, grace: float, concurrency: int
) -> ShutdownReport:
    """The server stops: pause every live notebook on its checkpoint, as a user
    pause would (``reason`` ``server-shutdown``), at most ``concurrency`` at once,
    within ``grace`` seconds.  A running cell is waited for, never interrupted;
    a notebook not saved by then is named in the log and the ledger
    (``not-saved``: kernel busy, timeout, error), and its operation cancelled:
    a running cell leaves the notebook ``failed`` at once, a checkpoint under
    way is settled by the next start's recovery (was it committed?)."""
    manager.give_up_waiting()  # a resume not yet started starts nothing now
    manager.stop()  # no new cell; the link is the last saves' now
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    upload_by = parts.clock.time() + grace - min(RECORD_MARGIN, grace / 10)
    try:
        await asyncio.wait_for(manager.recovered.wait(), grace)
        live = await asyncio.wait_for(manager.sync(), max(0.0, deadline - loop.time()))
    except (TimeoutError, asyncio.TimeoutError):
        live = {}
    paths = [p for p in live if parts.store.get(p).state != State.PAUSED]
    if not paths:
        return ShutdownReport([], [])
    manager.log.info(
        "jupyter-pause: the server stops: saving %d notebook(s) within %g s (%s)",
        len(paths),
        grace,
        ", ".join(paths),
    )
    limit = asyncio.Semaphore(concurrency)
    saves = {
        path: asyncio.ensure_future(_save_one(manager, parts, path, limit, upload_by))
        for path in paths
    }
    await asyncio.wait(saves.values(), timeout=max(0.0, deadline - loop.time()))
    # a save whose state is saved has only its kernel's stop left, which Jupyter's own
    # clean-up does next anyway: it ends (cancelled, it would leave the kernel half
    # stopped, and the clean-up stuck until SIGKILL)
    stopping = [s for p, s in saves.items() if not s.done() and _saved(parts.store.get(p))]
    if stopping:
        await asyncio.wait(stopping)
    paused, not_saved = [], []
    for path, save in saves.items():
        if save.done():
            failure = save.exception()  # a bug: say so, and name the notebook
            error = f"{type(failure).__name__}: {failure}" if failure else save.result()
            if error is None:
                paused.append(path)
            else:
                not_saved.append(NotSaved(path, "error", error))
            continue
        save.cancel()
        not_saved.append(_not_saved_in_time(manager, parts, path, grace))
    for path in paused if parts.stager is None else ():  # else its final save said it
        saved = parts.store.get(path).last_checkpoint or {}
        manager.log.info(
            "jupyter-pause: %s was saved before the server stopped (checkpoint %s): a resume "
            "brings it back",
            path,
            saved.get("id", "?"),
        )
    for missed in not_saved:
        session = parts.store.get(missed.path)
        told = {}
        if parts.stager is not None:  # what the bucket holds of it, for other nodes
            held = session.bucket_checkpoint
            outcome = "older" if held else "none"
            session.final_save = final_save(
                outcome,
                held,
                (session.last_checkpoint or {}).get("id"),
                missed.detail,
                parts.clock.time(),
            )
            parts.recorder.save()
            told = {"final_save": session.final_save}
        parts.recorder.record(
            EventType.NOT_SAVED,
            session,
            session.operation,
            why=missed.why,
            error=missed.detail,
            **told,
        )
        manager.log.warning(
            "jupyter-pause: %s was NOT saved before the server stopped (%s): %s%s",
            missed.path,
            missed.why,
            missed.detail,
            f"; {describe_final_save(session.final_save)}" if told else "",
        )
    return ShutdownReport(paused, not_saved)


async def _save_one(
    manager: PauseManager,
    parts: Collaborators,
    path: str,
    limit: asyncio.Semaphore,
    upload_by: float,
) -> str | None:
    """Pause one notebook at shutdown; None once it is paused, else why not."""
    async with limit:
        session = parts.store.get(path)
        # an operation of ours under way ends first, except a pause whose checkpoint
        # is committed: only the platform's release is left (on Kubernetes it waits
        # for the pod to go, which is this very stop), and the next start's recovery
        # finds the checkpoint
        while (
            session.busy
            and session.state != State.PAUSING
            and manager.task(session.operation.id) is not None
        ):
            await asyncio.shield(manager.task(session.operation.id))
        if session.state in (State.PAUSED, State.PAUSING):
            return None
        try:
            op = await manager.pause(
                path, after_cell=True, reason=SHUTDOWN_REASON, upload_by=upload_by
            )
        except (PauseError, OperationInProgress) as e:
            return str(e)
        task = manager.task(op.id)
        if task is not None:
            await asyncio.shield(task)  # cancelled only by the end of the grace
        return None if op.outcome == "succeeded" else op.error or "the pause did not finish"


def _saved(session) -> bool:
    """The notebook's shutdown pause has saved its state and stops its kernel now."""
    op = session.operation
    return session.busy and op.options.get("reason") == SHUTDOWN_REASON and op.step == RELEASING


def _not_saved_in_time(
    manager: PauseManager, parts: Collaborators, path: str, grace: float
) -> NotSaved:
    """The grace is over: stop waiting for this notebook and say why, with the truth
    in its session."""
    session = parts.store.get(path)
    op = session.operation if session.busy else None
    task = manager.task(op.id) if op is not None else None
    if task is not None:
        task.cancel()
    if op is None or session.state in (State.RUNNING, State.READY):
        # still waiting for the running cell: nothing was written, nothing will be
        why = "kernel busy"
        detail = (
            f"a cell was still running when the {grace:g} s shutdown grace ended; "
            "the state since the last checkpoint is lost"
        )
        if op is not None:
            if session.state_checkpoint:  # a checkpoint still has the state it held
                session.lost = LostState(
                    why=SERVER_STOPPED_UNDER_IT, checkpoint=session.state_checkpoint
                )
            parts.recorder.move(session, State.FAILED, op, error=f"not saved: {detail}")
            parts.recorder.fail(session, op, f"not saved: {detail}")
        return NotSaved(path, why, detail)
    detail = (
        f"its {op.kind} was still under way ({session.state.value}) when the {grace:g} s "
        "shutdown grace ended; the next start settles it from what is on disk"
    )
    return NotSaved(path, "timeout", detail)
