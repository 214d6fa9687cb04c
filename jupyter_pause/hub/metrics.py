"""The fleet as ``jupyter-pause-hub`` sees it, as Prometheus metrics (``GET metrics``).

Read at scrape time from the same rows as the admin page (the Hub's servers
joined with the service's records), so a paused server, whose own
``/metrics`` is gone with it, is still counted.  Labelled per user and server.
Definitions: docs/accounting.md, "Prometheus metrics".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "jupyter_pause_hub"


class FleetMetrics(Collector):
    """One scrape's metrics over the admin page's rows (``PauseService.servers()``)."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

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


def exposition(rows: list[dict[str, Any]]) -> bytes:
    """The metrics of ``rows`` in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetMetrics(rows))
    return generate_latest(registry)
