"""The on-disk checkpoint store: atomic commit, listing, retention, GC, verify, delete.

This module must stay importable without torch (and without numpy): Jupyter
Server uses it to list, verify and delete checkpoints of kernels it does not
run. Layout of one notebook folder::

    <root>/<notebook-folder>/
        .lock                         flock: one writer at a time, readers share
        blobs/<xxh3>.safetensors      tensor data, content-addressed, shared by checkpoints
        2026-11-30T18-02-11/          one folder per checkpoint
            manifest.json  manifest.sig  objects.pkl
        .tmp-2026-11-30T18-02-12-4711/  a checkpoint being written (ignored by listings)

A checkpoint becomes visible only by the final ``rename`` of its temp folder,
after every file and folder involved was fsynced, so a crash (or SIGKILL) at
any point leaves either the old set of checkpoints or the new one, never half.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import mmap
import os
import shutil
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import xxhash

from ..processes import pid_alive
from . import paths, remote, signing
from .durable import fsync_dir, makedirs
from .errors import (
    CheckpointError,
    CheckpointNotFound,
    CorruptCheckpoint,
    ForeignCheckpoint,
    KeyProblem,
    RemoteStoreError,
    StoreBusy,
    UnsafeFolder,
    UntrustedCheckpoint,
)
from .manifest import (
    BLOBS,
    MANIFEST,
    PICKLE,
    SIGNATURE,
    FileEntry,
    Manifest,
    Records,
    StorageEntry,
)

TMP_PREFIX = ".tmp-"
QUARANTINE = "quarantine"
STALE_TMP_SECONDS = 6 * 3600
LOCK_TIMEOUT = 300.0
CHUNK = 1 << 24  # 16 MiB reads when hashing
PAGE = mmap.PAGESIZE
#: manifest metadata: name -> the checkpoint that still holds an object this one lost
#: involuntarily (its kernel died, its restore did not finish or could not bring the
#: object back; "" where no copy verifies); retention keeps those
LOST = "lost"


@dataclass
class CheckpointInfo:
    """One line of a listing: what the server's UI and ``%checkpoint --list`` show."""

    id: str
    time: str  # ISO 8601 UTC
    bytes: int  # tensor bytes + pickle bytes this checkpoint needs
    objects: list[str]
    path: str
    notebook: str = ""
    trusted: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    bytes_written: int = 0
    status: str = "ok"  # "ok", "untrusted" or "damaged" (see ``problem``)
    problem: str = ""  # why it is not "ok", in words
    #: signed with a key this process lacks (``key_id``, its fingerprint): another
    #: server's or user's, not damaged; never offered for deletion
    foreign: bool = False
    key_id: str = ""


# ---------------------------------------------------------------- small fs helpers
def write_file_synced(path: Path, data: bytes) -> None:
    with paths.private_open(path) as f:
        view = memoryview(data)
        while view:
            n = f.write(view)
            view = view[n:]
        os.fsync(f.fileno())


