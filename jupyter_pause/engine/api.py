"""Public kernel-side API: track, untrack, checkpoint, restore, list_checkpoints.

``checkpoint`` data flow (docs/engine.md has the picture):

1. pick the objects: tracked ones (must succeed) + the rest of the namespace
   (best effort, each skip reported with its reason);
2. take the notebook's lock, open a transaction (a temp folder);
3. pickle all objects as consecutive records with one pickler; tensors/arrays
   become references and are collected (no bytes copied);
4. hash each storage (in-process fast path, else xxh3) and look the digest up in
   the previous checkpoints: unchanged storages are referenced, not written;
5. stream the new storages into safetensors files, fsync, stage them;
6. write + sign the manifest, rename the temp folder into place, apply retention,
   GC unreferenced blobs.

``restore`` verifies the manifest signature, the pickle's HMAC and every needed
tensor's hash (while reading it straight into its final buffer on its device)
*before* unpickling anything, then assigns the objects to the namespace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import importlib
import json
import os
import platform
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import xxhash

from ..formatting import format_bytes, format_seconds
from ..protocol import user_skipped
from . import (
    changes,
    checks,
    memory,
    mirror,
    paths,
    pickling,
    records,
    rerun,
    rng,
    signing,
    store,
    tensors,
)
from . import handed as handed_mod
from . import lazy as lazy_mod
from . import namespace as ns_mod
from . import shell as shell_mod
from .buffers import as_torch
from .errors import (
    AutosaveRefused,
    CheckpointError,
    CheckpointNotFound,
    CorruptCheckpoint,
    DiskError,
    RemoteStoreError,
    RestoreFailed,
    UnknownName,
    UnsavableObject,
    UntrustedCheckpoint,
)
from .manifest import PICKLE, GroupEntry, Manifest, ObjectEntry, PickleEntry
from .phases import Phases
from .progress import Progress
from .store import CheckpointInfo
from .tracking import track, tracked, untrack

if TYPE_CHECKING:  # typing.Unpack from Python 3.11
    from typing_extensions import Unpack

__all__ = [
    "CheckpointInfo",
    "CheckpointOptions",
    "CheckpointResult",
    "RestoreOptions",
    "RestoreResult",
    "checkpoint",
    "list_checkpoints",
    "restore",
    "track",
    "tracked",
    "untrack",
]

RNG_RECORD = "__jupyter_pause_rng__"
_Options = TypeVar("_Options")


# ----------------------------------------------------------------- results
@dataclass
class CheckpointResult:
    id: str
    path: str
    notebook: str
    saved: list[str]
    skipped: dict[str, str]
    bytes_written: int
    bytes_total: int  # tensor bytes referenced + the pickle
    seconds: float
    bytes_reused: int = 0
    files: list[str] = field(default_factory=list)  # blob files this checkpoint references
    files_written: list[str] = field(default_factory=list)  # ... of which new
    tensors: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)  # checkpoints deleted by retention
    # objects this kernel lost involuntarily -> the checkpoint that still holds each
    lost: dict[str, str] = field(default_factory=dict)
    quarantined: list[str] = field(default_factory=list)  # damaged blobs found, rewritten
    records_reused: int = 0  # variables whose records were copied from the previous one
    store: str = ""  # the bucket the checkpoint was uploaded to (engine/remote.py), if any
    bytes_uploaded: int = 0  # ... and what had to be sent there
    #: seconds per phase, in order: prepare, pickle, hash, write, fsync, commit, upload
    #: (engine/phases.py)
    phases: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        rate = self.bytes_written / self.seconds if self.seconds > 0 else 0
        skipped = (
            f"; skipped {len(self.skipped)}: {', '.join(self.skipped)}" if self.skipped else ""
        )
        if self.quarantined:
            skipped += (
                f"; found damaged and wrote again from memory: {', '.join(self.quarantined)} "
                "(older checkpoints that used them may not restore: jupyter pause verify)"
            )
        if self.store:
            skipped += f"; {format_bytes(self.bytes_uploaded)} uploaded to {self.store}"
        return (
            f"checkpoint {self.id}: {len(self.saved)} object(s), {format_bytes(self.bytes_total)} "
            f"({format_bytes(self.bytes_written)} written, {format_bytes(self.bytes_reused)} unchanged) "
            f"in {format_seconds(self.seconds)} ({format_bytes(rate)}/s){skipped}"
        )


@dataclass
class RestoreResult:
    id: str
    path: str
    restored: list[str]
    metadata: dict[str, Any]
    bytes_read: int
    seconds: float
    failed: dict[str, str] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)  # names re-imported
    skipped: dict[str, str] = field(default_factory=dict)  # what the checkpoint had skipped
    notes: list[str] = field(default_factory=list)
    passed_over: dict[str, str] = field(default_factory=dict)  # newer checkpoints that failed
    rerun: list[dict[str, Any]] = field(default_factory=list)  # cells that made skipped names
    loading: list[str] = field(default_factory=list)  # lazy: still being read (engine/lazy.py)
    bytes_loading: int = 0  # ... and how many tensor bytes they still need
    bytes_downloaded: int = 0  # brought from the bucket behind the folder first (remote.py)
    #: seconds per phase, in order: verify, imports, unpickle, assign (engine/phases.py)
    phases: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        rate = self.bytes_read / self.seconds if self.seconds > 0 else 0
        failed = f"; FAILED {', '.join(self.failed)} (see .failed)" if self.failed else ""
        loading = (
            f"; loading in the background: {', '.join(self.loading)} "
            f"({format_bytes(self.bytes_loading)}; a cell that uses them waits for them)"
            if self.loading
            else ""
        )
        return (
            f"restored {self.id}: {len(self.restored)} object(s), {format_bytes(self.bytes_read)} "
            f"in {format_seconds(self.seconds)} ({format_bytes(rate)}/s){failed}{loading}"
        )


# ----------------------------------------------------------------- helpers
class _HashingWriter:
    """File wrapper that hashes (xxh3 + HMAC) what the pickler writes and knows its position."""

    def __init__(self, f, key: bytes):
        self.f = f
        self.pos = 0
        self.xxh = xxhash.xxh3_128()
        self.mac = signing.FileSigner(key)
        self.io_error: OSError | None = None

    def write(self, b) -> int:
        try:
            tensors.write_all(self.f, b)
        except OSError as e:  # a disk problem, not an unpicklable object: remember it
            self.io_error = e
            raise
        self.xxh.update(b)
        self.mac.update(b)
        n = len(memoryview(b).cast("B"))
        self.pos += n
        return n


def _versions(used: Iterable[str] = ()) -> dict[str, Any]:
    """The environment a checkpoint is made in: Python, torch, CUDA, the GPUs, and the
    version of each package ``used`` names (modules and types the checkpoint needs),
    so that an import elsewhere can say which differences matter (engine/bundle.py)."""
    v: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "xxhash": getattr(xxhash, "VERSION", None),
    }
    try:
        from ..version import __version__

        v["jupyter_pause"] = __version__
    except Exception:
        pass
    for mod in ("numpy", "safetensors"):
        m = sys.modules.get(mod)
        if m is not None:
            v[mod] = getattr(m, "__version__", None)
    torch = sys.modules.get("torch")
    v["torch"] = getattr(torch, "__version__", None) if torch else None
    v["cuda"] = None
    v["gpu"] = []
    if torch is not None:
        v["cuda"] = getattr(torch.version, "cuda", None)
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                v["gpu"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception:
            pass
    v["packages"] = _packages(used)
    return v


def _packages(used: Iterable[str]) -> dict[str, str | None]:
    """Top-level package -> its ``__version__`` (None where it has none), for the
    modules named in ``used`` (``numpy.linalg``, ``pkg:attr``, a type's
    ``sklearn.linear_model.LogisticRegression``) that are not the standard library's."""
    out: dict[str, str | None] = {}
    for name in used:
        top = name.partition(":")[0].partition(".")[0]
        if top in out or top in sys.stdlib_module_names or top in ("", "__main__", "builtins"):
            continue
        module = sys.modules.get(top)
        if module is not None:
            version = getattr(module, "__version__", None)
            out[top] = version if isinstance(version, str) else None
    return dict(sorted(out.items()))


def _type_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _keep(keep: int | None) -> int:
    if keep is not None:
        return max(1, int(keep))
    try:
        return max(1, int(os.environ.get(paths.ENV_KEEP, paths.DEFAULT_KEEP)))
    except ValueError:
        return paths.DEFAULT_KEEP


def _previous_index(nbdir, trust: bool):
    """digest -> (file, key, dtype, shape, FileEntry) over the committed checkpoints."""
    index: dict[str, tuple] = {}
    key = signing.load_key(create=False)
    for cid in checks.checkpoint_ids(nbdir):
        try:
            m = checks.read_manifest(nbdir, cid, trust=trust, key=key)
        except CheckpointError:
            continue  # unsigned/tampered: never build on it
        for s in m.storages:
            if s.file in m.files and (nbdir / s.file).is_file():
                index[s.xxh3] = (s.file, s.key, s.dtype, s.shape, m.files[s.file])
    return index


