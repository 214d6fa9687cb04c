"""The session manager: drives each notebook through the pause lifecycle.

Handlers call these methods and translate exceptions; the idle policy calls
``pause(auto=True)``; backends are consulted at two points (``release`` after
the checkpoint is durable, ``acquire`` before a restore).  All state changes go
through :class:`~jupyter_pause.lifecycle.Session.move`, are persisted by the
:class:`~jupyter_pause.lifecycle.SessionStore` and recorded in the ledger.

Operations return at once (the REST API answers ``202``); the work runs as an
asyncio task whose progress is visible through ``operation(id)``.

Three rules keep a notebook from ever being stuck:

* every operation holds a lease (this process as its owner, a heartbeat);
  at start-up, and whenever a claim meets an operation whose owner is gone
  (judged on the monotonic clock once seen, :class:`~jupyter_pause.clock.StampAges`),
  :meth:`PauseManager.recover` resolves it from the truth on disk (was its
  checkpoint committed?) and in the kernels (is the kernel alive?);
* a kernel that dies while we wait on it is noticed within a second
  (:func:`~.kernels.wait_for_death`), not after the call's timeout;
* reads never write, and checkpoint-store work (which may wait on a file
  lock or read gigabytes) runs in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import posixpath
import re
import socket
import threading
import time
import uuid
from datetime import datetime
from typing import Any

from ..backends.base import ReleaseFacts
from ..clock import SYSTEM, Clock, StampAges
from ..engine import handoff
from ..engine import paths as checkpoint_paths
from ..engine import store as checkpoint_store
from ..engine.errors import CheckpointError, RemoteStoreError
from ..ledger import EventType, Ledger
from ..lifecycle import (
    BUSY_STATES,
    LEASE_INTERVAL,
    LEASE_TIMEOUT,
    OPERATION_STATES,
    SHUTDOWN_REASON,
    InvalidTransition,
    LiveState,
    LostState,
    Operation,
    OperationInProgress,
    PersistenceError,
    Session,
    SessionStore,
    State,
    allowed_now,
)
from ..protocol import CheckpointReply, RestoreReply, user_skipped
from ..schedule import ResumeSchedule
from .activity import ActivityMonitor
from .capacity import ResumeGate, machine_limit
from .explain import explain
from .kernels import KernelCallError, KernelDied, call_in_kernel
from .prewarm import Prewarmer

#: seconds a request waits for a notebook's checkpoint lock held by another
#: process (a kernel's own %checkpoint) before answering 409
STORE_LOCK_WAIT = 2.0
#: seconds a pause waits for a busy kernel to report idle before refusing: a client
#: that has seen its cell end (IOPub idle on its websocket) can ask before the
#: server's own IOPub listener has updated the kernel's state
BUSY_GRACE = 2.0
#: seconds before its time a snapshot-restored pod still counts as brought back by its
#: schedule (a CronJob's minute); earlier, the user resumed it by hand
SCHEDULE_SLACK = 60.0
#: why a notebook's state is lost when its kernel stopped with the server, no pause
SERVER_STOPPED_UNDER_IT = "the server stopped under the kernel, without a pause"
_TEMPORARY_PATH = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class PauseError(Exception):
    """A request that cannot be honoured; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class RestoreDamage:
    """What a resumed kernel's background load found damaged in ``checkpoint_id`` after
    the resume ``operation_id`` had finished (``POST sessions/restored``): objects loaded
    from an older checkpoint's sound copy instead (name -> its checkpoint id), and objects
    of which no checkpoint has a copy that verifies."""

    operation_id: str
    checkpoint_id: str
    recovered: dict[str, str]
    lost: list[str]


@dataclasses.dataclass(frozen=True)
class NotSaved:
    """A live notebook whose state a stopping server could not save."""

    path: str
    why: str  # "kernel busy" | "timeout" | "error"
    detail: str


@dataclasses.dataclass(frozen=True)
class ShutdownReport:
    """What :meth:`PauseManager.save_all` did: the notebooks paused, those not saved."""

    paused: list[str]
    not_saved: list[NotSaved]


