"""Pre-warmed spare kernels: start a resume's kernel while the resume dialog shows.

Starting a kernel and importing torch take most of a small resume. When a paused
notebook is opened, the frontend asks for a spare (``POST sessions/prewarm``); the
server starts a kernel for that notebook's kernelspec and has it import the engine
and torch. The spare belongs to no session: the notebook shows no kernel, nothing is
counted as allocated in the ledger or reports, and importing torch initialises no GPU.
A resume adopts it (``adopt``); unused, it is shut down after ``ttl`` seconds.

This is the one home of "prepare a resume": besides the
spare kernel, the checkpoint is read ahead from disk (``engine/plan.prefetch``) and
its large files are filled in memory for the restore to map (``engine/handoff.py``)
while the kernel starts.  All of it is best effort: it decides nothing, and a resume
without it reads its files itself.
"""

from __future__ import annotations

import asyncio
import functools
import os
import posixpath
import threading
from collections.abc import Coroutine
from typing import Any

from ..engine import handoff, plan
from .kernels import call_in_kernel

DEFAULT_TTL = 180.0


class Prewarmer:
    def __init__(self, kernel_manager, ttl: float = DEFAULT_TTL, log=None, checkpoint_dir=None):
        self.kernel_manager = kernel_manager
        #: where the checkpoints a resume reads ahead or fills in memory live
        self.checkpoint_dir = checkpoint_dir
        self.ttl = ttl
        self.log = log
        self._spares: dict[str, str] = {}  # notebook path -> kernel id
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._warming: dict[str, asyncio.Task] = {}  # path -> its spare's warm-up
        self._tasks: set[asyncio.Task] = set()
        self.reading_ahead: dict[str, threading.Event] = {}  # path -> its stop
        self._handing_over: set[handoff.Fill] = set()  # memory filled for restores

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

    # ------------------------------------------------- preparing a resume

    async def choose(
        self, path: str, checkpoint_id: str | None, *, synced: bool = False
    ) -> plan.Chosen | None:
        """Which checkpoint this resume restores (engine/plan.choose_for_resume): decided
        once, and given to the read-ahead, the handoff's fill and the kernel's restore.
        None where the server cannot tell (the kernel's restore then decides alone).
        ``synced``: the bucket was listed for this resume already."""
        try:
            return await asyncio.to_thread(
                functools.partial(plan.choose_for_resume, synced=synced),
                self.checkpoint_dir,
                path,
                checkpoint_id,
            )
        except Exception as e:  # a refused folder, a bucket out of reach: the restore tells
            self._debug("jupyter-pause: no checkpoint chosen ahead for %s: %s", path, e)
            return None

    def read_ahead(
        self,
        path: str,
        chosen: plan.Chosen | None = None,
        fill: handoff.Fill | None = None,
    ) -> Coroutine[Any, Any, None] | None:
        """Have the disk read the checkpoint a kernel is about to restore (``chosen``; for
        a spare, the one a resume would choose now) while that kernel starts
        (engine/plan.prefetch), so a resume waits for the slower of the two, not for
        both in turn. Best effort, on a thread, one at a time per notebook; it decides
        nothing. ``fill``: the files handed over in memory are not read.

        Returns the read, for the caller to run as one of its tasks, or None when one
        runs already for ``path``."""
        if path in self.reading_ahead:
            return None
        stop = self.reading_ahead[path] = threading.Event()
        skip = frozenset(f.rel for f in fill.files) if fill else frozenset()

        async def read_ahead() -> None:
            try:
                which = chosen or await self.choose(path, None)
                done = 0
                if which is not None:
                    done = await asyncio.to_thread(plan.prefetch, which, stop=stop, skip=skip)
                self._debug("jupyter-pause: read %d bytes ahead for %s", done, path)
            except Exception as e:  # a refused folder, say: the restore will tell
                self._debug("jupyter-pause: no read-ahead for %s: %s", path, e)
            finally:
                self.reading_ahead.pop(path, None)

        return read_ahead()

    async def hand_over(self, path: str, chosen: plan.Chosen | None) -> handoff.Fill | None:
        """Fill memory with the large files of the checkpoint the resume chose while a
        cold kernel starts, for its restore to map instead of reading them
        (engine/handoff.py); a spare has no start to overlap. Best effort: None where
        there is nothing to hand over, and the kernel reads its files itself."""
        if chosen is None or self.spare(path) is not None:
            return None
        try:
            fill = await asyncio.to_thread(handoff.offer, chosen)
        except Exception as e:  # a refused folder, say: the restore will tell
            self._debug("jupyter-pause: no memory handed over for %s: %s", path, e)
            return None
        if fill is not None:  # kept until it ends, for a server shutting down to stop it
            self._handing_over = {f for f in self._handing_over if not f.wait(0)} | {fill}
        return fill

    def handed_over(self, fill: handoff.Fill | None, failed: bool = False) -> None:
        """The restore call is over: close the server's offer (a fill still running goes
        on for the kernel's restore). A failed resume also stops the fill, so that no
        memory is held for nothing. Either may come twice."""
        if fill is None:
            return
        if failed:
            fill.cancel()
        else:
            fill.release()

    def stop_preparing(self) -> None:
        """The server stops: reads ahead and memory fills end now."""
        for stop in self.reading_ahead.values():
            stop.set()
        for fill in self._handing_over:
            fill.cancel()

    def _debug(self, *args) -> None:
        if self.log is not None:
            self.log.debug(*args)

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
