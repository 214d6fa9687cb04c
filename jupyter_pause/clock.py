"""The two clocks jupyter-pause reads, handed down so that tests can step them.

* The **wall clock** (``time()``, seconds since the epoch) says *when*: what
  people read and schedule, what the ledger records, what another process or
  a later boot can compare.
* The **monotonic clock** (``monotonic()``) says *how long*: idle durations,
  timeouts, how long a lease went unrenewed.  It never jumps; the wall clock
  does (an NTP step, a VM resumed from suspend, a laptop lid).

``PauseApp`` hands :data:`SYSTEM` down to the manager, the activity monitor,
the idle watcher and the scheduler; tests hand a clock they step.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...
    def monotonic(self) -> float: ...


class SystemClock:
    """This machine's clocks."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM = SystemClock()


@dataclass(frozen=True)
class Instant:
    """One moment read on both clocks: ``wall`` to show, ``monotonic`` to measure."""

    wall: float
    monotonic: float

    @classmethod
    def now(cls, clock: Clock = SYSTEM) -> Instant:
        return cls(clock.time(), clock.monotonic())


class StampAges:
    """How old wall-clock stamps are that another process (or an earlier
    boot) wrote, without counting steps of the wall clock after they were
    first seen.

    The wall clock is the only one such a stamp can be compared with, so a
    stamp's age is read from it once, when the stamp is first seen (or has
    changed); from then on this process measures on its monotonic clock.  A
    stamp in the future (a step back) is as old as zero seconds at first sight.
    """

    def __init__(self, clock: Clock = SYSTEM):
        self.clock = clock
        self._seen: dict[Hashable, tuple[float, float]] = {}  # key -> (stamp, monotonic then)

    def age(self, key: Hashable, stamp: float) -> float:
        """Seconds since ``stamp`` (wall clock), for what ``key`` names."""
        now = self.clock.monotonic()
        seen = self._seen.get(key)
        if seen is None or seen[0] != stamp:
            seen = self._seen[key] = (stamp, now - max(0.0, self.clock.time() - stamp))
        return now - seen[1]
