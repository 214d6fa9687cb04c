"""The fleet: every user's notebooks in one view, also while their servers are stopped.

A server cannot be asked for its report while it is paused (it is gone), so
each server hands over its ledger **rolled up**: one :class:`FleetRow` per
notebook, its totals since the ledger began, as of one moment
(:func:`rows_from_report`).  Where they are kept depends on the platform
(the ``jupyter-pause-hub`` service under JupyterHub, an annotation of each
workspace's state object under Kubernetes); :func:`build_fleet` adds them up
per user and per workload class, whoever collected them.

A row replaces the row with the same :attr:`FleetRow.key` when it is newer
(:func:`merge_rows`), so a row sent twice is counted once.  A row counts up to
its ``as_of``; a notebook that was paused then (no accelerator held) stays
released until now, since only a resume can allocate again and a running server
sends a new row after it.  Definitions: docs/accounting.md, "The fleet".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from html import escape
from typing import Any

from ..capacity import OUTCOMES
from ..formatting import format_bytes, format_time, text_table
from ..lifecycle import State
from .build import (
    ALLOCATED_STATES,
    RELEASED_STATES,
    STATES,
    STOPPED,
    Report,
    split_released,
    stats,
)

#: resume latencies a row keeps (its notebook's latest ones)
MAX_LATENCIES = 32
#: what a capacity outcome may be (docs/accounting.md); a row without any is "unknown"
CAPACITY_OUTCOMES = OUTCOMES
#: at most so many characters in a user, server, path or class name
MAX_NAME = 1024


class RowError(ValueError):
    """A row handed over is malformed (the message says which field)."""


@dataclass(frozen=True)
class CapacityOutcome:
    """What became of accelerator time released by pausing: ``outcome`` (one of
    :data:`CAPACITY_OUTCOMES`) for ``accelerator_seconds``."""

    outcome: str
    accelerator_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "accelerator_seconds": self.accelerator_seconds}


@dataclass(frozen=True)
class FleetRow:
    """One notebook's totals since its server's ledger began, as of ``as_of``."""

    user: str
    server: str  # the Hub server name ("" for the default) or the Kubernetes workspace
    path: str
    workload_class: str
    as_of: float  # epoch seconds
    state: str  # its timeline state at as_of (report/build.py STATES)
    gpus: int  # accelerators it held, or would hold, at as_of
    allocated_s: float  # accelerator-seconds
    active_s: float
    released_s: float
    pauses: int
    resumes: int
    resume_latencies_s: tuple[float, ...] = ()  # its latest resumes, at most MAX_LATENCIES
    storage_bytes: int = 0
    #: what became of its released time, as far as known (``CAPACITY_OUTCOME`` spans);
    #: the rest of ``released_s`` is unknown (empty: the backend cannot see nodes)
    capacity: tuple[CapacityOutcome, ...] = ()

    @property
    def released_unknown_s(self) -> float:
        """Released accelerator-seconds whose capacity outcome is not known."""
        return max(0.0, self.released_s - sum(c.accelerator_seconds for c in self.capacity))

    @property
    def key(self) -> str:
        """The row's id: one per notebook of one server of one user."""
        return f"{self.user}/{self.server}/{self.path}"

    def at(self, now: float) -> FleetRow:
        """The row carried to ``now``: a notebook paused at ``as_of`` is still released."""
        if self.state not in RELEASED_STATES or now <= self.as_of:
            return self
        extra = (now - self.as_of) * self.gpus
        return replace(self, as_of=now, released_s=self.released_s + extra)

    def paused_from(self, t: float) -> FleetRow:
        """The row of a notebook whose whole server (a pod) is paused now, since ``t``,
        by a pause it could not hand over (a snapshot freezes the process inside it):
        allocated as it was until ``t`` (or its ``as_of``, if later), released from then."""
        if self.state not in ALLOCATED_STATES:
            return self
        held = max(0.0, t - self.as_of) * self.gpus
        return replace(
            self,
            as_of=max(t, self.as_of),
            state=State.PAUSED.value,
            allocated_s=self.allocated_s + held,
            pauses=self.pauses + 1,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "server": self.server,
            "path": self.path,
            "workload_class": self.workload_class,
            "as_of": self.as_of,
            "state": self.state,
            "gpus": self.gpus,
            "allocated_s": self.allocated_s,
            "active_s": self.active_s,
            "released_s": self.released_s,
            "pauses": self.pauses,
            "resumes": self.resumes,
            "resume_latencies_s": list(self.resume_latencies_s),
            "storage_bytes": self.storage_bytes,
            "capacity": [c.to_json() for c in self.capacity],
        }

    @classmethod
    def from_json(cls, data: Any) -> FleetRow:
        """A row from JSON someone else wrote; :class:`RowError` says what is wrong."""
        if not isinstance(data, dict):
            raise RowError("a row must be a JSON object")
        latencies = data.get("resume_latencies_s", [])
        capacity = data.get("capacity", [])
        if not isinstance(latencies, list) or len(latencies) > MAX_LATENCIES:
            raise RowError(f"resume_latencies_s: a list of at most {MAX_LATENCIES} numbers")
        if not isinstance(capacity, list) or len(capacity) > len(CAPACITY_OUTCOMES):
            raise RowError("capacity: a list of {outcome, accelerator_seconds}")
        state = _text(data, "state", allow_empty=False)
        if state not in STATES:
            raise RowError(f"state: one of {', '.join(STATES)}")
        outcomes = []
        for item in capacity:
            if not isinstance(item, dict) or item.get("outcome") not in CAPACITY_OUTCOMES:
                raise RowError(f"capacity: each outcome one of {', '.join(CAPACITY_OUTCOMES)}")
            outcomes.append(CapacityOutcome(item["outcome"], _number(item, "accelerator_seconds")))
        return cls(
            user=_text(data, "user", allow_empty=False),
            server=_text(data, "server"),
            path=_text(data, "path", allow_empty=False),
            workload_class=_text(data, "workload_class"),
            as_of=_number(data, "as_of"),
            state=state,
            gpus=int(_number(data, "gpus", integer=True)),
            allocated_s=_number(data, "allocated_s"),
            active_s=_number(data, "active_s"),
            released_s=_number(data, "released_s"),
            pauses=int(_number(data, "pauses", integer=True)),
            resumes=int(_number(data, "resumes", integer=True)),
            resume_latencies_s=tuple(_number({"x": v}, "x") for v in latencies),
            storage_bytes=int(_number(data, "storage_bytes", integer=True)),
            capacity=tuple(outcomes),
        )