# ----------------------------------------------------------------- checkpoint
@contextlib.contextmanager
def _collector_paused():
    """Pause Python's cyclic garbage collector for the duration. A checkpoint or restore
    allocates many short-lived objects, and each full collection they trigger walks every
    object of the process (~90 ms in a kernel that imported torch, on the dev VM): the
    first checkpoint after a resume used to pay one. Collection resumes afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class CheckpointOptions(TypedDict, total=False):
    """The keyword arguments of :func:`checkpoint` beyond where and what it saves."""

    #: how many checkpoints of the notebook retention keeps (default: ``paths.ENV_KEEP``)
    keep: int | None
    #: JSON-serialisable, stored in the manifest
    metadata: dict | None
    #: an incremental checkpoint may reuse data of unsigned older checkpoints
    trust: bool
    #: print a progress bar (default True)
    progress: bool
    #: re-pickle every variable, not just those code run since the last one could change
    full: bool
    #: this kernel lost its state involuntarily (a fresh one after a crash) and that state
    #: was this checkpoint's: what the new one does not have of it, and what a restore
    #: could not bring back, is recorded in its metadata (``lost``: name -> the checkpoint
    #: that still holds it), which retention keeps
    lost_from: str | None
    #: False, with a bucket: commit in the local cache only (:func:`_pull`; default True)
    upload: bool


@dataclass(frozen=True)
class _CheckpointOptions:
    """:class:`CheckpointOptions` with their defaults."""

    keep: int | None = None
    metadata: dict | None = None
    trust: bool = False
    progress: bool = True
    full: bool = False
    lost_from: str | None = None
    upload: bool = True


def _options(cls: type[_Options], function: str, given: Mapping[str, Any]) -> _Options:
    """``given`` keyword arguments of ``function`` as its options dataclass ``cls``."""
    unknown = given.keys() - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {min(unknown)!r}")
    return cls(**given)


@_collector_paused()
def checkpoint(
    *names: str,
    dir=None,
    notebook: str | None = None,
    namespace: dict | None = None,
    **options: Unpack[CheckpointOptions],
) -> CheckpointResult:
    """Save tracked objects and the namespace (or just ``names``) as a new checkpoint.

    In a kernel, a checkpoint re-pickles only the variables that code run since the
    previous one could have changed and copies the other records (engine/records.py);
    ``full=True`` re-pickles everything.

    ``namespace`` defaults to the kernel's user namespace (``__main__`` outside IPython).
    The other options are :class:`CheckpointOptions`.

    Its steps: choose the objects (:func:`_choose`); under the notebook's lock, read what
    the store holds (:func:`_prepare`); write the checkpoint in a transaction
    (:func:`_transact`).
    """
    opts = _options(_CheckpointOptions, "checkpoint", options)
    t0 = time.monotonic()
    lazy_mod.wait()  # objects still loading from a lazy restore are saved whole, not missed
    ns, hidden = ns_mod.user_namespace() if namespace is None else (namespace, {})
    meta = _json_metadata(opts.metadata)
    key_name = paths.notebook_key(notebook)
    nbdir = paths.notebook_dir(dir, notebook)
    lost = _lost_now(nbdir, opts.lost_from, opts.trust, ns)
    if lost:
        meta[store.LOST] = lost
    plan = _CheckpointPlan(
        nbdir=nbdir,
        notebook=key_name,
        metadata=meta,
        progress=opts.progress,
        namespace=ns,
        started=t0,
    )
    _choose(plan, names, hidden)
    memory.check()  # near its memory limit: refuse now, rather than be killed half way

    mirror.wait_for_copies(nbdir)  # a restore's copies of the bucket's files: reused here
    try:
        with checks.locked(nbdir):
            _prepare(plan, dir, opts, named=bool(names))
            result = _transact(plan, dir, opts, lost)
    except OSError as e:
        raise DiskError(str(nbdir), e) from e
    result.phases = plan.phases.rounded()
    return result


def _choose(plan: _CheckpointPlan, names: tuple[str, ...], hidden: dict) -> None:
    """The objects to save, into ``plan``: ``names`` (each must save), or the tracked
    objects (must save too) and the namespace's other variables (those that cannot
    are skipped, each with why), with IPython's own state."""
    ns, held = plan.namespace, tracked()
    if names:
        missing = [n for n in names if n not in held and n not in ns]
        if missing:
            raise UnknownName(missing, "the namespace or the tracked objects", [*ns, *held])
        for n in names:
            obj = held[n] if n in held else ns[n]
            reason = ns_mod.quick_skip(n, obj, {})
            modname = ns_mod.module_name(obj) if isinstance(obj, types.ModuleType) else None
            if reason and modname is None:
                raise UnsavableObject(n, reason)
            if reason:  # an explicitly named module: remember to re-import it
                plan.modules[n] = modname
                continue
            plan.required[n] = obj
    else:
        plan.required.update(held)
        cand, plan.skipped, plan.modules = ns_mod.select(ns, hidden)
        for n, obj in cand.items():
            if n not in plan.required:
                plan.optional[n] = obj
        sh = shell_mod.shell_of(ns)
        if sh is not None:  # the magics, extensions and backends its cells set up
            plan.shell, cannot = shell_mod.capture(sh, ns)
            plan.skipped.update(cannot)
    plan.tracked = set(held) & set(plan.required)


def _prepare(plan: _CheckpointPlan, dir, opts: _CheckpointOptions, named: bool) -> None:
    """Under the notebook's lock, what the store holds, into ``plan``: the digests its
    committed checkpoints hold (dedup) and the previous checkpoint's records to reuse."""
    nbdir = plan.nbdir
    checks.gc(nbdir, locked_already=True)  # stale temp folders of dead writers
    _pull(dir, nbdir, opts.upload)
    if plan.metadata.get(checks.AUTOSAVE) is True:
        replaced = store.autosave_would_replace(nbdir, _OWN.get(str(nbdir)))
        if replaced:
            raise AutosaveRefused(replaced)
    plan.index = _previous_index(nbdir, opts.trust)
    plan.previous, plan.changed = _incremental(nbdir, plan.namespace, named, opts.full)
    plan.phases.add("prepare", time.monotonic() - plan.started)


def _transact(
    plan: _CheckpointPlan, dir, opts: _CheckpointOptions, lost: dict[str, str]
) -> CheckpointResult:
    """Write ``plan`` in a transaction, apply retention and, with a bucket, upload it; a
    failure before the commit leaves nothing behind."""
    nbdir, phases = plan.nbdir, plan.phases
    txn = store.Transaction(nbdir)
    early = mirror.uploads(dir, nbdir) if opts.upload else None  # blobs go up as written
    txn.on_staged = early.add if early is not None else None
    try:
        result = _write_checkpoint(txn, plan)
        _OWN[str(nbdir)] = result.id
        result.lost = lost
        _LOST[str(nbdir)] = lost
        with phases.timed("commit"):
            result.removed = store.apply_retention(nbdir, _keep(opts.keep))
            if result.removed:  # the blobs they alone used: deleted after
                checks.gc(nbdir, locked_already=True, later=True)
    except BaseException:
        if early is not None:
            early.cancel()
        txn.abort()
        raise
    if early is not None:
        with phases.timed("upload"):
            _upload(dir, nbdir, result, opts.progress, early)
    return result


def _json_metadata(metadata: dict | None) -> dict:
    meta = dict(metadata or {})
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise ValueError(f"metadata must be JSON-serialisable: {e}") from None
    return meta


def _pull(dir, nbdir: Path, upload: bool) -> None:
    """A bucket's checkpoints into the cache, so that retention counts them all.  Without
    ``upload`` (a background save, a stopping server's last: committed in the cache at disk
    speed, the server stages it, server/staging.py), a bucket that cannot be listed does not
    stop the checkpoint: the stager pulls before it pushes."""
    try:
        mirror.pull(dir, nbdir)
    except RemoteStoreError:
        if upload:
            raise


def _upload(dir, nbdir, result: CheckpointResult, progress: bool, early) -> None:
    """With a bucket behind the folder: the checkpoint counts once it is committed there
    (mirror.push, after the blobs ``early`` sent while they were written); until then it
    is only in the local cache, and this raises."""
    bucket = paths.bucket_of(dir)
    bar = Progress("uploading", 0, enabled=progress)
    t0 = time.monotonic()
    early.report(bar)
    early.wait()
    mirror.push(dir, nbdir, bar)
    result.store = bucket.url
    result.bytes_uploaded = bar.done
    result.seconds += time.monotonic() - t0
    bar.finish(result.summary())


# notebook folder -> what its last checkpoint written by this process may lend the next
_STATE: dict[str, records.State] = {}
# notebook folder -> the checkpoint this process last wrote or restored: an autosave
# never replaces another process's newer autosave (store.autosave_would_replace)
_OWN: dict[str, str] = {}
# notebook folder -> objects this process lost involuntarily -> the checkpoint holding each
_LOST: dict[str, dict[str, str]] = {}


def _lost_now(nbdir, lost_from: str | None, trust: bool, ns: dict) -> dict[str, str]:
    """Objects of this kernel's state that it does not have, not by the user's doing (a
    ``del`` is), with the checkpoint that still holds each: what the checkpoint it was
    restored from had lost, what its restore could not bring back, and, for a fresh
    kernel after a crash (``lost_from``), everything that checkpoint held."""
    lost = dict(_LOST.get(str(nbdir), {}))
    if lost_from is not None:
        try:
            m = checks.read_manifest(nbdir, lost_from, trust=trust)
        except CheckpointError:  # gone or damaged: it holds nothing to keep
            m = None
        if m is not None:
            lost.update({n: m.id for n in m.objects})
            lost.update(store.lost_of(m.metadata))
    held = tracked()
    return {n: h for n, h in sorted(lost.items()) if n not in ns and n not in held}


def _tracking(ns) -> bool:
    return changes.tracker_for(ns) is not None


def _incremental(nbdir, ns, named: bool, full: bool):
    """(previous state, names changed since) when this checkpoint may reuse records of
    the previous one, else (None, None): reuse needs the kernel's own namespace watched
    since the previous checkpoint, which must be this process's and still the newest."""
    tracker = changes.tracker_for(ns)  # started now if it was not: the next one may reuse
    prev = _STATE.get(str(nbdir))
    if named or full or tracker is None or prev is None or prev.namespace_id != id(ns):
        return None, None
    ids = checks.checkpoint_ids(nbdir)
    if not ids or ids[-1] != prev.checkpoint_id:
        return None, None
    changed = tracker.changed()
    if changed is None:
        return None, None
    return prev, changed