@contextlib.contextmanager
def locked(nbdir: Path, shared: bool = False, timeout: float = LOCK_TIMEOUT):
    """flock on ``<nbdir>/.lock``: exclusive for writers (checkpoint, delete), shared for readers.

    The folders, and the lock file, must be this user's alone (checked after they
    were made: another user may have made them first); a symlink is never followed.
    """
    makedirs(nbdir)
    problem = paths.folder_problem(nbdir.parent) or paths.folder_problem(nbdir, private=False)
    if problem:
        raise UnsafeFolder(problem)
    try:
        fd = os.open(nbdir / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise UnsafeFolder(f"{nbdir / '.lock'} is a symbolic link") from None
    try:
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            raise UnsafeFolder(f"{nbdir / '.lock'} belongs to {paths.user_name(owner)}")
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreBusy(str(nbdir / ".lock"), timeout) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


# ---------------------------------------------------------------- ids and folders
def new_id(nbdir: Path, now: datetime | None = None) -> str:
    """A fresh id, UTC to the second, always sorting after every existing one: a "-2", "-3",
    ... suffix if that second is taken (or was, by a checkpoint retention removed since)."""
    now = now or datetime.now(timezone.utc)
    base = now.strftime("%Y-%m-%dT%H-%M-%S")
    ids = checkpoint_ids(nbdir)
    if ids:
        last_base, last_n = paths.id_sort_key(ids[-1])
        if base <= last_base:  # same second (or the clock went back): count on from the last
            base, n = last_base, last_n + 1
            while (nbdir / f"{base}-{n}").exists():
                n += 1
            return f"{base}-{n}"
    return base


def checkpoint_ids(nbdir: Path) -> list[str]:
    """Committed checkpoint ids, oldest first (temp folders and blobs are ignored)."""
    if not nbdir.is_dir():
        return []
    ids = [p.name for p in nbdir.iterdir() if paths.is_checkpoint_id(p.name) and p.is_dir()]
    return sorted(ids, key=paths.id_sort_key)


def checkpoint_path(nbdir: Path, checkpoint_id: str) -> Path:
    return nbdir / paths.check_id(checkpoint_id)


# ---------------------------------------------------------------- manifests and trust
def read_manifest(
    nbdir: Path, checkpoint_id: str, trust: bool = False, key: bytes | None = None
) -> Manifest:
    """Load a manifest; unless ``trust``, it must be signed with this user's key, for this
    notebook (its folder) and this owner. Raises CheckpointNotFound, CorruptCheckpoint (the
    manifest or its signature file is damaged) or UntrustedCheckpoint (with the reason)."""
    folder = checkpoint_path(nbdir, checkpoint_id)
    try:
        data = (folder / MANIFEST).read_bytes()
    except FileNotFoundError:
        raise CheckpointNotFound(checkpoint_id, str(nbdir)) from None
    if not trust:
        _check_signature(folder, data, key)
    try:
        m = Manifest.from_bytes(data)
    except ValueError as e:
        raise CorruptCheckpoint("manifest", str(folder / MANIFEST), str(e)) from None
    if not trust:
        _check_binding(nbdir, folder, m)
    return m


def _check_signature(folder: Path, data: bytes, key: bytes | None) -> None:
    try:
        raw = (folder / SIGNATURE).read_bytes()
    except FileNotFoundError:
        raise UntrustedCheckpoint(
            str(folder), "it has no signature (manifest.sig)", "unsigned"
        ) from None
    try:
        sig = signing.Signature.from_bytes(raw)
    except ValueError as e:
        raise CorruptCheckpoint("signature", str(folder / SIGNATURE), str(e)) from None
    if sig.manifest_xxh3 and xxhash.xxh3_128_hexdigest(data) != sig.manifest_xxh3:
        raise CorruptCheckpoint(
            "manifest", str(folder / MANIFEST), "damaged on disk: its checksum no longer matches"
        )
    if key is None:
        key = signing.load_key(create=False)
    if key is None:
        raise UntrustedCheckpoint(
            str(folder), signing.missing_key_reason(sig.key_id), "no-key", key_id=sig.key_id
        )
    if sig.key_id and sig.key_id != signing.key_id(key):
        raise UntrustedCheckpoint(
            str(folder), signing.other_key_reason(sig.key_id, key), "other-key", key_id=sig.key_id
        )
    if not signing.verify(data, sig.hmac, key):
        raise UntrustedCheckpoint(
            str(folder),
            "its signature does not match this user's key: it was altered after signing"
            if sig.key_id
            else "its signature does not match this user's key (tampered or foreign)",
            "tampered",
        )


def _check_binding(nbdir: Path, folder: Path, m: Manifest) -> None:
    """A valid signature proves who wrote the manifest, not that it belongs here: a
    checkpoint of another notebook copied into this folder (a replay), or another
    checkpoint of this notebook copied over this one (a rollback), signs fine."""
    if paths.folder_name(m.notebook) != nbdir.name:
        raise UntrustedCheckpoint(
            str(folder),
            f"it is a checkpoint of notebook {m.notebook!r}, copied here from elsewhere "
            "(a renamed notebook is re-bound by the server)",
            "other-notebook",
        )
    if m.owner and m.owner != paths.owner():
        raise UntrustedCheckpoint(
            str(folder), f"it belongs to user {m.owner!r}, not {paths.owner()!r}", "other-owner"
        )
    if m.id != folder.name:
        older = paths.id_sort_key(m.id) < paths.id_sort_key(folder.name)
        raise UntrustedCheckpoint(
            str(folder),
            f"it is checkpoint {m.id} (saved at {m.created}), copied over checkpoint "
            f"{folder.name}: "
            + ("an older state put in its place (a rollback)" if older else "not this one"),
            "other-checkpoint",
        )


def examine(
    nbdir: Path, checkpoint_id: str, key: bytes | None = None
) -> tuple[Manifest | None, CheckpointError | None]:
    """(manifest, problem) without raising: the manifest when it can be parsed at all
    (trusted or not), and why it cannot be trusted, if it cannot."""
    try:
        if key is None:  # no key: nothing verifies, but say so (read_manifest does)
            key = signing.load_key(create=False)
        return read_manifest(nbdir, checkpoint_id, key=key), None
    except CheckpointError as problem:
        try:
            return read_manifest(nbdir, checkpoint_id, trust=True), problem
        except CheckpointError:
            return None, problem


def signed_by_this_key(folder: Path, key: bytes | None) -> bool:
    """Whether ``folder``'s manifest carries this user's signature: retention and deletion
    never touch a checkpoint that is not provably this user's (signed with another key,
    e.g. another server's on a shared root; unsigned; or no key here). The HMAC is checked
    against the manifest; one damaged on disk since it was signed (the checksum that the
    signature holds no longer matches) counts as signed by the key the signature names, so
    that its owner can still delete it."""
    if key is None:
        return False
    try:
        sig = signing.Signature.from_bytes((folder / SIGNATURE).read_bytes())
        data = (folder / MANIFEST).read_bytes()
    except (OSError, ValueError):
        return False
    if sig.key_id and sig.key_id != signing.key_id(key):
        return False
    if sig.key_id and sig.manifest_xxh3 and sig.manifest_xxh3 != xxhash.xxh3_128_hexdigest(data):
        return True  # damaged on disk after this key signed it
    return signing.verify(data, sig.hmac, key)


def _load_key_for_listing() -> tuple[bytes | None, CheckpointError | None]:
    try:
        return signing.load_key(create=False), None
    except KeyProblem as e:
        return None, e


def _info(nbdir: Path, cid: str, m: Manifest | None, problem: CheckpointError | None):
    foreign = isinstance(problem, UntrustedCheckpoint) and problem.foreign
    signer = {"foreign": True, "key_id": problem.key_id} if foreign else {}
    if m is None:  # not even the manifest can be read: list it, as damaged
        return CheckpointInfo(
            id=cid,
            time=_id_time(cid),
            bytes=0,
            objects=[],
            path=str(nbdir / cid),
            trusted=False,
            status=status_of(problem),
            problem=str(problem),
            **signer,
        )
    return CheckpointInfo(
        id=cid,
        time=m.created,
        bytes=m.bytes_total + m.pickle.bytes,
        objects=sorted(m.objects),
        path=str(nbdir / cid),
        notebook=m.notebook,
        trusted=problem is None,
        metadata=dict(m.metadata),
        skipped=dict(m.skipped),
        bytes_written=m.bytes_written,
        status=status_of(problem),
        problem=str(problem) if problem else "",
        **signer,
    )


def status_of(problem: CheckpointError | None) -> str:
    """ "ok", "damaged" (a file does not match its hash) or "untrusted" (not provably ours)."""
    if problem is None:
        return "ok"
    return "untrusted" if isinstance(problem, (UntrustedCheckpoint, KeyProblem)) else "damaged"


def _id_time(cid: str) -> str:
    base = cid[:19]
    return f"{base[:10]}T{base[11:].replace('-', ':')}+00:00"


def list_checkpoints(
    dir=None, notebook: str | None = None, *, here_only: bool = False
) -> list[CheckpointInfo]:
    """All committed checkpoints of a notebook, oldest first; ``here_only``: those in the
    folder (a bucket's cache) without asking the bucket.

    Reads only JSON (safe whoever wrote it) and never raises for one bad checkpoint:
    unsigned, foreign, replayed or damaged ones are listed with ``trusted=False``,
    ``status`` "untrusted" or "damaged" and the reason in ``problem``. Only the
    manifest is checked here; ``scrub`` hashes the data too."""
    nbdir = paths.notebook_dir(dir, notebook)
    if not here_only:
        pull(dir, nbdir)
    return list_folder(nbdir)


def list_folder(nbdir: Path) -> list[CheckpointInfo]:
    """The committed checkpoints of the notebook folder ``nbdir``, oldest first (as
    :func:`list_checkpoints`)."""
    key, key_problem = _load_key_for_listing()
    out = []
    for cid in checkpoint_ids(nbdir):
        m, problem = examine(nbdir, cid, key)
        out.append(_info(nbdir, cid, m, key_problem or problem))
    return out


def get_manifest(
    dir=None,
    notebook: str | None = None,
    checkpoint_id: str | None = None,
    trust: bool = False,
    *,
    synced: bool = False,
) -> Manifest:
    """The manifest of one checkpoint (the latest if no id), signature verified
    (``synced``: the caller listed the bucket already; it is not listed again)."""
    nbdir = paths.notebook_dir(dir, notebook)
    if not synced:
        pull(dir, nbdir)
    if checkpoint_id is None:
        ids = checkpoint_ids(nbdir)
        if not ids:
            raise CheckpointNotFound(None, str(nbdir))
        checkpoint_id = ids[-1]
    elif not paths.is_checkpoint_id(checkpoint_id):
        raise CheckpointNotFound(checkpoint_id, str(nbdir))
    return read_manifest(nbdir, checkpoint_id, trust=trust)


def latest_checkpoint(
    dir=None, notebook: str | None = None, verify: bool = False, trust: bool = False
) -> CheckpointInfo | None:
    """The newest checkpoint that is signed, complete (all files present, right sizes) and,
    with ``verify=True``, whose every hash checks out. None if there is none."""
    nbdir = paths.notebook_dir(dir, notebook)
    key, _ = _load_key_for_listing()
    newest = _newest_complete(nbdir, key, verify, trust)
    if newest is None:
        return None
    cid, m = newest
    return _info(nbdir, cid, m, None if not trust else examine(nbdir, cid, key)[1])


def _newest_complete(
    nbdir: Path, key, verify: bool = False, trust: bool = False
) -> tuple[str, Manifest] | None:
    """(id, manifest) of the newest checkpoint that is signed and complete (and, with
    ``verify``, whose every hash checks out); None if there is none."""
    for cid in reversed(checkpoint_ids(nbdir)):
        try:
            m = read_manifest(nbdir, cid, trust=trust, key=key)
            check_complete(nbdir, m)
            if verify:
                verify_manifest(nbdir, m, trust=trust)
        except CheckpointError:
            continue
        return cid, m
    return None


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
    nbdir = paths.notebook_dir(dir, notebook)
    if not synced:
        pull(dir, nbdir)
    bucket = paths.bucket_of(dir)
    key = _load_key_for_listing()[0]
    if checkpoint_id is None:
        candidates = list(reversed(checkpoint_ids(nbdir)))
    elif paths.is_checkpoint_id(checkpoint_id):
        candidates = [checkpoint_id]
    else:
        return None
    passed_over: dict[str, str] = {}
    for cid in candidates:
        try:
            m = read_manifest(nbdir, cid, key=key)
            verify_pickle(nbdir, m, key=key)
            files = _blob_files(nbdir, m)
            for rel, path in files:
                why = check_header(path, m.files[rel])
                if why is not None and not (why == "missing" and bucket is not None):
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


# ---------------------------------------------------------------- verification
def read_safetensors_header(path: Path) -> tuple[int, bytes, dict]:
    """(data start offset, raw header bytes, parsed header) of a safetensors file, torch-free.

    The page cache is left as it was found: no read-ahead into the data, and the header's
    pages dropped again unless they were cached already. A file whose first page alone is
    cached would make the memory the server fills from it (engine/handoff.py) go through
    the cache, a second copy of every byte, instead of around it."""
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        with contextlib.suppress(AttributeError, OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        cached = _first_page_cached(fd)
        try:
            return _parse_header(f)
        finally:
            if not cached:  # whole pages only go: those the header lies in
                with contextlib.suppress(AttributeError, OSError):
                    os.posix_fadvise(fd, 0, -(-f.tell() // PAGE) * PAGE, os.POSIX_FADV_DONTNEED)


def read_records(path: Path, file: FileEntry, s: StorageEntry) -> bytes:
    """The bytes of storage ``s`` (a group's records, format 3) in the safetensors file at
    ``path``, its header and the bytes hashed against the manifest, as one ``bytes``
    object: an unpickler reads it in place. Raises CorruptCheckpoint."""
    try:
        start, raw, header = read_safetensors_header(path)
        if xxhash.xxh3_128_hexdigest(raw) != file.header_xxh3:
            raise ValueError("header changed")
        begin, end = header[s.key]["data_offsets"]
        if end - begin != s.nbytes:
            raise ValueError(f"tensor {s.key!r} has the wrong size")
        with open(path, "rb") as f:
            f.seek(start + begin)
            data = f.read(s.nbytes)  # (in as many reads as it takes)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpoint(s.owner, str(path), str(e)) from None
    if len(data) != s.nbytes or xxhash.xxh3_128_hexdigest(data) != s.xxh3:
        raise CorruptCheckpoint(s.owner, str(path), f"tensor {s.key!r}")
    return data


def _parse_header(f) -> tuple[int, bytes, dict]:
    head = f.read(8)
    if len(head) != 8:
        raise ValueError("file shorter than a safetensors header")
    (n,) = struct.unpack("<Q", head)
    if n > 100_000_000:
        raise ValueError("implausible safetensors header length")
    raw = f.read(n)
    if len(raw) != n:
        raise ValueError("truncated safetensors header")
    return 8 + n, raw, json.loads(raw)


def _first_page_cached(fd: int) -> bool:
    """Whether the page cache holds the file's first byte (a read that never waits)."""
    nowait = getattr(os, "RWF_NOWAIT", 0)
    if not nowait:
        return True  # cannot tell: leave the cache alone
    try:
        return os.preadv(fd, [bytearray(1)], 0, nowait) == 1
    except OSError:  # BlockingIOError: not cached (or the read is not supported)
        return False


def check_complete(nbdir: Path, m: Manifest, names=None, skip=()) -> None:
    """Cheap completeness check: every needed file (but ``skip``) exists with the recorded size."""
    folder = nbdir / m.id
    need = (set(m.files) if names is None else m.files_of(names)) - set(skip)
    pk = folder / m.pickle.file
    if not pk.is_file() or pk.stat().st_size != m.pickle.bytes:
        raise CorruptCheckpoint("objects", str(pk), "missing or wrong size")
    for rel in need:
        p = nbdir / rel
        try:
            size = p.stat().st_size
        except FileNotFoundError:
            raise CorruptCheckpoint(", ".join(m.owners_of_file(rel)), str(p), "missing") from None
        if size != m.files[rel].bytes:
            raise CorruptCheckpoint(
                ", ".join(m.owners_of_file(rel)),
                str(p),
                f"size {size}, expected {m.files[rel].bytes}",
            )


def hash_range(f, start: int, length: int, chunk: int = CHUNK) -> str:
    h = xxhash.xxh3_128()
    f.seek(start)
    buf = bytearray(min(chunk, max(length, 1)))
    view = memoryview(buf)
    left = length
    while left:
        n = f.readinto(view[: min(chunk, left)])
        if not n:
            break
        h.update(view[:n])
        left -= n
    return h.hexdigest()


def verify_pickle(nbdir: Path, m: Manifest, trust: bool = False, key: bytes | None = None) -> bytes:
    """Read objects.pkl and check its hash and HMAC; return its bytes (only then may it be unpickled)."""
    path = nbdir / m.id / m.pickle.file
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorruptCheckpoint("objects", str(path), "missing") from None
    if xxhash.xxh3_128_hexdigest(data) != m.pickle.xxh3:
        raise CorruptCheckpoint(", ".join(sorted(m.objects)) or "objects", str(path))
    if not trust and not signing.verify(data, m.pickle.hmac, key):
        raise UntrustedCheckpoint(str(path), "the pickle's HMAC does not match the signed manifest")
    return data


def records_data(
    m: Manifest, pickle: bytes, apart: dict[int, Any], trust: bool = False, key: bytes | None = None
) -> bytes | Records:
    """The checkpoint's records, as the manifest's offsets count them: ``pickle`` (objects.pkl,
    verified), with each group kept apart (format 3) in its place. ``apart``: group index ->
    the bytes of its records storage, read and hashed against the manifest; each is checked
    against its HMAC here, before anything is unpickled. A group in neither is not read."""
    if not any(g.records is not None for g in m.groups):
        return pickle
    pieces: list[tuple[int, Any, int, int]] = []
    at = start = 0  # in objects.pkl; in the records
    for k, (first, end, _local) in enumerate(m.spans()):
        g = m.groups[k]
        if m.records[first] != start:
            raise CorruptCheckpoint("objects", str(m.id), "its records do not add up")
        if g.records is None:
            stop = m.records[end] if end < len(m.records) else start + len(pickle) - at
            pieces.append((start, pickle, at, stop - start))
            at += stop - start
        else:
            stop = start + m.storages[g.records].nbytes
            data = apart.get(k)
            if data is not None and not trust:
                _check_records(m, k, data, key)
            pieces.append((start, data, 0, stop - start))
        start = stop
    if at != len(pickle):
        raise CorruptCheckpoint("objects", str(m.id), "its records do not add up")
    return Records(pieces, start)


def _check_records(m: Manifest, k: int, data: bytes, key: bytes | None) -> None:
    if not signing.verify(memoryview(data).cast("B"), m.groups[k].hmac, key):
        raise UntrustedCheckpoint(
            str(m.id), f"the records of group {k} do not match their HMAC in the signed manifest"
        )


def verify_records(nbdir: Path, m: Manifest, trust: bool = False, key: bytes | None = None) -> None:
    """Read every group's records kept apart (format 3) and check their hash and HMAC, as
    :func:`verify_pickle` does objects.pkl's; nothing is unpickled."""
    for k, g in enumerate(m.groups):
        if g.records is not None:
            s = m.storages[g.records]
            data = read_records(nbdir / s.file, m.files[s.file], s)
            if not trust:
                _check_records(m, k, data, key)


# A blob is fully hashed at most once per process per version of the file: the cache
# key is its stat (inode, size, mtime, ctime), so any write to it, even one that keeps
# its size, makes the next reuse hash it again. Size and header are checked every time.
_VERIFIED: dict[str, tuple[int, int, int, int]] = {}


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def remember_verified(path: Path) -> None:
    """``path`` was just hashed whole against its manifest: its reuse need not hash it
    again while the file stays this very version (:func:`check_blob`)."""
    with contextlib.suppress(OSError):
        _VERIFIED[str(path)] = _stat_key(os.stat(path))


def check_header(path: Path, entry: FileEntry) -> str | None:
    """Why the safetensors file at ``path`` does not have the size and header ``entry``
    records ("missing" where there is none), or None if it does: no tensor is read."""
    return _check_header(path, entry)[0]


def _check_header(path: Path, entry: FileEntry):
    """(why, stat, data start, header) of :func:`check_header`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "missing", None, 0, None
    if st.st_size != entry.bytes:
        return f"size {st.st_size}, expected {entry.bytes}", st, 0, None
    try:
        start, raw, header = read_safetensors_header(path)
    except (OSError, ValueError) as e:
        return str(e), st, 0, None
    if xxhash.xxh3_128_hexdigest(raw) != entry.header_xxh3:
        return "header changed", st, 0, None
    return None, st, start, header


def check_blob(path: Path, entry: FileEntry, full: bool = False) -> str | None:
    """Why the safetensors file at ``path`` does not match ``entry``, or None if it does.

    Cheap checks (size, header hash: :func:`check_header`) always; every tensor's hash
    unless this process already hashed this very version of the file (``full=True``:
    always)."""
    why, st, start, header = _check_header(path, entry)
    if why is not None:
        return why
    if not full and _VERIFIED.get(str(path)) == _stat_key(st):
        return None
    try:
        with open(path, "rb") as f:
            for k, digest in entry.tensors.items():
                b, e = header[k]["data_offsets"]
                if hash_range(f, start + b, e - b) != digest:
                    return f"tensor {k!r}"
    except (KeyError, TypeError, ValueError):
        return "header does not describe its tensors"
    _VERIFIED[str(path)] = _stat_key(st)
    return None


def quarantine(nbdir: Path, rel: str, reason: str) -> Path:
    """Move a damaged file out of the way, into ``<nbdir>/quarantine/`` (kept for a
    post-mortem, never read again), so the next checkpoint writes a good copy."""
    qdir = nbdir / QUARANTINE
    makedirs(qdir)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    dest = qdir / f"{Path(rel).name}.{stamp}"
    os.rename(nbdir / rel, dest)
    write_file_synced(dest.with_name(dest.name + ".why"), f"{rel}: {reason}\n".encode())
    fsync_dir(qdir)
    _VERIFIED.pop(str(nbdir / rel), None)
    return dest


def verify_file(nbdir: Path, m: Manifest, rel: str, full: bool = True) -> None:
    """Hash one safetensors file (header and every tensor) against the manifest."""
    why = check_blob(nbdir / rel, m.files[rel], full=full)
    if why is None:
        return
    owners = ", ".join(m.owners_of_file(rel)) or rel
    for s in m.storages:  # one tensor is bad: name the object it belongs to
        if s.file == rel and why == f"tensor {s.key!r}":
            owners = s.owner
    raise CorruptCheckpoint(owners, str(nbdir / rel), why)


def verify_manifest(
    nbdir: Path, m: Manifest, names=None, trust: bool = False, full: bool = True
) -> None:
    check_complete(nbdir, m, names)
    verify_pickle(nbdir, m, trust=trust)
    verify_records(nbdir, m, trust=trust)
    need = set(m.files) if names is None else m.files_of(names)
    for rel in sorted(need):
        verify_file(nbdir, m, rel, full=full)


def verify_checkpoint(
    dir=None, notebook: str | None = None, checkpoint_id: str | None = None, trust: bool = False
) -> Manifest:
    """Check the signature and every hash of a checkpoint; raises CorruptCheckpoint naming the
    object, UntrustedCheckpoint, or CheckpointNotFound. Returns the manifest when all is well."""
    nbdir = paths.notebook_dir(dir, notebook)
    m = get_manifest(dir, notebook, checkpoint_id, trust=trust)
    verify_manifest(nbdir, m, trust=trust)
    return m


def scrub(nbdir: Path) -> list[CheckpointInfo]:
    """Hash everything (every checkpoint's manifest, signature, pickle and tensor files) and
    say which checkpoints are fully restorable: ``status`` "ok", "damaged" or "untrusted",
    oldest first. Shared blobs are hashed once. Reads only; never unpickles."""
    key, key_problem = _load_key_for_listing()
    verdicts: dict[str, str | None] = {}
    out = []
    if not nbdir.is_dir():
        return out
    with locked(nbdir, shared=True):
        for cid in checkpoint_ids(nbdir):
            m, problem = examine(nbdir, cid, key)
            problem = key_problem or problem
            if m is not None and problem is None:
                try:
                    check_complete(nbdir, m)
                    verify_pickle(nbdir, m, key=key)
                    verify_records(nbdir, m, key=key)
                    for rel in sorted(m.files):
                        if rel not in verdicts:
                            verdicts[rel] = check_blob(nbdir / rel, m.files[rel], full=True)
                        if verdicts[rel] is not None:
                            verify_file(nbdir, m, rel)  # raises, naming the object
                except CheckpointError as e:
                    problem = e
            out.append(_info(nbdir, cid, m, problem))
    return out


def quarantined(nbdir: Path) -> list[str]:
    """Files found damaged and moved aside (with a ``.why`` next to each)."""
    qdir = nbdir / QUARANTINE
    if not qdir.is_dir():
        return []
    return sorted(p.name for p in qdir.iterdir() if not p.name.endswith(".why"))


def rebind(dir, old_notebook: str, new_notebook: str) -> list[str]:
    """Move a renamed notebook's checkpoints to its new folder, re-signed for the new name.

    The signature binds a checkpoint to its notebook, so a moved folder would read as a
    replay; the server calls this when it sees a rename. Only checkpoints that verify as
    this user's checkpoints of the old notebook move (others stay). Crash-safe: files are
    hard-linked (or copied) into a temp folder that is renamed into place, then the old
    checkpoint is removed; at worst both copies exist. Returns the ids moved."""
    src = paths.notebook_dir(dir, old_notebook)
    dst = paths.notebook_dir(dir, new_notebook)
    if not src.is_dir() or src == dst:
        return []
    key = signing.load_key()
    moved = []
    with locked(src), locked(dst):
        makedirs(dst / BLOBS)
        for cid in checkpoint_ids(src):
            if (dst / cid).exists():
                continue
            try:
                m = read_manifest(src, cid, key=key)
            except CheckpointError:
                continue
            for rel in m.files:
                if not (dst / rel).exists():
                    _link_or_copy(src / rel, dst / rel)
            tmp = dst / f"{TMP_PREFIX}{cid}-{os.getpid()}"
            os.mkdir(tmp, 0o700)
            _link_or_copy(src / cid / m.pickle.file, tmp / m.pickle.file)
            m.notebook = paths.notebook_key(new_notebook)
            data = m.to_bytes()
            write_file_synced(tmp / MANIFEST, data)
            write_file_synced(tmp / SIGNATURE, signing.sign_manifest(data, key).to_bytes())
            fsync_dir(tmp)
            fsync_dir(dst / BLOBS)
            os.rename(tmp, dst / cid)
            fsync_dir(dst)
            _remove_checkpoint_dir(src / cid)
            moved.append(cid)
        gc(src, locked_already=True)
    if not checkpoint_ids(src) and not quarantined(src):
        shutil.rmtree(src, ignore_errors=True)
    return moved


def _link_or_copy(a: Path, b: Path) -> None:
    try:
        os.link(a, b)
    except OSError:
        shutil.copyfile(a, b)
        os.chmod(b, 0o600)


# ---------------------------------------------------------------- delete, retention, GC
def delete_checkpoint(
    dir=None,
    notebook: str | None = None,
    checkpoint_id: str = "",
    lock_timeout: float = LOCK_TIMEOUT,
    force_foreign: bool = False,
) -> str:
    """Delete one checkpoint of this user's: signed with this user's key, for this user
    (:func:`foreign_reason`). Any other is refused with :class:`ForeignCheckpoint`: on a
    shared root it is another's. ``force_foreign`` (an administrator's clean-up, which
    names what it removes) deletes it anyway. Returns why it was not this user's ("" when
    it was).

    ``lock_timeout`` bounds the wait for a writer holding the notebook's lock
    (then :class:`StoreBusy`); the server passes a short one."""
    nbdir = paths.notebook_dir(dir, notebook)
    folder = checkpoint_path(nbdir, checkpoint_id)
    pull(dir, nbdir)
    with locked(nbdir, timeout=lock_timeout):
        if not folder.is_dir():
            raise CheckpointNotFound(checkpoint_id, str(nbdir))
        foreign = foreign_reason(nbdir, checkpoint_id)
        if foreign and not force_foreign:
            raise ForeignCheckpoint(
                str(folder),
                foreign,
                checkpoint_id,
                str(paths.checkpoint_root(dir)),
                paths.notebook_key(notebook),
            )
        _remove_checkpoint_dir(folder)
        gc(nbdir, locked_already=True)
        push(dir, nbdir)
    return foreign


def foreign_reason(nbdir: Path, checkpoint_id: str) -> str:
    """Why a checkpoint is not provably this user's ("" when it is): its signature does
    not verify with this user's key (signed with another, unsigned, or no key here), or
    its manifest names another user."""
    key, key_problem = _load_key_for_listing()
    _, problem = examine(nbdir, checkpoint_id, key)
    if not signed_by_this_key(nbdir / checkpoint_id, key):
        if isinstance(problem, UntrustedCheckpoint):
            return problem.reason
        return str(key_problem or problem or "its signature does not match this user's key")
    if isinstance(problem, UntrustedCheckpoint) and problem.kind == "other-owner":
        return problem.reason
    return ""


def _remove_checkpoint_dir(folder: Path) -> None:
    # rename first so a half-deleted folder is never mistaken for a checkpoint
    trash = folder.parent / f"{TMP_PREFIX}del-{folder.name}-{os.getpid()}"
    os.rename(folder, trash)
    fsync_dir(folder.parent)  # a power cut must not bring back a checkpoint whose blobs GC frees
    shutil.rmtree(trash, ignore_errors=True)


#: the manifest metadata key that marks a checkpoint the server took by itself
#: (a workload class's ``autosave_every``), and how many of those are kept
AUTOSAVE = "autosave"
AUTOSAVES_KEPT = 1


def is_autosave(folder: Path) -> bool:
    """Whether the checkpoint in ``folder`` is an autosave (one whose manifest cannot be
    read counts as the user's own: it never falls into the autosaves' smaller budget)."""
    try:
        m = Manifest.from_bytes((folder / MANIFEST).read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return m.metadata.get(AUTOSAVE) is True


def autosave_would_replace(nbdir: Path, own: str | None) -> str | None:
    """The autosave that an autosave now would push out while it is the notebook's newest
    saved state and not ``own`` (the checkpoint this process last wrote or restored): the
    last state of another kernel, e.g. one that was killed. None when an autosave may go
    ahead: no checkpoint yet, the newest is one the user made (kept in their budget), or
    this process continues from it."""
    key, _ = _load_key_for_listing()
    ids = [cid for cid in checkpoint_ids(nbdir) if signed_by_this_key(nbdir / cid, key)]
    if not ids or ids[-1] == own or not is_autosave(nbdir / ids[-1]):
        return None
    return ids[-1]


def expired(
    ids: list[str],
    keep: int,
    holders: dict[str, set[str]],
    autosaves: frozenset[str] | set[str] = frozenset(),
) -> list[str]:
    """Which of ``ids`` (oldest first) retention deletes: all but the newest ``keep``,
    except a checkpoint that holds objects a kept one lost involuntarily (``holders``:
    id -> the ids its ``metadata.lost`` names), and, in turn, what such a one names.
    ``autosaves`` (ids among ``ids``) have a budget of their own, the newest
    :data:`AUTOSAVES_KEPT`, and never count against ``keep``."""
    own = [cid for cid in ids if cid not in autosaves]
    kept = set(own[-max(1, int(keep)) :]) if own else set()
    kept |= set([cid for cid in ids if cid in autosaves][-AUTOSAVES_KEPT:])
    todo = list(kept)
    while todo:
        for holder in holders.get(todo.pop(), ()):
            if holder in ids and holder not in kept:
                kept.add(holder)
                todo.append(holder)
    return [cid for cid in ids if cid not in kept]


def lost_of(metadata: dict[str, Any]) -> dict[str, str]:
    """What the checkpoint with this metadata lost involuntarily: name -> the checkpoint
    still holding it ("" where none holds a copy that verifies)."""
    lost = metadata.get(LOST)
    if not isinstance(lost, dict):
        return {}
    return {n: h for n, h in lost.items() if isinstance(n, str) and isinstance(h, str)}


def apply_retention(nbdir: Path, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` of the checkpoints signed with this user's key,
    and all but the newest :data:`AUTOSAVES_KEPT` autosaves (caller holds the lock):
    autosaves have a budget of their own, so that they never push out a checkpoint or a
    pause the user made. Never the newest one that holds objects a later checkpoint lost
    involuntarily (:func:`expired`). Others' checkpoints neither count nor expire."""
    key, _ = _load_key_for_listing()
    ids = [cid for cid in checkpoint_ids(nbdir) if signed_by_this_key(nbdir / cid, key)]
    holders = {}
    autosaves = set()
    for cid in ids:
        m, _problem = examine(nbdir, cid, key)  # damaged or not: keeping more is safe
        holders[cid] = set(lost_of(m.metadata).values()) - {""} if m is not None else set()
        if m is not None and m.metadata.get(AUTOSAVE) is True:
            autosaves.add(cid)
    doomed = expired(ids, keep, holders, autosaves)
    for cid in doomed:
        _remove_checkpoint_dir(nbdir / cid)
    return doomed


@dataclass
class Expiry:
    """What :func:`expire` did, each checkpoint as ``<notebook folder>/<id>``."""

    deleted: list[str] = field(default_factory=list)  # or would be, in a dry run
    kept: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # not signed with this user's key
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, list[str]]:
        return asdict(self)


def expire(dir, older_than: float, *, dry_run: bool = False, now: float | None = None) -> Expiry:
    """Delete this user's checkpoints older than ``older_than`` seconds under ``dir`` (a
    folder or a bucket), with the blobs no remaining checkpoint references.

    Only this user's part of the root is scanned (the root may be a volume several
    users share; their checkpoints are never ours to expire), and there only the
    checkpoints signed with this user's key (servers of one Unix user with their own
    keys may share it; the others are listed as ``foreign``). The newest checkpoint
    of each notebook is always kept: it is the way back for a paused session whose
    platform snapshot is gone.
    """
    out = Expiry()
    bucket = paths.bucket_of(dir)  # the bucket's checkpoints, mirrored
    if bucket is None and not paths.user_root(dir).is_dir():
        out.errors.append(f"{paths.user_root(dir)} is not a directory")
        return out
    now = time.time() if now is None else now
    for nbdir in notebook_folders(dir):
        if bucket is not None:
            pull(dir, nbdir)
        ids = []
        for cid in checkpoint_ids(nbdir):
            if foreign_reason(nbdir, cid):
                out.foreign.append(f"{nbdir.name}/{cid}")
            else:
                ids.append(cid)
        for cid in ids[:-1]:
            created = datetime.strptime(cid[:19], "%Y-%m-%dT%H-%M-%S")
            label = f"{nbdir.name}/{cid}"
            if now - created.replace(tzinfo=timezone.utc).timestamp() < older_than:
                out.kept.append(label)
                continue
            if dry_run:
                out.deleted.append(label)
                continue
            try:
                with locked(nbdir):
                    _remove_checkpoint_dir(nbdir / cid)
                    gc(nbdir, locked_already=True)
                out.deleted.append(label)
            except Exception as e:
                out.errors.append(f"{label}: {e}")
        if ids:
            out.kept.append(f"{nbdir.name}/{ids[-1]}")
        if bucket is not None and not dry_run:
            try:  # the deletions, then what crashed uploads left
                push(dir, nbdir)
            except Exception as e:
                out.errors.append(f"{nbdir.name}: {e}")
    return out


def referenced_files(nbdir: Path) -> set[str] | None:
    """Files referenced by any committed checkpoint; None if a manifest is unreadable
    (then GC must not delete anything it cannot prove unused)."""
    refs: set[str] = set()
    for cid in checkpoint_ids(nbdir):
        try:
            m = Manifest.from_bytes((nbdir / cid / MANIFEST).read_bytes())
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            return None
        refs.update(m.files)
    return refs


def gc(nbdir: Path, locked_already: bool = False, later: bool = False) -> int:
    """Remove blob files no checkpoint references and temp folders of dead writers.
    Returns the number of bytes freed.

    ``later``: the blobs are only moved out of ``blobs/`` now (a rename each, into a temp
    folder of this process), and deleted on a thread of their own: freeing a large
    file's blocks takes the filesystem about as long as an fsync (0.24 s for a GiB
    here), which a checkpoint need not wait for. Should the process end first, the
    next writer's GC removes the folder (its writer is dead)."""
    if not nbdir.is_dir():
        return 0
    ctx = contextlib.nullcontext() if locked_already else locked(nbdir)
    freed = 0
    with ctx:
        refs = referenced_files(nbdir)
        blobs = nbdir / BLOBS
        unused = []
        if refs is not None and blobs.is_dir():
            unused = [p for p in blobs.iterdir() if f"{BLOBS}/{p.name}" not in refs]
        trash = nbdir / f"{TMP_PREFIX}gc-{uuid.uuid4().hex[:8]}-{os.getpid()}"
        if later and unused:
            trash.mkdir()
        for p in unused:
            with contextlib.suppress(FileNotFoundError):
                freed += p.stat().st_size
                if later:
                    p.rename(trash / p.name)
                else:
                    p.unlink()
        if later and unused:
            threading.Thread(
                target=shutil.rmtree, args=(trash, True), name="jp-gc", daemon=True
            ).start()
        now = time.time()
        for p in nbdir.iterdir():
            if not p.name.startswith(TMP_PREFIX):
                continue
            pid = p.name.rsplit("-", 1)[-1]
            dead = pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid))
            with contextlib.suppress(OSError):
                old = now - p.stat().st_mtime > STALE_TMP_SECONDS
                if dead or old:
                    shutil.rmtree(p, ignore_errors=True)
    return freed


