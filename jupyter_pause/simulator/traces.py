"""Activity traces for the idle-threshold simulator.

A trace is a set of sessions; each session holds accelerator(s) from
``start`` to ``end`` when always on, and is *active* (the idle detector sees
work) during its ``active`` intervals.  Gaps between them are idle time that
an idle threshold may turn into a pause.

Three sources:

* :func:`synthetic` - a seeded, deterministic generator with workday
  patterns: arrivals around 8:00-9:30 with a crowd arriving at 9:00 sharp,
  focus blocks separated by short thinking gaps, meetings, lunch, a
  departure around 17:00-18:30, overnight breaks and a work-free weekend;
* :func:`read_csv` - one row per active interval
  (``session,user,start,end[,gpus,workload_class,session_start,session_end]``;
  times as epoch seconds or ISO 8601, UTC unless they carry an offset);
* :func:`from_ledger` - ``CELL_EXECUTED`` events (``data.duration``).
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..report.build import merge_intervals

MIN = 60.0
HOUR = 3600.0
DAY = 86400.0
#: Monday 2025-01-06 00:00 UTC: the synthetic week starts here.
SYNTHETIC_START = 1736121600.0


@dataclass
class TraceSession:
    id: str
    user: str
    start: float
    end: float
    active: list[tuple[float, float]] = field(default_factory=list)
    gpus: int = 1
    workload_class: str = ""

    def __post_init__(self) -> None:
        self.active = [
            (max(a, self.start), min(b, self.end))
            for a, b in merge_intervals(self.active)
            if min(b, self.end) > max(a, self.start)
        ]

    @property
    def active_seconds(self) -> float:
        return sum(b - a for a, b in self.active)


@dataclass
class Trace:
    sessions: list[TraceSession]
    start: float
    end: float
    source: str = ""

    @property
    def users(self) -> list[str]:
        return sorted({s.user for s in self.sessions})

    def active_user_days(self) -> int:
        """(user, UTC calendar day) pairs with any activity: the denominator of waiting budgets."""
        days = set()
        for s in self.sessions:
            for a, b in s.active:
                d = int(a // DAY)
                while d * DAY < b:
                    days.add((s.user, d))
                    d += 1
        return len(days)

    def to_csv(self) -> str:
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(
            [
                "session",
                "user",
                "start",
                "end",
                "gpus",
                "workload_class",
                "session_start",
                "session_end",
            ]
        )
        for s in self.sessions:
            for a, b in s.active:
                w.writerow(
                    [
                        s.id,
                        s.user,
                        _iso(a),
                        _iso(b),
                        s.gpus,
                        s.workload_class,
                        _iso(s.start),
                        _iso(s.end),
                    ]
                )
        return out.getvalue()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _parse(v: str) -> float:
    v = v.strip()
    try:
        return float(v)
    except ValueError:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.timestamp()


# --------------------------------------------------------------------------- synthetic


def synthetic(
    users: int = 8,
    days: int = 7,
    seed: int = 0,
    start: float = SYNTHETIC_START,
    crowd: float = 0.5,
    gpus: int = 1,
) -> Trace:
    """A week of GPU-notebook use.  Deterministic for a given ``seed``.

    Per user and workday (Monday-Friday; ``start`` is a Monday 00:00 UTC):

    * arrival: the first ``crowd`` fraction of users at 9:00 (+0-2 min; the
      "everyone comes back at 9" crowd), the others uniformly 8:00-9:30;
    * departure: uniformly 17:00-18:30;
    * lunch: starting 11:45-12:30, lasting 35-70 min;
    * meetings: with probability 0.6 one of 30 or 60 min at 10:00, 14:00 or
      15:30; with probability 0.3 a second one;
    * work between these is split into focus blocks of 15-60 min separated
      by thinking gaps of 2-12 min; with probability 0.3 a 15-25 min coffee
      break in the afternoon.

    Each user has one session from the first arrival until the end of the
    trace (an always-on allocation would hold it all week).
    """
    end = start + days * DAY
    n_crowd = round(users * crowd)
    sessions = []
    for u in range(users):
        rng = random.Random(f"synthetic:{seed}:{u}")
        active: list[tuple[float, float]] = []
        for d in range(days):
            day = start + d * DAY
            if (d % 7) >= 5:
                continue  # weekend
            if u < n_crowd:
                arrive = day + 9 * HOUR + rng.uniform(0, 2 * MIN)
            else:
                arrive = day + 8 * HOUR + rng.uniform(0, 90 * MIN)
            leave = day + 17 * HOUR + rng.uniform(0, 90 * MIN)
            breaks = []
            lunch = day + 11.75 * HOUR + rng.uniform(0, 45 * MIN)
            breaks.append((lunch, lunch + rng.uniform(35, 70) * MIN))
            for p in (0.6, 0.3):
                if rng.random() < p:
                    at = day + rng.choice((10.0, 14.0, 15.5)) * HOUR
                    breaks.append((at, at + rng.choice((30, 60)) * MIN))
            if rng.random() < 0.3:
                at = day + 15 * HOUR + rng.uniform(0, 60 * MIN)
                breaks.append((at, at + rng.uniform(15, 25) * MIN))
            breaks = merge_intervals(breaks)
            t = arrive
            for b0, b1 in [*breaks, (leave, leave)]:
                # work from t to b0 in focus blocks
                while t < min(b0, leave):
                    block_end = min(t + rng.uniform(15, 60) * MIN, b0, leave)
                    active.append((t, block_end))
                    t = block_end + rng.uniform(2, 12) * MIN
                t = max(t, b1)
                if t >= leave:
                    break
        first = min((a for a, _ in active), default=start)
        sessions.append(
            TraceSession(
                id=f"user{u + 1:02d}/model.ipynb",
                user=f"user{u + 1:02d}",
                start=first,
                end=end,
                active=active,
                gpus=gpus,
                workload_class="gpu-notebook",
            )
        )
    return Trace(sessions, start, end, source=f"synthetic(users={users}, days={days}, seed={seed})")


# --------------------------------------------------------------------------- CSV


def read_csv(source: str | Path | io.TextIOBase, until: float | None = None) -> Trace:
    """Read one row per active interval.  Required columns: ``session``, ``start``, ``end``."""
    text = Path(source).read_text() if isinstance(source, (str, Path)) else source.read()
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError("the trace CSV has no rows")
    missing = {"session", "start", "end"} - set(rows[0])
    if missing:
        raise ValueError(f"the trace CSV lacks column(s): {', '.join(sorted(missing))}")
    by: dict[str, dict] = {}
    for r in rows:
        s = by.setdefault(
            r["session"],
            {"user": "", "active": [], "gpus": 1, "wc": "", "start": None, "end": None},
        )
        s["user"] = (r.get("user") or "").strip() or s["user"] or r["session"]
        s["active"].append((_parse(r["start"]), _parse(r["end"])))
        if (r.get("gpus") or "").strip():
            s["gpus"] = int(float(r["gpus"]))
        s["wc"] = (r.get("workload_class") or "").strip() or s["wc"]
        if (r.get("session_start") or "").strip():
            s["start"] = _parse(r["session_start"])
        if (r.get("session_end") or "").strip():
            s["end"] = _parse(r["session_end"])
    t_end = until or max(
        max(b for _, b in s["active"]) if s["end"] is None else s["end"] for s in by.values()
    )
    sessions = []
    for sid, s in by.items():
        start = s["start"] if s["start"] is not None else min(a for a, _ in s["active"])
        sessions.append(
            TraceSession(sid, s["user"], start, s["end"] or t_end, s["active"], s["gpus"], s["wc"])
        )
    t_start = min(s.start for s in sessions)
    return Trace(
        sessions, t_start, t_end, source=str(source) if isinstance(source, (str, Path)) else "csv"
    )


# --------------------------------------------------------------------------- ledger


def from_ledger(ledger, since: float | None = None, until: float | None = None) -> Trace:
    """Activity from the ledger's ``CELL_EXECUTED`` events (``data.duration`` s ending then).

    A session starts at its first event and lasts to ``until`` (default: the
    last event): the always-on baseline.
    """
    from ..ledger import EventType, Ledger

    events: Iterable = (
        ledger.events(since=since, until=until) if isinstance(ledger, Ledger) else ledger
    )
    by: dict[tuple[str, str], dict] = {}
    last = 0.0
    for e in events:
        if not e.path:
            continue
        last = max(last, e.time)
        s = by.setdefault((e.user, e.path), {"first": e.time, "active": [], "gpus": 1, "wc": ""})
        d = e.data or {}
        if isinstance(d.get("gpus"), (int, float)):
            s["gpus"] = max(s["gpus"], int(d["gpus"]))
        s["wc"] = e.workload_class or s["wc"]
        if e.type == EventType.CELL_EXECUTED:
            dur = float(d.get("duration", 0) or 0)
            s["active"].append((e.time - dur, e.time))
            s["first"] = min(s["first"], e.time - dur)
    end = until if until is not None else last
    sessions = [
        TraceSession(path, user or "(unknown)", s["first"], end, s["active"], s["gpus"], s["wc"])
        for (user, path), s in sorted(by.items())
        if s["active"]
    ]
    start = since if since is not None else min((s.start for s in sessions), default=end)
    return Trace(sessions, start, end, source="ledger")
