"""GPU-time accounting: turn the ledger into a report.

``build_report(ledger, since=None, until=None, now=None)`` replays every
session's events (the whole history up to ``until``, so that a session paused
before ``since`` is known to be paused at ``since``), cuts each session's
timeline into states, clips it to the period and aggregates per notebook, per
user and per workload class.  Definitions (also in ``docs/accounting.md``):

* **allocated**: a session holds its accelerator(s) from ``KERNEL_STARTED``
  (or the session's first event) until ``ACCELERATOR_RELEASED`` (``PAUSED``
  if no release was recorded), and again from ``CAPACITY_ACQUIRED`` or
  ``KERNEL_STARTED`` after a resume.  ``KERNEL_STOPPED`` outside a pause
  ends an allocation without counting as released by pausing ("stopped").
* **active**: the union of cell executions, each ``CELL_EXECUTED`` covering
  ``data["duration"]`` seconds ending at the event's time, intersected with
  the allocated time.
* **released**: from ``ACCELERATOR_RELEASED`` until the next
  ``CAPACITY_ACQUIRED``/``KERNEL_STARTED`` (or the period's end).
* **always-on**: what an allocation that never paused or stopped would have
  held: ``gpus`` x (period end - max(period start, session first seen)).
* GPU counts: ``data["gpus"]`` of any event of the session (a ledger that never
  says: 1); each interval uses the value in effect when it began.  All hours are
  accelerator-hours (hours x gpus).  A server records 0 at ``KERNEL_STARTED`` where
  it detects no accelerator: a report whose sessions all held none says so
  (``no_accelerator``).
* **pause latency**: ``PAUSE_REQUESTED`` -> ``ACCELERATOR_RELEASED``;
  **resume latency**: ``RESUME_REQUESTED`` -> ``FIRST_CELL_RUNNABLE``;
  **capacity wait**: ``WAITING_FOR_CAPACITY`` -> ``CAPACITY_ACQUIRED`` (or the
  next ``KERNEL_STARTED``/``FIRST_CELL_RUNNABLE``), summed per resume.
* **interruption**: a pause with ``data["auto"]`` true whose
  ``RESUME_REQUESTED`` comes within ``interruption_minutes`` (default 10) of
  the ``PAUSE_REQUESTED``.
* **restore outcome** per resume: ``snapshot`` or ``checkpoint`` from
  ``RESTORE_FINISHED.data["restored_from"]``; ``failed`` when the resume saw
  ``RESTORE_FAILED`` (or a failed resume operation) and no ``RESTORE_FINISHED``.
* **storage held now**: per session the bytes of its latest
  ``CHECKPOINT_FINISHED`` plus its latest ``SNAPSHOT_READY`` at ``until``
  (the ledger records no deletions yet; pass ``storage={path: bytes}`` from the
  checkpoint store to use the real figure).
* Median and p95 use linear interpolation between closest ranks (numpy's
  default).  A pause belongs to the period when its request (or, without one,
  its release) lies in ``[since, until)``.

JSON shape of :meth:`Report.to_json` (times are epoch seconds, durations
seconds, sizes bytes)::

    {
      "version": 1, "generated": float,
      "period": {"since": float, "until": float, "hours": float},
      "options": {"interruption_minutes": float},
      "no_accelerator": bool,   (sessions, and none held an accelerator)
      "totals": GROUP,
      "by_notebook": [GROUP],  "by_user": [GROUP],  "by_class": [GROUP],
      "sessions": [{"key", "path", "user", "workload_class", "gpus",
                    "first_seen": float,
                    "timeline": [{"start", "end", "state", "gpus"}],
                    "active": [[start, end], ...]}],
      "pauses": [PAUSE],
      "storage": {"bytes_now": int, "checkpoint_bytes_now": int,
                  "snapshot_bytes_now": int, "source": "ledger" | "given"},
      "resume_ahead": {"kinds", "total", "resumes"}   (scheduled and predicted
                      resumes: hits, misses, waiting; see report/ahead.py)
    }
    GROUP = {"key": str, "sessions": int,
             "gpu_hours": {"allocated", "active", "idle_allocated", "released",
                           "always_on", "stopped"},
             "pauses": {"count", "auto", "manual", "failed", "interruptions",
                        "resumes"},
             "pause_latency_s": STATS, "resume_latency_s": STATS,
             "capacity_wait_s": STATS + {"total", "share_of_resume"},
             "restores": {"snapshot", "checkpoint", "failed", "total",
                          "snapshot_rate", "checkpoint_rate", "failure_rate"},
             "checkpoint_bytes": STATS + {"total_written"},
             "snapshot_bytes": STATS,
             "storage_bytes_now": int}
    STATS = {"n": int, "median": float|null, "p95": float|null,
             "max": float|null, "mean": float|null}
    PAUSE = {"path", "user", "workload_class", "requested", "released",
             "auto", "reason", "failed", "resume_requested", "runnable",
             "pause_latency_s", "resume_latency_s", "capacity_wait_s",
             "restore_outcome", "checkpoint_bytes", "snapshot_bytes",
             "interrupted", "gpus", "lost"}

Timeline states: ``running``, ``pausing``, ``restoring`` (allocated),
``paused``, ``resuming``, ``waiting-for-capacity`` (released), ``stopped``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..capacity import IDLE, KEPT_UP, REUSED, SCALED_DOWN, CapacitySpan
from ..formatting import format_bytes, format_time, text_table
from ..ledger import EventType, Ledger, LedgerEvent
from ..lifecycle import State
from .ahead import ahead_text, any_ahead, resume_ahead

#: the replay's states are the lifecycle's, and one of its own: a kernel stopped outside
#: a pause (the lifecycle's session has no state once its kernel is gone)
STOPPED = "stopped"
ALLOCATED_STATES = (State.RUNNING, State.PAUSING, State.RESTORING)
RELEASED_STATES = (State.PAUSED, State.RESUMING, State.WAITING_FOR_CAPACITY)

#: what a report over sessions that held no accelerator says
NO_ACCELERATOR = (
    "No accelerator detected: these notebooks held none, so no accelerator-hours are "
    "counted (c.PauseApp.kernel_accelerators if they held some)."
)

STATES = (*ALLOCATED_STATES, *RELEASED_STATES, STOPPED)

# Deletion events are not in the ledger's closed set yet; honour them once they are.
_DELETED = tuple(
    t
    for t in (
        getattr(EventType, "CHECKPOINT_DELETED", None),
        getattr(EventType, "SNAPSHOT_DELETED", None),
    )
    if t is not None
)


# --------------------------------------------------------------------------- numbers


def quantile(values: Iterable[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None if empty."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats(values: Iterable[float]) -> dict[str, Any]:
    xs = [float(v) for v in values]
    return {
        "n": len(xs),
        "median": quantile(xs, 0.5),
        "p95": quantile(xs, 0.95),
        "max": max(xs) if xs else None,
        "mean": sum(xs) / len(xs) if xs else None,
    }


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


# --------------------------------------------------------------------------- capacity


#: the :class:`CapacitySplit` field of each capacity outcome
_SPLIT_FIELDS = {REUSED: "reused", SCALED_DOWN: "scaled_down", IDLE: "idle", KEPT_UP: "kept_up"}


@dataclass
class CapacitySplit:
    """Accelerator-seconds released by pausing, split by what became of the node.

    ``unknown`` is released time no ``CAPACITY_OUTCOME`` span covers (a backend
    that cannot see nodes, or nobody followed the node).  Node-seconds are per
    node, not per GPU: ``node_up`` while the node stayed up after the release
    (reused, idle or kept up), ``node_removed`` after it was scaled down.
    """

    released: float = 0.0
    reused: float = 0.0
    scaled_down: float = 0.0
    idle: float = 0.0
    kept_up: float = 0.0
    node_up: float = 0.0
    node_removed: float = 0.0
    nodes: tuple[str, ...] = ()
    reused_by: tuple[str, ...] = ()  # "namespace/workload class" of who took the GPU

    @property
    def unknown(self) -> float:
        return max(0.0, self.released - self.reused - self.scaled_down - self.idle - self.kept_up)

    def add(self, outcome: str, seconds: float) -> None:
        name = _SPLIT_FIELDS.get(outcome)
        if name:
            setattr(self, name, getattr(self, name) + seconds)

    def by_outcome(self) -> dict[str, float]:
        """The accelerator-seconds of each outcome (``capacity.py`` names)."""
        return {outcome: getattr(self, name) for outcome, name in _SPLIT_FIELDS.items()}

    def hours_json(self) -> dict[str, float]:
        h = 3600.0
        return {
            "released": self.released / h,
            "reused": self.reused / h,
            "scaled_down": self.scaled_down / h,
            "idle": self.idle / h,
            "kept_up": self.kept_up / h,
            "unknown": self.unknown / h,
            "node_hours_up": self.node_up / h,
            "node_hours_removed": self.node_removed / h,
        }

    def pause_json(self) -> dict[str, Any]:
        hours = self.hours_json()
        return {
            **{f"{k}_h" if not k.startswith("node_") else k: v for k, v in hours.items()},
            "nodes": ",".join(self.nodes),
            "reused_by": ",".join(self.reused_by),
        }


def split_released(
    windows: Iterable[tuple[float, float, float]], spans: list[CapacitySpan]
) -> CapacitySplit:
    """Split released ``windows`` (start, end, gpus) by the ``spans`` that overlap them."""
    out = CapacitySplit()
    up: dict[str, list[tuple[float, float]]] = {}
    down: dict[str, list[tuple[float, float]]] = {}
    nodes: list[str] = []
    reused_by: list[str] = []
    for a, b, gpus in windows:
        if b <= a:
            continue
        out.released += (b - a) * gpus
        for span in spans:
            lo, hi = max(a, span.start), min(b, span.end)
            if hi <= lo:
                continue
            out.add(span.outcome, (hi - lo) * gpus * span.share)
            (down if span.outcome == SCALED_DOWN else up).setdefault(span.node, []).append((lo, hi))
            if span.node not in nodes:
                nodes.append(span.node)
            who = f"{span.by_namespace}/{span.by_class}"
            if span.outcome == REUSED and who not in reused_by:
                reused_by.append(who)
    out.node_up = sum(b - a for iv in up.values() for a, b in merge_intervals(iv))
    out.node_removed = sum(b - a for iv in down.values() for a, b in merge_intervals(iv))
    out.nodes, out.reused_by = tuple(nodes), tuple(reused_by)
    return out


# --------------------------------------------------------------------------- records


@dataclass
class Segment:
    start: float
    end: float
    state: str
    gpus: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "state": self.state, "gpus": self.gpus}


@dataclass
class PauseRecord:
    """One pause interval: request -> release -> resume request -> runnable."""

    path: str
    user: str
    workload_class: str
    requested: float | None = None
    released: float | None = None
    auto: bool = False
    reason: str = ""
    failed: bool = False
    resume_requested: float | None = None
    runnable: float | None = None
    capacity_wait_s: float = 0.0
    waiting_since: float | None = None
    restored_from: str | None = None
    restore_failed: bool = False
    resume_failed: bool = False
    checkpoint_bytes: int | None = None
    snapshot_bytes: int | None = None
    gpus: int = 1
    interrupted: bool = False
    lost: list[str] = field(default_factory=list)  # variables the pause's checkpoint skipped
    reacquired: float | None = None  # the accelerator held again (CAPACITY_ACQUIRED …)
    capacity: CapacitySplit | None = None  # what the release did to the bill (in the period)

    @property
    def pause_latency_s(self) -> float | None:
        if self.requested is None or self.released is None:
            return None
        return self.released - self.requested

    @property
    def resume_latency_s(self) -> float | None:
        if self.resume_requested is None or self.runnable is None:
            return None
        return self.runnable - self.resume_requested

    @property
    def restore_outcome(self) -> str | None:
        if self.restored_from:
            return self.restored_from
        if self.restore_failed or self.resume_failed:
            return "failed"
        return None

    @property
    def anchor(self) -> float | None:
        """When the interval began: its request, else its release, else its resume request."""
        for t in (self.requested, self.released, self.resume_requested):
            if t is not None:
                return t
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "user": self.user,
            "workload_class": self.workload_class,
            "requested": self.requested,
            "released": self.released,
            "auto": self.auto,
            "reason": self.reason,
            "failed": self.failed,
            "resume_requested": self.resume_requested,
            "runnable": self.runnable,
            "pause_latency_s": self.pause_latency_s,
            "resume_latency_s": self.resume_latency_s,
            "capacity_wait_s": self.capacity_wait_s,
            "restore_outcome": self.restore_outcome,
            "checkpoint_bytes": self.checkpoint_bytes,
            "snapshot_bytes": self.snapshot_bytes,
            "interrupted": self.interrupted,
            "gpus": self.gpus,
            "lost": self.lost,
            "reacquired": self.reacquired,
            **(self.capacity or CapacitySplit()).pause_json(),
        }


@dataclass
class SessionRecord:
    """Everything one notebook session did, replayed from its events."""

    path: str
    user: str
    workload_class: str = ""
    first_seen: float | None = None
    gpus: int = 1  # a ledger that never says (written before it did): one each
    max_gpus: int | None = None  # the most any event said; None: none said
    state: str | None = None  # None: not started yet
    state_since: float = 0.0
    segments: list[Segment] = field(default_factory=list)
    cells: list[tuple[float, float]] = field(default_factory=list)
    pauses: list[PauseRecord] = field(default_factory=list)
    checkpoints: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes)
    snapshots: list[tuple[float, int]] = field(default_factory=list)
    deletions: list[tuple[float, str, int]] = field(default_factory=list)
    segment_gpus: int = 1

    @property
    def key(self) -> str:
        return f"{self.user}:{self.path}" if self.user else self.path

    @property
    def most_gpus(self) -> int:
        """The most accelerators the session held: 0 where the server detected none."""
        return self.gpus if self.max_gpus is None else self.max_gpus

    @property
    def current(self) -> PauseRecord | None:
        return self.pauses[-1] if self.pauses else None

    def move(self, state: State | str, t: float) -> None:
        """Into ``state`` (a lifecycle state, or ``STOPPED``) from ``t``; the timeline keeps
        its plain value, as the JSON, CSV and pictures show it."""
        state = state.value if isinstance(state, State) else state
        if state == self.state:
            return
        if self.state is not None and t > self.state_since:
            self.segments.append(Segment(self.state_since, t, self.state, self.segment_gpus))
        self.state = state
        self.state_since = t
        self.segment_gpus = self.gpus

    def close(self, t: float) -> None:
        if self.state is not None and t > self.state_since:
            self.segments.append(Segment(self.state_since, t, self.state, self.segment_gpus))
            self.state_since = t

    def new_pause(self, t_req: float | None = None, **kw: Any) -> PauseRecord:
        rec = PauseRecord(
            self.path, self.user, self.workload_class, requested=t_req, gpus=self.gpus, **kw
        )
        self.pauses.append(rec)
        return rec


def _apply(s: SessionRecord, ev: LedgerEvent) -> None:
    t, d, T = ev.time, ev.data or {}, ev.type
    if ev.workload_class:
        s.workload_class = ev.workload_class
    if isinstance(d.get("gpus"), (int, float)) and d["gpus"] >= 0:
        s.gpus = int(d["gpus"])
        s.max_gpus = max(s.max_gpus or 0, s.gpus)
    if s.first_seen is None:
        start = t
        if T == EventType.CELL_EXECUTED:
            start = t - float(d.get("duration", 0) or 0)
        s.first_seen = start
        if T not in (
            EventType.ACCELERATOR_RELEASED,
            EventType.PAUSED,
            EventType.RESUME_REQUESTED,
            EventType.WAITING_FOR_CAPACITY,
            EventType.KERNEL_STOPPED,
        ):
            s.move(State.RUNNING, start)
        else:
            s.move(State.PAUSED, start)
    st = s.state
    cur = s.current
    if T == EventType.CELL_EXECUTED:
        dur = float(d.get("duration", 0) or 0)
        s.cells.append((t - dur, t))
        if st == STOPPED:
            s.move(State.RUNNING, t - dur)
    elif T == EventType.KERNEL_STARTED:
        if st == STOPPED:
            s.move(State.RUNNING, t)
        elif st in RELEASED_STATES:
            s.move(State.RESTORING, t)
            _close_wait(cur, t)
            _reacquired(cur, t)
    elif T == EventType.CAPACITY_ACQUIRED:
        if st in RELEASED_STATES:
            s.move(State.RESTORING, t)
            _reacquired(cur, t)
        _close_wait(cur, t)
    elif T == EventType.WAITING_FOR_CAPACITY:
        if st in RELEASED_STATES:
            s.move(State.WAITING_FOR_CAPACITY, t)
        if cur is not None and cur.waiting_since is None:
            cur.waiting_since = t
    elif T == EventType.RESUME_REQUESTED:
        if cur is None or cur.resume_requested is not None:
            cur = s.new_pause(None)
        cur.resume_requested = t
        if st == State.PAUSED:
            s.move(State.RESUMING, t)
    elif T == EventType.FIRST_CELL_RUNNABLE:
        _close_wait(cur, t)
        if cur is not None and cur.resume_requested is not None and cur.runnable is None:
            cur.runnable = t
        if st in RELEASED_STATES:
            _reacquired(cur, t)
        if st in (*RELEASED_STATES, State.RESTORING, STOPPED):
            s.move(State.RUNNING, t)
    elif T == EventType.PAUSE_REQUESTED:
        if st in ALLOCATED_STATES:
            s.new_pause(t, auto=bool(d.get("auto", False)), reason=str(d.get("reason", "") or ""))
            s.move(State.PAUSING, t)
    elif T in (EventType.ACCELERATOR_RELEASED, EventType.PAUSED):
        if st in ALLOCATED_STATES:
            if st != State.PAUSING or cur is None or cur.released is not None:
                cur = s.new_pause(None)
            cur.released = t
            cur.gpus = s.gpus
            s.move(State.PAUSED, t)
    elif T == EventType.KERNEL_STOPPED:
        resuming = cur is not None and cur.resume_requested is not None and cur.runnable is None
        if st == State.RESTORING and resuming:
            s.move(State.PAUSED, t)  # a failed restore stopped the kernel it had started
        elif st in (State.RUNNING, State.RESTORING):
            s.move(STOPPED, t)
    elif T == EventType.OPERATION_FAILED:
        op = str(d.get("operation", "") or "")
        if st == State.PAUSING and op in ("pause", ""):
            if cur is not None:
                cur.failed = True
            s.move(State.RUNNING, t)
        elif op == "resume" and cur is not None and cur.resume_requested is not None:
            cur.resume_failed = True
            _close_wait(cur, t)
            if st in (State.RESUMING, State.WAITING_FOR_CAPACITY):
                s.move(State.PAUSED, t)
            elif st == State.RESTORING:
                s.move(State.RUNNING, t)
    elif T == EventType.RESTORE_FINISHED:
        if cur is not None and cur.resume_requested is not None and cur.runnable is None:
            cur.restored_from = str(d.get("restored_from", "checkpoint") or "checkpoint")
    elif T == EventType.RESTORE_FAILED:
        if cur is not None and cur.resume_requested is not None and cur.runnable is None:
            cur.restore_failed = True
    elif T == EventType.CHECKPOINT_FINISHED:
        nbytes = int(d.get("bytes", 0) or 0)
        s.checkpoints.append((t, nbytes))
        if st == State.PAUSING and cur is not None:
            cur.checkpoint_bytes = nbytes
            cur.lost = sorted(d.get("skipped") or [])
    elif T == EventType.SNAPSHOT_READY:
        nbytes = int(d.get("bytes", 0) or 0)
        s.snapshots.append((t, nbytes))
        if cur is not None and cur.resume_requested is None:
            cur.snapshot_bytes = nbytes
    elif T in _DELETED:
        s.deletions.append((t, T.value, int(d.get("bytes", 0) or 0)))


def _reacquired(cur: PauseRecord | None, t: float) -> None:
    if cur is not None and cur.released is not None and cur.reacquired is None:
        cur.reacquired = t


def _close_wait(cur: PauseRecord | None, t: float) -> None:
    if cur is not None and cur.waiting_since is not None:
        cur.capacity_wait_s += max(0.0, t - cur.waiting_since)
        cur.waiting_since = None


# --------------------------------------------------------------------------- aggregation


@dataclass
class _Clipped:
    """One session's figures inside the period."""

    session: SessionRecord
    since: float
    until: float
    allocated: float = 0.0  # gpu-seconds
    active: float = 0.0
    released: float = 0.0
    stopped: float = 0.0
    always_on: float = 0.0
    pauses: list[PauseRecord] = field(default_factory=list)
    storage_checkpoint: int = 0
    storage_snapshot: int = 0
    timeline: list[Segment] = field(default_factory=list)
    active_intervals: list[tuple[float, float]] = field(default_factory=list)
    spans: list[CapacitySpan] = field(default_factory=list)  # the server's node outcomes


