"""When will this user come back?  Predicting the return after a pause.

A pause saves accelerator-hours only if coming back is painless.  The ledger
already records, for every pause, when the user came back (their first cell,
or a resume they asked for).  From that history this module predicts the
return after a new pause, so that the server can resume *ahead* of the user
(by the measured resume latency plus a margin) and the user finds the
notebook ``ready``.  Pure: no server imports, no clock (times are passed in).

The model (also in ``docs/accounting.md``):

* A past pause/return pair is a **sample**.  It is described in the local time
  of ``tz`` by the pause's time of day, the return's time of day, the return's
  *day type* (workday Monday-Friday, or weekend) and how many days of that
  type after the pause's date the return came (0: the same day).  A return
  on the next workday after a Friday evening pause is "1 workday later", as
  is Wednesday after Tuesday evening: weekends fall out of the count.
* The samples **similar** to the new pause are those paused on the same day
  type (workday/weekend) at a time of day within ``window`` (default 2 h) of
  the new pause.  If at least ``min_samples`` of them were paused on the very
  same weekday and those predict a return more than ``tolerance`` away from
  all of them together, only those are used (a weekday with a habit of its
  own: a standing Wednesday meeting).  Samples older than ``max_age``
  (default 8 weeks) are ignored.
* Each similar sample is **projected** onto the new pause: the same number
  of days of the same type after the new pause's date, at the same local time
  of day (so 9:00 stays 9:00 across a daylight-saving change).  Projections
  not after the new pause are dropped.
* The **prediction** is the median of the projections; its **spread** the
  interquartile range.  Its **confidence** is the share of projections within
  ``tolerance`` (default 15 min) of the median, shrunk for few samples:
  ``hits / (samples + 1)``.  So three returns at 9:00 sharp give 0.75, ten
  give 0.91, and returns spread evenly over 90 minutes stay near 0.3.
* No basis (fewer than ``min_samples`` similar samples): ``None``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

from .ledger import EventType, LedgerEvent

DAY = 86400.0
#: similar past returns a prediction needs, by default
MIN_SAMPLES = 3

#: a pause whose ``PAUSE_REQUESTED`` carries this reason re-pauses an unused predicted
#: resume: the user has not come back yet, so it does not start a new pause/return pair.
UNUSED_REASON = "predicted-resume-unused"


@dataclass(frozen=True)
class Return:
    """One pause and the user's return after it (epoch seconds)."""

    paused_at: float
    returned_at: float


@dataclass(frozen=True)
class Prediction:
    """The predicted return after one pause.

    ``at``: epoch seconds; ``confidence``: 0..1 (see the module's docstring);
    ``samples``: the past returns it rests on; ``spread``: their interquartile
    range in seconds.
    """

    at: float
    confidence: float
    samples: int
    spread: float


# --------------------------------------------------------------------------- history


def returns_from_events(events: Iterable[LedgerEvent]) -> dict[str, list[Return]]:
    """Each notebook's pause/return pairs, keyed by its server-relative path."""
    return _returns(events, lambda e: e.path)


def returns_by_user(events: Iterable[LedgerEvent]) -> dict[str, list[Return]]:
    """The same keyed by user (a JupyterHub server is one user's), all notebooks merged.

    A user with two notebooks paused returns once: the pair runs from the
    first of the pauses to the user's first return after it.
    """
    return _returns(events, lambda e: e.user)


def _returns(
    events: Iterable[LedgerEvent], key: Callable[[LedgerEvent], str]
) -> dict[str, list[Return]]:
    """Replay events in time order: a pause opens a pair, the user's first sign closes it.

    The pause's time is its ``PAUSED`` (or ``ACCELERATOR_RELEASED``, whichever
    comes first).  The return is the first of: a ``RESUME_REQUESTED`` that no
    schedule started (``data.scheduled`` empty), or the start of a
    ``CELL_EXECUTED`` (its time minus its duration).  A scheduled or predicted
    resume is not a return; an unused predicted resume paused again keeps the
    original pause open.
    """
    out: dict[str, list[Return]] = {}
    open_pause: dict[str, float] = {}
    repausing: set[str] = set()
    for e in sorted(events, key=lambda e: (e.time, e.id or 0)):
        k = key(e)
        if not k:
            continue
        d = e.data or {}
        if e.type == EventType.PAUSE_REQUESTED:
            if d.get("reason") == UNUSED_REASON:
                repausing.add(k)
        elif e.type in (EventType.PAUSED, EventType.ACCELERATOR_RELEASED):
            if k in repausing or k in open_pause:
                repausing.discard(k)
                continue
            open_pause[k] = e.time
        elif e.type == EventType.RESUME_REQUESTED and not d.get("scheduled"):
            _close(out, open_pause, k, e.time)
        elif e.type == EventType.CELL_EXECUTED:
            start = e.time - _number(d.get("duration"))
            _close(out, open_pause, k, start)
            repausing.discard(k)
    return out


def _close(out: dict[str, list[Return]], open_pause: dict[str, float], k: str, t: float) -> None:
    paused = open_pause.pop(k, None)
    if paused is not None and t > paused:
        out.setdefault(k, []).append(Return(paused, t))


