"""The hibernate helper: ``python -m jupyter_pause.hibernate.helper DRIVER``.

One per server, started once and kept: the driver is initialised once (``cuInit``
costs seconds), and a driver call that hangs hangs this process, not the server. It
answers the server's :class:`~.protocol.Request` lines on stdin with
:class:`~.protocol.Reply` lines on stdout, each call on a thread of its own (two
kernels hibernate at once), and ends when stdin closes.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from .driver import DriverError, GpuDriver, load
from .protocol import Hello, Reply, Request


def answer(driver: GpuDriver, request: Request) -> Reply:
    """One call of the driver, its outcome as a reply (never raises)."""
    try:
        call = request.call
        if call == "processes":
            result = [dataclasses.asdict(p) for p in driver.processes()]
        elif call == "free_memory":
            result = {str(gpu): free for gpu, free in driver.free_memory().items()}
        elif call == "state":
            result = driver.state(request.pid).value
        elif call == "lock":
            result = driver.lock(request.pid, request.timeout_ms)
        else:  # checkpoint, restore, unlock
            result = getattr(driver, call)(request.pid)
        return Reply(request.id, result)
    except DriverError as e:
        return Reply(request.id, error=e.code)
    except Exception as e:  # the helper says what broke; the server decides
        return Reply(request.id, error=f"{type(e).__name__}: {e}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    driver = load(argv[0])()
    out = sys.stdout.buffer
    written = threading.Lock()

    def send(line: bytes) -> None:
        with written:
            out.write(line)
            out.flush()

    send(Hello(driver.missing()).line())
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="hibernate") as pool:
        for line in sys.stdin.buffer:
            try:
                request = Request.parse(line)
            except (ValueError, TypeError) as e:
                print(f"jupyter-pause hibernate helper: bad request: {e}", file=sys.stderr)
                continue
            pool.submit(lambda r=request: send(answer(driver, r).line()))


if __name__ == "__main__":
    main()
