"""The spot drill: how much work a preempted node loses (issue 38).

    python benchmarks/drill_spot.py [--trials 20] [--bandwidth-mb 20] [--grace 3]
        [--state-mb 200] [--tensor-mb 8] [--cell-seconds 2] [--stage-every 10]

A real SeaweedFS behind a TCP proxy that carries at most ``--bandwidth-mb`` MB/s of
uploads (tests/objectstores.py ``Throttle``, all connections together: a node's link).
Per trial, node A (a real Jupyter server with jupyter-pause, its own folders, the bucket as
its checkpoint root, ``shutdown_grace = --grace``) runs a notebook whose namespace holds
``--state-mb`` of data, several times what the grace can upload, and a training-like loop:
cells of ``--cell-seconds`` that each change a tensor of ``--tensor-mb`` and a small
variable, ``--gap`` seconds apart (staging begins only once a cell ended and the kernel is
idle: a loop inside one cell is never interrupted, so it is staged when it ends).  Once its state is staged, SIGTERM comes at a random moment (a cell running or
not, a staging under way or not); SIGKILL follows ``--kill-after`` seconds later, as
Kubernetes does at the end of ``terminationGracePeriodSeconds``.  Node B, sharing only the
bucket and the key, resumes the notebook, and reads which step it got back.

Per trial: the cells and seconds of cells lost (completed on A, missing on B), the bytes
not uploaded, the delta the flush had to carry against grace x bandwidth, and what A's
last save said (``newest``, ``older``, ``none``).  The goal: at most the last cell lost
whenever the delta fits the grace.  Also the staging cost during the loop: the bytes
uploaded per hour of training, and the share of wall time cells waited for the saves.

Prints a table and one JSON document.  ``run_drill`` is what tests/test_spot_drill.py
runs at small sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jupyter_pause.client import LocalServer  # noqa: E402
from tests.helpers import empty_notebook, wait_for  # noqa: E402

NB = "train.ipynb"
MB = 1_000_000


@dataclass
class Sizes:
    bandwidth: float = 20 * MB  # bytes a second, uploads of the node
    grace: float = 3.0  # shutdown_grace
    kill_after: float = 8.0  # SIGKILL this long after SIGTERM (terminationGracePeriodSeconds)
    state: int = 200 * MB  # the namespace beside the tensor
    tensor: int = 8 * MB  # changed by every cell
    cell: float = 2.0  # seconds a cell computes
    gap: float = 1.0  # seconds between two cells (a person reading, a driver's think time)
    stage_every: float = 10.0  # the class's stage_every
    share: float = 0.5  # stage_share
    span: float = 20.0  # SIGTERM comes this many seconds into the loop, at most


@dataclass
class Trial:
    trial: int
    sigterm_at: float  # seconds into the loop
    cells_done: int  # cells completed on A
    cells_lost: int
    seconds_lost: float
    outcome: str  # A's final save: newest | older | none | ? (no word from A)
    delta: int | None  # bytes the last save had to upload
    bytes_lost: int  # what the bucket lacked when A died (0 when newest)
    fits: bool | None  # delta <= grace x bandwidth
    told: bool  # B said what was lost (when something was)
    stop_seconds: float  # SIGTERM to A's exit
    staged_bytes: int = 0  # uploaded during the loop, before SIGTERM
    loop_seconds: float = 0.0
    autosave_seconds: float = 0.0  # the kernel's part of the saves during the loop
    notes: list[str] = field(default_factory=list)


class Loop(threading.Thread):
    """The training-like loop: cells, one after another, until told to stop or the
    kernel goes; each cell's step, start and end are kept (wall clock)."""

    def __init__(self, client, kernel_id: str, sizes: Sizes):
        super().__init__(daemon=True)
        self.client, self.kernel_id, self.sizes = client, kernel_id, sizes
        self.cells: list[tuple[int, float, float]] = []  # (step after it, start, end)
        self.stop = threading.Event()

    def run(self) -> None:
        code = (
            "step += 1\n"
            "w += 1.0\n"  # the tensor, changed in place
            "log.append(step)\n"
            f"time.sleep({self.sizes.cell})\n"
            "print(step)"
        )
        while not self.stop.is_set():
            started = time.time()
            try:
                result = self.client.execute(self.kernel_id, code, timeout=60)
            except Exception:
                return  # the server is gone
            if not result.ok:
                return
            self.cells.append((int(result.stdout.split()[-1]), started, time.time()))
            self.stop.wait(self.sizes.gap)  # the kernel idle: a background save may begin