# ---------------------------------------------------------------- a bucket behind the folder
_FETCHING: dict[str, threading.Lock] = {}
_FETCHING_LOCK = threading.Lock()


def _remote(dir, nbdir: Path) -> remote.Remote | None:
    """The bucket mirror of the notebook folder ``nbdir``, or None (a plain folder)."""
    bucket = paths.bucket_of(dir)
    if bucket is None:
        return None
    return remote.Remote(bucket, f"{nbdir.parent.name}/{nbdir.name}")


def _signed(nbdir: Path) -> list[tuple[str, Manifest]]:
    """(id, manifest) of the checkpoints signed with this user's key, oldest first."""
    key, _ = _load_key_for_listing()
    out = []
    for cid in checkpoint_ids(nbdir):
        m, problem = examine(nbdir, cid, key)
        if m is not None and problem is None:
            out.append((cid, m))
    return out


def pull(dir, nbdir: Path) -> None:
    """Bring the small files (manifest, signature, pickle) of every checkpoint committed
    in the bucket and missing here into the folder, each checkpoint appearing at once
    (renamed from a temp folder).  Tensor files come with :func:`fetch`.  Nothing without
    a bucket."""
    mirror = _remote(dir, nbdir)
    if mirror is None:
        return
    listing = mirror.listing()
    have = set(checkpoint_ids(nbdir))
    missing = [cid for cid in remote.committed(listing) if cid not in have]
    if not missing:
        return
    makedirs(nbdir)
    for cid in missing:
        tmp = nbdir / f"{TMP_PREFIX}pull-{cid}-{os.getpid()}-{threading.get_ident()}"
        names = [n for n in (PICKLE, MANIFEST, SIGNATURE) if f"{cid}/{n}" in listing]
        mirror.download([(f"{cid}/{n}", listing[f"{cid}/{n}"].size, tmp / n) for n in names])
        try:
            os.rename(tmp, nbdir / cid)
        except OSError:  # another thread or process brought it first
            shutil.rmtree(tmp, ignore_errors=True)


