"""A real Prometheus scrapes a real Jupyter server through a real pause and resume;
PromQL must agree with the server's report over the same ledger.

Prometheus is Debian's ``prometheus`` (``make prometheus``; CI installs it), run
on 127.0.0.1 with the shipped scrape example (deploy/prometheus/prometheus.yml),
its target and token file replaced, and a one-second scrape interval.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from jupyter_pause.client import LocalServer, free_port

from ..helpers import server_env, wait_for, write_notebooks
from .test_metrics import dashboard_exprs, metric_names

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
EXAMPLE = Path(__file__).parents[2] / "deploy" / "prometheus" / "prometheus.yml"

pytestmark = pytest.mark.skipif(
    not Path(PROMETHEUS).exists(),
    reason="Prometheus is not installed: `make prometheus` (Debian's prometheus package)",
)


class Prometheus:
    """``prometheus`` on 127.0.0.1 with its own config and storage in ``work``."""

    def __init__(self, work: Path, config: dict):
        self.work = work
        self.config = config
        self.work.mkdir(parents=True, exist_ok=True)
        (work / "prom.yml").write_text(yaml.safe_dump(config))
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.log = work / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout: float = 60.0) -> None:
        for _ in range(3):  # a port taken between picking and binding: pick another
            self.port = free_port()
            with open(self.log, "wb") as log:
                self.process = subprocess.Popen(
                    [
                        PROMETHEUS,
                        f"--config.file={self.work / 'prom.yml'}",
                        f"--storage.tsdb.path={self.work / 'data'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                wait_for(self.ready, timeout=timeout, what="Prometheus to be ready")
                return
            except AssertionError:
                self.stop()
                if "address already in use" not in self.log.read_text():
                    raise AssertionError(f"Prometheus did not start:\n{self.log_tail()}") from None
        raise AssertionError(f"Prometheus found no free port:\n{self.log_tail()}")

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if isinstance(error, AssertionError):
            print(self.log_tail())  # what it said, beside the failure
        self.stop()

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"Prometheus exited:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(self.url + "-/ready", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def query(self, promql: str) -> list[dict]:
        """The instant vector of ``promql`` now (``/api/v1/query``)."""
        url = self.url + "api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            answer = json.loads(r.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def value(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def log_tail(self) -> str:
        return self.log.read_text()[-4000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def scraping(work: Path, job_name: str, port: int, token: str) -> Prometheus:
    """A Prometheus (not started yet) with the shipped example's job ``job_name`` alone,
    scraping 127.0.0.1:``port`` every second with ``token`` (in a file only its owner
    reads)."""
    token_file = work / "token"
    work.mkdir(parents=True, exist_ok=True)
    token_file.write_text(token)
    token_file.chmod(0o600)
    config = yaml.safe_load(EXAMPLE.read_text())
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == job_name]
    assert job["authorization"]["type"] == "Bearer"
    job["authorization"]["credentials_file"] = str(token_file)
    job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    config["scrape_configs"] = [job]
    return Prometheus(work / "prometheus", config)


def close(value: float | None, expected: float) -> bool:
    """Within 1 % of ``expected``."""
    return value is not None and abs(value - expected) <= 0.01 * expected


def test_prometheus_agrees_with_the_report_after_a_pause_and_a_resume(tmp_path, capsys):
    root = write_notebooks(tmp_path / "root", "nb.ipynb")
    env = server_env(tmp_path)
    # this machine has no GPU: each kernel counts as holding one, as on a GPU machine
    one_each = ["--PauseApp.kernel_accelerators=1"]
    with LocalServer(root, tmp_path / "state", env=env, extra_args=one_each) as server:
        client = server.start()
        prometheus = scraping(tmp_path, "jupyter-server", server.port, server.token)
        with prometheus:
            wait_for(
                lambda: (
                    prometheus.value('up{job="jupyter-server"}') == 1
                    and prometheus.value('jupyter_pause_sessions{state="running"}') is not None
                ),
                timeout=60,
                what="Prometheus scraping the server with its token",
            )

            kernel_id = client.open_notebook("nb.ipynb")["kernel"]["id"]
            cell = "weights = [i * 0.5 for i in range(100_000)]\nnotes = {'epochs': 3}"
            assert client.execute(kernel_id, cell).ok
            op = client.wait(client.pause("nb.ipynb"), timeout=300)
            assert op["outcome"] == "succeeded", op
            wait_for(
                lambda: prometheus.value('jupyter_pause_sessions{state="paused"}') == 1,
                timeout=60,
                what="Prometheus to see the notebook paused",
            )
            # released accelerator time grows while the notebook is paused
            wait_for(
                lambda: (
                    (prometheus.value("jupyter_pause_accelerator_released_seconds_total") or 0) > 0
                ),
                timeout=60,
                what="Prometheus to see released accelerator-seconds during the pause",
            )
            op = client.wait(client.resume("nb.ipynb"), timeout=300)
            assert op["outcome"] == "succeeded", op
            kernel_id = client.session_status("nb.ipynb")["kernel_id"]
            state = "import json\nprint(json.dumps([len(weights), weights[-1], notes]))"
            assert client.evaluate(kernel_id, state) == [100_000, 49999.5, {"epochs": 3}]

            totals = client.api("GET", "report")["totals"]
            released_s = totals["gpu_hours"]["released"] * 3600
            assert totals["pauses"]["count"] == 1 and totals["pauses"]["resumes"] == 1
            assert released_s > 0

            def agreed():
                figures = {
                    "pauses": prometheus.value("sum(jupyter_pause_pauses_total)"),
                    "resumes": prometheus.value(
                        'sum(jupyter_pause_resumes_total{outcome="succeeded"})'
                    ),
                    "released_s": prometheus.value(
                        "sum(jupyter_pause_accelerator_released_seconds_total)"
                    ),
                    "resume_latency_n": prometheus.value(
                        "sum(jupyter_pause_resume_latency_seconds_count)"
                    ),
                    "resume_latency_s": prometheus.value(
                        "sum(jupyter_pause_resume_latency_seconds_sum)"
                    ),
                    "pause_latency_s": prometheus.value(
                        "sum(jupyter_pause_pause_latency_seconds_sum)"
                    ),
                    "checkpoints": prometheus.value(
                        'sum(jupyter_pause_checkpoints_total{outcome="succeeded"})'
                    ),
                }
                same = (
                    figures["pauses"] == totals["pauses"]["count"]
                    and figures["resumes"] == totals["pauses"]["resumes"]
                    and figures["resume_latency_n"] == totals["resume_latency_s"]["n"]
                    and figures["checkpoints"] == totals["checkpoint_bytes"]["n"]
                    and close(figures["released_s"], released_s)
                    and close(figures["resume_latency_s"], totals["resume_latency_s"]["mean"])
                    and close(figures["pause_latency_s"], totals["pause_latency_s"]["mean"])
                )
                return figures if same else None

            figures = wait_for(agreed, timeout=60, what="PromQL to agree with the report")
            # each panel over the server's metrics has data after the pause and resume
            # (the fleet's panels: tests/hub/test_hub_metrics.py)
            for expr in dashboard_exprs():
                if not any(n.startswith("jupyter_pause_hub_") for n in metric_names(expr)):
                    assert prometheus.query(expr), f"no data for {expr}"
    with capsys.disabled():
        print(
            f"\nreport: {totals['pauses']['count']} pause(s), {totals['pauses']['resumes']} "
            f"resume(s), {totals['checkpoint_bytes']['n']} checkpoint(s), "
            f"{released_s:.3f} accelerator-s released, pause "
            f"{totals['pause_latency_s']['mean']:.3f} s, resume "
            f"{totals['resume_latency_s']['mean']:.3f} s; PromQL: {figures}"
        )