def _untouched_numpy_digest(s, known: dict) -> str | None:
    """The digest an array had at the last checkpoint, if only groups that no code since
    touched name it and its sampled bytes are the same (engine/records.py)."""
    entry = known.get(s.skey)
    if entry is None or s.nbytes < tensors.FAST_PATH_MIN:
        return None
    fp, digest = entry
    return digest if tensors.fingerprint(s) == fp else None


@dataclass
class _CheckpointPlan:
    """What :func:`checkpoint` decided before anything is written, for
    :func:`_write_checkpoint` to write into its transaction."""

    nbdir: Path
    notebook: str  # the notebook key the manifest is bound to
    metadata: dict[str, Any]
    progress: bool
    namespace: dict[str, Any]
    started: float  # time.monotonic() when the checkpoint was asked for
    # chosen (_choose): tracked and named objects: one that fails fails it all
    required: dict[str, Any] = field(default_factory=dict)
    # ... the namespace's other variables: one that fails is skipped
    optional: dict[str, Any] = field(default_factory=dict)
    # ... name -> why it is not saved (those that fail are added)
    skipped: dict[str, str] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # alias -> module, re-imported
    tracked: set[str] = field(default_factory=set)  # the tracked objects among ``required``
    # from the store (_prepare): digest -> where a committed checkpoint holds it (dedup)
    index: dict[str, tuple] = field(default_factory=dict)
    previous: records.State | None = None  # the previous checkpoint's records, to reuse
    changed: set[str] | None = None  # the names code could have changed since then
    shell: dict[str, Any] = field(default_factory=dict)  # IPython's own state (shell.py)
    phases: Phases = field(default_factory=Phases)  # where its time goes

    @property
    def incremental(self) -> bool:
        return self.previous is not None or self.changed is not None


@dataclass
class _Written:
    """A checkpoint being written into its transaction: what :func:`_write_checkpoint`'s
    steps (pickle, hash, write, commit) hand on to the next."""

    txn: Any
    plan: _CheckpointPlan
    groups: list[records.Group]
    rng_group: records.Group | None
    storages: list[tensors.Storage]  # this checkpoint's, in order
    state: records.State  # what it may lend the next checkpoint of this process
    entries: dict[str, ObjectEntry] = field(default_factory=dict)
    group_entries: list[GroupEntry] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # where each record starts
    rng_record: int | None = None
    pickle: PickleEntry | None = None
    untouched: set[int] = field(default_factory=set)  # storages no code since could reach
    # a large group's records, kept as a storage of their own
    apart: list[tuple[GroupEntry, records.Group]] = field(default_factory=list)
    files: dict[str, Any] = field(default_factory=dict)  # blob -> FileEntry it references
    new: list[tensors.Storage] = field(default_factory=list)  # storages still to write
    dupes: list[tuple[tensors.Storage, tensors.Storage]] = field(default_factory=list)
    files_written: list[str] = field(default_factory=list)
    total: int = 0  # the storages' bytes, as their sizes were known before the hashing
    bytes_written: int = 0  # tensor bytes, the pickle not counted
    reused: int = 0
    quarantined: list[str] = field(default_factory=list)
    bar: Progress | None = None

    @property
    def all_groups(self) -> list[records.Group]:
        return [*self.groups, *([self.rng_group] if self.rng_group else [])]


def _write_checkpoint(txn, plan: _CheckpointPlan) -> CheckpointResult:
    """Write what ``plan`` chose into ``txn``: the records (pickled, or copied from the
    previous checkpoint), then each storage no committed checkpoint holds, then the
    signed manifest, which commits it."""
    w = _pickle(txn, plan)
    _reuse_object_digests(w)
    _hash_and_dedup(w)
    _write_new(w)
    return _commit(w)


def _pickle(txn, plan: _CheckpointPlan) -> _Written:
    """Pickle the objects and the RNG state into records (engine/records.py) and write
    them, signed, into the transaction's pickle; the tensors they reach are collected."""
    ns, phases = plan.namespace, plan.phases
    pickling_started = time.monotonic()
    key = signing.load_key()
    order = list(plan.required) + [n for n in plan.optional if n not in plan.required]
    objects_in = {**plan.optional, **plan.required}
    collector = tensors.Collector()
    prev, changed = plan.previous, plan.changed
    try:
        groups, failed = records.pickle_namespace(
            order, objects_in, set(plan.required), collector, ns, prev, changed, plan.nbdir
        )
    except records.Unsavable as e:
        raise UnsavableObject(e.name, e.why) from None
    plan.skipped.update(failed)
    rng_group = None
    with contextlib.suppress(records.Unsavable):  # not with the stock generators; not fatal
        rng_group = records.pickle_group([RNG_RECORD], {RNG_RECORD: rng.capture()}, collector, ns)
    # this checkpoint's storages: those its groups name, in order (a group pickled and
    # then merged into another, or a variable that failed, may have left others behind)
    used: dict[int, int] = {}
    for g in [*groups, *([rng_group] if rng_group else [])]:
        for i in g.local:
            used.setdefault(i, len(used))
    w = _Written(
        txn=txn,
        plan=plan,
        groups=groups,
        rng_group=rng_group,
        storages=[collector.storages[i] for i in used],
        state=records.State(txn.id, id(ns), groups),
    )
    _write_pickle(w, used, key)
    # storages only reused groups name: no code since the last checkpoint could reach them
    # (numpy arrays have no version counter; their digest is reused on that ground)
    fresh = {used[i] for g in groups if not g.reused and g.touched for i in g.local}
    if rng_group is not None:
        fresh |= {used[i] for i in rng_group.local}
    w.untouched = set(range(len(w.storages))) - fresh
    phases.add("pickle", time.monotonic() - pickling_started)
    return w


def _write_pickle(w: _Written, used: dict[int, int], key: bytes) -> None:
    """The records, group after group, into the pickle file (fsynced), hashed and signed
    as they go; a large group's records become a storage of their own instead."""
    with paths.private_open(w.txn.tmp / PICKLE, buffering=1 << 20) as f:
        hw = _HashingWriter(f, key)
        at = 0  # where the group's records start, as the manifest counts them
        for g in w.all_groups:
            local = [used[i] for i in g.local]
            entry = GroupEntry(first=len(w.offsets), storages=local)
            w.group_entries.append(entry)
            if g is not w.rng_group and g.data.size >= records.APART:
                w.apart.append((entry, g))
            else:
                for part in g.data.chunks():
                    hw.write(part)
            for n, off, firsts in zip(g.names, g.offsets, g.firsts, strict=True):
                w.offsets.append(at + off)
                if g is w.rng_group:
                    w.rng_record = len(w.offsets) - 1
                    continue
                w.entries[n] = ObjectEntry(
                    type=g.types[n],
                    dump=len(w.offsets) - 1,
                    storages=[local[p] for p in firsts],
                    tracked=n in w.plan.tracked,
                )
            at += g.data.size
        f.flush()
        os.fsync(f.fileno())
    for entry, g in w.apart:
        entry.records = len(w.storages)
        storage, entry.hmac = records.as_storage(g, key)
        w.storages.append(storage)
    w.pickle = PickleEntry(
        file=PICKLE, bytes=hw.pos, xxh3=hw.xxh.hexdigest(), hmac=hw.mac.hexdigest()
    )


def _reuse_object_digests(w: _Written) -> None:
    """Arrays of Python objects: pickled now, unless no code since the last checkpoint could
    reach them (only reused groups name them) and the store still holds what they were."""
    prev = w.plan.previous
    prev_objects = prev.object_digests if prev is not None else {}
    for pos, s in enumerate(w.storages):
        if s.kind == "objects":
            known = prev_objects.get(s.skey) if pos in w.untouched else None
            if known is not None and known[0] in w.plan.index:
                s.xxh3, s.nbytes = known


def _hash_and_dedup(w: _Written) -> None:
    """Each storage's digest, looked up in the committed checkpoints (``plan.index``) and
    among this one's: what they hold is referenced, the rest is left in ``w.new`` to be
    written (an array of Python objects is written at once, into a file of its own)."""
    plan, phases = w.plan, w.plan.phases
    prev_numpy = plan.previous.numpy_digests if plan.previous is not None else None
    w.total = sum(s.nbytes for s in w.storages)
    w.bar = bar = Progress("checkpoint", w.total, enabled=plan.progress)
    pending: dict[str, tensors.Storage] = {}
    usable: dict[str, bool] = {}  # blob -> verified intact (checked once per checkpoint)

    def intact(rel: str, entry) -> bool:
        """Never reference a blob that was not verified: a damaged one is quarantined and
        its objects are written again from memory, where they are still live."""
        if rel not in usable:
            why = checks.check_blob(plan.nbdir / rel, entry)
            if why is not None:
                checks.quarantine(plan.nbdir, rel, why)
                w.quarantined.append(f"{rel} ({why})")
            usable[rel] = why is None
        return usable[rel]

    hashing_started = time.monotonic()
    for pos, s in enumerate(w.storages):
        if s.xxh3 is None and tensors.materialize(s):  # an array of Python objects, pickled
            bar.add_total(s.nbytes)
        if s.xxh3 is None:  # (a reused group's records: known)
            s.xxh3 = tensors.cached_digest(s)
        if s.xxh3 is None and pos in w.untouched and prev_numpy is not None:
            s.xxh3 = _untouched_numpy_digest(s, prev_numpy)
        if s.xxh3 is None and plan.index and not tensors.known_changed(s):
            s.xxh3 = tensors.hash_storage(s)
        hit = plan.index.get(s.xxh3) if s.xxh3 else None
        if hit is not None and not intact(hit[0], hit[4]):
            hit = None
        if hit is None and tensors.materialize(s):  # its old copy is damaged: pickle it now
            bar.add_total(s.nbytes)
            s.xxh3 = tensors.hash_storage(s)
        if hit is not None:
            s.file, s.key, s.dtype, s.shape = hit[0], hit[1], hit[2], hit[3]
            w.files[s.file] = hit[4]
            w.reused += s.nbytes
            bar.update(s.nbytes)
        elif s.xxh3 is not None and s.xxh3 in pending:
            w.dupes.append((s, pending[s.xxh3]))
            w.reused += s.nbytes
            bar.update(s.nbytes)
        elif s.kind == "objects":  # written now, into a file of its own: its bytes go
            tensors.unique_keys([s], prefix_owner=False)
            wf = tensors.write_safetensors(w.txn, f"o{pos}.tmp", [s], bar, phases)
            w.files[wf.rel] = wf.entry
            w.files_written.append(wf.rel)
            w.bytes_written += wf.entry.bytes
            s.data = None
            pending[s.xxh3] = s
        else:
            if s.xxh3 is not None:
                pending[s.xxh3] = s
            w.new.append(s)
    written_meanwhile = phases.seconds.get("write", 0.0) + phases.seconds.get("fsync", 0.0)
    phases.add("hash", time.monotonic() - hashing_started - written_meanwhile)