def node(tmp: Path, name: str, url: str, env: dict, sizes: Sizes) -> LocalServer:
    root = tmp / name / "root"
    root.mkdir(parents=True, exist_ok=True)
    if name.startswith("a"):
        (root / NB).write_text(json.dumps(empty_notebook()))
    classes = {"gpu-interactive": {"stage_every": sizes.stage_every}}
    return LocalServer(
        root,
        tmp / name / "state",
        env={
            **env,
            "JUPYTER_DATA_DIR": str(tmp / name / "data"),
            "JUPYTER_CONFIG_DIR": str(tmp / name / "config"),
            "PYTHONPATH": str(ROOT),
        },
        checkpoints=url,
        extra_args=[
            "--PauseApp.bucket_sync_interval=1",
            f"--PauseApp.key_file={tmp / 'key'}",
            "--PauseApp.auto_pause=False",
            f"--PauseApp.shutdown_grace={sizes.grace}",
            f"--PauseApp.stage_share={sizes.share}",
            f"--PauseApp.workload_classes={json.dumps(classes)}",
        ],
    )


def staged(client) -> dict | None:
    lag = (client.session_status(NB) or {}).get("staging") or {}
    if lag.get("checkpoint") and lag["bytes"] == 0 and not lag["uploading"]:
        return lag
    return None


