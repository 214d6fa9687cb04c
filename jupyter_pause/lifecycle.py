"""The pause lifecycle: one state machine per notebook session.

A session is keyed by the notebook's server-relative path, not by its kernel,
because pausing replaces the kernel and the user thinks of "my notebook".

::

    running ─► checkpointing ─► pausing ─► paused ─► resuming ─┬─► restoring ─► ready
       ▲            │              │                            ▼         ▲
       └────────────┴──────────────┘                  waiting-for-capacity┘
                 (checkpoint only, or a pause that could not finish)

    any step ─► failed (with a reason); failed ─► resuming | running | checkpointing
    waiting-for-capacity ─► resuming (its turn came) | paused (the server stopped)
    ready ─► checkpointing ─► ready (a checkpoint right after a resume)

    running | ready ─► hibernating ─► hibernated ─► waking ─► running | ready
                           │                          │
                           └─► running | ready        └─► hibernated (not enough GPU memory:
               (refused, or the driver could not lock it)     nothing was tried)

A hibernated kernel is the same process, its namespace and sockets intact: only its
GPU memory was moved to host memory by the CUDA driver (server/hibernate.py).

Which operation may start in which state is :data:`OPERATION_STATES`; every
operation carries a lease (:attr:`Operation.owner`, :attr:`Operation.heartbeat`)
so that one whose server died can be found and resolved instead of holding
its notebook forever.

This module is pure: no server, no I/O except :class:`SessionStore`'s JSON
file.  The server's :mod:`jupyter_pause.server.manager` drives it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from .clock import SYSTEM, Clock
from .engine import durable
from .protocol import CallProgress


class State(str, Enum):
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    PAUSING = "pausing"
    PAUSED = "paused"
    RESUMING = "resuming"
    WAITING_FOR_CAPACITY = "waiting-for-capacity"
    RESTORING = "restoring"
    READY = "ready"
    FAILED = "failed"
    HIBERNATING = "hibernating"
    HIBERNATED = "hibernated"
    WAKING = "waking"

    @property
    def has_kernel(self) -> bool:
        """Whether a live kernel belongs to the session in this state."""
        return self in (
            State.RUNNING,
            State.CHECKPOINTING,
            State.PAUSING,
            State.READY,
            *HIBERNATION_STATES,
        )


#: The states of a kernel that is, or is about to be, or is coming back from being,
#: hibernated: its process lives, but its GPU memory is (or is being moved) on the host,
#: so nothing may call into it but a wake (server/hibernate.py).
HIBERNATION_STATES = frozenset({State.HIBERNATING, State.HIBERNATED, State.WAKING})


# Allowed moves; anything may also go to FAILED.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.RUNNING: frozenset({State.CHECKPOINTING, State.PAUSED, State.HIBERNATING}),
    State.READY: frozenset({State.RUNNING, State.CHECKPOINTING, State.PAUSED, State.HIBERNATING}),
    # READY: a checkpoint taken right after a resume, before any cell ran.
    # PAUSED: found at start-up: the checkpoint was committed, the kernel is gone.
    State.CHECKPOINTING: frozenset({State.PAUSING, State.RUNNING, State.READY, State.PAUSED}),
    State.PAUSING: frozenset({State.PAUSED, State.RUNNING}),
    # a paused notebook whose fresh kernel the user chose to work in
    State.PAUSED: frozenset({State.RESUMING, State.RUNNING}),
    State.RESUMING: frozenset({State.WAITING_FOR_CAPACITY, State.RESTORING, State.PAUSED}),
    # RESUMING: its turn came (server/capacity.py); PAUSED: the server stopped meanwhile
    State.WAITING_FOR_CAPACITY: frozenset({State.RESUMING, State.RESTORING, State.PAUSED}),
    # PAUSED: a platform restore did not bring the kernel back (the checkpoint will)
    State.RESTORING: frozenset({State.READY, State.PAUSED}),
    State.FAILED: frozenset({State.RESUMING, State.RUNNING, State.CHECKPOINTING, State.PAUSED}),
    # RUNNING | READY: refused (the reason in the error), or the driver could not lock it
    State.HIBERNATING: frozenset({State.HIBERNATED, State.RUNNING, State.READY}),
    State.HIBERNATED: frozenset({State.WAKING}),
    # HIBERNATED: not enough GPU memory free to restore it, so nothing was tried
    State.WAKING: frozenset({State.RUNNING, State.READY, State.HIBERNATED}),
}

# The states each operation may start from (pause and checkpoint also need a
# live kernel, resume a checkpoint: the manager checks those facts).
#: the reason (``Operation.options``, the ledger, ``paused_by``) of the pauses a
#: stopping server makes
SHUTDOWN_REASON = "server-shutdown"

OPERATION_STATES: dict[str, frozenset[State]] = {
    # a hibernated kernel is woken first (its GPU memory must be back to be saved)
    "pause": frozenset({State.RUNNING, State.READY, State.FAILED, State.HIBERNATED}),
    "checkpoint": frozenset({State.RUNNING, State.READY, State.FAILED, State.HIBERNATED}),
    "resume": frozenset({State.PAUSED, State.FAILED}),
    "hibernate": frozenset({State.RUNNING, State.READY}),
    "wake": frozenset({State.HIBERNATED}),
}


def allowed_now(session: Session, *, has_kernel: bool, can_hibernate: bool) -> dict[str, bool]:
    """Which operations may start on ``session`` now (``GET status``'s ``can``): none
    runs, its state allows it (:data:`OPERATION_STATES`), and a pause, a checkpoint or a
    hibernate has a kernel (``has_kernel``), a resume a checkpoint to restore; a
    hibernate also needs a server that can (``can_hibernate``: the driver has the API)."""
    free = not session.busy

    def allowed(kind: str) -> bool:
        return free and session.state in OPERATION_STATES[kind]

    return {
        "pause": allowed("pause") and has_kernel,
        "resume": allowed("resume") and bool(session.last_checkpoint),
        "checkpoint": allowed("checkpoint") and has_kernel,
        "hibernate": allowed("hibernate") and has_kernel and can_hibernate,
        "wake": allowed("wake") and has_kernel,
    }


#: Seconds between two heartbeats of a running operation, and how many missed
#: heartbeats make its lease expire (then another server may resolve it).
LEASE_INTERVAL = 10.0
LEASE_MISSED = 6
LEASE_TIMEOUT = LEASE_INTERVAL * LEASE_MISSED

# States in which an operation is in flight.
BUSY_STATES = frozenset(
    {
        State.CHECKPOINTING,
        State.PAUSING,
        State.RESUMING,
        State.WAITING_FOR_CAPACITY,
        State.RESTORING,
        State.HIBERNATING,
        State.WAKING,
    }
)


class InvalidTransition(Exception):
    """A move the lifecycle does not allow (a bug or a race, never user error)."""


class OperationInProgress(Exception):
    """Single flight: another operation already runs for this session."""

    def __init__(self, path: str, operation: Operation):
        self.path = path
        self.operation = operation
        super().__init__(
            f"{operation.kind} {operation.id} is already running for {path!r}; "
            "wait for it to finish"
        )


class PersistenceError(Exception):
    """The session file could not be written (a full or read-only data directory).

    Nothing was changed: the claim that needed persisting was rolled back.
    """


class LiveState(str, Enum):
    """Is the kernel the very process that was paused, or a fresh one?"""

    RESTORED = "restored"  # the kernel answered with the nonce planted at pause
    FRESH = "fresh"  # a kernel that does not know the nonce
    UNKNOWN = "unknown"  # never paused, or not asked yet


@dataclass
class LostState:
    """What of a notebook's state its kernel lost involuntarily (the kernel died, a
    fresh one took its place, a restore could not bring an object back), and which
    checkpoint still has it: shown by ``GET status``, recorded by the next checkpoint,
    kept by retention (engine/store.py ``expired``).  A ``del`` is not a loss."""

    why: str
    #: the checkpoint the lost state came from (it still has it); None once a checkpoint
    #: of this kernel recorded the loss (``names``)
    checkpoint: str | None = None
    #: name -> the checkpoint that still holds it, as the last checkpoint or restore said
    names: dict[str, str] = field(default_factory=dict)


class Step:
    """The steps of an operation's timeline the server marks (:meth:`Operation.mark`);
    a kernel names its own (``protocol.KERNEL_STEPS``)."""

    REQUESTED = "request received"
    CHOSEN = "checkpoint chosen"  # a resume: which checkpoint, decided by the server
    KERNEL_STARTED = "kernel process started"
    KERNEL_ANSWERING = "kernel answering"  # its kernel_info reply, before each call
    READY = "ready"  # a resume: the first cell may run
    FIRST_CELL = "first cell run"  # a resume: the user's first cell finished
    CELL_ENDED = "running cell ended"  # a pause after the cell that asked for it
    CHECKPOINT_RETURNED = "checkpoint returned"
    RELEASING = "releasing"
    RELEASED = "accelerator released"
    PAUSED = "paused"


@dataclass
class Operation:
    """One pause, resume, checkpoint, hibernate or wake of one session."""

    kind: str  # "pause" | "resume" | "checkpoint" | "hibernate" | "wake"
    path: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    started: float = field(default_factory=time.time)
    finished: float | None = None
    outcome: str = "running"  # running | succeeded | failed
    error: str = ""
    step: str = ""  # human-readable progress ("checkpointing 1.2 GB of 2.0 GB")
    messages: list[str] = field(default_factory=list)  # things the user must be told
    options: dict[str, Any] = field(default_factory=dict)
    #: the lease: which server process runs it, and when it last said so (wall
    #: clock, the only one another process can read; the server measures how
    #: long it stays unrenewed with :class:`jupyter_pause.clock.StampAges`)
    owner: str = ""
    heartbeat: float = field(default_factory=time.time)
    #: how far the kernel call running now has got (a pause's write and upload, a
    #: resume's download and read), as the kernel says; None between calls.  In memory
    #: only: the call dies with this process, so the session file never holds it
    progress: CallProgress | None = None
    #: how it went, step by step: ``{"step", "at"}`` (seconds after the request; a
    #: ``note`` where the step needs one), in order (docs/ARCHITECTURE.md, "The timeline
    #: of an operation")
    timeline: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = _fields(self)
        data["progress"] = self.progress.to_json() if self.progress else None
        return data

    def show(self, progress: CallProgress) -> None:
        """What the kernel says of the call it runs for this operation (until it ends)."""
        self.progress = progress

    def mark(self, step: str, at: float, note: str = "") -> None:
        """``step`` happened at ``at`` (seconds since the epoch, on the server's clock);
        never before the step marked last, so the timeline stays in order."""
        offset = at - self.started
        if self.timeline:
            offset = max(offset, self.timeline[-1]["at"])
        entry: dict[str, Any] = {"step": step, "at": round(max(0.0, offset), 4)}
        if note:
            entry["note"] = note
        self.timeline.append(entry)

    def mark_kernel(self, steps: list[list], took: float, now: float) -> None:
        """A kernel's own steps of a call that answered ``now`` (epoch seconds)
        (:func:`protocol.kernel_steps`): the call reached it ``took`` seconds before."""
        reached = now - took
        for step, at in steps:
            self.mark(step, reached + at)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Operation:
        data = dict(data)
        progress = data.get("progress")
        data["progress"] = CallProgress.from_json(progress) if progress else None
        known = cls.__dataclass_fields__  # a field a later version added is dropped
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Session:
    """Where one notebook is in the lifecycle.  Persisted as JSON."""

    path: str
    state: State = State.RUNNING
    since: float = field(default_factory=time.time)
    kernel_id: str | None = None
    kernel_name: str | None = None
    operation: Operation | None = None
    last_checkpoint: dict[str, Any] | None = None  # {id, time, bytes}
    restored_from: str | None = None  # "checkpoint" | "snapshot"
    live_state: LiveState = LiveState.UNKNOWN
    pause_nonce: str | None = None
    error: str | None = None
    workload_class: str | None = None
    gpus: int | None = None  # accelerators the kernel held at its last checkpoint
    #: a planned resume while paused (:class:`jupyter_pause.schedule.ResumeSchedule` as JSON)
    schedule: dict[str, Any] | None = None
    #: set when a schedule brought the notebook back and the user has not run a
    #: cell yet: {kind, at (when it was ready)}; an unused predicted one is paused again
    resumed_ahead: dict[str, Any] | None = None
    #: the newest checkpoint of the kernel's state: restored from, or written since
    state_checkpoint: str | None = None
    #: set while the notebook's state lacks what its kernel lost involuntarily
    lost: LostState | None = None
    #: the machine of the server that paused it, when that was another server sharing
    #: the bucket (server/bucket_sessions.py); None when this server did
    origin: str | None = None
    #: set while the kernel is hibernated (:class:`Hibernation` as JSON): how much GPU
    #: memory it held where, so that a wake restores only what fits
    hibernation: dict[str, Any] | None = None
    #: with a bucket as the checkpoint root: the newest checkpoint of this notebook the
    #: bucket holds ({id, time, bytes}), which another node would resume; older than
    #: ``last_checkpoint`` while a background save is staged (server/staging.py)
    bucket_checkpoint: dict[str, Any] | None = None
    #: what the last save of a stopping server left in the bucket (server/shutdown.py):
    #: {outcome: newest | older | none, checkpoint, at, newest, why, node}
    final_save: dict[str, Any] | None = None

    def move(self, to: State, *, at: float, error: str | None = None) -> State:
        """Move to ``to`` (or to FAILED with ``error``) at ``at`` (epoch seconds);
        returns the previous state."""
        previous = self.state
        if to != State.FAILED and to != previous and to not in TRANSITIONS[previous]:
            raise InvalidTransition(f"{self.path}: {previous.value} -> {to.value}")
        self.state = to
        self.since = at
        self.error = error
        return previous

    @property
    def busy(self) -> bool:
        return self.operation is not None and self.operation.outcome == "running"

    def to_json(self) -> dict[str, Any]:
        data = _fields(self)
        data["state"] = self.state.value
        data["live_state"] = self.live_state.value
        data["operation"] = self.operation.to_json() if self.operation else None
        data["lost"] = _fields(self.lost) if self.lost else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Session:
        data = dict(data)
        data["state"] = State(data["state"])
        data["live_state"] = LiveState(data.get("live_state", "unknown"))
        op = data.get("operation")
        data["operation"] = Operation.from_json(op) if op else None
        lost = data.get("lost")
        data["lost"] = LostState(**lost) if lost else None
        # written before staging: every checkpoint of a bucket was in it once saved
        data.setdefault("bucket_checkpoint", data.get("last_checkpoint"))
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


def _fields(obj) -> dict[str, Any]:
    """A dataclass's fields, their JSON values copied: what ``dataclasses.asdict``
    gives, without its generic deep copy, which cost most of a ``GET status``
    (and of every save) at a thousand sessions."""
    data = dict(obj.__dict__)
    for name, value in data.items():
        if type(value) is dict or type(value) is list:
            data[name] = _copy(value)
    return data


def _copy(value: Any) -> Any:
    """A JSON value's own copy."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


class SessionStore:
    """Sessions persisted to one JSON file, rewritten atomically on each change.

    A server restart must not forget that a notebook is paused: its kernel is
    gone and only this file (and the checkpoint) say how to bring it back.
    """

    def __init__(self, path: str | Path | None, *, clock: Clock = SYSTEM):
        self.path = Path(path) if path else None
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        #: called after each save (the bucket's records follow the sessions)
        self.listeners: list[Callable[[], None]] = []
        self._saved: dict[str, dict[str, Any]] = {}  # each session as last saved
        self._changed: set[str] = set()  # since the last take_changed()
        if self.path and self.path.exists():
            raw = json.loads(self.path.read_text())
            self.sessions = {p: Session.from_json(s) for p, s in raw.get("sessions", {}).items()}

    def get(self, path: str) -> Session:
        if path not in self.sessions:
            self.sessions[path] = Session(path=path, since=self.clock.time())
        return self.sessions[path]

    def of_kernel(self, kernel_id: str | None) -> Session | None:
        """The session whose kernel it is, if any."""
        return next((s for s in self.sessions.values() if s.kernel_id == kernel_id), None)

    def begin(self, path: str, kind: str, *, owner: str = "", **options: Any) -> Operation:
        """Start an operation on a session, enforcing single flight.

        Checking and claiming happen in one synchronous call, so on one event
        loop no two requests can both claim the session.  A claim that cannot
        be persisted is undone (in memory too) and raises
        :class:`PersistenceError`: the session stays free.
        """
        known = path in self.sessions
        session = self.get(path)
        if session.busy:
            raise OperationInProgress(path, session.operation)
        previous = session.operation
        now = self.clock.time()
        session.operation = Operation(
            kind=kind, path=path, options=options, owner=owner, started=now, heartbeat=now
        )
        try:
            self.save()
        except OSError as e:
            session.operation = previous
            if not known:
                del self.sessions[path]
            raise PersistenceError(
                f"could not record the {kind} of {path!r} in {self.path}: {e}; "
                "nothing was started (is the disk full?)"
            ) from e
        return session.operation

    def unfinished(self, owner: str) -> list[Session]:
        """Sessions whose operation is still marked running by another owner
        (a server that died, or another one running now)."""
        return [s for s in self.sessions.values() if s.busy and s.operation.owner != owner]

    def finish(self, path: str, *, error: str | None = None) -> Operation:
        session = self.sessions[path]
        op = session.operation
        op.finished = self.clock.time()
        op.outcome = "failed" if error else "succeeded"
        op.error = error or ""
        self.save()
        return op

    def save(self) -> None:
        sessions = {p: s.to_json() for p, s in self.sessions.items()}
        for session in sessions.values():
            if session["operation"] is not None:
                del session["operation"]["progress"]  # in memory only (Operation.progress)
        try:
            if self.path:
                durable.makedirs(self.path.parent)
                payload = json.dumps({"version": 1, "sessions": sessions}, indent=1)
                durable.write_file(self.path, payload.encode())
        finally:  # written or not, the sessions in memory are what the status shows
            saved, self._saved = self._saved, sessions
            self._changed.update(p for p, s in sessions.items() if saved.get(p) != s)
            self._changed.update(p for p in saved if p not in sessions)
        for listener in self.listeners:
            listener()

    def take_changed(self) -> set[str]:
        """The notebooks whose session changed (added, altered, removed) in the saves since
        the last call: the rows the status index builds again (server/status_index.py)."""
        changed, self._changed = self._changed, set()
        return changed
