"""The boundary to the NVIDIA driver, as the hibernate helper calls it.

:class:`GpuDriver` is everything a hibernate needs of the driver: the process
checkpoint API of libcuda (lock, checkpoint, restore, unlock, a process's state) and
what NVML (libnvidia-ml, shipped with the driver) says of the GPUs (which processes
hold memory where, how much memory is free). :class:`CudaDriver` is the real one; the
tests put a fake of this interface, and nothing above it, in the helper process.

The driver's own words for a failure (``CUDA_ERROR_NOT_SUPPORTED``) travel in
:class:`DriverError`, so a refusal can name them.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from enum import Enum

from .. import nvml


class ProcessState(str, Enum):
    """A CUDA process as the checkpoint API sees it (``CUprocessState``, in its order)."""

    RUNNING = "running"
    LOCKED = "locked"
    CHECKPOINTED = "checkpointed"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    """A process with a CUDA context on one GPU (NVML's compute processes)."""

    pid: int
    gpu: int  # NVML's index
    bytes: int  # GPU memory it holds there, context included


class DriverError(Exception):
    """A driver call failed; ``code`` is the driver's name for why."""

    def __init__(self, call: str, code: str):
        super().__init__(f"{call} failed: {code}")
        self.call = call
        self.code = code


class GpuDriver(abc.ABC):
    """What the helper asks of the NVIDIA driver. Built in the helper process."""

    @classmethod
    def present(cls) -> str | None:
        """Why this machine cannot hibernate anything, asked in the server before a
        helper is started for it (cheap: no CUDA initialised); None: try."""
        return None

    @abc.abstractmethod
    def missing(self) -> str | None:
        """Why the driver cannot hibernate (no API, no device), or None."""

    @abc.abstractmethod
    def processes(self) -> list[GpuProcess]:
        """Every process holding a CUDA context, per GPU."""

    @abc.abstractmethod
    def free_memory(self) -> dict[int, int]:
        """Free bytes per GPU."""

    @abc.abstractmethod
    def state(self, pid: int) -> ProcessState: ...

    @abc.abstractmethod
    def lock(self, pid: int, timeout_ms: int) -> None:
        """Block the process's further CUDA calls and wait for its submitted work."""

    @abc.abstractmethod
    def checkpoint(self, pid: int) -> None:
        """Move a locked process's GPU memory to host memory and release the GPU."""

    @abc.abstractmethod
    def restore(self, pid: int) -> None:
        """Take the GPU again and copy the memory back (the process stays locked)."""

    @abc.abstractmethod
    def unlock(self, pid: int) -> None:
        """Let the process's CUDA calls proceed."""


def load(name: str) -> type[GpuDriver]:
    """The driver class ``module.Class`` names."""
    module, _, cls = name.rpartition(".")
    driver = getattr(importlib.import_module(module), cls)
    if not (isinstance(driver, type) and issubclass(driver, GpuDriver)):
        raise TypeError(f"{name} is not a jupyter_pause.hibernate.driver.GpuDriver")
    return driver


#: The first CUDA version whose driver has the ``cuCheckpointProcess*`` calls
#: (12.8, driver 570).
CHECKPOINT_API = 12080

_STATES = [ProcessState.RUNNING, ProcessState.LOCKED, ProcessState.CHECKPOINTED]


class CudaDriver(GpuDriver):
    """The NVIDIA driver through cuda-bindings (``cuda.bindings.driver``) and NVML."""

    @classmethod
    def present(cls) -> str | None:
        if nvml.free_memory() is None:
            return "NVML sees no NVIDIA GPU here (or nvidia-ml-py is not installed)"
        return None

    def __init__(self):
        self._cu = None
        self._missing = self._initialise()

    def _initialise(self) -> str | None:
        try:
            from cuda.bindings import driver as cu
        except ImportError:
            return "cuda-bindings is not installed (pip install cuda-bindings)"
        if not hasattr(cu, "cuCheckpointProcessLock"):
            return "this cuda-bindings lacks the process checkpoint API (12.8 or newer has it)"
        (err,) = cu.cuInit(0)
        if int(err) != 0:
            return f"cuInit failed: {_name(err)}"
        err, version = cu.cuDriverGetVersion()
        if int(err) == 0 and version < CHECKPOINT_API:
            return (
                f"the NVIDIA driver supports CUDA {version // 1000}.{version % 1000 // 10}; "
                "the process checkpoint API needs CUDA 12.8 (driver 570) or newer"
            )
        self._cu = cu
        return None

    def missing(self) -> str | None:
        return self._missing

    def _call(self, name: str, *args):
        if self._cu is None:
            raise DriverError(name, self._missing or "no driver")
        result = getattr(self._cu, name)(*args)
        if int(result[0]) != 0:
            raise DriverError(name, _name(result[0]))
        return result[1:]

    def processes(self) -> list[GpuProcess]:
        rows = nvml.processes()
        if rows is None:
            raise DriverError("nvmlDeviceGetComputeRunningProcesses", "NVML unavailable")
        return [GpuProcess(pid, gpu, used) for pid, gpu, used in rows]

    def free_memory(self) -> dict[int, int]:
        free = nvml.free_memory()
        if free is None:
            raise DriverError("nvmlDeviceGetMemoryInfo", "NVML unavailable")
        return free

    def state(self, pid: int) -> ProcessState:
        (state,) = self._call("cuCheckpointProcessGetState", pid)
        value = int(state)
        return _STATES[value] if value < len(_STATES) else ProcessState.FAILED

    def lock(self, pid: int, timeout_ms: int) -> None:
        args = self._cu.CUcheckpointLockArgs() if self._cu is not None else None
        if args is not None:
            args.timeoutMs = timeout_ms
        self._call("cuCheckpointProcessLock", pid, args)

    def checkpoint(self, pid: int) -> None:
        self._call("cuCheckpointProcessCheckpoint", pid, None)

    def restore(self, pid: int) -> None:
        self._call("cuCheckpointProcessRestore", pid, None)

    def unlock(self, pid: int) -> None:
        self._call("cuCheckpointProcessUnlock", pid, None)


def _name(err) -> str:
    """``CUDA_ERROR_NOT_SUPPORTED`` for a ``CUresult``."""
    return getattr(err, "name", None) or f"CUresult {int(err)}"
