"""The device check of issue #40: every GPU path in one run, a table, and
``$OUT/gpu-report.json`` with the sections ``environment``, ``tests``,
``server_round_trip``, ``hibernate`` and ``bench``.

Run it through ``benchmarks/gpu_check.sh``, which installs the carried wheels first on
the device machine (``--dry-run``: anywhere, the same steps without CUDA; the
hibernate steps then go through the fake driver of ``tests/fake_gpu_driver.py``).

Every section has a deadline inside ``--budget`` seconds; what the budget leaves no
room for is reported as skipped, with why, never as passed. Exit status 0 when every
section that ran is ok.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

from jupyter_pause.processes import pid_alive

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30
SECTIONS = ("environment", "tests", "server_round_trip", "hibernate", "bench")
#: the issue's goals on the H200
GOALS = {
    "hibernate_bytes": 60 * GiB,
    "left_after_hibernate": 300 << 20,
    "hibernate_s": 4.5,
    "awake_s": 3.0,
    "cycles": 50,
}


class Check:
    def __init__(self, args):
        self.args = args
        self.dry = args.dry_run
        self.out = args.out
        self.started = time.monotonic()
        self.deadline = self.started + args.budget
        self.work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
        self.report: dict = {
            "cuda": False,
            "dry_run": self.dry,
            "budget_s": args.budget,
            "installed_s": args.installed_s,
        }
        self.gpu = FakeGpu(self.work) if self.dry else RealGpu()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, step) -> None:
        if self.args.only and name not in self.args.only:
            self.report[name] = {"ok": True, "skipped": "not asked for (--only)"}
            return
        print(f"== {name}", flush=True)
        started = time.monotonic()
        try:
            result = step(self)
        except Exception as e:
            result = {
                "ok": False,
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-4000:],
            }
        result["seconds"] = round(time.monotonic() - started, 2)
        self.report[name] = result
        print(
            f"   {name}: {'ok' if result['ok'] else 'FAILED'} ({result['seconds']} s)", flush=True
        )

    @contextlib.contextmanager
    def server(self, name: str):
        """A real Jupyter server with jupyter-pause (its own folders); the dry run's
        hibernates go through the fake driver."""
        from jupyter_pause.client import LocalServer

        base = self.work / name
        (base / "root").mkdir(parents=True)
        extra, env = [], {}
        if self.dry:
            extra = ["--PauseApp.hibernate_driver=tests.fake_gpu_driver.FakeDriver"]
            env = {"JUPYTER_PAUSE_FAKE_GPU": str(self.gpu.world), "PYTHONPATH": _path(ROOT)}
        local = LocalServer(
            root_dir=base / "root", state_dir=base / "state", extra_args=extra, env=env
        )
        client = local.start()
        try:
            yield local, client
        finally:
            local.stop()
            shutil.rmtree(base, ignore_errors=True)


def _path(first: Path) -> str:
    return os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")]))


class RealGpu:
    """NVML, as the hibernate helper sees it."""

    def __init__(self):
        from jupyter_pause import nvml

        self.nvml = nvml

    def held(self, pid: int) -> int:
        return sum(used for p, _, used in self.nvml.processes() or [] if p == pid)

    def free(self) -> int:
        return (self.nvml.free_memory() or {}).get(0, 0)

    def register(self, pid: int, nbytes: int) -> None:
        """The real driver sees what the kernel allocated: nothing to do."""


class FakeGpu:
    """The dry run's GPU: tests/fake_gpu_driver.py's world, 80 GiB on GPU 0."""

    def __init__(self, work: Path):
        sys.path.insert(0, str(ROOT))
        from tests import fake_gpu_driver

        self.fake = fake_gpu_driver
        self.world = fake_gpu_driver.new_world(work / "gpu-world.json", gpus={0: 80 * GiB})
        os.environ[fake_gpu_driver.ENV] = str(self.world)  # for the fake's readings here

    def held(self, pid: int) -> int:
        return sum(p.bytes for p in self.fake.FakeDriver().processes() if p.pid == pid)

    def free(self) -> int:
        return self.fake.FakeDriver().free_memory()[0]

    def register(self, pid: int, nbytes: int) -> None:
        with self.fake.world(self.world) as w:
            w["processes"][str(pid)] = {"gpu": 0, "bytes": nbytes}


def notebook(local, name: str) -> str:
    (local.root_dir / name).write_text(
        json.dumps(
            {
                "cells": [],
                "metadata": {
                    "kernelspec": {
                        "name": "python3",
                        "display_name": "Python 3",
                        "language": "python",
                    }
                },
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    return name


def alloc_code(device: str, nbytes: int) -> str:
    """A cell that puts ``nbytes`` of random int16 on ``device`` in 1 GiB tensors and
    prints its pid and each tensor's sum."""
    return (
        "import os, json, torch\n"
        f"left, model = {nbytes}, {{}}\n"
        "while left > 0:\n"
        f"    n = min(left, {GiB}) // 2\n"
        f"    model[f'w{{len(model)}}'] = torch.randint(-2**15, 2**15 - 1, (n,), dtype=torch.int16, device={device!r})\n"
        "    left -= 2 * n\n"
        "sums = {k: int(v.sum(dtype=torch.int64)) for k, v in model.items()}\n"
        "print(json.dumps({'pid': os.getpid(), 'sums': sums}))"
    )