def _write_new(w: _Written) -> None:
    """Stream the new storages into safetensors files: one per object with >= 1 MiB of new
    data (a model's weights end up in one portable file), small ones share a file."""
    groups: dict[str, list[tensors.Storage]] = {}
    per_owner: dict[str, int] = {}
    for s in w.new:
        per_owner[s.owner] = per_owner.get(s.owner, 0) + s.nbytes
    for s in w.new:
        g = s.owner if per_owner[s.owner] >= tensors.SMALL_FILE else ""
        groups.setdefault(g, []).append(s)
    for n, (g, group) in enumerate(groups.items()):
        tensors.unique_keys(group, prefix_owner=(g == ""))
        wf = tensors.write_safetensors(w.txn, f"w{n}.tmp", group, w.bar, w.plan.phases)
        w.files[wf.rel] = wf.entry
        w.files_written.append(wf.rel)
        w.bytes_written += wf.entry.bytes


def _commit(w: _Written) -> CheckpointResult:
    """Sign and commit the manifest, and keep what the next checkpoint of this process
    may reuse."""
    plan, storages, ns = w.plan, w.storages, w.plan.namespace
    committing_started = time.monotonic()
    for s, first in w.dupes:
        s.file, s.key, s.xxh3 = first.file, first.key, first.xxh3
    for s in storages:
        tensors.remember(s)
    w.state.numpy_digests = {
        s.skey: (tensors.fingerprint(s), s.xxh3)
        for s in storages
        if s.kind == "numpy" and s.xxh3 is not None and s.nbytes >= tensors.FAST_PATH_MIN
    }
    w.state.object_digests = {s.skey: (s.xxh3, s.nbytes) for s in storages if s.kind == "objects"}
    for e in w.entries.values():
        e.bytes = sum(storages[i].nbytes for i in e.storages)
    unsaved = [n for n in user_skipped(plan.skipped) if n in ns]
    manifest = Manifest(
        id=w.txn.id,
        notebook=plan.notebook,
        created=datetime.now(timezone.utc).isoformat(),
        pickle=w.pickle,
        versions=_versions([*plan.modules.values(), *(e.type for e in w.entries.values())]),
        files=w.files,
        storages=[tensors.storage_entry(s) for s in storages],
        objects=w.entries,
        records=w.offsets,
        rng_record=w.rng_record,
        skipped=plan.skipped,
        modules=plan.modules,
        shell=plan.shell,
        metadata=plan.metadata,
        bytes_total=w.total,
        bytes_written=w.bytes_written + w.pickle.bytes,
        rerun=rerun.cells_for(unsaved, ns),
        groups=w.group_entries,
    )
    final = w.txn.commit(manifest)
    for entry, g in w.apart:  # what the next checkpoint names again, if it reuses the group
        g.stored = (storages[entry.records].xxh3, entry.hmac)
    if plan.incremental or _tracking(ns):
        _STATE[str(plan.nbdir)] = w.state
        tracker = changes.tracker_for(ns)
        if tracker is not None:
            tracker.reset()
    plan.phases.add("commit", time.monotonic() - committing_started)
    result = CheckpointResult(
        id=w.txn.id,
        path=str(final),
        notebook=plan.notebook,
        saved=list(w.entries),
        skipped=plan.skipped,
        bytes_written=manifest.bytes_written,
        bytes_total=w.total + w.pickle.bytes,  # what the checkpoint holds, as listings say
        seconds=time.monotonic() - plan.started,
        bytes_reused=w.reused,
        files=sorted(w.files),
        files_written=w.files_written,
        tensors=len(storages),
        metadata=plan.metadata,
        quarantined=w.quarantined,
        records_reused=sum(len(g.names) for g in w.groups if g.reused),
    )
    w.bar.finish(result.summary())
    return result


# ----------------------------------------------------------------- restore
class _Loader:
    def __init__(self, buffers, damaged=None):
        self.buffers = buffers
        self.damaged = damaged or {}  # storage index -> why it was not read (partial restore)
        self.made: dict[int, list] = {}  # storage index -> the tensors rebuilt on it
        self.arrays: dict[int, list] = {}  # storage index -> the arrays rebuilt on it
        self.local: list[int] | None = None  # the group being loaded: position -> storage
        self.pandas_blocks: list = []  # pandas' blocks the records made (link_pandas_blocks)
        self.objects: dict[int, Any] = {}  # storage index -> its array of Python objects

    def _buffer(self, idx):
        if idx in self.damaged:
            raise CheckpointError(f"its tensor data is lost: {self.damaged[idx]}")
        return self.buffers[idx]

    def rebuild_tensor(self, idx, dtype_name, shape, stride, offset, requires_grad, kind):
        if self.local is not None:
            idx = self.local[idx]
        t = tensors.rebuild_torch(
            self._buffer(idx), dtype_name, shape, stride, offset, requires_grad, kind
        )
        self.made.setdefault(idx, []).append(t)
        return t

    def remember_digests(self, m: Manifest) -> None:
        """Every storage was verified as it was read: cache its digest for this process, so
        the first checkpoint after a resume neither hashes nor writes unchanged tensors."""
        for idx in self.made:
            self.remember_digest(m, idx)

    def remember_digest(self, m: Manifest, idx: int) -> None:
        if idx in self.buffers and idx in self.made:
            tensors.remember_restored(self.buffers[idx], self.made[idx], m.storages[idx].xxh3)

    def rebuild_array(self, idx, dtype, shape, strides, offset, writeable):
        if self.local is not None:
            idx = self.local[idx]
        a = tensors.rebuild_array(self._buffer(idx), dtype, shape, strides, offset, writeable)
        self.arrays.setdefault(idx, []).append(a)
        return a

    def rebuild_objects(self, idx, shape, strides, offset, writeable):
        """A view of an array of Python objects (tensors.reduce_objects), made once per
        storage: its views share it again."""
        if self.local is not None:
            idx = self.local[idx]
        flat = self.objects.get(idx)
        if flat is None:
            flat = self.objects[idx] = tensors.objects_from(self._buffer(idx))
        return tensors.view_objects(flat, shape, strides, offset, writeable)


class RestoreOptions(TypedDict, total=False):
    """The keyword arguments of :func:`restore` beyond what, from where and into what."""

    #: None = each tensor to the device it was saved from; "cpu" / "cuda:0" = all there;
    #: "cuda:1=cuda:0[,...]" = remap
    device: str | None
    #: load unsigned checkpoints too
    trust: bool
    #: print a progress bar (default True)
    progress: bool
    #: objects whose tensor data is damaged are named in ``failed`` and skipped; the others
    #: are restored (the pickle itself must verify)
    partial: bool
    #: True returns once the graph and the small objects are back and reads large tensors
    #: in the background (engine/lazy.py); in a process that has not imported torch, what
    #: needs torch comes back after its import, also in the background.  The default is
    #: lazy in a kernel's own namespace unless ``lazy.ENV_RESTORE`` says ``eager``.
    #: Restoring names is always eager.
    lazy: bool | None
    #: memory the server filled with this checkpoint's large files while the kernel
    #: started (engine/handoff.py), taken where it verifies (engine/handed.py)
    handoff: dict | None
    #: with an id: if that checkpoint is damaged or untrusted, the newest older one that
    #: verifies (a server's resume names the checkpoint it chose, plan.choose_for_resume,
    #: and falls back only on damage that choice could not see: tensor bytes, which only a
    #: restore hashes)
    or_older: bool
    #: the caller (a server's resume) brought the bucket's checkpoints into the folder for
    #: this restore already, so the bucket is not listed again
    synced: bool


@dataclass(frozen=True)
class _RestoreOptions:
    """:class:`RestoreOptions` with their defaults."""

    device: str | None = None
    trust: bool = False
    progress: bool = True
    partial: bool = False
    lazy: bool | None = None
    handoff: dict | None = None
    or_older: bool = False
    synced: bool = False


