"""On a machine with no accelerator, no kernel counts as holding one: the GPU-time
report and the ``jupyter_pause_accelerator_*`` metrics count no hours and say "no
accelerator detected", unless a setting says kernels hold some (a real server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_pause import nvml
from jupyter_pause.client import LocalServer
from jupyter_pause.report.build import NO_ACCELERATOR

from ..helpers import wait_for

pytestmark = pytest.mark.skipif(
    bool(nvml.device_count()), reason="this machine has a GPU: it is detected"
)

NB = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
      "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}  # fmt: skip


def metrics(server: LocalServer) -> dict[str, float]:
    request = urllib.request.Request(
        server.url + "metrics", headers={"Authorization": f"token {server.token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read().decode()
    totals: dict[str, float] = {}  # each sample name, over its labels
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(("jupyter_pause_accelerator_", "jupyter_pause_pauses")):
                totals[s.name] = totals.get(s.name, 0) + s.value
    return totals


def test_no_accelerator_detected_counts_no_hours_and_says_so(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "nb.ipynb").write_text(json.dumps(NB))
    env = {"JUPYTER_DATA_DIR": str(tmp_path / "data"), "JUPYTER_CONFIG_DIR": str(tmp_path / "c")}
    fast = ["--PauseApp.metrics_cache_seconds=0.1"]
    with LocalServer(tmp_path / "root", tmp_path / "state", env=env, extra_args=fast) as server:
        client = server.start()
        kernel_id = client.open_notebook("nb.ipynb")["kernel"]["id"]
        assert client.execute(kernel_id, "x = 1").ok
        assert client.wait(client.pause("nb.ipynb"))["outcome"] == "succeeded"
        assert "no accelerator detected" in server.log_tail(100_000)

        report = client.api("GET", "report")
        assert report["no_accelerator"] is True
        assert report["totals"]["pauses"]["count"] == 1  # the pause itself counts
        hours = report["totals"]["gpu_hours"]
        assert hours["allocated"] == hours["released"] == hours["always_on"] == 0, hours
        assert [s["gpus"] for s in report["sessions"]] == [0]

        def counted():
            m = metrics(server)
            return m.get("jupyter_pause_pauses_total") == 1 and m

        figures = wait_for(counted, 60, "the metrics to count the pause")
        assert figures["jupyter_pause_accelerator_allocated_seconds_total"] == 0
        assert figures["jupyter_pause_accelerator_released_seconds_total"] == 0

        # the report the CLI prints says why its hours are zero
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(server.state_dir / "runtime"))
        text = subprocess.run(
            [Path(sys.executable).parent / "jupyter-pause", "report", "--url", server.url],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        ).stdout
        assert NO_ACCELERATOR in text
