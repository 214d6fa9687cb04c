"""The object graph as groups of pickle records, and their reuse by the next checkpoint.

Format 2 (docs/engine.md): every variable is one record; variables that share objects
(an optimizer and its model's parameters, instances and their cell-defined class) are
pickled together, with one memo, as one *group*; groups share nothing, so each loads on
its own and a group can be copied unchanged into the next checkpoint. Tensor and array
data never enters a record: a record names storages by their position in its group, and
the manifest maps positions to storages (so a view in one group of a tensor in another
still shares memory after a restore, and each storage's digest, checked on every
checkpoint, decides whether its bytes are written again).

Grouping, in two passes, each object pickled at most twice:

1. each variable is pickled alone (a large list, dict or object array in chunks of its
   own, pickling.StatePickler._chunks); what it holds that another variable may hold too
   is read off the pickle (engine/sharing.py);
2. the variables that hold one object between them (directly or through others) are
   pickled again, together, once.

Reuse (:func:`pickle_namespace` with a previous state): a group is copied only if

* none of its names was touched by code since the last checkpoint (engine/changes.py),
  nor any name the cell-defined code inside it reads (calling it may change them), nor
  any name of a group reaching the memory of one of its object arrays, and the same
  holds for every group reached that way;
* every variable of it is still bound to the same object;
* no group pickled now holds one of its objects;
* replaying its tensors and arrays through the collector gives exactly the references its
  records hold (same group positions, dtype, shape, strides, offset, ``requires_grad``,
  and the same extra state, e.g. a ``.grad``);
* it holds no data pickled in-band that may change unseen (tensor subclasses, sparse
  tensors, memmaps).

Otherwise it is pickled again from the live objects. Every checkpoint accounts for every
name it was given: each is in one group, or skipped with its reason; an incremental pass
that cannot say so gives way to a full one.
"""

from __future__ import annotations

import collections
import functools
import io
import logging
import os
import sys
import tempfile
import types
from dataclasses import dataclass, field
from typing import Any

import xxhash

from . import pickling, sharing, signing, tensors

log = logging.getLogger("jupyter_pause")

SPOOL_IN_MEMORY = 8 << 20  # the pickles of one checkpoint beyond this go to files
#: a group with this many bytes of records keeps them in a storage of their own, not in
#: objects.pkl (format 3): a checkpoint that reuses the group then writes nothing for it
APART = 1 << 20
#: a variable holding no tensor data, with fewer bytes of records than this, is loaded
#: back once when it is pickled (its record alone, into a scratch namespace): one that
#: would not load is named as not saved, rather than found at the restore
TRIAL_MAX = 64 << 10
TRIAL_BUDGET = 8 << 20  # bytes of records tried so, at most, per checkpoint


class Scratch:
    """Where the pickles of one checkpoint spool (:class:`Spool`): the folder of their
    files, and the memory they may still take between them."""

    def __init__(self, folder: str | os.PathLike | None, memory: int = SPOOL_IN_MEMORY):
        self.folder, self.memory = folder, memory


