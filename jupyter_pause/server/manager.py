"""The session manager: drives each notebook through the pause lifecycle.

It keeps the operations (claim, pause, checkpoint, resume, hibernate, wake): the order
of their steps and the state machine's transitions between them.  Its collaborators
stand below it and never call back into it: the steps themselves are the
:class:`~.checkpointing.Checkpointer`'s (a quiet kernel and its checkpoint), the
:class:`~.restoring.Restorer`'s (a resume's kernel and its restore), the
:class:`~.releasing.Releaser`'s (the platform's release) and the
:class:`~.hibernate.Hibernator`'s; a session moves through the
:class:`~.recorder.Recorder`; the checkpoint store is read and changed through the
:class:`~.catalogue.Catalogue`, off the event loop; schedules are set and cancelled in
:class:`~.schedules.Schedules`; Jupyter's kernel and contents events reach the sessions
through the :class:`~.reconcile.Reconciler`; leases and start-up recovery are the
:class:`~.recovery.Recovery`'s; a resume is prepared (spare kernel, read-ahead, the
handoff's fill) by the :class:`~.prewarm.Prewarmer`.  The policies above it (the idle
watcher, the scheduler's predictor) reach it only as :class:`~.ports.Policies`.

Handlers call these methods and translate exceptions; backends are consulted at two
points (``release`` after the checkpoint is durable, through the Releaser; ``acquire``
before a restore).  Operations return at once (the REST API answers ``202``); the work
runs as an asyncio task whose progress is visible through ``operation(id)``.  A kernel
that dies while we wait on it is noticed within a second (:func:`~.kernels.wait_for_death`).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from typing import Any

from jupyter_server.utils import ensure_async

from ..ledger import EventType
from ..lifecycle import (
    BUSY_STATES,
    HIBERNATION_STATES,
    OPERATION_STATES,
    SHUTDOWN_REASON,
    Operation,
    OperationInProgress,
    PersistenceError,
    Session,
    State,
    Step,
)
from ..protocol import HibernationFacts
from .capacity import ResumeGate, machine_limit
from .collaborators import Collaborators
from .errors import Conflict, NotFound, PauseError, Unavailable
from .hibernate import Hibernation, Refused, Stuck, kernel_pid
from .kernels import KernelCallError
from .ports import Policies
from .reconcile import execution_state


class PauseManager:
    def __init__(
        self,
        *,
        parts: Collaborators,
        log,
        resume_gate: ResumeGate | None = None,
        policies: Policies = Policies(),
    ):
        """``parts``: the collaborators, built by :func:`.build_collaborators` (the
        composition root's, ``PauseApp.initialize_settings``); the manager builds none."""
        self.kernel_manager = parts.kernel_manager
        self.contents_manager = parts.contents_manager
        self.store = parts.store
        self.ledger = parts.ledger
        self.clock = parts.clock
        self.call = parts.call
        self.recorder = parts.recorder
        self.schedules = parts.schedules
        self.catalogue = parts.catalogue
        self.activity = parts.activity
        self.prewarmer = parts.prewarmer
        self.reconciler = parts.reconciler
        self.tasks = parts.tasks
        self.recovery = parts.recovery
        self.status_index = parts.status_index
        self.hibernator = parts.hibernator
        self.stager = parts.stager
        self.bucket_saves = parts.bucket_saves
        self.shared = parts.shared
        self.checkpointer = parts.checkpointer
        self.restorer = parts.restorer
        self.releaser = parts.releaser
        self.backend = parts.backend
        self.log = log
        self.policies = policies
        #: the platform's notice that the machine goes soon (backends' TerminationNotice)
        self.notice = None
        #: the server stops and saves its notebooks: no new cell starts (:meth:`stop`)
        self.stopping = False
        #: how many resumes start kernels and restore at once; the others wait their turn
        self.resume_gate = resume_gate if resume_gate is not None else ResumeGate(machine_limit())
        self.operations: dict[str, Operation] = {}
        #: set once :meth:`recover` ran: until then status and operations wait,
        #: so that nobody sees (or trips over) what a dead server left behind
        self.recovered = asyncio.Event()

    # ------------------------------------------------------------------ paths

    async def check_path(self, path: Any) -> str:
        """A notebook path from a request, normalised and known to exist."""
        if not isinstance(path, str) or not path.strip():
            raise PauseError("'path' must be a non-empty string (a notebook path)")
        clean = posixpath.normpath(path.strip().lstrip("/"))
        if clean.startswith("..") or "\x00" in clean or os.path.isabs(clean):
            raise PauseError(f"path {path!r} is outside the server's root directory")
        if clean not in self.store.sessions and not await self._notebook_exists(clean):
            raise NotFound(f"no notebook at {clean!r}")
        return clean

    # ----------------------------------------------------------------- status

    async def jupyter_sessions(self) -> dict[str, dict]:
        """Jupyter's notebook sessions by path (:meth:`.Reconciler.jupyter_sessions`)."""
        return await self.reconciler.jupyter_sessions()

    async def sync(self, stopped_at: float | None = None) -> dict[str, dict]:
        """Bring the sessions in line with the kernels that exist now (before each
        operation; never by a read): :meth:`.Reconciler.sync`."""
        return await self.reconciler.sync(stopped_at)

    async def came_back(self, report) -> None:
        """The server has started: after a cold start on a platform, paused
        notebooks wait for Resume from their checkpoints (the store kept them
        paused), or resume by themselves when the backend is so configured."""
        if not report.auto_resume:
            return
        for path, session in list(self.store.sessions.items()):
            if session.schedule and session.schedule["at"] <= self.clock.time():
                continue  # the scheduler resumes it, as scheduled
            if session.state == State.PAUSED:
                self.log.info(
                    "jupyter-pause: resuming %s from its checkpoint after a cold start", path
                )
                try:
                    await self.resume(path)
                except (PauseError, OperationInProgress) as e:
                    self.log.warning("jupyter-pause: could not resume %s: %s", path, e)

    async def status(self) -> dict[str, Any]:
        """Every notebook's state: a pure read (nothing is recorded or saved)."""
        await self.recovered.wait()
        live = await self.jupyter_sessions()
        offering = self.status_index.offering()
        present = await self.catalogue.present(offering) if offering else {}
        sessions = await self.status_index.rows(live, present, can_hibernate=self.hibernator.ready)
        return {
            "backend": self.backend.describe(),
            "hibernate": {"available": self.hibernator.ready, "why_not": self.hibernator.why_not},
            "notice": self.notice.to_json() if self.notice is not None else None,
            "sessions": sessions,
        }

    def operation(self, operation_id: str) -> Operation:
        op = self.operations.get(operation_id)
        if op is None:
            for session in self.store.sessions.values():
                if session.operation and session.operation.id == operation_id:
                    return session.operation
            raise NotFound(f"no operation {operation_id!r}")
        return op

    # ------------------------------------------------------------ operations

    async def _prepare(self, path: str, kind: str) -> tuple[Session, dict[str, dict]]:
        """Common checks before claiming: the kernels as they are now, an
        abandoned operation resolved, single flight, and the state allows it."""
        await self.recovered.wait()
        live = await self.sync()
        session = self.store.sessions.get(path) or Session(path=path)
        await self.recovery.settle_abandoned(session)
        if session.busy:
            raise OperationInProgress(path, session.operation)
        if session.state not in OPERATION_STATES[kind]:
            wanted = {
                "resume": "only a paused notebook resumes",
                "wake": "only a hibernated notebook wakes",
            }.get(kind, "not running")
            raise Conflict(f"{path!r} is {session.state.value}; {wanted}")
        if kind != "resume" and path not in live:
            raise Conflict(f"{path!r} has no running kernel to {kind}")
        if kind not in ("resume", "wake"):
            await self.reconciler.refuse_second_session(path, live[path], kind)
        return session, live

    async def pause(
        self,
        path: str,
        *,
        force: bool = False,
        after_cell: bool = False,
        auto: bool = False,
        resume_at: float | None = None,
        reason: str = "",
        upload_by: float | None = None,
    ) -> Operation:
        """Checkpoint, then release.  ``resume_at`` (epoch seconds) schedules the
        resume at once, so that it survives a server restart during the pause;
        ``reason`` is recorded (the scheduler's re-pause of an unused resume).
        ``upload_by`` (epoch seconds; a stopping server's pause, with a bucket): the
        checkpoint goes to the bucket only if it can before then (:meth:`.BucketSaves.final_save`)."""
        session, live = await self._prepare(path, "pause")
        if not (force or after_cell):
            await self.checkpointer.idle_or_refuse(
                live[path]["kernel"],
                f"the kernel of {path!r} is busy running a cell; wait for it to finish, "
                "or pause with force to interrupt it",
            )
        extra = {"upload_by": upload_by} if upload_by is not None else {}
        op = self._begin(
            path, "pause", force=force, after_cell=after_cell, auto=auto, reason=reason, **extra
        )
        session = self.store.sessions[path]
        session.resumed_ahead = None
        extra = {"reason": reason} if reason else {}
        self.recorder.record(
            EventType.PAUSE_REQUESTED, session, op, auto=auto, force=force, **extra
        )
        if resume_at is not None:
            try:
                self.schedules.set(path, resume_at)
            except PauseError as e:
                self.recorder.fail(session, op, str(e))  # nothing started: the notebook stays free
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

    async def hibernate(
        self, path: str, *, after_cell: bool = False, auto: bool = False
    ) -> Operation:
        """Move the kernel's GPU memory to host memory, its process kept
        (server/hibernate.py); ``after_cell``: once the running cell ends (``%pause
        --hibernate``). Refused at once where the server cannot, or the kernel is busy;
        the operation fails, naming why, where the kernel or its GPU use cannot."""
        if not self.hibernator.ready:
            raise Conflict(f"this server cannot hibernate kernels: {self.hibernator.why_not}")
        session, live = await self._prepare(path, "hibernate")
        if not after_cell:
            await self.checkpointer.idle_or_refuse(
                live[path]["kernel"],
                f"the kernel of {path!r} is busy running a cell: only an idle kernel hibernates",
            )
        op = self._begin(path, "hibernate", after_cell=after_cell, auto=auto)
        self._spawn(self._run_hibernate(self.store.sessions[path], op), op)
        return op

    async def wake(self, path: str, *, by: str = "user") -> Operation:
        """Bring a hibernated kernel's GPU memory back (``by``: who asked, for the
        ledger: ``user``, or ``cell`` when a cell's request woke it)."""
        await self._prepare(path, "wake")
        op = self._begin(path, "wake", by=by)
        self._spawn(self._run_wake(self.store.sessions[path], op), op)
        return op

    def hibernated(self, kernel_id: str) -> bool:
        """Whether code sent to the kernel must wait for a wake (server/wake.py): it is
        hibernated, being hibernated or woken, or a hibernate of it was asked for."""
        session = self.store.of_kernel(kernel_id)
        return session is not None and (
            session.state in HIBERNATION_STATES
            or (session.busy and session.operation.kind == "hibernate")
        )

    async def awake(self, kernel_id: str) -> None:
        """Return once the kernel may run code: at once for a kernel that is not
        hibernated; else after its hibernate under way ends and a wake (started here
        when none runs). :class:`PauseError` (409) with why, when it stays hibernated.

        Called before a client's request that runs code reaches the kernel
        (server/wake.py): a cell never meets a hibernated kernel."""
        await self.recovered.wait()
        woken = False
        while True:
            session = self.store.of_kernel(kernel_id)
            if session is None:
                return
            op = session.operation
            # a hibernate under way, or an operation waking the kernel (a pause or a
            # checkpoint of a hibernated one): the request waits for it
            if session.busy and (
                op.kind in ("hibernate", "wake") or session.state in HIBERNATION_STATES
            ):
                task = self.tasks.of(op.id)
                if task is None:  # another server runs it: its own clients wait on it
                    return
                await asyncio.wait({task})
                continue
            if session.state != State.HIBERNATED:
                return
            if woken:  # the wake ended and the kernel is still hibernated: why
                raise Conflict(session.error or "the kernel could not be woken")
            try:
                await self.wake(session.path, by="cell")
            except OperationInProgress:
                continue  # another request's wake, claimed meanwhile: wait for it
            woken = True

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
        # another server may race for it
        notes = await self.shared.claim_to_resume(path) if self.shared is not None else []
        try:
            exists = await self._notebook_exists(path)
            await self.catalogue.refuse_resume(path, checkpoint_id, notebook_exists=exists)
            if session.busy:  # claimed while we listed (a thread), by another request
                raise OperationInProgress(path, session.operation)
            op = self._begin(path, "resume", checkpoint_id=checkpoint_id, scheduled=scheduled)
        except BaseException:
            if self.shared is not None:
                self.shared.unclaim(path)
            raise
        op.messages.extend(notes)
        session = self.store.sessions[path]
        if scheduled:
            self.recorder.record(EventType.RESUME_REQUESTED, session, op, scheduled=scheduled)
        else:
            self.schedules.cancel(path, "resumed by hand")
            self.recorder.record(EventType.RESUME_REQUESTED, session, op)
        self._spawn(self._run_resume(session, op, checkpoint_id, due or op.started), op)
        return op

    async def prewarm(self, path: str) -> str:
        """Start a spare kernel for a paused notebook (server/prewarm.py); its resume
        adopts it."""
        await self.sync()
        session = self.store.get(path)
        if session.state not in (State.PAUSED, State.FAILED) or session.busy:
            raise Conflict(
                f"{path!r} is {session.state.value}; only a paused notebook gets a spare kernel",
            )
        self._read_ahead(path)
        try:
            return await self.prewarmer.start(path, session.kernel_name)
        except Exception as e:  # e.g. its kernelspec is gone: the resume will say so too
            raise Unavailable(f"could not start a spare kernel for {path!r}: {e}") from e

    def _begin(self, path: str, kind: str, **options: Any) -> Operation:
        """Claim the session (single flight); a claim that cannot be persisted
        is rolled back and refused with 503, and the session stays free."""
        try:
            op = self.store.begin(path, kind, owner=self.tasks.owner, **options)
        except PersistenceError as e:
            raise Unavailable(str(e)) from e
        op.mark(Step.REQUESTED, op.started)
        self.operations[op.id] = op
        return op

    def _read_ahead(self, path: str, chosen=None, fill=None) -> None:
        """Read ahead what a restore will read (server/prewarm.py), as a task of ours."""
        read = self.prewarmer.read_ahead(path, chosen, fill)
        if read is not None:
            self._spawn(read)

    def _spawn(self, coro, op: Operation | None = None) -> None:
        self.tasks.spawn(coro, op.id if op is not None else None)

    # ------------------------------------------------------------ recovery

    async def _notebook_exists(self, path: str) -> bool:
        try:
            return bool(await ensure_async(self.contents_manager.file_exists(path)))
        except Exception:  # the contents manager refuses hidden or outside paths
            return False

    async def recover(self) -> None:
        """At start-up: settle what a previous server left unfinished
        (:meth:`.Recovery.recover`); until then status and operations wait."""
        try:
            await self.recovery.recover()
        finally:
            self.recovered.set()

    def start(self) -> None:
        """Keep the leases of this process's running operations alive."""
        self.recovery.start()

    # ------------------------------------------------------------- pausing

    async def _run_pause(self, session: Session, op: Operation) -> None:
        path = session.path
        try:
            if session.state == State.HIBERNATED and not await self._wake(session, op, "pause"):
                return
            await self.checkpointer.quiesce(session, op)
            activity = self.activity.for_path(path)
            if activity and activity.last_cell_finished:
                self.recorder.record(
                    EventType.ACTIVITY_ENDED, session, op, time_=activity.last_cell_finished
                )
            at_shutdown = op.options.get("reason") == SHUTDOWN_REASON
            final = at_shutdown and self.stager is not None and "upload_by" in op.options
            if self.stager is not None:  # the pause sends the newest state itself
                self.stager.stop(path)
            if not await self.checkpointer.checkpoint(session, op, pause=True, upload=not final):
                return
            if final:
                await self.bucket_saves.final_save(session, op)
            group = [session]
            if self.backend.scope == "server" and not at_shutdown:
                # the accelerator belongs to the pod: every notebook goes with it
                others = await self.checkpointer.others(session, op)
                if others is None:
                    return
                group += others
            if not await self.releaser.release(
                session, group, op, at_shutdown=at_shutdown, final=final
            ):
                return
            self.recorder.finish(session, op)
            after_pause = self.policies.after_pause
            if session.state == State.PAUSED and not at_shutdown and after_pause is not None:
                await after_pause(session)
        except Exception as e:  # a bug or an unexpected platform failure: say so
            self.log.exception("jupyter-pause: pause of %s failed", path)
            self._unexpected(session, op, e)
        finally:
            if session.state != State.PAUSED and session.schedule:
                self.schedules.cancel(path, "the pause did not finish")

    def execution_state(self, kernel_id: str | None) -> str | None:
        """The kernel's execution state, or None when the server has no such kernel."""
        return execution_state(self.kernel_manager, kernel_id)

    async def _run_checkpoint(self, session: Session, op: Operation) -> None:
        try:
            if session.state == State.HIBERNATED and not await self._wake(
                session, op, "checkpoint"
            ):
                return
            previous = session.state
            # on a bucket, a background save is committed here and staged from here
            staged = self.stager is not None and bool(op.options.get("autosave"))
            if await self.checkpointer.checkpoint(session, op, pause=False, upload=not staged):
                self.recorder.move(
                    session, State.RUNNING if previous != State.READY else State.READY, op
                )
                self.recorder.finish(session, op)
                if staged:
                    self._spawn(self.bucket_saves.stage(session))
        except Exception as e:
            self.log.exception("jupyter-pause: checkpoint of %s failed", session.path)
            self._unexpected(session, op, e)

    # ------------------------------------------------------------ hibernating

    async def _run_hibernate(self, session: Session, op: Operation) -> None:
        previous = session.state  # where a refusal, or a later wake, returns it
        try:
            await self.checkpointer.quiesce(session, op)
            self.recorder.move(session, State.HIBERNATING, op, "checking the kernel can hibernate")
            pid = kernel_pid(self.kernel_manager, session.kernel_id)
            if pid is None:
                raise Refused("its process is not one this server started (no pid)")
            km = self.kernel_manager.get_kernel(session.kernel_id)
            facts = HibernationFacts.from_json(await self.call(km, "hibernation_facts", timeout=60))
            gpus = await self.hibernator.check(pid, facts)
            if self.execution_state(session.kernel_id) == "busy":
                raise Refused("a cell started meanwhile: only an idle kernel hibernates")
            op.step = "moving the GPU memory to host memory"
            hibernation = await self.hibernator.hibernate(pid, gpus, back_to=previous.value)
        except (Refused, KernelCallError, PauseError) as e:
            error = f"not hibernated: {e}"
            self.recorder.move(session, previous, op, error=error)
            self.recorder.fail(session, op, error)
            return
        except Stuck as e:
            self._stuck(session, op, f"hibernate failed: {e}")
            return
        except Exception as e:
            self.log.exception("jupyter-pause: hibernate of %s failed", session.path)
            self._unexpected(session, op, e)
            return
        session.hibernation = hibernation.to_json()
        self.recorder.record(
            EventType.GPU_HIBERNATED,
            session,
            op,
            **hibernation.told(),
            auto=bool(op.options.get("auto")),
        )
        self.recorder.move(session, State.HIBERNATED, op)
        self.recorder.finish(session, op)

    async def _run_wake(self, session: Session, op: Operation) -> None:
        try:
            if await self._wake(session, op, op.options.get("by", "user")):
                self.recorder.finish(session, op)
        except Exception as e:
            self.log.exception("jupyter-pause: wake of %s failed", session.path)
            self._unexpected(session, op, e)

    async def _wake(self, session: Session, op: Operation, by: str) -> bool:
        """Wake the session's hibernated kernel as a step of ``op`` (a wake, or the pause
        or checkpoint that needs its GPU memory back); False once ``op`` failed."""
        hibernation = Hibernation.from_json(session.hibernation)
        self.recorder.move(session, State.WAKING, op, "bringing the GPU memory back")
        try:
            seconds = await self.hibernator.wake(hibernation)
        except Refused as e:
            self.recorder.move(session, State.HIBERNATED, op, error=f"not woken: {e}")
            self.recorder.fail(session, op, f"not woken: {e}")
            return False
        except Stuck as e:
            self._stuck(session, op, f"wake failed: {e}")
            return False
        session.hibernation = None
        self.recorder.record(
            EventType.GPU_WOKEN,
            session,
            op,
            seconds=seconds,
            waited=self.clock.time() - op.started,
            gpu_bytes=hibernation.bytes,
            by=by,
        )
        self.recorder.move(session, State(hibernation.back_to), op)
        return True

    def _stuck(self, session: Session, op: Operation, error: str) -> None:
        """The driver left the kernel's process unable to use its GPU: failed, and what
        to do (its last checkpoint, if any, still has its state)."""
        saved = session.last_checkpoint or {}
        then = f"; its checkpoint {saved['id']} can be resumed" if saved.get("id") else ""
        error = f"{error}. Shut the kernel down{then}"
        session.hibernation = None
        self.recorder.move(session, State.FAILED, op, error=error)
        self.recorder.fail(session, op, error)

    # ------------------------------------------------------------- resuming

    async def _run_resume(
        self, session: Session, op: Operation, checkpoint_id: str | None, due: float
    ) -> None:
        """Wait for the machine's turn (server/capacity.py), then resume; the
        session shows ``waiting-for-capacity`` and how many resumes are ahead."""
        self.recorder.move(session, State.RESUMING, op, "asking for compute")
        limit = self.resume_gate.limit

        def report_waiting(ahead: int) -> None:
            resumes = "resume" if ahead == 1 else "resumes"
            step = f"waiting for capacity: {ahead} {resumes} ahead (at most {limit} at a time)"
            if session.state != State.WAITING_FOR_CAPACITY:
                self.recorder.move(session, State.WAITING_FOR_CAPACITY, op, step)
                self.recorder.record(EventType.WAITING_FOR_CAPACITY, session, op, reason=step)
            op.step = step

        async with self.resume_gate.admitted(due, on_wait=report_waiting):
            if session.state == State.WAITING_FOR_CAPACITY:
                self.recorder.record(EventType.CAPACITY_ACQUIRED, session, op)
                self.recorder.move(session, State.RESUMING, op, "asking for compute")
            await self._resume(session, op, checkpoint_id)

    async def _resume(self, session: Session, op: Operation, checkpoint_id: str | None) -> None:
        path = session.path
        # one decision, for all, on the listing the resume made (the bucket is listed once)
        chosen = await self.prewarmer.choose(path, checkpoint_id, synced=True)
        op.mark(Step.CHOSEN, self.clock.time())
        fill = await self.prewarmer.hand_over(path, chosen)  # none for a spare
        self._read_ahead(path, chosen, fill)
        kernel_id = None
        started_here = False
        try:
            waited = False

            def report_waiting(reason: str) -> None:
                nonlocal waited
                if session.state != State.WAITING_FOR_CAPACITY:
                    self.recorder.move(
                        session, State.WAITING_FOR_CAPACITY, op, f"waiting for capacity: {reason}"
                    )
                    self.recorder.record(EventType.WAITING_FOR_CAPACITY, session, op, reason=reason)
                waited = True

            await self.backend.acquire(session, report_waiting)
            if waited:
                self.recorder.record(EventType.CAPACITY_ACQUIRED, session, op)
            kernel_id, started_here = await self.restorer.kernel(session, op)
            await self.restorer.restore(session, op, kernel_id, chosen, fill, checkpoint_id)
            self.recorder.finish(session, op)
        except Exception as e:
            started = kernel_id if started_here else None
            error = await self.restorer.failed(session, op, e, checkpoint_id, fill, started)
            self.recorder.move(session, State.FAILED, op, error=f"resume failed: {error}")
            self.recorder.fail(session, op, f"resume failed: {error}")

    # -------------------------------------------------------------- helpers

    def task(self, operation_id: str) -> asyncio.Task | None:
        """The task that runs the operation in this process, if it runs here."""
        return self.tasks.of(operation_id)

    def _unexpected(self, session: Session, op: Operation, error: Exception) -> None:
        message = f"{op.kind} failed unexpectedly: {error}"
        alive = session.kernel_id and self.execution_state(session.kernel_id) is not None
        if alive and session.state in BUSY_STATES | {State.RUNNING}:
            self.recorder.move(session, State.RUNNING, op, error=message)
        else:
            self.recorder.move(session, State.FAILED, op, error=message)
        self.recorder.fail(session, op, message)

    async def close(self) -> None:
        await self.reconciler.close()
        self.recovery.close()
        self.prewarmer.stop_preparing()
        self.give_up_waiting()
        self.tasks.cancel()
        self.activity.close()
        await self.prewarmer.shutdown()

    def hurry(self, notice) -> None:
        """The platform gave notice that the machine goes soon (server/notice.py): staging
        takes the whole link from now on, and the status says so."""
        self.notice = notice
        if self.stager is not None:
            self.stager.share = 1.0

    def stop(self) -> None:
        """The server stops and saves its notebooks (server/shutdown.py): no new cell
        starts (server/wake.py refuses it), and background staging ends at its next part
        and starts no more (the last saves have the link)."""
        self.stopping = True
        if self.stager is not None:
            self.stager.stop_background()

    def give_up_waiting(self) -> None:
        """The server stops: resumes waiting for capacity end (:meth:`.Recovery.give_up_waiting`)."""
        self.recovery.give_up_waiting()
