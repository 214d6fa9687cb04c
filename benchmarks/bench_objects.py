"""Object-heavy namespaces: a checkpoint against pickle's own speed (issue #36).

    python benchmarks/bench_objects.py [--rounds 3] [--scale 1.0] [--only frame,dicts]

Each case runs in a fresh process, in a real IPython shell (its events drive the
incremental checkpoint), in paired rounds; each ratio is taken within one round and the
medians are printed, with the range:

  checkpoint / (cloudpickle.dumps + a raw write and fsync of its bytes), on the same disk
      in the same process, alternated with the checkpoint (target <= 1.5)
  unchanged re-checkpoint / first checkpoint (<= 0.1)
  re-checkpoint after one small cell (``n = 2``) / first checkpoint (<= 0.1)
  peak anonymous memory beside the namespace during the checkpoint, per object of the
      namespace (RssAnon sampled every 2 ms, over its value before; <= 16 B), and the peak
      resident memory (VmHWM after /proc/self/clear_refs: mapped files too)
  restore into a fresh namespace: lazy (until it returns) and eager

The cases (``--scale`` multiplies their sizes):

  frame    a 250,000-row DataFrame with a text column and 40 views and selections of it,
           as a notebook's cells make them, in pandas without pyarrow (its text is then
           arrays of Python strings; pyarrow is made unimportable in that process)
  frame-arrow  the same with pyarrow, if installed (its text is Arrow's)
  dicts    1.4 million small dicts in a list
  strings  7.5 million strings in a list
  small    10,000 small objects of several kinds: the lazy-versus-eager restore (lazy
           returns no later than eager finishes); its checkpoint, 0.2 s, is fixed costs
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "frame": """
import numpy as np, pandas as pd
rng = np.random.default_rng(0)
n = int(250_000 * SCALE)
words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
df = pd.DataFrame({"id": np.arange(n), "x": rng.normal(size=n), "y": rng.integers(0, 100, n),
                   "text": [" ".join(rng.choice(words, 5)) for _ in range(n)]})
for i in range(10):
    globals()[f"kept{i}"] = df[df.y > i * 10]
    globals()[f"rows{i}"] = df.iloc[i * 1000 : (i + 1) * 20_000]
    globals()[f"col{i}"] = df["text"]
    globals()[f"sub{i}"] = df[["x", "text"]].head(5000 * (i + 1))
n = 1
""",
    "dicts": """
rows = [{"id": i, "name": str(i), "tags": [i % 7]} for i in range(int(1_400_000 * SCALE))]
n = 1
""",
    "strings": """
words = [f"word-{i}-{i % 97}" for i in range(int(7_500_000 * SCALE))]
n = 1
""",
    "small": """
import numpy as np
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
things = []
for i in range(int(2000 * SCALE)):
    things += [{"k": i, "v": [i, str(i)]}, Point(i, -i), (i, float(i)), {i, i + 1}, np.arange(4) + i]
n = 1
""",
}

CHILD = r"""
import gc, json, os, sys, threading, time, tempfile
if os.environ.get("BENCH_WITHOUT_PYARROW"):  # pandas as installed without pyarrow
    import importlib.abc
    class _NoPyarrow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "pyarrow" or name.startswith("pyarrow."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, _NoPyarrow())
from IPython.core.interactiveshell import InteractiveShell
import cloudpickle
import jupyter_pause as jp

case, scale, work = sys.argv[1], float(sys.argv[2]), sys.argv[3]
sh = InteractiveShell.instance()
def run(code):
    r = sh.run_cell(code)
    assert r.success, r.error_in_exec or r.error_before_exec
t = time.perf_counter()
blocks0 = sys.getallocatedblocks()
run("SCALE = %r\n" % scale + CODE)
objects = sys.getallocatedblocks() - blocks0
ns = {k: v for k, v in sh.user_ns.items() if not k.startswith("_") and k not in sh.user_ns_hidden
      and k not in ("In", "Out", "exit", "quit", "get_ipython", "open", "SCALE")}
run("import jupyter_pause as jp")
# the engine's own first use (its imports) is not the namespace's cost
jp.checkpoint(namespace={"warm": 1}, dir=os.path.join(work, "warm"), notebook="w", progress=False)
ck = dict(dir=os.path.join(work, "ck"), notebook="bench.ipynb", progress=False)
sh.user_ns["_ck"] = ck
sh.user_ns_hidden["_ck"] = ck

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