def one_trial(
    n: int, seaweed, throttle, sizes: Sizes, tmp: Path, rng: random.Random, logs: bool
) -> Trial:
    bucket = f"drill-{n}-{secrets.token_hex(3)}"
    seaweed.create_bucket(bucket)
    url = f"s3://{bucket}/ck"
    env = {**seaweed.env(), "AWS_ENDPOINT_URL": throttle.endpoint}
    tmp = tmp / f"trial-{n}"
    a = node(tmp, "a", url, env, sizes)
    b = node(tmp, "b", url, env, sizes)
    try:
        client = a.start()
        kernel_id = client.open_notebook(NB)["kernel"]["id"]
        # the server watches the kernel once its status names it: a cell sent before may
        # go unseen by its activity monitor, and not count towards the first staging
        wait_for(
            lambda: (client.session_status(NB) or {}).get("kernel_id") == kernel_id,
            60,
            "the server",
        )
        setup = (
            "import time\nimport numpy as np\nimport torch\n"
            f"data = np.random.default_rng(0).random({sizes.state // 8})\n"
            f"w = torch.zeros({sizes.tensor // 4})\n"
            "step = 0\nlog = []\n"
            f"time.sleep({sizes.stage_every + 0.5})"  # past one interval: the first save
        )
        assert client.execute(kernel_id, setup, timeout=300).ok
        _say(f"trial {n}: set up")
        # 5 x its time, and room for a loaded 2-core machine
        first = max(180.0, 5 * sizes.state / (sizes.bandwidth * sizes.share))
        wait_for(lambda: staged(client), first, lambda: f"the first staging\n{a.log_tail(20000)}")
        _say(f"trial {n}: staged")
        sent_before = throttle.sent
        loop = Loop(client, kernel_id, sizes)
        started = time.time()
        loop.start()
        time.sleep(rng.uniform(sizes.cell, sizes.span))  # the moment of the preemption
        sigterm = time.time()
        staged_bytes = throttle.sent - sent_before
        autosave_seconds = sum(  # the kernel's part of the saves of the loop
            float((e.get("data") or {}).get("seconds") or 0)
            for e in client.events(since=started)
            if e["type"] == "checkpoint-finished" and (e.get("data") or {}).get("autosave")
        )
        a.process.send_signal(signal.SIGTERM)
        try:
            a.process.wait(sizes.kill_after)
        except subprocess.TimeoutExpired:
            a.process.kill()  # Kubernetes' SIGKILL at the end of the grace period
            a.process.wait(10)
        stop_seconds = time.time() - sigterm
        _say(f"trial {n}: A stopped in {stop_seconds:.1f} s")
        if logs:
            _say(a.log_tail(8000))
        loop.stop.set()
        loop.join(30)
        done = [c for c in loop.cells if c[2] <= sigterm + stop_seconds]
        last_done = done[-1][0] if done else 0
        record = _final_save(a)

        other = b.start()
        wait_for(
            lambda: (s := other.session_status(NB)) and s["state"] in ("paused", "failed"),
            180,
            lambda: f"B to learn the notebook\n{b.log_tail()}",
        )
        op = other.wait(other.resume(NB), timeout=300)
        if op["outcome"] != "succeeded":
            raise RuntimeError(f"the resume on B failed: {op}\n{b.log_tail()}")
        got = other.evaluate(other.session_status(NB)["kernel_id"], "print(step)")
        lost = max(0, last_done - got)
        ends = {c[0]: c[2] for c in loop.cells}
        seconds_lost = (ends[last_done] - ends.get(got, started)) if lost else 0.0
        outcome = (record or {}).get("outcome", "?")
        delta = (record or {}).get("bytes")
        told = any("were lost when its node stopped" in m for m in op["messages"])
        return Trial(
            trial=n,
            sigterm_at=round(sigterm - started, 2),
            cells_done=len(done),
            cells_lost=lost,
            seconds_lost=round(seconds_lost, 2),
            outcome=outcome,
            delta=delta,
            bytes_lost=0 if outcome == "newest" else int(delta or 0),
            fits=None if delta is None else delta <= sizes.grace * sizes.bandwidth,
            told=told,
            stop_seconds=round(stop_seconds, 2),
            staged_bytes=staged_bytes,
            loop_seconds=round(sigterm - started, 2),
            autosave_seconds=round(autosave_seconds, 3),
            notes=[m for m in op["messages"] if "lost" in m],
        )
    finally:
        a.stop()
        b.stop()


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _final_save(server: LocalServer) -> dict | None:
    """What A's ledger says its last save left in the bucket."""
    from jupyter_pause.ledger import Ledger

    ledger = Ledger(server.state_dir / "ledger.sqlite3")
    try:
        told = [
            e.data["final_save"]
            for e in ledger.events()
            if e.type.value in ("paused", "not-saved") and (e.data or {}).get("final_save")
        ]
    finally:
        ledger.close()
    return told[-1] if told else None


def run_drill(
    trials: int, sizes: Sizes, seed: int = 0, folder: Path | None = None, logs: bool = False
) -> list[Trial]:
    """``trials`` trials against one SeaweedFS behind one throttled link; ``logs``: print
    each node A's log after its stop."""
    from tests.objectstores import Seaweed, Throttle

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="jp-drill-", dir=folder) as tmp:
        tmp = Path(tmp)
        seaweed = Seaweed(tmp / "seaweed")
        seaweed.start()
        throttle = Throttle(seaweed.endpoint, total=sizes.bandwidth)
        try:
            return [
                one_trial(n, seaweed, throttle, sizes, tmp, rng, logs) for n in range(1, trials + 1)
            ]
        finally:
            throttle.stop()
            seaweed.stop()