@_collector_paused()
def restore(
    checkpoint_id: str | None = None,
    *names: str,
    dir=None,
    notebook: str | None = None,
    namespace: dict | None = None,
    **options: Unpack[RestoreOptions],
) -> RestoreResult:
    """Restore a checkpoint (by default the newest one that verifies) into the namespace.

    Without an id, a checkpoint that is damaged or untrusted is passed over for the next
    older one, and the result says so (``passed_over``, ``notes``); with an id, only with
    ``or_older``.  ``names`` restricts what is assigned (objects they share with others
    come along).  Restoring everything also re-imports saved module aliases and the RNG
    state.  The other options are :class:`RestoreOptions`.

    Its steps: resolve what to restore, from where and into what (here); verify the
    checkpoint (:func:`_verify`); load its objects (:func:`_unpickle`); assign them
    (:func:`_assign`).
    """
    opts = _options(_RestoreOptions, "restore", options)
    t0 = time.monotonic()
    lazy_mod.cancel()  # a restore replaces one still loading
    changes.invalidate()  # it replaces objects: the next checkpoint pickles everything
    _STATE.clear()
    if checkpoint_id in ("latest", ""):
        checkpoint_id = None
    if checkpoint_id is not None and not paths.is_checkpoint_id(checkpoint_id):
        names = (checkpoint_id, *names)  # restore("model"): a name, from the latest
        checkpoint_id = None
    ns = ns_mod.user_namespace()[0] if namespace is None else namespace
    nbdir = paths.notebook_dir(dir, notebook)
    if not opts.synced:  # a bucket behind the folder: its checkpoints, small files first
        mirror.pull(dir, nbdir)
    if not nbdir.is_dir():
        raise CheckpointNotFound(checkpoint_id, str(nbdir))
    device_of_name = tensors.parse_device_map(opts.device)
    lazy = lazy_mod.lazy_by_default(ns) if opts.lazy is None else opts.lazy
    lazy = bool(lazy) and not names and not opts.partial
    reading = _ReadOptions(
        dir=dir,
        nbdir=nbdir,
        names=names,
        device_of_name=device_of_name,
        imports=_BackgroundImports(),
        trust=opts.trust,
        progress=opts.progress,
        partial=opts.partial,
        lazy=lazy,
        # a fresh kernel: what needs torch waits for its import in the background (lazy.py)
        defer_torch=lazy and not lazy_mod.module_ready("torch"),
        handoff=opts.handoff,
    )
    with checks.locked(nbdir, shared=True):
        loaded, passed_over = _verify(reading, checkpoint_id, opts.or_older)
        r = _Restore(reading, ns, loaded, passed_over, started=t0)
        if not names:  # what the checkpoint had lost stays lost, unless the user makes it anew
            _LOST[str(nbdir)] = store.lost_of(r.m.metadata)
        if lazy:  # its files are opened under the lock: a later GC cannot take them away
            r.load = _lazy_reader(r)
    r.phases.add("verify", time.monotonic() - t0)
    failures = _unpickle(r)
    return _assign(r, failures)


@dataclass
class _ReadOptions:
    """How a restore reads a checkpoint: the same for each one it tries (:func:`_verify`)
    and, mostly defaults, for an older copy a lazy reader falls back on (_older_copy)."""

    dir: Any  # the root as given: with a bucket behind it, files not here are fetched
    nbdir: Path
    names: tuple[str, ...]  # what to restore (with what they share); () = everything
    device_of_name: Callable[[str], Any]  # the device a tensor was saved from -> its own
    imports: _BackgroundImports  # where the modules the restore will need start importing
    trust: bool = False  # unsigned checkpoints load too
    progress: bool = False
    partial: bool = False  # tensor files that fail their hash are left out and named
    lazy: bool = False
    defer_torch: bool = False  # lazy only: what needs torch is left for after its import
    handoff: dict | None = None  # the server's memory of the checkpoint's large files

    def device_of(self, s) -> Any:
        return self.device_of_name(s.device)


def _verify(
    opts: _ReadOptions, checkpoint_id: str | None, or_older: bool
) -> tuple[_Verified, dict[str, str]]:
    """The checkpoint to restore, read and verified (:func:`_read_verified`), and those
    passed over on the way, with why: without an id, the newest that verifies; with one
    and ``or_older``, that one or the newest older one that verifies."""
    ids = checks.checkpoint_ids(opts.nbdir)
    if checkpoint_id is None and not ids:
        raise CheckpointNotFound(None, str(opts.nbdir))
    if checkpoint_id is None:
        candidates = list(reversed(ids))
    elif or_older and checkpoint_id in ids:
        candidates = list(reversed(ids[: ids.index(checkpoint_id) + 1]))
    else:
        candidates = [checkpoint_id]
    passed_over: dict[str, str] = {}
    for cid in candidates[:-1]:
        try:
            return _read_verified(opts, cid), passed_over
        except (CorruptCheckpoint, UntrustedCheckpoint) as e:
            passed_over[cid] = str(e)
    try:
        return _read_verified(opts, candidates[-1]), passed_over
    except (CorruptCheckpoint, UntrustedCheckpoint) as e:
        if passed_over:  # the message is the one thing the user sees: complete it
            e.args = (
                f"{e.args[0]} (newer checkpoints failed too: "
                + "; ".join(f"{k}: {v}" for k, v in passed_over.items())
                + ")",
            )
        raise


@dataclass
class _Restore:
    """One restore, once its checkpoint verified: what its load and assign steps share."""

    opts: _ReadOptions
    namespace: dict[str, Any]
    loaded: _Verified
    passed_over: dict[str, str]  # newer checkpoints that did not verify -> why
    started: float  # time.monotonic() when the restore was asked for
    phases: Phases = field(default_factory=Phases)  # where its time goes
    load: lazy_mod.LazyLoad | None = None  # lazy: its reader
    objs: dict[int, Any] = field(default_factory=dict)  # record -> the object unpickled
    failed: dict[str, str] = field(default_factory=dict)  # name -> why it is not back
    restored: list[str] = field(default_factory=list)
    loading: list[str] = field(default_factory=list)  # lazy: names still being read
    bytes_loading: int = 0  # ... and the bytes they still need
    notes: list[str] = field(default_factory=list)
    reimported: list[str] = field(default_factory=list)  # module aliases
    m: Manifest = field(init=False)
    loader: _Loader = field(init=False)  # what the unpickler rebuilds tensors with
    by_record: dict[int, str] = field(init=False)  # record -> the name it holds

    def __post_init__(self) -> None:
        self.m = self.loaded.manifest
        self.loader = _Loader(self.loaded.buffers, self.loaded.damaged)
        self.by_record = {o.dump: n for n, o in self.m.objects.items()}


def _lazy_reader(r: _Restore) -> lazy_mod.LazyLoad:
    """The reader of a lazy restore's large tensors, for what is unpickled over its
    buffers (engine/lazy.py)."""
    opts, m, loaded = r.opts, r.m, r.loaded
    plan, _read_already = loaded.lazy_plan
    later = loaded.torch_later
    sources = lazy_mod.Sources(
        plan,
        loaded.buffers,
        torch_later=later.gpu if later else None,
        handed=loaded.handed,
        fetch={
            rel: functools.partial(_fetch_later, opts.dir, opts.nbdir, m.id, rel)
            for rel in loaded.fetch_later
        },
        stream=(functools.partial(mirror.stream, opts.dir, opts.nbdir, m), loaded.stream_later),
    )
    remember = functools.partial(r.loader.remember_digest, m)
    load = lazy_mod.LazyLoad(opts.nbdir, m, sources, opts.device_of, r.namespace, remember)
    load.fallback = functools.partial(_older_copy, opts, r.namespace, m.id)
    load.on_lost = functools.partial(_mark_lost, opts.nbdir)  # no sound copy anywhere
    return load


def _unpickle(r: _Restore) -> dict[int, str]:
    """Only now, with the pickle verified, run it. Lazy: tensor data is not read yet, but
    every object is built over its final buffer, and none is assigned before the bytes
    it reaches have matched their digests. Returns record -> why it failed."""
    later = r.loaded.torch_later
    to_load = r.loaded.to_load
    if later:  # groups that need torch are unpickled once it is imported (lazy.Later)
        deferred = later.records
        to_load = [i for i in to_load if i not in deferred]
    with r.phases.timed("imports"):
        r.opts.imports.wait()  # none imported in the background while its objects are built
    unpickling_started = time.monotonic()
    r.objs, failures = _load_groups(
        r.loaded.pickle, r.m, to_load, r.loader, r.namespace, r.by_record
    )
    pickling.link_pandas_blocks(r.loader.pandas_blocks)
    r.phases.add("unpickle", time.monotonic() - unpickling_started)
    return failures