class Spool:
    """Where a group's records are pickled: memory while its checkpoint's groups together
    hold less than SPOOL_IN_MEMORY bytes (:class:`Scratch`), then an unlinked private file
    in the notebook's checkpoint folder, so that a large ``bytes`` object, 10 million
    small ones, or a thousand variables of a few MB each cost the checkpoint disk, not a
    second copy in memory (issue #31: a kernel near its memory limit was OOM-killed by
    its own checkpoint). The pickler hands a large payload over whole, as the object's
    own buffer: it goes to the file uncopied. Kept by :class:`State` for the next
    checkpoint to copy."""

    def __init__(self, scratch: Scratch | None):
        self._scratch = scratch
        self._memory: io.BytesIO | None = io.BytesIO()
        self._file = None
        self.size = 0
        self.io_error: OSError | None = None  # a disk problem, not an unpicklable object

    @property
    def in_memory(self) -> int:
        return self.size if self._memory is not None else 0

    def write(self, b) -> int:
        n = memoryview(b).nbytes
        scratch = self._scratch
        try:
            if self._memory is not None and scratch is not None and scratch.folder is not None:
                if n > scratch.memory:
                    # 0600 and unlinked; closed with the group
                    self._file = tempfile.TemporaryFile(dir=scratch.folder)  # noqa: SIM115
                    with self._memory.getbuffer() as held:
                        self._file.write(held)
                    self._memory = None
                    scratch.memory += self.size
                else:
                    scratch.memory -= n
            (self._file if self._memory is None else self._memory).write(b)
        except OSError as e:
            self.io_error = e
            raise
        self.size += n
        return n

    def tell(self) -> int:
        return self.size

    def close(self) -> None:
        """Drop what was written (a pickle given up), giving its memory back."""
        scratch = self._scratch
        if self._memory is not None and scratch is not None and scratch.folder is not None:
            scratch.memory += self.size
        if self._file is not None:
            self._file.close()
        self._memory, self._file, self.size = io.BytesIO(), None, 0

    def array(self):
        """The records written, as a flat uint8 numpy array over them (no copy: the memory,
        or a read-only map of the file)."""
        import numpy as np

        if self._memory is not None:
            return np.frombuffer(self._memory.getbuffer(), dtype=np.uint8)
        self._file.flush()
        return np.memmap(self._file, dtype=np.uint8, mode="r", shape=(self.size,))

    @property
    def on_disk(self) -> bool:
        return self._file is not None

    def chunks(self, size: int = 8 << 20):
        """The records written, as buffers of at most ``size`` bytes."""
        if self._memory is not None:
            with self._memory.getbuffer() as view:
                for off in range(0, self.size, size):
                    yield view[off : off + size]
            return
        self._file.flush()
        fd = self._file.fileno()
        for off in range(0, self.size, size):
            part = os.pread(fd, min(size, self.size - off), off)
            if not part:
                raise OSError(f"the spooled pickle ended at {off} of {self.size} bytes")
            yield part


@dataclass
class Group:
    names: list[str]
    data: Spool  # its records, one after the other
    offsets: list[int]  # each record's offset in ``data``
    firsts: list[list[int]]  # per record: group positions of the storages it first named
    local: list[int]  # group position -> index in the collector's storages
    log: list  # (weak reference, what it reduced to) of every tensor/array, in order
    shared: set[int]  # ids of the objects another variable may hold now (sharing.Seen)
    ids: Any  # ids of every object it holds whose identity matters (sharing.Seen)
    code_names: set[str]  # globals its cell-defined code reads
    bound: dict[str, int]  # name -> id of the object saved
    reusable: bool
    object_bases: set[int] = field(default_factory=set)  # tensors.Collector.object_bases
    types: dict[str, str] = field(default_factory=dict)
    reused: bool = False
    #: the objects of ``shared``, alive while the checkpoint runs (so their ids stay theirs)
    held: list = field(default_factory=list)
    #: (xxh3, HMAC) of its records, once a checkpoint kept them apart (``APART``)
    stored: tuple[str, str] | None = None
    #: pickled because code may have changed it (False: pickled again only to compare
    #: what it shares; the memory its arrays view is the same as at the last checkpoint)
    touched: bool = True


@dataclass
class State:
    """What the next checkpoint of the same notebook may reuse (kept in this process)."""

    checkpoint_id: str
    namespace_id: int
    groups: list[Group]
    #: numpy storage key -> (sampled fingerprint, digest) at that checkpoint
    numpy_digests: dict[tuple, tuple[str, str]] = field(default_factory=dict)
    #: "objects" storage key -> (digest, bytes) at that checkpoint (tensors.reduce_objects)
    object_digests: dict[tuple, tuple[str, int]] = field(default_factory=dict)

    def __post_init__(self):
        for g in self.groups:  # kept between checkpoints: hold no objects
            g.held = []


class Unsavable(Exception):
    def __init__(self, name: str, why: str):
        self.name, self.why = name, why
        super().__init__(f"{name}: {why}")


