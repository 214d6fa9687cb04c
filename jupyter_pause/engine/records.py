"""The object graph as groups of pickle records, and their reuse by the next checkpoint.

Format 2 (docs/engine.md): every variable is one record; variables that share objects
(an optimizer and its model's parameters, instances and their cell-defined class) are
pickled together, with one memo, as one *group*; groups share nothing, so each loads on
its own and a group can be copied unchanged into the next checkpoint. Tensor and array
data never enters a record: a record names storages by their position in its group, and
the manifest maps positions to storages (so a view in one group of a tensor in another
still shares memory after a restore, and each storage's digest, checked on every
checkpoint, decides whether its bytes are written again).

Grouping: each variable is pickled alone first; the ids of the objects in its memo whose
identity matters (:meth:`StatePickler.shared_ids`) are compared with those of the groups
so far, and a variable that shares one is pickled again together with those groups.

Reuse (:func:`pickle_namespace` with a previous state): a group is copied only if

* none of its names was touched by code since the last checkpoint (engine/changes.py),
  nor any name the cell-defined code inside it reads (calling it may change them), and
  the same holds for every group reached that way;
* every variable of it is still bound to the same object;
* no group pickled now shares an object with it;
* replaying its tensors and arrays through the collector gives exactly the references its
  records hold (same group positions, dtype, shape, strides, offset, ``requires_grad``,
  and the same extra state, e.g. a ``.grad``);
* it holds no data pickled in-band (tensor subclasses, object arrays, memmaps).

Otherwise it is pickled again from the live objects.
"""

from __future__ import annotations

import functools
import io
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from . import pickling

SPOOL_IN_MEMORY = 8 << 20  # a group's pickle beyond this goes to a file, not memory


class Spool:
    """Where a group's records are pickled: memory up to SPOOL_IN_MEMORY bytes, then an
    unlinked private file in ``scratch`` (the notebook's checkpoint folder), so that a
    large ``bytes`` object, or 10 million small ones, costs the checkpoint disk, not a
    second copy in memory (issue #31: a kernel near its memory limit was OOM-killed by
    its own checkpoint). The pickler hands a large payload over whole, as the object's
    own buffer: it goes to the file uncopied. Kept by :class:`State` for the next
    checkpoint to copy."""

    def __init__(self, scratch: str | os.PathLike | None):
        self._scratch = scratch
        self._memory: io.BytesIO | None = io.BytesIO()
        self._file = None
        self.size = 0
        self.io_error: OSError | None = None  # a disk problem, not an unpicklable object

    def write(self, b) -> int:
        n = memoryview(b).nbytes
        try:
            spill = self._memory is not None and self._scratch is not None
            if spill and self.size + n > SPOOL_IN_MEMORY:
                # 0600 and unlinked; closed with the group
                self._file = tempfile.TemporaryFile(dir=self._scratch)  # noqa: SIM115
                with self._memory.getbuffer() as held:
                    self._file.write(held)
                self._memory = None
            (self._file if self._memory is None else self._memory).write(b)
        except OSError as e:
            self.io_error = e
            raise
        self.size += n
        return n

    def tell(self) -> int:
        return self.size

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
    shared: set[int]  # ids of the objects whose identity matters
    code_names: set[str]  # globals its cell-defined code reads
    ids: dict[str, int]  # name -> id of the object saved
    reusable: bool
    types: dict[str, str] = field(default_factory=dict)
    reused: bool = False


@dataclass
class State:
    """What the next checkpoint of the same notebook may reuse (kept in this process)."""

    checkpoint_id: str
    namespace_id: int
    groups: list[Group]
    #: numpy storage key -> (sampled fingerprint, digest) at that checkpoint
    numpy_digests: dict[tuple, tuple[str, str]] = field(default_factory=dict)


class Unsavable(Exception):
    def __init__(self, name: str, why: str):
        self.name, self.why = name, why
        super().__init__(f"{name}: {why}")


