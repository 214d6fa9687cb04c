"""Which idle threshold is worth it?  A discrete-event simulation.

The model (also in ``docs/accounting.md``; every assumption is a parameter
or stated here):

1. **Sessions** come from a trace (:mod:`.traces`).  Each needs ``gpus``
   accelerators from ``start`` to ``end`` unless paused.  An always-on
   allocation holds them for the whole span.
2. **Idle detection**: the idle clock starts when an active interval ends
   (or when a resume finishes, if later).  If the gap to the next active
   interval (or to the session end) is longer than the threshold, an
   auto-pause is requested exactly ``threshold`` after the idle clock started.
   Gaps no longer than the threshold never pause.
3. **Pausing** takes ``pause_s = pause_overhead_s + state_gb / write_gbps``;
   the accelerator stays allocated while the snapshot is written, then goes
   back to the pool.
4. **Returning**: the user comes back at the start of the next active
   interval and requests a resume (if the pause is still being written, the
   request waits for it).  Requests queue FIFO for the **pool** of
   ``pool`` accelerators (``None``: unlimited); a request needing ``g``
   accelerators waits at the head of the queue until ``g`` are free (no
   overtaking).  Once assigned, the accelerator is allocated and the resume
   takes ``capacity wait + restore_s`` where the capacity wait is drawn from
   a discrete distribution (node provisioning, image pull; seeded per
   session) and ``restore_s = resume_overhead_s + state_gb / read_gbps``.
5. **Waiting**: user waiting time is resume request -> runnable (pool queue
   + capacity wait + restore).  Waiting does **not** shift the user's later
   activity (the trace is replayed as recorded; the idle clock restarts at
   the later of the interval's end and the resume's end).  Session starts
   also queue for the pool (reported separately as start waits: with a pool
   smaller than the number of sessions, "never pause" leaves some users
   waiting for their first accelerator).
6. **Released accelerator-hours**: from the end of a pause (accelerator back
   in the pool) until the user asks for it back (or the session ends), times
   ``gpus``.  Time queued after asking is waiting, not a saving.  This is an
   upper bound on savings: a node that stays up for other pods may still
   cost money.
7. **Interruptions**: pauses whose user came back within
   ``interruption_minutes`` (default 10) of the pause request; **short
   breaks paused**: pauses of gaps shorter than ``short_break_minutes``
   (default 120: lunch and meetings, not nights).
8. **Recommendation**: among thresholds whose waiting for an accelerator
   (resumes and session starts) per active user-day is within the budget
   (minutes), the one with the most released accelerator-hours (ties: the
   longer threshold, i.e. fewer interruptions).  An active user-day is a
   (user, UTC day) pair with any activity.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from ..formatting import parse_duration, text_table
from ..prediction import Return, predict_return, resume_ahead_time
from ..report import svg
from ..report.build import quantile
from .traces import Trace, TraceSession

HOUR = 3600.0


@dataclass
class Costs:
    """Snapshot and restore costs (defaults: a 3B-parameter model session)."""

    state_gb: float = 8.0  # what a pause writes and a resume reads
    write_gbps: float = 0.5
    read_gbps: float = 0.5
    pause_overhead_s: float = 10.0
    resume_overhead_s: float = 20.0
    # (seconds, probability) pairs; the probabilities are normalised.
    capacity_wait: list[tuple[float, float]] = field(default_factory=lambda: [(0.0, 1.0)])

    @property
    def pause_s(self) -> float:
        return self.pause_overhead_s + (self.state_gb / self.write_gbps if self.state_gb else 0.0)

    @property
    def restore_s(self) -> float:
        return self.resume_overhead_s + (self.state_gb / self.read_gbps if self.state_gb else 0.0)

    def median_capacity_wait(self) -> float:
        """The capacity wait that half the draws stay within: what a planner expects."""
        total = sum(p for _, p in self.capacity_wait)
        if total <= 0:
            return self.capacity_wait[0][0] if self.capacity_wait else 0.0
        seen = 0.0
        for seconds, p in sorted(self.capacity_wait):
            seen += p
            if seen >= total / 2:
                return seconds
        return max(s for s, _ in self.capacity_wait)  # pragma: no cover - rounding

    def draw_capacity_wait(self, rng: random.Random) -> float:
        total = sum(p for _, p in self.capacity_wait)
        if len(self.capacity_wait) == 1 or total <= 0:
            return self.capacity_wait[0][0] if self.capacity_wait else 0.0
        x = rng.random() * total
        for seconds, p in self.capacity_wait:
            x -= p
            if x < 0:
                return seconds
        return self.capacity_wait[-1][0]


@dataclass
class ThresholdResult:
    threshold_s: float | None  # None: never pause
    allocated_h: float
    released_h: float
    always_on_h: float
    active_h: float
    pauses: int
    interruptions: int
    short_breaks_paused: int
    resumes: int
    wait_h: float  # resume waiting (request -> runnable), all users
    wait_min_per_user_day: float  # all waiting for an accelerator (resumes + starts) per user-day
    wait_median_s: float | None
    wait_p95_s: float | None
    wait_max_s: float | None
    queued_resumes: int  # resumes that waited for the pool
    queue_wait_h: float  # the part of wait_h spent in the pool queue
    max_queue: int  # most requests waiting for the pool at once
    start_wait_h: float
    unserved: int  # requests still queued when their session ended
    peak_in_use: int
    written_gb: float
    within_budget: bool = True
    # resuming ahead of the user (see ResumePolicy); zeros under the "none" policy
    policy: str = "none"
    ahead_resumes: int = 0  # scheduled or predicted resumes started
    hits: int = 0  # ready before the user came, and used
    late: int = 0  # the user came while it was still queued or restoring (waited less)
    came_first: int = 0  # the user came before it started (it was cancelled)
    unused: int = 0  # not used within the window: paused again
    no_prediction: int = 0  # pauses without a prediction (no basis, or under the confidence)
    extra_held_h: float = 0.0  # held before the user came, and by unused resumes until re-paused
    wait_avoided_min: float = 0.0  # waiting (resumes + starts) saved against "none", all users

    @property
    def label(self) -> str:
        return format_threshold(self.threshold_s)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, **asdict(self)}


@dataclass(frozen=True)
class ResumePolicy:
    """When a paused session comes back.

    * ``none``: when the user asks (their first activity after the pause);
    * ``scheduled``: every pause that lasts into a later day is scheduled to
      resume at ``schedule_at`` (seconds after local midnight in ``tz``) on
      the day the user comes back (users know their own plans);
    * ``predicted``: at each pause, :func:`jupyter_pause.prediction.predict_return`
      on the session's past returns (those before the pause: the prior
      history plus the returns simulated so far); when its confidence reaches
      ``min_confidence``, resume ``margin_s`` plus the expected resume time
      (restore plus the median capacity wait) ahead of the prediction.

    A resume ahead of the user that is not used within ``unused_after_s``
    (predicted; and never longer than the idle threshold) or the idle
    threshold (scheduled) is paused again, which costs a normal pause; the
    user's later return then resumes as under ``none``.
    """

    kind: str = "none"
    schedule_at: float = 8.75 * HOUR
    min_confidence: float = 0.7
    margin_s: float = 300.0
    unused_after_s: float = 1800.0
    min_samples: int = 3
    tz: tzinfo = timezone.utc

    @property
    def label(self) -> str:
        if self.kind == "scheduled":
            h, m = divmod(round(self.schedule_at / 60), 60)
            return f"scheduled@{h:02d}:{m:02d}"
        if self.kind == "predicted":
            return f"predicted:{self.min_confidence:g}"
        return "none"

    def unused_window(self, threshold_s: float | None) -> float | None:
        """How long a resume ahead of the user may wait for them before it is paused again."""
        if self.kind == "predicted":
            return (
                self.unused_after_s
                if threshold_s is None
                else min(self.unused_after_s, threshold_s)
            )
        return threshold_s


def _wall(t: float, seconds_after_midnight: float, tz: tzinfo, days: int = 0) -> float:
    """That wall-clock time on the local date of ``t`` (plus ``days``)."""
    d = datetime.fromtimestamp(t, tz).date() + timedelta(days=days)
    return (
        datetime(d.year, d.month, d.day, tzinfo=tz) + timedelta(seconds=seconds_after_midnight)
    ).timestamp()


def returns_from_trace(
    trace: Trace, threshold_s: float | None, pause_s: float = 0.0
) -> dict[str, list[Return]]:
    """The pause/return pairs an idle threshold makes of a trace, per session id.

    A gap between active intervals longer than the threshold is paused at
    ``gap start + threshold + pause_s`` and returned from at the gap's end: the
    history a predictor would have learned from this trace.
    """
    out: dict[str, list[Return]] = {}
    if threshold_s is None:
        return out
    for s in trace.sessions:
        for (_, a_end), (b_start, _) in itertools.pairwise(s.active):
            if b_start - a_end > threshold_s:
                out.setdefault(s.id, []).append(Return(a_end + threshold_s + pause_s, b_start))
    return out


@dataclass
class _S:
    """One session's simulation state."""

    ts: TraceSession
    rng: random.Random
    k: int = -1  # index of the last active interval the user started
    holding: bool = False
    alloc_start: float = 0.0
    released_since: float | None = None
    req_time: float = 0.0
    req_kind: str = "start"  # start | resume | ahead
    enqueued: float = 0.0
    gap: tuple[float, float] = (0.0, 0.0)
    done: bool = False
    # resuming ahead of the user
    back: float = 0.0  # when the user comes back from the current pause
    paused_at: float = 0.0
    returns: list[Return] = field(default_factory=list)  # what the predictor knows
    ahead: str | None = None  # planned | queued | restoring | ready | joined | repausing
    ahead_at: float = 0.0  # when the planned resume starts
    unused_at: float = 0.0  # when a ready, unused resume is paused again
    user_since: float = 0.0  # the user came while it was restoring: waiting since
    deferred: bool = False  # the user came while an unused resume was being paused again


