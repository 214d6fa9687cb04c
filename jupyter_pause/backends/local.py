"""The embedded default: one machine, the accelerator belongs to the kernel.

Releasing means stopping the paused notebook's kernel: when its process exits,
the driver frees the GPU memory it held.

Acquiring matters on shared machines (a JupyterHub node, a lab workstation):
overnight someone else may have taken the GPU memory the notebook had.  Before
a restore the backend compares what the checkpoint needs on each CUDA device
with what NVML says is free, and reports ``waiting-for-capacity`` until it
fits, instead of starting a restore that would fail half way with an
out-of-memory error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from traitlets import Float

from .. import nvml
from .base import BackendError, PauseBackend, ReleaseFacts

if TYPE_CHECKING:
    from ..lifecycle import Session


def cuda_bytes_needed(manifest) -> dict[int, int]:
    """Bytes each CUDA device index must hold to restore a checkpoint."""
    needed: dict[int, int] = {}
    for storage in manifest.storages:
        if storage.device.startswith("cuda"):
            index = int(storage.device.partition(":")[2] or 0)
            needed[index] = needed.get(index, 0) + storage.nbytes
    return needed


class LocalBackend(PauseBackend):
    name = "local"
    scope = "notebook"

    capacity_timeout = Float(
        15 * 60,
        config=True,
        help="Seconds a resume waits for enough free GPU memory before it fails.",
    )
    capacity_poll_interval = Float(
        5, config=True, help="Seconds between two looks at free GPU memory."
    )
    #: headroom for the CUDA context and allocator, per device
    cuda_overhead = 512 * 2**20

    async def release(self, sessions: list[Session], shutdown_kernel: Callable) -> ReleaseFacts:
        released_at = None
        for session in sessions:
            if session.kernel_id:
                released_at = await shutdown_kernel(session.kernel_id)
        return ReleaseFacts(released_at=released_at)

    async def acquire(self, session: Session, report_waiting: Callable[[str], None]) -> None:
        needed = self.bytes_needed(session)
        if not needed:
            return
        deadline = time.monotonic() + self.capacity_timeout
        while True:
            free = self.free_memory()
            if free is None:
                return  # cannot tell: let the restore try
            short = {
                i: n + self.cuda_overhead - free.get(i, 0)
                for i, n in needed.items()
                if free.get(i, 0) < n + self.cuda_overhead
            }
            if not short:
                return
            reason = "; ".join(
                f"cuda:{i} needs {needed[i] / 1e9:.1f} GB, {free.get(i, 0) / 1e9:.1f} GB free"
                for i in sorted(short)
            )
            if time.monotonic() > deadline:
                raise BackendError(
                    f"not enough free GPU memory after {self.capacity_timeout:.0f} s ({reason}); "
                    "free the GPU or resume with %restore --device to map the model elsewhere"
                )
            report_waiting(reason)
            await asyncio.sleep(self.capacity_poll_interval)

    def bytes_needed(self, session: Session) -> dict[int, int]:
        from ..engine import store

        checkpoint_id = (session.last_checkpoint or {}).get("id")
        try:
            # within a resume, which listed the bucket already (it is listed once)
            manifest = store.get_manifest(
                self.checkpoint_dir, session.path, checkpoint_id=checkpoint_id, synced=True
            )
        except Exception:  # the restore itself will say what is wrong
            return {}
        return cuda_bytes_needed(manifest)

    def free_memory(self) -> dict[int, int] | None:
        return nvml.free_memory()