def _text(data: dict, name: str, allow_empty: bool = True) -> str:
    value = data.get(name, "")
    if not isinstance(value, str) or len(value) > MAX_NAME or (not value and not allow_empty):
        raise RowError(f"{name}: a string of 1 to {MAX_NAME} characters")
    return value


def _number(data: dict, name: str, integer: bool = False) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RowError(f"{name}: a number")
    if not math.isfinite(value) or value < 0 or value > 1e15:
        raise RowError(f"{name}: a finite number, 0 or more")
    if integer and value != int(value):
        raise RowError(f"{name}: a whole number")
    return float(value)


def rows_from_report(report: Report, server: str) -> list[FleetRow]:
    """One row per notebook of a report over a server's whole ledger, as of its end.

    Build ``report`` with the checkpoint store's sizes (``storage=``) where the
    server has them, so that the storage held is the store's.  Each row's
    released time is split by the capacity outcomes the ledger recorded for it
    (the report's own split); the rest stays unknown.
    """
    report.to_json()  # settles each notebook's storage held (given or from the ledger)
    rows = []
    for c in report.clipped:
        s = c.session
        last = c.timeline[-1] if c.timeline else None
        resumes = [p for p in c.pauses if p.resume_requested is not None]
        latencies = [p.resume_latency_s for p in resumes if p.resume_latency_s is not None]
        released = [(g.start, g.end, g.gpus) for g in c.timeline if g.state in RELEASED_STATES]
        split = split_released(released, c.spans).by_outcome()
        rows.append(
            FleetRow(
                user=s.user,
                server=server,
                path=s.path,
                workload_class=s.workload_class,
                as_of=report.until,
                state=last.state if last else STOPPED,
                gpus=last.gpus if last else s.most_gpus,
                allocated_s=c.allocated,
                active_s=c.active,
                released_s=c.released,
                pauses=sum(1 for p in c.pauses if p.requested is not None),
                resumes=len(resumes),
                resume_latencies_s=tuple(latencies[-MAX_LATENCIES:]),
                storage_bytes=c.storage_checkpoint + c.storage_snapshot,
                capacity=tuple(
                    CapacityOutcome(outcome, split[outcome])
                    for outcome in CAPACITY_OUTCOMES
                    if split[outcome] > 0
                ),
            )
        )
    return rows