@dataclass(frozen=True)
class _Rules:
    """What one run of :func:`simulate_threshold` holds fixed."""

    threshold_s: float | None  # None: never pause
    pool: int | None  # None: unlimited
    costs: Costs
    policy: ResumePolicy
    interruption_s: float
    short_break_s: float


@dataclass
class _Tally:
    """What one run counts, in seconds and accelerator-seconds."""

    allocated: float = 0.0
    released: float = 0.0
    pauses: int = 0
    interruptions: int = 0
    short: int = 0
    queued: int = 0
    queue_wait: float = 0.0
    max_queue: int = 0
    unserved: int = 0
    in_use: int = 0
    peak: int = 0
    written: float = 0.0
    ahead: int = 0
    hits: int = 0
    late: int = 0
    came_first: int = 0
    unused: int = 0
    no_prediction: int = 0
    extra_held: float = 0.0
    waits: list[float] = field(default_factory=list)  # resume request -> runnable
    start_waits: list[float] = field(default_factory=list)  # session start -> runnable


class _Run:
    """The event loop of one threshold under one policy: a heap of ``(time, seq, kind,
    session)`` events, one handler per kind, the pool's FIFO queue and a tally."""

    def __init__(self, sims: list[_S], rules: _Rules) -> None:
        self.sims = sims
        self.rules = rules
        self.costs = rules.costs
        self.policy = rules.policy
        self.expected_resume_s = self.costs.restore_s + self.costs.median_capacity_wait()
        self.heap: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.free: float = rules.pool if rules.pool is not None else math.inf
        self.queue: deque[int] = deque()
        self.expired: list[int] = []
        self.tally = _Tally()

    def run(self) -> _Tally:
        handlers = {
            "request": self.enqueue,  # the session starts
            "return": self.on_return,
            "ahead": self.on_ahead,
            "ready": self.on_ready,
            "unused": self.on_unused,
            "pause": self.on_pause,
            "released": self.on_released,
            "end": self.on_end,
        }
        for i, s in enumerate(self.sims):
            s.req_time = s.enqueued = s.ts.start
            self.push(s.ts.start, "request", i)
        while self.heap:
            t, _, kind, i = heapq.heappop(self.heap)
            handlers[kind](i, t)
        self.settle()
        return self.tally

    # --- the pool and the timeline

    def push(self, t: float, kind: str, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, i))

    def try_assign(self, t: float) -> None:
        acc, queue = self.tally, self.queue
        while queue:
            i = queue[0]
            s = self.sims[i]
            if t >= s.ts.end:  # the session ended while it waited: unserved
                queue.popleft()
                self.expired.append(i)
                continue
            if self.free < s.ts.gpus:
                break
            queue.popleft()
            g = s.ts.gpus
            self.free -= g
            acc.in_use += g
            acc.peak = max(acc.peak, acc.in_use)
            s.holding, s.alloc_start = True, t
            if t - s.enqueued > 1e-9 and s.req_kind == "resume":
                acc.queued += 1
                acc.queue_wait += t - s.enqueued
            if s.ahead == "queued":
                s.ahead = "restoring"
            delay = self.costs.draw_capacity_wait(s.rng)
            if s.req_kind in ("resume", "ahead"):
                delay += self.costs.restore_s
            self.push(t + delay, "ready", i)

    def release(self, i: int, t: float) -> None:
        s = self.sims[i]
        if not s.holding:
            return
        g = s.ts.gpus
        self.tally.allocated += (t - s.alloc_start) * g
        self.free += g
        self.tally.in_use -= g
        s.holding = False

    def enqueue(self, i: int, t: float) -> None:
        self.sims[i].enqueued = t
        self.queue.append(i)
        self.try_assign(t)
        self.tally.max_queue = max(self.tally.max_queue, len(self.queue))  # left waiting

    def plan_next(self, i: int, t: float) -> None:
        s = self.sims[i]
        threshold_s = self.rules.threshold_s
        act, end = s.ts.active, s.ts.end
        idle_start = max(t, act[s.k][1] if s.k >= 0 else s.ts.start)
        while True:
            nxt = act[s.k + 1][0] if s.k + 1 < len(act) else None
            gap_end = nxt if nxt is not None else end
            if idle_start >= end:
                self.push(idle_start, "end", i)
                return
            if threshold_s is not None and gap_end - idle_start > threshold_s:
                s.gap = (idle_start, gap_end)
                self.push(idle_start + threshold_s, "pause", i)
                return
            if nxt is None:
                self.push(end, "end", i)
                return
            s.k += 1
            idle_start = max(idle_start, act[s.k][1])

    def plan_ahead(self, s: _S, t: float) -> float | None:
        """When to resume ahead of the user after a pause released at ``t`` (None: don't)."""
        policy = self.policy
        if policy.kind == "scheduled":
            if (
                datetime.fromtimestamp(s.back, policy.tz).date()
                <= datetime.fromtimestamp(t, policy.tz).date()
            ):
                return None  # a break within the day: nobody schedules lunch
            days = (
                datetime.fromtimestamp(s.back, policy.tz).date()
                - datetime.fromtimestamp(t, policy.tz).date()
            ).days
            return _wall(t, policy.schedule_at, policy.tz, days)
        if policy.kind == "predicted":
            prediction = predict_return(s.returns, t, tz=policy.tz, min_samples=policy.min_samples)
            if prediction is None or prediction.confidence < policy.min_confidence:
                self.tally.no_prediction += 1
                return None
            return resume_ahead_time(prediction, self.expected_resume_s, policy.margin_s)
        return None

    # --- the events

    def on_return(self, i: int, t: float) -> None:
        """The user comes back after a pause (at ``s.back``, or later)."""
        s, acc = self.sims[i], self.tally
        g = s.ts.gpus
        if s.ahead == "planned":  # before the resume ahead of them started: cancel it
            acc.came_first += 1
            s.ahead = None
        if s.ahead == "repausing":  # an unused resume is being paused: wait for it
            s.deferred = True
            return
        s.returns.append(Return(s.paused_at, s.back))
        if s.ahead == "ready":  # the notebook waits for the user: nothing to wait for
            acc.hits += 1
            acc.extra_held += (t - s.alloc_start) * g
            acc.waits.append(0.0)
            s.ahead = None
            self.plan_next(i, t)
        elif s.ahead in ("queued", "restoring"):  # join the resume under way
            acc.late += 1
            if s.holding:
                acc.extra_held += (t - s.alloc_start) * g
            s.ahead, s.user_since = "joined", s.back
        else:
            if s.released_since is not None:  # released until the user asks for it back
                acc.released += max(0.0, s.back - s.released_since) * g
                s.released_since = None
            s.req_time, s.req_kind = s.back, "resume"
            self.enqueue(i, t)

    def on_ahead(self, i: int, t: float) -> None:
        """A scheduled or predicted resume starts."""
        s, acc = self.sims[i], self.tally
        if s.ahead != "planned" or s.ahead_at != t:
            return
        acc.ahead += 1
        if s.released_since is not None:
            acc.released += max(0.0, t - s.released_since) * s.ts.gpus
            s.released_since = None
        s.ahead, s.req_time, s.req_kind = "queued", t, "ahead"
        self.enqueue(i, t)

    def on_ready(self, i: int, t: float) -> None:
        s, acc = self.sims[i], self.tally
        if s.req_kind == "ahead":
            if s.ahead == "joined":
                acc.waits.append(t - s.user_since)
                s.ahead = None
                self.plan_next(i, t)
            else:
                s.ahead = "ready"
                window = self.policy.unused_window(self.rules.threshold_s)
                if window is not None:
                    s.unused_at = t + window
                    self.push(s.unused_at, "unused", i)
            return
        wait = t - s.req_time
        if s.req_kind == "resume":
            acc.waits.append(wait)
        else:
            acc.start_waits.append(wait)
        self.plan_next(i, t)

    def on_unused(self, i: int, t: float) -> None:
        """Nobody came: pause it again."""
        s = self.sims[i]
        if s.ahead != "ready" or s.unused_at != t:
            return
        self.tally.unused += 1
        self.tally.written += self.costs.state_gb
        s.ahead = "repausing"
        self.push(t + self.costs.pause_s, "released", i)

    def on_pause(self, i: int, t: float) -> None:
        s, acc = self.sims[i], self.tally
        acc.pauses += 1
        acc.written += self.costs.state_gb
        g0, g1 = s.gap
        if g1 - g0 < self.rules.short_break_s:
            acc.short += 1
        if s.k + 1 < len(s.ts.active) and g1 - t <= self.rules.interruption_s:
            acc.interruptions += 1
        self.push(t + self.costs.pause_s, "released", i)

    def on_released(self, i: int, t: float) -> None:
        s = self.sims[i]
        if s.ahead == "repausing":
            self.tally.extra_held += (t - s.alloc_start) * s.ts.gpus
        self.release(i, t)
        s.released_since = t
        self.try_assign(t)
        if s.ahead == "repausing":
            s.ahead = None
            if s.deferred:
                s.deferred = False
                self.push(t, "return", i)
            return
        if s.k + 1 < len(s.ts.active):
            s.k += 1
            s.back, s.paused_at = s.ts.active[s.k][0], t
            ahead = self.plan_ahead(s, t)
            if ahead is not None and ahead > t:
                s.ahead, s.ahead_at = "planned", ahead
                self.push(ahead, "ahead", i)
            self.push(max(s.back, t), "return", i)

    def on_end(self, i: int, t: float) -> None:
        self.release(i, t)
        self.sims[i].done = True
        self.try_assign(t)

    def settle(self) -> None:
        """Sessions that never got (back) their accelerator before their end."""
        acc = self.tally
        for s in self.sims:
            if s.released_since is not None:
                acc.released += max(0.0, s.ts.end - s.released_since) * s.ts.gpus
            if s.holding:  # pragma: no cover - every holder gets an "end"
                acc.allocated += (s.ts.end - s.alloc_start) * s.ts.gpus
        for i in [*self.expired, *self.queue]:
            s = self.sims[i]
            acc.unserved += 1
            if s.req_kind == "ahead":
                if s.ahead == "joined":
                    acc.waits.append(max(0.0, s.ts.end - s.user_since))
                continue
            waits = acc.waits if s.req_kind == "resume" else acc.start_waits
            waits.append(max(0.0, s.ts.end - s.req_time))


