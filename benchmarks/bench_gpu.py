"""The checkpoint engine against the GPU's and the disk's own limits, measured in one run.

    python benchmarks/bench_gpu.py --size-gb 2 --size-gb 20 [--rounds 3] [--json OUT]
    python benchmarks/bench_gpu.py --dry-run        # no CUDA: the same steps, CPU-sized

Each ratio is against a baseline taken in the same run, with the same bytes, in paired
rounds (the order alternated round to round, the median of the per-round ratios):

  G1  checkpoint of a bf16 state_dict on the GPU, fsync included
      / (a raw device-to-host copy into pinned memory + a raw write + fsync of those
      bytes)                                                           target <= 1.2
  G2  eager restore of it onto the GPU, its files cold
      / (a cold read of the same files into pinned memory + a host-to-device copy)
                                                                       target <= 1.3
  G3  a lazy restore in a real kernel: seconds from the kernel's start until a cell
      that does not use the model has run (and until one that does)   target <= 1 s

The pinned buffer is allocated once, outside the timings (pin once, reuse); "cold"
drops the files' pages with posix_fadvise(DONTNEED) after fsync, or all caches with
--drop-caches (root). With --dry-run (no CUDA) "device" and "pinned" memory are plain
host memory and the model is CPU-sized: the steps run, the ratios mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_checkpoint import drop_cache, files_under  # benchmarks/ is this script's folder

GB = 1_000_000_000
TARGETS = {"checkpoint": 1.2, "restore": 1.3, "lazy_first_cell_s": 1.0}


def shapes(size_bytes: int) -> list[tuple[str, tuple[int, ...]]]:
    """LLM-shaped bf16 tensors (a TinyLlama-like layer, repeated) of about size_bytes."""
    h, inter, kv = 2048, 5632, 256
    layer = [
        ("q", (h, h)),
        ("k", (kv, h)),
        ("v", (kv, h)),
        ("o", (h, h)),
        ("gate", (inter, h)),
        ("up", (inter, h)),
        ("down", (h, inter)),
        ("norm", (h,)),
    ]
    per_layer = sum(2 * _numel(s) for _, s in layer)
    n = max(1, round(size_bytes / per_layer))
    return [(f"layers.{i}.{name}", shape) for i in range(n) for name, shape in layer]


def _numel(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


class Device:
    """The GPU, or (dry run) host memory standing in for it."""

    def __init__(self, torch, cuda: bool):
        self.torch = torch
        self.cuda = cuda
        self.name = torch.cuda.get_device_name(0) if cuda else "cpu (dry run)"
        self.where = "cuda:0" if cuda else "cpu"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def model(self, size_bytes: int) -> dict:
        torch = self.torch
        out = {}
        for name, shape in shapes(size_bytes):
            t = torch.empty(shape, dtype=torch.int16, device=self.where)
            t.random_(-(2**15), 2**15 - 1)  # incompressible, made where it lives
            out[name] = t.view(torch.bfloat16)
        self.sync()
        return out

    def host_buffer(self, nbytes: int):
        return self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=self.cuda)


def raw_save(device: Device, model: dict, pinned, path: Path) -> tuple[float, float]:
    """Seconds of the device-to-host copy into ``pinned``, and of writing it + fsync."""
    t0 = time.perf_counter()
    offset = 0
    for t in model.values():
        n = t.numel() * t.element_size()
        pinned[offset : offset + n].copy_(t.reshape(-1).view(device.torch.uint8), non_blocking=True)
        offset += n
    device.sync()
    t1 = time.perf_counter()
    view = memoryview(pinned.numpy())[:offset]
    with open(path, "wb", buffering=0) as f:
        step = 64 << 20
        for start in range(0, offset, step):
            f.write(view[start : start + step])
        os.fsync(f.fileno())
    return t1 - t0, time.perf_counter() - t1


def raw_load(device: Device, files: list[Path], pinned, target) -> tuple[float, float]:
    """Seconds of a cold read of ``files`` into ``pinned``, and of copying them to ``target``."""
    t0 = time.perf_counter()
    view = memoryview(pinned.numpy())
    offset = 0
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while True:
                n = f.readinto(view[offset : offset + (64 << 20)])
                if not n:
                    break
                offset += n
    t1 = time.perf_counter()
    target[:offset].copy_(pinned[:offset], non_blocking=True)
    device.sync()
    return t1 - t0, time.perf_counter() - t1


def our_save(model: dict, ck: Path) -> float:
    import jupyter_pause as jp

    t0 = time.perf_counter()
    jp.checkpoint(namespace={"model": model}, dir=ck, notebook="nb", progress=False)
    return time.perf_counter() - t0


def bench_size(args, device: Device, size_bytes: int, work: Path) -> dict:
    import jupyter_pause as jp
    from jupyter_pause.engine import checks, tensors

    torch = device.torch
    model = device.model(size_bytes)
    nbytes = sum(t.numel() * t.element_size() for t in model.values())
    pinned = device.host_buffer(nbytes + (64 << 20))  # once, outside every timing
    target = torch.empty(nbytes + (64 << 20), dtype=torch.uint8, device=device.where)
    rounds = []
    for i in range(args.rounds):
        ck = work / f"ck{i}"
        raw = work / "raw.bin"
        tensors._CACHE.clear()  # every round writes and hashes everything
        checks._VERIFIED.clear()

        if i % 2 == 0:
            save = our_save(model, ck)
            d2h, write = raw_save(device, model, pinned, raw)
        else:
            d2h, write = raw_save(device, model, pinned, raw)
            save = our_save(model, ck)
        raw.unlink()
        files = files_under(ck)
        drop_cache(files, args.drop_caches)
        out: dict = {}
        tensors._CACHE.clear()
        checks._VERIFIED.clear()
        t0 = time.perf_counter()
        jp.restore(namespace=out, dir=ck, notebook="nb", progress=False, lazy=False)
        device.sync()
        restore = time.perf_counter() - t0
        first = next(iter(model))
        back = out["model"][first]  # random bits hold NaNs: compare the bits
        assert torch.equal(back.view(torch.int16), model[first].view(torch.int16)), "values differ"
        assert back.device.type == device.where.split(":")[0]
        del out
        drop_cache(files, args.drop_caches)
        read, h2d = raw_load(
            device, [f for f in files if f.stat().st_size > 1 << 20], pinned, target
        )
        rounds.append(
            {
                "checkpoint": save,
                "d2h": d2h,
                "write": write,
                "restore": restore,
                "read": read,
                "h2d": h2d,
                "checkpoint_ratio": save / (d2h + write),
                "restore_ratio": restore / (read + h2d),
            }
        )
        shutil.rmtree(ck)
        print(
            f"  {nbytes / GB:.1f} GB round {i + 1}: {json.dumps(_rounded(rounds[-1]))}", flush=True
        )
    del target, pinned  # room for the kernel's own restore on the same GPU
    if device.cuda:
        torch.cuda.empty_cache()
    first_cell = lazy_first_cell(args, device, model, work)

    def median(key):
        return statistics.median(r[key] for r in rounds)

    def spread(key):
        return [min(r[key] for r in rounds), max(r[key] for r in rounds)]

    return {
        "bytes": nbytes,
        "tensors": len(shapes(size_bytes)),
        "rounds": rounds,
        "checkpoint_ratio": median("checkpoint_ratio"),
        "checkpoint_ratio_range": spread("checkpoint_ratio"),
        "restore_ratio": median("restore_ratio"),
        "restore_ratio_range": spread("restore_ratio"),
        "d2h_gbps": nbytes / GB / median("d2h"),
        "write_gbps": nbytes / GB / median("write"),
        "read_gbps": nbytes / GB / median("read"),
        "h2d_gbps": nbytes / GB / median("h2d"),
        **first_cell,
    }


KERNEL_CELLS = """
import json, sys, time
from jupyter_client.manager import start_new_kernel
ck = sys.argv[1]
t0 = time.perf_counter()
km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
started = time.perf_counter()
def run(code):
    reply = kc.execute_interactive(code, timeout=600, output_hook=lambda m: None)
    assert reply["content"]["status"] == "ok", reply["content"]
    return time.perf_counter() - started