class PauseManager:
    def __init__(
        self,
        *,
        kernel_manager,
        session_manager,
        contents_manager,
        store: SessionStore,
        ledger: Ledger,
        backend,
        checkpoint_dir: str | checkpoint_paths.Bucket | None,
        keep_checkpoints: int,
        kernel_call_timeout: float,
        idle_wait_timeout: float,
        log,
        activity: ActivityMonitor | None = None,
        call=call_in_kernel,
        clock: Clock = SYSTEM,
        resume_gate: ResumeGate | None = None,
    ):
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.contents_manager = contents_manager
        self.store = store
        self.ledger = ledger
        self.backend = backend
        self.checkpoint_dir = checkpoint_dir
        #: as a kernel call names it (JSON): a bucket by its URL, the kernel's cache being
        #: in its environment (kernel_settings)
        self.kernel_checkpoint_dir = (
            checkpoint_dir.url
            if isinstance(checkpoint_dir, checkpoint_paths.Bucket)
            else checkpoint_dir
        )
        self.keep_checkpoints = keep_checkpoints
        self.kernel_call_timeout = kernel_call_timeout
        self.idle_wait_timeout = idle_wait_timeout
        self.log = log
        self.activity = (
            activity if activity is not None else ActivityMonitor(kernel_manager, clock=clock)
        )
        self.activity.listeners.append(self._on_activity)
        #: how to run a kernel_ops function in a kernel (a fake in unit tests)
        self.call = call
        #: the owner written into the lease of every operation this process runs
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: how long the leases of owners elsewhere went unrenewed (by path)
        self._lease_ages = StampAges(clock)
        self.prewarmer = Prewarmer(kernel_manager, log=log)
        #: how many resumes start kernels and restore at once; the others wait their turn
        self.resume_gate = resume_gate if resume_gate is not None else ResumeGate(machine_limit())
        self.operations: dict[str, Operation] = {}
        self._tasks: set[asyncio.Task] = set()
        #: kernel-start listeners under way (tasks of Jupyter's event bus, which nobody
        #: awaits): :meth:`close` waits for them, so none is left pending on the loop
        self._listening: set[asyncio.Task] = set()
        self._reading_ahead: dict[str, threading.Event] = {}  # path -> its stop
        self._handing_over: set[handoff.Fill] = set()  # memory filled for restores
        self._running: dict[str, asyncio.Task] = {}  # operation id -> its task
        self._resolving: set[str] = set()  # abandoned operations being settled now
        self._first_cell_pending: set[str] = set()
        self._death_watched: set[str] = set()  # kernels whose restarter tells us of a death
        #: kernels a server-scope pause handed to the platform with the server (the
        #: Hub or Kubernetes stops them with it): paused notebooks do not adopt them
        self._released_kernels: set[str] = set()
        #: ``async (session) -> dict | None``: the auto_pause field of a status row
        #: (the idle watcher provides it when auto-pause is on)
        self.auto_pause_status = None
        #: ``async (session) -> (WorkloadClass, source)``: the policy a status row shows
        self.workload_class = None
        #: called with no argument whenever a schedule is set (the scheduler wakes up)
        self.schedule_changed = lambda: None
        #: ``async (session)`` run when a notebook has just been paused (the predictor)
        self.after_pause: list = []
        self._heartbeat: asyncio.Task | None = None
        self._closed = False
        #: set once :meth:`recover` ran: until then status and operations wait,
        #: so that nobody sees (or trips over) what a dead server left behind
        self.recovered = asyncio.Event()

    def kernel_settings(self) -> dict[str, str]:
        """The server's settings a kernel's magics and engine honour, handed to
        every kernel at start (as environment variables the engine reads):
        where checkpoints live and how many are kept."""
        return {
            **checkpoint_paths.kernel_env(self.checkpoint_dir),
            checkpoint_paths.ENV_KEEP: str(self.keep_checkpoints),
        }

    # ------------------------------------------------------------------ paths

    async def check_path(self, path: Any) -> str:
        """A notebook path from a request, normalised and known to exist."""
        if not isinstance(path, str) or not path.strip():
            raise PauseError("'path' must be a non-empty string (a notebook path)")
        clean = posixpath.normpath(path.strip().lstrip("/"))
        if clean.startswith("..") or "\x00" in clean or os.path.isabs(clean):
            raise PauseError(f"path {path!r} is outside the server's root directory")
        if clean not in self.store.sessions:
            try:
                exists = await maybe_await(self.contents_manager.file_exists(clean))
            except Exception:  # the contents manager refuses hidden or outside paths
                exists = False
            if not exists:
                raise PauseError(f"no notebook at {clean!r}", status=404)
        return clean

    # ----------------------------------------------------------------- status

    async def jupyter_sessions(self) -> dict[str, dict]:
        """Jupyter's notebook sessions by path (the kernels that exist now).

        JupyterLab first creates a session under a random UUID path and then
        renames it to the notebook's; such a passing name is not a notebook.
        A notebook has one session; should a client have made a second one (a
        tab that started a kernel of its own beside a resume), the notebook's is
        the one whose kernel holds its state: the lifecycle session's kernel.
        """
        by_path: dict[str, dict] = {}
        for model in await self._notebook_sessions():
            path = model["path"]
            ours = self.store.sessions.get(path)
            if path not in by_path or (ours and model["kernel"]["id"] == ours.kernel_id):
                by_path[path] = model
        return by_path

    async def _notebook_sessions(self) -> list[dict]:
        """Every Jupyter session of a notebook path that has a kernel, duplicates too."""
        return [
            s
            for s in await self.session_manager.list_sessions()
            if s.get("kernel") and not _TEMPORARY_PATH.fullmatch(posixpath.basename(s["path"]))
        ]

    async def sync(self, stopped_at: float | None = None) -> dict[str, dict]:
        """Bring lifecycle sessions in line with the kernels that exist now.

        Driven by Jupyter's kernel events (:meth:`on_kernel_action`) and run
        before each operation; never by a read such as ``GET status``.
        ``stopped_at`` is when a kernel that is gone stopped, if known.
        """
        live = await self.jupyter_sessions()
        for path, model in list(live.items()):
            session = self.store.get(path)
            kernel = model["kernel"]
            if kernel["id"] in self._released_kernels:
                del live[path]  # paused: it goes with the server, it is nobody's new kernel
                continue
            if session.kernel_id != kernel["id"] and not session.busy:
                # A kernel we did not start: the user started one by hand, or
                # JupyterLab started one when a paused notebook was reopened.
                # A paused notebook stays paused (resume restores into that
                # kernel) until the user runs a cell in it.
                session.kernel_id = kernel["id"]
                session.kernel_name = kernel.get("name")
                session.state_checkpoint = None  # an empty kernel, started on purpose
                self._record(EventType.KERNEL_STARTED, session, None, started_by="user")
                if session.state in (State.PAUSED, State.FAILED):
                    session.live_state = LiveState.FRESH
                if session.state == State.FAILED:
                    self.cancel_schedule(path, "the notebook runs again in a new kernel")
                    self._move(session, State.RUNNING, None)
                self._save()
            if not session.busy:
                self.activity.watch(kernel["id"], path)
        for path, session in list(self.store.sessions.items()):
            if session.kernel_id and path not in live and not session.busy:
                self.activity.unwatch(session.kernel_id)
                self._record(
                    EventType.KERNEL_STOPPED, session, None, time_=stopped_at, stopped_by="user"
                )
                session.kernel_id = None
                if session.state.has_kernel:
                    # shut down outside a pause (by the user, or culled): nothing
                    # left to track; its checkpoints stay for %restore
                    del self.store.sessions[path]
                self._save()
        return live

    async def came_back(self, report) -> None:
        """The server has started: after a cold start on a platform, paused
        notebooks wait for Resume from their checkpoints (the store kept them
        paused), or resume by themselves when the backend is so configured."""
        if not report.info.get("auto_resume"):
            return
        for path, session in list(self.store.sessions.items()):
            if session.schedule and session.schedule["at"] <= time.time():
                continue  # the scheduler resumes it, as scheduled
            if session.state == State.PAUSED:
                self.log.info(
                    "jupyter-pause: resuming %s from its checkpoint after a cold start", path
                )
                try:
                    await self.resume(path)
                except (PauseError, OperationInProgress) as e:
                    self.log.warning("jupyter-pause: could not resume %s: %s", path, e)

    async def on_kernel_action(self, logger, schema_id: str, data: dict) -> None:
        """Jupyter Server's kernel_actions events drive the reconcile, so the
        ledger says when a kernel started or stopped, not when someone looked.

        start: watch the new kernel from its start, so that no cell escapes the
        ledger (its session, the notebook path, is saved just after the kernel
        starts, so wait for it briefly).  shutdown: record the stop now, with
        this moment's time, even if no browser is open.
        """
        kernel_id = data.get("kernel_id")
        if self._closed or not kernel_id or data.get("status", "success") != "success":
            return
        if data.get("action") == "start":
            task = asyncio.current_task()
            self._listening.add(task)
            try:
                for _ in range(50):  # a kernel without a session (prewarmed) is not waited for long
                    if self._closed:
                        return
                    live = await self.jupyter_sessions()
                    if any(m["kernel"]["id"] == kernel_id for m in live.values()):
                        await self.sync()
                        return
                    await asyncio.sleep(0.1)
            finally:
                self._listening.discard(task)
        elif data.get("action") == "shutdown":
            self.kernel_stopped(kernel_id, time.time())

    async def on_contents_action(self, logger, schema_id: str, data: dict) -> None:
        """Jupyter Server's contents events: a notebook (or a folder of them)
        renamed takes its session and its checkpoints along."""
        if self._closed or data.get("action") != "rename":
            return
        old = (data.get("source_path") or "").strip("/")
        new = (data.get("path") or "").strip("/")
        if old and new and old != new:
            await self.notebook_renamed(old, new)

    async def notebook_renamed(self, old: str, new: str) -> None:
        """Move the sessions of ``old`` (a notebook, or a folder) to ``new``, with
        their checkpoint folders.  A session in the middle of an operation is
        left where it is (its checkpoint may be writing); the log says so."""
        moves = {
            key: new + key[len(old) :]
            for key in self.store.sessions
            if key == old or key.startswith(old + "/")
        }
        for key, moved in moves.items():
            session = self.store.sessions[key]
            if session.busy or moved in self.store.sessions:
                self.log.warning(
                    "jupyter-pause: %s was renamed to %s, but its session stays (%s)",
                    key,
                    moved,
                    "an operation runs" if session.busy else f"{moved} has a session",
                )
                continue
            try:
                await self._in_thread(self._move_checkpoints, key, moved)
            except (PauseError, CheckpointError, OSError) as e:
                self.log.warning("jupyter-pause: checkpoints of %s not moved: %s", key, e)
                continue
            del self.store.sessions[key]
            session.path = moved
            self.store.sessions[moved] = session
            if key in self._first_cell_pending:
                self._first_cell_pending.discard(key)
                self._first_cell_pending.add(moved)
            if session.kernel_id and self.activity.for_path(key) is not None:
                self.activity.watch(session.kernel_id, moved)
            self.log.info("jupyter-pause: %s follows its notebook to %s", key, moved)
        if moves:
            self._save()

    def _move_checkpoints(self, old: str, new: str) -> None:
        """Move and re-sign: the signature binds a checkpoint to its notebook."""
        checkpoint_store.rebind(self.checkpoint_dir, old, new)

    def kernel_stopped(self, kernel_id: str, when: float) -> None:
        """A kernel was shut down outside a pause (by the user, or culled):
        nothing is left to track; its checkpoints stay for %restore."""
        session = next((s for s in self.store.sessions.values() if s.kernel_id == kernel_id), None)
        if session is None or session.busy:
            return  # not ours, or our own pause stopping it (it records the stop itself)
        self.activity.unwatch(kernel_id)
        self._record(EventType.KERNEL_STOPPED, session, None, time_=when, stopped_by="user")
        session.kernel_id = None
        if session.state.has_kernel:
            del self.store.sessions[session.path]
        self._save()

    async def status(self) -> dict[str, Any]:
        """Every notebook's state: a pure read (nothing is recorded or saved)."""
        await self.recovered.wait()
        live = await self.jupyter_sessions()
        sessions = []
        paths = sorted(set(live) | set(self.store.sessions))
        for path in paths:
            session = self.store.sessions.get(path) or Session(path=path)
            kernel = (live.get(path) or {}).get("kernel") or {}
            row = session.to_json()
            del row["pause_nonce"]
            row["kernel_id"] = kernel.get("id", session.kernel_id)
            row["execution_state"] = kernel.get("execution_state")
            row["last_activity"] = kernel.get("last_activity")
            # when the notebook's state was last saved (a pause, a checkpoint, an autosave)
            row["last_saved"] = (session.last_checkpoint or {}).get("time")
            row.update(await explain(session, self.workload_class))
            row["can"] = allowed_now(session, has_kernel=path in live)
            if self.auto_pause_status is not None:
                row["auto_pause"] = await self.auto_pause_status(session)
            sessions.append(row)
        return {"backend": self.backend.describe(), "sessions": sessions}

    def operation(self, operation_id: str) -> Operation:
        op = self.operations.get(operation_id)
        if op is None:
            for session in self.store.sessions.values():
                if session.operation and session.operation.id == operation_id:
                    return session.operation
            raise PauseError(f"no operation {operation_id!r}", status=404)
        return op

    # ----------------------------------------------------------- checkpoints

    async def _in_thread(self, function, *args, **kwargs):
        """Run checkpoint-store work in a thread: it reads gigabytes or waits on
        a notebook's file lock, and the event loop must keep answering.

        A checkpoint folder that leads out of the checkpoint root (a symlink)
        is refused, never followed.
        """
        try:
            return await asyncio.to_thread(function, *args, **kwargs)
        except ValueError as e:
            raise PauseError(f"refusing to use the checkpoint folder: {e}", status=409) from e
        except RemoteStoreError as e:  # the bucket behind the folder: say so, not 500
            raise PauseError(str(e), status=503) from e

    async def list_checkpoints(self, path: str) -> list[dict[str, Any]]:
        """A notebook's checkpoints, newest first, without their private metadata."""
        return await self._in_thread(self._list_checkpoints, path)

    def _list_checkpoints(self, path: str, *, private: bool = False) -> list[dict[str, Any]]:
        self._check_folder(path)
        infos = checkpoint_store.list_checkpoints(dir=self.checkpoint_dir, notebook=path)
        hidden = () if private else ("metadata", "path")
        listing = [
            {k: v for k, v in dataclasses.asdict(info).items() if k not in hidden} for info in infos
        ]
        return sorted(listing, key=lambda c: c["id"], reverse=True)

    def _check_folder(self, path: str):
        """The notebook's checkpoint folder; ValueError if it resolves outside
        the checkpoint root, as a symlink planted there would."""
        return checkpoint_paths.notebook_dir(self.checkpoint_dir, path)

    async def storage_by_notebook(self) -> dict[str, int]:
        """Bytes each known notebook's checkpoints occupy on disk now (for reports)."""
        return await self._in_thread(self.measure_storage, list(self.store.sessions))

    def measure_storage(self, paths: list[str]) -> dict[str, int]:
        """Bytes the checkpoints of the notebooks ``paths`` occupy on disk now.

        Measured on disk: incremental checkpoints share files, so adding up
        their sizes would count shared tensors twice.
        """
        usage = {}
        for path in paths:
            try:
                folder = self._check_folder(path)
            except ValueError:
                continue  # never measure (or follow) a folder outside the root
            files = folder.rglob("*") if folder.is_dir() else ()
            usage[path] = sum(f.stat().st_size for f in files if f.is_file())
        return usage

    async def record_kernel_checkpoint(self, path: str, checkpoint_id: str) -> dict[str, Any]:
        """A checkpoint the kernel took by itself (``%checkpoint`` in a cell): the
        server's own checkpoints are in the ledger, and these must count in the
        report too.  Only a checkpoint that exists in the notebook's folder is
        recorded, once; its size is read from the folder, not from the request."""
        if not checkpoint_paths.is_checkpoint_id(checkpoint_id):
            raise PauseError(f"{checkpoint_id!r} is not a checkpoint id (like 2026-11-30T18-02-11)")
        listed = {c["id"]: c for c in await self.list_checkpoints(path)}
        if checkpoint_id not in listed:
            raise PauseError(f"{path!r} has no checkpoint {checkpoint_id!r}", status=404)
        checkpoint = listed[checkpoint_id]
        session = self.store.get(path)
        if (session.last_checkpoint or {}).get("id") != checkpoint_id:
            session.state_checkpoint = checkpoint_id
            session.last_checkpoint = {
                "id": checkpoint_id,
                "time": time.time(),
                "bytes": checkpoint["bytes"],
            }
            self._save()
            self._record(
                EventType.CHECKPOINT_FINISHED,
                session,
                None,
                checkpoint_id=checkpoint_id,
                bytes=checkpoint["bytes"],
                by="kernel",
            )
        return session.last_checkpoint

    def record_restore_damage(self, path: str, damage: RestoreDamage) -> Operation:
        """The kernel of the resume ``damage.operation_id`` found objects of its checkpoint
        damaged after the resume finished: that operation's messages say which were loaded
        from older checkpoints and which are lost (``lost``, as a pause says it).  Only the
        notebook's current kernel, the one that resume restored, is heard."""
        names = [*damage.recovered, *damage.lost]
        if not all(n.isidentifier() for n in names):
            raise PauseError("'recovered' and 'lost' must name variables")
        ids = [damage.checkpoint_id, *damage.recovered.values()]
        if not all(checkpoint_paths.is_checkpoint_id(c) for c in ids):
            raise PauseError("the checkpoints must be checkpoint ids (like 2026-11-30T18-02-11)")
        session = self.store.sessions.get(path)
        op = session.operation if session is not None else None
        if (
            op is None
            or op.kind != "resume"
            or op.id != damage.operation_id
            or session.state_checkpoint != damage.checkpoint_id
        ):
            raise PauseError(
                f"{path!r} is not restored from checkpoint {damage.checkpoint_id!r} by resume "
                f"{damage.operation_id!r} now: an operation has run since",
                status=409,
            )
        for name, older in sorted(damage.recovered.items()):
            op.messages.append(
                f"{name} was damaged in checkpoint {damage.checkpoint_id}; loaded its copy "
                f"from the older checkpoint {older}, which verifies"
            )
        if damage.lost:
            why = f"damaged in checkpoint {damage.checkpoint_id}, found by the background load"
            before = dict(session.lost.names) if session.lost else {}
            self._note_lost(
                session, op, {name: "" for name in damage.lost}, "the restored kernel", why=why
            )
            session.lost.names = {**before, **session.lost.names}
        self._save()
        return op

    async def delete_checkpoint(self, path: str, checkpoint_id: str) -> None:
        if not checkpoint_paths.is_checkpoint_id(checkpoint_id):
            raise PauseError(f"{checkpoint_id!r} is not a checkpoint id (like 2026-11-30T18-02-11)")
        session = self.store.sessions.get(path)
        if session is not None and session.busy and session.operation.kind != "resume":
            # its checkpoint holds the notebook's lock; do not queue behind it
            raise OperationInProgress(path, session.operation)
        listed = {c["id"]: c for c in await self.list_checkpoints(path)}
        if checkpoint_id not in listed:
            raise PauseError(f"{path!r} has no checkpoint {checkpoint_id!r}", status=404)
        await self._in_thread(
            checkpoint_store.delete_checkpoint,
            dir=self.checkpoint_dir,
            notebook=path,
            checkpoint_id=checkpoint_id,
            # a %checkpoint in the kernel may hold the lock for minutes: say so, don't queue
            lock_timeout=STORE_LOCK_WAIT,
        )
        self._record(
            EventType.CHECKPOINT_DELETED,
            self.store.sessions.get(path) or Session(path=path),
            None,
            checkpoint_id=checkpoint_id,
            bytes=listed.get(checkpoint_id, {}).get("bytes", 0),
        )
        if session is not None and (session.last_checkpoint or {}).get("id") == checkpoint_id:
            # the status shows the latest saved state from the session: keep it true
            newest = next((c for c in listed.values() if c["id"] != checkpoint_id), None)
            if newest is None:
                session.last_checkpoint = None
            else:
                session.last_checkpoint = {
                    "id": newest["id"],
                    "time": datetime.fromisoformat(newest["time"]).timestamp(),
                    "bytes": newest["bytes"],
                }
            self._save()

    # ------------------------------------------------------------ operations

    async def _prepare(self, path: str, kind: str) -> tuple[Session, dict[str, dict]]:
        """Common checks before claiming: the kernels as they are now, an
        abandoned operation resolved, single flight, and the state allows it."""
        await self.recovered.wait()
        live = await self.sync()
        session = self.store.sessions.get(path) or Session(path=path)
        if (
            session.busy
            and self._abandoned(session)
            and session.operation.id not in self._resolving
        ):
            await self._resolve(session, "its server stopped, or its lease expired")
        if session.busy:
            raise OperationInProgress(path, session.operation)
        if session.state not in OPERATION_STATES[kind]:
            wanted = "only a paused notebook resumes" if kind == "resume" else "not running"
            raise PauseError(f"{path!r} is {session.state.value}; {wanted}", status=409)
        if kind != "resume" and path not in live:
            raise PauseError(f"{path!r} has no running kernel to {kind}", status=409)
        if kind != "resume":
            await self._refuse_second_session(path, live[path], kind)
        return session, live

    async def _refuse_second_session(self, path: str, model: dict, kind: str) -> None:
        """A notebook with two Jupyter sessions (a client started a kernel of its own
        beside the one a resume restored into) cannot be paused or checkpointed: one
        of the kernels would be saved and the other left running unseen."""
        others = [
            s
            for s in await self._notebook_sessions()
            if s["path"] == path and s["kernel"]["id"] != model["kernel"]["id"]
        ]
        if others:
            other = others[0]
            raise PauseError(
                f"refusing to {kind} {path!r}: it has two Jupyter sessions, whose kernels "
                f"are {model['kernel']['id']} (the notebook's, holding its state) and "
                f"{other['kernel']['id']} (started beside it by another client, "
                f"session {other['id']}); a {kind} would save only one and leave the other "
                f"running. Shut that session down (DELETE /api/sessions/{other['id']}) "
                f"and {kind} again",
                status=409,
            )

    async def pause(
        self,
        path: str,
        *,
        force: bool = False,
        after_cell: bool = False,
        auto: bool = False,
        resume_at: float | None = None,
        reason: str = "",
    ) -> Operation:
        """Checkpoint, then release.  ``resume_at`` (epoch seconds) schedules the
        resume at once, so that it survives a server restart during the pause;
        ``reason`` is recorded (the scheduler's re-pause of an unused resume)."""
        session, live = await self._prepare(path, "pause")
        kernel = live[path]["kernel"]
        if kernel.get("execution_state") == "busy" and not (force or after_cell):
            try:
                await self._wait_idle(kernel["id"], BUSY_GRACE)
            except PauseError:
                raise PauseError(
                    f"the kernel of {path!r} is busy running a cell; wait for it to finish, "
                    "or pause with force to interrupt it",
                    status=409,
                ) from None
        op = self._begin(
            path, "pause", force=force, after_cell=after_cell, auto=auto, reason=reason
        )
        session = self.store.sessions[path]
        session.resumed_ahead = None
        extra = {"reason": reason} if reason else {}
        self._record(EventType.PAUSE_REQUESTED, session, op, auto=auto, force=force, **extra)
        if resume_at is not None:
            try:
                self.set_schedule(path, resume_at)
            except PauseError as e:
                self._fail(session, op, str(e))  # nothing started: the notebook stays free
                raise
        self._spawn(self._run_pause(session, op), op)
        return op

    async def checkpoint(self, path: str, *, autosave: bool = False) -> Operation:
        """Checkpoint and keep running.  ``autosave``: the server's background save
        (server/autosave.py), marked as such in the manifest and kept in its own
        retention budget (engine/store.py)."""
        await self._prepare(path, "checkpoint")
        op = self._begin(path, "checkpoint", **({"autosave": True} if autosave else {}))
        self._spawn(self._run_checkpoint(self.store.sessions[path], op), op)
        return op

    async def resume(
        self,
        path: str,
        checkpoint_id: str | None = None,
        *,
        scheduled: str | None = None,
        due: float | None = None,
    ) -> Operation:
        """Restore into a fresh kernel.  ``scheduled`` is the kind of schedule
        (``scheduled`` | ``predicted``) that started it, ``due`` the time it fell
        due (resumes wait for capacity in that order, those by hand in the order
        they were asked for); a resume by hand cancels the notebook's schedule."""
        session, _ = await self._prepare(path, "resume")
        available = [c["id"] for c in await self.list_checkpoints(path)]
        if not await self._notebook_exists(path):
            kept = f"Its checkpoints are kept ({', '.join(available)}): " if available else ""
            raise PauseError(
                f"the notebook {path!r} was deleted, so it cannot be resumed. {kept}"
                f"to restore one into another notebook, run `%restore --notebook {path} "
                "[checkpoint id]` there.",
                status=404,
            )
        if not available:
            raise PauseError(f"{path!r} has no checkpoint to resume from", status=409)
        if checkpoint_id is not None and checkpoint_id not in available:
            raise PauseError(
                f"{path!r} has no checkpoint {checkpoint_id!r}; it has {', '.join(available)}",
                status=404,
            )
        if session.busy:  # claimed while we listed (a thread), by another request
            raise OperationInProgress(path, session.operation)
        op = self._begin(path, "resume", checkpoint_id=checkpoint_id, scheduled=scheduled)
        session = self.store.sessions[path]
        if scheduled:
            self._record(EventType.RESUME_REQUESTED, session, op, scheduled=scheduled)
        else:
            self.cancel_schedule(path, "resumed by hand")
            self._record(EventType.RESUME_REQUESTED, session, op)
        self._spawn(self._run_resume(session, op, checkpoint_id, due or op.started), op)
        return op

    # ------------------------------------------------------------ schedules

    def set_schedule(
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
            raise PauseError(
                f"{path!r} is {state}; only a paused notebook can be scheduled to resume", 409
            )
        previous = session.schedule
        schedule = ResumeSchedule(
            at=float(at), kind=kind, by=by, set_at=time.time(), confidence=confidence
        )
        session.schedule = schedule.to_json()
        try:
            self.store.save()
        except OSError as e:
            session.schedule = previous
            raise PauseError(f"could not record the schedule of {path!r}: {e}", 503) from e
        if previous:
            self._record_cancel(session, previous, "replaced by a new schedule")
        self._record(
            EventType.RESUME_SCHEDULED,
            session,
            None,
            at=schedule.at,
            kind=kind,
            confidence=confidence,
            by=by,
        )
        self.schedule_changed()
        return session.schedule

    def cancel_schedule(self, path: str, reason: str) -> bool:
        """Drop the notebook's schedule, if any, saying why; True if there was one."""
        session = self.store.sessions.get(path)
        if session is None or not session.schedule:
            return False
        previous, session.schedule = session.schedule, None
        self._save()
        self._record_cancel(session, previous, reason)
        self.schedule_changed()
        return True

    def _record_cancel(self, session: Session, schedule: dict, reason: str) -> None:
        self._record(
            EventType.RESUME_SCHEDULE_CANCELLED,
            session,
            None,
            at=schedule.get("at"),
            kind=schedule.get("kind"),
            reason=reason,
        )

    async def resume_as_scheduled(self, path: str) -> Operation | None:
        """Start the resume a due schedule asks for (the scheduler calls this).

        The schedule is used up either way; a resume that cannot start (the
        notebook was deleted, has no checkpoint, a resume runs already)
        cancels it with the reason, and nothing else is started: a schedule
        never competes with a restore under way.
        """
        session = self.store.sessions.get(path)
        if session is None or not session.schedule:
            return None
        schedule = session.schedule
        if session.busy:
            self.cancel_schedule(path, f"a {session.operation.kind} was under way")
            return None
        session.schedule = None
        self._save()
        kind = schedule.get("kind") or "scheduled"
        self._record(
            EventType.SCHEDULED_RESUME_STARTED, session, None, at=schedule["at"], kind=kind
        )
        try:
            return await self.resume(path, scheduled=kind, due=schedule["at"])
        except (PauseError, OperationInProgress) as e:
            self._record_cancel(session, schedule, f"could not start: {e}")
            self.log.warning("jupyter-pause: the scheduled resume of %s did not start: %s", path, e)
            return None

    async def prewarm(self, path: str) -> str:
        """Start a spare kernel for a paused notebook (server/prewarm.py); its resume
        adopts it."""
        await self.sync()
        session = self.store.get(path)
        if session.state not in (State.PAUSED, State.FAILED) or session.busy:
            raise PauseError(
                f"{path!r} is {session.state.value}; only a paused notebook gets a spare kernel",
                status=409,
            )
        self._read_ahead(path)
        try:
            return await self.prewarmer.start(path, session.kernel_name)
        except Exception as e:  # e.g. its kernelspec is gone: the resume will say so too
            raise PauseError(f"could not start a spare kernel for {path!r}: {e}", 503) from e

    def _begin(self, path: str, kind: str, **options: Any) -> Operation:
        """Claim the session (single flight); a claim that cannot be persisted
        is rolled back and refused with 503, and the session stays free."""
        try:
            op = self.store.begin(path, kind, owner=self.owner, **options)
        except PersistenceError as e:
            raise PauseError(str(e), status=503) from e
        self.operations[op.id] = op
        return op

    def _read_ahead(
        self, path: str, checkpoint_id: str | None = None, skip: frozenset = frozenset()
    ) -> None:
        """Have the disk read the checkpoint a kernel is about to restore while that kernel
        starts (engine/store.prefetch), so a resume waits for the slower of the two, not
        for both in turn. Best effort, on a thread, one at a time per notebook; it
        decides nothing. ``skip``: the files handed over in memory instead."""
        if path in self._reading_ahead:
            return
        stop = self._reading_ahead[path] = threading.Event()

        async def read_ahead() -> None:
            try:
                done = await asyncio.to_thread(
                    checkpoint_store.prefetch,
                    self.checkpoint_dir,
                    path,
                    checkpoint_id,
                    stop=stop,
                    skip=skip,
                )
                self.log.debug("jupyter-pause: read %d bytes ahead for %s", done, path)
            except Exception as e:  # a refused folder, say: the restore will tell
                self.log.debug("jupyter-pause: no read-ahead for %s: %s", path, e)
            finally:
                self._reading_ahead.pop(path, None)

        self._spawn(read_ahead())

    async def _hand_over(self, path: str, checkpoint_id: str | None) -> handoff.Fill | None:
        """Fill memory with the checkpoint's large files while a cold kernel starts, for
        its restore to map instead of reading them (engine/handoff.py); a spare has no
        start to overlap. Best effort: None where there is nothing to hand over, and the
        kernel reads its files itself."""
        try:
            fill = await asyncio.to_thread(handoff.offer, self.checkpoint_dir, path, checkpoint_id)
        except Exception as e:  # a refused folder, say: the restore will tell
            self.log.debug("jupyter-pause: no memory handed over for %s: %s", path, e)
            return None
        if fill is not None:  # kept until it ends, for a server shutting down to stop it
            self._handing_over = {f for f in self._handing_over if not f.wait(0)} | {fill}
        return fill

    def _handed_over(self, fill: handoff.Fill | None, failed: bool = False) -> None:
        """The restore call is over: close the server's offer (a fill still running goes
        on for the kernel's restore). A failed resume also stops the fill, so that no
        memory is held for nothing. Either may come twice."""
        if fill is None:
            return
        if failed:
            fill.cancel()
        else:
            fill.release()

    def _spawn(self, coro, op: Operation | None = None) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if op is not None:
            self._running[op.id] = task
            task.add_done_callback(lambda _: self._running.pop(op.id, None))

    # ------------------------------------------------------------ recovery

    async def _notebook_exists(self, path: str) -> bool:
        try:
            return bool(await maybe_await(self.contents_manager.file_exists(path)))
        except Exception:  # the contents manager refuses hidden or outside paths
            return False

    def _abandoned(self, session: Session) -> bool:
        """Whether the session's running operation has nobody left to finish it:
        this process without a task for it (a task that ended without
        finishing it), a server process on this machine that no longer exists,
        or an owner elsewhere whose lease expired: unrenewed for
        ``LEASE_TIMEOUT`` seconds, read on the wall clock when this process
        first saw the heartbeat and on the monotonic clock since, so that a
        step of this machine's wall clock neither kills a live owner's lease
        nor keeps a dead one's forever."""
        op = session.operation
        if op.owner == self.owner:
            return op.id not in self._running
        host, _, rest = op.owner.partition(":")
        pid = rest.partition(":")[0]
        if host == socket.gethostname() and pid.isdigit():
            return int(pid) == os.getpid() or not checkpoint_store.pid_alive(int(pid))
        return self._lease_ages.age(session.path, op.heartbeat) > LEASE_TIMEOUT

    async def recover(self) -> None:
        """At start-up: resolve every operation a previous server left running,
        and clean the temp folders of checkpoint writers that died with it."""
        try:
            for session in self.store.unfinished(self.owner):
                if self._abandoned(session):
                    await self._resolve(session, "the server stopped during it")
            for session in list(self.store.sessions.values()):
                self._kernel_gone_with_server(session)
            await self._kernels_gone()
            await self._in_thread(self._clean_dead_writers)
        finally:
            self.recovered.set()

    def _kernel_gone_with_server(self, session: Session) -> None:
        """A notebook a previous server left ``ready`` or ``running`` after a resume (whose
        background load may not have finished): if its kernel survived, it is adopted as
        it is; if it stopped with the server, the notebook is ``paused`` again on the
        checkpoint its state came from, which a resume restores."""
        holder = session.state_checkpoint or (session.last_checkpoint or {}).get("id")
        resumed = session.restored_from is not None
        if session.busy or not session.state.has_kernel or not resumed or holder is None:
            return
        if session.kernel_id is not None and self.execution_state(session.kernel_id) is not None:
            return  # it survived: adopted
        if session.kernel_id:
            self.activity.unwatch(session.kernel_id)
            self._record(EventType.KERNEL_STOPPED, session, None, stopped_by="server-stopped")
        session.kernel_id = None
        session.live_state = LiveState.UNKNOWN
        session.resumed_ahead = None
        session.lost = LostState(why=SERVER_STOPPED_UNDER_IT, checkpoint=holder)
        error = (
            "the server stopped and the kernel with it (anything not saved since is lost); "
            f"the notebook is paused on checkpoint {holder}, where its state came from: "
            "resume to restore it"
        )
        self._move(session, State.PAUSED, None, error=error)
        self._save()
        self.log.warning("jupyter-pause: %s: %s", session.path, error)

    async def _kernels_gone(self) -> None:
        """At start-up: a notebook the previous server left running, its kernel gone
        with it (a SIGKILL, a crash, a shutdown that could not save it), says so at
        once, ``failed`` with the checkpoints it can resume from, instead of
        ``running`` without a kernel until the next reconcile."""
        for session in list(self.store.sessions.values()):
            if session.busy or not session.kernel_id or session.kernel_id in self.kernel_manager:
                continue
            self._record(EventType.KERNEL_STOPPED, session, None, stopped_by="server-stopped")
            self.activity.unwatch(session.kernel_id)
            session.kernel_id = None
            if not session.state.has_kernel:
                self._save()
                continue
            if session.state_checkpoint:  # a checkpoint still has the state it held
                session.lost = LostState(
                    why=SERVER_STOPPED_UNDER_IT, checkpoint=session.state_checkpoint
                )
            try:
                ids = [c["id"] for c in await self.list_checkpoints(session.path)]
            except PauseError:
                ids = []
            offer = (
                f"resume to restore checkpoint {ids[0]}"
                if ids
                else "there is no checkpoint to resume from"
            )
            self._move(
                session,
                State.FAILED,
                None,
                error=(
                    "the server stopped and this notebook's kernel with it, without a pause: "
                    f"its state since the last checkpoint is lost; {offer}"
                ),
            )

    def _clean_dead_writers(self) -> None:
        """Remove temp folders of dead checkpoint writers in every notebook folder of
        this user (a shared root holds others' too: never ours to touch), skipping
        folders whose lock a live writer holds (never wait for it)."""
        root = checkpoint_paths.user_root(self.checkpoint_dir)
        if not root.is_dir():
            return
        for folder in root.iterdir():
            if folder.is_symlink() or not folder.is_dir():
                continue
            try:
                with checkpoint_store.locked(folder, timeout=0):
                    checkpoint_store.gc(folder, locked_already=True)
            except (CheckpointError, OSError) as e:
                self.log.info("jupyter-pause: %s not cleaned now: %s", folder, e)

    async def _resolve(self, session: Session, why: str) -> None:
        """End an abandoned operation with the truth: was its checkpoint committed
        (the manifest carries the operation's id), is the kernel alive?"""
        op = session.operation
        self._resolving.add(op.id)  # a second request meanwhile gets 409, not a second resolve
        try:
            await self._settle(session, op, why)
        finally:
            self._resolving.discard(op.id)

    async def _settle(self, session: Session, op: Operation, why: str) -> None:
        path = session.path
        alive = (
            session.kernel_id is not None and self.execution_state(session.kernel_id) is not None
        )
        try:
            listing = await self._in_thread(self._list_checkpoints, path, private=True)
        except PauseError:
            listing = []
        committed = next(
            (c for c in listing if (c.get("metadata") or {}).get("operation_id") == op.id), None
        )
        ids = [c["id"] for c in listing]
        said = f"the {op.kind} {op.id} did not finish ({why})"
        if committed is not None:
            session.last_checkpoint = {
                "id": committed["id"],
                "time": time.time(),
                "bytes": committed["bytes"],
            }
            session.pause_nonce = (committed.get("metadata") or {}).get("pause_nonce")
        if not alive:
            if session.kernel_id:
                self.activity.unwatch(session.kernel_id)
            session.kernel_id = None
        if op.kind == "resume":
            if alive:
                to, error = (
                    State.FAILED,
                    (
                        f"{said}; the kernel may hold a partial restore: resume again to restore "
                        f"from {', '.join(ids) or 'a checkpoint'}"
                    ),
                )
            else:
                to, error = (
                    State.PAUSED,
                    f"{said}; nothing was restored and the checkpoints are intact: resume again",
                )
        elif alive:
            saved = f"; checkpoint {committed['id']} was saved" if committed else ""
            to, error = (
                State.RUNNING,
                f"{said}; nothing was shut down and the kernel keeps running{saved}",
            )
        elif committed is not None:
            to, error = State.PAUSED, None
            op.messages.append(
                f"The server stopped during the {op.kind}, after checkpoint {committed['id']} "
                "was committed and with the kernel gone: the notebook is paused."
            )
        else:
            offer = (
                f"Checkpoints you can resume from: {', '.join(ids)}"
                if ids
                else "There is no checkpoint to resume from."
            )
            to, error = (
                State.FAILED,
                (
                    f"{said} before its checkpoint was committed, and the kernel stopped with it: "
                    f"its unsaved state is lost. {offer}"
                ),
            )
        try:
            self._move(session, to, op, error=error)
        except InvalidTransition:
            self._move(session, State.FAILED, op, error=error or said)
        if error:
            self._fail(session, op, error)
        else:
            if op.kind == "pause":
                self._record(EventType.PAUSED, session, op)
            self._finish(session, op)
        self.log.warning("jupyter-pause: %s %s", path, error or op.messages[-1])

    # ------------------------------------------------------------- pausing

    async def _run_pause(self, session: Session, op: Operation) -> None:
        path = session.path
        try:
            await self._quiesce(session, op)
            activity = self.activity.for_path(path)
            if activity and activity.last_cell_finished:
                self._record(
                    EventType.ACTIVITY_ENDED, session, op, time_=activity.last_cell_finished
                )
            if not await self._checkpoint(session, op, pause=True):
                return
            group = [session]
            at_shutdown = op.options.get("reason") == SHUTDOWN_REASON
            # the server stops: each notebook is paused on its own, and only its kernel
            # is stopped (never the backend's release, which would stop the server or
            # take the pod away a second time)
            release = _release_at_shutdown if at_shutdown else self.backend.release
            if self.backend.scope == "server" and not at_shutdown:
                # the accelerator belongs to the pod: every notebook goes with it
                others = await self._checkpoint_others(session, op)
                if others is None:
                    return
                group += others
            for member in group:
                self._move(member, State.PAUSING, op, "releasing the accelerator")
            kernel_ids = {m.path: m.kernel_id for m in group}
            try:
                facts = await release(group, self._shutdown_kernel)
            except Exception as e:
                error = f"could not release the accelerator: {e}; the kernel keeps running"
                for member in group:
                    alive = member.kernel_id and self.execution_state(member.kernel_id) is not None
                    self._move(member, State.RUNNING if alive else State.FAILED, op, error=error)
                self._fail(session, op, error)
                return
            released_at = facts.released_at or time.time()
            for member in group:
                self._record(
                    EventType.ACCELERATOR_RELEASED,
                    member,
                    op,
                    time_=released_at,
                    kernel_id=kernel_ids[member.path],
                    gpus=member.gpus,
                    **facts.details,
                )
                if facts.restored_from != "snapshot":
                    if (
                        kernel_ids[member.path]
                        and self.backend.scope == "server"
                        and not at_shutdown
                    ):
                        self._released_kernels.add(kernel_ids[member.path])
                    member.kernel_id = None
                self._move(member, State.PAUSED, op)
                self._record(EventType.PAUSED, member, op)
            if facts.restored_from == "snapshot":
                # This very process was snapshotted and has just been restored.
                for member in group:
                    await self._came_back_live(member, op)
            self._finish(session, op)
            if session.state == State.PAUSED and not at_shutdown:
                for listener in self.after_pause:
                    await listener(session)
        except Exception as e:  # a bug or an unexpected platform failure: say so
            self.log.exception("jupyter-pause: pause of %s failed", path)
            self._unexpected(session, op, e)
        finally:
            if session.state != State.PAUSED and session.schedule:
                self.cancel_schedule(path, "the pause did not finish")

    async def _checkpoint_others(self, session: Session, op: Operation) -> list[Session] | None:
        """Checkpoint every other live notebook (server-scope backends).

        If one fails, nothing is released: the pod stays, every kernel keeps
        running, and the error names the notebook.
        """
        others = [
            s
            for s in self.store.sessions.values()
            if s is not session and s.kernel_id and s.state in (State.RUNNING, State.READY)
        ]
        for other in others:
            if not await self._checkpoint(other, op, pause=True, report=False):
                error = (
                    f"the workspace was not paused: checkpoint of {other.path} failed "
                    f"({other.error}); every kernel keeps running"
                )
                for done in [session, *others]:
                    if done.state == State.CHECKPOINTING:
                        self._move(done, State.RUNNING, op)
                self._move(session, State.RUNNING, op, error=error)
                self._fail(session, op, error)
                return None
        return others

    async def _came_back_live(self, session: Session, op: Operation) -> None:
        """After a platform snapshot restore: the kernels are the very processes
        that were paused; prove it with their nonces and report ready."""
        self._record(EventType.RESUME_REQUESTED, session, op, restored_from="snapshot")
        self._move(session, State.RESUMING, op)
        self._move(session, State.RESTORING, op, "checking the restored kernels")
        nonce = None
        if session.kernel_id:
            try:
                km = self.kernel_manager.get_kernel(session.kernel_id)
                nonce = await self.call(km, "live_nonce", timeout=30)
            except (KernelCallError, KeyError):
                nonce = None
        if nonce and nonce == session.pause_nonce:
            session.live_state = LiveState.RESTORED
            session.restored_from = "snapshot"
            self._record(EventType.RESTORE_FINISHED, session, op, restored_from="snapshot")
            activity = self.activity.watch(session.kernel_id, session.path)
            activity.reset_clock()  # the wall clock jumped by the whole pause
            self._first_cell_pending.add(session.path)
            if session.schedule and session.schedule["at"] <= time.time() + SCHEDULE_SLACK:
                # the platform's scheduler brought the pod back, as scheduled
                schedule, session.schedule = session.schedule, None
                kind = schedule.get("kind") or "scheduled"
                self._record(
                    EventType.SCHEDULED_RESUME_STARTED, session, op, at=schedule["at"], kind=kind
                )
                session.resumed_ahead = {"kind": kind, "at": time.time()}
            elif session.schedule:  # brought back before its time: by hand
                self.cancel_schedule(session.path, "resumed by hand")
            self._move(session, State.READY, op)
            self._record(EventType.FIRST_CELL_RUNNABLE, session, op)
        else:
            # the snapshot did not bring this kernel back: the checkpoint will
            error = "the snapshot did not bring the kernel back; resume from the checkpoint"
            self._record(
                EventType.RESTORE_FAILED, session, op, error=error, restored_from="snapshot"
            )
            session.kernel_id = None
            session.live_state = LiveState.UNKNOWN
            self._move(session, State.PAUSED, op)

    async def _quiesce(self, session: Session, op: Operation) -> None:
        """Make sure no user cell runs: wait (after_cell) or interrupt (force)."""
        kernel_id = session.kernel_id
        if op.options.get("after_cell"):
            op.step = "waiting for the running cell to finish"
            await self._wait_idle(kernel_id, self.idle_wait_timeout)
        elif self.execution_state(kernel_id) == "busy" and op.options.get("force"):
            op.step = "interrupting the running cell"
            await self.kernel_manager.interrupt_kernel(kernel_id)
            op.messages.append("The running cell was interrupted so that the notebook could pause.")
            self._record(EventType.KERNEL_INTERRUPTED, session, op)
            await self._wait_idle(kernel_id, 30)

    def execution_state(self, kernel_id: str | None) -> str | None:
        """The kernel's execution state, or None when the server has no such kernel."""
        if kernel_id is None or kernel_id not in self.kernel_manager:
            return None
        return self.kernel_manager.get_kernel(kernel_id).execution_state

    async def _wait_idle(self, kernel_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        await asyncio.sleep(0.1)
        while self.execution_state(kernel_id) == "busy":
            if time.monotonic() > deadline:
                raise PauseError(f"the kernel stayed busy for {timeout:.0f} s", status=409)
            await asyncio.sleep(0.1)

    async def _checkpoint(
        self, session: Session, op: Operation, *, pause: bool, report: bool = True
    ) -> bool:
        """Checkpoint the session's kernel; on failure the kernel keeps running.

        ``report`` False leaves failing the operation to the caller.
        """
        autosave = {"autosave": True} if op.options.get("autosave") else {}
        self._move(session, State.CHECKPOINTING, op, "checkpointing the kernel's state")
        self._record(EventType.CHECKPOINT_STARTED, session, op, **autosave)
        nonce = uuid.uuid4().hex if pause else None
        try:
            km = self.kernel_manager.get_kernel(session.kernel_id)
            reply = await self.call(
                km,
                "checkpoint",
                timeout=self.kernel_call_timeout,
                notebook=session.path,
                dir=self.kernel_checkpoint_dir,
                nonce=nonce,
                keep=self.keep_checkpoints,
                operation=op.id,
                lost_from=session.lost.checkpoint if session.lost else None,
                **autosave,
            )
            result = CheckpointReply.from_json(reply)
        except KernelDied as e:
            await self._kernel_died(session, op, str(e), report=report)
            return False
        except (KernelCallError, KeyError) as e:
            error = (
                f"autosave failed; the kernel keeps running and its last saved state is intact: {e}"
                if autosave
                else f"checkpoint failed, so the notebook was not paused and its kernel keeps running: {e}"
            )
            self._record(EventType.CHECKPOINT_FAILED, session, op, error=str(e), **autosave)
            self._move(session, State.RUNNING, op, error=error)
            if report:
                self._fail(session, op, error)
            return False
        session.last_checkpoint = {
            "id": result.id,
            "time": time.time(),
            "bytes": result.bytes,
            **autosave,
        }
        session.gpus = result.gpus
        session.state_checkpoint = result.id
        self._watch_for_death(session.kernel_id)
        if nonce:
            session.pause_nonce = nonce
        refused = checkpoint_paths.user_folder(self.checkpoint_dir).refused
        if refused:  # another user's folder in a shared root: not used, and the user told
            self.log.warning("jupyter-pause: %s", refused)
            op.messages.append(f"Not in the shared checkpoint folder: {refused}")
        self._note_lost(session, op, result.lost, f"checkpoint {result.id}")
        skipped = user_skipped(result.skipped)
        if skipped:
            names = ", ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
            op.messages.append(f"Not saved: {names}")
        self._record(
            EventType.CHECKPOINT_FINISHED,
            session,
            op,
            checkpoint_id=result.id,
            bytes=result.bytes,
            bytes_written=result.bytes_written,
            seconds=result.seconds,
            skipped=sorted(skipped),
            gpus=result.gpus,
            **autosave,
        )
        return True

    async def _kernel_died(
        self, session: Session, op: Operation, how: str, *, report: bool
    ) -> None:
        """The kernel died while it wrote a checkpoint: say so, and name the
        checkpoint that is intact.  If Jupyter restarted it, the session keeps
        the fresh kernel (resume restores into it); nothing is paused."""
        kernel_id = session.kernel_id
        try:
            ids = [c["id"] for c in await self.list_checkpoints(session.path)]
        except PauseError:
            ids = []
        intact = (
            f"The last checkpoint, {ids[0]}, is intact: resume to restore it."
            if ids
            else "There is no earlier checkpoint to restore."
        )
        error = (
            f"the kernel died during the checkpoint ({how}): its unsaved state is lost and "
            f"nothing was paused. {intact}"
        )
        autosave = {"autosave": True} if op.options.get("autosave") else {}
        self._record(EventType.CHECKPOINT_FAILED, session, op, error=error, **autosave)
        self._record(EventType.KERNEL_STOPPED, session, op, stopped_by="died")
        self.activity.unwatch(kernel_id)
        op.step = "waiting for Jupyter to restart the kernel"
        if await self._restarted(kernel_id):
            session.live_state = LiveState.FRESH  # the same kernel id, an empty process
            if session.state_checkpoint:  # its next checkpoint must not push that one out
                session.lost = LostState(
                    why=f"the kernel died during the checkpoint ({how})",
                    checkpoint=session.state_checkpoint,
                )
                self._watch_for_death(kernel_id)
        else:
            session.kernel_id = None
        self._move(session, State.FAILED, op, error=error)
        if report:
            self._fail(session, op, error)

    def _watch_for_death(self, kernel_id: str | None) -> None:
        """Hear from Jupyter's restarter when a kernel whose state a checkpoint holds dies
        outside any operation (an operation's own call hears of it: :meth:`_kernel_died`)."""
        if kernel_id is None or kernel_id in self._death_watched:
            return
        km = self.kernel_manager.get_kernel(kernel_id) if kernel_id in self.kernel_manager else None
        if km is None or not hasattr(km, "add_restart_callback"):  # a gateway's: not told
            return
        self._death_watched.add(kernel_id)
        km.add_restart_callback(lambda: self._kernel_lost(kernel_id, restarted=True), "restart")
        km.add_restart_callback(lambda: self._kernel_lost(kernel_id, restarted=False), "dead")

    def _kernel_lost(self, kernel_id: str, *, restarted: bool) -> None:
        """A kernel died between operations (the OOM killer, a segfault, SIGKILL, in the
        middle of a lazy restore or not): its state is lost, not by the user's doing.  The
        session says so and names the checkpoint that still has it; the fresh kernel's
        checkpoints record the loss, so retention keeps that one."""
        session = next((s for s in self.store.sessions.values() if s.kernel_id == kernel_id), None)
        if session is None or session.busy or session.state_checkpoint is None:
            return
        self._spawn(self._state_lost(session, kernel_id, restarted))

    async def _state_lost(self, session: Session, kernel_id: str, restarted: bool) -> None:
        # the restarter tells before it restarts: report the kernel the session really has
        restarted = restarted and await self._restarted(kernel_id)
        if session.busy or session.kernel_id != kernel_id:
            return  # an operation began meanwhile: its own call hears of the death
        holder = session.state_checkpoint
        how = "Jupyter restarted it as a fresh, empty kernel" if restarted else "it is gone"
        session.lost = LostState(why=f"the kernel died ({how})", checkpoint=holder)
        self._record(EventType.KERNEL_STOPPED, session, None, stopped_by="died")
        self.activity.unwatch(kernel_id)
        if restarted:
            session.live_state = LiveState.FRESH  # the same kernel id, an empty process
        else:
            session.kernel_id = None
            self._death_watched.discard(kernel_id)
        error = (
            f"the kernel died ({how}): the state it held is lost. Checkpoint {holder} still "
            "has it (it is kept): resume to restore it"
        )
        self._move(session, State.FAILED, None, error=error)
        self._save()
        self.log.warning("jupyter-pause: %s: %s", session.path, error)

    def _note_lost(
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

    async def _restarted(self, kernel_id: str, timeout: float = 30) -> bool:
        """Whether Jupyter's restarter brings a dead kernel back (as a fresh
        process under the same id), so the session reports the kernel it
        really has: resume then restores into it."""
        deadline = time.monotonic() + timeout
        while kernel_id in self.kernel_manager:
            km = self.kernel_manager.get_kernel(kernel_id)
            if not getattr(km, "autorestart", False):
                return False
            if await km.is_alive():
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)
        return False

    async def _run_checkpoint(self, session: Session, op: Operation) -> None:
        previous = session.state
        try:
            if await self._checkpoint(session, op, pause=False):
                self._move(session, State.RUNNING if previous != State.READY else State.READY, op)
                self._finish(session, op)
        except Exception as e:
            self.log.exception("jupyter-pause: checkpoint of %s failed", session.path)
            self._unexpected(session, op, e)

    async def _shutdown_kernel(self, kernel_id: str) -> float:
        """Stop a kernel and wait for its process to exit; returns when that was."""
        session = next((s for s in self.store.sessions.values() if s.kernel_id == kernel_id), None)
        self.activity.unwatch(kernel_id)
        self._death_watched.discard(kernel_id)
        await self.kernel_manager.shutdown_kernel(kernel_id, now=False)
        stopped = time.time()
        if session:
            self._record(EventType.KERNEL_STOPPED, session, session.operation, kernel_id=kernel_id)
        return stopped

    # ------------------------------------------------------------- resuming

    async def _run_resume(
        self, session: Session, op: Operation, checkpoint_id: str | None, due: float
    ) -> None:
        """Wait for the machine's turn (server/capacity.py), then resume; the
        session shows ``waiting-for-capacity`` and how many resumes are ahead."""
        self._move(session, State.RESUMING, op, "asking for compute")
        limit = self.resume_gate.limit

        def report_waiting(ahead: int) -> None:
            resumes = "resume" if ahead == 1 else "resumes"
            step = f"waiting for capacity: {ahead} {resumes} ahead (at most {limit} at a time)"
            if session.state != State.WAITING_FOR_CAPACITY:
                self._move(session, State.WAITING_FOR_CAPACITY, op, step)
                self._record(EventType.WAITING_FOR_CAPACITY, session, op, reason=step)
            op.step = step

        async with self.resume_gate.admitted(due, on_wait=report_waiting):
            if session.state == State.WAITING_FOR_CAPACITY:
                self._record(EventType.CAPACITY_ACQUIRED, session, op)
                self._move(session, State.RESUMING, op, "asking for compute")
            await self._resume(session, op, checkpoint_id)

    async def _resume(self, session: Session, op: Operation, checkpoint_id: str | None) -> None:
        path = session.path
        fill = None
        if self.prewarmer.spare(path) is None:  # a cold kernel: memory is filled as it starts
            fill = await self._hand_over(path, checkpoint_id)
        self._read_ahead(
            path, checkpoint_id, skip=frozenset(f.rel for f in fill.files) if fill else frozenset()
        )
        kernel_id = None
        started_here = False
        try:
            waited = False

            def report_waiting(reason: str) -> None:
                nonlocal waited
                if session.state != State.WAITING_FOR_CAPACITY:
                    self._move(
                        session, State.WAITING_FOR_CAPACITY, op, f"waiting for capacity: {reason}"
                    )
                    self._record(EventType.WAITING_FOR_CAPACITY, session, op, reason=reason)
                waited = True

            await self.backend.acquire(session, report_waiting)
            if waited:
                self._record(EventType.CAPACITY_ACQUIRED, session, op)
            # One session per notebook: a kernel that a client started for it (before
            # this resume, or while it waited) is the one the state is restored into;
            # otherwise the resume makes the notebook's session, which open tabs join.
            live = (await self.jupyter_sessions()).get(path)
            if live is not None:
                kernel_id = live["kernel"]["id"]
                if kernel_id != session.kernel_id:
                    session.kernel_id = kernel_id
                    session.kernel_name = live["kernel"].get("name")
                    self._record(EventType.KERNEL_STARTED, session, op, started_by="user")
                await self.prewarmer.discard(path)
            else:
                op.step = "starting a kernel"
                model = await self.session_manager.create_session(
                    path=path,
                    name=posixpath.basename(path),
                    type="notebook",
                    kernel_name=session.kernel_name,
                    kernel_id=await self.prewarmer.adopt(path),  # a spare, started already
                )
                kernel_id = session.kernel_id = model["kernel"]["id"]
                started_here = True
                self._record(EventType.KERNEL_STARTED, session, op)
            self._move(session, State.RESTORING, op, "restoring the checkpoint")
            self._record(EventType.RESTORE_STARTED, session, op)
            km = self.kernel_manager.get_kernel(kernel_id)
            try:
                reply = await self.call(
                    km,
                    "restore",
                    timeout=self.kernel_call_timeout,
                    notebook=path,
                    dir=self.kernel_checkpoint_dir,
                    checkpoint_id=checkpoint_id,
                    handoff=fill.token() if fill else None,
                    operation=op.id,
                )
            finally:
                self._handed_over(fill)  # the kernel has taken what it takes
            result = RestoreReply.from_json(reply)
            nonce = await self.call(km, "live_nonce", timeout=30)
            session.live_state = (
                LiveState.RESTORED if nonce and nonce == session.pause_nonce else LiveState.FRESH
            )
            session.restored_from = "checkpoint"
            session.state_checkpoint = result.id
            # the kernel passed over newer checkpoints that did not verify: say so
            op.messages.extend(result.notes)
            lost = checkpoint_store.lost_of(result.metadata)
            self._note_lost(
                session,
                op,
                lost,
                f"the restored checkpoint {result.id}",
                why="the kernel that wrote it had lost them",
            )
            self._watch_for_death(kernel_id)
            self._record(
                EventType.RESTORE_FINISHED,
                session,
                op,
                restored_from="checkpoint",
                checkpoint_id=result.id,
                bytes=result.bytes,
                seconds=result.seconds,
                gpus=result.gpus,
            )
            activity = self.activity.watch(kernel_id, path)
            activity.reset_clock()
            self._first_cell_pending.add(path)
            if op.options.get("scheduled"):
                session.resumed_ahead = {"kind": op.options["scheduled"], "at": time.time()}
            self._move(session, State.READY, op)
            self._record(EventType.FIRST_CELL_RUNNABLE, session, op)
            self._finish(session, op)
        except Exception as e:
            self._handed_over(fill, failed=True)
            error = str(e)
            others = await self._alternatives(path, checkpoint_id)
            if others:
                error += f". Checkpoints you can resume from instead: {', '.join(others)}"
            self._record(EventType.RESTORE_FAILED, session, op, error=str(e))
            if started_here:
                try:
                    await self._shutdown_kernel(kernel_id)
                except Exception:
                    self.log.warning("jupyter-pause: could not stop kernel %s", kernel_id)
                session.kernel_id = None
            self._move(session, State.FAILED, op, error=f"resume failed: {error}")
            self._fail(session, op, f"resume failed: {error}")

    # -------------------------------------------------------------- helpers

    async def _alternatives(self, path: str, failed_id: str | None) -> list[str]:
        """Checkpoints to offer after a failed resume, newest first: never the one that just
        failed (the newest sound one, when none was named), never a damaged or untrusted one."""
        try:
            listing = await self.list_checkpoints(path)
        except (PauseError, ValueError):
            return []
        sound = [c["id"] for c in listing if c["status"] == "ok"]
        failed_id = failed_id or (sound[0] if sound else None)
        return [c for c in sound if c != failed_id]

    def _on_activity(self, path: str, kernel_id: str, event: str, info: dict) -> None:
        if event != "cell-finished":
            return
        session = self.store.sessions.get(path)
        if session is None:
            return
        first = path in self._first_cell_pending
        self._first_cell_pending.discard(path)
        session.resumed_ahead = None  # the user came back
        if session.state in (State.READY, State.PAUSED):
            # READY: the first cell after a resume ran.  PAUSED: the user chose
            # to work in a fresh kernel instead of resuming.
            if session.state == State.PAUSED:
                self.cancel_schedule(path, "the notebook runs again in a new kernel")
            self._move(session, State.RUNNING, None)
        self._record(
            EventType.CELL_EXECUTED,
            session,
            None,
            duration=info.get("duration", 0),
            first_after_resume=first,
        )

    def _move(
        self,
        session: Session,
        to: State,
        op: Operation | None,
        step: str = "",
        *,
        error: str | None = None,
    ) -> None:
        previous = session.move(to, error=error)
        if op is not None:
            op.heartbeat = time.time()
            if step:
                op.step = step
        self._save()
        if previous != to:
            self._record(
                EventType.STATE_CHANGED, session, op, **{"from": previous.value, "to": to.value}
            )

    def _save(self) -> None:
        """Persist the sessions.  Once an operation is claimed, a failed write
        (a full disk) must not stop it half way: the state in memory is the
        truth, and the next write carries it."""
        try:
            self.store.save()
        except OSError as e:
            self.log.error("jupyter-pause: could not save %s: %s", self.store.path, e)

    def _finish(self, session: Session, op: Operation) -> None:
        op.step = "done"
        op.finished = time.time()
        op.outcome = "succeeded"
        self._save()

    def _fail(self, session: Session, op: Operation, error: str) -> None:
        op.finished = time.time()
        op.outcome = "failed"
        op.error = error
        self._save()
        self._record(EventType.OPERATION_FAILED, session, op, operation=op.kind, error=error)

    def _unexpected(self, session: Session, op: Operation, error: Exception) -> None:
        message = f"{op.kind} failed unexpectedly: {error}"
        alive = session.kernel_id and self.execution_state(session.kernel_id) is not None
        if alive and session.state in BUSY_STATES | {State.RUNNING}:
            self._move(session, State.RUNNING, op, error=message)
        else:
            self._move(session, State.FAILED, op, error=message)
        self._fail(session, op, message)

    def _record(
        self,
        type: EventType,
        session: Session,
        op: Operation | None,
        *,
        time_: float | None = None,
        kernel_id: str | None = None,
        **data: Any,
    ) -> None:
        self.ledger.record(
            type,
            path=session.path,
            kernel_id=kernel_id or session.kernel_id or "",
            operation_id=op.id if op else "",
            workload_class=session.workload_class or "",
            time_=time_,
            **data,
        )

    def start(self) -> None:
        """Keep the leases of this process's running operations alive."""
        self._heartbeat = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(LEASE_INTERVAL)
            now = time.time()
            mine = [
                s.operation
                for s in self.store.sessions.values()
                if s.busy and s.operation.owner == self.owner
            ]
            for op in mine:
                op.heartbeat = now
            if mine:
                self._save()  # on the loop: the sessions must not change while serialised

    async def save_all(self, grace: float, concurrency: int) -> ShutdownReport:
        """The server stops: pause every live notebook on its checkpoint, as a user
        pause would (``reason`` ``server-shutdown``), at most ``concurrency`` at once,
        within ``grace`` seconds.  A running cell is waited for, never interrupted;
        a notebook not saved by then is named in the log and the ledger
        (``not-saved``: kernel busy, timeout, error), and its operation cancelled:
        a running cell leaves the notebook ``failed`` at once, a checkpoint under
        way is settled by the next start's recovery (was it committed?)."""
        self._give_up_waiting()  # a resume not yet started starts nothing now
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        try:
            await asyncio.wait_for(self.recovered.wait(), grace)
            live = await asyncio.wait_for(self.sync(), max(0.0, deadline - loop.time()))
        except (TimeoutError, asyncio.TimeoutError):
            live = {}
        paths = [p for p in live if self.store.get(p).state != State.PAUSED]
        if not paths:
            return ShutdownReport([], [])
        self.log.info(
            "jupyter-pause: the server stops: saving %d notebook(s) within %g s (%s)",
            len(paths),
            grace,
            ", ".join(paths),
        )
        limit = asyncio.Semaphore(concurrency)
        saves = {path: asyncio.ensure_future(self._save_one(path, limit)) for path in paths}
        await asyncio.wait(saves.values(), timeout=max(0.0, deadline - loop.time()))
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
            not_saved.append(self._not_saved_in_time(path, grace))
        for missed in not_saved:
            session = self.store.get(missed.path)
            self._record(
                EventType.NOT_SAVED, session, session.operation, why=missed.why, error=missed.detail
            )
            self.log.warning(
                "jupyter-pause: %s was NOT saved before the server stopped (%s): %s",
                missed.path,
                missed.why,
                missed.detail,
            )
        return ShutdownReport(paused, not_saved)

    async def _save_one(self, path: str, limit: asyncio.Semaphore) -> str | None:
        """Pause one notebook at shutdown; None once it is paused, else why not."""
        async with limit:
            session = self.store.get(path)
            # an operation of ours under way ends first, except a pause whose checkpoint
            # is committed: only the platform's release is left (on Kubernetes it waits
            # for the pod to go, which is this very stop), and the next start's recovery
            # finds the checkpoint
            while (
                session.busy
                and session.state != State.PAUSING
                and session.operation.id in self._running
            ):
                await asyncio.shield(self._running[session.operation.id])
            if session.state in (State.PAUSED, State.PAUSING):
                return None
            try:
                op = await self.pause(path, after_cell=True, reason=SHUTDOWN_REASON)
            except (PauseError, OperationInProgress) as e:
                return str(e)
            task = self._running.get(op.id)
            if task is not None:
                await asyncio.shield(task)  # cancelled only by the end of the grace
            return None if op.outcome == "succeeded" else op.error or "the pause did not finish"

    def _not_saved_in_time(self, path: str, grace: float) -> NotSaved:
        """The grace is over: stop waiting for this notebook and say why, with the truth
        in its session."""
        session = self.store.get(path)
        op = session.operation if session.busy else None
        task = self._running.get(op.id) if op is not None else None
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
                self._move(session, State.FAILED, op, error=f"not saved: {detail}")
                self._fail(session, op, f"not saved: {detail}")
            return NotSaved(path, why, detail)
        detail = (
            f"its {op.kind} was still under way ({session.state.value}) when the {grace:g} s "
            "shutdown grace ended; the next start settles it from what is on disk"
        )
        return NotSaved(path, "timeout", detail)

    async def close(self) -> None:
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        for stop in self._reading_ahead.values():
            stop.set()
        for fill in self._handing_over:
            fill.cancel()
        self._give_up_waiting()
        for task in list(self._tasks):
            task.cancel()
        if self._listening:  # they see _closed within a moment, and end
            await asyncio.wait(set(self._listening), timeout=30)
        self.activity.close()
        await self.prewarmer.shutdown()

    def _give_up_waiting(self) -> None:
        """The server stops: a resume still waiting for capacity has started no
        kernel and restored nothing, so its notebook is paused, and says so."""
        for session in self.store.sessions.values():
            op = session.operation
            if (
                session.busy
                and op.owner == self.owner
                and session.state == State.WAITING_FOR_CAPACITY
            ):
                error = (
                    "the server stopped while this resume waited for capacity: nothing was "
                    "restored and the checkpoints are intact; resume again"
                )
                self._move(session, State.PAUSED, op, error=error)
                self._fail(session, op, error)
                task = self._running.get(op.id)
                if task is not None:  # never admitted later, while the server stops
                    task.cancel()


async def _release_at_shutdown(sessions: list[Session], shutdown_kernel) -> ReleaseFacts:
    """The release of a pause at server shutdown, on every backend: the kernel stops
    (as the server's own clean-up would stop it); the platform already stops the server."""
    released_at = None
    for session in sessions:
        if session.kernel_id:
            released_at = await shutdown_kernel(session.kernel_id)
    if released_at is None:
        return ReleaseFacts()
    return ReleaseFacts(released_at=released_at, details={"reason": SHUTDOWN_REASON})


async def maybe_await(value):
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value