def check_store(dir=None) -> None:
    """Raise :class:`RemoteStoreError` when the bucket behind the checkpoint root cannot
    be used now; nothing for a folder (it is made at the first checkpoint)."""
    bucket = paths.bucket_of(dir)
    if bucket is not None:
        remote.probe(bucket)


def notebook_folders(dir=None) -> list[Path]:
    """This user's notebook folders: those in the folder, and with a bucket behind it,
    those in the bucket too (a machine that never saw them has no folder yet)."""
    root = paths.user_root(dir)
    found = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    bucket = paths.bucket_of(dir)
    if bucket is not None:
        found |= set(remote.folders(bucket, root.name))
    return [root / name for name in sorted(found)]


@dataclass(frozen=True)
class Fetched:
    """What :func:`fetch` brought from the bucket: ``bytes`` downloaded, and the files it
    left for the caller to hash (``verify=False``)."""

    bytes: int = 0
    unverified: tuple[str, ...] = ()


def fetch(
    dir,
    nbdir: Path,
    checkpoint_id: str,
    progress=None,
    repair: bool = True,
    verify: bool = True,
    only: Iterable[str] | None = None,
) -> Fetched:
    """Download the tensor files of one checkpoint that the folder lacks (parallel ranged
    reads), each hashed whole before it is used: one that does not match its signed
    manifest is quarantined here and deleted from the bucket (a later pause uploads it
    anew) and raises :class:`CorruptCheckpoint`; with ``repair=False`` (a scrub, which
    only reads) it is left for the caller to find.  ``verify=False``: the caller hashes
    every tensor of the files as it reads them (an eager restore), so they are not hashed
    twice; it hands them to :func:`reject` if one fails.  ``only``: these files of the
    checkpoint, not all (a lazy restore, file by file as it reads them).  Nothing without
    a bucket."""
    mirror = _remote(dir, nbdir)
    if mirror is None:
        return Fetched()
    # one download at a time of each file (the server's read-ahead, the kernel's restore
    # and its lazy reader may ask at once), of different files at once
    key = str(nbdir) if only is None else f"{nbdir}:{','.join(sorted(only))}"
    with _FETCHING_LOCK:
        lock = _FETCHING.setdefault(key, threading.Lock())
    with lock:
        m = read_manifest(nbdir, checkpoint_id)
        todo = []
        for rel, entry in m.files.items():
            if only is not None and rel not in only:
                continue
            path = nbdir / rel
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_size == entry.bytes:
                    continue
            todo.append((rel, entry.bytes, path))
        if not todo:
            return Fetched()
        makedirs(nbdir / BLOBS)
        if progress is not None:
            progress.add_total(sum(size for _, size, _ in todo))
        mirror.download(todo, progress.update if progress is not None else None)
        got = Fetched(sum(size for _, size, _ in todo), tuple(rel for rel, _, _ in todo))
        if not repair or not verify:
            return got
        reject(dir, nbdir, checkpoint_id, got.unverified)
        return Fetched(got.bytes)


