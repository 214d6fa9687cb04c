"""What NVML (nvidia-ml-py) tells about this machine's GPUs: the one module that calls it
(the hibernate helper's driver, hibernate/driver.py, asks it too).

Each function answers None when NVML cannot tell (no nvidia-ml-py, no driver, no GPU);
the callers then decide without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    """pynvml, initialised for the block and shut down after it; None when unavailable."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def device_count() -> int | None:
    """The GPUs this machine has."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            return int(nvml.nvmlDeviceGetCount())
        except Exception:
            return None


def free_memory() -> dict[int, int] | None:
    """Free bytes per GPU index."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            return {
                i: nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).free
                for i in range(nvml.nvmlDeviceGetCount())
            }
        except Exception:
            return None


def utilization(pid: int | None) -> float | None:
    """Utilisation (%) of the busiest GPU that process ``pid`` computes on."""
    if pid is None:
        return None
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            used = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                pids = {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
                if pid in pids:
                    used.append(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            return max(used) if used else None
        except Exception:
            return None


def processes() -> list[tuple[int, int, int]] | None:
    """``(pid, GPU index, bytes used)`` of every process with a CUDA context, per GPU
    (a process on two GPUs has two rows; bytes NVML cannot tell count as 0)."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            rows = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    used = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else 0
                    rows.append((p.pid, index, used))
            return rows
        except Exception:
            return None
