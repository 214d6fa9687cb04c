"""Reconcile: what Jupyter's kernels and contents do, brought into the sessions.

Jupyter Server's events (a kernel started or shut down, a notebook renamed), the
activity monitor's (a cell finished) and a kernel's restarter (it died) each move the
notebook's session here, through the :class:`~.recorder.Recorder`, so that the ledger
says when a kernel started or stopped, not when someone looked.  A read (``GET
status``) never reconciles.
"""

from __future__ import annotations

import asyncio
import dataclasses
import posixpath
import re
import time

from ..clock import SYSTEM, Clock
from ..engine import paths as checkpoint_paths
from ..engine.errors import CheckpointError
from ..ledger import EventType
from ..lifecycle import LiveState, LostState, Operation, Session, SessionStore, State, Step
from .activity import ActivityMonitor
from .catalogue import Catalogue
from .classify import WorkloadClassifier
from .errors import Conflict, PauseError
from .prewarm import Prewarmer
from .recorder import Recorder
from .schedules import Schedules

_TEMPORARY_PATH = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def execution_state(kernel_manager, kernel_id: str | None) -> str | None:
    """The kernel's execution state, or None when the server has no such kernel."""
    if kernel_id is None or kernel_id not in kernel_manager:
        return None
    return kernel_manager.get_kernel(kernel_id).execution_state


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


