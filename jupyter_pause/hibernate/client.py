"""The server's end of the hibernate helper (:mod:`.helper`): started on first use and
kept, each call a typed coroutine with a deadline.

A call that outlives its deadline means a driver call hangs in the helper: the helper
is killed (the server's event loop never waits on the driver) and the next call starts
a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import os
import sys
from pathlib import Path
from typing import Any

from .driver import GpuProcess, ProcessState
from .protocol import Call, Hello, Reply, Request

#: seconds a helper may take to start and initialise its driver (cuInit: ~3 s)
START_TIMEOUT = 60.0


class HelperError(Exception):
    """A call failed: ``code`` is the driver's name for why, or the helper's trouble."""

    def __init__(self, call: str, code: str):
        super().__init__(f"{call}: {code}")
        self.call = call
        self.code = code


class Helper:
    """The helper process for the driver class ``driver`` (``module.Class``)."""

    def __init__(self, driver: str, *, log, start_timeout: float = START_TIMEOUT):
        self.driver = driver
        self.log = log
        self.start_timeout = start_timeout
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._waiting: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._started = asyncio.Lock()
        self._missing: str | None = None

    async def missing(self) -> str | None:
        """Why this helper's driver cannot hibernate anything (None: it can); starts it."""
        try:
            await self._start()
        except HelperError as e:
            return f"the hibernate helper did not start: {e.code}"
        return self._missing

    async def _start(self) -> None:
        async with self._started:
            if self._process is not None and self._process.returncode is None:
                return
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "jupyter_pause.hibernate.helper",
                self.driver,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=_environment(self.driver),
                limit=1 << 24,
            )
            try:
                line = await asyncio.wait_for(self._process.stdout.readline(), self.start_timeout)
                hello = Hello.parse(line)
            except (TimeoutError, ValueError, KeyError, TypeError) as e:
                self._kill()
                raise HelperError("start", f"no greeting from the helper ({e!r})") from e
            self._missing = hello.missing
            self._reader = asyncio.ensure_future(self._read(self._process))

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        while True:
            line = await process.stdout.readline()
            if not line:
                break
            try:
                reply = Reply.parse(line)
            except (ValueError, TypeError):
                self.log.warning("jupyter-pause: the hibernate helper said %r", line[:200])
                continue
            future = self._waiting.pop(reply.id, None)
            if future is not None and not future.done():
                future.set_result(reply)
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(HelperError("helper", "the helper process exited"))
        self._waiting.clear()

    async def call(
        self, call: Call, pid: int | None = None, *, timeout: float, timeout_ms: int = 0
    ) -> Any:
        await self._start()
        request = Request(next(self._ids), call, pid, timeout_ms)
        future = asyncio.get_running_loop().create_future()
        self._waiting[request.id] = future
        self._process.stdin.write(request.line())
        try:
            await self._process.stdin.drain()
            reply = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            self._waiting.pop(request.id, None)
            self.log.error(
                "jupyter-pause: the GPU driver did not answer %s(%s) within %.0f s; "
                "the hibernate helper is restarted",
                call,
                pid,
                timeout,
            )
            self._kill()
            raise HelperError(call, f"the driver did not answer within {timeout:.0f} s") from None
        except (ConnectionError, BrokenPipeError) as e:
            raise HelperError(call, f"the helper process is gone ({e})") from e
        if reply.error:
            raise HelperError(call, reply.error)
        return reply.result

    # ------------------------------------------------------------- typed calls

    async def processes(self, timeout: float = 30) -> list[GpuProcess]:
        return [GpuProcess(**p) for p in await self.call("processes", timeout=timeout)]

    async def free_memory(self, timeout: float = 30) -> dict[int, int]:
        return {int(k): v for k, v in (await self.call("free_memory", timeout=timeout)).items()}

    async def state(self, pid: int, timeout: float = 30) -> ProcessState:
        return ProcessState(await self.call("state", pid, timeout=timeout))

    async def lock(self, pid: int, timeout: float) -> None:
        # the driver gives up by itself first; the helper's deadline is a backstop
        await self.call("lock", pid, timeout=timeout + 30, timeout_ms=int(timeout * 1000))

    async def checkpoint(self, pid: int, timeout: float) -> None:
        await self.call("checkpoint", pid, timeout=timeout)

    async def restore(self, pid: int, timeout: float) -> None:
        await self.call("restore", pid, timeout=timeout)

    async def unlock(self, pid: int, timeout: float = 30) -> None:
        await self.call("unlock", pid, timeout=timeout)

    # ---------------------------------------------------------------- ending

    def _kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        self._process = None

    async def close(self) -> None:
        """End the helper: its stdin closes and it exits; killed if it does not."""
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


def _environment(driver: str) -> dict[str, str]:
    """The server's environment, with the folder of the driver's package first on the
    helper's path: a driver the server can import, the helper can too."""
    env = dict(os.environ)
    spec = importlib.util.find_spec(driver.split(".")[0])
    if spec is None:
        return env
    if spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))).parent
    else:
        root = Path(spec.origin).parent
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    return env
