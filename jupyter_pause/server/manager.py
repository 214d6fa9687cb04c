"""The session manager: drives each notebook through the pause lifecycle.

Handlers call these methods and translate exceptions; the idle policy calls
``pause(auto=True)``; backends are consulted at two points (``release`` after
the checkpoint is durable, ``acquire`` before a restore).  All state changes go
through :class:`~jupyter_pause.lifecycle.Session.move`, are persisted by the
:class:`~jupyter_pause.lifecycle.SessionStore` and recorded in the ledger.

Operations return at once (the REST API answers ``202``); the work runs as an
asyncio task whose progress is visible through ``operation(id)``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import posixpath
import re
import time
import uuid
from typing import Any

from ..engine import paths as checkpoint_paths
from ..engine import store as checkpoint_store
from ..ledger import EventType, Ledger
from ..lifecycle import (
    BUSY_STATES,
    LiveState,
    Operation,
    OperationInProgress,
    Session,
    SessionStore,
    State,
)
from .activity import ActivityMonitor
from .kernels import KernelCallError, call_in_kernel
from .prewarm import Prewarmer

_TEMPORARY_PATH = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class PauseError(Exception):
    """A request that cannot be honoured; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


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
        checkpoint_dir: str | None,
        keep_checkpoints: int,
        kernel_call_timeout: float,
        idle_wait_timeout: float,
        log,
    ):
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.contents_manager = contents_manager
        self.store = store
        self.ledger = ledger
        self.backend = backend
        self.checkpoint_dir = checkpoint_dir
        self.keep_checkpoints = keep_checkpoints
        self.kernel_call_timeout = kernel_call_timeout
        self.idle_wait_timeout = idle_wait_timeout
        self.log = log
        self.activity = ActivityMonitor(kernel_manager)
        self.activity.listeners.append(self._on_activity)
        self.prewarmer = Prewarmer(kernel_manager, log=log)
        self.operations: dict[str, Operation] = {}
        self._tasks: set[asyncio.Task] = set()
        self._first_cell_pending: set[str] = set()
        #: the idle watcher (jupyter_pause.server.idle), when auto-pause is on
        self.idle = None

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
        """
        sessions = await self.session_manager.list_sessions()
        return {
            s["path"]: s
            for s in sessions
            if s.get("kernel") and not _TEMPORARY_PATH.fullmatch(posixpath.basename(s["path"]))
        }

    async def sync(self) -> dict[str, dict]:
        """Bring lifecycle sessions in line with the kernels that exist now."""
        live = await self.jupyter_sessions()
        for path, model in live.items():
            session = self.store.get(path)
            kernel = model["kernel"]
            if session.kernel_id != kernel["id"] and not session.busy:
                # A kernel we did not start: the user started one by hand, or
                # JupyterLab started one when a paused notebook was reopened.
                # A paused notebook stays paused (resume restores into that
                # kernel) until the user runs a cell in it.
                session.kernel_id = kernel["id"]
                session.kernel_name = kernel.get("name")
                self._record(EventType.KERNEL_STARTED, session, None, started_by="user")
                if session.state in (State.PAUSED, State.FAILED):
                    session.live_state = LiveState.FRESH
                if session.state == State.FAILED:
                    self._move(session, State.RUNNING, None)
                self.store.save()
            if not session.busy:
                self.activity.watch(kernel["id"], path)
        for path, session in list(self.store.sessions.items()):
            if session.kernel_id and path not in live and not session.busy:
                self.activity.unwatch(session.kernel_id)
                self._record(EventType.KERNEL_STOPPED, session, None, stopped_by="user")
                session.kernel_id = None
                if session.state.has_kernel:
                    # shut down outside a pause (by the user, or culled): nothing
                    # left to track; its checkpoints stay for %restore
                    del self.store.sessions[path]
                self.store.save()
        return live

    async def came_back(self, report) -> None:
        """The server has started: after a cold start on a platform, paused
        notebooks wait for Resume from their checkpoints (the store kept them
        paused), or resume by themselves when the backend is so configured."""
        if not report.info.get("auto_resume"):
            return
        for path, session in list(self.store.sessions.items()):
            if session.state == State.PAUSED:
                self.log.info(
                    "jupyter-pause: resuming %s from its checkpoint after a cold start", path
                )
                try:
                    await self.resume(path)
                except (PauseError, OperationInProgress) as e:
                    self.log.warning("jupyter-pause: could not resume %s: %s", path, e)

    async def on_kernel_action(self, logger, schema_id: str, data: dict) -> None:
        """Jupyter Server's kernel_actions event: watch a new kernel from its start,
        so that no cell escapes the ledger.  Its session (the notebook path) is
        saved just after the kernel starts, so wait for it briefly."""
        if data.get("action") != "start" or not data.get("kernel_id"):
            return
        for _ in range(50):
            live = await self.jupyter_sessions()
            if any(m["kernel"]["id"] == data["kernel_id"] for m in live.values()):
                await self.sync()
                return
            await asyncio.sleep(0.1)

    async def status(self) -> dict[str, Any]:
        live = await self.sync()
        sessions = []
        paths = sorted(set(live) | set(self.store.sessions))
        for path in paths:
            session = self.store.get(path)
            kernel = (live.get(path) or {}).get("kernel") or {}
            sessions.append(
                {
                    **session.to_json(),
                    "kernel_id": kernel.get("id", session.kernel_id),
                    "execution_state": kernel.get("execution_state"),
                    "last_activity": kernel.get("last_activity"),
                }
            )
            sessions[-1].pop("pause_nonce", None)
            if self.idle is not None:
                sessions[-1]["auto_pause"] = await self.idle.auto_pause_status(session)
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

    def list_checkpoints(self, path: str) -> list[dict[str, Any]]:
        """A notebook's checkpoints, newest first, without their private metadata."""
        infos = checkpoint_store.list_checkpoints(dir=self.checkpoint_dir, notebook=path)
        listing = [
            {k: v for k, v in dataclasses.asdict(info).items() if k not in ("metadata", "path")}
            for info in infos
        ]
        return sorted(listing, key=lambda c: c["id"], reverse=True)

    def storage_by_notebook(self) -> dict[str, int]:
        """Bytes each known notebook's checkpoints occupy on disk now (for reports).

        Measured on disk: incremental checkpoints share files, so adding up
        their sizes would count shared tensors twice.
        """
        usage = {}
        for path in self.store.sessions:
            folder = checkpoint_paths.notebook_dir(self.checkpoint_dir, path)
            files = folder.rglob("*") if folder.is_dir() else ()
            usage[path] = sum(f.stat().st_size for f in files if f.is_file())
        return usage

    def delete_checkpoint(self, path: str, checkpoint_id: str) -> None:
        if not checkpoint_paths.is_checkpoint_id(checkpoint_id):
            raise PauseError(f"{checkpoint_id!r} is not a checkpoint id (like 2026-11-30T18-02-11)")
        listed = {c["id"]: c for c in self.list_checkpoints(path)}
        if checkpoint_id not in listed:
            raise PauseError(f"{path!r} has no checkpoint {checkpoint_id!r}", status=404)
        checkpoint_store.delete_checkpoint(
            dir=self.checkpoint_dir, notebook=path, checkpoint_id=checkpoint_id
        )
        self._record(
            EventType.CHECKPOINT_DELETED,
            self.store.get(path),
            None,
            checkpoint_id=checkpoint_id,
            bytes=listed.get(checkpoint_id, {}).get("bytes", 0),
        )

    # ------------------------------------------------------------ operations

    async def pause(
        self, path: str, *, force: bool = False, after_cell: bool = False, auto: bool = False
    ) -> Operation:
        live = await self.sync()
        session = self.store.get(path)
        if session.busy:
            raise OperationInProgress(path, session.operation)
        if path not in live:
            raise PauseError(f"{path!r} has no running kernel to pause", status=409)
        kernel = live[path]["kernel"]
        if kernel.get("execution_state") == "busy" and not (force or after_cell):
            raise PauseError(
                f"the kernel of {path!r} is busy running a cell; wait for it to finish, "
                "or pause with force to interrupt it",
                status=409,
            )
        if session.state not in (State.RUNNING, State.READY, State.FAILED):
            raise PauseError(f"{path!r} is {session.state.value}, not running", status=409)
        op = self._begin(path, "pause", force=force, after_cell=after_cell, auto=auto)
        self._record(EventType.PAUSE_REQUESTED, session, op, auto=auto, force=force)
        self._spawn(self._run_pause(session, op))
        return op

    async def checkpoint(self, path: str) -> Operation:
        live = await self.sync()
        session = self.store.get(path)
        if session.busy:
            raise OperationInProgress(path, session.operation)
        if path not in live:
            raise PauseError(f"{path!r} has no running kernel to checkpoint", status=409)
        op = self._begin(path, "checkpoint")
        self._spawn(self._run_checkpoint(session, op))
        return op

    async def resume(self, path: str, checkpoint_id: str | None = None) -> Operation:
        await self.sync()
        session = self.store.get(path)
        if session.busy:
            raise OperationInProgress(path, session.operation)
        if session.state not in (State.PAUSED, State.FAILED):
            raise PauseError(
                f"{path!r} is {session.state.value}; only a paused notebook resumes", status=409
            )
        available = [c["id"] for c in self.list_checkpoints(path)]
        if not available:
            raise PauseError(f"{path!r} has no checkpoint to resume from", status=409)
        if checkpoint_id is not None and checkpoint_id not in available:
            raise PauseError(
                f"{path!r} has no checkpoint {checkpoint_id!r}; it has {', '.join(available)}",
                status=404,
            )
        op = self._begin(path, "resume", checkpoint_id=checkpoint_id)
        self._record(EventType.RESUME_REQUESTED, session, op)
        self._spawn(self._run_resume(session, op, checkpoint_id))
        return op

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
        try:
            return await self.prewarmer.start(path, session.kernel_name)
        except Exception as e:  # e.g. its kernelspec is gone: the resume will say so too
            raise PauseError(f"could not start a spare kernel for {path!r}: {e}", 503) from e

    def _begin(self, path: str, kind: str, **options: Any) -> Operation:
        op = self.store.begin(path, kind, **options)  # raises OperationInProgress
        self.operations[op.id] = op
        return op

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
            if self.backend.scope == "server":
                # the accelerator belongs to the pod: every notebook goes with it
                others = await self._checkpoint_others(session, op)
                if others is None:
                    return
                group += others
            for member in group:
                self._move(member, State.PAUSING, op, "releasing the accelerator")
            kernel_ids = {m.path: m.kernel_id for m in group}
            try:
                facts = dict(await self.backend.release(group, self._shutdown_kernel) or {})
            except Exception as e:
                error = f"could not release the accelerator: {e}; the kernel keeps running"
                for member in group:
                    alive = member.kernel_id and self.execution_state(member.kernel_id) is not None
                    self._move(member, State.RUNNING if alive else State.FAILED, op, error=error)
                self._fail(session, op, error)
                return
            restored_from = facts.pop("restored_from", None)
            facts.pop("info", None)
            released_at = facts.pop("released_at", None) or time.time()
            for member in group:
                self._record(
                    EventType.ACCELERATOR_RELEASED,
                    member,
                    op,
                    time_=released_at,
                    kernel_id=kernel_ids[member.path],
                    gpus=member.gpus,
                    **facts,
                )
                if restored_from != "snapshot":
                    member.kernel_id = None
                self._move(member, State.PAUSED, op)
                self._record(EventType.PAUSED, member, op)
            if restored_from == "snapshot":
                # This very process was snapshotted and has just been restored.
                for member in group:
                    await self._came_back_live(member, op)
            self._finish(session, op)
        except Exception as e:  # a bug or an unexpected platform failure: say so
            self.log.exception("jupyter-pause: pause of %s failed", path)
            self._unexpected(session, op, e)

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
                nonce = await call_in_kernel(km, "live_nonce", timeout=30)
            except (KernelCallError, KeyError):
                nonce = None
        if nonce and nonce == session.pause_nonce:
            session.live_state = LiveState.RESTORED
            session.restored_from = "snapshot"
            self._record(EventType.RESTORE_FINISHED, session, op, restored_from="snapshot")
            activity = self.activity.watch(session.kernel_id, session.path)
            activity.reset_clock()  # the wall clock jumped by the whole pause
            self._first_cell_pending.add(session.path)
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

    def execution_state(self, kernel_id: str) -> str | None:
        try:
            return self.kernel_manager.get_kernel(kernel_id).execution_state
        except KeyError:
            return None

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
        self._move(session, State.CHECKPOINTING, op, "checkpointing the kernel's state")
        self._record(EventType.CHECKPOINT_STARTED, session, op)
        nonce = uuid.uuid4().hex if pause else None
        try:
            km = self.kernel_manager.get_kernel(session.kernel_id)
            result = await call_in_kernel(
                km,
                "checkpoint",
                timeout=self.kernel_call_timeout,
                notebook=session.path,
                dir=self.checkpoint_dir,
                nonce=nonce,
                keep=self.keep_checkpoints,
            )
        except (KernelCallError, KeyError) as e:
            error = f"checkpoint failed, so the notebook was not paused and its kernel keeps running: {e}"
            self._record(EventType.CHECKPOINT_FAILED, session, op, error=str(e))
            self._move(session, State.RUNNING, op, error=error)
            if report:
                self._fail(session, op, error)
            return False
        session.last_checkpoint = {
            "id": result["id"],
            "time": time.time(),
            "bytes": result["bytes"],
        }
        session.gpus = result.get("gpus")
        if nonce:
            session.pause_nonce = nonce
        # the user's own variables that could not be saved (IPython's internals,
        # and modules, which are re-imported on restore, are no news)
        skipped = {
            k: v
            for k, v in (result.get("skipped") or {}).items()
            if not k.startswith("<") and not v.startswith("module")
        }
        if skipped:
            names = ", ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
            op.messages.append(f"Not saved: {names}")
        self._record(
            EventType.CHECKPOINT_FINISHED,
            session,
            op,
            checkpoint_id=result["id"],
            bytes=result["bytes"],
            bytes_written=result["bytes_written"],
            seconds=result["seconds"],
            skipped=sorted(skipped),
            gpus=result.get("gpus"),
        )
        return True

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
        await self.kernel_manager.shutdown_kernel(kernel_id, now=False)
        stopped = time.time()
        if session:
            self._record(EventType.KERNEL_STOPPED, session, session.operation, kernel_id=kernel_id)
        return stopped

    # ------------------------------------------------------------- resuming

    async def _run_resume(self, session: Session, op: Operation, checkpoint_id: str | None) -> None:
        path = session.path
        self._move(session, State.RESUMING, op, "asking for compute")
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
            kernel_id = session.kernel_id  # a fresh kernel JupyterLab already started
            if kernel_id is not None and self.execution_state(kernel_id) is not None:
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
            result = await call_in_kernel(
                km,
                "restore",
                timeout=self.kernel_call_timeout,
                notebook=path,
                dir=self.checkpoint_dir,
                checkpoint_id=checkpoint_id,
            )
            nonce = await call_in_kernel(km, "live_nonce", timeout=30)
            session.live_state = (
                LiveState.RESTORED if nonce and nonce == session.pause_nonce else LiveState.FRESH
            )
            session.restored_from = "checkpoint"
            # the kernel passed over newer checkpoints that did not verify: say so
            op.messages.extend(result.get("notes", []))
            self._record(
                EventType.RESTORE_FINISHED,
                session,
                op,
                restored_from="checkpoint",
                checkpoint_id=result["id"],
                bytes=result["bytes"],
                seconds=result["seconds"],
                gpus=result.get("gpus"),
            )
            activity = self.activity.watch(kernel_id, path)
            activity.reset_clock()
            self._first_cell_pending.add(path)
            self._move(session, State.READY, op)
            self._record(EventType.FIRST_CELL_RUNNABLE, session, op)
            self._finish(session, op)
        except Exception as e:
            error = str(e)
            others = self._alternatives(path, checkpoint_id)
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

    def _alternatives(self, path: str, failed_id: str | None) -> list[str]:
        """Checkpoints to offer after a failed resume, newest first: never the one that just
        failed (the newest sound one, when none was named), never a damaged or untrusted one."""
        sound = [c["id"] for c in self.list_checkpoints(path) if c["status"] == "ok"]
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
        if session.state in (State.READY, State.PAUSED):
            # READY: the first cell after a resume ran.  PAUSED: the user chose
            # to work in a fresh kernel instead of resuming.
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
        if op is not None and step:
            op.step = step
        self.store.save()
        if previous != to:
            self._record(
                EventType.STATE_CHANGED, session, op, **{"from": previous.value, "to": to.value}
            )

    def _finish(self, session: Session, op: Operation) -> None:
        op.step = "done"
        self.store.finish(session.path)

    def _fail(self, session: Session, op: Operation, error: str) -> None:
        self.store.finish(session.path, error=error)
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

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.activity.close()
        await self.prewarmer.shutdown()


async def maybe_await(value):
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value