def table(results: list[Trial], sizes: Sizes) -> str:
    capacity = sizes.grace * sizes.bandwidth
    lines = [
        f"grace {sizes.grace:g} s x bandwidth {sizes.bandwidth / MB:g} MB/s = "
        f"{capacity / MB:.1f} MB; namespace {sizes.state / MB:g} MB, tensor "
        f"{sizes.tensor / MB:g} MB changed per {sizes.cell:g} s cell, {sizes.gap:g} s apart; "
        f"staged every {sizes.stage_every:g} s of use at {sizes.share:.0%} of the link",
        f"{'trial':>5} {'SIGTERM at':>10} {'cells':>5} {'lost':>4} {'lost s':>6} "
        f"{'outcome':>7} {'delta MB':>8} {'fits':>5} {'lost MB':>7} {'told':>5} {'stop s':>6}",
    ]
    for t in results:
        delta = "?" if t.delta is None else f"{t.delta / MB:.1f}"
        lines.append(
            f"{t.trial:>5} {t.sigterm_at:>10.1f} {t.cells_done:>5} {t.cells_lost:>4} "
            f"{t.seconds_lost:>6.1f} {t.outcome:>7} {delta:>8} {str(t.fits):>5} "
            f"{t.bytes_lost / MB:>7.1f} {str(t.told):>5} {t.stop_seconds:>6.1f}"
        )
    fitting = [t for t in results if t.fits]
    met = sum(1 for t in fitting if t.cells_lost <= 1)
    lines.append(
        f"goal (at most the last cell lost when the delta fits): {met}/{len(fitting)} trials"
    )
    return "\n".join(lines)


def staging_cost(results: list[Trial], sizes: Sizes) -> dict:
    """What staging cost during the loops: bytes uploaded per hour, the share of wall time
    the saves held the kernel, and the share of the link's capacity the uploads used."""
    wall = sum(t.loop_seconds for t in results)
    sent = sum(t.staged_bytes for t in results)
    saves = sum(t.autosave_seconds for t in results)
    return {
        "bytes_per_hour": sent / wall * 3600 if wall else 0.0,
        "kernel_share_of_wall_time": saves / wall if wall else 0.0,
        "link_share": sent / (wall * sizes.bandwidth) if wall else 0.0,
        "loop_seconds": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--bandwidth-mb", type=float, default=20)
    parser.add_argument("--grace", type=float, default=3)
    parser.add_argument("--kill-after", type=float, default=8)
    parser.add_argument("--state-mb", type=float, default=200)
    parser.add_argument("--tensor-mb", type=float, default=8)
    parser.add_argument("--cell-seconds", type=float, default=2)
    parser.add_argument("--gap", type=float, default=1)
    parser.add_argument("--stage-every", type=float, default=10)
    parser.add_argument("--share", type=float, default=0.5)
    parser.add_argument("--span", type=float, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logs", action="store_true", help="print node A's log each trial")
    args = parser.parse_args()
    sizes = Sizes(
        bandwidth=args.bandwidth_mb * MB,
        grace=args.grace,
        kill_after=args.kill_after,
        state=int(args.state_mb * MB),
        tensor=int(args.tensor_mb * MB),
        cell=args.cell_seconds,
        gap=args.gap,
        stage_every=args.stage_every,
        share=args.share,
        span=args.span,
    )
    results = run_drill(args.trials, sizes, args.seed, logs=args.logs)
    cost = staging_cost(results, sizes)
    print(table(results, sizes))
    print(
        f"staging cost: {cost['bytes_per_hour'] / 1e9:.2f} GB uploaded per hour of the loop; "
        f"saves held the kernel {cost['kernel_share_of_wall_time']:.2%} of wall time; "
        f"uploads used {cost['link_share']:.1%} of the link"
    )
    print(
        json.dumps(
            {"sizes": asdict(sizes), "trials": [asdict(t) for t in results], "cost": cost},
            indent=1,
        )
    )
    lost = [t.seconds_lost for t in results]
    print(f"median seconds lost {statistics.median(lost):.1f}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
