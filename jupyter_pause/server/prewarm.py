"""Pre-warmed spare kernels: start a resume's kernel while the resume dialog shows.

Starting a kernel and importing torch take most of a small resume. When a paused
notebook is opened, the frontend asks for a spare (``POST sessions/prewarm``); the
server starts a kernel for that notebook's kernelspec and has it import the engine
and torch. The spare belongs to no session: the notebook shows no kernel, nothing is
counted as allocated in the ledger or reports, and importing torch initialises no GPU.
A resume adopts it (``adopt``); unused, it is shut down after ``ttl`` seconds.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from typing import Any

from .kernels import call_in_kernel

DEFAULT_TTL = 180.0


class Prewarmer:
    def __init__(self, kernel_manager, ttl: float = DEFAULT_TTL, log=None):
        self.kernel_manager = kernel_manager
        self.ttl = ttl
        self.log = log
        self._spares: dict[str, str] = {}  # notebook path -> kernel id
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._warming: dict[str, asyncio.Task] = {}  # path -> its spare's warm-up
        self._tasks: set[asyncio.Task] = set()

    def spare(self, path: str) -> str | None:
        """The live spare kernel of ``path``, if any."""
        kernel_id = self._spares.get(path)
        if kernel_id is not None and kernel_id not in self.kernel_manager:
            self._forget(path)
            return None
        return kernel_id

    async def start(self, path: str, kernel_name: str | None) -> str:
        """A spare kernel for ``path`` (the one already started, if any)."""
        kernel_id = self.spare(path)
        if kernel_id is None:
            env = {**os.environ, "JPY_SESSION_NAME": path}  # the kernel learns its notebook
            kernel_id = await self.kernel_manager.start_kernel(
                kernel_name=kernel_name, path=posixpath.dirname(path), env=env
            )
            self._spares[path] = kernel_id
            self._warming[path] = warming = asyncio.ensure_future(self._warm_up(kernel_id))
            self._tasks.add(warming)  # kept past _forget, for shutdown to end it
            warming.add_done_callback(self._tasks.discard)
        self._arm(path)
        return kernel_id

    async def _warm_up(self, kernel_id: str) -> None:
        try:
            await call_in_kernel(self.kernel_manager.get_kernel(kernel_id), "warm_up", timeout=300)
        except Exception as e:  # a cold spare still saves the kernel's start
            if self.log is not None:
                self.log.info("jupyter-pause: spare kernel %s did not warm up: %s", kernel_id, e)

    async def adopt(self, path: str) -> str | None:
        """Hand ``path``'s spare to a resume (it is no longer shut down when unused), once
        its warm-up is over: the resume's own calls must not interleave with it."""
        kernel_id = self.spare(path)
        warming = self._warming.get(path)
        self._forget(path)
        if warming is not None:
            await warming
        return kernel_id

    async def discard(self, path: str) -> None:
        kernel_id = self.spare(path)
        self._forget(path)
        if kernel_id is not None:
            await self.kernel_manager.shutdown_kernel(kernel_id, now=True)

    async def shutdown(self) -> None:
        for path in list(self._spares):
            await self.discard(path)
        # a warm-up still under way (its spare discarded or adopted) ends now, with its
        # kernel client's channels closed: a task left pending when the loop closes
        # keeps that client's heartbeat thread and zmq context (14 descriptors) forever
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _arm(self, path: str) -> None:
        timer = self._timers.pop(path, None)
        if timer is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self._timers[path] = loop.call_later(self.ttl, self._expire, path)

    def _expire(self, path: str) -> None:
        task: Any = asyncio.ensure_future(self.discard(path))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forget(self, path: str) -> None:
        self._spares.pop(path, None)
        self._warming.pop(path, None)
        timer = self._timers.pop(path, None)
        if timer is not None:
            timer.cancel()
