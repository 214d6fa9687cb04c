"""Prometheus metrics: ``jupyter_pause_*`` on the Jupyter server's ``/metrics``.

Nothing is counted as it happens.  At scrape time :class:`PauseMetrics` reads
the session store (sessions by state) and replays the ledger through the
report (:func:`jupyter_pause.report.build.build_report`, over all of its
history up to now), so Prometheus and ``jupyter pause report`` agree by
construction, also across server restarts.  Counters are totals since the
ledger began.  A replay is kept for ``ttl`` seconds so that a tight scrape
interval stays cheap, and runs on a thread of its own: a scrape runs on the
server's event loop, and a year of one busy user's ledger (90,000 events)
takes about a second to replay; the families rendered from one replay serve
every scrape until the next, so a flood of scrapes costs the event loop little.
Definitions: docs/accounting.md, "Prometheus metrics".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ..clock import SYSTEM, Clock
from ..ledger import EventType, Ledger
from ..lifecycle import SessionStore, State
from ..report.build import build_report

PREFIX = "jupyter_pause"

#: upper bounds (seconds) of the latency histograms' buckets: a second to an hour
LATENCY_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


@dataclass(frozen=True)
class LedgerFigures:
    """What the ledger says, all of its history up to one moment."""

    pauses: dict[str, int]  # outcome -> count
    resumes: dict[str, int]
    restores: dict[str, int]  # restored_from (snapshot|checkpoint|failed) -> count
    checkpoints: dict[str, int]
    pause_latencies: list[float]
    resume_latencies: list[float]
    allocated_s: float  # accelerator-seconds
    active_s: float
    released_s: float
    checkpoint_bytes_written: int
    storage_bytes: int


def ledger_figures(
    ledger: Ledger, now: float, storage: dict[str, int] | None = None
) -> LedgerFigures:
    """The report's figures over the whole ledger until ``now``, as metrics need them.

    ``storage`` is the checkpoint store's bytes per notebook, as the server's
    report is given them; without it the ledger's own figure is used.
    """
    events = ledger.events(until=now)
    report = build_report(events, until=now, now=now, storage=storage)
    pauses = [p for c in report.clipped for p in c.pauses]
    asked = [p for p in pauses if p.requested is not None]
    resumed = [p for p in pauses if p.resume_requested is not None]
    pause_outcomes = {
        "succeeded": sum(1 for p in asked if p.released is not None and not p.failed),
        "failed": sum(1 for p in asked if p.failed),
    }
    resume_outcomes = {
        "succeeded": sum(1 for p in resumed if p.runnable is not None),
        "failed": sum(1 for p in resumed if p.runnable is None and p.restore_outcome == "failed"),
    }
    restores = {
        kind: sum(1 for p in resumed if p.restore_outcome == kind)
        for kind in ("snapshot", "checkpoint", "failed")
    }
    finished = [e for e in events if e.type == EventType.CHECKPOINT_FINISHED]
    written = 0
    for e in finished:
        data = e.data or {}
        written += int(data.get("bytes_written", data.get("bytes", 0)) or 0)
    storage_now = report.to_json()["storage"]["bytes_now"]
    return LedgerFigures(
        pauses=pause_outcomes,
        resumes=resume_outcomes,
        restores=restores,
        checkpoints={
            "succeeded": len(finished),
            "failed": sum(1 for e in events if e.type == EventType.CHECKPOINT_FAILED),
        },
        pause_latencies=[p.pause_latency_s for p in asked if p.pause_latency_s is not None],
        resume_latencies=[p.resume_latency_s for p in resumed if p.resume_latency_s is not None],
        allocated_s=sum(c.allocated for c in report.clipped),
        active_s=sum(c.active for c in report.clipped),
        released_s=sum(c.released for c in report.clipped),
        checkpoint_bytes_written=written,
        storage_bytes=int(storage_now),
    )


def _histogram(name: str, doc: str, values: Iterable[float]) -> HistogramMetricFamily:
    values = sorted(values)
    buckets = [(floatToGoString(b), sum(1 for v in values if v <= b)) for b in LATENCY_BUCKETS]
    buckets.append(("+Inf", len(values)))
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=sum(values))


def _counter(name: str, doc: str, label: str, values: dict[str, float]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for value, count in values.items():
        family.add_metric([value], count)
    return family


class PauseMetrics(Collector):
    """The ``jupyter_pause_*`` metrics of one server, read when Prometheus scrapes.

    ``storage`` returns the checkpoint store's bytes per notebook now (what
    the server's report is given); ``staging``, with a bucket, each running
    notebook's staging lag (``Stager.lag``); ``ttl`` is how long, in seconds, one
    replay of the ledger serves scrapes; ``run`` runs a replay (by default
    on a thread of its own; tests run it in place).
    """

    def __init__(
        self,
        ledger: Ledger,
        store: SessionStore,
        *,
        storage: Callable[[], dict[str, int]] | None = None,
        staging: Callable[[], dict[str, dict]] | None = None,
        ttl: float = 5.0,
        clock: Clock = SYSTEM,
        run: Callable[[Callable[[], None]], None] | None = None,
        log: logging.Logger | None = None,
    ):
        self.ledger = ledger
        self.store = store
        self.storage = storage
        #: with a bucket: each running notebook's staging lag (server/staging.py), now
        self.staging = staging
        self.ttl = ttl
        self.clock = clock
        self.run = run or _on_a_thread
        self.log = log or logging.getLogger("jupyter_pause")
        self._lock = threading.Lock()
        self._cached: tuple[float, LedgerFigures] | None = None  # (monotonic, figures)
        self._replaying = False
        #: the ledger's families rendered from the figures they were rendered from: a
        #: scrape reuses them for the replay's lifetime (a flood of scrapes renders once)
        self._rendered: tuple[LedgerFigures, list[Metric]] | None = None

    def figures(self) -> LedgerFigures | None:
        """The ledger's figures as last replayed; None until the first replay has ended.
        Figures older than ``ttl`` start the next replay, which a scrape does not wait
        for: it gets the last figures meanwhile."""
        with self._lock:
            due = not self._replaying and (
                self._cached is None or self.clock.monotonic() - self._cached[0] >= self.ttl
            )
            self._replaying |= due
        if due:
            self.run(self._replay)
        with self._lock:
            return self._cached[1] if self._cached is not None else None

    def _replay(self) -> None:
        started = self.clock.monotonic()
        try:
            storage = self.storage() if self.storage is not None else None
            figures = ledger_figures(self.ledger, self.clock.time(), storage)
        except Exception as e:  # the ledger closed as the server stops, say
            self.log.warning("jupyter-pause: the metrics could not replay the ledger: %s", e)
            figures = None
        with self._lock:
            if figures is not None:
                self._cached = (started, figures)
            self._replaying = False

    def describe(self) -> Iterator[Metric]:
        """The families without reading anything (called once, at registration)."""
        yield from self._families(None)
        yield from self._staging({})

    def collect(self) -> Iterator[Metric]:
        yield self._sessions(counted=True)  # the state now, at every scrape
        figures = self.figures()
        yield from self._staging(self.staging() if self.staging is not None else {})
        if figures is None:  # the first replay runs: only what is known now
            return
        rendered = self._rendered
        if rendered is None or rendered[0] is not figures:
            rendered = self._rendered = (figures, list(self._ledger_families(figures)))
        yield from rendered[1]

    def _staging(self, lags: dict[str, dict]) -> Iterator[Metric]:
        seconds = GaugeMetricFamily(
            f"{PREFIX}_staging_lag_seconds",
            "With a bucket: how old the newest state of a running notebook the bucket holds "
            "is, while its kernel has run cells since (0: the bucket holds its state).",
            labels=["notebook"],
        )
        nbytes = GaugeMetricFamily(
            f"{PREFIX}_staging_lag_bytes",
            "With a bucket: bytes of a running notebook's saved state the bucket does not "
            "hold yet.",
            labels=["notebook"],
        )
        for path, lag in sorted(lags.items()):
            seconds.add_metric([path], lag["seconds"])
            nbytes.add_metric([path], lag["bytes"])
        yield seconds
        yield nbytes

    def _sessions(self, counted: bool) -> Metric:
        states = GaugeMetricFamily(
            f"{PREFIX}_sessions",
            "Notebook sessions known to jupyter-pause, by lifecycle state (now).",
            labels=["state"],
        )
        if counted:
            counts = dict.fromkeys(State, 0)
            for session in list(self.store.sessions.values()):
                counts[session.state] += 1
            for state, count in counts.items():
                states.add_metric([state.value], count)
        return states

    def _families(self, f: LedgerFigures | None) -> Iterator[Metric]:
        yield self._sessions(counted=f is not None)
        yield from self._ledger_families(f)

    def _ledger_families(self, f: LedgerFigures | None) -> Iterator[Metric]:
        """The families read from the ledger (all but the sessions by state)."""
        empty = {"succeeded": 0, "failed": 0}
        yield _counter(
            f"{PREFIX}_pauses",
            "Pauses requested, by outcome: succeeded (accelerator released) or failed "
            "(the kernel kept running).",
            "outcome",
            f.pauses if f else empty,
        )
        yield _counter(
            f"{PREFIX}_resumes",
            "Resumes requested, by outcome: succeeded (the next cell could run) or failed.",
            "outcome",
            f.resumes if f else empty,
        )
        yield _counter(
            f"{PREFIX}_restores",
            "Resumes by what they restored from: snapshot, checkpoint (the fallback) or failed.",
            "restored_from",
            f.restores if f else {},
        )
        yield _counter(
            f"{PREFIX}_checkpoints",
            "Checkpoints written (pauses, checkpoints asked for, %checkpoint), by outcome.",
            "outcome",
            f.checkpoints if f else empty,
        )
        yield _histogram(
            f"{PREFIX}_pause_latency_seconds",
            "Pause request to accelerator released, per pause.",
            f.pause_latencies if f else (),
        )
        yield _histogram(
            f"{PREFIX}_resume_latency_seconds",
            "Resume request to the next cell runnable, per resume.",
            f.resume_latencies if f else (),
        )
        for name, what, value in (
            ("allocated", "held by notebook sessions", f.allocated_s if f else 0.0),
            ("active", "of allocated time that cells ran", f.active_s if f else 0.0),
            ("released", "released by pausing", f.released_s if f else 0.0),
        ):
            yield CounterMetricFamily(
                f"{PREFIX}_accelerator_{name}_seconds",
                f"Accelerator-seconds {what} (seconds x GPUs), since the ledger began.",
                value=value,
            )
        yield CounterMetricFamily(
            f"{PREFIX}_checkpoint_written_bytes",
            "Bytes checkpoints wrote to disk (an incremental checkpoint only its changes).",
            value=f.checkpoint_bytes_written if f else 0,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_storage_bytes",
            "Bytes the notebooks' checkpoints (and snapshots) occupy now.",
            value=f.storage_bytes if f else 0,
        )


def _on_a_thread(replay: Callable[[], None]) -> None:
    threading.Thread(target=replay, name="jp-metrics-replay", daemon=True).start()