def _type_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def pickle_group(names, objects, collector, ns, scratch=None, roots=None) -> Group:
    """Pickle ``names`` as one group (one memo). Raises :class:`Unsavable` naming the
    first variable that fails. ``scratch``: where a large pickle spools (:class:`Spool`).
    ``roots`` (id -> object of every variable of the checkpoint) tells what is shared; a
    variable pickled alone may then be pickled in chunks."""
    roots = roots if roots is not None else {id(objects[n]): objects[n] for n in names}

    def run(deep: bool, chunking: bool = True) -> Group:
        buf = Spool(scratch)
        with pickling.StatePickler(buf, collector, ns, roots=roots, chunking=chunking) as pickler:
            alone = len(names) == 1 and id(objects[names[0]]) in roots
            dump = pickler.dump_root if alone else pickler.dump
            if deep:
                dump = functools.partial(pickling.deep, dump)
            collector.begin_group()
            offsets, firsts = [], []
            for n in names:
                offsets.append(buf.tell())
                collector.begin(n, objects[n])
                try:
                    dump(objects[n])
                except RecursionError:
                    if deep:
                        raise Unsavable(n, "RecursionError: too deeply nested") from None
                    raise
                except pickling.ChunkShared:
                    buf.close()  # given up: pickled again with one memo
                    raise
                except Exception as e:
                    buf.close()
                    if buf.io_error is not None:
                        raise buf.io_error from None
                    raise Unsavable(n, pickling.describe(e)) from None
                firsts.append(collector.touched_in_group())
            found = pickler.seen()
            code_names = set(pickler.code_names)
        found.shared.update((id(objects[n]), objects[n]) for n in names)
        return Group(
            names=list(names),
            data=buf,
            offsets=offsets,
            firsts=firsts,
            local=list(collector.local),
            log=list(collector.log),
            shared=set(found.shared),
            ids=found.ids,
            held=list(found.shared.values()),
            code_names=code_names,
            bound={n: id(objects[n]) for n in names},
            reusable=not collector.in_band,
            object_bases=set(collector.object_bases),
            types={n: _type_name(objects[n]) for n in names},
        )

    def attempt(deep: bool) -> Group:
        try:
            return run(deep)
        except pickling.ChunkShared:  # a chunk shares an object: one memo for it all
            return run(deep, chunking=False)

    try:
        return attempt(deep=False)
    except RecursionError:  # e.g. a long linked list: pickle again, in a deep stack
        return attempt(deep=True)


def as_storage(g: Group, key: bytes) -> tuple[tensors.Storage, str]:
    """(the storage, its HMAC) that keeps ``g``'s records apart from objects.pkl (format 3).
    A group reused as its last checkpoint kept it has the same bytes: nothing is hashed."""
    data = g.data.array()
    s = tensors.Storage(
        kind="numpy",
        device="cpu",
        nbytes=g.data.size,
        data=data,
        owner=g.names[0],
        name="records",
        dtype="|u1",
        shape=[g.data.size],
        skey=("records", id(g.data)),
        safe_dtype="U8",
    )
    if g.reused and g.stored is not None:
        s.xxh3, mac = g.stored
        return s, mac
    xxh = xxhash.xxh3_128()
    signer = signing.FileSigner(key)
    for part in g.data.chunks():
        xxh.update(part)
        signer.update(part)
    s.xxh3 = xxh.hexdigest()
    return s, signer.hexdigest()


def _replay(g: Group, collector) -> bool:
    """Reduce the group's tensors and arrays again; True if its records still describe
    them exactly (then ``g.local`` is updated to this checkpoint's storages)."""
    np = sys.modules.get("numpy")
    collector.begin_group()
    collector.begin(g.names[0], None)
    for ref, sig in g.log:
        obj = ref()
        if obj is None:
            return False
        if np is not None and isinstance(obj, np.ndarray):
            if type(obj) is not np.ndarray:
                return False
            if obj.dtype.kind == "O":
                result = collector.reduce_objects(obj, checked=True)
            else:
                result = collector.reduce_numpy(obj)
        else:
            result = collector.reduce_torch(obj)
        if result is NotImplemented or collector.in_band:
            return False
        state = result[2] if len(result) > 2 else None
        again = (result[1], None if state is None else tuple((k, id(v)) for k, v in state.items()))
        if again != sig:
            return False
    if len(collector.local) != len(g.local):
        return False
    g.local = list(collector.local)
    g.log = list(collector.log)
    return True