SUMS = (
    "import json, torch\n"
    "print(json.dumps({'sums': {k: int(v.sum(dtype=torch.int64)) for k, v in model.items()},"
    " 'devices': sorted({str(v.device) for v in model.values()})}))"
)


def _wait(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


# ------------------------------------------------------------------ sections


def environment(check: Check) -> dict:
    import torch

    import jupyter_pause

    check.report["cuda"] = bool(torch.cuda.is_available()) and not check.dry
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "jupyter_pause": jupyter_pause.__version__,
        "jupyter_pause_from": str(Path(jupyter_pause.__file__).parent),
        "package_matches_tree": _tree_hash(Path(jupyter_pause.__file__).parent)
        == _tree_hash(ROOT / "jupyter_pause"),
    }
    missing = []
    for module in (
        "jupyter_server",
        "ipykernel",
        "jupyter_client",
        "pytest_jupyter",
        "websocket",
        "safetensors",
        "xxhash",
    ):
        try:
            __import__(module)
        except ImportError as e:
            missing.append(f"{module} ({e})")
    info["missing"] = missing
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory"] = torch.cuda.get_device_properties(0).total_memory
    try:
        import pynvml

        pynvml.nvmlInit()
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
    except Exception as e:
        info["driver"] = f"unknown ({type(e).__name__})"
    try:
        from importlib.metadata import version

        info["cuda_bindings"] = version("cuda-bindings")
    except Exception:
        info["cuda_bindings"] = None
    ok = not missing and (check.dry or (torch.cuda.is_available() and info["package_matches_tree"]))
    return {"ok": ok, **info}


def _tree_hash(package: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        if path.name != "_version.py":
            h.update(str(path.relative_to(package)).encode() + path.read_bytes())
    return h.hexdigest()


def tests(check: Check) -> dict:
    """Every ``gpu`` test, from a copy of tests/ (the installed package, not the tree)."""
    files = sorted(
        p.relative_to(ROOT)
        for p in (ROOT / "tests").rglob("test_*.py")
        if "pytest.mark.gpu" in p.read_text()
    )
    where = check.work / "tests-run"
    shutil.copytree(ROOT / "tests", where / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", where)
    xml = check.out / "gpu-tests.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-m",
        "gpu",
        "-q",
        "-rs",
        f"--junitxml={xml}",
        *map(str, files),
    ]
    if _has_xdist():
        cmd[3:3] = ["-p", "no:xdist"]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        cmd, cwd=where, capture_output=True, text=True, timeout=max(30, check.left() - 120), env=env
    )
    shutil.rmtree(where, ignore_errors=True)
    cases = []
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome = "passed"
            detail = ""
            for tag in ("failure", "error", "skipped"):
                found = case.find(tag)
                if found is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    detail = (found.get("message") or "")[:500]
            cases.append(
                {
                    "test": f"{case.get('classname')}::{case.get('name')}",
                    "outcome": outcome,
                    "detail": detail,
                    "seconds": float(case.get("time") or 0),
                }
            )
    counts = {
        k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")
    }
    ok = done.returncode in (0, 5) and not counts["failed"] and not counts["error"] and bool(cases)
    if not check.dry:
        ok = ok and counts["passed"] > 0 and not counts["skipped"]
    return {
        "ok": ok,
        "files": list(map(str, files)),
        **counts,
        "cases": cases,
        "output": done.stdout[-3000:] + done.stderr[-2000:],
    }


