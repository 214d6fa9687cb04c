"""How many resumes run at once on this machine, and in which order the others wait.

At 9:00 every notebook scheduled for 9:00 falls due together.  Each resume
starts a kernel and reads its checkpoint into memory: started all at once,
they compete for the CPUs, the memory and the disk, and all finish late, or
run the machine out of memory.  :class:`ResumeGate` admits at most ``limit``
resumes at a time; the others wait, in the order they fell due (a scheduled
resume) or were asked for (a resume by hand), and are told how many resumes
are ahead of them.

The gate knows nothing of sessions or of the manager: the manager enters it
around the part of a resume that uses the machine (memory handed over,
kernel started, checkpoint restored) and reports the waiting itself.

:func:`machine_limit` is the default bound: one resume per CPU, at most one
per :data:`RESUME_MEMORY` of available memory, at least one (cgroup v2
limits, such as a pod's ``resources.limits``, count).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.plan import memory_available

#: the memory one resume is budgeted (a kernel, the libraries it imports, the
#: state it restores on the CPU side) when the default bound is sized
RESUME_MEMORY = 2 * 2**30


@dataclass(order=True)
class _Ticket:
    order: float  # when it fell due, or was asked for (epoch seconds)
    seq: int  # arrival, among equal times
    admitted: bool = field(default=False, compare=False)


class ResumeGate:
    """First come (by due time), first served admission of at most ``limit`` resumes.

    Usage::

        async with gate.admitted(due, on_wait=lambda ahead: ...):
            ...  # start the kernel, restore

    ``on_wait(ahead)`` is called when the resume has to wait, and again
    whenever the number of resumes ahead of it changes (those running, and
    those waiting before it).  Leaving the block, normally, by an exception
    or by cancellation (also while still waiting), gives the place up.
    """

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"at least one resume must be allowed at a time, not {limit}")
        self.limit = limit
        self.running = 0
        self._waiting: list[_Ticket] = []
        self._seq = itertools.count()
        self._changed = asyncio.Event()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @contextlib.asynccontextmanager
    async def admitted(
        self, order: float, on_wait: Callable[[int], None] = lambda ahead: None
    ) -> AsyncIterator[None]:
        ticket = _Ticket(order, next(self._seq))
        bisect.insort(self._waiting, ticket)
        self._admit()
        self._notify()  # those due later have one more ahead of them
        try:
            told = None
            while not ticket.admitted:
                ahead = self.running + self._waiting.index(ticket)
                if ahead != told:
                    on_wait(ahead)
                    told = ahead
                changed = self._changed
                await changed.wait()
            yield
        finally:
            if ticket.admitted:
                self.running -= 1
            else:
                self._waiting.remove(ticket)
            self._admit()
            self._notify()

    def _admit(self) -> None:
        """Let the first in line in while there is room."""
        while self._waiting and self.running < self.limit:
            self._waiting.pop(0).admitted = True
            self.running += 1
            self._notify()

    def _notify(self) -> None:
        """Wake every waiter to look at its place again."""
        self._changed.set()
        self._changed = asyncio.Event()


def machine_limit() -> int:
    """The default bound: ``max(1, min(CPUs, available memory // RESUME_MEMORY))``.

    CPUs are those this process may run on, lowered to a cgroup v2 CPU quota;
    available memory is the system's ``MemAvailable``, lowered to what a
    cgroup v2 memory limit leaves (unknown: the CPUs decide alone).  Read
    once, when the server starts.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    quota, memory_left = cgroup_limits()
    if quota is not None:
        cpus = min(cpus, max(1, int(quota)))
    memory = memory_available()
    if memory_left is not None:
        memory = min(memory, memory_left) if memory else memory_left
    by_memory = memory // RESUME_MEMORY if memory else cpus
    return max(1, min(cpus, by_memory))


def cgroup_limits(root: Path = Path("/sys/fs/cgroup")) -> tuple[float | None, int | None]:
    """(CPUs of the quota, bytes the memory limit leaves) of this process's
    cgroup v2, each None when unlimited or unknown (cgroup v1, no cgroup)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        relative = next(line[3:] for line in lines if line.startswith("0::"))
    except (OSError, StopIteration):
        return None, None
    folder = root / relative.lstrip("/")
    cpus = memory_left = None
    with contextlib.suppress(OSError, ValueError):
        quota, period = (folder / "cpu.max").read_text().split()
        cpus = None if quota == "max" else int(quota) / int(period)
    with contextlib.suppress(OSError, ValueError):
        limit = (folder / "memory.max").read_text().strip()
        if limit != "max":
            memory_left = max(0, int(limit) - int((folder / "memory.current").read_text()))
    return cpus, memory_left
