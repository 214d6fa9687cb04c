"""What a user's click or magic adds around the engine, through REST on a real server.

    python benchmarks/bench_rest.py [--size-gib 1] [--tensors 256] [--rounds 3] [--think 5]

Starts a real Jupyter server with jupyter-pause (``LocalServer``), a notebook whose
kernel holds a bf16 state_dict of ``--size-gib`` in ``--tensors`` tensors (random bits),
and measures, in ``--rounds`` paired rounds, each figure against a baseline taken in the
same round (median of the per-round figures, [min-max]):

* ``%checkpoint`` typed in a cell (the model changed before each, so that it is written
  whole), against a cell that writes the same bytes to one file and fsyncs it (the raw
  write); the two alternate which goes first. Both are timed as the client sees the
  cell: execute request to reply and idle.
* ``POST sessions/resume`` -> a cell that does not touch the model, and -> a cell that
  does, against a bare kernel start (``POST api/sessions`` for another notebook, then its
  first cell) and that kernel's ``import torch``; once with a cold kernel and once with
  the spare ``POST sessions/prewarm`` started (what the notebook's page asks for when a
  paused notebook is opened; the user reads the banner for ``--think`` seconds), in
  alternated order. The operation is followed as a client follows it (``GET
  operations/{id}``, every 20 ms here, every 500 ms in JupyterLab).
* The pause after such a resume with nothing changed, against the round's first pause
  (of the changed model): whole (until ``paused``: the kernel's process has exited),
  and until its checkpoint was committed (the ledger's ``pause-requested`` to
  ``checkpoint-finished``), before the kernel is stopped.

Each operation's timeline (``Operation.timeline``, docs/ARCHITECTURE.md "The timeline
of an operation") is collected; the median of each step is printed beside the bare
kernel start and the raw write. Prints a table on stderr and one JSON document on
stdout. Writes under a temporary folder only (its own ``JUPYTER_DATA_DIR``).
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

from jupyter_pause.client import LocalServer, PauseClient  # noqa: E402
from tests.helpers import server_env, write_notebooks  # noqa: E402

NB = "model.ipynb"
BARE = "bare.ipynb"
FOLLOW = 0.02  # seconds between two looks at a running operation


def median_range(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def fmt(stat: dict[str, float], unit: str = "") -> str:
    return f"{stat['median']:.2f}{unit} [{stat['min']:.2f}-{stat['max']:.2f}]"


def run_cell(client: PauseClient, kernel_id: str, code: str) -> float:
    res = client.execute(kernel_id, code)
    if not res.ok:
        raise RuntimeError(f"cell failed: {res.error or res.status}\n{code}\n{res.stderr}")
    return res.seconds


def follow(client: PauseClient, op: dict) -> dict:
    deadline = time.monotonic() + 600
    while op["outcome"] == "running":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{op['kind']} {op['id']} still running")
        time.sleep(FOLLOW)
        op = client.operation(op["id"])
    if op["outcome"] != "succeeded":
        raise RuntimeError(f"{op['kind']} failed: {op['error']}")
    return op


def kernel_of(client: PauseClient, path: str) -> str:
    row = client.session_status(path)
    return row["kernel_id"]


def bare_kernel(client: PauseClient) -> tuple[float, float]:
    """A kernel started as a notebook starts one, until its first cell ran; then its
    ``import torch``."""
    t0 = time.perf_counter()
    kernel_id = client.open_notebook(BARE)["kernel"]["id"]
    run_cell(client, kernel_id, "1")
    start = time.perf_counter() - t0
    torch = run_cell(client, kernel_id, "import torch")
    client.close_notebook(BARE)
    return start, torch


def make_model(n: int, numel: int) -> str:
    return (
        "import torch\n"
        f"sd = {{f'layer{{i}}.weight': torch.randint(-2**15, 2**15 - 1, ({numel},), "
        f"dtype=torch.int16).view(torch.bfloat16) for i in range({n})}}\n"
    )


CHANGE = "for _t in sd.values():\n    _t.view(torch.int16).add_(1)\ndel _t\n"

RAW_WRITE = """
import os as _os
with open({path!r}, 'wb') as _f:
    for _t in sd.values():
        _f.write(memoryview(_t.view(torch.uint8).numpy()))
    _f.flush()
    _os.fsync(_f.fileno())
del _f, _t
"""


def timeline_offsets(op: dict) -> dict[str, float]:
    """Each step of the operation's timeline, seconds after its request."""
    steps = op.get("timeline") or []
    if not steps:
        return {}
    t0 = steps[0]["at"]
    return {s["step"]: s["at"] - t0 for s in steps}


def resume_round(client: PauseClient, spare: bool, think: float) -> dict:
    if spare:
        client.api("POST", "sessions/prewarm", {"path": NB})
        time.sleep(think)  # the user reads the banner, then clicks Resume
    t0 = time.perf_counter()
    op = follow(client, client.resume(NB))
    ready = time.perf_counter() - t0
    kernel_id = op_kernel = kernel_of(client, NB)
    run_cell(client, kernel_id, "_x = 1")
    cell = time.perf_counter() - t0
    run_cell(client, op_kernel, "_n = len(sd)")
    model = time.perf_counter() - t0
    op = client.operation(op["id"])  # its timeline now has the first cell
    return {"ready": ready, "cell": cell, "model": model, "timeline": timeline_offsets(op)}


