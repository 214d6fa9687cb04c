"""The idle watcher: applies each session's workload class, periodically.

It reads facts from the manager's :class:`~.activity.ActivityMonitor` (user
activity only), asks :func:`jupyter_pause.idle_policy.judge` for a verdict, warns,
and then acts through the manager's normal operations, so an auto-pause is a
pause like any other: checkpoint first, and if that fails nothing is shut
down.

Idleness is measured on the monotonic clock (``clock``): a step of the wall
clock is not idleness.  Wall-clock times are for the reports only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Protocol

from tornado.ioloop import PeriodicCallback

from .. import nvml
from ..clock import SYSTEM, Clock, Instant
from ..idle_policy import ActivityFacts, Verdict, WorkloadClass, judge
from ..ledger import EventType
from ..lifecycle import OperationInProgress, State
from .classify import WorkloadClassifier
from .errors import Conflict, PauseError

#: the states whose idleness the watcher judges: a hibernated kernel is paused once idle
#: for its class's threshold (its pause wakes it first)
WATCHED = (State.RUNNING, State.READY, State.HIBERNATED)


def iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat() if ts else None


class Operations(Protocol):
    """What the watcher asks of the session manager: the only way it acts."""

    async def sync(self) -> Any: ...
    async def jupyter_sessions(self) -> dict[str, dict]: ...
    async def pause(self, path: str, *, auto: bool = False) -> Any: ...
    async def checkpoint(self, path: str) -> Any: ...
    async def hibernate(self, path: str, *, auto: bool = False) -> Any: ...
    def execution_state(self, kernel_id: str | None) -> str | None: ...


class IdleWatcher:
    """Judges idleness from the activity monitor's facts and acts through
    ``operations``; everything it reads is handed to it."""

    def __init__(
        self,
        *,
        operations: Operations,
        store,
        activity,
        ledger,
        kernel_manager,
        classifier: WorkloadClassifier,
        interval: float,
        log,
        clock: Clock = SYSTEM,
    ):
        self.operations = operations
        self.store = store
        self.activity = activity
        self.ledger = ledger
        self.kernel_manager = kernel_manager
        self.classifier = classifier
        self.interval = interval
        self.log = log
        self.clock = clock
        self._warned: set[str] = set()
        self._auto_checkpointed: dict[str, Instant] = {}
        #: each notebook's last automatic hibernate (None: refused at once) and its last
        #: activity then
        self._hibernates: dict[str, tuple[Any, Instant]] = {}
        self._gpu_cache: dict[str, tuple[float, float | None]] = {}  # kernel id -> (monotonic, %)
        self._callback: PeriodicCallback | None = None

    def start(self) -> None:
        self._callback = PeriodicCallback(self.check, self.interval * 1000)
        self._callback.start()

    def stop(self) -> None:
        if self._callback is not None:
            self._callback.stop()

    # ---------------------------------------------------------------- facts

    def verdict(self, session, policy: WorkloadClass, now: float | None = None) -> Verdict | None:
        """``now``: on the monotonic clock."""
        activity = self.activity.for_path(session.path)
        if activity is None or not session.kernel_id:
            return None
        now = self.clock.monotonic() if now is None else now
        kernel_busy = self.operations.execution_state(session.kernel_id) == "busy"
        pid = None
        if policy.gpu_utilization_counts:
            try:
                pid = self.kernel_manager.get_kernel(session.kernel_id).provisioner.pid
            except Exception:
                pid = None
        facts = ActivityFacts(
            now=now,
            started=activity.started.monotonic,
            last_user_activity=activity.last_user_activity.monotonic,
            busy=activity.busy or kernel_busy,
            gpu_utilization=self._gpu_utilization(session.kernel_id, pid, now)
            if policy.gpu_utilization_counts
            else None,
        )
        return judge(facts, policy)

    def _gpu_utilization(self, kernel_id: str, pid: int | None, now: float) -> float | None:
        """NVML's reading, at most once per check interval per kernel: the status
        endpoint is polled by every open tab and must stay cheap."""
        cached = self._gpu_cache.get(kernel_id)
        if cached is None or now - cached[0] >= self.interval:
            cached = self._gpu_cache[kernel_id] = (now, nvml.utilization(pid))
        return cached[1]

    # -------------------------------------------------------------- acting

    async def check(self) -> None:
        """One round: warn, then act on sessions whose time has come."""
        await self.operations.sync()
        for path, session in list(self.store.sessions.items()):
            if session.busy or session.state not in WATCHED or not session.kernel_id:
                self._warned.discard(path)
                continue
            policy, _ = await self.classifier.classify(session)
            verdict = self.verdict(session, policy)
            if verdict is None:
                continue
            if verdict.warn and path not in self._warned:
                self._warned.add(path)
                self.ledger.record(
                    EventType.AUTO_PAUSE_WARNED,
                    path=path,
                    kernel_id=session.kernel_id,
                    workload_class=policy.name,
                    seconds_left=verdict.seconds_left,
                    action=policy.action,
                )
            elif not verdict.warn and not verdict.act:
                self._warned.discard(path)
            if verdict.act:
                await self._act(session, policy)
            elif verdict.hibernate and session.state != State.HIBERNATED:
                await self._hibernate(session, policy)

    async def _act(self, session, policy: WorkloadClass) -> None:
        path = session.path
        activity = self.activity.for_path(path)
        self._warned.discard(path)
        try:
            if policy.action == "pause":
                self.log.info(
                    "jupyter-pause: auto-pausing idle notebook %s (class %s)", path, policy.name
                )
                await self.operations.pause(path, auto=True)
            elif policy.action == "checkpoint":
                if self._auto_checkpointed.get(path) == activity.last_user_activity:
                    return  # nothing happened since the last automatic checkpoint
                self._auto_checkpointed[path] = activity.last_user_activity
                await self.operations.checkpoint(path)
        except (PauseError, OperationInProgress) as e:
            self.log.info("jupyter-pause: auto-%s of %s skipped: %s", policy.action, path, e)
            activity.reset_clock()  # try again one threshold later, not every round

    async def _hibernate(self, session, policy: WorkloadClass) -> None:
        """The class's first step: hibernate in place. Once refused (at once, or by its
        operation: the kernel uses what cannot be hibernated, say), not again until the
        notebook has been used."""
        path = session.path
        since = self.activity.for_path(path).last_user_activity
        last = self._hibernates.get(path)
        if (
            last is not None
            and last[1] == since
            and (last[0] is None or last[0].outcome == "failed")
        ):
            return
        self.log.info("jupyter-pause: hibernating idle notebook %s (class %s)", path, policy.name)
        try:
            self._hibernates[path] = (await self.operations.hibernate(path, auto=True), since)
        except (PauseError, OperationInProgress) as e:
            self.log.info("jupyter-pause: auto-hibernate of %s skipped: %s", path, e)
            self._hibernates[path] = (None, since)

    def postpone(self, path: str) -> float:
        """ "Keep running": the idle clock starts again now."""
        activity = self.activity.for_path(path)
        if activity is None:
            raise Conflict(f"{path!r} has no running kernel")
        activity.reset_clock()
        self._warned.discard(path)
        session = self.store.get(path)
        self.ledger.record(
            EventType.AUTO_PAUSE_POSTPONED,
            path=path,
            kernel_id=session.kernel_id or "",
            workload_class=session.workload_class or "",
            until=activity.last_user_activity.wall,
        )
        return activity.last_user_activity.wall

    # ------------------------------------------------------------ reporting

    async def auto_pause_status(self, session) -> dict[str, Any] | None:
        """The ``auto_pause`` field of a session in ``GET status``."""
        if session.state not in WATCHED or not session.kernel_id:
            return None
        policy, _ = await self.classifier.classify(session)
        verdict = self.verdict(session, policy)
        if verdict is None or verdict.seconds_left is None or not verdict.idle:
            return None
        return {
            "seconds_left": verdict.seconds_left,
            "workload_class": policy.name,
            "action": policy.action,
            # a warning stands only while the verdict still warns (a cell seen
            # since restarted the clock, even if the next check has not run)
            "warning": verdict.warn and session.path in self._warned,
        }

    async def report(self) -> dict[str, Any]:
        """``GET activity``: per session and server-wide, with the reasons.

        A read: it records and saves nothing.  Jupyter's kernel events and each
        :meth:`check` bring the sessions in line with the kernels; until they have, a
        session whose kernel is gone is left out, as is a kernel no session holds yet."""
        live = await self.operations.jupyter_sessions()
        now = self.clock.monotonic()
        sessions = []
        for path, session in sorted(self.store.sessions.items()):
            kernel = (live.get(path) or {}).get("kernel") or {}
            if not session.kernel_id or kernel.get("id") != session.kernel_id:
                continue
            policy, source = await self.classifier.classify(session)
            verdict = self.verdict(session, policy, now)
            activity = self.activity.for_path(path)
            if verdict is None or activity is None:
                continue
            sessions.append(
                {
                    "path": path,
                    "kernel_id": session.kernel_id,
                    "state": session.state.value,
                    "workload_class": policy.name,
                    "workload_class_source": source,
                    "policy": policy.to_json(),
                    "busy": not verdict.idle,
                    "idle": verdict.idle,
                    "idle_seconds": verdict.idle_seconds,
                    "last_activity": iso(activity.last_user_activity.wall),
                    "reasons": verdict.reasons,
                    "seconds_left": verdict.seconds_left,
                    "warning": path in self._warned,
                }
            )
        last = max(
            (self.activity.for_path(s["path"]).last_user_activity for s in sessions),
            default=None,
            key=lambda instant: instant.monotonic,
        )
        busy = any(s["busy"] for s in sessions)
        server = {
            "idle": not busy,
            "idle_seconds": 0.0 if busy or last is None else now - last.monotonic,
            "last_activity": iso(last.wall) if last else None,
            "reason": (
                "a kernel is busy"
                if busy
                else ("no running kernels" if not sessions else "every kernel is idle")
            ),
        }
        return {"server": server, "sessions": sessions}