def baseline():
    gc.collect()
    t0 = time.perf_counter()
    data = cloudpickle.dumps(ns, protocol=5)
    t1 = time.perf_counter()
    path = os.path.join(work, "raw.pkl")
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    dfd = os.open(work, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    t2 = time.perf_counter()
    os.unlink(path)
    return {"cloudpickle": t1 - t0, "raw_write": t2 - t1, "pickle_bytes": len(data)}

def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024

def checkpoint(full):
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before, before_anon = rss(), anon()
    peak, stop = [before_anon], threading.Event()
    def watch():  # anonymous memory: what a memory limit cannot reclaim (VmHWM counts mapped files too)
        while not stop.wait(0.002):
            peak[0] = max(peak[0], anon())
    watcher = threading.Thread(target=watch, daemon=True, name="jp-bench-memory")
    watcher.start()
    t0 = time.perf_counter()
    run(f"_res = jp.checkpoint(**_ck, full={full!r})")
    seconds = time.perf_counter() - t0
    stop.set()
    watcher.join()
    res = sh.user_ns.pop("_res")
    return {"seconds": seconds, "peak": hwm() - before, "peak_anon": peak[0] - before_anon,
            "written": res.bytes_written, "reused": res.records_reused, "saved": len(res.saved)}

out = {"objects": objects}
order = [baseline, lambda: checkpoint(True)] if ROUND % 2 == 0 else [lambda: checkpoint(True), baseline]
first = {}
for step in order:
    first.update(step() if step is baseline else {"first": step()})
out.update(first)
out["again"] = checkpoint(False)  # nothing ran since: every group reused
run("n = 2")
out["small_change"] = checkpoint(False)
# the process's first restore pays for its memory's growth: a warm-up one, not timed, and
# then the two alternated
for lazy in (None, *((True, False) if ROUND % 2 == 0 else (False, True))):
    gc.collect()
    t0 = time.perf_counter()
    r = jp.restore(namespace={}, lazy=lazy, **ck)
    if lazy is not None:
        out["lazy" if lazy else "eager"] = time.perf_counter() - t0
    from jupyter_pause.engine import lazy as _lazy
    _lazy.wait()
print("RESULT " + json.dumps(out))
"""


def child(case: str, scale: float, rnd: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="jp-bench-objects-") as work:
        env = dict(os.environ, JUPYTER_DATA_DIR=os.path.join(work, "data"))
        if case == "frame":
            env["BENCH_WITHOUT_PYARROW"] = "1"
        code = CHILD.replace("CODE", repr(CASES[case.removesuffix("-arrow")]))
        code = code.replace("ROUND", str(rnd))
        proc = subprocess.run(
            [sys.executable, "-c", code, case, str(scale), work],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        raise SystemExit(f"the {case} case failed:\n{proc.stdout}\n{proc.stderr}")


def _target(aimed: bool, goal: str) -> str:
    return f"   target {goal}" if aimed else ""


def med(xs) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", default="frame,dicts,strings,small")
    args = ap.parse_args(argv)
    print(f"object-heavy checkpoints, {args.rounds} rounds, scale {args.scale}; median [range]")
    for case in args.only.split(","):
        rows = [child(case, args.scale, r) for r in range(args.rounds)]
        ratio = [r["first"]["seconds"] / (r["cloudpickle"] + r["raw_write"]) for r in rows]
        again = [r["again"]["seconds"] / r["first"]["seconds"] for r in rows]
        small = [r["small_change"]["seconds"] / r["first"]["seconds"] for r in rows]
        per_obj = [max(0, r["first"]["peak_anon"]) / r["objects"] for r in rows]
        per_obj_rss = [max(0, r["first"]["peak"]) / r["objects"] for r in rows]
        r0 = rows[0]
        print(f"\n{case}: {r0['objects']:,} objects, {r0['first']['saved']} variables")
        print(
            f"  cloudpickle.dumps (s)                     {med([r['cloudpickle'] for r in rows])}"
        )
        print(
            f"  raw write + fsync of its {r0['pickle_bytes'] / 1e6:.0f} MB (s)          {med([r['raw_write'] for r in rows])}"
        )
        print(
            f"  checkpoint (s)                            {med([r['first']['seconds'] for r in rows])}"
        )
        target = functools.partial(_target, case != "small")  # small: its restore's only
        print(f"  checkpoint / (cloudpickle + raw write)    {med(ratio)}{target('<= 1.5')}")
        print(f"  unchanged re-checkpoint / first           {med(again)}{target('<= 0.1')}")
        print(f"  after `n = 2` / first                     {med(small)}{target('<= 0.1')}")
        print(f"  peak anonymous memory beside it, B/object {med(per_obj)}{target('<= 16')}")
        print(f"  peak resident (mapped files too), B/object {med(per_obj_rss)}")
        lazy = [r["lazy"] / r["eager"] for r in rows]
        print(f"  restore: lazy / eager                     {med(lazy)}   target <= 1")
        print(f"  restore: lazy (s)                         {med([r['lazy'] for r in rows])}")
        print(f"  restore: eager (s)                        {med([r['eager'] for r in rows])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