class Reconciler:
    def __init__(
        self,
        *,
        kernel_manager,
        session_manager,
        store: SessionStore,
        recorder: Recorder,
        schedules: Schedules,
        catalogue: Catalogue,
        activity: ActivityMonitor,
        prewarmer: Prewarmer,
        classifier: WorkloadClassifier,
        log,
        clock: Clock = SYSTEM,
    ):
        self.kernel_manager = kernel_manager
        self.clock = clock
        self.session_manager = session_manager
        self.store = store
        self.recorder = recorder
        self.schedules = schedules
        self.catalogue = catalogue
        self.activity = activity
        self.prewarmer = prewarmer
        self.classifier = classifier
        self.log = log
        #: notebooks resumed whose first cell has not run yet
        self._first_cell_pending: set[str] = set()
        #: kernels a server-scope pause handed to the platform with the server (the
        #: Hub or Kubernetes stops them with it): paused notebooks do not adopt them
        self.released_kernels: set[str] = set()
        self._death_watched: set[str] = set()  # kernels whose restarter tells us of a death
        self._tasks: set[asyncio.Task] = set()
        #: kernel-start listeners under way (tasks of Jupyter's event bus, which nobody
        #: awaits): :meth:`close` waits for them, so none is left pending on the loop
        self._listening: set[asyncio.Task] = set()
        self._closed = False
        activity.listeners.append(self.on_activity)

    async def close(self) -> None:
        """The server stops: events are no longer heard, a death being settled ends, and
        the kernel-start listeners under way see it within a moment and end."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._listening:
            await asyncio.wait(set(self._listening), timeout=30)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, kernel_id: str) -> None:
        """A kernel stopped on purpose (a pause): its death is nobody's loss."""
        self._death_watched.discard(kernel_id)

    async def shutdown_kernel(self, kernel_id: str) -> float:
        """Stop a kernel on purpose (a pause, a failed resume's) and wait for its process
        to exit; returns when that was."""
        session = self.store.of_kernel(kernel_id)
        self.activity.unwatch(kernel_id)
        self.forget(kernel_id)
        await self.kernel_manager.shutdown_kernel(kernel_id, now=False)
        stopped = self.clock.time()
        if session:
            self.recorder.record(
                EventType.KERNEL_STOPPED, session, session.operation, kernel_id=kernel_id
            )
        return stopped

    async def jupyter_sessions(self) -> dict[str, dict]:
        """Jupyter's notebook sessions by path (the kernels that exist now).

        JupyterLab first creates a session under a random UUID path and then
        renames it to the notebook's; such a passing name is not a notebook.
        A notebook has one session; should a client have made a second one (a
        tab that started a kernel of its own beside a resume), the notebook's is
        the one whose kernel holds its state: the lifecycle session's kernel.
        """
        by_path: dict[str, dict] = {}
        for model in await self.notebook_sessions():
            path = model["path"]
            ours = self.store.sessions.get(path)
            if path not in by_path or (ours and model["kernel"]["id"] == ours.kernel_id):
                by_path[path] = model
        return by_path

    async def notebook_sessions(self) -> list[dict]:
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
        # the classes of kernels new to their notebooks, read before any session moves:
        # their first row (kernel-started) carries the class
        classes = {}
        for path, model in live.items():
            kernel, known = model["kernel"], self.store.sessions.get(path)
            if kernel["id"] not in self.released_kernels and (
                known is None or known.kernel_id != kernel["id"]
            ):
                policy, _ = await self.classifier.resolve(path, kernel["id"], kernel.get("name"))
                classes[path] = policy.name
        for path, model in list(live.items()):
            session = self.store.get(path)
            kernel = model["kernel"]
            if kernel["id"] in self.released_kernels:
                del live[path]  # paused: it goes with the server, it is nobody's new kernel
                continue
            if session.kernel_id != kernel["id"] and not session.busy:
                # A kernel we did not start: the user started one by hand, or
                # JupyterLab started one when a paused notebook was reopened.
                # A paused notebook stays paused (resume restores into that
                # kernel) until the user runs a cell in it.
                session.kernel_id = kernel["id"]
                session.kernel_name = kernel.get("name")
                session.workload_class = classes.get(path, session.workload_class)
                session.state_checkpoint = None  # an empty kernel, started on purpose
                self.recorder.record(EventType.KERNEL_STARTED, session, None, started_by="user")
                if session.state in (State.PAUSED, State.FAILED):
                    session.live_state = LiveState.FRESH
                if session.state == State.FAILED:
                    self.schedules.cancel(path, "the notebook runs again in a new kernel")
                    self.recorder.move(session, State.RUNNING, None)
                self.recorder.save()
            if not session.busy:
                self.activity.watch(kernel["id"], path)
        for path, session in list(self.store.sessions.items()):
            if session.kernel_id and path not in live and not session.busy:
                self.activity.unwatch(session.kernel_id)
                self.recorder.record(
                    EventType.KERNEL_STOPPED, session, None, time_=stopped_at, stopped_by="user"
                )
                session.kernel_id = None
                if session.state.has_kernel:
                    # shut down outside a pause (by the user, or culled): nothing
                    # left to track; its checkpoints stay for %restore
                    del self.store.sessions[path]
                self.recorder.save()
        return live

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
                for _ in range(50):  # a kernel without a session (a spare) is not waited long
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
            self.kernel_stopped(kernel_id, self.clock.time())

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
                await self.catalogue.in_thread(self.catalogue.move_checkpoints, key, moved)
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
            self.recorder.save()

    def kernel_stopped(self, kernel_id: str, when: float) -> None:
        """A kernel was shut down outside a pause (by the user, or culled):
        nothing is left to track; its checkpoints stay for %restore."""
        session = self.store.of_kernel(kernel_id)
        if session is None or session.busy:
            return  # not ours, or our own pause stopping it (it records the stop itself)
        self.activity.unwatch(kernel_id)
        self.recorder.record(EventType.KERNEL_STOPPED, session, None, time_=when, stopped_by="user")
        session.kernel_id = None
        if session.state.has_kernel:
            del self.store.sessions[session.path]
        self.recorder.save()

    def restore_finished(
        self,
        session: Session,
        op: Operation,
        *,
        ahead: str | None = None,
        timeline: bool = True,
        **facts,
    ) -> None:
        """The session's kernel holds its state again (a resume's restore, or a snapshot's
        process proved to be the paused one): recorded with ``facts``; its activity is
        watched from now, on a clock reset (the wall clock jumped by the whole pause); its
        first cell is awaited; ``ahead``: the kind of schedule that brought it back before
        the user; it is ``ready``, and says so (``timeline``: with the operation's)."""
        self.recorder.record(EventType.RESTORE_FINISHED, session, op, **facts)
        self.activity.watch(session.kernel_id, session.path).reset_clock()
        self._first_cell_pending.add(session.path)
        now = self.clock.time()
        if ahead:
            session.resumed_ahead = {"kind": ahead, "at": now}
        told = {}
        if timeline:
            op.mark(Step.READY, now)
            told = {"timeline": list(op.timeline)}
        self.recorder.move(session, State.READY, op)
        self.recorder.record(EventType.FIRST_CELL_RUNNABLE, session, op, **told)

    def watch_for_death(self, kernel_id: str | None) -> None:
        """Hear from Jupyter's restarter when a kernel whose state a checkpoint holds dies
        outside any operation (an operation's own call hears of it: :meth:`kernel_died`)."""
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
        session = self.store.of_kernel(kernel_id)
        if session is None or session.busy or session.state_checkpoint is None:
            return
        self._spawn(self._state_lost(session, kernel_id, restarted))

    async def _state_lost(self, session: Session, kernel_id: str, restarted: bool) -> None:
        # the restarter tells before it restarts: report the kernel the session really has
        restarted = restarted and await self.restarted(kernel_id)
        if session.busy or session.kernel_id != kernel_id:
            return  # an operation began meanwhile: its own call hears of the death
        holder = session.state_checkpoint
        how = "Jupyter restarted it as a fresh, empty kernel" if restarted else "it is gone"
        session.lost = LostState(why=f"the kernel died ({how})", checkpoint=holder)
        self.recorder.record(EventType.KERNEL_STOPPED, session, None, stopped_by="died")
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
        self.recorder.move(session, State.FAILED, None, error=error)
        self.recorder.save()
        self.log.warning("jupyter-pause: %s: %s", session.path, error)

    async def restarted(self, kernel_id: str, timeout: float = 30) -> bool:
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

    def on_activity(self, path: str, kernel_id: str, event: str, info: dict) -> None:
        if event != "cell-finished":
            return
        session = self.store.sessions.get(path)
        if session is None:
            return
        first = path in self._first_cell_pending
        self._first_cell_pending.discard(path)
        op = session.operation
        resume = op if first and op is not None and op.kind == "resume" else None
        if resume is not None:  # the last step of its timeline
            resume.mark(Step.FIRST_CELL, self.clock.time())
        session.resumed_ahead = None  # the user came back
        if session.state in (State.READY, State.PAUSED):
            # READY: the first cell after a resume ran.  PAUSED: the user chose
            # to work in a fresh kernel instead of resuming.
            if session.state == State.PAUSED:
                self.schedules.cancel(path, "the notebook runs again in a new kernel")
            self.recorder.move(session, State.RUNNING, None)
        self.recorder.record(
            EventType.CELL_EXECUTED,
            session,
            None,
            duration=info.get("duration", 0),
            first_after_resume=first,
            **({"timeline": list(resume.timeline)} if resume is not None else {}),
        )

    async def kernel_died(self, session: Session, op: Operation, how: str, *, report: bool) -> None:
        """The kernel died while it wrote a checkpoint: say so, and name the
        checkpoint that is intact.  If Jupyter restarted it, the session keeps
        the fresh kernel (resume restores into it); nothing is paused."""
        kernel_id = session.kernel_id
        try:
            ids = [c["id"] for c in await self.catalogue.list_checkpoints(session.path)]
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
        self.recorder.record(EventType.CHECKPOINT_FAILED, session, op, error=error, **autosave)
        self.recorder.record(EventType.KERNEL_STOPPED, session, op, stopped_by="died")
        self.activity.unwatch(kernel_id)
        op.step = "waiting for Jupyter to restart the kernel"
        if await self.restarted(kernel_id):
            session.live_state = LiveState.FRESH  # the same kernel id, an empty process
            if session.state_checkpoint:  # its next checkpoint must not push that one out
                session.lost = LostState(
                    why=f"the kernel died during the checkpoint ({how})",
                    checkpoint=session.state_checkpoint,
                )
                self.watch_for_death(kernel_id)
        else:
            session.kernel_id = None
        self.recorder.move(session, State.FAILED, op, error=error)
        if report:
            self.recorder.fail(session, op, error)

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
            raise Conflict(
                f"{path!r} is not restored from checkpoint {damage.checkpoint_id!r} by resume "
                f"{damage.operation_id!r} now: an operation has run since",
            )
        for name, older in sorted(damage.recovered.items()):
            op.messages.append(
                f"{name} was damaged in checkpoint {damage.checkpoint_id}; loaded its copy "
                f"from the older checkpoint {older}, which verifies"
            )
        if damage.lost:
            why = f"damaged in checkpoint {damage.checkpoint_id}, found by the background load"
            before = dict(session.lost.names) if session.lost else {}
            self.recorder.note_lost(
                session, op, {name: "" for name in damage.lost}, "the restored kernel", why=why
            )
            session.lost.names = {**before, **session.lost.names}
        self.recorder.save()
        return op

    async def refuse_second_session(self, path: str, model: dict, kind: str) -> None:
        """A notebook with two Jupyter sessions (a client started a kernel of its own
        beside the one a resume restored into) cannot be paused or checkpointed: one
        of the kernels would be saved and the other left running unseen."""
        others = [
            s
            for s in await self.notebook_sessions()
            if s["path"] == path and s["kernel"]["id"] != model["kernel"]["id"]
        ]
        if others:
            other = others[0]
            raise Conflict(
                f"refusing to {kind} {path!r}: it has two Jupyter sessions, whose kernels "
                f"are {model['kernel']['id']} (the notebook's, holding its state) and "
                f"{other['kernel']['id']} (started beside it by another client, "
                f"session {other['id']}); a {kind} would save only one and leave the other "
                f"running. Shut that session down (DELETE /api/sessions/{other['id']}) "
                f"and {kind} again",
            )

    async def kernel_for_resume(self, session: Session, op: Operation) -> tuple[str, bool]:
        """The kernel a resume restores into, and whether the resume started it (its
        caller records that start).

        One session per notebook: a kernel that a client started for it (before
        this resume, or while it waited) is the one the state is restored into;
        otherwise the resume makes the notebook's session, which open tabs join,
        with the notebook's spare kernel if it has one (server/prewarm.py)."""
        path = session.path
        live = (await self.jupyter_sessions()).get(path)
        if live is not None:
            kernel_id = live["kernel"]["id"]
            if kernel_id != session.kernel_id:
                session.kernel_id = kernel_id
                session.kernel_name = live["kernel"].get("name")
                await self.classifier.classify(session)
                self.recorder.record(EventType.KERNEL_STARTED, session, op, started_by="user")
            await self.prewarmer.discard(path)
            op.mark(
                Step.KERNEL_STARTED,
                self.clock.time(),
                note="the notebook's session's, started before",
            )
            return kernel_id, False
        op.step = "starting a kernel"
        spare = await self.prewarmer.adopt(path)  # started already
        model = await self.session_manager.create_session(
            path=path,
            name=posixpath.basename(path),
            type="notebook",
            kernel_name=session.kernel_name,
            kernel_id=spare,
        )
        op.mark(
            Step.KERNEL_STARTED, self.clock.time(), note="a spare, started before" if spare else ""
        )
        session.kernel_id = model["kernel"]["id"]
        return session.kernel_id, True
