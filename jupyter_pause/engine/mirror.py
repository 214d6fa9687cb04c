"""A notebook folder's mirror in a bucket: pull, fetch, stream, push, stage (the
delta) and sweep. Stands on ``checks``; ``plan`` and ``store`` stand on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import xxhash

from . import checks, paths, remote
from .durable import fsync_dir, makedirs
from .errors import (
    CheckpointError,
    CorruptCheckpoint,
    RemoteStoreError,
)
from .manifest import (
    BLOBS,
    MANIFEST,
    PICKLE,
    SIGNATURE,
    FileEntry,
    Manifest,
)

# ---------------------------------------------------------------- a bucket behind the folder
_FETCHING: dict[str, threading.Lock] = {}
_FETCHING_LOCK = threading.Lock()


def _bucket(dir) -> paths.Bucket | None:
    """The bucket behind the checkpoint root ``dir`` (a :class:`paths.CheckpointRoot`
    where the caller resolved it already), or None (a plain folder)."""
    return paths.root_of(dir).bucket


def _remote(dir, nbdir: Path) -> remote.Remote | None:
    """The bucket mirror of the notebook folder ``nbdir``, or None (a plain folder)."""
    bucket = _bucket(dir)
    if bucket is None:
        return None
    return remote.Remote(bucket, f"{nbdir.parent.name}/{nbdir.name}")


def _signed(nbdir: Path) -> list[tuple[str, Manifest]]:
    """(id, manifest) of the checkpoints signed with this user's key, oldest first."""
    key, _ = checks.load_key_for_listing()
    out = []
    for cid in checks.checkpoint_ids(nbdir):
        m, problem = checks.examine(nbdir, cid, key)
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
    have = set(checks.checkpoint_ids(nbdir))
    missing = [cid for cid in remote.committed(listing) if cid not in have]
    if not missing:
        return
    makedirs(nbdir)
    for cid in missing:
        tmp = nbdir / f"{checks.TMP_PREFIX}pull-{cid}-{os.getpid()}-{threading.get_ident()}"
        names = [n for n in (PICKLE, MANIFEST, SIGNATURE) if f"{cid}/{n}" in listing]
        mirror.download([(f"{cid}/{n}", listing[f"{cid}/{n}"].size, tmp / n) for n in names])
        try:
            os.rename(tmp, nbdir / cid)
        except OSError:  # another thread or process brought it first
            shutil.rmtree(tmp, ignore_errors=True)


def check_store(dir=None) -> None:
    """Raise :class:`RemoteStoreError` when the bucket behind the checkpoint root cannot
    be used now; nothing for a folder (it is made at the first checkpoint)."""
    bucket = _bucket(dir)
    if bucket is not None:
        remote.probe(bucket)


def notebook_folders(dir=None) -> list[Path]:
    """This user's notebook folders: those in the folder, and with a bucket behind it,
    those in the bucket too (a machine that never saw them has no folder yet)."""
    root = paths.root_of(dir)
    folder = root.user_root()
    found = {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()
    if root.bucket is not None:
        found |= set(remote.folders(root.bucket, folder.name))
    return [folder / name for name in sorted(found)]


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
        m = checks.read_manifest(nbdir, checkpoint_id)
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
    m = checks.read_manifest(nbdir, checkpoint_id)
    bad = [rel for rel in downloaded if checks.check_blob(nbdir / rel, m.files[rel], full=True)]
    for rel in bad:
        checks.quarantine(nbdir, rel, f"downloaded from {mirror.bucket.url}, hash mismatch")
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
            with checks.locked(nbdir, shared=True):  # a GC cannot take it away half written
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
    checks.remember_verified(path)


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
        if cid != newest and m.metadata.get(checks.AUTOSAVE) is True:
            continue  # superseded before it was staged: nobody resumes it
        try:
            checks.check_complete(nbdir, m)
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
    here = set(checks.checkpoint_ids(nbdir))
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
        checks.check_complete(nbdir, m)
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
    with checks.locked(nbdir, timeout=lock_timeout):
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
    refs = checks.referenced_files(nbdir)
    if refs is None:  # a manifest here is unreadable: prove nothing unused
        return []
    doomed = remote.leftovers(mirror.listing(), refs, grace, blob_grace)
    mirror.delete(doomed)
    unfinished = remote.abort_unfinished(mirror.bucket, mirror.rel, grace)
    return doomed + [f"{name} (unfinished multipart upload)" for name in unfinished]
