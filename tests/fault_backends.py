"""Backends that stop at a chosen point, so a test can inject a fault there.

Loaded by a real server started in a subprocess
(``--PauseApp.backend_class=tests.fault_backends.GatedRelease``).
"""

import asyncio
import time
from pathlib import Path

from traitlets import Unicode

from jupyter_pause.backends.local import LocalBackend


class GatedRelease(LocalBackend):
    """The local backend, but ``release`` (state ``pausing``, the checkpoint
    committed) announces itself with ``<gate>/releasing`` and goes on only
    once ``<gate>/release`` exists."""

    gate = Unicode(config=True, help="The folder of the gate files.")

    async def release(self, sessions, shutdown_kernel):
        Path(self.gate, "releasing").touch()
        while not Path(self.gate, "release").exists():
            await asyncio.sleep(0.05)
        return await super().release(sessions, shutdown_kernel)


GATE_DEADLINE = 240  # seconds a gated resume waits for its test to open the gate


class GatedAcquire(LocalBackend):
    """The local backend, but ``acquire`` (a resume under way, no kernel chosen
    yet) announces itself with ``<gate>/acquiring`` and goes on only once
    ``<gate>/acquire`` exists."""

    gate = Unicode(config=True, help="The folder of the gate files.")

    async def acquire(self, session, report_waiting):
        Path(self.gate, "acquiring").touch()
        deadline = time.monotonic() + GATE_DEADLINE
        while not Path(self.gate, "acquire").exists():
            if time.monotonic() > deadline:  # a test that never opens it fails, not hangs
                raise TimeoutError(f"{self.gate}/acquire never appeared")
            await asyncio.sleep(0.05)
        return await super().acquire(session, report_waiting)