def headers(
    dir, nbdir: Path, m: Manifest, rels: Iterable[str]
) -> dict[str, tuple[int, bytes, dict]]:
    """The safetensors headers of files of ``m`` in the bucket, not here (yet): rel ->
    (data start offset, raw header bytes, parsed header), as
    :func:`read_safetensors_header`.  A header that does not match the signed manifest
    is deleted from the bucket (a later pause uploads the file anew) and raises
    :class:`CorruptCheckpoint`.  Nothing without a bucket."""
    mirror = _remote(dir, nbdir)
    if mirror is None:
        return {}

    def one(rel: str) -> tuple[int, bytes, dict]:
        (n,) = struct.unpack("<Q", mirror.read_range(rel, 0, 8))
        raw = mirror.read_range(rel, 8, 8 + min(n, 100_000_000))
        if xxhash.xxh3_128_hexdigest(raw) != m.files[rel].header_xxh3:
            mirror.delete([rel])
            raise CorruptCheckpoint(
                "tensor data", rel, f"header as stored in {mirror.bucket.url}; removed there"
            )
        return 8 + n, raw, json.loads(raw)

    rels = list(rels)
    with ThreadPoolExecutor(max(1, min(remote.PARALLEL, len(rels)))) as pool:
        return dict(zip(rels, pool.map(one, rels), strict=True))