def _type_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def pickle_group(names, objects, collector, ns, scratch=None) -> Group:
    """Pickle ``names`` as one group (one memo). Raises :class:`Unsavable` naming the
    first variable that fails. ``scratch``: where a large pickle spools (:class:`Spool`)."""

    def run(deep: bool) -> Group:
        buf = Spool(scratch)
        pickler = pickling.StatePickler(buf, collector, ns)
        dump = functools.partial(pickling.deep, pickler.dump) if deep else pickler.dump
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
            except Exception as e:
                if buf.io_error is not None:
                    raise buf.io_error from None
                raise Unsavable(n, pickling.describe(e)) from None
            firsts.append(collector.touched_in_group())
        return Group(
            names=list(names),
            data=buf,
            offsets=offsets,
            firsts=firsts,
            local=list(collector.local),
            log=list(collector.log),
            shared=pickler.shared_ids(),
            code_names=set(pickler.code_names),
            ids={n: id(objects[n]) for n in names},
            reusable=not collector.in_band,
            types={n: _type_name(objects[n]) for n in names},
        )

    try:
        return run(deep=False)
    except RecursionError:  # e.g. a long linked list: pickle again, in a deep stack
        return run(deep=True)


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
    dirty = set(changed)
    dirty |= {n for n in objects if not any(n in g.names for g in prev.groups)}
    grown = True
    while grown:
        grown = False
        for g in prev.groups:
            if set(g.names) <= dirty:
                continue
            hit = bool(dirty.intersection(g.names)) or any(
                n not in objects or id(objects[n]) != g.ids[n] for n in g.names
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
    skipped: dict[str, str] = {}
    groups: list[Group | None] = []
    owner: dict[int, int] = {}  # shared object id -> index in groups
    # Reused groups are not put in ``owner`` up front: a group of 10,000 small objects
    # holds 30,000 ids, and indexing them cost more than the rest of a re-checkpoint that
    # rebinds an int. A group pickled again is compared with them directly while that is
    # cheaper (``isdisjoint`` walks the smaller set), and they are indexed once it is not.
    unindexed: set[int] = set()
    unindexed_ids = 0  # how many ids they hold

    def index(h: int) -> None:
        for i in groups[h].shared:
            owner[i] = h

    def add(g: Group) -> None:
        groups.append(g)
        index(len(groups) - 1)

    dirty = set(order)
    if prev is not None and changed is not None:
        dirty = _dirty_names(prev, changed, objects) & set(order)
        for g in prev.groups:
            if dirty.intersection(g.names) or not g.reusable:
                continue
            g.reused = True
            groups.append(g)
            unindexed.add(len(groups) - 1)
            unindexed_ids += len(g.shared)

    def sharing(g: Group) -> list[int]:
        """The groups ``g`` shares an object with."""
        nonlocal unindexed_ids
        if g.shared and unindexed:
            if len(g.shared) * len(unindexed) > unindexed_ids:
                for h in sorted(unindexed):
                    index(h)
                unindexed.clear()
                unindexed_ids = 0
            else:
                found = {h for h in unindexed if not g.shared.isdisjoint(groups[h].shared)}
                return sorted(found | {owner[i] for i in g.shared if i in owner})
        return sorted({owner[i] for i in g.shared if i in owner})

    def merge(g: Group) -> None:
        nonlocal unindexed_ids
        hits = sharing(g)
        if not hits:
            add(g)
            return
        members = [n for h in hits for n in groups[h].names] + [
            n for n in g.names if not any(n in groups[h].names for h in hits)
        ]
        for h in hits:
            old = groups[h]
            groups[h] = None
            if h in unindexed:
                unindexed.discard(h)
                unindexed_ids -= len(old.shared)
                continue
            for i in old.shared:
                if owner.get(i) == h:
                    del owner[i]
        try:
            merged = pickle_group(members, objects, collector, ns, scratch)
        except Unsavable as e:
            if e.name in required:
                raise
            skipped[e.name] = e.why
            again = [n for n in members if n != e.name]
            for n in again:  # what remains, one by one again (rare: it failed only together)
                merge(pickle_group([n], objects, collector, ns, scratch))
            return
        merge(merged)  # the merged group may now share with yet another one

    for n in order:
        if n not in dirty:
            continue
        try:
            g = pickle_group([n], objects, collector, ns, scratch)
        except Unsavable as e:
            if n in required:
                raise
            skipped[n] = e.why
            continue
        merge(g)

    out = [g for g in groups if g is not None]
    for g in out:
        if g.reused and not _replay(g, collector):
            # its tensors changed shape or identity without any cell naming it (e.g. from
            # a thread): nothing about the old records can be trusted, pickle everything
            raise _Mismatch(g.names[0])
    return out, skipped


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
    except _Mismatch:
        for g in prev.groups:
            g.reused = False
        return _pickle_namespace(order, objects, required, collector, ns, scratch=scratch)