def simulate_threshold(
    trace: Trace,
    threshold_s: float | None,
    *,
    pool: int | None = None,
    costs: Costs | None = None,
    seed: int = 0,
    interruption_minutes: float = 10.0,
    short_break_minutes: float = 120.0,
    policy: ResumePolicy | None = None,
    prior: dict[str, list[Return]] | None = None,
) -> ThresholdResult:
    """One threshold under one resume policy (default ``none``).

    ``prior``: past pause/return pairs per session id, the predictor's history
    before the trace begins (:func:`returns_from_trace` of earlier activity).
    """
    rules = _Rules(
        threshold_s,
        pool,
        costs or Costs(),
        policy or ResumePolicy(),
        interruption_s=interruption_minutes * 60,
        short_break_s=short_break_minutes * 60,
    )
    sims = [
        _S(
            ts,
            random.Random(f"capacity:{seed}:{ts.id}"),
            returns=list((prior or {}).get(ts.id, [])),
        )
        for ts in trace.sessions
    ]
    return _result(trace, rules, _Run(sims, rules).run())


def _result(trace: Trace, rules: _Rules, acc: _Tally) -> ThresholdResult:
    waits = acc.waits
    user_days = max(trace.active_user_days(), 1)
    total_wait = sum(waits)
    all_wait = total_wait + sum(acc.start_waits)
    return ThresholdResult(
        threshold_s=rules.threshold_s,
        allocated_h=acc.allocated / HOUR,
        released_h=acc.released / HOUR,
        always_on_h=sum((s.end - s.start) * s.gpus for s in trace.sessions) / HOUR,
        active_h=sum(s.active_seconds * s.gpus for s in trace.sessions) / HOUR,
        pauses=acc.pauses,
        interruptions=acc.interruptions,
        short_breaks_paused=acc.short,
        resumes=len(waits),
        wait_h=total_wait / HOUR,
        wait_min_per_user_day=all_wait / 60.0 / user_days,
        wait_median_s=quantile(waits, 0.5),
        wait_p95_s=quantile(waits, 0.95),
        wait_max_s=max(waits) if waits else None,
        queued_resumes=acc.queued,
        queue_wait_h=acc.queue_wait / HOUR,
        max_queue=acc.max_queue,
        start_wait_h=sum(acc.start_waits) / HOUR,
        unserved=acc.unserved,
        peak_in_use=acc.peak,
        written_gb=acc.written,
        policy=rules.policy.label,
        ahead_resumes=acc.ahead,
        hits=acc.hits,
        late=acc.late,
        came_first=acc.came_first,
        unused=acc.unused,
        no_prediction=acc.no_prediction,
        extra_held_h=acc.extra_held / HOUR,
    )