def merge_rows(kept: dict[str, FleetRow], new: Iterable[FleetRow]) -> int:
    """Put ``new`` into ``kept`` (by key) where newer than what is kept; the number taken."""
    taken = 0
    for row in new:
        old = kept.get(row.key)
        if old is None or row.as_of > old.as_of:
            kept[row.key] = row
            taken += 1
    return taken


# --------------------------------------------------------------------------- the view


@dataclass(frozen=True)
class FleetGroup:
    """The rows of one user, one workload class, or all of them, added up."""

    key: str
    servers: int
    notebooks: int
    paused: int  # notebooks released at their row's time
    allocated_s: float
    active_s: float
    released_s: float
    pauses: int
    resumes: int
    resume_latency_s: dict[str, Any]  # report/build.py stats() over the rows' latencies
    storage_bytes: int
    capacity: dict[str, float] = field(default_factory=dict)  # outcome -> accelerator-seconds
    released_unknown_s: float = 0.0  # released time no row knows the outcome of
    oldest_as_of: float | None = None

    @property
    def capacity_text(self) -> str:
        """Each outcome's hours (and what is unknown); "node outcome unknown" where no
        row knows any; "-" where nothing was released."""
        if self.released_s <= 0 and not self.capacity:
            return "-"
        parts = [
            f"{outcome} {self.capacity[outcome] / 3600:.2f} h"
            for outcome in CAPACITY_OUTCOMES
            if self.capacity.get(outcome)
        ]
        if not parts:
            return "node outcome unknown"
        if self.released_unknown_s >= 18:  # what rounds to 0.00 h is not said
            parts.append(f"unknown {self.released_unknown_s / 3600:.2f} h")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        h = 3600.0
        return {
            "key": self.key,
            "servers": self.servers,
            "notebooks": self.notebooks,
            "paused": self.paused,
            "gpu_hours": {
                "allocated": self.allocated_s / h,
                "active": self.active_s / h,
                "released": self.released_s / h,
            },
            "pauses": self.pauses,
            "resumes": self.resumes,
            "resume_latency_s": self.resume_latency_s,
            "storage_bytes": self.storage_bytes,
            "capacity_outcomes": {
                "known": bool(self.capacity),
                "hours": {k: v / h for k, v in self.capacity.items()},
                "unknown_hours": self.released_unknown_s / h,
                "text": self.capacity_text,
            },
            "oldest_as_of": self.oldest_as_of,
        }


def _group(key: str, rows: list[FleetRow]) -> FleetGroup:
    capacity: dict[str, float] = {}
    unknown = 0.0
    for row in rows:
        unknown += row.released_unknown_s
        for c in row.capacity:
            capacity[c.outcome] = capacity.get(c.outcome, 0.0) + c.accelerator_seconds
    return FleetGroup(
        key=key,
        servers=len({(r.user, r.server) for r in rows}),
        notebooks=len(rows),
        paused=sum(1 for r in rows if r.state in RELEASED_STATES),
        allocated_s=sum(r.allocated_s for r in rows),
        active_s=sum(r.active_s for r in rows),
        released_s=sum(r.released_s for r in rows),
        pauses=sum(r.pauses for r in rows),
        resumes=sum(r.resumes for r in rows),
        resume_latency_s=stats(v for r in rows for v in r.resume_latencies_s),
        storage_bytes=sum(r.storage_bytes for r in rows),
        capacity=capacity,
        released_unknown_s=unknown,
        oldest_as_of=min((r.as_of for r in rows), default=None),
    )