def _assign(r: _Restore, failures: dict[int, str]) -> RestoreResult:
    """The objects into the namespace (lazy: those whose bytes are in), and what the
    restore did, said: its result, and a warning naming what it could not bring back."""
    m, names, wanted = r.m, r.opts.names, r.loaded.wanted
    assigning_started = time.monotonic()
    if not r.loaded.torch_later:  # unpickled: freed before the lazy reader fills memory
        r.loaded.pickle = None
    r.failed = {r.by_record[i]: why for i, why in failures.items() if i in r.by_record}
    if names and any(n in r.failed for n in wanted) and not r.opts.partial:
        raise RestoreFailed({n: r.failed[n] for n in wanted if n in r.failed})
    if r.load is not None:
        _assign_lazy(r)
    else:
        _assign_now(r)
    if not names:
        rerun.offer(m.rerun)  # jupyter_pause.rerun() may run these, when the user says so
    r.notes = [f"checkpoint {cid} was passed over: {why}" for cid, why in r.passed_over.items()]
    if r.loaded.downloaded:
        r.notes.append(
            f"{format_bytes(r.loaded.downloaded)} downloaded from "
            f"{paths.bucket_of(r.opts.dir)}: this machine did not have the checkpoint"
        )
    if r.passed_over:
        r.notes.append(f"restored {m.id} instead, the newest checkpoint that verifies")
    if not names:
        _restore_session(r)
    # every name the manifest holds is restored, still loading, or named as failed (a
    # lazy restore leaves a name the user bound anew meanwhile to the user's value)
    for n in wanted:
        if n in r.failed or n in r.restored or n in r.loading:
            continue
        if r.load is not None and n in r.namespace:
            continue
        r.failed[n] = "the checkpoint holds it, but the restore did not bring it back"
    nbdir = r.opts.nbdir
    _OWN[str(nbdir)] = m.id
    result = RestoreResult(
        id=m.id,
        path=str(nbdir / m.id),
        restored=r.restored,
        metadata=dict(m.metadata),
        bytes_read=r.loaded.bytes - r.bytes_loading,
        seconds=time.monotonic() - r.started,
        failed=r.failed,
        modules=r.reimported,
        skipped=dict(m.skipped),
        notes=r.notes,
        passed_over=r.passed_over,
        rerun=[dataclasses.asdict(x) for x in m.rerun],
        loading=r.loading,
        bytes_loading=r.bytes_loading,
        bytes_downloaded=r.loaded.downloaded,
    )
    r.phases.add("assign", time.monotonic() - assigning_started)
    result.phases = r.phases.rounded()
    for n in r.failed if not names else ():  # this checkpoint holds them, as well as it can
        if n in m.objects:
            _mark_lost(nbdir, n, m.id)
    if r.failed:
        warnings.warn(
            "jupyter_pause.restore: not restored: "
            + "; ".join(f"{k}: {v}" for k, v in r.failed.items()),
            stacklevel=3,  # where restore's own stacklevel=2 pointed
        )
    r.loaded.progress.finish(result.summary())
    mirror.keep_copies(nbdir, r.loaded.copies)  # what came straight from the bucket
    return result


def _assign_lazy(r: _Restore) -> None:
    """A lazy restore's objects to its reader, which assigns each once every byte it
    reaches is in; those that reach little data are read now, and the reader starts
    with the rest (engine/lazy.py)."""
    load, m, loaded = r.load, r.m, r.loaded
    _plan, read_already = loaded.lazy_plan
    load.objects = _lazy_objects(r, read_already)
    later = loaded.torch_later
    if later:
        load.objects.update(
            _later_objects(m, loaded.pickle, later, r.loader, r.namespace, r.by_record)
        )
        if m.rng_record in r.objs:  # torch's generators: before a cell that names torch
            load.on_torch.append(functools.partial(rng.restore_torch, r.objs[m.rng_record]))
    load.done |= read_already
    for i in read_already:
        r.loader.remember_digest(m, i)
    load.read(_read_now(m, load))  # what else reaches only a little data
    r.failed.update({n: load.failed[n] for n in load.settle()})
    r.restored = list(load.assigned)
    r.loading = load.pending()
    if load.outstanding():
        todo = set().union(*(load.objects[n][1] for n in r.loading)) - load.done
        r.bytes_loading = sum(m.storages[i].nbytes for i in todo)
        lazy_mod.begin(load)
    else:
        load.close()


def _assign_now(r: _Restore) -> None:
    """An eager restore's objects into the namespace, every byte of them verified; the
    tracked ones tracked again."""
    m, ns = r.m, r.namespace
    r.loader.remember_digests(m)
    for n in r.loaded.wanted:
        if n in r.failed or m.objects[n].dump not in r.objs:
            continue
        ns[n] = r.objs[m.objects[n].dump]
        r.restored.append(n)
        if m.objects[n].tracked:
            track(ns[n], n)


def _restore_session(r: _Restore) -> None:
    """What a restore of everything brings back besides the objects: the module aliases
    (imported again), IPython's own state and the random number generators' state."""
    m, ns, load = r.m, r.namespace, r.load
    for alias, modname in m.modules.items():
        if alias in ns or (load is not None and alias in load.objects):
            continue
        try:
            ns[alias] = ns_mod.reimport(modname)
            r.reimported.append(alias)
        except Exception as e:
            r.failed[alias] = f"could not re-import module {modname}: {pickling.describe(e)}"
    sh = shell_mod.shell_of(ns)
    if m.shell and sh is not None:
        r.notes += shell_mod.apply(sh, m.shell, ns)
    if m.rng_record is not None and m.rng_record in r.objs:
        r.notes += rng.restore(r.objs[m.rng_record], torch_too=not r.loaded.torch_later)
    elif m.rng_record is not None:
        r.notes.append("the random number generators' state was not restored (damaged)")


@dataclass
class _Reading:
    """One checkpoint being read and verified for a restore: what the steps of
    :func:`_read_verified` share."""

    opts: _ReadOptions
    checkpoint_id: str
    m: Manifest
    wanted: list[str]  # the names to restore
    to_load: list[int]  # the records to unpickle
    needed: list[int]  # the storages they reach
    missing: set[str] = field(default_factory=set)  # with a bucket: files not here (yet)
    damaged: dict[int, str] = field(default_factory=dict)  # storage -> why (partial only)
    data: bytes = b""  # the records, verified
    total: int = 0  # the bytes of the storages it reads
    bar: Progress | None = None
    buffers: dict[int, Any] = field(default_factory=dict)  # storage -> buffer, filled
    copies: list[mirror.Copy] = field(default_factory=list)  # files read from the bucket
    downloaded: int = 0

    def files_of(self, storages: Iterable[int]) -> set[str]:
        return {self.m.storages[i].file for i in storages}

    def verified(self, **more) -> _Verified:
        return _Verified(
            manifest=self.m,
            pickle=self.data,
            buffers=self.buffers,
            wanted=self.wanted,
            to_load=self.to_load,
            bytes=self.total,
            damaged=self.damaged,
            progress=self.bar,
            downloaded=self.downloaded,
            copies=self.copies,
            **more,
        )


def _read_verified(opts: _ReadOptions, checkpoint_id: str) -> _Verified:
    """Everything a restore needs from one checkpoint, verified (signature, binding, pickle
    HMAC, every needed tensor's hash) before anything is unpickled. With ``partial``,
    tensor files that fail their hash are left out and named instead of failing it all.
    With a bucket behind the root, a lazy restore downloads now only the files of what it
    reads now (their headers for the others), and its reader each other file when it
    reaches it (``fetch_later``)."""
    m = checks.read_manifest(opts.nbdir, checkpoint_id, trust=opts.trust)
    if not opts.defer_torch:
        opts.imports.start(m)  # while the pickle is verified and the tensors read
    r = _select(opts, checkpoint_id, m)
    streamed: set[str] = set()  # eager: read from the bucket straight into memory
    fetched = mirror.Fetched()
    if r.missing and not opts.lazy:
        streamed = set() if opts.partial else _streamable(m, r.missing, r.needed, opts.device_of)
        # a restore of everything hashes every tensor it reads: what it downloads is
        # not hashed whole before as well
        fetched = mirror.fetch(
            opts.dir,
            opts.nbdir,
            checkpoint_id,
            Progress("downloading", 0, opts.progress),
            verify=bool(opts.names) or opts.partial,
            only=r.missing - streamed,
        )
    if opts.partial:
        _leave_out_damaged(r)
    r.data = _records(opts.dir, opts.nbdir, m, r.to_load, opts.trust, opts.progress)
    absent = r.missing if opts.lazy else streamed
    # the files it reads (restoring names from a bucket, it has downloaded only those)
    unread = set(m.files) - r.files_of(r.needed)
    checks.check_complete(opts.nbdir, m, skip=r.files_of(r.damaged) | absent | unread)
    r.total = sum(m.storages[i].nbytes for i in r.needed)
    r.bar = Progress("restore", r.total, enabled=opts.progress)
    if opts.lazy:
        return _read_lazy(r)
    return _read_eager(r, streamed, fetched)


def _select(opts: _ReadOptions, checkpoint_id: str, m: Manifest) -> _Reading:
    """What a restore of ``opts.names`` (of everything, without) reads of ``m``: the
    records and the storages they reach. It fails before reading a byte on a name the
    checkpoint does not hold or a device this machine does not have."""
    names = opts.names
    unknown = [n for n in names if n not in m.objects]
    if unknown:
        why = {n: m.skipped[n] for n in unknown if n in m.skipped}
        where = f"checkpoint {m.id}"
        if why:
            where += (
                " (skipped when saving: " + "; ".join(f"{k}: {v}" for k, v in why.items()) + ")"
            )
        raise UnknownName(unknown, where, m.objects)
    wanted = list(names) if names else list(m.objects)
    # the records to unpickle (format 1: records 0..k, one memo; format 2: per group)
    to_load = m.records_to_load(
        {m.objects[n].dump for n in wanted} if names else set(range(len(m.records)))
    )
    loading = set(to_load)
    needed = sorted(
        {i for o in m.objects.values() if o.dump in loading for i in o.storages}
        | (_rng_storages(m) if m.rng_record is not None and m.rng_record in loading else set())
    )
    # devices first: fail before reading a byte
    for dev, owner in {
        (opts.device_of(m.storages[i]), m.storages[i].owner)
        for i in needed
        if m.storages[i].kind == "torch"
    }:
        tensors.check_device(dev, owner)
    r = _Reading(opts, checkpoint_id, m, wanted, to_load, needed)
    if paths.bucket_of(opts.dir) is not None:
        r.missing = {rel for rel in r.files_of(needed) if not _have(opts.nbdir, m, rel)}
    return r