run("import jupyter_pause as jp; r = jp.restore(dir=%r, notebook='nb', progress=False, lazy=True)" % ck)
first = run("n = 1 + 1")
model = run("x = float(next(iter(model.values())).flatten()[0].float())")
km.shutdown_kernel(now=True)
print(json.dumps({"kernel_start_s": started - t0, "lazy_first_cell_s": first, "lazy_model_cell_s": model}))
"""


def lazy_first_cell(args, device: Device, model: dict, work: Path) -> dict:
    """G3 in a real kernel, with the model's files cold."""
    import subprocess

    import jupyter_pause as jp

    ck = work / "lazy"
    jp.checkpoint(namespace={"model": model}, dir=ck, notebook="nb", progress=False)
    drop_cache(files_under(ck), args.drop_caches)
    out = subprocess.run(
        [sys.executable, "-c", KERNEL_CELLS, str(ck)],
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ,
    )
    shutil.rmtree(ck)
    if out.returncode != 0:
        return {"lazy_error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rounded(d: dict) -> dict:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in d.items()}


def table(report: dict) -> list[str]:
    lines = [
        f"GPU benchmark on {report['device']} (cuda: {report['cuda']}), median of "
        f"{report['rounds']} paired rounds [min-max]",
        f"{'size':>8}  {'G1 checkpoint / (D2H+write)':>28}  {'G2 restore / (read+H2D)':>26}  "
        f"{'G3 lazy first cell':>18}  {'model in':>9}",
    ]
    for size in report["sizes"]:
        g1 = f"{size['checkpoint_ratio']:.2f} [{size['checkpoint_ratio_range'][0]:.2f}-{size['checkpoint_ratio_range'][1]:.2f}]"
        g2 = f"{size['restore_ratio']:.2f} [{size['restore_ratio_range'][0]:.2f}-{size['restore_ratio_range'][1]:.2f}]"
        g3 = f"{size['lazy_first_cell_s']:.2f} s" if "lazy_first_cell_s" in size else "error"
        model = f"{size['lazy_model_cell_s']:.2f} s" if "lazy_model_cell_s" in size else "-"
        lines.append(f"{size['bytes'] / GB:>6.1f}GB  {g1:>28}  {g2:>26}  {g3:>18}  {model:>9}")
        lines.append(
            f"{'':>8}  limits: D2H {size['d2h_gbps']:.1f} GB/s, write+fsync "
            f"{size['write_gbps']:.2f} GB/s, cold read {size['read_gbps']:.2f} GB/s, "
            f"H2D {size['h2d_gbps']:.1f} GB/s"
        )
    lines.append(
        f"targets: G1 <= {TARGETS['checkpoint']}, G2 <= {TARGETS['restore']}, "
        f"G3 <= {TARGETS['lazy_first_cell_s']} s"
    )
    return lines


def met(size: dict) -> dict[str, bool]:
    return {
        "checkpoint": size["checkpoint_ratio"] <= TARGETS["checkpoint"],
        "restore": size["restore_ratio"] <= TARGETS["restore"],
        "lazy_first_cell": size.get("lazy_first_cell_s", float("inf"))
        <= TARGETS["lazy_first_cell_s"],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size-gb", type=float, action="append", help="repeat for several sizes (default 2)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default $TMPDIR)")
    parser.add_argument(
        "--drop-caches", action="store_true", help="echo 3 > /proc/sys/vm/drop_caches (root)"
    )
    parser.add_argument("--dry-run", action="store_true", help="no CUDA: the same steps, CPU-sized")
    parser.add_argument("--json", type=Path, default=None, help="write the report here too")
    args = parser.parse_args(argv)
    sizes = args.size_gb or ([0.02] if args.dry_run else [2.0])
    work = Path(tempfile.mkdtemp(prefix="bench-gpu-", dir=args.dir))
    # a key of our own: the user's key is never touched
    os.environ["JUPYTER_DATA_DIR"] = str(work / "data")
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        parser.error("no CUDA device: run with --dry-run")
    device = Device(torch, cuda)
    report = {"cuda": cuda, "device": device.name, "rounds": args.rounds, "sizes": []}
    try:
        for gb in sizes:
            size = bench_size(args, device, int(gb * GB), work)
            size["met"] = met(size)
            if cuda:
                torch.cuda.empty_cache()  # the model and buffers of this size are gone
            report["sizes"].append(size)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(table(report)))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