def _number(v: object) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def measured_resume_latency(events: Iterable[LedgerEvent]) -> float | None:
    """Median ``RESUME_REQUESTED`` -> ``FIRST_CELL_RUNNABLE`` of every completed resume.

    Per notebook, a request is matched with the next runnable; a failed resume
    (``OPERATION_FAILED`` before it) is dropped.  None without any.
    """
    pending: dict[tuple[str, str], float] = {}
    latencies = []
    for e in sorted(events, key=lambda e: (e.time, e.id or 0)):
        k = (e.user, e.path)
        if e.type == EventType.RESUME_REQUESTED:
            pending.setdefault(k, e.time)
        elif e.type == EventType.FIRST_CELL_RUNNABLE and k in pending:
            latencies.append(e.time - pending.pop(k))
        elif e.type == EventType.OPERATION_FAILED and (e.data or {}).get("operation") == "resume":
            pending.pop(k, None)
    return statistics.median(latencies) if latencies else None


# --------------------------------------------------------------------------- prediction


def _local(t: float, tz: tzinfo | None) -> datetime:
    """Aware in ``tz``; naive local time without one (``timestamp()`` then honours DST)."""
    return datetime.fromtimestamp(t, tz)


def _workday(d: date) -> bool:
    return d.weekday() < 5


def _seconds_of_day(dt: datetime) -> float:
    return dt.hour * 3600 + dt.minute * 60 + dt.second + dt.microsecond / 1e6


def _days_of_type_between(start: date, end: date, workday: bool) -> int:
    """How many dates of the given type lie in (start, end]."""
    n, d = 0, start
    while d < end:
        d += timedelta(days=1)
        if _workday(d) == workday:
            n += 1
    return n


def _nth_day_of_type(start: date, n: int, workday: bool) -> date:
    """The n-th date of the given type after ``start`` (``start`` itself for n = 0)."""
    d = start
    while n > 0:
        d += timedelta(days=1)
        if _workday(d) == workday:
            n -= 1
    return d


def _at(day: date, seconds: float, like: datetime) -> datetime:
    """That wall-clock time on ``day`` in ``like``'s zone: 9:00 stays 9:00 across DST."""
    midnight = datetime(day.year, day.month, day.day, tzinfo=like.tzinfo)
    return midnight + timedelta(seconds=seconds)  # aware arithmetic is wall-clock arithmetic


def _circular_gap(a: float, b: float) -> float:
    gap = abs(a - b) % DAY
    return min(gap, DAY - gap)


def predict_return(
    history: Sequence[Return],
    paused_at: float,
    *,
    tz: tzinfo | None = None,
    min_samples: int = MIN_SAMPLES,
    window: float = 2 * 3600.0,
    tolerance: float = 15 * 60.0,
    max_age: float = 56 * DAY,
) -> Prediction | None:
    """Predict the return after a pause at ``paused_at`` from past pause/return pairs.

    ``tz`` is the user's time zone (default: this machine's).  See the module's
    docstring for the model; None when fewer than ``min_samples`` similar
    past returns exist.
    """
    if min_samples < 1:
        raise ValueError("min_samples must be at least 1")
    now = _local(paused_at, tz)
    now_tod = _seconds_of_day(now)
    now_workday = _workday(now.date())
    similar: list[tuple[Return, datetime, datetime]] = []
    for r in history:
        if not (paused_at - max_age <= r.paused_at < r.returned_at <= paused_at):
            continue  # too old, not yet known at this pause, or malformed
        p, b = _local(r.paused_at, tz), _local(r.returned_at, tz)
        if _workday(p.date()) != now_workday:
            continue
        if _circular_gap(_seconds_of_day(p), now_tod) > window:
            continue
        similar.append((r, p, b))
    pooled = _project(similar, now, paused_at)
    same_weekday = _project([x for x in similar if x[1].weekday() == now.weekday()], now, paused_at)
    best = pooled
    if len(same_weekday) >= min_samples and (
        len(pooled) < min_samples
        or abs(statistics.median(same_weekday) - statistics.median(pooled)) > tolerance
    ):
        best = same_weekday  # this weekday has a habit of its own (a standing meeting)
    if len(best) < min_samples:
        return None
    at = statistics.median(best)
    hits = sum(1 for x in best if abs(x - at) <= tolerance)
    q = statistics.quantiles(best, n=4, method="inclusive") if len(best) > 1 else [at] * 3
    return Prediction(
        at=at,
        confidence=hits / (len(best) + 1),
        samples=len(best),
        spread=q[2] - q[0],
    )


def _project(
    similar: list[tuple[Return, datetime, datetime]], now: datetime, paused_at: float
) -> list[float]:
    """Each sample's return carried over to the new pause (same day count and wall-clock time)."""
    projected = []
    for _r, p, b in similar:
        back_workday = _workday(b.date())
        n = _days_of_type_between(p.date(), b.date(), back_workday)
        day = _nth_day_of_type(now.date(), n, back_workday) if n else now.date()
        at = _at(day, _seconds_of_day(b), now).timestamp()
        if at > paused_at:
            projected.append(at)
    return sorted(projected)


def resume_ahead_time(prediction: Prediction, resume_latency: float, margin: float) -> float:
    """When to start the resume so that it is ready ``margin`` seconds before the user."""
    return prediction.at - max(0.0, resume_latency) - max(0.0, margin)