def reject(dir, nbdir: Path, checkpoint_id: str, downloaded) -> None:
    """Hash whole the ``downloaded`` files of a checkpoint: one that does not match its
    signed manifest is quarantined here and deleted from the bucket (a later pause uploads
    it anew), and this raises :class:`CorruptCheckpoint`."""
    mirror = _remote(dir, nbdir)
    if mirror is None:
        return
    m = read_manifest(nbdir, checkpoint_id)
    bad = [rel for rel in downloaded if check_blob(nbdir / rel, m.files[rel], full=True)]
    for rel in bad:
        quarantine(nbdir, rel, f"downloaded from {mirror.bucket.url}, hash mismatch")
    _unpublish(mirror, bad)


def _unpublish(mirror: remote.Remote, bad: list[str]) -> None:
    """Files found damaged in the bucket: delete them there (the next pause uploads them
    anew) and raise :class:`CorruptCheckpoint`, so the restore falls back."""
    if bad:
        mirror.delete(bad)
        raise CorruptCheckpoint(
            "tensor data", ", ".join(bad), f"as stored in {mirror.bucket.url}; removed there"
        )


def stream(
    dir,
    nbdir: Path,
    m: Manifest,
    plan,
    buffers: dict[int, Any],
    progress=None,
    on_tensor: Callable[[int, str | None], None] | None = None,
    stopped: Callable[[], bool] | None = None,
) -> None:
    """Read files of ``m`` that the folder lacks from the bucket straight into memory:
    ``plan`` is :func:`tensors.plan_reads`'s (headers from :func:`headers`), in the order
    to read the files, ``buffers`` a flat uint8 array for each storage it names.  Each
    tensor is hashed against the signed manifest once its last byte is in (parallel
    ranged GETs come in any order); a file with one that does not match is deleted from
    the bucket and this raises :class:`CorruptCheckpoint`.  Nothing is written here:
    :func:`keep_copies` does, once the restore returned.

    ``on_tensor(i, why)`` (a lazy restore's reader) hears each storage's outcome as soon
    as it is known: ``why`` is None where it matched, else why not.  Each file then
    fails alone (one that does not download fails its storages not yet verified, and
    the others go on), and nothing is raised; a file with a tensor that does not match
    is still deleted from the bucket.  No GET starts once ``stopped()`` is true."""
    mirror = _remote(dir, nbdir)
    files = {rel: [(pos, buffers[i]) for pos, i in items] for _path, rel, items in plan}
    indices = {rel: [i for _pos, i in items] for _path, rel, items in plan}
    left = {rel: [len(buffers[i]) for i in idx] for rel, idx in indices.items()}
    bad: set[str] = set()
    told: set[int] = set()
    lock = threading.Lock()

    def tell(i: int, why: str | None) -> None:
        with lock:  # once: a file that failed may still complete a tensor in flight
            if i in told:
                return
            told.add(i)
        on_tensor(i, why)

    def check(rel: str, k: int) -> None:
        i = indices[rel][k]
        s = m.storages[i]
        ok = xxhash.xxh3_128_hexdigest(memoryview(buffers[i])) == s.xxh3
        if not ok:
            with lock:
                bad.add(rel)
        if on_tensor is not None:
            where = f"as stored in {mirror.bucket.url}; removed there"
            tell(
                i, None if ok else str(CorruptCheckpoint(s.owner, rel, f"tensor {s.key!r} {where}"))
            )

    def on_part(rel: str, filled) -> None:
        complete = []
        with lock:
            for k, n in filled:
                left[rel][k] -= n
                if not left[rel][k]:
                    complete.append(k)
        for k in complete:
            check(rel, k)
        if progress is not None:
            progress.update(sum(n for _, n in filled))

    def on_failed(rel: str, error: RemoteStoreError) -> None:
        for i in indices[rel]:
            tell(i, str(error))

    if progress is not None:
        progress.add_total(sum(sum(sizes) for sizes in left.values()))
    for rel, sizes in left.items():  # empty tensors: no GET fills them
        for k in (k for k, n in enumerate(sizes) if not n):
            check(rel, k)
    if on_tensor is None:
        mirror.read_into(files, on_part)
        _unpublish(mirror, sorted(bad))
        return
    mirror.read_into(files, on_part, on_failed=on_failed, stopped=stopped)
    mirror.delete(sorted(bad))  # the next pause uploads them anew


