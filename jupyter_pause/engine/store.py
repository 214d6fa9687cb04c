"""The on-disk checkpoint store: the atomic commit, listing, retention and delete.

It stands on ``checks`` (ids, the lock, manifests, signatures, verification, GC) and
``mirror`` (a bucket behind the folder); ``plan`` (the resume's choice, reading ahead)
stands on the same two. No layer imports one above it.

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

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import checks, mirror, paths, signing
from .durable import fsync_dir, makedirs
from .errors import (
    CheckpointError,
    CheckpointNotFound,
    ForeignCheckpoint,
    KeyProblem,
    UntrustedCheckpoint,
)
from .manifest import (
    BLOBS,
    MANIFEST,
    SIGNATURE,
    Manifest,
)

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


def _folder(dir, notebook: str | None) -> tuple[paths.CheckpointRoot, Path]:
    """The checkpoint root ``dir``, resolved once for the call, and the folder of
    ``notebook`` in it; what the call hands down gets the root, not ``dir``."""
    root = paths.root_of(dir)
    return root, root.notebook_dir(notebook)


def list_checkpoints(
    dir=None, notebook: str | None = None, *, here_only: bool = False
) -> list[CheckpointInfo]:
    """All committed checkpoints of a notebook, oldest first; ``here_only``: those in the
    folder (a bucket's cache) without asking the bucket.

    Reads only JSON (safe whoever wrote it) and never raises for one bad checkpoint:
    unsigned, foreign, replayed or damaged ones are listed with ``trusted=False``,
    ``status`` "untrusted" or "damaged" and the reason in ``problem``. Only the
    manifest is checked here; ``scrub`` hashes the data too."""
    root, nbdir = _folder(dir, notebook)
    if not here_only:
        mirror.pull(root, nbdir)
    return list_folder(nbdir)


def list_folder(nbdir: Path) -> list[CheckpointInfo]:
    """The committed checkpoints of the notebook folder ``nbdir``, oldest first (as
    :func:`list_checkpoints`)."""
    key, key_problem = checks.load_key_for_listing()
    out = []
    for cid in checks.checkpoint_ids(nbdir):
        m, problem = checks.examine(nbdir, cid, key)
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
    root, nbdir = _folder(dir, notebook)
    if not synced:
        mirror.pull(root, nbdir)
    if checkpoint_id is None:
        ids = checks.checkpoint_ids(nbdir)
        if not ids:
            raise CheckpointNotFound(None, str(nbdir))
        checkpoint_id = ids[-1]
    elif not paths.is_checkpoint_id(checkpoint_id):
        raise CheckpointNotFound(checkpoint_id, str(nbdir))
    return checks.read_manifest(nbdir, checkpoint_id, trust=trust)


def latest_checkpoint(
    dir=None, notebook: str | None = None, verify: bool = False, trust: bool = False
) -> CheckpointInfo | None:
    """The newest checkpoint that is signed, complete (all files present, right sizes) and,
    with ``verify=True``, whose every hash checks out. None if there is none."""
    _, nbdir = _folder(dir, notebook)
    key, _ = checks.load_key_for_listing()
    newest = _newest_complete(nbdir, key, verify, trust)
    if newest is None:
        return None
    cid, m = newest
    return _info(nbdir, cid, m, None if not trust else checks.examine(nbdir, cid, key)[1])


def _newest_complete(
    nbdir: Path, key, verify: bool = False, trust: bool = False
) -> tuple[str, Manifest] | None:
    """(id, manifest) of the newest checkpoint that is signed and complete (and, with
    ``verify``, whose every hash checks out); None if there is none."""
    for cid in reversed(checks.checkpoint_ids(nbdir)):
        try:
            m = checks.read_manifest(nbdir, cid, trust=trust, key=key)
            checks.check_complete(nbdir, m)
            if verify:
                checks.verify_manifest(nbdir, m, trust=trust)
        except CheckpointError:
            continue
        return cid, m
    return None


def verify_checkpoint(
    dir=None, notebook: str | None = None, checkpoint_id: str | None = None, trust: bool = False
) -> Manifest:
    """Check the signature and every hash of a checkpoint; raises CorruptCheckpoint naming the
    object, UntrustedCheckpoint, or CheckpointNotFound. Returns the manifest when all is well."""
    root, nbdir = _folder(dir, notebook)
    m = get_manifest(root, notebook, checkpoint_id, trust=trust)
    checks.verify_manifest(nbdir, m, trust=trust)
    return m


def scrub(nbdir: Path) -> list[CheckpointInfo]:
    """Hash everything (every checkpoint's manifest, signature, pickle and tensor files) and
    say which checkpoints are fully restorable: ``status`` "ok", "damaged" or "untrusted",
    oldest first. Shared blobs are hashed once. Reads only; never unpickles."""
    key, key_problem = checks.load_key_for_listing()
    verdicts: dict[str, str | None] = {}
    out = []
    if not nbdir.is_dir():
        return out
    with checks.locked(nbdir, shared=True):
        for cid in checks.checkpoint_ids(nbdir):
            m, problem = checks.examine(nbdir, cid, key)
            problem = key_problem or problem
            if m is not None and problem is None:
                try:
                    checks.check_complete(nbdir, m)
                    checks.verify_pickle(nbdir, m, key=key)
                    checks.verify_records(nbdir, m, key=key)
                    for rel in sorted(m.files):
                        if rel not in verdicts:
                            verdicts[rel] = checks.check_blob(nbdir / rel, m.files[rel], full=True)
                        if verdicts[rel] is not None:
                            checks.verify_file(nbdir, m, rel)  # raises, naming the object
                except CheckpointError as e:
                    problem = e
            out.append(_info(nbdir, cid, m, problem))
    return out


def rebind(dir, old_notebook: str, new_notebook: str) -> list[str]:
    """Move a renamed notebook's checkpoints to its new folder, re-signed for the new name.

    The signature binds a checkpoint to its notebook, so a moved folder would read as a
    replay; the server calls this when it sees a rename. Only checkpoints that verify as
    this user's checkpoints of the old notebook move (others stay). Crash-safe: files are
    hard-linked (or copied) into a temp folder that is renamed into place, then the old
    checkpoint is removed; at worst both copies exist. Returns the ids moved."""
    root, src = _folder(dir, old_notebook)
    dst = root.notebook_dir(new_notebook)
    if not src.is_dir() or src == dst:
        return []
    key = signing.load_key()
    moved = []
    with checks.locked(src), checks.locked(dst):
        makedirs(dst / BLOBS)
        for cid in checks.checkpoint_ids(src):
            if (dst / cid).exists():
                continue
            try:
                m = checks.read_manifest(src, cid, key=key)
            except CheckpointError:
                continue
            for rel in m.files:
                if not (dst / rel).exists():
                    _link_or_copy(src / rel, dst / rel)
            tmp = dst / f"{checks.TMP_PREFIX}{cid}-{os.getpid()}"
            os.mkdir(tmp, 0o700)
            _link_or_copy(src / cid / m.pickle.file, tmp / m.pickle.file)
            m.notebook = paths.notebook_key(new_notebook)
            data = m.to_bytes()
            checks.write_file_synced(tmp / MANIFEST, data)
            checks.write_file_synced(tmp / SIGNATURE, signing.sign_manifest(data, key).to_bytes())
            fsync_dir(tmp)
            fsync_dir(dst / BLOBS)
            os.rename(tmp, dst / cid)
            fsync_dir(dst)
            _remove_checkpoint_dir(src / cid)
            moved.append(cid)
        checks.gc(src, locked_already=True)
    if not checks.checkpoint_ids(src) and not checks.quarantined(src):
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
    lock_timeout: float = checks.LOCK_TIMEOUT,
    force_foreign: bool = False,
) -> str:
    """Delete one checkpoint of this user's: signed with this user's key, for this user
    (:func:`foreign_reason`). Any other is refused with :class:`ForeignCheckpoint`: on a
    shared root it is another's. ``force_foreign`` (an administrator's clean-up, which
    names what it removes) deletes it anyway. Returns why it was not this user's ("" when
    it was).

    ``lock_timeout`` bounds the wait for a writer holding the notebook's lock
    (then :class:`StoreBusy`); the server passes a short one."""
    root, nbdir = _folder(dir, notebook)
    folder = checks.checkpoint_path(nbdir, checkpoint_id)
    mirror.pull(root, nbdir)
    with checks.locked(nbdir, timeout=lock_timeout):
        if not folder.is_dir():
            raise CheckpointNotFound(checkpoint_id, str(nbdir))
        foreign = foreign_reason(nbdir, checkpoint_id)
        if foreign and not force_foreign:
            raise ForeignCheckpoint(
                str(folder),
                foreign,
                checkpoint_id,
                str(root.folder),
                paths.notebook_key(notebook),
            )
        _remove_checkpoint_dir(folder)
        checks.gc(nbdir, locked_already=True)
        mirror.push(root, nbdir)
    return foreign


def foreign_reason(nbdir: Path, checkpoint_id: str) -> str:
    """Why a checkpoint is not provably this user's ("" when it is): its signature does
    not verify with this user's key (signed with another, unsigned, or no key here), or
    its manifest names another user."""
    key, key_problem = checks.load_key_for_listing()
    _, problem = checks.examine(nbdir, checkpoint_id, key)
    if not checks.signed_by_this_key(nbdir / checkpoint_id, key):
        if isinstance(problem, UntrustedCheckpoint):
            return problem.reason
        return str(key_problem or problem or "its signature does not match this user's key")
    if isinstance(problem, UntrustedCheckpoint) and problem.kind == "other-owner":
        return problem.reason
    return ""


def _remove_checkpoint_dir(folder: Path) -> None:
    # rename first so a half-deleted folder is never mistaken for a checkpoint
    trash = folder.parent / f"{checks.TMP_PREFIX}del-{folder.name}-{os.getpid()}"
    os.rename(folder, trash)
    fsync_dir(folder.parent)  # a power cut must not bring back a checkpoint whose blobs GC frees
    shutil.rmtree(trash, ignore_errors=True)


AUTOSAVES_KEPT = 1


def autosave_would_replace(nbdir: Path, own: str | None) -> str | None:
    """The autosave that an autosave now would push out while it is the notebook's newest
    saved state and not ``own`` (the checkpoint this process last wrote or restored): the
    last state of another kernel, e.g. one that was killed. None when an autosave may go
    ahead: no checkpoint yet, the newest is one the user made (kept in their budget), or
    this process continues from it."""
    key, _ = checks.load_key_for_listing()
    ids = [
        cid for cid in checks.checkpoint_ids(nbdir) if checks.signed_by_this_key(nbdir / cid, key)
    ]
    if not ids or ids[-1] == own or not checks.is_autosave(nbdir / ids[-1]):
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
    key, _ = checks.load_key_for_listing()
    ids = [
        cid for cid in checks.checkpoint_ids(nbdir) if checks.signed_by_this_key(nbdir / cid, key)
    ]
    holders = {}
    autosaves = set()
    for cid in ids:
        m, _problem = checks.examine(nbdir, cid, key)  # damaged or not: keeping more is safe
        holders[cid] = set(lost_of(m.metadata).values()) - {""} if m is not None else set()
        if m is not None and m.metadata.get(checks.AUTOSAVE) is True:
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
    root = paths.root_of(dir)
    bucket = root.bucket  # the bucket's checkpoints, mirrored
    if bucket is None and not root.user_root().is_dir():
        out.errors.append(f"{root.user_root()} is not a directory")
        return out
    now = time.time() if now is None else now
    for nbdir in mirror.notebook_folders(root):
        if bucket is not None:
            mirror.pull(root, nbdir)
        ids = []
        for cid in checks.checkpoint_ids(nbdir):
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
                with checks.locked(nbdir):
                    _remove_checkpoint_dir(nbdir / cid)
                    checks.gc(nbdir, locked_already=True)
                out.deleted.append(label)
            except Exception as e:
                out.errors.append(f"{label}: {e}")
        if ids:
            out.kept.append(f"{nbdir.name}/{ids[-1]}")
        if bucket is not None and not dry_run:
            try:  # the deletions, then what crashed uploads left
                mirror.push(root, nbdir)
            except Exception as e:
                out.errors.append(f"{nbdir.name}: {e}")
    return out


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
        self.id = checkpoint_id or checks.new_id(nbdir)
        self.tmp = nbdir / f"{checks.TMP_PREFIX}{self.id}-{os.getpid()}"
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
        checks.write_file_synced(self.tmp / MANIFEST, data)
        checks.write_file_synced(self.tmp / SIGNATURE, signing.sign_manifest(data, key).to_bytes())
        fsync_dir(self.tmp / "staged")
        fsync_dir(self.tmp)
        blobs = self.nbdir / BLOBS
        for name in self.staged:
            dest = blobs / name
            entry = manifest.files[f"{BLOBS}/{name}"]
            if dest.exists():
                # same content address: keep the file there only if it is intact
                why = checks.check_blob(dest, entry)
                if why is None:
                    os.unlink(self.staging_path(name))
                    continue
                checks.quarantine(self.nbdir, f"{BLOBS}/{name}", why)
            os.rename(self.staging_path(name), dest)
            checks.remember_verified(dest)  # hashed as it was written
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