def _has_xdist() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True


def server_round_trip(check: Check) -> dict:
    """A real server and kernel: tensors on the GPU, pause (NVML: the kernel's process
    and its GPU memory gone), resume (the tensors back on the device, equal)."""
    device = "cpu" if check.dry else "cuda:0"
    nbytes = (64 << 20) if check.dry else 4 * GiB
    with check.server("round-trip") as (local, client):
        path = notebook(local, "round-trip.ipynb")
        kernel_id = client.open_notebook(path)["kernel"]["id"]
        before = client.evaluate(kernel_id, alloc_code(device, nbytes))
        pid = before["pid"]
        check.gpu.register(pid, nbytes)
        held = check.gpu.held(pid)
        free_before = check.gpu.free()
        started = time.monotonic()
        pause = client.wait(client.pause(path), timeout=max(60, check.left()))
        paused_s = time.monotonic() - started
        gone = _wait(lambda: not pid_alive(pid), 30)
        held_after = check.gpu.held(pid)
        free_after = check.gpu.free()
        started = time.monotonic()
        resume = client.wait(client.resume(path), timeout=max(60, check.left()))
        resumed_s = time.monotonic() - started
        session = client.session_status(path)
        after = (
            client.evaluate(session["kernel_id"], SUMS) if resume["outcome"] == "succeeded" else {}
        )
    equal = after.get("sums") == before["sums"]
    on_device = after.get("devices") == [device]
    ok = (
        pause["outcome"] == "succeeded"
        and resume["outcome"] == "succeeded"
        and gone
        and equal
        and on_device
    )
    ok = ok and held_after == 0 and (check.dry or held >= nbytes)
    return {
        "ok": ok,
        "bytes": nbytes,
        "device": device,
        "held_before": held,
        "held_after_pause": held_after,
        "gpu_free_before": free_before,
        "gpu_free_after_pause": free_after,
        "process_gone": gone,
        "pause_s": round(paused_s, 2),
        "resume_s": round(resumed_s, 2),
        "values_equal": equal,
        "devices_after": after.get("devices"),
        "pause_error": pause.get("error"),
        "resume_error": resume.get("error"),
    }


def hibernate(check: Check) -> dict:
    """The issue's goals: a big kernel's GPU memory down in seconds and back, values
    equal; then hibernate/wake/kill cycles, none stuck."""
    out: dict = {"goals": {k: v for k, v in GOALS.items()}}
    device = "cpu" if check.dry else "cuda:0"
    with check.server("hibernate") as (local, client):
        status = _wait(
            lambda: (
                client.status()["hibernate"]["why_not"]
                != "the hibernate helper has not started yet"
            ),
            120,
        )
        available = client.status()["hibernate"]
        out["available"] = available
        if not status or not available["available"]:
            return {"ok": False, **out, "error": f"hibernate unavailable: {available['why_not']}"}
        nbytes = big_size(check)
        out["big"] = big = one_hibernate(
            check, client, local, "big.ipynb", device, nbytes, keep=False
        )
        out["cycles"] = cycles(check, client, local, device)
    met = {
        "freed": big["held_before"] >= min(nbytes, GOALS["hibernate_bytes"]) * 0.95 or check.dry,
        "left": big["held_after"] <= GOALS["left_after_hibernate"],
        "hibernate_s": big["hibernate_s"] <= GOALS["hibernate_s"],
        "awake_s": big["awake_s"] <= GOALS["awake_s"],
        "cycles": out["cycles"]["done"] >= GOALS["cycles"],
    }
    out["met"] = met
    works = big["ok"] and out["cycles"]["stuck"] == 0 and out["cycles"]["failed"] == 0
    return {"ok": works, **out}


