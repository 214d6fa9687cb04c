"""Leases and start-up recovery: no notebook is ever stuck in an operation nobody runs.

Every operation holds a lease (its owner, this process, and a heartbeat renewed every
``LEASE_INTERVAL`` seconds).  At start-up, and whenever a claim meets an operation whose
owner is gone (judged on the monotonic clock once seen,
:class:`~jupyter_pause.clock.StampAges`), the operation is settled from the truth on
disk (was its checkpoint committed?) and in the kernels (is the kernel alive?).
A process a platform restored from a snapshot proves that its kernels are the very
ones that were paused (their nonces) before it reports them ready.
"""

from __future__ import annotations

import asyncio
import os
import socket

from ..clock import Clock, StampAges
from ..ledger import EventType
from ..lifecycle import (
    LEASE_INTERVAL,
    LEASE_TIMEOUT,
    InvalidTransition,
    LiveState,
    LostState,
    Operation,
    Session,
    SessionStore,
    State,
)
from ..processes import pid_alive
from .activity import ActivityMonitor
from .catalogue import Catalogue
from .errors import PauseError
from .kernels import KernelCallError
from .reconcile import Reconciler, execution_state
from .recorder import Recorder
from .schedules import Schedules
from .tasks import Tasks

#: why a notebook's state is lost when its kernel stopped with the server, no pause
SERVER_STOPPED_UNDER_IT = "the server stopped under the kernel, without a pause"
#: seconds before its time a snapshot-restored pod still counts as brought back by its
#: schedule (a CronJob's minute); earlier, the user resumed it by hand
SCHEDULE_SLACK = 60.0