def _clip(
    s: SessionRecord,
    since: float,
    until: float,
    interruption_s: float,
    spans: list[CapacitySpan] | None = None,
) -> _Clipped:
    c = _Clipped(s, since, until, spans=list(spans or []))
    for seg in s.segments:
        a, b = max(seg.start, since), min(seg.end, until)
        if b <= a:
            continue
        c.timeline.append(Segment(a, b, seg.state, seg.gpus))
        dt = (b - a) * seg.gpus
        if seg.state in ALLOCATED_STATES:
            c.allocated += dt
        elif seg.state in RELEASED_STATES:
            c.released += dt
        else:
            c.stopped += dt
    cells = merge_intervals((max(a, since), min(b, until)) for a, b in s.cells)
    c.active_intervals = cells
    first = 0  # both in time order, so one sweep (not every cell for every segment)
    for seg in c.timeline:
        if seg.state not in ALLOCATED_STATES:
            continue
        while first < len(cells) and cells[first][1] <= seg.start:
            first += 1
        i = first
        while i < len(cells) and cells[i][0] < seg.end:
            c.active += _overlap(*cells[i], seg.start, seg.end) * seg.gpus
            i += 1
    if s.first_seen is not None and s.first_seen < until:
        c.always_on = (until - max(since, s.first_seen)) * s.most_gpus
    for p in s.pauses:
        anchor = p.anchor
        if anchor is None or not (since <= anchor < until):
            continue
        p.interrupted = bool(
            p.auto
            and p.requested is not None
            and p.resume_requested is not None
            and p.resume_requested - p.requested <= interruption_s
        )
        if p.released is not None:
            end = until if p.reacquired is None else min(p.reacquired, until)
            p.capacity = split_released(
                [(max(p.released, since), end, p.gpus)], [x for x in c.spans if x.start < end]
            )
        c.pauses.append(p)
    deleted_before = [t for t, _, _ in s.deletions if t < until]
    last_del = max(deleted_before) if deleted_before else None
    cps = [(t, b) for t, b in s.checkpoints if t < until and (last_del is None or t > last_del)]
    sns = [(t, b) for t, b in s.snapshots if t < until and (last_del is None or t > last_del)]
    c.storage_checkpoint = cps[-1][1] if cps else 0
    c.storage_snapshot = sns[-1][1] if sns else 0
    return c