@dataclass
class Simulation:
    trace: Trace
    results: list[ThresholdResult]
    pool: int | None
    costs: Costs
    wait_budget_min: float
    recommended: ThresholdResult | None
    seed: int = 0
    #: every threshold under every resume policy ("none" included), when policies were asked for
    policy_results: list[ThresholdResult] = field(default_factory=list)
    policies: list[ResumePolicy] = field(default_factory=list)
    prior_source: str = ""

    def to_json(self) -> dict[str, Any]:
        data = self._json()
        if self.policy_results:
            p = self.policies[0] if self.policies else ResumePolicy()
            data["resume_policies"] = {
                "policies": [q.label for q in self.policies],
                "margin_s": p.margin_s,
                "unused_after_s": p.unused_after_s,
                "min_samples": p.min_samples,
                "time_zone": str(p.tz),
                "expected_resume_s": self.costs.restore_s + self.costs.median_capacity_wait(),
                "prior_history": self.prior_source,
                "results": [r.to_json() for r in self.policy_results],
            }
        return data

    def _json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "trace": {
                "source": self.trace.source,
                "start": self.trace.start,
                "end": self.trace.end,
                "sessions": len(self.trace.sessions),
                "users": len(self.trace.users),
                "active_user_days": self.trace.active_user_days(),
            },
            "pool": self.pool,
            "costs": {
                **asdict(self.costs),
                "pause_s": self.costs.pause_s,
                "restore_s": self.costs.restore_s,
            },
            "seed": self.seed,
            "wait_budget_min_per_user_day": self.wait_budget_min,
            "results": [r.to_json() for r in self.results],
            "recommended": self.recommended.label if self.recommended else None,
            "recommendation": self.recommendation(),
        }

    def to_csv(self) -> str:
        import csv
        import io

        rows = [r.to_json() for r in (self.policy_results or self.results)]
        out = io.StringIO()
        w = csv.DictWriter(
            out, fieldnames=list(rows[0]) if rows else ["label"], lineterminator="\n"
        )
        w.writeheader()
        for row in rows:
            w.writerow({k: "" if v is None else v for k, v in row.items()})
        return out.getvalue()

    def recommendation(self) -> str:
        if self.recommended is None:
            least = min(self.results, key=lambda r: r.wait_min_per_user_day, default=None)
            return (
                "No threshold keeps waiting for an accelerator within"
                f" {self.wait_budget_min:g} min per user-day"
                + (
                    f"; the least is {least.label} ({least.wait_min_per_user_day:.1f} min)."
                    " The pool may be too small for the demand (see start waits)."
                    if least
                    else "."
                )
            )

        r = self.recommended
        if r.threshold_s is None:
            return (
                f"Never pause: no threshold releases hours within"
                f" {self.wait_budget_min:g} min of waiting per user-day."
            )
        return (
            f"Recommended idle threshold: {r.label}. It releases {r.released_h:.1f} of"
            f" {r.always_on_h:.1f} accelerator-hours with {r.wait_min_per_user_day:.1f} min of"
            f" waiting per user-day (budget {self.wait_budget_min:g}), {r.pauses} pauses,"
            f" {r.interruptions} interruptions."
        )

    def to_text(self) -> str:
        head = [
            "threshold",
            "released h",
            "alloc h",
            "pauses",
            "interrupt.",
            "short brk",
            "resumes",
            "wait h",
            "start wait h",
            "min/user-day",
            "p95 wait s",
            "queued",
            "max queue",
            "",
        ]
        vmax = max((r.released_h for r in self.results), default=0) or 1
        rows = []
        for r in self.results:
            bar = "#" * round(20 * r.released_h / vmax)
            mark = " <" if self.recommended is r else ""
            rows.append(
                [
                    r.label,
                    f"{r.released_h:.1f}",
                    f"{r.allocated_h:.1f}",
                    str(r.pauses),
                    str(r.interruptions),
                    str(r.short_breaks_paused),
                    str(r.resumes),
                    f"{r.wait_h:.2f}",
                    f"{r.start_wait_h:.2f}",
                    f"{r.wait_min_per_user_day:.1f}" + ("" if r.within_budget else "!"),
                    "-" if r.wait_p95_s is None else f"{r.wait_p95_s:.0f}",
                    str(r.queued_resumes),
                    str(r.max_queue),
                    bar + mark,
                ]
            )
        t = self.trace
        first = self.results[0] if self.results else None
        lines = [
            f"Idle-threshold simulation: {t.source}",
            f"{len(t.sessions)} sessions, {len(t.users)} users, {(t.end - t.start) / HOUR:.0f} h,"
            f" pool {self.pool if self.pool is not None else 'unlimited'},"
            f" pause {self.costs.pause_s:.0f} s, restore {self.costs.restore_s:.0f} s"
            + (
                f"; always-on {first.always_on_h:.1f} h, active {first.active_h:.1f} h"
                if first
                else ""
            ),
            "",
            *text_table(head, rows, right=range(1, 13)),
            "",
            "! over the waiting budget;  < recommended;  short brk: paused gaps under the short-break limit",
            self.recommendation(),
        ]
        if self.policy_results:
            lines += ["", *self.policy_text()]
        return "\n".join(lines) + "\n"

    def policy_text(self) -> list[str]:
        """The table of resume policies: what resuming ahead of the user releases and saves."""
        head = [
            "threshold",
            "policy",
            "released h",
            "extra held h",
            "wait h",
            "avoided min",
            "p95 wait s",
            "ahead",
            "hits",
            "late",
            "came first",
            "unused",
            "no pred.",
        ]
        rows = [
            [
                r.label,
                r.policy,
                f"{r.released_h:.1f}",
                f"{r.extra_held_h:.2f}",
                f"{r.wait_h + r.start_wait_h:.2f}",
                f"{r.wait_avoided_min:.0f}",
                "-" if r.wait_p95_s is None else f"{r.wait_p95_s:.0f}",
                str(r.ahead_resumes),
                str(r.hits),
                str(r.late),
                str(r.came_first),
                str(r.unused),
                str(r.no_prediction),
            ]
            for r in self.policy_results
        ]
        p = self.policies[0] if self.policies else ResumePolicy()
        return [
            "Resuming ahead of the user"
            f" (margin {p.margin_s:g} s, expected resume"
            f" {self.costs.restore_s + self.costs.median_capacity_wait():.0f} s,"
            f" unused after {p.unused_after_s:g} s, time zone {p.tz}"
            + (f"; predictor history: {self.prior_source}" if self.prior_source else "")
            + ")",
            "",
            *text_table(head, rows, right=range(2, 13)),
            "",
            "released h: accelerator-hours released;  extra held h: held by resumes ahead of the"
            " user before they came, and by unused ones until paused again;  wait h: resume and"
            " start waiting, all users;  avoided min: waiting saved against 'none';  hits: ready"
            " before the user;  late: the user came while it restored;  came first: the user came"
            " before it started;  unused: paused again;  no pred.: pauses without a confident"
            " prediction",
        ]

    def to_svg(self) -> str:
        cats = [r.label for r in self.results]
        best = self.results.index(self.recommended) if self.recommended in self.results else None
        left = svg.vbars(
            cats,
            [
                ("released by pausing", [r.released_h for r in self.results]),
                ("allocated", [r.allocated_h for r in self.results]),
            ],
            unit="accelerator-hours",
            title="Accelerator-hours per idle threshold",
            kind="sim-hours",
            highlight=best,
        )
        right = svg.vbars(
            cats,
            [("resume waiting", [r.wait_min_per_user_day for r in self.results])],
            unit="minutes per user-day",
            title="Waiting for an accelerator",
            kind="sim-wait",
            limit=self.wait_budget_min,
            limit_label=f"budget {self.wait_budget_min:g} min",
            highlight=best,
        )
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" data-chart="simulation" width="900" height="240"'
            ' viewBox="0 0 900 240"><title>Idle-threshold simulation</title>'
            + _at(left, 0)
            + _at(right, 460)
            + "</svg>"
        )

    def to_html(self) -> str:
        rows = "".join(
            f"<tr{' class=best' if r is self.recommended else ''}><td>{svg.esc(r.label)}</td>"
            f"<td>{r.released_h:.1f}</td><td>{r.allocated_h:.1f}</td><td>{r.pauses}</td>"
            f"<td>{r.interruptions}</td><td>{r.short_breaks_paused}</td><td>{r.wait_h:.2f}</td>"
            f"<td>{r.wait_min_per_user_day:.1f}</td><td>{r.queued_resumes}</td><td>{r.max_queue}</td></tr>"
            for r in self.results
        )
        return (
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Idle-threshold simulation"
            "</title><style>body{font:14px system-ui,sans-serif;max-width:960px;margin:24px auto}"
            "td,th{padding:3px 8px;text-align:right;border-bottom:1px solid #eee}tr.best{background:#fff8e1}"
            "</style></head><body><h1>Idle-threshold simulation</h1>"
            f"<p>{svg.esc(self.trace.source)}; pool {self.pool if self.pool is not None else 'unlimited'}</p>"
            + self.to_svg()
            + "<table><tr><th>threshold</th><th>released h</th><th>allocated h</th><th>pauses</th>"
            "<th>interruptions</th><th>short breaks paused</th><th>wait h</th><th>min/user-day</th>"
            f"<th>queued</th><th>max queue</th></tr>{rows}</table><p><b>{svg.esc(self.recommendation())}"
            "</b></p>" + self.policy_html() + "</body></html>"
        )

    def policy_html(self) -> str:
        if not self.policy_results:
            return ""
        rows = "".join(
            f"<tr><td>{svg.esc(r.label)}</td><td>{svg.esc(r.policy)}</td><td>{r.released_h:.1f}</td>"
            f"<td>{r.extra_held_h:.2f}</td><td>{r.wait_h + r.start_wait_h:.2f}</td>"
            f"<td>{r.wait_avoided_min:.0f}</td><td>{r.ahead_resumes}</td><td>{r.hits}</td>"
            f"<td>{r.late}</td><td>{r.came_first}</td><td>{r.unused}</td></tr>"
            for r in self.policy_results
        )
        return (
            "<h2>Resuming ahead of the user</h2><table data-table='resume-policies'><tr>"
            "<th>threshold</th><th>policy</th><th>released h</th><th>extra held h</th>"
            "<th>wait h</th><th>waiting avoided (min)</th><th>ahead</th><th>hits</th><th>late</th>"
            f"<th>came first</th><th>unused</th></tr>{rows}</table>"
        )


