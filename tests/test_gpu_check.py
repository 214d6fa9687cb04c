"""The device check's dry run (benchmarks/gpu_check.sh --dry-run): on a machine without
CUDA it walks every step of the check (the gpu tests, a real server and kernel round
trip, the hibernate checks through the fake driver, the benchmark CPU-sized) and writes
the same report, with "cuda": false."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_dry_run_walks_every_step_and_writes_the_report(tmp_path):
    done = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--dry-run"],
        cwd=ROOT,
        env={**os.environ, "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((tmp_path / "gpu-report.json").read_text())
    assert report["cuda"] is False and report["dry_run"] is True
    for section in ("environment", "tests", "server_round_trip", "hibernate", "bench"):
        assert report[section]["ok"], (section, report[section])
    assert report["tests"]["skipped"] == len(report["tests"]["cases"]) > 0  # no CUDA here
    assert report["server_round_trip"]["values_equal"]
    assert report["server_round_trip"]["held_after_pause"] == 0
    assert report["hibernate"]["big"]["values_equal"]
    assert report["hibernate"]["cycles"] == {
        **report["hibernate"]["cycles"],
        "done": 3,
        "stuck": 0,
        "failed": 0,
    }
    assert [size["size_gb"] for size in report["bench"]["sizes"]] == [0.02, 0.2]
    table = (tmp_path / "gpu-report.txt").read_text()
    assert table in done.stdout and "cuda: false" in table