def _group(key: str, items: list[_Clipped]) -> dict[str, Any]:
    pauses = [p for c in items for p in c.pauses]
    real = [p for p in pauses if p.requested is not None]
    resumes = [p for p in pauses if p.resume_requested is not None]
    outcomes = [p.restore_outcome for p in resumes if p.restore_outcome]
    n_out = len(outcomes)
    resume_lat = [p.resume_latency_s for p in resumes if p.resume_latency_s is not None]
    waits = [p.capacity_wait_s for p in resumes if p.capacity_wait_s > 0]
    cp_bytes = [
        b
        for c in items
        for t, b in c.session.checkpoints
        if _in(t, c)  # checkpoints taken inside the period
    ]
    sn_bytes = [b for c in items for t, b in c.session.snapshots if _in(t, c)]
    h = 3600.0
    allocated = sum(c.allocated for c in items)
    active = sum(c.active for c in items)
    total_resume = sum(p.resume_latency_s for p in resumes if p.resume_latency_s is not None)
    total_wait_in_resumed = sum(
        p.capacity_wait_s for p in resumes if p.resume_latency_s is not None
    )

    def rate(name: str) -> float | None:
        return outcomes.count(name) / n_out if n_out else None

    cw = stats(waits)
    cw["total"] = sum(p.capacity_wait_s for p in resumes)
    cw["share_of_resume"] = total_wait_in_resumed / total_resume if total_resume > 0 else None
    cb = stats(cp_bytes)
    cb["total_written"] = sum(cp_bytes)
    capacity = _capacity(items)
    always_on = sum(c.always_on for c in items)

    def share(seconds: float) -> float | None:
        return seconds / always_on if always_on > 0 else None

    return {
        "key": key,
        "sessions": len(items),
        "gpu_hours": {
            "allocated": allocated / h,
            "active": active / h,
            "idle_allocated": (allocated - active) / h,
            "released": sum(c.released for c in items) / h,
            "always_on": sum(c.always_on for c in items) / h,
            "stopped": sum(c.stopped for c in items) / h,
        },
        "capacity": capacity.hours_json(),
        "always_on_share": {
            "allocated": share(allocated),
            "active": share(active),
            "released": share(capacity.released),
            "bill_reduced": share(capacity.scaled_down),
            "reused": share(capacity.reused),
            "no_saving": share(capacity.idle + capacity.kept_up),
            "unknown": share(capacity.unknown),
        },
        "pauses": {
            "count": len(real),
            "auto": sum(1 for p in real if p.auto),
            "manual": sum(1 for p in real if not p.auto),
            "failed": sum(1 for p in real if p.failed),
            "interruptions": sum(1 for p in real if p.interrupted),
            "resumes": len(resumes),
        },
        "pause_latency_s": stats(p.pause_latency_s for p in real if p.pause_latency_s is not None),
        "resume_latency_s": stats(resume_lat),
        "capacity_wait_s": cw,
        "restores": {
            "snapshot": outcomes.count("snapshot"),
            "checkpoint": outcomes.count("checkpoint"),
            "failed": outcomes.count("failed"),
            "total": n_out,
            "snapshot_rate": rate("snapshot"),
            "checkpoint_rate": rate("checkpoint"),
            "failure_rate": rate("failed"),
        },
        "checkpoint_bytes": cb,
        "snapshot_bytes": stats(sn_bytes),
        "storage_bytes_now": sum(c.storage_checkpoint + c.storage_snapshot for c in items),
    }


