"""The embedded default: one machine, the accelerator belongs to the kernel.

Releasing means stopping the paused notebook's kernel: when its process exits,
the driver frees the GPU memory it held.  Nothing is needed to resume besides
starting a new kernel, which the session manager does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import PauseBackend

if TYPE_CHECKING:
    from ..lifecycle import Session


class LocalBackend(PauseBackend):
    name = "local"
    scope = "notebook"

    async def release(self, sessions: list[Session], shutdown_kernel: Callable) -> dict[str, Any]:
        released_at = None
        for session in sessions:
            if session.kernel_id:
                released_at = await shutdown_kernel(session.kernel_id)
        return {"released_at": released_at} if released_at else {}
