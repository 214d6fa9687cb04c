"""The kernel's half of the handoff (engine/handoff.py is the server's): the memory a
server filled with a checkpoint's large files while this kernel started, found through
the restore call's token (:func:`receive`), mapped privately (:class:`Handed`), and taken
for a storage only once it is sealed and its bytes match the signed manifest
(:func:`take`); anything else is read from the file as ever.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import threading
from typing import Any

from .buffers import DATA_ALIGN, as_torch, digest_of, page_span

PAGE = mmap.PAGESIZE
#: what a filled memfd carries: nobody, its maker included, can change it any more
SEALS = (
    getattr(fcntl, "F_SEAL_WRITE", 0)
    | getattr(fcntl, "F_SEAL_SHRINK", 0)
    | getattr(fcntl, "F_SEAL_GROW", 0)
    | getattr(fcntl, "F_SEAL_SEAL", 0)
)
MEMFD_PREFIX = "jupyter-pause-"  # a handed memfd's name: this, then the resume's nonce
_MAP_FIXED = 0x10


def supported() -> bool:
    """Linux: memfds that take seals, and /proc to find another process's descriptors."""
    return (
        hasattr(os, "memfd_create")
        and hasattr(fcntl, "F_ADD_SEALS")
        and os.path.isdir("/proc/self/fd")
    )


def pages(n: int) -> int:
    """``n`` bytes rounded up to whole pages."""
    return -(-n // PAGE) * PAGE


def call_libc(name: str, argtypes: tuple[str, ...], *args, restype: str = "c_int") -> None:
    """Call libc's ``name`` through ctypes, best effort: where it cannot be called, nothing
    happens (the callers have a slower way)."""
    try:
        import ctypes

        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
        fn.argtypes = [getattr(ctypes, t) for t in argtypes]
        fn.restype = getattr(ctypes, restype)
        fn(*args)
    except (OSError, AttributeError):
        pass


class Handed:
    """One checkpoint file handed over by the server, mapped privately in this process."""

    def __init__(self, memfd: int, done: int, size: int):
        self._memfd = memfd
        self._done = done
        self.map = mmap.mmap(memfd, pages(size), flags=mmap.MAP_PRIVATE)
        self._sealed: bool | None = None
        self._lock = threading.Lock()

    def view(self, pos: int, nbytes: int):
        """The bytes ``[pos, pos + nbytes)`` of the file, as a numpy array over the
        mapping (None where they do not start DATA_ALIGN-aligned: a fresh buffer then)."""
        if pos % DATA_ALIGN:
            return None
        import numpy as np

        return np.frombuffer(self.map, dtype=np.uint8, count=nbytes, offset=pos)

    def own(self, view) -> None:
        """Put fresh memory of this process's own under ``view`` (a buffer over this
        mapping, about to be read from the file instead), at the same address: writes
        to a private mapping of a file that was not filled would also allocate the
        file's pages, holding the bytes twice. The partial pages at either end stay
        (they may hold a neighbour's bytes)."""
        arr = view.numpy() if hasattr(view, "numpy") else view
        start, end = page_span(arr.ctypes.data, arr.nbytes)
        if end > start:
            _remap_anonymous(start, end - start)

    def sealed(self) -> bool:
        """Wait until the server is done with this file: True if it filled it whole and
        sealed it (its bytes can no longer change), False if the kernel must read it."""
        with self._lock:
            if self._sealed is None:
                try:
                    while os.read(self._done, 4096):  # the server never writes: end of file
                        pass
                    seals = fcntl.fcntl(self._memfd, fcntl.F_GET_SEALS)
                    self._sealed = seals & SEALS == SEALS
                except OSError:
                    self._sealed = False
                finally:
                    self.close()
            return self._sealed

    def close(self) -> None:
        for fd in (self._memfd, self._done):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._memfd = self._done = -1


def buffers_over(
    files: dict[str, Handed], plan, manifest, device_of, skip=frozenset(), as_numpy=False
) -> dict[int, tuple[Handed, Any]]:
    """{storage index: (Handed, its buffer)} for the storages of ``plan``
    (tensors.plan_reads) whose file was handed over, other than ``skip``: each buffer lies
    over the handed memory (a numpy array, or with ``as_numpy`` false a torch tensor for a
    torch storage), its bytes not yet checked (:func:`take`). CPU storages only, and only
    aligned ones (:meth:`Handed.view`)."""
    out = {}
    for _path, rel, items in plan:
        handed = files.get(rel)
        if handed is None:
            continue
        for pos, i in items:
            s = manifest.storages[i]
            if i in skip or (s.kind == "torch" and device_of(s) != "cpu"):
                continue
            view = handed.view(pos, s.nbytes)
            if view is not None:
                as_tensor = s.kind == "torch" and not as_numpy
                out[i] = (handed, as_torch(view) if as_tensor else view)
    return out


def take(handed: Handed, buf, xxh3: str) -> bool:
    """Whether ``buf``, over handed memory, is complete, can no longer change, and matches
    its digest. If not, the memory under it becomes this process's own, zeroed, for the
    caller to read the file into."""
    if handed.sealed() and digest_of(buf) == xxh3:
        return True
    handed.own(buf)
    return False


def _remap_anonymous(addr: int, length: int) -> None:
    """``mmap(MAP_FIXED | MAP_ANONYMOUS)`` over whole pages: the same addresses, zeroed,
    no longer backed by a file. Best effort (the writes then copy the pages instead)."""
    call_libc(
        "mmap",
        ("c_void_p", "c_size_t", "c_int", "c_int", "c_int", "c_long"),
        addr,
        length,
        mmap.PROT_READ | mmap.PROT_WRITE,
        mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED,
        -1,
        0,
        restype="c_void_p",
    )


def receive(token: dict | None, checkpoint_id: str, manifest) -> dict[str, Handed]:
    """The files the server handed over for this checkpoint, mapped: {file: Handed}.
    Whatever cannot be taken (another checkpoint, another machine, a descriptor that is
    not the server's memfd) is left out, and the restore reads that file itself."""
    if not token or not supported() or token.get("checkpoint") != checkpoint_id:
        return {}
    out: dict[str, Handed] = {}
    try:
        pid, nonce, files = int(token["pid"]), str(token["nonce"]), dict(token["files"])
    except (KeyError, TypeError, ValueError):
        return {}
    for rel, fds in files.items():
        entry = manifest.files.get(rel)
        if entry is None:
            continue
        handed = _take(pid, nonce, fds, entry.bytes)
        if handed is not None:
            out[rel] = handed
    return out


def _take(pid: int, nonce: str, fds, size: int) -> Handed | None:
    memfd = done = -1
    try:
        memfd_fd, done_fd = (int(x) for x in fds)
        where = f"/proc/{pid}/fd/"
        # the server's memfd of this resume, not any descriptor a token could name
        if os.readlink(where + str(memfd_fd)) != f"/memfd:{MEMFD_PREFIX}{nonce} (deleted)":
            return None
        if not os.readlink(where + str(done_fd)).startswith("pipe:"):
            return None
        memfd = os.open(where + str(memfd_fd), os.O_RDONLY | os.O_CLOEXEC)
        # non-blocking open: a pipe whose writer is gone already opens at end of file
        done = os.open(where + str(done_fd), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(done, True)
        if os.fstat(memfd).st_size < size:
            raise OSError("the server's memory is smaller than the file")
        return Handed(memfd, done, size)
    except (OSError, ValueError, TypeError):
        for fd in (memfd, done):
            if fd != -1:
                with contextlib.suppress(OSError):
                    os.close(fd)
        return None