def big_size(check: Check) -> int:
    """60 GiB where the GPU and the host hold it with room to spare, less elsewhere."""
    if check.dry:
        return 256 << 20
    host = _mem_available()
    return int(
        min(GOALS["hibernate_bytes"], 0.6 * check.gpu.free(), max(GiB, host - 16 * GiB) / 1.5)
        // GiB
        * GiB
    )


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def one_hibernate(check, client, local, name, device, nbytes, *, keep: bool) -> dict:
    path = notebook(local, name)
    kernel_id = client.open_notebook(path)["kernel"]["id"]
    before = client.evaluate(kernel_id, alloc_code(device, nbytes), timeout=600)
    pid = before["pid"]
    check.gpu.register(pid, nbytes)
    held = check.gpu.held(pid)
    started = time.monotonic()
    op = client.wait(client.hibernate(path), timeout=600, poll=0.05)
    hibernate_s = time.monotonic() - started
    held_after = check.gpu.held(pid)
    state = client.session_status(path)["state"]
    started = time.monotonic()
    after = client.evaluate(kernel_id, SUMS, timeout=600)  # a cell wakes it
    awake_cell_s = time.monotonic() - started
    woken = [e for e in client.ledger_events() if e.path == path and e.type == "gpu-woken"]
    hibernated = [
        e for e in client.ledger_events() if e.path == path and e.type == "gpu-hibernated"
    ]
    if not keep:
        client.close_notebook(path)
    stopped = _wait(lambda: not pid_alive(pid), 60)
    result = {
        "bytes": nbytes,
        "held_before": held,
        "held_after": held_after,
        "state_after": state,
        "hibernate_s": round(hibernate_s, 3),
        "hibernate_driver_s": hibernated[-1].data.get("seconds") if hibernated else None,
        "awake_s": round(woken[-1].data["waited"], 3) if woken else None,
        "restore_driver_s": woken[-1].data.get("seconds") if woken else None,
        "awake_cell_s": round(awake_cell_s, 3),
        "values_equal": after.get("sums") == before["sums"],
        "stopped": stopped,
        "error": op.get("error"),
    }
    result["ok"] = (
        op["outcome"] == "succeeded"
        and state == "hibernated"
        and result["values_equal"]
        and stopped
        and bool(woken)
    )
    if result["awake_s"] is None:
        result["awake_s"] = float("inf")
    return result


def cycles(check: Check, client, local, device: str) -> dict:
    """hibernate -> a cell wakes it -> shut down (locked and checkpointed first) -> the
    process gone and NVML counting nothing for it; a few kernels at a time, until the
    goal's count or the budget's end (then said)."""
    wanted = 3 if check.dry else GOALS["cycles"]
    parallel = 1 if check.dry else 5
    nbytes = (32 << 20) if check.dry else GiB
    stop_at = check.deadline - 20  # the rest of the run (the table, the report) after it
    results: list[dict] = []

    def one(i: int) -> dict:
        try:
            r = one_hibernate(check, client, local, f"cycle-{i}.ipynb", device, nbytes, keep=False)
            return {"ok": r["ok"], "stuck": not r["stopped"], "error": r["error"]}
        except Exception as e:
            return {"ok": False, "stuck": False, "error": f"{type(e).__name__}: {e}"}

    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        i = 0
        while i < wanted and time.monotonic() < stop_at:
            batch = list(range(i, min(wanted, i + parallel)))
            results += pool.map(one, batch)
            i += len(batch)
    failed = [r["error"] for r in results if not r["ok"] and not r["stuck"]]
    return {
        "wanted": wanted,
        "done": len(results),
        "stuck": sum(r["stuck"] for r in results),
        "failed": len(failed),
        "errors": failed[:5],
        "parallel": parallel,
        "cut_short": "the budget ended first" if len(results) < wanted else None,
    }


def bench(check: Check) -> dict:
    """benchmarks/bench_gpu.py at 2 GB, then 20 GB if the budget leaves room (CPU-sized
    in the dry run)."""
    sizes = [(0.02, 2), (0.2, 1)] if check.dry else [(2.0, 3), (20.0, 1)]
    runs, skipped = [], []
    for i, (gb, rounds) in enumerate(sizes):
        if i and runs:
            per_gb = runs[-1]["seconds"] / (sizes[i - 1][0] * (sizes[i - 1][1] + 1))
            needed = per_gb * gb * (rounds + 1) * 1.3 + 20
            if needed > check.left():
                skipped.append(f"{gb:g} GB: needs ~{needed:.0f} s, {check.left():.0f} s left")
                continue
        report = check.out / f"bench-{gb:g}gb.json"
        cmd = [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_gpu.py"),
            "--size-gb",
            str(gb),
            "--rounds",
            str(rounds),
            "--json",
            str(report),
        ]
        if check.dry:
            cmd.append("--dry-run")
        started = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30, check.left()))
        seconds = time.monotonic() - started
        print(done.stdout[-1500:], flush=True)
        if done.returncode != 0 or not report.exists():
            runs.append(
                {"size_gb": gb, "ok": False, "seconds": seconds, "error": done.stderr[-3000:]}
            )
            continue
        data = json.loads(report.read_text())
        report.unlink()
        runs.append(
            {
                "size_gb": gb,
                "ok": True,
                "seconds": seconds,
                **data["sizes"][0],
                "table": data and done.stdout.strip().splitlines()[-4:],
            }
        )
    ok = bool(runs) and all(r["ok"] for r in runs)
    return {"ok": ok, "sizes": runs, "skipped": skipped}


