"""Background autosave: a hard kill (SIGKILL, the OOM killer, a node lost, a power
cut) loses at most one workload class's ``autosave_every`` of work.  With a bucket as the
checkpoint root it is also continuous staging (a class's ``stage_every``, on by default
for classes that pause): the save is committed in the local cache, and its changes go to
the bucket in the background (server/staging.py).  It runs whether auto-pause is on or not.

When a user cell ends and the kernel stays idle, a notebook whose class asks for it
and that has been in use (cells run) for ``autosave_every`` seconds since its state
was last saved is checkpointed through the manager's ordinary operation, marked as
an autosave.  The engine's checkpoint is incremental (only what the cells could have
changed is pickled again, unchanged tensors are referenced, not written), so an
autosave is short; a cell the user starts meanwhile queues behind it in the kernel.
An autosave never starts while a cell runs: the kernel runs one request at a time,
and the autosaver asks only once the monitor has seen the cell end and nothing
started within :data:`SETTLE` (a "Run All" queues its next cell at once).

What counts as saved comes from the ledger (every checkpoint, the user's, a pause's,
``%checkpoint``'s, an autosave's); what counts as use, from the activity monitor.
Times are on the monotonic clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..clock import SYSTEM, Clock
from ..idle_policy import WorkloadClass
from ..ledger import EventType, LedgerEvent
from ..lifecycle import OperationInProgress, PersistenceError, State
from .errors import PauseError

#: seconds the kernel must stay idle after a cell before an autosave starts
SETTLE = 0.5
#: seconds an autosave waits for Jupyter's execution state to say what the monitor saw
PATIENCE = 30.0


class Operations(Protocol):
    """What the autosaver asks of the session manager."""

    async def checkpoint(self, path: str, *, autosave: bool = False) -> Any: ...
    def execution_state(self, kernel_id: str | None) -> str | None: ...


@dataclass
class Unsaved:
    """A notebook's work since its state was last saved (monotonic times)."""

    #: when the first cell since the last save started; None: nothing unsaved
    since: float | None = None
    #: the kernel that ran it
    kernel_id: str = ""
    #: a checkpoint is being written now
    saving: bool = False
    #: when the first cell seen during that checkpoint started (it ran after it)
    during: float | None = None