def _capacity(items: list[_Clipped]) -> CapacitySplit:
    """The released time of ``items`` split by outcome; a node counted once per user."""
    total = CapacitySplit()
    by_user: dict[str, tuple[list[tuple[float, float, float]], list[CapacitySpan]]] = {}
    for c in items:
        windows, spans = by_user.setdefault(c.session.user, ([], c.spans))
        windows += [
            (seg.start, seg.end, seg.gpus) for seg in c.timeline if seg.state in RELEASED_STATES
        ]
    for windows, spans in by_user.values():
        part = split_released(windows, spans)
        for name in ("released", "reused", "scaled_down", "idle", "kept_up"):
            setattr(total, name, getattr(total, name) + getattr(part, name))
        # the node-hours of one server's node, however many of its notebooks were paused
        nodes = split_released([(a, b, 1.0) for a, b in _union(windows)], spans)
        total.node_up += nodes.node_up
        total.node_removed += nodes.node_removed
    return total


def _union(windows: list[tuple[float, float, float]]) -> list[tuple[float, float]]:
    return merge_intervals((a, b) for a, b, _ in windows)


def _in(t: float, c: _Clipped) -> bool:
    return c.since <= t < c.until


# --------------------------------------------------------------------------- the report


@dataclass
class Report:
    since: float
    until: float
    generated: float
    interruption_minutes: float
    clipped: list[_Clipped]
    storage_given: dict[str, int] | None = None
    ahead: dict[str, Any] | None = None  # resumes ahead of the user (report/ahead.py)
    _json: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        if self._json is not None:
            return self._json
        items = self.clipped
        if self.storage_given is not None:
            for c in items:
                c.storage_checkpoint = int(self.storage_given.get(c.session.path, 0))
                c.storage_snapshot = 0

        def groups(keyf) -> list[dict[str, Any]]:
            buckets: dict[str, list[_Clipped]] = {}
            for c in items:
                buckets.setdefault(keyf(c), []).append(c)
            return [_group(k, v) for k, v in sorted(buckets.items())]

        by_notebook = []
        for c in sorted(items, key=lambda c: c.session.key):
            g = _group(c.session.path, [c])
            g.update(user=c.session.user, workload_class=c.session.workload_class)
            by_notebook.append(g)
        self._json = {
            "version": 1,
            "generated": self.generated,
            "period": {
                "since": self.since,
                "until": self.until,
                "hours": (self.until - self.since) / 3600.0,
            },
            "options": {"interruption_minutes": self.interruption_minutes},
            # sessions, and not one held an accelerator: said, not left to be guessed
            # from zeros (the server detected none, c.PauseApp.kernel_accelerators)
            "no_accelerator": bool(items) and all(c.session.most_gpus == 0 for c in items),
            "totals": _group("total", items),
            "by_notebook": by_notebook,
            "by_user": groups(lambda c: c.session.user or "(unknown)"),
            "by_class": groups(lambda c: c.session.workload_class or "(default)"),
            "sessions": [
                {
                    "key": c.session.key,
                    "path": c.session.path,
                    "user": c.session.user,
                    "workload_class": c.session.workload_class,
                    "gpus": c.session.most_gpus,
                    "first_seen": c.session.first_seen,
                    "timeline": [seg.to_json() for seg in c.timeline],
                    "active": [[a, b] for a, b in c.active_intervals],
                }
                for c in sorted(items, key=lambda c: c.session.key)
            ],
            "pauses": [
                p.to_json()
                for p in sorted(
                    (p for c in items for p in c.pauses), key=lambda p: (p.anchor or 0, p.path)
                )
            ],
            "storage": {
                "bytes_now": sum(c.storage_checkpoint + c.storage_snapshot for c in items),
                "checkpoint_bytes_now": sum(c.storage_checkpoint for c in items),
                "snapshot_bytes_now": sum(c.storage_snapshot for c in items),
                "source": "given" if self.storage_given is not None else "ledger",
            },
            "resume_ahead": self.ahead,
        }
        return self._json

    # ---- CSV
    GROUP_COLUMNS = (
        "scope",
        "key",
        "sessions",
        "allocated_h",
        "active_h",
        "idle_allocated_h",
        "released_h",
        "always_on_h",
        "pauses",
        "auto_pauses",
        "interruptions",
        "resumes",
        "pause_median_s",
        "pause_p95_s",
        "resume_median_s",
        "resume_p95_s",
        "capacity_wait_total_s",
        "released_reused_h",
        "released_scaled_down_h",
        "released_idle_h",
        "released_kept_up_h",
        "released_unknown_h",
        "node_hours_up",
        "node_hours_removed",
        "restores_snapshot",
        "restores_checkpoint",
        "restores_failed",
        "checkpoint_max_bytes",
        "storage_bytes_now",
    )

    def group_rows(self) -> list[dict[str, Any]]:
        data = self.to_json()
        rows = []
        for scope, g in scoped_groups(data):
            gh = g["gpu_hours"]
            rows.append(
                {
                    "scope": scope,
                    "key": g["key"],
                    "sessions": g["sessions"],
                    "allocated_h": round(gh["allocated"], 4),
                    "active_h": round(gh["active"], 4),
                    "idle_allocated_h": round(gh["idle_allocated"], 4),
                    "released_h": round(gh["released"], 4),
                    "always_on_h": round(gh["always_on"], 4),
                    "pauses": g["pauses"]["count"],
                    "auto_pauses": g["pauses"]["auto"],
                    "interruptions": g["pauses"]["interruptions"],
                    "resumes": g["pauses"]["resumes"],
                    "pause_median_s": _r(g["pause_latency_s"]["median"]),
                    "pause_p95_s": _r(g["pause_latency_s"]["p95"]),
                    "resume_median_s": _r(g["resume_latency_s"]["median"]),
                    "resume_p95_s": _r(g["resume_latency_s"]["p95"]),
                    "capacity_wait_total_s": _r(g["capacity_wait_s"]["total"]),
                    "released_reused_h": round(g["capacity"]["reused"], 4),
                    "released_scaled_down_h": round(g["capacity"]["scaled_down"], 4),
                    "released_idle_h": round(g["capacity"]["idle"], 4),
                    "released_kept_up_h": round(g["capacity"]["kept_up"], 4),
                    "released_unknown_h": round(g["capacity"]["unknown"], 4),
                    "node_hours_up": round(g["capacity"]["node_hours_up"], 4),
                    "node_hours_removed": round(g["capacity"]["node_hours_removed"], 4),
                    "restores_snapshot": g["restores"]["snapshot"],
                    "restores_checkpoint": g["restores"]["checkpoint"],
                    "restores_failed": g["restores"]["failed"],
                    "checkpoint_max_bytes": g["checkpoint_bytes"]["max"] or 0,
                    "storage_bytes_now": g["storage_bytes_now"],
                }
            )
        return rows

    def to_csv(self, table: str = "groups") -> str:
        """``groups``: one row per total/notebook/user/class; ``pauses``: one row per pause."""
        out = io.StringIO()
        if table == "pauses":
            rows = self.to_json()["pauses"]
            cols = list(PauseRecord("", "", "").to_json())
        elif table == "groups":
            rows = self.group_rows()
            cols = list(self.GROUP_COLUMNS)
        else:
            raise ValueError(f"unknown table {table!r}: use groups or pauses")
        w = csv.DictWriter(out, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: "" if row.get(k) is None else row.get(k) for k in cols})
        return out.getvalue()

    # ---- terminal
    def to_text(self) -> str:
        data = self.to_json()
        p = data["period"]
        lines = [
            f"GPU-time report  {format_time(p['since'])} .. {format_time(p['until'])}"
            f"  ({p['hours']:.1f} h, {len(data['sessions'])} sessions)",
            "",
            "Accelerator-hours",
        ]
        if data["no_accelerator"]:
            lines.insert(2, NO_ACCELERATOR + "\n")
        head = [
            "scope",
            "key",
            "allocated",
            "active",
            "idle",
            "released",
            "always-on",
            "pauses",
            "interrupt.",
        ]
        rows = []
        for scope, g in scoped_groups(data):
            gh = g["gpu_hours"]
            rows.append(
                [
                    scope,
                    g["key"],
                    f"{gh['allocated']:.2f}",
                    f"{gh['active']:.2f}",
                    f"{gh['idle_allocated']:.2f}",
                    f"{gh['released']:.2f}",
                    f"{gh['always_on']:.2f}",
                    str(g["pauses"]["count"]),
                    str(g["pauses"]["interruptions"]),
                ]
            )
        lines += text_table(head, rows, right=range(2, 9))
        lines += ["", *bill_text(data)]
        t = data["totals"]
        lines += ["", "Latency (seconds)"]
        lrows = []
        for name, key in (
            ("pause: request -> accelerator released", "pause_latency_s"),
            ("resume: request -> next cell runnable", "resume_latency_s"),
            ("  of which waiting for capacity", "capacity_wait_s"),
        ):
            st = t[key]
            lrows.append([name, str(st["n"]), _f(st["median"]), _f(st["p95"]), _f(st["max"])])
        lines += text_table(["", "n", "median", "p95", "max"], lrows, right=range(1, 5))
        share = t["capacity_wait_s"]["share_of_resume"]
        if share is not None:
            lines.append(
                f"capacity wait: {t['capacity_wait_s']['total']:.1f} s in total, {share:.0%} of resume time"
            )
        r = t["restores"]
        cb, sb = t["checkpoint_bytes"], t["snapshot_bytes"]
        lines += [
            "",
            "Restores: "
            + (
                f"{r['snapshot']} from snapshot, {r['checkpoint']} from checkpoint (fallback), "
                f"{r['failed']} failed of {r['total']}"
                if r["total"]
                else "none"
            ),
            f"Checkpoints: {cb['n']} (median {format_bytes(cb['median'])}, max {format_bytes(cb['max'])}); "
            f"snapshots: {sb['n']} (median {format_bytes(sb['median'])}, max {format_bytes(sb['max'])})",
            f"Storage held now: {format_bytes(data['storage']['bytes_now'])}"
            f" ({data['storage']['source']})",
            f"Interruptions (auto-pause resumed within {data['options']['interruption_minutes']:g} min): "
            f"{t['pauses']['interruptions']} of {t['pauses']['auto']} auto-pauses",
        ]
        if any_ahead(data.get("resume_ahead")):
            lines += ["", *ahead_text(data["resume_ahead"])]
        return "\n".join(lines) + "\n"