# ---------------------------------------------------------------------- output


def summary(name: str, s: dict) -> str:
    if s.get("skipped") and len(s) <= 3:
        return f"skipped: {s['skipped']}"
    if "error" in s and not s.get("ok"):
        return s["error"].splitlines()[0][:110] if s["error"] else "failed"
    if name == "environment":
        return (
            f"python {s['python']}, torch {s['torch']}, {s.get('gpu', 'no GPU')}, driver {s['driver']}"
            + (f"; missing {s['missing']}" if s["missing"] else "")
        )
    if name == "tests":
        return f"{s['passed']} passed, {s['failed']} failed, {s['error']} errors, {s['skipped']} skipped ({len(s['files'])} files)"
    if name == "server_round_trip":
        return (
            f"{s['bytes'] / GiB:.2f} GiB on {s['device']}; pause {s['pause_s']} s, NVML after: {s['held_after_pause']} B; "
            f"resume {s['resume_s']} s, values equal: {s['values_equal']}"
        )
    if name == "hibernate":
        b, c = s["big"], s["cycles"]
        return (
            f"{b['bytes'] / GiB:.2f} GiB: {b['hibernate_s']} s to {b['held_after'] / (1 << 20):.0f} MiB, awake in "
            f"{b['awake_s']} s, equal: {b['values_equal']}; cycles {c['done']}/{c['wanted']}, stuck {c['stuck']}"
        )
    if name == "bench":
        parts = [
            f"{r['size_gb']:g} GB: G1 {r['checkpoint_ratio']:.2f}, G2 {r['restore_ratio']:.2f}, G3 {r.get('lazy_first_cell_s', float('nan')):.2f} s"
            if r["ok"]
            else f"{r['size_gb']:g} GB failed"
            for r in s["sizes"]
        ]
        return "; ".join(parts + [f"skipped {x}" for x in s["skipped"]])
    return ""


def table(report: dict) -> str:
    lines = [
        f"GPU check ({'dry run, no CUDA' if report['dry_run'] else 'device'}; cuda: {str(report['cuda']).lower()}), {report['seconds']} s of a {report['budget_s']} s budget"
    ]
    lines.append(f"{'section':<18} {'result':<7} {'seconds':>8}  details")
    for name in SECTIONS:
        s = report.get(name, {})
        result = (
            "skipped" if s.get("skipped") and len(s) <= 3 else ("ok" if s.get("ok") else "FAILED")
        )
        lines.append(f"{name:<18} {result:<7} {s.get('seconds', 0):>8}  {summary(name, s)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--out", type=Path, required=True, help="where gpu-report.json goes ($OUT)")
    parser.add_argument(
        "--budget", type=float, default=330, help="seconds the whole check may take"
    )
    parser.add_argument("--installed-s", type=float, default=None, help="the wheels' install time")
    parser.add_argument(
        "--only",
        type=lambda s: set(s.split(",")),
        default=None,
        help=f"a comma-separated subset of {','.join(SECTIONS)}",
    )
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the tests run elsewhere
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args)
    os.environ["JUPYTER_DATA_DIR"] = str(check.work / "data")  # never the user's key
    try:
        steps = (environment, tests, server_round_trip, hibernate, bench)
        for name, step in zip(SECTIONS, steps, strict=True):
            check.run(name, step)
    finally:
        shutil.rmtree(check.work, ignore_errors=True)
    check.report["seconds"] = round(time.monotonic() - check.started, 1)
    (args.out / "gpu-report.json").write_text(json.dumps(check.report, indent=1, default=str))
    text = table(check.report)
    (args.out / "gpu-report.txt").write_text(text + "\n")
    print(text)
    return 0 if all(check.report[name].get("ok") for name in SECTIONS) else 1


if __name__ == "__main__":
    sys.exit(main())