class Autosaver:
    """Listens to the activity monitor (cells) and the ledger (saves), and checkpoints
    through ``operations``; everything it reads is handed to it."""

    def __init__(
        self,
        *,
        operations: Operations,
        store,
        activity,
        ledger,
        workload_class: Callable[[Any], Awaitable[tuple[WorkloadClass, str]]],
        log,
        clock: Clock = SYSTEM,
        bucket: bool = False,
    ):
        self.operations = operations
        #: the checkpoint root is a bucket: a class's stage_every counts too
        self.bucket = bucket
        self.store = store
        self.activity = activity
        self.ledger = ledger
        self.workload_class = workload_class
        self.log = log
        self.clock = clock
        self.unsaved: dict[str, Unsaved] = {}
        self._tasks: set[asyncio.Task] = set()
        #: the machine goes soon (server/notice.py): save after every cell
        self.hurried = False

    def start(self) -> None:
        self.activity.listeners.append(self.on_activity)
        self.ledger.listeners.append(self.on_ledger)

    async def close(self) -> None:
        for listeners, listener in (
            (self.activity.listeners, self.on_activity),
            (self.ledger.listeners, self.on_ledger),
        ):
            if listener in listeners:
                listeners.remove(listener)
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------- listeners

    def on_activity(self, path: str, kernel_id: str, event: str, info: dict) -> None:
        """An :class:`~.activity.ActivityMonitor` listener."""
        now = self.clock.monotonic()
        unsaved = self.unsaved.setdefault(path, Unsaved())
        if event == "cell-started":
            if unsaved.saving:
                if unsaved.during is None:  # it runs after the save: unsaved by it
                    unsaved.during = now
            elif unsaved.since is None:
                unsaved.since, unsaved.kernel_id = now, kernel_id
        elif event == "cell-finished" and unsaved.since is not None and not unsaved.saving:
            task = asyncio.ensure_future(self._maybe_save(path, kernel_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def on_ledger(self, event: LedgerEvent) -> None:
        """A :class:`~jupyter_pause.ledger.Ledger` listener: what was saved, and when a
        kernel went (a new one has nothing unsaved)."""
        if event.type == EventType.CHECKPOINT_STARTED:
            self.unsaved.setdefault(event.path, Unsaved()).saving = True
        elif event.type == EventType.CHECKPOINT_FINISHED:
            unsaved = self.unsaved.setdefault(event.path, Unsaved())
            unsaved.since, unsaved.during, unsaved.saving = unsaved.during, None, False
        elif event.type == EventType.CHECKPOINT_FAILED and event.path in self.unsaved:
            unsaved = self.unsaved[event.path]
            if event.data.get("autosave"):
                # try again one interval later, not after every cell
                unsaved.since = self.clock.monotonic()
            elif unsaved.since is None:
                unsaved.since = unsaved.during
            unsaved.during, unsaved.saving = None, False
        elif event.type in (EventType.KERNEL_STARTED, EventType.KERNEL_STOPPED):
            # a new kernel has nothing unsaved, except the cells it ran before its start
            # was recorded (the reconciler records it once the kernel is classified)
            unsaved = self.unsaved.get(event.path)
            if unsaved is not None and not (
                event.type == EventType.KERNEL_STARTED and unsaved.kernel_id == event.kernel_id
            ):
                del self.unsaved[event.path]

    async def hurry(self) -> None:
        """The machine goes soon: save every idle notebook that ran cells since its last
        save now, and from now on after every cell, whatever its class's interval."""
        self.hurried = True
        for path, session in list(self.store.sessions.items()):
            unsaved = self.unsaved.get(path)
            if session.kernel_id and unsaved is not None and unsaved.since is not None:
                await self._maybe_save(path, session.kernel_id)

    # ---------------------------------------------------------------- acting

    async def _settled(self, path: str, kernel_id: str, session, unsaved: Unsaved) -> bool:
        """Whether the kernel stayed idle for :data:`SETTLE` after the cell.  Jupyter's own
        execution state may still say ``busy`` when the monitor has seen the cell end (it
        reads IOPub on a stream of its own): that is waited out, up to :data:`PATIENCE`,
        since no later cell may come to try again.  A cell that started, an operation
        or a save under way answers at once."""
        deadline = self.clock.monotonic() + PATIENCE
        while True:
            await asyncio.sleep(SETTLE)
            activity = self.activity.for_path(path)
            if (
                activity is None
                or activity.busy
                or session.busy
                or session.state not in (State.RUNNING, State.READY)
                or unsaved.saving
            ):
                return False
            if self.operations.execution_state(kernel_id) != "busy":
                return True
            if self.clock.monotonic() >= deadline:
                return False

    async def _maybe_save(self, path: str, kernel_id: str) -> None:
        session = self.store.sessions.get(path)
        if session is None or session.kernel_id != kernel_id:
            return
        policy, _ = await self.workload_class(session)
        every = 0.0 if self.hurried else policy.save_every(self.bucket)
        unsaved = self.unsaved.get(path)
        if every is None or unsaved is None or unsaved.since is None:
            return
        if self.clock.monotonic() - unsaved.since < every:
            return
        if not await self._settled(path, kernel_id, session, unsaved):
            return  # a cell runs (or an operation): the next cell's end tries again
        self.log.debug("jupyter-pause: autosaving %s (class %s)", path, policy.name)
        try:
            await self.operations.checkpoint(path, autosave=True)
        except (PauseError, OperationInProgress, PersistenceError) as e:
            self.log.info("jupyter-pause: autosave of %s skipped: %s", path, e)