def _leave_out_damaged(r: _Reading) -> None:
    """A partial restore: the storages in files that fail their hash are left out, each
    with why."""
    m, bad = r.m, {}
    for rel in sorted(r.files_of(r.needed)):
        why = checks.check_blob(r.opts.nbdir / rel, m.files[rel], full=True)
        if why is not None:
            bad[rel] = why
    r.damaged = {
        i: f"{m.storages[i].file} is damaged ({bad[m.storages[i].file]})"
        for i in r.needed
        if m.storages[i].file in bad
    }
    r.needed = [i for i in r.needed if i not in r.damaged]


def _read_eager(r: _Reading, streamed: set[str], fetched: mirror.Fetched) -> _Verified:
    """Every needed storage read into its buffer and hashed: from the bucket straight into
    memory (``streamed``), into memory the server handed over, or from the files here."""
    opts, m = r.opts, r.m
    from_bucket = [i for i in r.needed if m.storages[i].file in streamed]
    if from_bucket:
        r.buffers, r.copies = tensors.download_storages(
            opts.dir, opts.nbdir, m, from_bucket, Progress("downloading", 0, opts.progress)
        )
        r.bar.update(sum(m.storages[i].nbytes for i in from_bucket))
    here = [i for i in r.needed if m.storages[i].file not in streamed]
    received = handed_mod.receive(opts.handoff, r.checkpoint_id, m)
    try:
        over = {}
        if received:  # (the plan's headers are read again by the read: a few kB)
            plan = tensors.plan_reads(opts.nbdir, m, here)
            over = handed_mod.buffers_over(received, plan, m, opts.device_of)
        r.buffers.update(
            tensors.read_storages(opts.nbdir, m, here, opts.device_of, r.bar, handed=over)
        )
    except CorruptCheckpoint:  # a file it downloaded? out of the bucket, too
        mirror.reject(opts.dir, opts.nbdir, r.checkpoint_id, fetched.unverified)
        raise
    finally:
        for handed in received.values():
            handed.close()
    r.downloaded = fetched.bytes + sum(m.files[rel].bytes for rel in streamed)
    return r.verified()


def _read_lazy(r: _Reading) -> _Verified:
    """Every header checked; the small objects' and the RNG state's tensors read now, so
    damage there still makes a restore fall back to an older checkpoint; the other
    buffers allocated, their bytes read later (engine/lazy.py). Without torch yet: CPU
    buffers are numpy arrays (buffers.as_torch later), GPU buffers wait for torch, which
    is imported once this thread is done (lazy.py)."""
    opts, m, needed = r.opts, r.m, r.needed
    later = _torch_later(m, r.data, set(needed), opts.device_of) if opts.defer_torch else None
    if opts.defer_torch:
        opts.imports.start(m, without={"torch"} if later else set())
    now = set(_rng_storages(m)) if m.rng_record is not None else set()
    for o in m.objects.values():
        if sum(m.storages[i].nbytes for i in o.storages) < lazy_mod.EAGER_BELOW:
            now.update(o.storages)
    # arrays of Python objects are unpickled with the records that view them
    now |= {i for i in needed if m.storages[i].kind == "objects"}
    gpu = later.gpu if later else set()
    first = _read_small(r, (now - gpu) & set(needed))
    # nothing left for later (small objects only): no plan, no memory handed over, and
    # the restore returns as soon as an eager one would
    buffers = r.buffers
    rest = set(needed) - set(buffers)
    heads = mirror.headers(opts.dir, opts.nbdir, m, r.missing - first) if rest else {}
    plan = tensors.plan_reads(opts.nbdir, m, sorted(rest), heads) if rest else []
    stream_later = _streamable(m, set(heads), needed, opts.device_of)
    handed = handed_mod.buffers_over(
        handed_mod.receive(opts.handoff, r.checkpoint_id, m) if rest else {},
        plan,
        m,
        opts.device_of,
        skip=set(buffers) | gpu,
        as_numpy=opts.defer_torch,
    )
    for i, (_handed, buf) in handed.items():
        buffers[i] = buf
    for i in needed:
        if i not in buffers and i not in gpu:
            s = m.storages[i]
            buffers[i] = tensors.empty_for(s, opts.device_of(s), as_numpy=opts.defer_torch)
    later_copies = tensors.copies_of(
        m,
        [p for p in plan if p[1] in stream_later],
        heads,
        {i: tensors.flat(buffers[i]) for p in plan if p[1] in stream_later for _, i in p[2]},
    )
    return r.verified(
        lazy_plan=(plan, set(buffers) & now),
        torch_later=later,
        handed={i: h for i, (h, _view) in handed.items()},
        fetch_later=set(heads) - stream_later,
        stream_later={c.rel: c for c in later_copies},
    )


def _read_small(r: _Reading, read_now: set[int]) -> set[str]:
    """A lazy restore's storages read before it returns. With a bucket: the files of what
    it reads now, read from the bucket straight into memory where it needs all of such a
    file on the CPU, else downloaded first (returned; the others' headers only, their
    data is read later, likewise)."""
    opts, m = r.opts, r.m
    first = r.files_of(read_now) & r.missing
    first_streamed = _streamable(m, first, read_now, opts.device_of)
    r.downloaded = mirror.fetch(
        opts.dir,
        opts.nbdir,
        r.checkpoint_id,
        Progress("downloading", 0, opts.progress),
        only=first - first_streamed,
    ).bytes
    if first_streamed:
        from_bucket = [i for i in read_now if m.storages[i].file in first_streamed]
        r.buffers, r.copies = tensors.download_storages(
            opts.dir,
            opts.nbdir,
            m,
            from_bucket,
            Progress("downloading", 0, opts.progress),
            opts.defer_torch,
        )
        r.bar.update(sum(m.storages[i].nbytes for i in from_bucket))
        r.downloaded += sum(m.files[rel].bytes for rel in first_streamed)
    here = sorted(i for i in read_now if i not in r.buffers)
    r.buffers.update(
        tensors.read_storages(opts.nbdir, m, here, opts.device_of, r.bar, as_numpy=opts.defer_torch)
    )
    return first


def _records(dir, nbdir, m: Manifest, to_load: list[int], trust: bool, progress: bool):
    """The records a restore unpickles, verified (checks.records_data): objects.pkl, and the
    storages of the groups among ``to_load`` that keep theirs apart (downloaded first,
    with a bucket behind the folder)."""
    pickle = checks.verify_pickle(nbdir, m, trust=trust)
    apart = m.apart(to_load)
    if not apart:
        return checks.records_data(m, pickle, {}, trust)
    files = {m.storages[i].file for i in apart.values()}
    missing = {rel for rel in files if not _have(nbdir, m, rel)}
    if missing:
        mirror.fetch(dir, nbdir, m.id, Progress("downloading", 0, progress), only=missing)
    read = {
        k: checks.read_records(
            nbdir / m.storages[i].file, m.files[m.storages[i].file], m.storages[i]
        )
        for k, i in apart.items()
    }
    return checks.records_data(m, pickle, read, trust)


def _streamable(m: Manifest, rels: set[str], needed, device_of) -> set[str]:
    """The files an eager restore reads from the bucket straight into memory
    (tensors.download_storages): those of which it needs every tensor, all bound for the
    CPU, so that their copy here can be written whole from its buffers afterwards.  A
    GPU's buffers are filled from the file here, through a staging copy."""
    need = set(needed)
    of_file: dict[str, list[int]] = {}
    for i, s in enumerate(m.storages):
        of_file.setdefault(s.file, []).append(i)

    def whole_on_cpu(rel: str) -> bool:
        storages = [m.storages[i] for i in of_file.get(rel, ())]
        return set(m.files[rel].tensors) == {s.key for s in storages} and all(
            i in need and (s.kind == "numpy" or device_of(s) == "cpu")
            for i, s in zip(of_file.get(rel, ()), storages, strict=True)
        )

    return {rel for rel in rels if whole_on_cpu(rel)}


@dataclass
class _Verified:
    """What a restore needs from one checkpoint, every byte of it verified."""

    manifest: Manifest
    pickle: bytes
    buffers: dict[int, Any]  # storage index -> buffer on its device
    wanted: list[str]
    to_load: list[int]  # the records to load
    bytes: int
    damaged: dict[int, str]  # storage index -> why it was left out (partial restores)
    progress: Progress
    #: lazy restores: (the reads still to do, the storages read already)
    lazy_plan: tuple | None = None
    #: lazy restores into a process without torch yet: what waits for its import
    torch_later: _TorchLater | None = None
    #: lazy restores: storage index -> the server's memory its buffer maps (handed.py)
    handed: dict = field(default_factory=dict)
    #: from a bucket: bytes downloaded before the restore returns; lazy: the files the
    #: reader downloads when it reaches them (_fetch_later)
    downloaded: int = 0
    fetch_later: set[str] = field(default_factory=set)
    #: from a bucket: the files read straight into memory before the restore returns, to
    #: be written here once it has (mirror.keep_copies)
    copies: list[mirror.Copy] = field(default_factory=list)
    #: lazy, from a bucket: the files its reader reads straight into memory, each with
    #: its copy, written here once it verified (lazy.LazyLoad.stream)
    stream_later: dict[str, mirror.Copy] = field(default_factory=dict)


def _have(nbdir, m: Manifest, rel: str) -> bool:
    try:
        return (nbdir / rel).stat().st_size == m.files[rel].bytes
    except FileNotFoundError:
        return False


def _fetch_later(dir, nbdir, checkpoint_id: str, rel: str) -> None:
    """A lazy reader's download of one file of the checkpoint it restores (parallel ranged
    GETs, hashed whole; a damaged one is removed from the bucket and raises), under the
    shared lock: a GC cannot take the file away meanwhile."""
    with checks.locked(nbdir, shared=True):
        mirror.fetch(dir, nbdir, checkpoint_id, only={rel})