class Recovery:
    def __init__(
        self,
        *,
        tasks: Tasks,
        call,
        kernel_manager,
        store: SessionStore,
        recorder: Recorder,
        catalogue: Catalogue,
        activity: ActivityMonitor,
        schedules: Schedules,
        reconciler: Reconciler,
        clock: Clock,
        log,
    ):
        #: this process's operations under way, and the owner their leases name
        self.tasks = tasks
        self.kernel_manager = kernel_manager
        self.store = store
        self.recorder = recorder
        self.catalogue = catalogue
        self.activity = activity
        self.schedules = schedules
        self.reconciler = reconciler
        #: how to run a kernel_ops function in a kernel (a fake in unit tests)
        self.call = call
        self.log = log
        #: how long the leases of owners elsewhere went unrenewed (by path)
        self.clock = clock
        self._lease_ages = StampAges(clock)
        self.resolving: set[str] = set()  # abandoned operations being settled now
        self._heartbeat: asyncio.Task | None = None

    def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()

    def abandoned(self, session: Session) -> bool:
        """Whether the session's running operation has nobody left to finish it:
        this process without a task for it (a task that ended without
        finishing it), a server process on this machine that no longer exists,
        or an owner elsewhere whose lease expired: unrenewed for
        ``LEASE_TIMEOUT`` seconds, read on the wall clock when this process
        first saw the heartbeat and on the monotonic clock since, so that a
        step of this machine's wall clock neither kills a live owner's lease
        nor keeps a dead one's forever."""
        op = session.operation
        if op.owner == self.tasks.owner:
            return self.tasks.of(op.id) is None
        host, _, rest = op.owner.partition(":")
        pid = rest.partition(":")[0]
        if host == socket.gethostname() and pid.isdigit():
            return int(pid) == os.getpid() or not pid_alive(int(pid))
        return self._lease_ages.age(session.path, op.heartbeat) > LEASE_TIMEOUT

    async def recover(self) -> None:
        """At start-up: resolve every operation a previous server left running,
        and clean the temp folders of checkpoint writers that died with it."""
        for session in self.store.unfinished(self.tasks.owner):
            if self.abandoned(session):
                await self.resolve(session, "the server stopped during it")
        for session in list(self.store.sessions.values()):
            self._kernel_gone_with_server(session)
        await self._kernels_gone()
        await self.catalogue.in_thread(self.catalogue.clean_dead_writers)

    def _kernel_gone_with_server(self, session: Session) -> None:
        """A notebook a previous server left ``ready`` or ``running`` after a resume (whose
        background load may not have finished): if its kernel survived, it is adopted as
        it is; if it stopped with the server, the notebook is ``paused`` again on the
        checkpoint its state came from, which a resume restores."""
        holder = session.state_checkpoint or (session.last_checkpoint or {}).get("id")
        resumed = session.restored_from is not None
        if session.busy or not session.state.has_kernel or not resumed or holder is None:
            return
        if (
            session.kernel_id is not None
            and execution_state(self.kernel_manager, session.kernel_id) is not None
        ):
            return  # it survived: adopted
        if session.kernel_id:
            self.activity.unwatch(session.kernel_id)
            self.recorder.record(
                EventType.KERNEL_STOPPED, session, None, stopped_by="server-stopped"
            )
        session.kernel_id = None
        session.live_state = LiveState.UNKNOWN
        session.resumed_ahead = None
        session.lost = LostState(why=SERVER_STOPPED_UNDER_IT, checkpoint=holder)
        error = (
            "the server stopped and the kernel with it (anything not saved since is lost); "
            f"the notebook is paused on checkpoint {holder}, where its state came from: "
            "resume to restore it"
        )
        self.recorder.move(session, State.PAUSED, None, error=error)
        self.recorder.save()
        self.log.warning("jupyter-pause: %s: %s", session.path, error)

    async def _kernels_gone(self) -> None:
        """At start-up: a notebook the previous server left running, its kernel gone
        with it (a SIGKILL, a crash, a shutdown that could not save it), says so at
        once, ``failed`` with the checkpoints it can resume from, instead of
        ``running`` without a kernel until the next reconcile."""
        for session in list(self.store.sessions.values()):
            if session.busy or not session.kernel_id or session.kernel_id in self.kernel_manager:
                continue
            self.recorder.record(
                EventType.KERNEL_STOPPED, session, None, stopped_by="server-stopped"
            )
            self.activity.unwatch(session.kernel_id)
            session.kernel_id = None
            if not session.state.has_kernel:
                self.recorder.save()
                continue
            if session.state_checkpoint:  # a checkpoint still has the state it held
                session.lost = LostState(
                    why=SERVER_STOPPED_UNDER_IT, checkpoint=session.state_checkpoint
                )
            try:
                ids = [c["id"] for c in await self.catalogue.list_checkpoints(session.path)]
            except PauseError:
                ids = []
            offer = (
                f"resume to restore checkpoint {ids[0]}"
                if ids
                else "there is no checkpoint to resume from"
            )
            self.recorder.move(
                session,
                State.FAILED,
                None,
                error=(
                    "the server stopped and this notebook's kernel with it, without a pause: "
                    f"its state since the last checkpoint is lost; {offer}"
                ),
            )

    async def settle_abandoned(self, session: Session) -> None:
        """Before an operation on ``session``: one under way that nobody is left to finish
        (:meth:`abandoned`) is resolved first, unless it is being resolved now."""
        if session.busy and self.abandoned(session) and session.operation.id not in self.resolving:
            await self.resolve(session, "its server stopped, or its lease expired")

    async def resolve(self, session: Session, why: str) -> None:
        """End an abandoned operation with the truth: was its checkpoint committed
        (the manifest carries the operation's id), is the kernel alive?"""
        op = session.operation
        self.resolving.add(op.id)  # a second request meanwhile gets 409, not a second resolve
        try:
            await self._settle(session, op, why)
        finally:
            self.resolving.discard(op.id)

    async def _settle(self, session: Session, op: Operation, why: str) -> None:
        path = session.path
        alive = (
            session.kernel_id is not None
            and execution_state(self.kernel_manager, session.kernel_id) is not None
        )
        try:
            listing = await self.catalogue.in_thread(self.catalogue.listing, path, private=True)
        except PauseError:  # the bucket does not answer: what this machine has still counts
            try:
                listing = await self.catalogue.in_thread(
                    self.catalogue.listing, path, private=True, here_only=True
                )
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
                "time": self.clock.time(),
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
        elif op.kind in ("hibernate", "wake") and alive:
            # the driver may have left the process locked, or its GPU memory on the host,
            # and the helper that knew ended with its server
            to, error = (
                State.FAILED,
                f"{said}: whether the kernel's GPU memory is on the GPU or in host memory is "
                "unknown (its CUDA calls may wait for ever). Shut the kernel down"
                + (f"; checkpoints you can resume from: {', '.join(ids)}" if ids else ""),
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
            before = (
                "" if op.kind in ("hibernate", "wake") else " before its checkpoint was committed"
            )
            to, error = (
                State.FAILED,
                f"{said}{before}, and the kernel stopped with it: its unsaved state is lost. {offer}",
            )
        try:
            self.recorder.move(session, to, op, error=error)
        except InvalidTransition:
            self.recorder.move(session, State.FAILED, op, error=error or said)
        if error:
            self.recorder.fail(session, op, error)
        else:
            if op.kind == "pause":
                self.recorder.record(EventType.PAUSED, session, op)
            self.recorder.finish(session, op)
        self.log.warning("jupyter-pause: %s %s", path, error or op.messages[-1])

    def give_up_waiting(self) -> None:
        """The server stops: a resume still waiting for capacity has started no
        kernel and restored nothing, so its notebook is paused, and says so."""
        for session in self.store.sessions.values():
            op = session.operation
            if (
                session.busy
                and op.owner == self.tasks.owner
                and session.state == State.WAITING_FOR_CAPACITY
            ):
                error = (
                    "the server stopped while this resume waited for capacity: nothing was "
                    "restored and the checkpoints are intact; resume again"
                )
                self.recorder.move(session, State.PAUSED, op, error=error)
                self.recorder.fail(session, op, error)
                task = self.tasks.of(op.id)
                if task is not None:  # never admitted later, while the server stops
                    task.cancel()

    def start(self) -> None:
        """Keep the leases of this process's running operations alive."""
        self._heartbeat = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(LEASE_INTERVAL)
            now = self.clock.time()
            mine = [
                s.operation
                for s in self.store.sessions.values()
                if s.busy and s.operation.owner == self.tasks.owner
            ]
            for op in mine:
                op.heartbeat = now
            if mine:
                self.recorder.save()  # on the loop: the sessions must not change while serialised

    async def came_back_live(self, session: Session, op: Operation) -> None:
        """After a platform snapshot restore: the kernels are the very processes
        that were paused; prove it with their nonces and report ready."""
        self.recorder.record(EventType.RESUME_REQUESTED, session, op, restored_from="snapshot")
        self.recorder.move(session, State.RESUMING, op)
        self.recorder.move(session, State.RESTORING, op, "checking the restored kernels")
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
            ahead = None
            if session.schedule and session.schedule["at"] <= self.clock.time() + SCHEDULE_SLACK:
                # the platform's scheduler brought the pod back, as scheduled
                schedule, session.schedule = session.schedule, None
                ahead = schedule.get("kind") or "scheduled"
                self.recorder.record(
                    EventType.SCHEDULED_RESUME_STARTED, session, op, at=schedule["at"], kind=ahead
                )
            elif session.schedule:  # brought back before its time: by hand
                self.schedules.cancel(session.path, "resumed by hand")
            self.reconciler.restore_finished(
                session, op, ahead=ahead, timeline=False, restored_from="snapshot"
            )
        else:
            # the snapshot did not bring this kernel back: the checkpoint will
            error = "the snapshot did not bring the kernel back; resume from the checkpoint"
            self.recorder.record(
                EventType.RESTORE_FAILED, session, op, error=error, restored_from="snapshot"
            )
            session.kernel_id = None
            session.live_state = LiveState.UNKNOWN
            self.recorder.move(session, State.PAUSED, op)
