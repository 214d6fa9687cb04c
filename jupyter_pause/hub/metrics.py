"""The fleet as ``jupyter-pause-hub`` sees it, as Prometheus metrics (``GET metrics``).

Read at scrape time from the same rows as the admin page (the Hub's servers
joined with the service's records), so a paused server, whose own
``/metrics`` is gone with it, is still counted.  Labelled per user and server.
The accelerator time, resumes and storage of every notebook come from the
fleet the servers hand over (``hub/fleet.py``), labelled per user and workload
class.  Definitions: docs/accounting.md, "Prometheus metrics" and "The fleet".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..report.build import RELEASED_STATES
from ..report.fleet import CAPACITY_OUTCOMES, Fleet, FleetRow

PREFIX = "jupyter_pause_hub"


class FleetMetrics(Collector):
    """One scrape's metrics over the admin page's rows (``PauseService.servers()``)."""

    def __init__(self, rows: list[dict[str, Any]], fleet: Fleet | None = None):
        self.rows = rows
        self.fleet = fleet

    def collect(self) -> Iterator[Metric]:
        labels = ["user", "server"]
        servers = GaugeMetricFamily(
            f"{PREFIX}_servers",
            "Users' servers by state (running, pausing, paused, stopped, culled, ...): "
            "1 for the state each server is in.",
            labels=[*labels, "state"],
        )
        paused_since = GaugeMetricFamily(
            f"{PREFIX}_paused_since_timestamp_seconds",
            "When each paused server stopped (seconds since the epoch).",
            labels=labels,
        )
        scheduled = GaugeMetricFamily(
            f"{PREFIX}_scheduled_start_timestamp_seconds",
            "When the service is to start each server with a scheduled resume.",
            labels=labels,
        )
        released = GaugeMetricFamily(
            f"{PREFIX}_released_accelerator_seconds_this_week",
            "Accelerator-seconds each server released by pausing since Monday 00:00 UTC "
            "(its report as last read, plus the pause going on).",
            labels=labels,
        )
        for row in self.rows:
            key = [row["user"], row["server"]]
            servers.add_metric([*key, row["state"]], 1)
            if row.get("paused_at") is not None:
                paused_since.add_metric(key, row["paused_at"])
            if row.get("resumes_at") is not None:
                scheduled.add_metric(key, row["resumes_at"])
            released.add_metric(key, float(row.get("released_hours_this_week") or 0.0) * 3600)
        yield from (servers, paused_since, scheduled, released)
        if self.fleet is not None:
            yield from self.fleet_families(self.fleet)

    @staticmethod
    def fleet_families(fleet: Fleet) -> Iterator[Metric]:
        """Every notebook's totals from the fleet, per user and workload class."""
        labels = ["user", "workload_class"]
        groups: dict[tuple[str, str], list[FleetRow]] = {}
        for row in fleet.rows:
            groups.setdefault((row.user, row.workload_class or "(default)"), []).append(row)
        seconds = {
            name: CounterMetricFamily(
                f"{PREFIX}_fleet_accelerator_{name}_seconds",
                f"Accelerator-seconds {what} (seconds x GPUs) by every notebook of the fleet, "
                "since each server's ledger began (a paused notebook's release counted to now).",
                labels=labels,
            )
            for name, what in (
                ("allocated", "held"),
                ("active", "of allocated time that cells ran"),
                ("released", "released by pausing"),
            )
        }
        notebooks = GaugeMetricFamily(
            f"{PREFIX}_fleet_notebooks",
            "Notebooks of the fleet, by whether they were paused when last handed over.",
            labels=[*labels, "paused"],
        )
        resumes = CounterMetricFamily(
            f"{PREFIX}_fleet_resumes", "Resumes of the fleet's notebooks.", labels=labels
        )
        outcomes = GaugeMetricFamily(
            f"{PREFIX}_fleet_released_outcome_seconds",
            "Accelerator-seconds the fleet released by pausing, by what became of the node: "
            "reused, scaled-down, idle, kept-up, or unknown (not seen, or not yet).",
            labels=[*labels, "outcome"],
        )
        storage = GaugeMetricFamily(
            f"{PREFIX}_fleet_storage_bytes",
            "Bytes the fleet's checkpoints (and snapshots) occupy, as last handed over.",
            labels=labels,
        )
        for key, rows in sorted(groups.items()):
            group = [*key]
            for name, family in seconds.items():
                family.add_metric(group, sum(getattr(r, f"{name}_s") for r in rows))
            paused = sum(1 for r in rows if r.state in RELEASED_STATES)
            notebooks.add_metric([*group, "true"], paused)
            notebooks.add_metric([*group, "false"], len(rows) - paused)
            resumes.add_metric(group, sum(r.resumes for r in rows))
            split = dict.fromkeys(CAPACITY_OUTCOMES, 0.0)
            for c in (c for r in rows for c in r.capacity):
                split[c.outcome] += c.accelerator_seconds
            split["unknown"] = sum(r.released_unknown_s for r in rows)
            for outcome, value in split.items():
                outcomes.add_metric([*group, outcome], value)
            storage.add_metric(group, sum(r.storage_bytes for r in rows))
        yield from (*seconds.values(), notebooks, resumes, outcomes, storage)


def exposition(rows: list[dict[str, Any]], fleet: Fleet | None = None) -> bytes:
    """The metrics of ``rows`` (and of ``fleet``) in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetMetrics(rows, fleet))
    return generate_latest(registry)
