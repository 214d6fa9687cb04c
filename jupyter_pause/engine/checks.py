"""Checkpoint ids, manifests, signatures, verification, locks and GC: the bottom layer
of the checkpoint store (``mirror``, ``plan`` and ``store`` stand on it).

Importable without torch (and without numpy), as ``store`` is.
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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import xxhash

from ..processes import pid_alive
from . import paths, signing
from .durable import fsync_dir, makedirs
from .errors import (
    CheckpointError,
    CheckpointNotFound,
    CorruptCheckpoint,
    KeyProblem,
    StoreBusy,
    UnsafeFolder,
    UntrustedCheckpoint,
)
from .manifest import (
    BLOBS,
    MANIFEST,
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


def load_key_for_listing() -> tuple[bytes | None, CheckpointError | None]:
    try:
        return signing.load_key(create=False), None
    except KeyProblem as e:
        return None, e


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


def quarantined(nbdir: Path) -> list[str]:
    """Files found damaged and moved aside (with a ``.why`` next to each)."""
    qdir = nbdir / QUARANTINE
    if not qdir.is_dir():
        return []
    return sorted(p.name for p in qdir.iterdir() if not p.name.endswith(".why"))


#: the manifest metadata key that marks a checkpoint the server took by itself
#: (a workload class's ``autosave_every``), and how many of those are kept
AUTOSAVE = "autosave"


def is_autosave(folder: Path) -> bool:
    """Whether the checkpoint in ``folder`` is an autosave (one whose manifest cannot be
    read counts as the user's own: it never falls into the autosaves' smaller budget)."""
    try:
        m = Manifest.from_bytes((folder / MANIFEST).read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return m.metadata.get(AUTOSAVE) is True


# ---------------------------------------------------------------- GC
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
