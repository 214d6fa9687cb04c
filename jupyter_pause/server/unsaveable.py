"""What a pause of a notebook would not save now, asked of its kernel before a person
pauses by hand (``GET sessions/unsaveable``)."""

from __future__ import annotations

import asyncio
import time

from .checkpointing import BUSY_GRACE
from .errors import Conflict
from .kernels import KernelCallError, call_in_kernel


async def unsaveable(manager, checkpointer, path: str) -> dict[str, str]:
    """What a pause of ``path`` would not save now ({name: why}), asked of its
    kernel before a person pauses by hand (within the ``checkpointer``'s time for a
    kernel's call, at most a minute).  A read: the sessions are not touched."""
    live = await manager.jupyter_sessions()
    if path not in live:
        raise Conflict(f"{path!r} has no running kernel")
    kernel_id = live[path]["kernel"]["id"]
    if manager.hibernated(kernel_id):  # its objects' GPU memory is not there to look at
        raise Conflict(
            f"the kernel of {path!r} is hibernated; a pause wakes it first, and a cell too",
        )
    # as a pause does, wait a moment: the busy may be the end of a cell, or of this
    # read's own previous call, that the server's IOPub listener has not seen end yet
    deadline = time.monotonic() + BUSY_GRACE
    while manager.execution_state(kernel_id) == "busy":
        if time.monotonic() > deadline:
            raise Conflict(f"the kernel of {path!r} is busy running a cell")
        await asyncio.sleep(0.1)
    try:
        km = manager.kernel_manager.get_kernel(kernel_id)
        return await call_in_kernel(
            km, "unsaveable", timeout=min(60, checkpointer.kernel_call_timeout)
        )
    except (KernelCallError, KeyError) as e:
        raise Conflict(f"could not ask the kernel of {path!r}: {e}") from e
