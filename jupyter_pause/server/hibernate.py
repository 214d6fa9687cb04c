"""Hibernate in place, as the server does it, through the helper process
(:mod:`jupyter_pause.hibernate`): the refusals first, then the driver's lock and
checkpoint; a wake only once NVML says the memory fits, then restore and unlock; and
before a kernel that went through it is stopped, lock and checkpoint once more.

The :class:`Hibernator` stands below the manager (which keeps the operations and the
lifecycle) and the kernel manager (which asks it before a kernel's process ends); it
knows processes and GPU memory, not notebooks.

Why each step (NVIDIA/cuda-checkpoint's issues, docs/engine.md *Hibernate in place*):

* a restore that fails for memory leaves the process failing every later restore
  (issue 44): never try one that NVML says cannot fit;
* killing a live restored process has hung whole hosts (issue 53): lock and checkpoint
  it first, then check that NVML counts (about) nothing for it;
* NCCL, CUDA IPC, managed memory and child processes with a CUDA context cannot be
  checkpointed (issues 28, 30, 56; the README's limits): refuse, naming which.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from ..clock import SYSTEM, Clock
from ..formatting import format_bytes
from ..hibernate.client import Helper, HelperError
from ..hibernate.driver import GpuProcess, ProcessState
from ..processes import pid_alive
from ..protocol import HibernationFacts

#: host memory kept free beside the GPU memory a hibernate moves there
HOST_MARGIN = 1 << 30
#: GPU memory a wake wants free beside what the kernel held (allocator slack)
GPU_MARGIN = 256 << 20
#: what NVML may still count for a checkpointed process (its checkpoint left ~0)
LEFT_AFTER_CHECKPOINT = 300 << 20


class Refused(Exception):
    """Nothing was changed (or what was, was undone): the kernel runs as before; why."""


class Stuck(Exception):
    """A driver call failed half way and the process's GPU state may be lost: the
    driver "does not attempt to keep the process in a good state" after an error."""


@dataclasses.dataclass(frozen=True)
class Hibernation:
    """A hibernated kernel's process, as the session keeps it (``Session.hibernation``)."""

    pid: int
    gpus: dict[str, int]  # NVML's GPU index -> bytes the process held there
    since: float  # wall clock
    seconds: float  # how long lock + checkpoint took
    freed: int  # bytes NVML counted for the process before, less those it counts after
    back_to: str  # the state a wake returns to: running | ready

    @property
    def bytes(self) -> int:
        return sum(self.gpus.values())

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "bytes": self.bytes}

    def told(self) -> dict[str, Any]:
        """What the ledger's ``gpu-hibernated`` event says of it."""
        return {
            "gpu_bytes": self.bytes,
            "bytes_freed": self.freed,
            "seconds": self.seconds,
            "gpus": self.gpus,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Hibernation:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class Hibernator:
    """Hibernates and wakes kernel processes through ``helper`` (None: not here)."""

    def __init__(
        self,
        helper: Helper | None,
        *,
        unavailable: str | None = None,
        host_margin: int = HOST_MARGIN,
        gpu_margin: int = GPU_MARGIN,
        lock_timeout: float = 30,
        copy_timeout: float = 600,
        log,
        clock: Clock = SYSTEM,
    ):
        self.helper = helper
        self.clock = clock
        #: why this server cannot hibernate; None once the helper said it can
        self.why_not: str | None = unavailable or "the hibernate helper has not started yet"
        self.host_margin = host_margin
        self.gpu_margin = gpu_margin
        self.lock_timeout = lock_timeout
        self.copy_timeout = copy_timeout
        self.log = log
        #: processes this server checkpointed at least once: each is locked and
        #: checkpointed again before it is stopped
        self.touched: set[int] = set()

    @property
    def ready(self) -> bool:
        return self.why_not is None

    async def start(self) -> None:
        """Start the helper (the driver initialised once) and learn whether it can."""
        if self.helper is not None:
            self.why_not = await self.helper.missing()
        if self.why_not:
            self.log.info("jupyter-pause: hibernate in place is off: %s", self.why_not)

    async def close(self) -> None:
        if self.helper is not None:
            await self.helper.close()

    # -------------------------------------------------------------- hibernate

    async def check(self, pid: int, facts: HibernationFacts) -> dict[str, int]:
        """The GPU memory ``pid`` holds per GPU, or :class:`Refused` with every reason
        it cannot be hibernated now (``facts``: what its kernel says of itself)."""
        reasons = list(facts.blockers)
        processes = await self._processes()
        gpus = held(processes, pid)
        if not gpus:
            reasons.append("its process holds no GPU memory (as NVML sees it): nothing to free")
        family = descendants(pid)
        children = [p for p in processes if p.pid in family]
        if children:
            who = ", ".join(
                f"pid {p.pid} ({format_bytes(p.bytes)} on GPU {p.gpu})" for p in children
            )
            reasons.append(
                f"a child process holds a CUDA context ({who}), e.g. DataLoader workers; "
                "the driver cannot checkpoint it with the kernel: end them first"
            )
        total = sum(gpus.values())
        if gpus and facts.host_free is not None and facts.host_free < total + self.host_margin:
            reasons.append(
                f"not enough free host memory to hold its {format_bytes(total)} of GPU memory "
                f"and a {format_bytes(self.host_margin)} margin: {format_bytes(facts.host_free)} "
                f"free under {facts.host_limit}"
            )
        if not reasons:
            state = await self._state(pid)
            if state != ProcessState.RUNNING:
                reasons.append(f"the driver says its process is {state.value}, not running")
        if reasons:
            raise Refused("; ".join(reasons))
        return gpus

    async def hibernate(self, pid: int, gpus: dict[str, int], *, back_to: str) -> Hibernation:
        """Lock and checkpoint ``pid`` (checked by :meth:`check`)."""
        started = time.monotonic()
        try:
            await self.helper.lock(pid, self.lock_timeout)
        except HelperError as e:
            await self._unlock_if_locked(pid)
            raise Refused(
                f"the driver could not lock its process ({e.code}): it keeps its GPU memory"
            ) from e
        try:
            await self.helper.checkpoint(pid, self.copy_timeout)
        except HelperError as e:
            if await self._unlock_if_locked(pid):
                raise Refused(
                    f"the driver could not checkpoint its process ({e.code}); it was "
                    "unlocked and keeps its GPU memory"
                ) from e
            raise Stuck(
                f"the driver failed to checkpoint its process ({e.code}) and left it "
                f"{await self._state_or_unknown(pid)}: its GPU state may be lost"
            ) from e
        seconds = time.monotonic() - started
        self.touched.add(pid)  # checkpointed: from now on, checkpointed before it stops
        left = held(await self._processes(), pid)
        before = sum(gpus.values())
        return Hibernation(
            pid=pid,
            gpus=gpus,
            since=self.clock.time(),
            seconds=seconds,
            freed=max(0, before - sum(left.values())),
            back_to=back_to,
        )

    # ------------------------------------------------------------------- wake

    async def wake(self, hibernation: Hibernation) -> float:
        """Restore and unlock; seconds it took. :class:`Refused` (nothing tried) when
        NVML says the memory it held does not fit now."""
        free = await self._free_memory()
        short = [
            f"GPU {gpu} has {format_bytes(free.get(int(gpu), 0))} free, it needs "
            f"{format_bytes(need)} and a {format_bytes(self.gpu_margin)} margin"
            for gpu, need in sorted(hibernation.gpus.items())
            if free.get(int(gpu), 0) < need + self.gpu_margin
        ]
        if short:
            raise Refused(
                "not enough GPU memory to wake it: "
                + "; ".join(short)
                + ". Nothing was tried (a restore that fails for memory leaves the process "
                "unable to ever restore): it stays hibernated; free GPU memory, or pause it"
            )
        started = time.monotonic()
        pid = hibernation.pid
        try:
            await self.helper.restore(pid, self.copy_timeout)
            await self.helper.unlock(pid)
        except HelperError as e:
            raise Stuck(
                f"the driver failed to restore its GPU memory ({e.code}); the process is "
                f"{await self._state_or_unknown(pid)} and cannot run CUDA again"
            ) from e
        return time.monotonic() - started

    # --------------------------------------------------------- before a stop

    async def before_stop(self, pid: int | None) -> None:
        """A kernel's process is about to end: if this server ever checkpointed it, lock
        and checkpoint it again (unless it is checkpointed now), and check that NVML
        counts about nothing for it. Best effort: the stop goes on, and the log says
        what could not be done."""
        if pid is None or pid not in self.touched:
            return
        if not pid_alive(pid):
            self.touched.discard(pid)
            return
        try:
            state = await self._state(pid)
            if state == ProcessState.RUNNING:
                await self.helper.lock(pid, self.lock_timeout)
                state = ProcessState.LOCKED
            if state == ProcessState.LOCKED:
                await self.helper.checkpoint(pid, self.copy_timeout)
            left = sum(held(await self._processes(), pid).values())
        except (HelperError, Refused) as e:
            self.log.error(
                "jupyter-pause: could not lock and checkpoint process %s before it stops (%s); "
                "stopping a restored CUDA process can hang the machine (cuda-checkpoint "
                "issue 53)",
                pid,
                e,
            )
            return
        if left > LEFT_AFTER_CHECKPOINT:
            self.log.warning(
                "jupyter-pause: NVML still counts %s for process %s after its checkpoint",
                format_bytes(left),
                pid,
            )
        self.touched.discard(pid)

    # ---------------------------------------------------------------- helpers

    async def _processes(self) -> list[GpuProcess]:
        try:
            return await self.helper.processes()
        except HelperError as e:
            raise Refused(f"NVML could not list the GPU processes ({e.code})") from e

    async def _free_memory(self) -> dict[int, int]:
        try:
            return await self.helper.free_memory()
        except HelperError as e:
            raise Refused(f"NVML could not tell the free GPU memory ({e.code})") from e

    async def _state(self, pid: int) -> ProcessState:
        try:
            return await self.helper.state(pid)
        except HelperError as e:
            raise Refused(f"the driver could not tell the process's state ({e.code})") from e

    async def _state_or_unknown(self, pid: int) -> str:
        try:
            return (await self.helper.state(pid)).value
        except HelperError:
            return "in an unknown state"

    async def _unlock_if_locked(self, pid: int) -> bool:
        """Unlock ``pid`` if the driver says it is locked; whether it now runs."""
        try:
            state = await self.helper.state(pid)
            if state == ProcessState.LOCKED:
                await self.helper.unlock(pid)
                state = ProcessState.RUNNING
        except HelperError:
            return False
        return state == ProcessState.RUNNING


def kernel_pid(kernel_manager, kernel_id: str | None) -> int | None:
    """The process of a kernel this server started (None: not one, or no such kernel)."""
    try:
        return kernel_manager.get_kernel(kernel_id).provisioner.pid
    except (KeyError, AttributeError):
        return None


def held(processes: list[GpuProcess], pid: int) -> dict[str, int]:
    """GPU index (as JSON keys it) -> bytes ``pid`` holds there."""
    out: dict[str, int] = {}
    for p in processes:
        if p.pid == pid and p.bytes > 0:
            out[str(p.gpu)] = out.get(str(p.gpu), 0) + p.bytes
    return out


def descendants(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """Every process below ``pid`` (children, their children, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        if child not in found:
            found.add(child)
            todo.extend(children.get(child, []))
    return found
