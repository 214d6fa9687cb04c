"""The server reads a checkpoint's large files into memory while the kernel starts, and
hands that memory to the kernel's restore. This is the server's half (:func:`offer`,
:class:`Fill`); the kernel's half, which receives and takes that memory, is
engine/handed.py.

A cold resume is a race between two jobs: starting a kernel and importing torch (CPU
work, one core) and bringing the model's bytes into memory (the disk, and the first
touch of fresh memory, which on a VM costs as much as the disk read itself). Reading
ahead into the page cache (plan.prefetch) starts the disk early, but the kernel still
copies every byte into fresh memory of its own, after it has started and beside its
``import torch``. Here the server does that part too, before the kernel even runs:

1. On a resume request, :func:`offer` creates one ``memfd`` per large tensor file of
   the checkpoint (anonymous shared memory, named ``jupyter-pause-<nonce>``) and a
   thread fills each from its file: from the page cache where the file is cached, with
   ``O_DIRECT`` where it is not, so that the bytes land in memory once, not twice.
2. A filled ``memfd`` is *sealed* (``F_SEAL_WRITE``, ``SHRINK``, ``GROW``, ``SEAL``):
   from then on nobody, the server included, can change a byte of it. Then the
   server closes that file's pipe; its end of file tells the kernel "done".
3. The restore in the kernel gets :meth:`Fill.token` (the server's pid, the
   descriptors, the nonce), opens each ``memfd`` through ``/proc/<pid>/fd`` (checking
   its name), and maps it *privately*: tensors are built over the mapping, their bytes
   are the server's, and a write to a tensor copies that page into the kernel alone
   (a ``fork`` of the kernel behaves as ever). ``handed.receive`` is that side.
4. The restore hashes every byte as always, and takes a file's memory only if its
   ``memfd`` is sealed and every tensor matches the signed manifest. Anything else (no
   ``/proc``, another machine's kernel, a fill stopped half way, a mismatch) and the
   kernel reads that file itself, into the same private mapping.

Trust: the bytes are checked against the signed manifest *after* the seal, so they can
no longer change; unlike a mapping of the checkpoint file, nothing on disk can reach a
live tensor. Memory: a file's memory is freed when the last tensor over it goes (the
mapping is one per file), and a fill that did not finish gives its memory back at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import plan
from .handed import MEMFD_PREFIX, PAGE, SEALS, call_libc, pages, supported

HANDOFF_MIN = 16 << 20  # smaller files: the kernel reads them itself (lazy.EAGER_BELOW)
MAX_FILES = 64  # descriptors per resume: three each while filling
STEP = 64 << 20  # bytes per read: how soon a stop is noticed (a multiple of the page)
_FALLOC_PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


@dataclass
class _File:
    rel: str
    path: Path
    size: int
    offered: int  # the memfd, as the kernel opens it (closed by Fill.release)
    filling: int  # the same memfd, for the fill thread (closed once filled)
    done_r: int  # the pipe whose end of file says "done"; the kernel opens this end
    done_w: int


@dataclass(eq=False)
class Fill:
    """Memory the server fills with one checkpoint's large files, for one restore."""

    checkpoint_id: str
    files: list[_File]
    nonce: str
    stop: threading.Event = field(default_factory=threading.Event)
    filled: dict[str, bool] = field(default_factory=dict)  # file -> sealed complete
    _thread: threading.Thread | None = None

    def token(self) -> dict[str, Any]:
        """What the kernel's restore needs to find this memory (``restore(handoff=...)``)."""
        return {
            "pid": os.getpid(),
            "nonce": self.nonce,
            "checkpoint": self.checkpoint_id,
            "files": {f.rel: [f.offered, f.done_r] for f in self.files},
        }

    def start(self) -> Fill:
        self._thread = threading.Thread(target=self._run, name="jp-handoff", daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the fill has ended, after waiting up to ``timeout`` seconds."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def release(self) -> None:
        """The restore call has returned (the kernel opened what it takes) or failed:
        close the server's offer. A fill still running goes on for the kernel; memory
        nobody mapped is freed once its fill ends."""
        for f in self.files:
            for fd in (f.offered, f.done_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            f.offered = f.done_r = -1

    def cancel(self) -> None:
        """Stop filling (the resume failed, or the server stops) and release."""
        self.stop.set()
        self.release()

    def _run(self) -> None:
        for f in self.files:
            try:
                if not self.stop.is_set():
                    self.filled[f.rel] = _fill(f, self.stop)
            except Exception:  # a read error: the kernel reads that file itself
                self.filled[f.rel] = False
            finally:
                if not self.filled.get(f.rel):
                    _punch(f.filling)  # give the memory back: nothing will use it
                for fd in (f.filling, f.done_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)


def offer(chosen: plan.Chosen, budget: int | None = None) -> Fill | None:
    """Start filling memory with the large files of the checkpoint a resume will restore
    (``chosen``: plan.choose_for_resume): files of CPU tensors and arrays only, at most
    ``budget`` bytes (default: half the memory available), the smallest files first, at
    most MAX_FILES. None where there is nothing to hand over or the platform cannot."""
    if not supported():
        return None
    cid, m, candidates = chosen.id, chosen.manifest, chosen.files
    budget = plan.memory_available() // 2 if budget is None else budget
    nonce = secrets.token_hex(8)
    # files whose bytes all go to the CPU: a GPU tensor is streamed from its file to the
    # device (pinned staging buffers), and its file is read ahead into the page cache
    for_gpu = {s.file for s in m.storages if s.kind == "torch" and s.device != "cpu"}
    files: list[_File] = []
    for rel, path in candidates:
        size = m.files[rel].bytes
        if size < HANDOFF_MIN or rel in for_gpu:
            continue
        if size > budget or len(files) == MAX_FILES:
            break
        try:
            files.append(_make(rel, path, size, nonce))
        except OSError:  # out of descriptors or memory: hand over what is set up
            break
        budget -= size
    if not files:
        return None
    return Fill(cid, files, nonce).start()


def _make(rel: str, path: Path, size: int, nonce: str) -> _File:
    made: list[int] = []
    try:
        made.append(os.memfd_create(MEMFD_PREFIX + nonce, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING))
        os.ftruncate(made[0], pages(size))
        made.append(os.dup(made[0]))
        made.extend(os.pipe())
    except OSError:
        for fd in made:
            os.close(fd)
        raise
    return _File(rel, path, size, *made)


def _fill(f: _File, stop: threading.Event) -> bool:
    """Fill one memfd from its file and seal it; True once it holds the whole file."""
    size = os.fstat(f.filling).st_size
    mm = mmap.mmap(f.filling, size)  # shared, writable: the memfd's own pages
    try:
        with open(f.path, "rb", buffering=0, opener=_nofollow) as cached:
            direct = _open_direct(f.path)
            try:
                got = _copy(cached.fileno(), direct, memoryview(mm), f.size, stop)
            finally:
                if direct is not None:
                    os.close(direct)
    finally:
        mm.close()
    if got < f.size or stop.is_set():
        return False
    fcntl.fcntl(f.filling, fcntl.F_ADD_SEALS, SEALS)
    return True


def _copy(cached: int, direct: int | None, view: memoryview, size: int, stop) -> int:
    """Read ``size`` bytes into ``view``: what the page cache holds from there (a
    non-blocking read that stops at the first page it does not hold), the rest with
    ``O_DIRECT`` (no second copy in the page cache), in STEP pieces. Returns bytes read."""
    nowait = getattr(os, "RWF_NOWAIT", 0)
    off = 0
    try:
        while off < size and not stop.is_set():
            end = min(off + STEP, size)
            n = 0
            if nowait:
                with contextlib.suppress(OSError):  # BlockingIOError: not cached
                    n = os.preadv(cached, [view[off:end]], off, nowait)
            if n > 0:
                off += n
                continue
            if direct is not None:
                start = off - off % PAGE  # O_DIRECT reads whole pages, into whole pages
                try:  # (the mapping's end is padded to one)
                    n = os.preadv(direct, [view[start : pages(end)]], start)
                except OSError as e:
                    if e.errno != errno.EINVAL:
                        raise
                    direct = None  # this file system takes no O_DIRECT here
                    continue
                reached = min(start + n, size) if n > 0 else off
                if reached < size:
                    reached -= reached % PAGE  # a short read: on from a whole page
                if reached <= off:
                    direct = None  # no headway: read the rest through the cache
                off = max(off, reached)
                continue
            n = os.preadv(cached, [view[off:end]], off)
            if n <= 0:
                break
            off += n
    finally:
        view.release()
    return off


def _open_direct(path: Path) -> int | None:
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_RDONLY | flag | os.O_NOFOLLOW)
    except OSError:
        return None


def _nofollow(path, flags):
    return os.open(path, flags | os.O_NOFOLLOW)


def _punch(fd: int) -> None:
    """Free a memfd's pages (a private mapping of it then reads zeros, not stale data)."""
    with contextlib.suppress(OSError):
        size = os.fstat(fd).st_size
        call_libc("fallocate", ("c_int", "c_int", "c_long", "c_long"), fd, _FALLOC_PUNCH, 0, size)