@dataclass(frozen=True)
class Fleet:
    """The fleet at ``now``: totals, then per user and per workload class."""

    now: float
    rows: tuple[FleetRow, ...]  # carried to now (FleetRow.at)
    sources: tuple[str, ...] = ()  # where the rows were read
    problems: tuple[str, ...] = ()  # sources that could not be read

    @property
    def total(self) -> FleetGroup:
        return _group("total", list(self.rows))

    def by(self, what: str) -> list[FleetGroup]:
        """``user`` or ``workload_class``: one group each, sorted by key."""
        buckets: dict[str, list[FleetRow]] = {}
        for row in self.rows:
            key = getattr(row, what) or ("(unknown)" if what == "user" else "(default)")
            buckets.setdefault(key, []).append(row)
        return [_group(key, rows) for key, rows in sorted(buckets.items())]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "now": self.now,
            "sources": list(self.sources),
            "problems": list(self.problems),
            "totals": self.total.to_json(),
            "by_user": [g.to_json() for g in self.by("user")],
            "by_class": [g.to_json() for g in self.by("workload_class")],
            "rows": [r.to_json() for r in self.rows],
        }

    def table(self) -> tuple[list[str], list[tuple[str, FleetGroup]]]:
        head = [
            "scope",
            "key",
            "servers",
            "notebooks",
            "paused",
            "allocated h",
            "active h",
            "released h",
            "capacity outcome",
            "resume median s",
            "resume p95 s",
            "storage held",
        ]
        groups = [("total", self.total)]
        groups += [("user", g) for g in self.by("user")]
        groups += [("class", g) for g in self.by("workload_class")]
        return head, groups

    @staticmethod
    def cells(scope: str, g: FleetGroup) -> list[str]:
        lat = g.resume_latency_s
        return [
            scope,
            g.key,
            str(g.servers),
            str(g.notebooks),
            str(g.paused),
            f"{g.allocated_s / 3600:.2f}",
            f"{g.active_s / 3600:.2f}",
            f"{g.released_s / 3600:.2f}",
            g.capacity_text,
            "-" if lat["median"] is None else f"{lat['median']:.1f}",
            "-" if lat["p95"] is None else f"{lat['p95']:.1f}",
            format_bytes(g.storage_bytes),
        ]

    def to_text(self) -> str:
        head, groups = self.table()
        lines = [
            f"Fleet report at {format_time(self.now)}: {self.total.servers} servers, "
            f"{self.total.notebooks} notebooks ({self.total.paused} paused); "
            "accelerator-hours since each ledger began",
            "",
        ]
        right = [i for i in range(2, len(head)) if head[i] != "capacity outcome"]
        lines += text_table(head, [self.cells(s, g) for s, g in groups], right=right)
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines) + "\n"

    def to_html_table(self) -> str:
        """The page's table (also the body of ``--format html``)."""
        head, groups = self.table()
        rows = "".join(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in self.cells(s, g)) + "</tr>"
            for s, g in groups
        )
        return (
            "<table class='fleet'><thead><tr>"
            + "".join(f"<th>{escape(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{rows}</tbody></table>"
        )

    def to_html(self, title: str = "jupyter-pause fleet") -> str:
        total = self.total
        problems = "".join(f"<p class=problem>{escape(p)}</p>" for p in self.problems)
        return (
            "<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{escape(title)}</title><style>{FLEET_CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1>{problems}"
            f"<p>{total.servers} servers, {total.notebooks} notebooks, {total.paused} of them "
            f"paused, at {escape(format_time(self.now))}. Accelerator-hours since each "
            "server's ledger began; a paused notebook's release counts until now. "
            "Definitions: docs/accounting.md, “The fleet”.</p>"
            f"{self.to_html_table()}</body></html>"
        )


FLEET_CSS = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border-bottom:1px solid #ddd;padding:.3em .8em;text-align:left}"
    "th{white-space:nowrap}td:nth-child(n+3){text-align:right}"
    "td:nth-child(9){text-align:left;white-space:nowrap}"
    ".problem{color:#b00;font-weight:bold}"
)


def build_fleet(
    rows: Iterable[FleetRow],
    now: float,
    sources: Iterable[str] = (),
    problems: Iterable[str] = (),
) -> Fleet:
    """The fleet of ``rows`` (the newest of each key) carried to ``now``."""
    kept: dict[str, FleetRow] = {}
    merge_rows(kept, rows)
    return Fleet(
        now=now,
        rows=tuple(r.at(now) for _, r in sorted(kept.items())),
        sources=tuple(sources),
        problems=tuple(problems),
    )