def _dirty_names(prev: State, changed: set[str], objects: dict[str, Any]) -> set[str]:
    """The names a checkpoint after ``prev`` pickles again: those code touched since
    (``changed``), and every name of a group that holds one of them, or cannot be reused,
    or may have changed with one of them (see the module doc)."""
    dirty = set(changed)
    dirty |= {n for n in objects if not any(n in g.names for g in prev.groups)}
    grown = True
    while grown:
        grown = False
        bases = {b for g in prev.groups if dirty.intersection(g.names) for b in g.object_bases}
        for g in prev.groups:
            if set(g.names) <= dirty:
                continue
            hit = (
                not g.reusable
                or bool(dirty.intersection(g.names))
                or not bases.isdisjoint(g.object_bases)
                or any(n not in objects or id(objects[n]) != g.bound[n] for n in g.names)
            )
            if hit:
                dirty |= set(g.names)
                dirty |= g.code_names
                grown = True
        for g in prev.groups:  # calling code of a dirty group may change what it reads
            if dirty.intersection(g.names) and not g.code_names <= dirty:
                dirty |= g.code_names
                grown = True
    return dirty


class _Pass:
    """One pass of :func:`pickle_namespace` (see the module doc)."""

    def __init__(self, order, objects, required, collector, ns, scratch):
        self.objects, self.required, self.collector = objects, required, collector
        self.ns, self.scratch = ns, scratch
        self.roots = {id(objects[n]): objects[n] for n in order}
        self.position = {n: i for i, n in enumerate(order)}.__getitem__
        self.skipped: dict[str, str] = {}

    def pickle(self, names: list[str]) -> list[Group]:
        """``names`` as one group. A name that fails is skipped, and the others are
        grouped again: it may have been what linked them."""
        try:
            args = (self.objects, self.collector, self.ns, self.scratch, self.roots)
            return [pickle_group(names, *args)]
        except Unsavable as e:
            if e.name in self.required:
                raise
            self.skipped[e.name] = e.why
            rest = [n for n in names if n != e.name]
            if len(names) == 1 or not rest:
                return []
            return self.combine([g for n in rest for g in self.pickle([n])], [])

    def tried(self, fresh: list[Group]) -> list[Group]:
        """``fresh`` (one variable each) without those whose record does not load back
        (:data:`TRIAL_MAX`): they are skipped, saying why."""
        budget, out = TRIAL_BUDGET, []
        for g in fresh:
            why = None
            if not g.local and g.data.size <= min(TRIAL_MAX, budget):
                budget -= g.data.size
                why = _load_fails(g)
            if why is None:
                out.append(g)
            elif g.names[0] in self.required:
                raise Unsavable(g.names[0], why)
            else:
                self.skipped[g.names[0]] = why
        return out

    def combine(self, fresh: list[Group], reused: list[Group]) -> list[Group]:
        """Groups in which no two share an object: those of ``fresh`` (just pickled) that
        share one are pickled again together. A group ``reused`` from the previous
        checkpoint that held an object a fresh one may share (a new name may hold what
        was held once then, ``alias = registry.a[5]``) is pickled again first, alone:
        what it holds now decides (an id it held then may since be another object's)."""
        while True:
            now = set().union(*(g.shared for g in fresh))
            suspects = [g for g in reused if sharing.holds_any(g.ids, now)]
            if suspects:
                for g in suspects:
                    g.reused = False
                reused = [g for g in reused if g.reused]
                again = [h for g in suspects for h in self.pickle(g.names)]
                for h in again:
                    h.touched = False
                fresh = fresh + again
                continue
            linked = _linked(fresh)
            if len(linked) == len(fresh):
                return fresh + reused
            fresh = []
            for m in linked:
                names = sorted((n for g in m for n in g.names), key=self.position)
                fresh.extend(m if len(m) == 1 else self.pickle(names))


