"""Flat CPU buffers as the engine lays them out, maps and checks them: the alignment of a
tensor file's storages, whole-page spans, ``madvise``, digests of filled memory.

Both the reader (``tensors``) and the memory a server hands a kernel (``handed``) use
these; neither needs the other for them.
"""

from __future__ import annotations

import sys
from typing import Any

import xxhash

DATA_ALIGN = 64  # where a tensor file's storages start (as torch's CPU allocator aligns)
MADV_NOHUGEPAGE = 15
MADV_POPULATE_READ = 22  # Linux >= 5.14
MADV_POPULATE_WRITE = 23
POPULATE_SLICE = 8 << 20  # bytes mapped per madvise call
HUGE_ADVICE_MIN = 4 << 20  # numpy advises huge pages from this size on (and so do we not)
# bytes hashed per step of a filled buffer: each step lets other threads take the GIL
# (tensors.BACKGROUND_READ_CHUNK reads in steps of the same size, for the same reason)
HASH_CHUNK = 256 << 20
_madvise: Any = None  # libc.madvise via ctypes; False once known to be unavailable


def libc_madvise():
    """``madvise(2)`` through ctypes (a ctypes call releases the GIL), or None."""
    global _madvise
    if _madvise is None:
        _madvise = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                libc.madvise.restype = ctypes.c_int
                _madvise = libc.madvise
            except (OSError, AttributeError):
                pass
    return _madvise or None


def page_span(ptr: int, nbytes: int) -> tuple[int, int]:
    """The whole pages of ``[ptr, ptr + nbytes)``, as ``madvise`` takes them (the partial
    first and last pages are left out)."""
    page = 4096
    return (ptr + page - 1) // page * page, (ptr + nbytes) // page * page


def advise_in_slices(madvise, ptr: int, nbytes: int, advice: int) -> bool:
    """``madvise`` the whole pages of ``[ptr, ptr + nbytes)`` POPULATE_SLICE at a time:
    populating holds the process's memory-map lock, and every allocation of the other
    threads (a kernel's main thread running cells while a lazy restore reads) waits for
    it. False once a call is refused."""
    start, end = page_span(ptr, nbytes)
    for a in range(start, end, POPULATE_SLICE):
        if madvise(a, min(POPULATE_SLICE, end - a), advice) != 0:
            return False
    return True


def as_torch(buf):
    """A CPU buffer read as a numpy array (``as_numpy``), as the torch tensor sharing its
    memory; made once per storage, so that the tensors rebuilt on it share one storage."""
    import torch

    return buf if isinstance(buf, torch.Tensor) else torch.from_numpy(buf)


def digest_of(buf) -> str:
    """The xxh3 digest of a flat CPU buffer (numpy array or tensor) already filled: the
    memory a server handed over (engine/handed.py). Its pages are mapped in one call
    first, and hashed in large pieces, each of which lets other threads run."""
    arr = buf.numpy() if hasattr(buf, "numpy") else buf
    madvise = libc_madvise()
    if madvise is not None and arr.nbytes >= 1 << 16:  # best effort (Linux >= 5.14)
        advise_in_slices(madvise, arr.ctypes.data, arr.nbytes, MADV_POPULATE_READ)
    h = xxhash.xxh3_128()
    mv = memoryview(arr)
    for off in range(0, len(mv), HASH_CHUNK):
        h.update(mv[off : off + HASH_CHUNK])
    return h.hexdigest()
