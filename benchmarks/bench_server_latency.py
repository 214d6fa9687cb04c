"""How fast the server answers while a big checkpoint of a notebook is written.

    python benchmarks/bench_server_latency.py [--size-gb 1.5] [--requests 200]

Starts a real Jupyter server with jupyter-pause (``LocalServer``), fills a
notebook's kernel with ``--size-gb`` of float32 data, starts a checkpoint of
it and, until that checkpoint ends, times ``GET status``, ``GET checkpoints``
and a ``DELETE`` of an older checkpoint of the same notebook (answered ``409``
at once: the write holds the notebook's lock).  The target
(docs/ARCHITECTURE.md, "Reads don't write; the event loop never waits"): every
request under 100 ms while any operation runs.  Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jupyter_pause.client import ClientError, LocalServer  # noqa: E402

NB = "bench.ipynb"


def timed(call) -> float:
    start = time.perf_counter()
    try:
        call()
    except ClientError as e:
        if e.status != 409:
            raise
    return (time.perf_counter() - start) * 1000


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        "max_ms": round(ms[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=1.5)
    parser.add_argument("--requests", type=int, default=200, help="at most, per endpoint")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = tmp / "root"
        root.mkdir()
        nb = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        (root / NB).write_text(json.dumps(nb))
        env = {"JUPYTER_DATA_DIR": str(tmp / "data"), "JUPYTER_CONFIG_DIR": str(tmp / "config")}
        with LocalServer(root, tmp / "state", env=env) as server:
            client = server.start()
            kernel_id = client.open_notebook(NB)["kernel"]["id"]
            assert client.execute(kernel_id, "import numpy as np\nsmall = 1").ok
            assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"
            older = client.checkpoints(NB)[0]["id"]
            n = int(args.size_gb * 1e9 / 4)
            assert client.execute(kernel_id, f"big = np.random.rand({n}).astype(np.float32)").ok

            op = client.checkpoint(NB)
            latencies: dict[str, list[float]] = {"status": [], "checkpoints": [], "delete": []}
            started = time.perf_counter()
            while client.operation(op["id"])["outcome"] == "running":
                if len(latencies["status"]) >= args.requests:
                    break
                latencies["status"].append(timed(client.status))
                latencies["checkpoints"].append(timed(lambda: client.checkpoints(NB)))
                latencies["delete"].append(timed(lambda: client.delete_checkpoint(NB, older)))
            during = time.perf_counter() - started
            outcome = client.wait(op)["outcome"]

    report = {
        "size_gb": args.size_gb,
        "checkpoint_outcome": outcome,
        "seconds_measured_during_the_write": round(during, 2),
        **{name: summary(ms) for name, ms in latencies.items() if ms},
        "target_ms": 100,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
