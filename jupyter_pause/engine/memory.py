"""Will a checkpoint fit in the memory this process may still use? (issue #31)

A checkpoint streams tensor and array data from their own memory, and spools large
pickles to a file (records.Spool), so what it needs beside the namespace is small:
the pickler's bookkeeping: at least 16 bytes per Python object of the process (a large
list, dict or array of objects is pickled in chunks of its own memo, and only the ids of
what another variable may share are kept: 6.5 bytes per object beside 1.4 million small
dicts, 2.6 beside 7.5 million strings; a structure that must keep one memo, a dict of
lists of dicts, needs up to 64), a spool's 8 MiB, and one 64 MiB staging
chunk per GPU copy. A kernel near its limit is refused before anything is written,
with the numbers, instead of being killed by the kernel's OOM killer half way (the
unsaved state then lost).

What "may still use" means, the smallest that applies:

* the memory cgroup of this process and each of its parents (cgroup v2
  ``memory.max`` − ``memory.current``; v1 ``memory.limit_in_bytes`` −
  ``memory.usage_in_bytes``), counting the page cache that can be dropped (clean
  file pages, not tmpfs) as free: a pod's earlier checkpoints stay cached in it;
* ``RLIMIT_AS`` − the process's virtual size, ``RLIMIT_DATA`` − its data size;
* the machine's ``MemAvailable``.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import NotEnoughMemory

BASE_NEED = 16 << 20  # a spool's 8 MiB in memory, the writers' buffers, slack
PER_OBJECT = 16  # bytes of pickler bookkeeping per Python object, at least (see the module doc)
GPU_STAGING = 64 << 20  # one device-to-host chunk (tensors.CHUNK)
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Headroom:
    """How much more memory this process may use, and which limit says so."""

    free: int | None  # bytes; None: no limit could be read
    limit: str  # e.g. "the memory cgroup /kubepods/pod1 (memory.max 2.0 GiB)"


def need() -> int:
    """Bytes a checkpoint of this process may use beside its namespace, at most."""
    n = BASE_NEED + PER_OBJECT * sys.getallocatedblocks()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        n += GPU_STAGING
    return n


def check() -> None:
    """Raise :class:`NotEnoughMemory` if a checkpoint may not fit; nothing is changed."""
    wanted, room = need(), headroom()
    if room.free is not None and room.free < wanted:
        raise NotEnoughMemory(wanted, room.free, room.limit)


def headroom() -> Headroom:
    """The tightest of the limits this process runs under (see the module doc)."""
    found = [h for h in (*cgroups(), *_rlimits(), _available()) if h.free is not None]
    if not found:
        return Headroom(None, "no memory limit found")
    return min(found, key=lambda h: h.free)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _stat(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def cgroups(
    membership: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> list[Headroom]:
    """Free memory under each memory cgroup limit this process lives under (``membership``
    lists its cgroups, ``root`` is where the cgroup file systems are mounted)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one unified hierarchy
            folder = root / path.lstrip("/")
            names = ("memory.max", "memory.current", "memory.stat")
            reclaim = ("file", "-shmem", "-file_dirty", "-file_writeback")
        elif "memory" in controllers.split(","):  # v1
            folder = root / "memory" / path.lstrip("/")
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat")
            reclaim = ("total_cache", "-total_shmem", "-total_dirty", "-total_writeback")
        else:
            continue
        while True:  # a parent's limit binds too (a pod's, above its container's)
            h = _cgroup_headroom(folder, names, reclaim)
            if h is not None:
                out.append(h)
            if folder in (root, root / "memory") or folder == folder.parent:
                break
            folder = folder.parent
    return out


def _cgroup_headroom(folder: Path, names, reclaim) -> Headroom | None:
    limit, usage = _read_int(folder / names[0]), _read_int(folder / names[1])
    if limit is None or usage is None or limit >= 1 << 60:  # v1 says "unlimited" so
        return None
    stat = _stat(folder / names[2])
    droppable = 0
    for key in reclaim:
        sign = -1 if key.startswith("-") else 1
        droppable += sign * stat.get(key.lstrip("-"), 0)
    free = limit - usage + max(0, droppable)
    where = f"the memory cgroup {folder} ({names[0]} {_mib(limit)})"
    return Headroom(max(0, free), where)


def _rlimits() -> list[Headroom]:
    status = _proc_status()
    out = []
    for name, field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        soft, _hard = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY and field in status:
            out.append(Headroom(max(0, soft - status[field]), f"{name} ({_mib(soft)})"))
    return out


def _proc_status() -> dict[str, int]:
    out = {}
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        key, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024
    return out


def _available() -> Headroom:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return Headroom(int(line.split()[1]) * 1024, "the machine's available memory")
    except (OSError, ValueError, IndexError):
        pass
    return Headroom(None, "")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"
