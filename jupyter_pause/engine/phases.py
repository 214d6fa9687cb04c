"""Where a checkpoint's or a restore's time went: seconds per named phase.

A checkpoint prepares (the namespace chosen, the lock, the index of earlier
checkpoints), pickles, hashes what it may reuse, writes and fsyncs its files,
commits, and uploads to a bucket; a restore verifies, imports, unpickles and
assigns.  The server lays them out on the operation's timeline
(docs/ARCHITECTURE.md, "The timeline of an operation"), so that each step's cost is
visible beside the physical limits (``make bench``).  Phases that alternate (the
write and the fsync of each file) are added up under their names.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Phases:
    """Seconds spent in each phase, in the order the phases were first met."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t0)

    def rounded(self) -> dict[str, float]:
        return {name: round(s, 4) for name, s in self.seconds.items()}


@contextlib.contextmanager
def timed(phases: Phases | None, name: str) -> Iterator[None]:
    """``phases.timed(name)``, or nothing where nobody counts."""
    if phases is None:
        yield
    else:
        with phases.timed(name):
            yield
