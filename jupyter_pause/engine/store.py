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
import os
import shutil
import struct
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import xxhash

from . import paths, signing
from .errors import (
    CheckpointError,
    CheckpointNotFound,
    CorruptCheckpoint,
    UntrustedCheckpoint,
)
from .manifest import BLOBS, MANIFEST, PICKLE, SIGNATURE, Manifest

TMP_PREFIX = ".tmp-"
STALE_TMP_SECONDS = 6 * 3600
LOCK_TIMEOUT = 300.0
CHUNK = 1 << 24  # 16 MiB reads when hashing


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


# ---------------------------------------------------------------- small fs helpers
def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_synced(path: Path, data: bytes) -> None:
    with open(path, "xb", buffering=0) as f:
        view = memoryview(data)
        while view:
            n = f.write(view)
            view = view[n:]
        os.fsync(f.fileno())


@contextlib.contextmanager
def locked(nbdir: Path, shared: bool = False, timeout: float = LOCK_TIMEOUT):
    """flock on ``<nbdir>/.lock``: exclusive for writers (checkpoint, delete), shared for readers."""
    nbdir.mkdir(parents=True, exist_ok=True)
    fd = os.open(nbdir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CheckpointError(
                        f"another process has held {nbdir / '.lock'} for {timeout:.0f} s "
                        "(a checkpoint in progress?). Wait for it, or stop that kernel."
                    ) from None
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


# ---------------------------------------------------------------- manifests
def read_manifest(
    nbdir: Path, checkpoint_id: str, trust: bool = False, key: bytes | None = None
) -> Manifest:
    """Load a manifest; unless ``trust``, its signature must verify with this user's key."""
    folder = checkpoint_path(nbdir, checkpoint_id)
    try:
        data = (folder / MANIFEST).read_bytes()
    except FileNotFoundError:
        raise CheckpointNotFound(checkpoint_id, str(nbdir)) from None
    if not trust:
        try:
            sig = (folder / SIGNATURE).read_text()
        except FileNotFoundError:
            raise UntrustedCheckpoint(str(folder), "it has no signature (manifest.sig)") from None
        if not signing.verify(data, sig, key):
            raise UntrustedCheckpoint(
                str(folder), "its signature does not match this user's key (tampered or foreign)"
            )
    try:
        return Manifest.from_bytes(data)
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpoint("manifest", str(folder / MANIFEST), str(e)) from None


def _is_trusted(folder: Path, key: bytes | None) -> bool:
    try:
        return signing.verify(
            (folder / MANIFEST).read_bytes(), (folder / SIGNATURE).read_text(), key
        )
    except (OSError, UnicodeDecodeError):  # missing or mangled signature: not trusted
        return False


def _info(nbdir: Path, m: Manifest, trusted: bool) -> CheckpointInfo:
    return CheckpointInfo(
        id=m.id,
        time=m.created,
        bytes=m.bytes_total + m.pickle.bytes,
        objects=sorted(m.objects),
        path=str(nbdir / m.id),
        notebook=m.notebook,
        trusted=trusted,
        metadata=dict(m.metadata),
        skipped=dict(m.skipped),
        bytes_written=m.bytes_written,
    )


def list_checkpoints(dir=None, notebook: str | None = None) -> list[CheckpointInfo]:
    """All committed checkpoints of a notebook, oldest first.

    Unsigned/tampered ones are listed with ``trusted=False`` (the listing reads
    only JSON, which is safe); unreadable ones are left out.
    """
    nbdir = paths.notebook_dir(dir, notebook)
    key = signing.load_key(create=False)
    out = []
    for cid in checkpoint_ids(nbdir):
        folder = nbdir / cid
        try:
            m = Manifest.from_bytes((folder / MANIFEST).read_bytes())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append(_info(nbdir, m, _is_trusted(folder, key)))
    return out


def get_manifest(
    dir=None, notebook: str | None = None, checkpoint_id: str | None = None, trust: bool = False
) -> Manifest:
    """The manifest of one checkpoint (the latest if no id), signature verified."""
    nbdir = paths.notebook_dir(dir, notebook)
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
    key = signing.load_key(create=False)
    for cid in reversed(checkpoint_ids(nbdir)):
        try:
            m = read_manifest(nbdir, cid, trust=trust, key=key)
            check_complete(nbdir, m)
            if verify:
                verify_manifest(nbdir, m)
        except CheckpointError:
            continue
        return _info(nbdir, m, True if not trust else _is_trusted(nbdir / cid, key))
    return None


# ---------------------------------------------------------------- verification
def read_safetensors_header(path: Path) -> tuple[int, bytes, dict]:
    """(data start offset, raw header bytes, parsed header) of a safetensors file, torch-free."""
    with open(path, "rb") as f:
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


def check_complete(nbdir: Path, m: Manifest, names=None) -> None:
    """Cheap completeness check: every needed file exists with the recorded size."""
    folder = nbdir / m.id
    need = set(m.files) if names is None else m.files_of(names)
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


def verify_file(nbdir: Path, m: Manifest, rel: str) -> None:
    """Hash one safetensors file (header and every tensor) against the manifest."""
    entry = m.files[rel]
    path = nbdir / rel
    owners = ", ".join(m.owners_of_file(rel)) or rel
    try:
        start, raw, header = read_safetensors_header(path)
    except FileNotFoundError:
        raise CorruptCheckpoint(owners, str(path), "missing") from None
    except ValueError as e:
        raise CorruptCheckpoint(owners, str(path), str(e)) from None
    if xxhash.xxh3_128_hexdigest(raw) != entry.header_xxh3:
        raise CorruptCheckpoint(owners, str(path), "header changed")
    by_key = {s.key: s.owner for s in m.storages if s.file == rel}
    with open(path, "rb") as f:
        for k, digest in entry.tensors.items():
            b, e = header[k]["data_offsets"]
            if hash_range(f, start + b, e - b) != digest:
                owner = by_key.get(k, "unreferenced data")
                raise CorruptCheckpoint(owner, str(path), f"tensor {k!r}")


def verify_manifest(nbdir: Path, m: Manifest, names=None, trust: bool = False) -> None:
    check_complete(nbdir, m, names)
    verify_pickle(nbdir, m, trust=trust)
    need = set(m.files) if names is None else m.files_of(names)
    for rel in sorted(need):
        verify_file(nbdir, m, rel)


def verify_checkpoint(
    dir=None, notebook: str | None = None, checkpoint_id: str | None = None, trust: bool = False
) -> Manifest:
    """Check the signature and every hash of a checkpoint; raises CorruptCheckpoint naming the
    object, UntrustedCheckpoint, or CheckpointNotFound. Returns the manifest when all is well."""
    nbdir = paths.notebook_dir(dir, notebook)
    m = get_manifest(dir, notebook, checkpoint_id, trust=trust)
    verify_manifest(nbdir, m, trust=trust)
    return m


# ---------------------------------------------------------------- delete, retention, GC
def delete_checkpoint(dir=None, notebook: str | None = None, checkpoint_id: str = "") -> None:
    nbdir = paths.notebook_dir(dir, notebook)
    folder = checkpoint_path(nbdir, checkpoint_id)
    with locked(nbdir):
        if not folder.is_dir():
            raise CheckpointNotFound(checkpoint_id, str(nbdir))
        _remove_checkpoint_dir(folder)
        gc(nbdir, locked_already=True)


def _remove_checkpoint_dir(folder: Path) -> None:
    # rename first so a half-deleted folder is never mistaken for a checkpoint
    trash = folder.parent / f"{TMP_PREFIX}del-{folder.name}-{os.getpid()}"
    os.rename(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def apply_retention(nbdir: Path, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` checkpoints (caller holds the lock)."""
    keep = max(1, int(keep))
    ids = checkpoint_ids(nbdir)
    doomed = ids[:-keep] if len(ids) > keep else []
    for cid in doomed:
        _remove_checkpoint_dir(nbdir / cid)
    return doomed


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gc(nbdir: Path, locked_already: bool = False) -> int:
    """Remove blob files no checkpoint references and temp folders of dead writers.
    Returns the number of bytes freed."""
    if not nbdir.is_dir():
        return 0
    ctx = contextlib.nullcontext() if locked_already else locked(nbdir)
    freed = 0
    with ctx:
        refs = referenced_files(nbdir)
        blobs = nbdir / BLOBS
        if refs is not None and blobs.is_dir():
            for p in blobs.iterdir():
                rel = f"{BLOBS}/{p.name}"
                if rel not in refs:
                    with contextlib.suppress(FileNotFoundError):
                        freed += p.stat().st_size
                        p.unlink()
        now = time.time()
        for p in nbdir.iterdir():
            if not p.name.startswith(TMP_PREFIX):
                continue
            pid = p.name.rsplit("-", 1)[-1]
            dead = pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid))
            with contextlib.suppress(OSError):
                old = now - p.stat().st_mtime > STALE_TMP_SECONDS
                if dead or old:
                    shutil.rmtree(p, ignore_errors=True)
    return freed


# ---------------------------------------------------------------- writing
class Transaction:
    """A checkpoint being written: files go into a temp folder, ``commit`` makes it visible.

    The caller holds the notebook lock for the whole transaction.
    """

    def __init__(self, nbdir: Path, checkpoint_id: str | None = None):
        self.nbdir = nbdir
        try:
            nbdir.mkdir(parents=True, exist_ok=True)
            (nbdir / BLOBS).mkdir(exist_ok=True)
        except OSError as e:
            from .errors import DiskError

            raise DiskError(str(nbdir), e) from e
        self.id = checkpoint_id or new_id(nbdir)
        self.tmp = nbdir / f"{TMP_PREFIX}{self.id}-{os.getpid()}"
        self.tmp.mkdir()
        (self.tmp / "staged").mkdir()
        self.staged: list[str] = []  # blob names staged for blobs/
        self.done = False

    def staging_path(self, name: str) -> Path:
        return self.tmp / "staged" / name

    def stage_blob(self, tmp_name: str, final_name: str) -> str:
        """Rename a fully written, fsynced file to its content-addressed staged name."""
        os.rename(self.staging_path(tmp_name), self.staging_path(final_name))
        self.staged.append(final_name)
        return f"{BLOBS}/{final_name}"

    def commit(self, manifest: Manifest, pickle_file: str = PICKLE) -> Path:
        key = signing.load_key()
        data = manifest.to_bytes()
        write_file_synced(self.tmp / MANIFEST, data)
        write_file_synced(self.tmp / SIGNATURE, signing.sign(data, key).encode())
        fsync_dir(self.tmp / "staged")
        fsync_dir(self.tmp)
        blobs = self.nbdir / BLOBS
        for name in self.staged:
            dest = blobs / name
            if dest.exists():  # same content already there (content-addressed)
                os.unlink(self.staging_path(name))
            else:
                os.rename(self.staging_path(name), dest)
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


def is_enospc(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno == errno.ENOSPC