@dataclass(frozen=True)
class Copy:
    """A file a restore read straight from the bucket into memory, to be written here
    (:func:`keep_copies`): its manifest entry, its raw safetensors header and, for each
    of its tensors, ``(data offset, tensor key, flat uint8 array)``."""

    rel: str
    entry: FileEntry
    header: bytes
    tensors: list[tuple[int, str, Any]]


# notebook folder -> the threads writing copies there (keep_copies, wait_for_copies)
_COPYING: dict[str, list[threading.Thread]] = {}
_COPYING_LOCK = threading.Lock()
COPY_CHUNK = 8 << 20  # bytes staged, hashed and written at a time


def keep_copies(nbdir: Path, copies: Iterable[Copy]) -> None:
    """Write, on a thread of its own, the local copy of files a restore read straight from
    the bucket (:func:`stream`), so that the restore returns at the speed of the download
    and the next checkpoint or restore on this machine still finds them here.  The next
    checkpoint of this process waits for it (:func:`wait_for_copies`).  ``copies`` may
    block until its next file is read (a lazy restore's, from its reader's thread)."""
    if not copies:
        return
    thread = threading.Thread(
        target=_write_copies, args=(nbdir, copies), name="jp-copies", daemon=True
    )
    with _COPYING_LOCK:
        _COPYING.setdefault(str(nbdir), []).append(thread)
    thread.start()


def wait_for_copies(nbdir: Path) -> None:
    """Return once the copies :func:`keep_copies` is writing into ``nbdir`` are written."""
    with _COPYING_LOCK:
        threads = _COPYING.pop(str(nbdir), [])
    for thread in threads:
        thread.join()


def _write_copies(nbdir: Path, copies: list[Copy]) -> None:
    for copy in copies:
        try:
            with locked(nbdir, shared=True):  # a GC cannot take it away half written
                makedirs(nbdir / BLOBS)
                _write_copy(nbdir, copy)
        except Exception:  # a cache: a restore downloads, and a checkpoint writes, what
            continue  # it lacks (a full disk, a tensor changed since it was restored)


def _write_copy(nbdir: Path, copy: Copy) -> None:
    """One file, written as a checkpoint writes its own (a temp file, fsynced, renamed,
    the folder fsynced) from a staging buffer, each tensor hashed as it is staged: a
    tensor the kernel changed meanwhile does not match its signed hash, and the file is
    not kept."""
    path, entry = nbdir / copy.rel, copy.entry
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size == entry.bytes:
            return  # another restore, or the server's read-ahead, brought it
    tmp = path.with_name(f"{path.name}.part-{os.getpid()}-{threading.get_ident()}")
    stage = memoryview(bytearray(COPY_CHUNK))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, entry.bytes)
        _pwrite_all(fd, memoryview(struct.pack("<Q", len(copy.header)) + copy.header), 0)
        for pos, key, arr in copy.tensors:
            src = memoryview(arr).cast("B")
            h = xxhash.xxh3_128()
            for off in range(0, len(src), COPY_CHUNK):
                part = stage[: min(COPY_CHUNK, len(src) - off)]
                part[:] = src[off : off + len(part)]
                h.update(part)
                _pwrite_all(fd, part, pos + off)
            if h.hexdigest() != entry.tensors[key]:
                raise ValueError(f"tensor {key!r} changed since it was restored")
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    remember_verified(path)


def _pwrite_all(fd: int, view: memoryview, pos: int) -> None:
    while len(view):
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n


def uploads(dir, nbdir: Path) -> remote.Uploads | None:
    """With a bucket behind the folder, a background upload of the blobs of a checkpoint
    being written (:attr:`Transaction.on_staged`), so that it overlaps the writing;
    :func:`push` then sends what is still missing and commits.  None without a bucket."""
    mirror = _remote(dir, nbdir)
    return None if mirror is None else mirror.uploads()


def push(
    dir,
    nbdir: Path,
    progress=None,
    grace=remote.SWEEP_GRACE,
    *,
    only: str | None = None,
    pace: remote.Pace | None = None,
) -> list[str]:
    """Make the bucket hold what the folder holds: upload each signed checkpoint it
    lacks (tensor files it does not have yet, the pickle, the manifest, smallest first,
    then, once all of them are listed back with their sizes, the signature: the commit),
    delete the checkpoints the folder no longer has (retention, delete: signature first),
    then sweep what crashed uploads left (older than ``grace``).  An autosave a newer
    checkpoint here supersedes is not sent (a background save not staged before the next
    one).  ``only``: upload that checkpoint alone (the others stay in the folder only).
    ``pace``: how the uploads
    share the link (:class:`remote.Pace`; its ``stop`` is heard before the commit too).
    Returns the ids uploaded.  Raises :class:`RemoteStoreError`; the folder is left as it
    was."""
    mirror = _remote(dir, nbdir)
    if mirror is None:
        return []
    listing = mirror.listing()
    in_bucket = set(remote.committed(listing))
    uploaded = []
    signed = _signed(nbdir)
    newest = signed[-1][0] if signed else None
    for cid, m in signed:
        if cid in in_bucket or (only is not None and cid != only):
            continue
        if cid != newest and m.metadata.get(AUTOSAVE) is True:
            continue  # superseded before it was staged: nobody resumes it
        try:
            check_complete(nbdir, m)
        except CheckpointError:  # only its small files are here (a rename's re-bind
            continue  # of what was pulled): there is nothing whole to upload
        files = _missing(nbdir, cid, m, listing)
        if progress is not None:
            progress.add_total(sum(size for _, size in files))
        mirror.upload(
            [(n, nbdir / n) for n, _ in files], progress.update if progress else None, pace
        )
        after = mirror.listing()
        short = [
            n
            for n in [*m.files, f"{cid}/{PICKLE}", f"{cid}/{MANIFEST}"]
            if n not in after or after[n].size != (nbdir / n).stat().st_size
        ]
        if short:
            raise RemoteStoreError(
                mirror.bucket.url,
                "verify the upload",
                f"missing or short after upload: {', '.join(short)}",
            )
        mirror.upload([(f"{cid}/{SIGNATURE}", nbdir / cid / SIGNATURE)], pace=pace)
        uploaded.append(cid)
        listing = after
    here = set(checkpoint_ids(nbdir))
    for cid in sorted(in_bucket - here):
        mirror.delete([f"{cid}/{SIGNATURE}"])  # uncommitted first: never half a checkpoint
        mirror.delete([n for n in listing if n.startswith(f"{cid}/") and not n.endswith(SIGNATURE)])
    # this writer holds the notebook's lock: a blob no manifest here names is garbage now
    sweep(dir, nbdir, grace, blob_grace=timedelta(0))
    return uploaded