def bill_text(data: dict[str, Any]) -> list[str]:
    """What the pauses did to the bill: the released hours by node outcome, per user."""
    lines = [
        "What pausing did to the bill (accelerator-hours released, by what became of the node)"
    ]
    head = [
        "scope",
        "key",
        "released",
        "reused",
        "scaled down",
        "idle",
        "kept up",
        "unknown",
        "node-h up",
        "node-h removed",
    ]
    rows = []
    for scope, g in scoped_groups(data):
        if scope not in ("total", "user"):
            continue
        cap = g["capacity"]
        rows.append(
            [
                scope,
                g["key"],
                *(
                    f"{cap[k]:.2f}"
                    for k in (
                        "released",
                        "reused",
                        "scaled_down",
                        "idle",
                        "kept_up",
                        "unknown",
                        "node_hours_up",
                        "node_hours_removed",
                    )
                ),
            ]
        )
    lines += text_table(head, rows, right=range(2, 10))
    t = data["totals"]
    share, on = t["always_on_share"], t["gpu_hours"]["always_on"]
    if share["allocated"] is not None:
        lines.append(
            f"always-on {on:.1f} h: allocated {_pct(share['allocated'])}, released "
            f"{_pct(share['released'])}; of the always-on hours the bill was reduced by "
            f"{_pct(share['bill_reduced'])} (nodes scaled down), other work reused "
            f"{_pct(share['reused'])}, no saving on {_pct(share['no_saving'])} (idle or kept up), "
            f"node outcome unknown for {_pct(share['unknown'])}"
        )
    if t["capacity"]["released"] > 0 and t["capacity"]["unknown"] >= t["capacity"]["released"]:
        lines.append(
            "node outcome unknown: this backend cannot see nodes (or nobody followed them)"
        )
    return lines


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def scoped_groups(data: dict[str, Any]):
    """(scope, group) for the totals, then each notebook, user and class."""
    yield "total", data["totals"]
    for scope, key in (("notebook", "by_notebook"), ("user", "by_user"), ("class", "by_class")):
        for group in data[key]:
            yield scope, group