def _load_fails(g: Group) -> str | None:
    """Why ``g``'s one record does not load back (a trial, nothing assigned), or None."""
    data = b"".join(bytes(part) for part in g.data.chunks())
    scratch = {"__name__": "__main__"}  # the globals of cell code it rebuilds
    no_data = types.SimpleNamespace(rebuild_tensor=None, rebuild_array=None)

    def load():
        return pickling.load_records(data, g.offsets, 0, no_data, scratch)[1]

    failures = load()
    if any(why.startswith("RecursionError") for why in failures.values()):
        failures = pickling.deep(load)  # as a restore loads it
    if not failures:
        return None
    return f"it would not load again (tried when saved): {failures[0]}"


def _linked(groups: list[Group]) -> list[list[Group]]:
    """``groups`` in sets that share objects (their ``shared``), directly or through others."""
    parent = list(range(len(groups)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = i = parent[parent[i]]
        return i

    owner: dict[int, int] = {}
    for i, g in enumerate(groups):
        for obj in g.shared:
            parent[root(i)] = root(owner.setdefault(obj, i))
    members: dict[int, list[Group]] = {}
    for i, g in enumerate(groups):
        members.setdefault(root(i), []).append(g)
    return list(members.values())


def _pickle_namespace(
    order: list[str],
    objects: dict[str, Any],
    required: set[str],
    collector,
    ns,
    prev: State | None = None,
    changed: set[str] | None = None,
    scratch=None,
) -> tuple[list[Group], dict[str, str]]:
    dirty = set(order)
    reused: list[Group] = []
    if prev is not None and changed is not None:
        dirty = _dirty_names(prev, changed, objects) & set(order)
        for g in prev.groups:
            if not dirty.intersection(g.names):
                g.reused = True
                reused.append(g)
    room = SPOOL_IN_MEMORY - sum(g.data.in_memory for g in reused)
    run = _Pass(order, objects, required, collector, ns, Scratch(scratch, room))
    fresh = run.tried([g for n in order if n in dirty for g in run.pickle([n])])
    groups = run.combine(fresh, reused)
    for g in groups:
        if g.reused and not _replay(g, collector):
            # its tensors changed shape or identity without any cell naming it (a thread,
            # a widget's callback): nothing about the old records can be trusted
            raise _Mismatch(f"the tensors or arrays of {g.names[0]!r} changed unseen")
    groups.sort(key=lambda g: run.position(g.names[0]))
    _account(order, groups, run.skipped)
    return groups, run.skipped


def _account(order: list[str], groups: list[Group], skipped: dict[str, str]) -> None:
    """Every name is saved once or skipped with its reason, or this raises."""
    saved = collections.Counter(n for g in groups for n in g.names)
    problems = {
        "neither saved nor skipped": [n for n in order if n not in skipped and n not in saved],
        "saved twice": sorted(n for n, k in saved.items() if k > 1),
        "saved but not asked for": sorted(set(saved) - set(order)),
    }
    found = "; ".join(f"{what}: {', '.join(names)}" for what, names in problems.items() if names)
    if found:
        raise _Mismatch(found)


class _Mismatch(Exception):
    pass


def pickle_namespace(
    order, objects, required, collector, ns, prev=None, changed=None, scratch=None
):
    """Groups for ``order`` and {name: why} of those that could not be saved. Raises
    :class:`Unsavable` for a required one. With ``prev`` and the names ``changed`` since
    it was taken, unchanged groups are reused (see the module doc). ``scratch``: where
    large pickles spool (:class:`Spool`)."""
    for g in prev.groups if prev is not None else ():
        g.reused = False
    try:
        return _pickle_namespace(order, objects, required, collector, ns, prev, changed, scratch)
    except _Mismatch as e:
        if prev is None or changed is None:
            raise Unaccounted(str(e)) from None
        log.warning("an incremental checkpoint fell back to a full one: %s", e)
    for g in prev.groups:
        g.reused = False
    try:
        return _pickle_namespace(order, objects, required, collector, ns, scratch=scratch)
    except _Mismatch as e:
        raise Unaccounted(str(e)) from None


class Unaccounted(Exception):
    """A pass did not account for every name (a bug): nothing is committed."""