def _missing(nbdir: Path, cid: str, m: Manifest, listing) -> list[tuple[str, int]]:
    """The files of checkpoint ``cid`` (manifest ``m``) the bucket's ``listing`` lacks
    (or holds with another size), with their sizes, smallest first: its pickle and
    manifest always (small; its signature is the commit, sent apart)."""
    names = [
        rel for rel in m.files if rel not in listing or listing[rel].size != m.files[rel].bytes
    ]
    names += [f"{cid}/{PICKLE}", f"{cid}/{MANIFEST}"]
    return sorted(((n, (nbdir / n).stat().st_size) for n in names), key=lambda f: f[1])


@dataclass(frozen=True)
class Delta:
    """What the bucket lacks of a checkpoint written here: its files (name, bytes),
    smallest first; none once it is committed there."""

    checkpoint: str
    time: str  # when it was written (ISO 8601 UTC)
    files: tuple[tuple[str, int], ...] = ()

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.files)


def delta(dir, nbdir: Path) -> Delta | None:
    """The newest checkpoint signed here and what of it the bucket lacks (one listing);
    None without a bucket, or without a whole signed checkpoint here."""
    mirror = _remote(dir, nbdir)
    if mirror is None:
        return None
    return _delta(nbdir, mirror.listing())


def _delta(nbdir: Path, listing) -> Delta | None:
    signed = _signed(nbdir)
    if not signed:
        return None
    cid, m = signed[-1]
    if cid in remote.committed(listing):
        return Delta(cid, m.created)
    try:
        check_complete(nbdir, m)
    except CheckpointError:
        return None
    return Delta(cid, m.created, tuple(_missing(nbdir, cid, m, listing)))


def stage(
    dir,
    nbdir: Path,
    pace: remote.Pace | None = None,
    on_file=None,
    lock_timeout=30.0,
    wanted: Delta | None = None,
) -> Delta | None:
    """Put the newest checkpoint written here in the bucket, if it lacks it (a background
    save's, or a stopping server's last): its files first, smallest first, without the
    notebook's lock (they are content-addressed or its own, and no writer removes them
    while the checkpoint is here), so that a checkpoint of the kernel meanwhile is never
    kept waiting; then, under the lock, what the bucket still lacks and the signature (the
    commit), with :func:`push`'s deletions (:func:`pull` first: the folder then counts the
    bucket's checkpoints).  ``on_file(bytes)`` hears each file once it is up; ``wanted``:
    the :func:`delta` the caller measured just before.  Returns the :class:`Delta` it
    started from (None: nothing here to stage).  Raises
    :class:`RemoteStoreError`, :class:`remote.Stopped` (``pace.stop``), or
    :class:`StoreBusy` when the lock stays taken ``lock_timeout`` seconds."""
    mirror = _remote(dir, nbdir)
    if mirror is None:
        return None
    if wanted is None:
        wanted = _delta(nbdir, mirror.listing())
    if wanted is None or not wanted.files:
        return wanted
    mirror.upload([(n, nbdir / n) for n, _ in wanted.files], on_file, pace)
    with locked(nbdir, timeout=lock_timeout):
        pull(dir, nbdir)
        push(dir, nbdir, only=wanted.checkpoint, pace=pace)
    return wanted


def sweep(dir, nbdir: Path, grace=remote.SWEEP_GRACE, blob_grace=None) -> list[str]:
    """Delete from the bucket what no committed checkpoint needs: files of checkpoints
    never committed (older than ``grace``), blobs no manifest here references (older
    than ``blob_grace``, default ``grace``), multipart uploads a dead writer left
    unfinished (begun more than ``grace`` ago).  Returns the names deleted."""
    mirror = _remote(dir, nbdir)
    if mirror is None:
        return []
    refs = referenced_files(nbdir)
    if refs is None:  # a manifest here is unreadable: prove nothing unused
        return []
    doomed = remote.leftovers(mirror.listing(), refs, grace, blob_grace)
    mirror.delete(doomed)
    unfinished = remote.abort_unfinished(mirror.bucket, mirror.rel, grace)
    return doomed + [f"{name} (unfinished multipart upload)" for name in unfinished]


# ---------------------------------------------------------------- writing
class Transaction:
    """A checkpoint being written: files go into a temp folder, ``commit`` makes it visible.

    The caller holds the notebook lock for the whole transaction.
    """

    def __init__(self, nbdir: Path, checkpoint_id: str | None = None):
        self.nbdir = nbdir
        try:
            makedirs(nbdir / BLOBS)
        except OSError as e:
            from .errors import DiskError

            raise DiskError(str(nbdir), e) from e
        self.id = checkpoint_id or new_id(nbdir)
        self.tmp = nbdir / f"{TMP_PREFIX}{self.id}-{os.getpid()}"
        os.mkdir(self.tmp, 0o700)
        os.mkdir(self.tmp / "staged", 0o700)
        self.staged: list[str] = []  # blob names staged for blobs/
        #: ``on_staged(rel, path)`` hears each blob once staged (fsynced, final name): a
        #: bucket's background upload (remote.Uploads.add)
        self.on_staged: Callable[[str, Path], None] | None = None
        self.done = False

    def staging_path(self, name: str) -> Path:
        return self.tmp / "staged" / name

    def stage_blob(self, tmp_name: str, final_name: str) -> str:
        """Rename a fully written, fsynced file to its content-addressed staged name."""
        os.rename(self.staging_path(tmp_name), self.staging_path(final_name))
        self.staged.append(final_name)
        rel = f"{BLOBS}/{final_name}"
        if self.on_staged is not None:
            self.on_staged(rel, self.staging_path(final_name))
        return rel

    def commit(self, manifest: Manifest) -> Path:
        key = signing.load_key()
        manifest.owner = manifest.owner or paths.owner()
        data = manifest.to_bytes()
        write_file_synced(self.tmp / MANIFEST, data)
        write_file_synced(self.tmp / SIGNATURE, signing.sign_manifest(data, key).to_bytes())
        fsync_dir(self.tmp / "staged")
        fsync_dir(self.tmp)
        blobs = self.nbdir / BLOBS
        for name in self.staged:
            dest = blobs / name
            entry = manifest.files[f"{BLOBS}/{name}"]
            if dest.exists():
                # same content address: keep the file there only if it is intact
                why = check_blob(dest, entry)
                if why is None:
                    os.unlink(self.staging_path(name))
                    continue
                quarantine(self.nbdir, f"{BLOBS}/{name}", why)
            os.rename(self.staging_path(name), dest)
            remember_verified(dest)  # hashed as it was written
        fsync_dir(blobs)
        os.rmdir(self.tmp / "staged")
        final = self.nbdir / self.id
        os.rename(self.tmp, final)
        fsync_dir(self.nbdir)
        self.done = True
        return final

    def abort(self) -> None:
        if not self.done:
            shutil.rmtree(self.tmp, ignore_errors=True)
