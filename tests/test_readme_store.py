"""The README's local S3 store works as written: SeaweedFS started with the README's
command (its ports moved to free ones, its folder to a temporary one), the bucket
created with its ``curl``, the variables it exports, and a checkpoint goes into the
bucket; none of its ports is Jupyter's 8888 nor a target of the Prometheus example,
whose hub job is marked optional."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from jupyter_pause.engine import api, paths, remote

from .helpers import wait_for
from .objectstores import free_port, weed_binary

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
PROMETHEUS = REPO / "deploy" / "prometheus" / "prometheus.yml"
JUPYTER_PORT = 8888


def readme_store_block() -> list[str]:
    """The lines of the README's bash block that starts SeaweedFS."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    [block] = [b for b in blocks if "weed server" in b]
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readmes_ports_leave_jupyters_and_prometheus_targets_alone():
    weed = next(line for line in readme_store_block() if line.startswith("weed server"))
    ports = {int(p) for p in re.findall(r"port=(\d+)", weed)}
    assert "-filer.port=" in weed  # SeaweedFS's own default filer port is 8888
    config = yaml.safe_load(PROMETHEUS.read_text())
    targets = {
        int(t.rsplit(":", 1)[1])
        for job in config["scrape_configs"]
        for group in job["static_configs"]
        for t in group["targets"]
    }
    assert JUPYTER_PORT in targets and not ports & (targets | {JUPYTER_PORT}), (ports, targets)
    hub_job = PROMETHEUS.read_text().split("- job_name: jupyter-pause-hub")[0]
    assert "Optional, with JupyterHub only" in hub_job.rsplit("- job_name:", 1)[-1]


@pytest.mark.skipif(weed_binary() is None, reason="SeaweedFS's weed binary is missing")
def test_the_readmes_local_s3_store_takes_a_checkpoint(tmp_path, monkeypatch):
    lines = readme_store_block()
    weed = next(line for line in lines if line.startswith("weed server"))
    curl = next(line for line in lines if line.startswith("curl"))
    export = next(line for line in lines if line.startswith("export"))
    url = re.search(r"checkpoint_dir=(\S+)", next(x for x in lines if "jupyter lab" in x)).group(1)
    moved = {int(p): free_port() for p in re.findall(r"port=(\d+)", weed)}

    def ported(text: str) -> str:
        for old, new in moved.items():
            text = text.replace(str(old), str(new))
        return text

    args = shlex.split(ported(weed).rstrip("&").strip())
    args = [a.replace("-dir=/tmp/weed", f"-dir={tmp_path}") for a in args]
    free = {  # the ports the README leaves to SeaweedFS's defaults, moved too (its gRPC
        # ports default to port + 10000, past 65535 for a free port)
        **{f"-{s}.port": free_port() for s in ("master", "volume")},
        **{f"-{s}.port.grpc": free_port() for s in ("master", "volume", "filer", "s3")},
        "-iam.port": free_port(),
        "-debug.port": free_port(),
        "-metricsPort": free_port(),
        "-s3.port.iceberg": 0,
        "-s3.port.lance": 0,
        "-master.telemetry": "false",
    }
    args += [f"{k}={v}" for k, v in free.items() if not any(a.startswith(k + "=") for a in args)]
    log = open(tmp_path / "weed.log", "wb")  # noqa: SIM115 - the process's, closed below
    weed_process = subprocess.Popen(
        [weed_binary(), *args[1:]], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        bucket_url = shlex.split(ported(curl))[-1]

        def created() -> bool:
            request = urllib.request.Request(bucket_url, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    return answer.status == 201
            except OSError:
                return False

        wait_for(created, 120, f"the README's curl to create the bucket:\n{log.name}")
        for name, value in re.findall(r"(\w+)=(\S+)", ported(export)):
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
        bucket = paths.parse_bucket(url)
        wait_for(lambda: _usable(bucket), 120, "the store to take requests")
        made = api.checkpoint(namespace={"x": 1}, dir=url, notebook="nb.ipynb", progress=False)
        listed = remote.Remote(bucket, "").listing()
        assert any(name.endswith(f"{made.id}/manifest.sig") for name in listed), listed
    finally:
        os.killpg(weed_process.pid, signal.SIGTERM)
        weed_process.wait(30)
        log.close()


def _usable(bucket) -> bool:
    try:
        remote.probe(bucket)
    except Exception:
        return False
    return True