def _at(inner: str, x: float) -> str:
    """Place a child <svg> at x (nested svg elements take x/y attributes)."""
    return inner.replace("<svg ", f'<svg x="{x:.0f}" y="0" ', 1)


def simulate(
    trace: Trace,
    thresholds: list[float | None],
    *,
    pool: int | None = None,
    costs: Costs | None = None,
    seed: int = 0,
    wait_budget_min: float = 5.0,
    interruption_minutes: float = 10.0,
    short_break_minutes: float = 120.0,
    policies: list[ResumePolicy] | None = None,
    prior: Trace | None = None,
) -> Simulation:
    """Simulate every threshold on the same trace and recommend one.

    With ``policies``, every threshold is also run under each resume policy;
    the predictor learns from ``prior`` (earlier activity, paused under the
    same threshold) and from the returns simulated so far.  The
    recommendation stays the threshold's, under ``none``.
    """
    costs = costs or Costs()
    results = [
        simulate_threshold(
            trace,
            th,
            pool=pool,
            costs=costs,
            seed=seed,
            interruption_minutes=interruption_minutes,
            short_break_minutes=short_break_minutes,
        )
        for th in thresholds
    ]
    for r in results:
        r.within_budget = r.wait_min_per_user_day <= wait_budget_min + 1e-9
    feasible = [r for r in results if r.within_budget]
    best = max(
        feasible,
        key=lambda r: (
            round(r.released_h, 6),
            math.inf if r.threshold_s is None else r.threshold_s,
        ),
        default=None,
    )
    policy_results: list[ThresholdResult] = []
    others = [p for p in policies or [] if p.kind != "none"]
    if others:
        for base in results:
            policy_results.append(base)
            history = returns_from_trace(prior, base.threshold_s, costs.pause_s) if prior else None
            for p in others:
                r = simulate_threshold(
                    trace,
                    base.threshold_s,
                    pool=pool,
                    costs=costs,
                    seed=seed,
                    interruption_minutes=interruption_minutes,
                    short_break_minutes=short_break_minutes,
                    policy=p,
                    prior=history,
                )
                r.within_budget = r.wait_min_per_user_day <= wait_budget_min + 1e-9
                r.wait_avoided_min = (
                    (base.wait_h + base.start_wait_h) - (r.wait_h + r.start_wait_h)
                ) * 60.0
                policy_results.append(r)
    return Simulation(
        trace,
        results,
        pool,
        costs,
        wait_budget_min,
        best,
        seed,
        policy_results=policy_results,
        policies=list(policies or []) if others else [],
        prior_source=prior.source if prior and others else "",
    )


