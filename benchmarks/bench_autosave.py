"""What the background autosave costs (a workload class's ``autosave_every``).

    python benchmarks/bench_autosave.py [--size-gb 2] [--rounds 5] [--every 300]

Starts a real Jupyter server with jupyter-pause (``LocalServer``) whose default class
autosaves after ``--trigger`` seconds of use, fills a notebook's kernel with a torch
model of ``--size-gb`` of float32 weights, lets the first autosave write it, then runs
``--rounds`` cells that change nothing, each ending after more than ``--trigger``
seconds of use, so that each is followed by an autosave. Per unchanged autosave:

* the bytes it wrote (the ledger's ``bytes_written``, and the new files on disk:
  checkpoint folder and blobs);
* its duration, from the server's ``checkpoint-started`` to ``checkpoint-finished``;
* how long a cell sent as soon as the status says ``checkpointing`` (polled without
  pause) waited for it: that cell's round trip minus the median round trip of the
  same cell on an idle kernel; and the kernel's own part of the save (the engine's
  ``seconds``), the most a cell queued behind it can wait.

The share of wall time is the median duration over ``--every`` (the class's interval
in production; the autosave runs at most once per interval of use). Prints one JSON
document and a summary line on stderr. Writes under a temporary folder only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jupyter_pause.client import LocalServer  # noqa: E402
from jupyter_pause.engine import paths  # noqa: E402
from tests.helpers import server_env, wait_for, write_notebooks  # noqa: E402

NB = "bench.ipynb"
#: seconds between two looks: a status seen "checkpointing" late would skew the wait
POLL = 0.02
LAYER = 4096  # a layer is LAYER x LAYER float32 weights (67 MB) and a bias


def files_of(folder: Path) -> dict[str, int]:
    return {
        os.path.join(root, name): os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    }


def autosave_events(client, kind: str) -> list:
    return [e for e in client.ledger_events() if e.type.value == kind and e.data.get("autosave")]


def round_trip(client, kernel_id: str) -> float:
    start = time.perf_counter()
    assert client.execute(kernel_id, "pass").ok
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0, help="model size (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="unchanged autosaves measured")
    parser.add_argument(
        "--every", type=float, default=300, help="the class's interval in production (s)"
    )
    parser.add_argument(
        "--trigger", type=float, default=1.0, help="autosave_every during the benchmark (s)"
    )
    args = parser.parse_args()
    layers = max(1, round(args.size_gb * 1e9 / (LAYER * LAYER * 4)))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = write_notebooks(tmp / "root", NB)
        (tmp / "config").mkdir()
        config = {
            "PauseApp": {
                "keep_checkpoints": 1,
                "workload_classes": {"gpu-interactive": {"autosave_every": args.trigger}},
            }
        }
        (tmp / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
        with LocalServer(root, tmp / "state", env=server_env(tmp)) as server:
            client = server.start()
            kernel_id = client.open_notebook(NB)["kernel"]["id"]
            folder = paths.notebook_dir(server.checkpoint_dir, NB)
            made = client.execute(
                kernel_id,
                "import time, torch\n"
                "torch.set_grad_enabled(False)\n"
                f"model = torch.nn.Sequential(*[torch.nn.Linear({LAYER}, {LAYER}) "
                f"for _ in range({layers})])\n"
                "size = sum(p.numel() * p.element_size() for p in model.parameters())",
            )
            assert made.ok, made
            size = client.evaluate(kernel_id, "print(size)")
            idle = [round_trip(client, kernel_id) for _ in range(5)]
            trigger_cell = f"time.sleep({args.trigger + 0.2})"

            assert client.execute(kernel_id, trigger_cell).ok
            first = wait_for(
                lambda: autosave_events(client, "checkpoint-finished"),
                600,
                "the first autosave",
                interval=POLL,
            )[0]
            rounds = []
            for n in range(2, args.rounds + 2):
                before = files_of(folder)
                assert client.execute(kernel_id, trigger_cell).ok
                # the moment the server moves the notebook to checkpointing, it sends
                # the kernel the autosave's request: a cell sent now queues behind it
                wait_for(
                    lambda: client.session_status(NB)["state"] == "checkpointing",
                    120,
                    f"autosave #{n} starting",
                    interval=POLL,
                )
                waited = round_trip(client, kernel_id) - statistics.median(idle)
                finished = wait_for(
                    lambda n=n: autosave_events(client, "checkpoint-finished")[n - 1 :],
                    120,
                    f"autosave #{n}",
                    interval=POLL,
                )[0]
                started = autosave_events(client, "checkpoint-started")[n - 1]
                new = {f: s for f, s in files_of(folder).items() if f not in before}
                rounds.append(
                    {
                        "bytes_written": finished.data["bytes_written"],
                        "bytes_on_disk": sum(new.values()),
                        "seconds": round(finished.time - started.time, 4),
                        "kernel_seconds": round(finished.data["seconds"], 4),
                        "cell_waited_s": round(max(0.0, waited), 4),
                    }
                )

    median = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    report = {
        "model_bytes": size,
        "first_autosave": {
            "bytes_written": first.data["bytes_written"],
            "kernel_seconds": round(first.data["seconds"], 3),
        },
        "unchanged_autosaves": rounds,
        "median": median,
        "every_s": args.every,
        "share_of_wall_time": median["seconds"] / args.every,
        "idle_cell_round_trip_s": round(statistics.median(idle), 4),
    }
    print(
        f"autosave of an unchanged {size / 1e9:.2f} GB model: {median['bytes_written']:,.0f} B "
        f"written ({median['bytes_on_disk']:,.0f} B of new files), {median['seconds']:.3f} s "
        f"= {100 * report['share_of_wall_time']:.3f} % of wall time at one per "
        f"{args.every:.0f} s; a cell sent meanwhile waited {median['cell_waited_s']:.3f} s "
        f"(medians of {len(rounds)})",
        file=sys.stderr,
    )
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
