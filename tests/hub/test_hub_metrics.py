"""The jupyter-pause-hub service's Prometheus metrics, scraped by a real Prometheus
through a real hub's proxy: a server the service paused (gone, so its own
``/metrics`` with it) is still counted per user, with its scheduled start."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ..accounting.test_metrics import dashboard_exprs, metric_names
from ..accounting.test_metrics_prometheus import PROMETHEUS, scraping
from ..helpers import wait_for
from .test_hub_service import service_row

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(PROMETHEUS).exists(),
        reason="Prometheus is not installed: `make prometheus` (Debian's prometheus package)",
    ),
]


def test_prometheus_sees_every_users_server_paused_ones_too(hub_factory, tmp_path):
    hub = hub_factory(service={"timeout": 3600, "check_interval": 1})
    for user in ("alice", "bob"):
        hub.add_notebook(user)
    hub.start()
    alice = hub.spawn("alice")
    kernel = alice.open_notebook("demo.ipynb")["kernel"]["id"]
    assert alice.execute(kernel, "x = 41").ok
    hub.spawn("bob")

    code, _ = hub.request("POST", f"{hub.service_url}api/servers/alice//pause")
    assert code == 202
    hub.wait_stopped("alice")
    wait_for(lambda: service_row(hub, "alice")["state"] == "paused", 60, "alice paused")
    at = round(time.time() + 3600)
    code, body = hub.request("PUT", f"{hub.service_url}api/schedules/alice/", {"at": at})
    assert code == 200, body

    # without a valid token the metrics are not served (the Hub's login page is)
    _, body = hub.request("GET", f"{hub.service_url}metrics", token="not-a-token")
    assert "jupyter_pause_hub" not in str(body)
    # nor to a user who is not an admin: they name every user's servers
    code, token = hub.api(
        "POST", "users/bob/tokens", {"scopes": ["access:services!service=jupyter-pause"]}
    )
    assert code == 201, token
    code, body = hub.request("GET", f"{hub.service_url}metrics", token=token["token"])
    assert code == 403 and "jupyter_pause_hub" not in str(body)

    prometheus = scraping(tmp_path, "jupyter-pause-hub", hub.port, hub.token)
    (job,) = prometheus.config["scrape_configs"]
    assert job["metrics_path"] == "/services/jupyter-pause/metrics"
    with prometheus:
        wait_for(
            lambda: (
                prometheus.value('up{job="jupyter-pause-hub"}') == 1
                and prometheus.value('jupyter_pause_hub_servers{user="alice",state="paused"}') == 1
            ),
            timeout=60,
            what="Prometheus to scrape the service and see alice paused",
        )
        assert prometheus.value('jupyter_pause_hub_servers{user="bob",state="running"}') == 1
        assert (
            prometheus.value('jupyter_pause_hub_scheduled_start_timestamp_seconds{user="alice"}')
            == at
        )
        row = service_row(hub, "alice")
        assert prometheus.value(
            'jupyter_pause_hub_paused_since_timestamp_seconds{user="alice"}'
        ) == pytest.approx(row["paused_at"])
        code, body = hub.request("GET", f"{hub.service_url}api/servers")
        assert prometheus.value("count(jupyter_pause_hub_servers)") == len(body["servers"])
        # the dashboard's fleet panels have data
        for expr in dashboard_exprs():
            if any(n.startswith("jupyter_pause_hub_") for n in metric_names(expr)):
                assert prometheus.query(expr), f"no data for {expr}"