def pause(client: PauseClient) -> tuple[float, float, dict]:
    """How long a pause took (request to ``paused``), how long until its checkpoint was
    committed (the ledger's ``checkpoint-finished``, after its ``pause-requested``: the
    part before the kernel is stopped), and its timeline."""
    t0 = time.perf_counter()
    since = time.time() - 1
    op = follow(client, client.pause(NB))
    took = time.perf_counter() - t0
    rows = {e.type.value: e.time for e in client.ledger_events(since) if e.operation_id == op["id"]}
    return took, rows["checkpoint-finished"] - rows["pause-requested"], timeline_offsets(op)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--tensors", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--think", type=float, default=5.0, help="seconds a spare warms")
    args = parser.parse_args()
    numel = int(args.size_gib * (1 << 30) / 2 / args.tensors)

    rows: dict[str, list[float]] = {}
    timelines: dict[str, list[dict[str, float]]] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = write_notebooks(tmp / "root", NB, BARE)
        raw_file = tmp / "raw.bin"
        with LocalServer(root, tmp / "state", env=server_env(tmp)) as server:
            client = server.start()
            kernel_id = client.open_notebook(NB)["kernel"]["id"]
            run_cell(client, kernel_id, make_model(args.tensors, numel))
            for r in range(args.rounds):
                print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
                # %checkpoint against the raw write of the same bytes, alternated
                order = ("magic", "raw") if r % 2 == 0 else ("raw", "magic")
                took = {}
                for what in order:
                    if what == "magic":
                        run_cell(client, kernel_id, CHANGE)
                        took[what] = run_cell(client, kernel_id, "%checkpoint --quiet")
                    else:
                        took[what] = run_cell(
                            client, kernel_id, RAW_WRITE.format(path=str(raw_file))
                        )
                        raw_file.unlink()
                add("checkpoint magic s", took["magic"])
                add("raw write s", took["raw"])
                add("checkpoint magic / raw write", took["magic"] / took["raw"])

                start, torch = bare_kernel(client)
                add("bare kernel start s", start)
                add("import torch s", torch)

                # a pause of the changed model, then two resumes: cold and spare, alternated
                run_cell(client, kernel_id, CHANGE)
                first, first_checkpoint, line = pause(client)
                add("first pause s", first)
                add("first pause to its checkpoint's end s", first_checkpoint)
                timelines.setdefault("first pause", []).append(line)
                kinds = ("cold", "spare") if r % 2 == 0 else ("spare", "cold")
                for i, kind in enumerate(kinds):
                    res = resume_round(client, kind == "spare", args.think)
                    timelines.setdefault(f"resume, {kind}", []).append(res["timeline"])
                    add(f"resume {kind}: ready s", res["ready"])
                    add(f"resume {kind}: cell not using the model s", res["cell"])
                    add(
                        f"resume {kind}: cell not using the model - kernel start s",
                        res["cell"] - start,
                    )
                    add(f"resume {kind}: cell using the model s", res["model"])
                    if i == 0:
                        again, checkpointed, line = pause(client)
                        add("re-pause, nothing changed s", again)
                        add("re-pause / first pause", again / first)
                        # what the pause adds before the kernel is stopped
                        add("re-pause to its checkpoint's end s", checkpointed)
                        add(
                            "re-pause / first pause, to the checkpoint's end",
                            checkpointed / first_checkpoint,
                        )
                        timelines.setdefault("re-pause", []).append(line)
                kernel_id = kernel_of(client, NB)

    stats = {name: median_range(values) for name, values in rows.items()}
    median_timelines = {}
    for name, lines in timelines.items():
        steps = [s for s in (lines[0] if lines else {}) if all(s in line for line in lines)]
        median_timelines[name] = {
            s: round(statistics.median(line[s] for line in lines), 3) for s in steps
        }
    report = {
        "size_gib": args.size_gib,
        "tensors": args.tensors,
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
        "figures": stats,
        "timelines": median_timelines,
    }
    print_table(stats, median_timelines)
    print(json.dumps(report, indent=1))


TARGETS = {
    "checkpoint magic / raw write": "<= 1.1",
    "resume cold: cell not using the model - kernel start s": "<= 1",
    "resume spare: cell not using the model - kernel start s": "<= 0.3",
    "re-pause / first pause": "<= 0.05",
    "re-pause, nothing changed s": "<= 0.15",
    "re-pause / first pause, to the checkpoint's end": "(<= 0.05)",
    "re-pause to its checkpoint's end s": "(<= 0.15)",
}


def print_table(stats: dict, timelines: dict) -> None:
    out = sys.stderr
    print(f"\n{'figure':<60} {'median [min-max]':<24} target", file=out)
    for name, stat in stats.items():
        print(f"{name:<60} {fmt(stat):<24} {TARGETS.get(name, '')}", file=out)
    base = (
        f"(bare kernel start {stats['bare kernel start s']['median']:.2f} s, "
        f"raw write {stats['raw write s']['median']:.2f} s)"
    )
    for name, line in timelines.items():
        if not line:
            continue
        print(f"\nmedian timeline, {name} {base}", file=out)
        previous = 0.0
        for step, at in line.items():
            print(f"  {at:7.3f} s  (+{at - previous:6.3f})  {step}", file=out)
            previous = at


if __name__ == "__main__":
    main()