@dataclass
class _TorchLater:
    """What a lazy restore leaves until torch is imported (engine/lazy.py, ``Later``)."""

    groups: list[tuple[list[int], set[int]]]  # (records, storages) of each group needing it
    modules: dict[str, str]  # aliases of torch modules: alias -> module name
    gpu: set[int]  # storages bound for a GPU: their buffers, too, wait for torch

    @property
    def records(self) -> set[int]:
        return {r for group, _ in self.groups for r in group}

    @property
    def storages(self) -> set[int]:
        return {i for _, storages in self.groups for i in storages}


def _torch_later(m: Manifest, data: bytes, needed: set[int], device_of) -> _TorchLater | None:
    """The groups whose unpickling needs torch: those holding torch tensors or naming torch
    anywhere in their pickle (a string that merely contains "torch" only makes that group
    wait for the import), and the torch module aliases. None when nothing waits, or when it
    cannot: a format-1 checkpoint (one memo for all) or an RNG state holding tensors (saved
    before torch's state was kept as bytes), which must be in before the first cell.
    A checkpoint written where torch was not imported names it nowhere: its pickle, which
    may be large, is not searched."""
    if not m.groups or ("torch" in m.versions and m.versions["torch"] is None):
        return None
    later = _TorchLater(groups=[], modules={}, gpu=set())
    offsets = m.records
    rng_torch = False
    for first, end, local in m.spans():
        stop = offsets[end] if end < len(offsets) else len(data)
        holds_torch = any(m.storages[i].kind == "torch" for i in local)
        if m.rng_record is not None and first <= m.rng_record < end:
            if holds_torch:
                return None
            rng_torch = data.find(b"torch", offsets[first], stop) != -1
            continue
        if holds_torch or data.find(b"torch", offsets[first], stop) != -1:
            later.groups.append((list(range(first, end)), set(local) & needed))
    later.gpu = {i for i in later.storages if device_of(m.storages[i]) != "cpu"}
    later.modules = {
        alias: mod for alias, mod in m.modules.items() if mod == "torch" or mod.startswith("torch.")
    }
    if later.groups or later.modules or (m.rng_record is not None and rng_torch):
        return later
    return None


def _load_groups(data, m: Manifest, records, loader, ns, by_record):
    """Unpickle ``records`` (pickling.load_groups), again with a deep stack where a group
    was too deeply nested for the default one."""
    objs, failures = pickling.load_groups(data, m, records, loader, ns, by_record)
    if any(why.startswith("RecursionError") for why in failures.values()):
        objs, failures = pickling.deep(
            pickling.load_groups, data, m, records, loader, ns, by_record
        )
    return objs, failures


def _later_objects(m: Manifest, data, later: _TorchLater, loader, ns, by_record) -> dict:
    """name -> (lazy.Later, storages, tracked) for what waits for torch: the variables of
    each group that needs it (the group is unpickled once, on its first name's turn, when
    everything it holds is read and verified) and torch module aliases not yet bound."""
    out: dict[str, tuple] = {}
    for group, storages in later.groups:
        built: dict[str, Any] = {}

        def make(name, group=group, storages=storages, built=built):
            if not built:
                for i in storages:  # read into numpy arrays while torch was being imported
                    if m.storages[i].kind == "torch" and i in loader.buffers:
                        loader.buffers[i] = as_torch(loader.buffers[i])
                objs, failures = _load_groups(data, m, group, loader, ns, by_record)
                for i in storages:
                    loader.remember_digest(m, i)
                built.update(objs=objs, failures=failures)
            dump = m.objects[name].dump
            if dump in built["failures"]:
                raise lazy_mod.LaterFailed(built["failures"][dump])
            return built["objs"][dump]

        for r in group:
            if r in by_record:
                name = by_record[r]
                out[name] = (lazy_mod.Later(make), storages, m.objects[name].tracked)
    for alias, mod in later.modules.items():
        if alias not in ns:
            make = lambda _name, mod=mod: importlib.import_module(mod)  # noqa: E731
            out[alias] = (lazy_mod.Later(make), set(), False)
    return out


# imported off the main thread only when known to be safe there (no GUI, no signals)
_IMPORT_SOON = {"torch", "numpy", "pandas", "scipy", "sklearn", "safetensors"}


class _BackgroundImports:
    """The modules a restore will need (torch and numpy for its tensors, the notebook's
    module aliases), imported on a helper thread while the main thread verifies and
    reads: ``import torch`` alone takes seconds, and the reads mostly wait for the disk.
    Other aliases are imported on the main thread, after the objects, as before.

    The main thread waits for these imports before it unpickles anything: a package
    half-imported on the helper while the unpickler imports one of its submodules is a
    circular import across two threads, which Python resolves by handing one of them a
    partially initialized module (pandas then failed to import on the helper, and was
    imported again later as a second, broken ``pandas``). A lazy restore that leaves
    what needs torch for later imports it only after its own work (``without``): the
    two imports would share one interpreter lock, slowing the restore's own."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []

    def start(self, m: Manifest, without: set[str] = frozenset()) -> None:
        records = m.records_storages()
        wanted = {
            "torch" if s.kind == "torch" else "numpy"
            for i, s in enumerate(m.storages)
            if i not in records
        }
        wanted |= {n for n in m.modules.values() if n in _IMPORT_SOON}
        wanted = {w for w in wanted if w not in sys.modules} - without
        if not wanted:
            return

        def run():
            for name in sorted(wanted, key=lambda n: n != "torch"):  # torch first: longest
                with contextlib.suppress(Exception):  # the restore reports what it cannot
                    importlib.import_module(name)

        thread = threading.Thread(target=run, name="jp-restore-imports", daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait(self) -> None:
        for thread in self._threads:
            thread.join()


def _lazy_objects(r: _Restore, ready=frozenset()) -> dict[str, tuple]:
    """name -> (object, storages it reaches, tracked) for a lazy restore; the RNG state
    too, under its record's name (restored now: it is read with the small objects)."""
    m, objs, loader = r.m, r.objs, r.loader
    everything = set(loader.buffers)
    # a group whose storages are all read already (``ready``: small, or none at all) has
    # nothing to wait for: its variables need no walk (10,000 small objects took longer to
    # walk than an eager restore took to load them)
    bare = {
        r
        for first, end, local in m.spans()
        if local is not None and ready.issuperset(local)
        for r in range(first, end)
    }
    out = {}
    where = stop = None  # made on the first walk
    for n in r.loaded.wanted:
        if n in r.failed or m.objects[n].dump not in objs:  # failed, or waiting for torch
            continue
        obj = objs[m.objects[n].dump]
        if m.objects[n].dump in bare:
            out[n] = (obj, set(), m.objects[n].tracked)
            continue
        if where is None:
            where = lazy_mod.tensor_map(loader.made, loader.arrays)
            stop = lazy_mod.stop_ids(r.namespace)
        needs = lazy_mod.storages_reached(obj, where, stop)
        # plus what its record introduced, which it surely holds, even where the walk is
        # blind (an extension type that hides its references from the garbage collector)
        needs = everything if needs is None else needs | set(m.objects[n].storages)
        out[n] = (obj, needs & everything, m.objects[n].tracked)
    return out


def _read_now(m: Manifest, load) -> list[int]:
    """Storages a lazy restore reads before it returns, besides those of the objects that
    introduced little data: those of every object that reaches little data in all."""
    now = set(_rng_storages(m)) if m.rng_record is not None else set()
    for obj, needs, _tracked in load.objects.values():
        if isinstance(obj, lazy_mod.Later):  # read by the reader, once torch is in
            continue
        if sum(m.storages[i].nbytes for i in needs) < lazy_mod.EAGER_BELOW:
            now |= needs
    return [i for i in load.order() if i in now]


def _mark_lost(nbdir, name: str, holder: str = "") -> None:
    """``name`` was not restored: lost, until the user makes it anew (``holder``: the
    checkpoint that still has it; "" where no copy of it verifies)."""
    _LOST.setdefault(str(nbdir), {}).setdefault(name, holder)


def _older_copy(opts: _ReadOptions, ns, newer: str, name: str):
    """(object, checkpoint id): ``name`` from the newest checkpoint older than ``newer``
    whose copy verifies (every byte it needs hashed first, read from the bucket behind
    ``opts.dir`` where the folder lacks it); None where there is none."""
    ids = checks.checkpoint_ids(opts.nbdir)
    older = ids[: ids.index(newer)] if newer in ids else [c for c in ids if c < newer]
    for cid in reversed(older):
        one = _ReadOptions(opts.dir, opts.nbdir, (name,), opts.device_of_name, _BackgroundImports())
        try:
            with checks.locked(opts.nbdir, shared=True):
                got = _read_verified(one, cid)
        except CheckpointError:  # not there, damaged too, or not ours: an older one
            continue
        finally:
            one.imports.wait()  # nothing is unpickled while a module imports in the background
        by_record = {o.dump: n for n, o in got.manifest.objects.items()}
        loader = _Loader(got.buffers, got.damaged)
        objs, failures = _load_groups(got.pickle, got.manifest, got.to_load, loader, ns, by_record)
        dump = got.manifest.objects[name].dump
        if dump in objs and dump not in failures:
            loader.remember_digests(got.manifest)
            return objs[dump], cid
    return None


def _rng_storages(m: Manifest) -> set[int]:
    # storages first referenced by the RNG record are the ones no object claimed
    claimed = {i for o in m.objects.values() for i in o.storages} | m.records_storages()
    return set(range(len(m.storages))) - claimed


def list_checkpoints(dir=None, notebook: str | None = None) -> list[CheckpointInfo]:
    """Committed checkpoints of a notebook, oldest first."""
    return store.list_checkpoints(dir, notebook)