# --------------------------------------------------------------------------- parsing


def parse_threshold(text: str) -> float | None:
    """``10m``, ``1.5h``, ``90s``, ``45`` (minutes), ``never`` -> seconds (None for never)."""
    if text.strip().lower() in ("never", "none", "off", "inf"):
        return None
    return parse_duration(text, bare_unit="min")


def parse_thresholds(text: str) -> list[float | None]:
    return [parse_threshold(x) for x in text.split(",") if x.strip()]


def parse_distribution(text: str) -> list[tuple[float, float]]:
    """``0:0.8,60:0.15,300:0.05`` (seconds:probability) or one number of seconds."""
    out = []
    for part in text.split(","):
        if not part.strip():
            continue
        if ":" in part:
            s, p = part.split(":", 1)
            out.append((float(s), float(p)))
        else:
            out.append((float(part), 1.0))
    if not out or any(p < 0 or s < 0 for s, p in out):
        raise ValueError(f"not a distribution: {text!r}")
    return out


def parse_clock(text: str) -> float:
    """``08:45`` or ``8:45`` -> seconds after midnight."""
    h, sep, m = text.strip().partition(":")
    if not sep or not h.isdigit() or not m.isdigit() or int(h) > 23 or int(m) > 59:
        raise ValueError(f"not a time of day: {text!r} (use HH:MM, e.g. 08:45)")
    return int(h) * HOUR + int(m) * 60


