"""Hand this server's ledger, rolled up, to where the fleet is read.

A paused server is stopped: nobody can ask it for its report then.  So the
server hands its figures over beforehand, through its backend's
``publish_fleet`` (the ``jupyter-pause-hub`` service under JupyterHub, the
workspace's state object under Kubernetes; nothing on the local backend):
one row per notebook (``report/fleet.py``), its totals since the ledger began,

* every ``interval`` seconds while the server runs,
* soon after each pause (a ``paused`` row in the ledger), and
* last when the server stops, after its notebooks are saved.

Rows carry their time and replace older ones, so a hand-over repeated or
overtaken counts once.  A hand-over that fails is logged and tried again at
the next occasion; it never holds up a pause or the server's stop for longer
than ``timeout``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..backends.base import BackendError, PauseBackend
from ..clock import SYSTEM, Clock
from ..ledger import EventType, Ledger, LedgerEvent
from ..report.build import build_report
from ..report.fleet import FleetRow, rows_from_report

#: seconds after a pause before its rows are handed over (a pause of a
#: server-scope backend records each notebook's pause one after another)
AFTER_PAUSE = 1.0


def ledger_rows(
    ledger: Ledger, now: float, storage: dict[str, int] | None = None
) -> list[FleetRow]:
    """The ledger's rows as of ``now``, one per notebook (its whole history)."""
    report = build_report(ledger.events(until=now), until=now, now=now, storage=storage)
    return rows_from_report(report, server="")


class FleetPublisher:
    """Hands the ledger's rows to ``backend.publish_fleet``: periodically, after a
    pause, and at :meth:`close`.  ``storage`` returns the checkpoint store's bytes
    per notebook (read in a thread)."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        backend: PauseBackend,
        storage: Callable[[], dict[str, int]] | None = None,
        interval: float = 300.0,
        timeout: float = 10.0,
        log: logging.Logger | None = None,
        clock: Clock = SYSTEM,
    ):
        self.ledger = ledger
        self.backend = backend
        self.storage = storage
        self.interval = interval
        self.timeout = timeout
        self.log = log or logging.getLogger("jupyter_pause")
        self.clock = clock
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._soon: asyncio.TimerHandle | None = None
        self._after: set[asyncio.Task] = set()  # hand-overs after a pause, under way
        self._lock = asyncio.Lock()  # one hand-over at a time, in order
        self.published = 0  # hand-overs taken (for the log and the tests)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.ledger.listeners.append(self._on_event)
        if self.interval > 0:
            self._task = asyncio.ensure_future(self._every_interval())

    def _on_event(self, event: LedgerEvent) -> None:
        """A ledger listener: it may be called from any thread, and never raises."""
        if event.type == EventType.PAUSED and self._loop is not None:
            self._loop.call_soon_threadsafe(self._paused)

    def _paused(self) -> None:
        if self._soon is None and self._loop is not None:
            self._soon = self._loop.call_later(AFTER_PAUSE, self._after_pause)

    def _after_pause(self) -> None:
        self._soon = None
        task = asyncio.ensure_future(self.publish())
        self._after.add(task)
        task.add_done_callback(self._after.discard)

    async def _every_interval(self) -> None:
        while True:
            await self.publish()
            await asyncio.sleep(self.interval)

    def rows(self) -> list[FleetRow]:
        storage = self.storage() if self.storage is not None else None
        return ledger_rows(self.ledger, self.clock.time(), storage)

    async def publish(self) -> str | None:
        """One hand-over; where it went, or None (nowhere to, or it failed)."""
        if not self.backend.keeps_fleet():
            return None  # no rows to make: measuring every checkpoint folder is not free
        async with self._lock:
            try:
                rows = await asyncio.to_thread(self.rows)
                where = await asyncio.wait_for(self.backend.publish_fleet(rows), self.timeout)
            except BackendError as e:
                self.log.warning("jupyter-pause: the fleet's rows were not handed over: %s", e)
                return None
            except TimeoutError:
                self.log.warning(
                    "jupyter-pause: the fleet's rows were not handed over: no answer within %g s",
                    self.timeout,
                )
                return None
            except Exception:  # the fleet must never break the server
                self.log.warning(
                    "jupyter-pause: the fleet's rows were not handed over", exc_info=True
                )
                return None
            if where is not None:
                self.published += 1
                self.log.debug("jupyter-pause: %d fleet rows handed to %s", len(rows), where)
            return where

    async def close(self) -> None:
        """Stop, then hand the rows over a last time (the server stops)."""
        if self._on_event in self.ledger.listeners:
            self.ledger.listeners.remove(self._on_event)
        self._loop = None
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        task, self._task = self._task, None
        while task is not None and not task.done():
            # again if need be: Python 3.11's wait_for drops a cancel that lands as
            # its awaitable finishes (a hand-over that the local backend ends at once)
            task.cancel()
            await asyncio.wait({task}, timeout=1)
        await self.publish()
