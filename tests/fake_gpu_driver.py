"""A fake of the NVIDIA driver at the hibernate helper's boundary
(``jupyter_pause.hibernate.driver.GpuDriver``), and nothing above it.

It keeps the world it pretends in a JSON file (``$JUPYTER_PAUSE_FAKE_GPU``), shared by
the helper process that calls it and the test that arranges it and reads what happened:

* ``gpus``: total bytes per GPU index;
* ``processes``: ``{pid: {"gpu": i, "bytes": n}}``, the GPU memory each process would
  hold; NVML lists a process only while it lives and is not checkpointed;
* ``states``: each process's checkpoint state (``running`` when absent);
* ``missing``: why the driver lacks the API, or null;
* ``fail``: ``{call: [error, state it leaves the process in]}``, errors to inject;
* ``hold``: ``{call: path}``, a call that takes until that file exists (a slow copy);
* ``calls``: ``[call, pid]`` in the order they came.

As the real driver does, it refuses a call in the wrong state
(``CUDA_ERROR_ILLEGAL_STATE``), and a restore that does not fit in the GPU's free memory
leaves the process ``failed`` for good (NVIDIA/cuda-checkpoint issue 44).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

from jupyter_pause.hibernate.driver import DriverError, GpuDriver, GpuProcess, ProcessState
from jupyter_pause.processes import pid_alive

ENV = "JUPYTER_PAUSE_FAKE_GPU"


def new_world(path: Path, *, gpus: dict[int, int], missing: str | None = None) -> Path:
    path.write_text(
        json.dumps(
            {
                "gpus": {str(k): v for k, v in gpus.items()},
                "processes": {},
                "states": {},
                "missing": missing,
                "fail": {},
                "hold": {},
                "calls": [],
            }
        )
    )
    return path


@contextlib.contextmanager
def world(path: Path | str | None = None):
    """The world, locked for the block; what the block changes is written back, also
    when it raises (a driver call that fails has changed the process's state)."""
    path = Path(path or os.environ[ENV])
    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        data = json.load(f)
        try:
            yield data
        finally:
            f.seek(0)
            f.truncate()
            json.dump(data, f)


class FakeDriver(GpuDriver):
    def missing(self) -> str | None:
        with world() as w:
            return w["missing"]

    def _listed(self, w) -> list[GpuProcess]:
        return [
            GpuProcess(int(pid), p["gpu"], p["bytes"])
            for pid, p in w["processes"].items()
            if w["states"].get(pid, "running") != "checkpointed" and pid_alive(int(pid))
        ]

    def processes(self) -> list[GpuProcess]:
        with world() as w:
            return self._listed(w)

    def free_memory(self) -> dict[int, int]:
        with world() as w:
            free = {int(g): total for g, total in w["gpus"].items()}
            for p in self._listed(w):
                free[p.gpu] -= p.bytes
            return free

    def state(self, pid: int) -> ProcessState:
        with world() as w:
            if str(pid) not in w["processes"] or not pid_alive(pid):
                raise DriverError("cuCheckpointProcessGetState", "CUDA_ERROR_INVALID_VALUE")
            return ProcessState(w["states"].get(str(pid), "running"))

    def _step(self, call: str, pid: int, before: str, after: str) -> None:
        with world() as w:
            gate = w.get("hold", {}).pop(call, None)
        if gate is not None:  # the world stays free meanwhile, as NVML does
            deadline = time.monotonic() + 300
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.05)
        with world() as w:
            w["calls"].append([call, pid])
            key = str(pid)
            state = w["states"].get(key, "running")
            if key not in w["processes"] or not pid_alive(pid):
                raise DriverError(call, "CUDA_ERROR_INVALID_VALUE")
            if state != before:
                raise DriverError(call, "CUDA_ERROR_ILLEGAL_STATE")
            if call in w["fail"]:
                error, left = w["fail"].pop(call)
                w["states"][key] = left
                raise DriverError(call, error)
            if call == "restore":
                process = w["processes"][key]
                used = sum(p.bytes for p in self._listed(w) if p.gpu == process["gpu"])
                if w["gpus"][str(process["gpu"])] - used < process["bytes"]:
                    w["states"][key] = "failed"
                    raise DriverError(call, "CUDA_ERROR_OUT_OF_MEMORY")
            w["states"][key] = after

    def lock(self, pid: int, timeout_ms: int) -> None:
        self._step("lock", pid, "running", "locked")

    def checkpoint(self, pid: int) -> None:
        self._step("checkpoint", pid, "locked", "checkpointed")

    def restore(self, pid: int) -> None:
        self._step("restore", pid, "checkpointed", "locked")

    def unlock(self, pid: int) -> None:
        self._step("unlock", pid, "locked", "running")