def parse_policies(text: str, **defaults: Any) -> list[ResumePolicy]:
    """``none,scheduled,scheduled@08:30,predicted,predicted:0.5`` -> resume policies.

    ``defaults`` are :class:`ResumePolicy` fields (``schedule_at``,
    ``min_confidence``, ``margin_s``, ...) for the parts a name leaves out.
    """
    out = []
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        name, _, arg = part.replace("@", ":", 1).partition(":")
        if name == "none" and not arg:
            out.append(ResumePolicy("none", **defaults))
        elif name == "scheduled":
            at = parse_clock(arg) if arg else defaults.get("schedule_at", 8.75 * HOUR)
            out.append(ResumePolicy(**{**defaults, "kind": "scheduled", "schedule_at": at}))
        elif name == "predicted":
            conf = float(arg) if arg else defaults.get("min_confidence", 0.7)
            if not 0 <= conf <= 1:
                raise ValueError(f"a confidence is between 0 and 1: {part!r}")
            out.append(ResumePolicy(**{**defaults, "kind": "predicted", "min_confidence": conf}))
        else:
            raise ValueError(
                f"not a resume policy: {part!r} (use none, scheduled[@HH:MM], predicted[:CONFIDENCE])"
            )
    return out


def format_threshold(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}min"
    return f"{seconds:g}s"
