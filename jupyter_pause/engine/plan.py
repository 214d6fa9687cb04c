"""The resume's plan: which checkpoint to restore, what to prefetch, and how much
memory there is to read ahead into. Stands on ``mirror`` and ``checks``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import checks, mirror, paths
from .errors import (
    CheckpointError,
    CorruptCheckpoint,
)
from .manifest import (
    BLOBS,
    Manifest,
)

# ---------------------------------------------------------------- reading ahead
READ_AHEAD_STEP = 64 << 20  # bytes per sendfile call: how soon a stop is noticed


def prefetch(chosen: Chosen, budget: int | None = None, stop=None, skip=frozenset()) -> int:
    """Read a checkpoint's tensor files into the operating system's page cache. The
    server calls it (on a thread) when a resume is asked for, and when a paused notebook
    is opened, so the disk works while the kernel starts; the kernel's restore then
    copies from memory what the disk fetched meanwhile. Nothing is trusted for it: the
    restore still hashes every byte it reads.

    The bytes go to ``/dev/null`` with ``sendfile``: the kernel reads them into its cache
    and copies them nowhere (2 GB: 0.07 s of CPU, against 2.4 s to ``preadv`` them into a
    buffer). ``posix_fadvise(WILLNEED)`` would not do: Linux reads only the first
    ``read_ahead_kb`` of the range (8 MB of 2 GB on the dev VM).

    The checkpoint: the one a resume restores (:func:`choose_for_resume`). Only files its
    signed manifest names are read, smallest
    first (the restore reads small objects first), at most ``budget`` bytes (default: half
    the memory available now, so that reading ahead never pushes out what the machine is
    using), none of ``skip`` (files handed over in memory, engine/handoff.py), until
    ``stop`` (a ``threading.Event``) is set. Returns the bytes read: 0 where there is
    nothing to read or the platform cannot (sendfile to a file is Linux's)."""
    budget = memory_available() // 2 if budget is None else budget
    stopped = stop.is_set if stop is not None else lambda: False
    done = 0
    with open(os.devnull, "wb", buffering=0) as null:
        for rel, path in chosen.files:
            if rel in skip:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except OSError:  # gone, or a link: the restore will say so
                continue
            try:
                size = min(os.fstat(fd).st_size, budget - done)
                offset = 0
                while offset < size and not stopped():
                    n = os.sendfile(null.fileno(), fd, offset, min(READ_AHEAD_STEP, size - offset))
                    if not n:
                        break
                    offset += n
                done += offset
            except OSError:  # this platform or file system cannot: the restore reads alone
                return done
            finally:
                os.close(fd)
            if done >= budget or stopped():
                break
    return done


@dataclass(frozen=True)
class Chosen:
    """The checkpoint a resume restores, decided once (:func:`choose_for_resume`, by the
    server) and handed to what reads it ahead (:func:`prefetch`), to what fills memory
    with it (engine/handoff.py) and, by its id, to the kernel's restore."""

    id: str
    manifest: Manifest
    #: its tensor files, smallest first, each named by the signed manifest and under
    #: ``blobs/`` (nothing else is followed)
    files: list[tuple[str, Path]]
    #: newer checkpoints passed over, newest first -> why
    passed_over: dict[str, str] = field(default_factory=dict)

    def notes(self, restored: str) -> list[str]:
        """What a resume says of this choice once its kernel restored ``restored`` (the
        kernel's restore still falls back to an older one on damage found in tensor
        bytes, which it alone hashes, and then says so itself)."""
        said = [f"checkpoint {cid} was passed over: {why}" for cid, why in self.passed_over.items()]
        if said and restored == self.id:
            said.append(f"restored {restored} instead, the newest checkpoint that verifies")
        return said


def choose_for_resume(
    dir=None, notebook: str | None = None, checkpoint_id: str | None = None, *, synced=False
) -> Chosen | None:
    """The checkpoint a resume restores: ``checkpoint_id``, or the newest one that passes
    every check short of hashing its tensors: signed with this user's key and bound to
    this notebook, its pickle's hash and HMAC, each tensor file present (with a bucket
    behind the folder, a file the cache lacks is downloaded by the restore instead) with
    its size and header. None where none does (or the named one does not): the kernel's
    restore then decides alone, and says why.

    Decided once, in the server: what reads the checkpoint ahead, the memory filled for
    the kernel and the kernel's restore all get this one. It writes nothing but what a
    restore would: a bucket's newer checkpoints' small files, pulled into the cache
    (unless ``synced``: the caller pulled them for this resume already)."""
    root = paths.root_of(dir)
    nbdir = root.notebook_dir(notebook)
    if not synced:
        mirror.pull(root, nbdir)
    key = checks.load_key_for_listing()[0]
    if checkpoint_id is None:
        candidates = list(reversed(checks.checkpoint_ids(nbdir)))
    elif paths.is_checkpoint_id(checkpoint_id):
        candidates = [checkpoint_id]
    else:
        return None
    passed_over: dict[str, str] = {}
    for cid in candidates:
        try:
            m = checks.read_manifest(nbdir, cid, key=key)
            checks.verify_pickle(nbdir, m, key=key)
            files = _blob_files(nbdir, m)
            for rel, path in files:
                why = checks.check_header(path, m.files[rel])
                if why is not None and not (why == "missing" and root.bucket is not None):
                    raise CorruptCheckpoint(", ".join(m.owners_of_file(rel)) or rel, str(path), why)
        except CheckpointError as e:
            passed_over[cid] = str(e)
            continue
        return Chosen(cid, m, files, passed_over)
    return None


def _blob_files(nbdir: Path, m: Manifest) -> list[tuple[str, Path]]:
    """(file, path) of the manifest's tensor files, smallest first: only names under
    ``blobs/`` (nothing else is followed)."""
    files = []
    for rel in sorted(m.files, key=lambda rel: m.files[rel].bytes):
        parts = Path(rel).parts
        if len(parts) == 2 and parts[0] == BLOBS and parts[1] not in ("..", "."):
            files.append((rel, nbdir / rel))
    return files


def memory_available() -> int:
    """Bytes of memory the system can give without swapping (``MemAvailable``)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0
