"""The resume scheduler: fires schedules, predicts returns, re-pauses unused resumes.

Three duties, each through the manager's normal operations (so a scheduled
resume is a resume like any other: it waits for capacity the same way, and
single flight means it never competes with a restore under way):

* **fire**: a paused notebook whose schedule is due is resumed
  (:meth:`ResumeScheduler.fire`).  Schedules live in the session
  store, so one that fell due while the server was down fires at start-up:
  this is how a JupyterHub server or a Kubernetes pod started at the
  scheduled time finds its notebooks and brings them back;
* **predict** (opt-in per workload class, ``predict_resume``): when a
  notebook has just been paused, predict its user's return from the ledger
  (:mod:`jupyter_pause.prediction`) and, when the prediction is confident
  enough, schedule a ``predicted`` resume ahead of it by the measured resume
  latency plus the class's margin;
* **re-pause**: a predicted resume nobody used within the class's
  ``predict_unused_after`` is paused again (``predicted-resume-unused``); it
  cost only the hours it held.

Due times are on the wall clock, which can jump (NTP, a VM resumed from
suspend, a laptop lid): the sleep until the next one is re-armed from the wall
clock every :data:`REARM` seconds, so after a jump forward what fell due fires
within seconds, and after a jump back nothing fires early.  How long a
predicted resume went unused is a duration, measured on the monotonic clock
once seen (:class:`~jupyter_pause.clock.StampAges`).

The clock is injectable (``clock``, and ``now`` on :meth:`check`), so tests
move and step time instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from datetime import tzinfo
from typing import Any, Protocol

from ..clock import SYSTEM, Clock, StampAges
from ..idle_policy import WorkloadClass
from ..ledger import EventType, Ledger
from ..lifecycle import OperationInProgress, Session, SessionStore, State
from ..prediction import (
    MIN_SAMPLES,
    UNUSED_REASON,
    measured_resume_latency,
    predict_return,
    resume_ahead_time,
    returns_from_events,
)
from .errors import PauseError
from .schedules import Schedules

#: the resume latency assumed before the ledger has measured one (seconds)
DEFAULT_RESUME_LATENCY = 60.0
#: how far back the predictor reads the ledger
HISTORY = 8 * 7 * 86400.0
#: the longest the scheduler sleeps without reading the wall clock again (seconds)
REARM = 1.0


class Operations(Protocol):
    """What the scheduler asks of the session manager: the only way it acts."""

    recovered: asyncio.Event

    async def resume(self, path: str, *, scheduled: str | None, due: float | None) -> Any: ...
    async def pause(self, path: str, *, auto: bool = False, reason: str = "") -> Any: ...


#: ``async (session) -> (WorkloadClass, source)``: the class a notebook runs under
WorkloadClassOf = Callable[[Session], Awaitable[tuple[WorkloadClass, str]]]


class ResumeScheduler:
    """Runs beside the manager; it acts only through ``operations`` and ``schedules``."""

    def __init__(
        self,
        *,
        operations: Operations,
        schedules: Schedules,
        store: SessionStore,
        ledger: Ledger,
        log,
        workload_class: WorkloadClassOf | None = None,
        interval: float = 30.0,
        clock: Clock = SYSTEM,
        tz: tzinfo | None = None,
    ):
        self.operations = operations
        self.schedules = schedules
        self.store = store
        self.ledger = ledger
        self.log = log
        #: the session's workload class (the idle watcher's; None when auto-pause is off)
        self.workload_class = workload_class
        self.interval = interval
        self.clock = clock
        self.tz = tz
        self._unused_for = StampAges(clock)  # how long predicted resumes wait, by path
        self._wake = schedules.changed  # a schedule was set or cancelled
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Cancel the loop and wait for it to end (no task left pending at shutdown)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        await self.operations.recovered.wait()
        while True:
            try:
                await self.check()
            except Exception:  # one bad round must not end the scheduling
                self.log.exception("jupyter-pause: the resume scheduler's check failed")
            self._wake.clear()
            await self._sleep()

    async def _sleep(self) -> None:
        """Until the next schedule falls due (on the wall clock as it reads
        now, at most every ``REARM`` seconds), a schedule changes, or
        ``interval`` passed."""
        deadline = self.clock.monotonic() + self.interval
        while True:
            left = max(0.05, min(deadline - self.clock.monotonic(), self._until_due()))
            try:
                await asyncio.wait_for(self._wake.wait(), min(left, REARM))
                return  # a schedule was set or cancelled
            except asyncio.TimeoutError:
                if left <= REARM:
                    return

    def _until_due(self) -> float:
        now = self.clock.time()
        due = [s.schedule["at"] for s in self.store.sessions.values() if s.schedule]
        return min(due, default=math.inf) - now

    # -------------------------------------------------------------- a round

    async def check(self, now: float | None = None) -> None:
        now = self.clock.time() if now is None else now
        # due schedules fire in the order they fell due: their resumes queue in that order
        sessions = sorted(
            self.store.sessions.items(),
            key=lambda item: item[1].schedule["at"] if item[1].schedule else math.inf,
        )
        for path, session in sessions:
            if session.busy:
                continue  # a pause under way keeps its schedule; a resume has no use for one
            if session.schedule and session.state.has_kernel:
                # a pause that did not finish, resolved at start-up as running
                self.schedules.cancel(path, "the notebook is running")
            elif session.schedule and session.schedule["at"] <= now:
                self.log.info("jupyter-pause: resuming %s as scheduled", path)
                await self.fire(path)
            elif (
                session.state == State.READY
                and (session.resumed_ahead or {}).get("kind") == "predicted"
            ):
                await self._pause_if_unused(session, now)

    async def fire(self, path: str) -> Any:
        """Start the resume a due schedule asks for.

        The schedule is used up either way; a resume that cannot start (the
        notebook was deleted, has no checkpoint, a resume runs already)
        cancels it with the reason, and nothing else is started: a schedule
        never competes with a restore under way.
        """
        session = self.store.sessions.get(path)
        if session is None or not session.schedule:
            return None
        if session.busy:
            self.schedules.cancel(path, f"a {session.operation.kind} was under way")
            return None
        schedule = self.schedules.take(session)
        kind = schedule.get("kind") or "scheduled"
        try:
            return await self.operations.resume(path, scheduled=kind, due=schedule["at"])
        except (PauseError, OperationInProgress) as e:
            self.schedules.record_cancel(session, schedule, f"could not start: {e}")
            self.log.warning("jupyter-pause: the scheduled resume of %s did not start: %s", path, e)
            return None

    async def _pause_if_unused(self, session, now: float) -> None:
        policy = await self._policy(session)
        held = self._unused_for.age(session.path, float(session.resumed_ahead.get("at") or now))
        if held < policy.predict_unused_after:
            return
        self.ledger.record(
            EventType.PREDICTED_RESUME_UNUSED,
            path=session.path,
            kernel_id=session.kernel_id or "",
            workload_class=session.workload_class or "",
            held_seconds=held,
        )
        self.log.info(
            "jupyter-pause: nobody used the predicted resume of %s for %.0f s: pausing it again",
            session.path,
            held,
        )
        try:
            await self.operations.pause(session.path, auto=True, reason=UNUSED_REASON)
        except (PauseError, OperationInProgress) as e:
            self.log.info("jupyter-pause: could not pause %s again: %s", session.path, e)

    # ------------------------------------------------------------ predicting

    async def _policy(self, session) -> WorkloadClass:
        if self.workload_class is None:  # auto-pause off: the defaults, no prediction
            return WorkloadClass(name="default")
        policy, _ = await self.workload_class(session)
        return policy

    async def predict(self, session) -> None:
        """After a pause: schedule a predicted resume when the class opts in,
        no schedule was asked for, and the prediction is confident enough."""
        if session.schedule or session.state != State.PAUSED:
            return
        if session.operation and session.operation.options.get("reason") == UNUSED_REASON:
            return  # the user has not come back since the last prediction: no new one
        policy = await self._policy(session)
        if not policy.predict_resume:
            return
        now = self.clock.time()
        events = self.ledger.events(since=now - HISTORY)
        history = returns_from_events(events).get(session.path, [])
        prediction = predict_return(history, now, tz=self.tz)
        if prediction is None or prediction.confidence < policy.predict_min_confidence:
            self.log.info(
                "jupyter-pause: no predicted resume for %s (%s)",
                session.path,
                f"not enough history yet: {len(history)} past return(s) recorded, a prediction "
                f"needs {MIN_SAMPLES} after pauses on the same kind of day at about this hour"
                if prediction is None
                else f"confidence {prediction.confidence:.2f} < {policy.predict_min_confidence}",
            )
            return
        latency = measured_resume_latency(events) or DEFAULT_RESUME_LATENCY
        at = resume_ahead_time(prediction, latency, policy.predict_margin)
        if at <= now:
            return  # the user is expected back sooner than a resume takes
        try:
            self.schedules.set(
                session.path,
                at,
                kind="predicted",
                by="prediction",
                confidence=round(prediction.confidence, 3),
            )
        except PauseError as e:
            self.log.warning("jupyter-pause: could not schedule %s: %s", session.path, e)