def build_report(
    ledger: Ledger | Iterable[LedgerEvent],
    since: float | None = None,
    until: float | None = None,
    now: float | None = None,
    *,
    interruption_minutes: float = 10.0,
    storage: dict[str, int] | None = None,
) -> Report:
    """Build the report for ``[since, until)``.

    ``until`` defaults to ``now`` (default: the clock); ``since`` to the first
    event.  ``ledger`` may also be a plain iterable of events (tests, or events
    fetched over ``GET events``).
    """
    now = time.time() if now is None else now
    until = now if until is None else until
    if isinstance(ledger, Ledger):
        events = ledger.events(until=until)
    else:
        events = sorted((e for e in ledger if e.time < until), key=lambda e: (e.time, e.id or 0))
    if since is None:
        since = min((e.time for e in events), default=until)
        for e in events:
            if e.type == EventType.CELL_EXECUTED:
                since = min(since, e.time - float((e.data or {}).get("duration", 0) or 0))
    sessions: dict[tuple[str, str], SessionRecord] = {}
    spans: dict[str, list[CapacitySpan]] = {}
    for ev in events:
        if not ev.path:
            if ev.type == EventType.CAPACITY_OUTCOME:
                # an unreadable span is skipped: its time stays "unknown"
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    spans.setdefault(ev.user, []).append(CapacitySpan.from_json(ev.data or {}))
            continue  # server-wide events
        key = (ev.user, ev.path)
        s = sessions.get(key)
        if s is None:
            s = sessions[key] = SessionRecord(path=ev.path, user=ev.user)
        _apply(s, ev)
    clipped = []
    for s in sessions.values():
        s.close(until)
        c = _clip(s, since, until, interruption_minutes * 60.0, spans.get(s.user))
        if c.timeline or c.pauses:
            clipped.append(c)
    return Report(
        since=since,
        until=until,
        generated=now,
        interruption_minutes=interruption_minutes,
        clipped=clipped,
        storage_given=storage,
        ahead=resume_ahead(events, since, until),
    )


_REL = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")


def parse_time(value: str | float | None, now: float | None = None) -> float | None:
    """``2025-01-31``, ``2025-01-31T09:00``, epoch seconds, or ``7d``/``12h``/``30m`` ago."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    now = time.time() if now is None else now
    v = value.strip()
    m = _REL.match(v)
    if m:
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        return now - float(m.group(1)) * mult
    try:
        return float(v)
    except ValueError:
        pass
    dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()
