"""Lazy restore: the namespace is back in the time it takes to read the object graph.

An eager restore reads every tensor before the first cell can run. A lazy one
(``restore(lazy=True)``, what a resume and ``%restore`` do in a kernel) unpickles the
whole graph over buffers that are allocated but not yet filled, reads the storages of
small objects at once, assigns every object whose storages are all read, and leaves
the rest to a background thread, in the order the notebook is likely to need them:
tracked objects first, then the smallest first (most names back per byte read).

Nothing in the namespace is ever half loaded. An object is assigned only once every
storage it can reach (found by walking its references, so an optimizer waits for its
model's parameters, a list of views for their base) has been read *and* has matched
its digest; a storage whose bytes do not match fails, by name, exactly the objects
that reach it. Assignments happen on the kernel's main thread only: before each cell
(IPython's ``pre_run_cell`` hook), before a checkpoint, or in :func:`wait`.

Before a cell runs, the hook reads the names the cell uses (and the globals of the
functions it may call); if one of them is still loading it waits for that object
alone, showing ``loading model (1.2/2.0 GB)…``. A cell that touches nothing still
loading runs at once. Code whose names cannot be known (``globals()``, ``eval``,
magics, ``__main__``: in IPython its ``__dict__`` is the namespace itself, and a
``from __main__ import *`` copies whatever is there) waits for everything.

A name the user rebinds while its object loads keeps the user's value: an object is
assigned only where its name still holds what it held when the restore returned
(nothing, in a fresh kernel), checked just before the assignment.

torch, too, is loaded in the background. A fresh kernel spends longer on ``import
torch`` than on reading the graph, so when torch is not yet imported, the groups of
variables whose pickles need it (their tensors, or any reference to torch) are not
unpickled at restore time: they wait as :class:`Later` entries. Their CPU tensors'
bytes are read into numpy arrays meanwhile (small ones before the restore returns, as
ever; no torch needed), while a second thread imports torch and then allocates any GPU
buffers. Once torch is in and everything a group reaches is verified, the main thread
wraps the arrays as tensors (``buffers.as_torch``), unpickles the group, re-imports
``torch`` aliases and applies torch's RNG state (before any cell that names ``torch``
runs). Everything else, numpy arrays included, is back at once.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import queue
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

from ..formatting import format_bytes
from .changes import names_used
from .errors import CorruptCheckpoint
from .handed import take as take_handed
from .tracking import track

ENV_RESTORE = "JUPYTER_PAUSE_RESTORE"  # "eager" keeps the old all-at-once restore
EAGER_BELOW = 16 << 20  # objects smaller than this are read before restore returns
_WALK_LIMIT = 2_000_000  # objects visited per variable before assuming it needs everything
_ABSENT = object()  # what a name that was not bound held when the restore returned

_active: LazyLoad | None = None


def module_ready(name: str) -> bool:
    """Whether module ``name`` is imported *completely*: one being imported on another
    thread (the restore's background ``import torch``) is in ``sys.modules`` already,
    half initialised, marked by its spec as importlib itself checks."""
    mod = sys.modules.get(name)
    spec = getattr(mod, "__spec__", None)
    return mod is not None and not getattr(spec, "_initializing", False)


class Later:
    """Stands for an object built only once torch is imported: ``make(name)`` builds it on
    the main thread (unpickling its group, or importing a module)."""

    def __init__(self, make):
        self.make = make


class LaterFailed(Exception):
    """A :class:`Later` could not be built; the message says why (as a restore says it)."""


def lazy_by_default(ns: dict) -> bool:
    """Lazy unless the setting says eager, and only where a hook guards the namespace:
    the user namespace of a running IPython shell."""
    if os.environ.get(ENV_RESTORE, "lazy").strip().lower() == "eager":
        return False
    shell = _shell()
    return shell is not None and shell.user_ns is ns


def _shell():
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


# ----------------------------------------------------------------- what reaches what
def storages_reached(root: Any, where: dict[int, set[int]], stop: set[int]) -> set[int] | None:
    """Storage indices reachable from ``root`` (``where``: id of a rebuilt tensor or array
    -> its storages). None when the walk is too large to tell: assume all of them."""
    found: set[int] = set()
    seen: set[int] = set()
    stack = [root]
    while stack:
        o = stack.pop()
        k = id(o)
        if k in seen or k in stop:
            continue
        seen.add(k)
        if len(seen) > _WALK_LIMIT:
            return None
        hit = where.get(k)
        if hit is not None:
            found |= hit
            continue
        if isinstance(o, (type, types.ModuleType)):
            continue
        stack.extend(gc.get_referents(o))
    return found


def tensor_map(made: dict[int, list], arrays: dict[int, list]) -> dict[int, set[int]]:
    """id(tensor or array) -> storages it holds: its own, and its ``.grad``'s (a tensor's
    grad is held in C++, invisible to ``gc.get_referents``)."""
    where: dict[int, set[int]] = {}
    for table in (made, arrays):
        for idx, objs in table.items():
            for o in objs:
                where.setdefault(id(o), set()).add(idx)
    for objs in made.values():
        for t in objs:
            grad = getattr(t, "grad", None)
            if grad is not None and id(grad) in where:
                where[id(t)] |= where[id(grad)]
    return where


def stop_ids(ns: dict) -> set[int]:
    """Objects a walk never enters: the namespace itself and every module's globals."""
    stop = {id(ns)}
    for m in list(sys.modules.values()):
        d = getattr(m, "__dict__", None)
        if d is not None:
            stop.add(id(d))
    return stop


# ----------------------------------------------------------------- the background load
@dataclass
class Sources:
    """Where a lazy restore's storages come from, and into what they are read."""

    #: (path, file, [(position, storage index), ...]) for each file still to read
    plan: list[tuple[Any, str, list[tuple[int, int]]]]
    buffers: dict[int, Any]  # storage index -> the buffer its bytes are read into
    #: None: torch was imported before the restore; else the storages whose buffers need
    #: torch (GPU ones), which a second thread allocates once it imported torch
    torch_later: set[int] | None = None
    handed: dict[int, Any] = field(default_factory=dict)  # storage -> the server's memory
    #: files still in the bucket that are downloaded to the cache, then read: file -> what
    #: downloads it
    fetch: dict[str, Any] = field(default_factory=dict)
    #: the other files still in the bucket, read straight into their storages' buffers:
    #: (``mirror.stream`` over the restore's bucket and manifest, file -> its ``mirror.Copy``)
    stream: tuple[Any, dict[str, Any]] | None = None


class LazyLoad:
    """The storages still to read for one restore, and the objects waiting for them.

    ``objects``: name -> (object or :class:`Later`, storages it reaches, tracked). The
    reader thread only fills buffers (from ``sources``) and records which storages are
    done or failed; a second thread imports torch and allocates the buffers that need it
    (``Sources.torch_later``).
    ``settle`` (main thread) builds and moves complete objects into the namespace, after
    running ``on_torch`` (e.g. torch's RNG state) once torch is in."""

    def __init__(self, nbdir, manifest, sources: Sources, device_of, ns, on_storage):
        plan, buffers, torch_later = sources.plan, sources.buffers, sources.torch_later
        self.m = manifest
        self.nbdir = nbdir
        self.ns = ns
        self.objects: dict[str, tuple[Any, set[int], bool]] = {}  # set once unpickled
        self.buffers = buffers
        self.device_of = device_of
        self.on_storage = on_storage  # called (reader thread) once a storage verified
        self.where = {i: (path, rel, pos) for path, rel, items in plan for pos, i in items}
        self.done: set[int] = set()
        self.bad: dict[int, str] = {}  # storage -> why
        self.assigned: list[str] = []
        self.failed: dict[str, str] = {}
        self.rebound: list[str] = []  # names the user bound anew while they loaded: theirs
        self.holding: dict[str, Any] = {}  # name -> what it held when the restore returned
        self.notes: list[str] = []  # said once, by the hook or the next wait()
        self.torch_later = torch_later  # None: torch was imported before the restore
        self.handed = sources.handed  # storage -> the server's memory its buffer maps
        self.torch_ready = torch_later is None
        self.on_torch: list = []  # main thread, once torch is in; each returns notes
        #: main thread: ``fallback(name)`` -> (object, checkpoint id) from the newest older
        #: checkpoint whose copy verifies, or None; for objects whose bytes did not verify
        self.fallback = None
        self.on_lost = None  # main thread: ``on_lost(name)`` for an object not restored
        #: main thread: ``on_damage(recovered, lost)`` once a settle has loaded objects from
        #: older checkpoints (name -> checkpoint id) or found no sound copy (names)
        self.on_damage = None
        #: reader thread: ``on_damaged()`` once the reading is over and found bytes that do
        #: not verify (the kernel then settles on its main thread at once, between cells)
        self.on_damaged = None
        self._files: dict[str, set[int]] = {}
        for i, (_path, rel, _pos) in self.where.items():
            self._files.setdefault(rel, set()).add(i)
        self._cv = threading.Condition()
        self._stop = False
        self._finished = False
        self._thread: threading.Thread | None = None
        self._started = False
        #: files still in the bucket (a restore from it) that are downloaded to the cache,
        #: then read (those holding a GPU tensor): file -> what downloads it, called when
        #: the reader reaches the file, so a storage waits for its own file only
        self.fetch: dict[str, Any] = sources.fetch
        #: the other files still in the bucket, read straight into their storages' buffers:
        #: (``mirror.stream`` over the restore's bucket and manifest, file -> its
        #: ``mirror.Copy``, written to the cache by ``mirror.keep_copies`` once it verified)
        self.stream, self.copies = sources.stream or (None, {})
        self._paths = {rel: path for path, rel, _items in plan}
        self._items = {rel: items for _path, rel, items in plan}
        self._unfetched: dict[str, Exception] = {}
        self._fetching = {rel: threading.Lock() for rel in self.fetch}
        self._fetched: set[str] = set()
        self._claimed: set[str] = set()  # files being (or done) streaming
        self._verified: queue.SimpleQueue = queue.SimpleQueue()  # copies to write; None: no more
        self._copying = False
        # open every file here now, under the restore's lock: a later GC cannot take them
        # away (a download takes the lock itself)
        self._fh = {
            rel: open(path, "rb", buffering=0)  # noqa: SIM115
            for path, rel, _items in plan
            if rel not in self.fetch and rel not in self.copies
        }

    # -- reading -------------------------------------------------------------
    def order(self) -> list[int]:
        """Storages in the order to read them: tracked objects first, then the smallest."""
        seq: list[int] = []
        seen: set[int] = set()
        ranked = sorted(
            self.objects.items(),
            key=lambda kv: (not kv[1][2], sum(self.m.storages[i].nbytes for i in kv[1][1])),
        )
        for _name, (_obj, needs, _tracked) in ranked:
            for i in sorted(needs, key=lambda i: self.where.get(i, ("", "", 0))[1:]):
                if i not in seen and i in self.where:
                    seen.add(i)
                    seq.append(i)
        seq += sorted(set(self.where) - seen)
        return seq

    def read(self, indices: list[int]) -> None:
        """Read, verify and mark the given storages (the calling thread does the work),
        but for those whose files another thread is streaming from the bucket already."""
        from . import tensors

        indices = [i for i in indices if i not in self.done and i not in self.bad]
        streamed = [i for i in indices if self.where[i][1] in self.copies]
        self._stream(self._claim(self.where[i][1] for i in streamed))
        indices = [i for i in indices if self.where[i][1] not in self.copies]
        # fresh memory: a helper maps each CPU buffer's pages just ahead of the reads
        cpu = [
            (i, "", self.m.storages[i].nbytes)
            for i in indices
            if (self.m.storages[i].kind == "numpy" or self.device_of(self.m.storages[i]) == "cpu")
            and i not in self.handed
        ]
        with tensors.Prefaulter(cpu, self.buffers) as pre:
            for i in indices:
                if self._stop:
                    return
                pre.get(i)
                self._read_into(i)
                pre.release(i)

    def _read_into(self, i: int) -> None:
        """Read, verify and mark storage ``i`` into its buffer."""
        from . import checks

        path, rel, pos = self.where[i]
        s = self.m.storages[i]
        why = None
        try:
            # the server's memory where it verifies (handed.take), else read from the file
            digest = s.xxh3 if self._took_handed(i) else self._read_file(i, rel, pos)
            if digest != s.xxh3:
                why = str(CorruptCheckpoint(s.owner, str(path), f"tensor {s.key!r}"))
        except Exception as e:  # a read error: that storage is lost, the others go on
            why = f"{path}: {type(e).__name__}: {e}"
        self._mark(i, why)
        if why is None and self._files[rel] <= self.done:
            checks.remember_verified(path)

    def _mark(self, i: int, why: str | None) -> None:
        """Storage ``i`` matched its digest (``why`` None), or not, and why."""
        with self._cv:  # (the bucket's storages are told from several threads)
            if why is None:
                self.on_storage(i)
                self.done.add(i)
            else:
                self.bad[i] = why
            self._cv.notify_all()

    def _claim(self, rels) -> list[str]:
        """Of the files ``rels`` (in the order to read them), those no thread streams yet,
        now this one's to stream."""
        with self._cv:
            mine = [rel for rel in dict.fromkeys(rels) if rel not in self._claimed]
            self._claimed.update(mine)
        return mine

    def _stream(self, rels: list[str]) -> None:
        """Read files still in the bucket straight into their storages' buffers, in this
        order, 16 ranged GETs in flight across them (``mirror.stream``): each storage
        is marked once its bytes are in and match their digest; a file that does not
        download fails its storages alone. A file whose every storage verified is then
        queued for its local copy (``mirror.keep_copies``)."""
        if not rels:
            return
        from . import tensors

        plan = [(self._paths[rel], rel, self._items[rel]) for rel in rels]
        flat = {i: tensors.flat(self.buffers[i]) for rel in rels for _pos, i in self._items[rel]}
        try:
            self.stream(plan, flat, on_tensor=self._mark, stopped=lambda: self._stop)
        except Exception as e:  # the bucket, before any GET; or a damaged file's delete
            with self._cv:
                for i in flat:
                    if i not in self.done and i not in self.bad and not self._stop:
                        self.bad[i] = f"{self.where[i][1]}: {type(e).__name__}: {e}"
                self._cv.notify_all()
        for rel in rels:
            if all(i in self.done for _pos, i in self._items[rel]):
                self._verified.put(self.copies[rel])

    def _took_handed(self, i: int) -> bool:
        """Whether storage ``i``'s buffer, over the memory the server filled, is taken as
        it is (engine/handed.take)."""
        handed = self.handed.get(i)
        return handed is not None and take_handed(handed, self.buffers[i], self.m.storages[i].xxh3)

    def _read_file(self, i: int, rel: str, pos: int) -> str:
        """Read storage ``i`` from its file into its buffer; returns the bytes' digest."""
        from . import tensors

        s = self.m.storages[i]
        if rel not in self._fh:  # still in the bucket: download the file, then read it
            self._download(rel)
            self._fh[rel] = open(self._paths[rel], "rb", buffering=0)  # noqa: SIM115
        _buf, digest = tensors.read_storage(
            self._fh[rel],
            pos,
            s,
            self.device_of(s),
            None,
            self.buffers[i],
            chunk=tensors.BACKGROUND_READ_CHUNK,
        )
        return digest

    def _download(self, rel: str) -> None:
        """Download file ``rel`` from the bucket once (by the reader, or ahead of it);
        a failure is kept: the file's other storages fail the same way."""
        with self._fetching[rel]:
            if rel in self._unfetched:
                raise self._unfetched[rel]
            if rel in self._fetched:
                return
            try:
                self.fetch[rel]()
            except Exception as e:
                self._unfetched[rel] = e
                raise
            self._fetched.add(rel)

    def _download_ahead(self, order: list[int]) -> None:
        """Download the files still in the bucket in the order the reader needs them, so
        that the next file's download overlaps the reading of this one."""
        files = list(dict.fromkeys(self.where[i][1] for i in order if i in self.where))
        for rel in files:
            if self._stop:
                return
            if rel in self.fetch:
                with contextlib.suppress(Exception):  # the reader reports it, by name
                    self._download(rel)

    def close(self) -> None:
        for f in self._fh.values():
            f.close()
        for handed in set(self.handed.values()):
            handed.close()
        self._verified.put(None)  # no more copies to write
        self._keep_copies()

    def _keep_copies(self) -> None:
        """Have the local copies of the files streamed from the bucket written, each once
        it verified, on a thread of its own: the next checkpoint of this process waits
        for them (``mirror.wait_for_copies``) and finds the files here."""
        from . import mirror

        if self.copies and not self._copying:
            self._copying = True
            mirror.keep_copies(self.nbdir, iter(self._verified.get, None))

    def _import_torch(self) -> None:
        """Import torch, then allocate the buffers that were waiting for it (GPU ones)."""
        from . import tensors

        why = None
        try:
            import torch  # noqa: F401

            for i in sorted(self.torch_later):
                s = self.m.storages[i]
                self.buffers[i] = tensors.empty_for(s, self.device_of(s))
        except Exception as e:  # no torch here, or no memory: those objects fail by name
            why = f"could not be loaded ({type(e).__name__}: {e})"
        with self._cv:
            for i in self.torch_later:
                if why is not None or i not in self.buffers:
                    self.bad[i] = why or "could not be loaded"
            self.torch_ready = True
            self._cv.notify_all()

    def _run(self) -> None:
        later = self.torch_later or set()
        order = self.order()  # the reader's order: what needs no torch first
        order = [i for i in order if i not in later] + [i for i in order if i in later]
        streamer = None
        if self.copies:  # beside the reader, which reads what is here
            rels = self._claim(self.where[i][1] for i in order if self.where[i][1] in self.copies)
            streamer = threading.Thread(
                target=self._stream, args=(rels,), name="jp-lazy-stream", daemon=True
            )
            streamer.start()
        if self.fetch:
            threading.Thread(
                target=self._download_ahead, args=(order,), name="jp-lazy-fetch", daemon=True
            ).start()
        try:
            self.read([i for i in order if i not in later])
            with self._cv:
                while not self.torch_ready and not self._stop:
                    self._cv.wait(0.5)
            self.read([i for i in self.order() if i in later and i not in self.bad])
            if streamer is not None:
                streamer.join()
        finally:
            self.close()
            with self._cv:
                self._finished = True
                self._cv.notify_all()
            if self.bad and not self._stop and self.on_damaged is not None:
                self.on_damaged()

    def start(self) -> None:
        """Start reading (and importing torch); once: later calls do nothing."""
        if self._started or self._stop:  # a restore after it replaced it before it began
            return
        self._started = True
        self._keep_copies()  # registered now: a checkpoint waits for what is to come
        if not self.torch_ready:  # beside the reader: storages on the CPU need no torch
            threading.Thread(target=self._import_torch, name="jp-lazy-torch", daemon=True).start()
        self._thread = threading.Thread(target=self._run, name="jp-lazy-restore", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Stop reading (a new restore replaces this one); nothing more is assigned."""
        self._stop = True
        if self._thread is not None:
            self._thread.join()

    # -- state ---------------------------------------------------------------
    def pending(self) -> list[str]:
        return [
            n
            for n in self.objects
            if n not in self.assigned and n not in self.failed and n not in self.rebound
        ]

    def hold(self) -> None:
        """Remember what each name still loading holds now (the restore returns): an
        object is assigned later only where its name still holds exactly that."""
        self.holding = {n: self.ns.get(n, _ABSENT) for n in self.pending()}

    def _rebound(self, name: str) -> bool:
        return name in self.holding and self.ns.get(name, _ABSENT) is not self.holding[name]

    def outstanding(self) -> bool:
        """Anything left to do: objects to assign, or torch's part still to apply."""
        return bool(self.pending() or self.on_torch)

    def _state(self, name: str) -> str:
        obj, needs, _tracked = self.objects[name]
        if isinstance(obj, Later) and not self.torch_ready:
            return "loading"  # even if failed: falling back may need torch
        if any(i in self.bad for i in needs):
            return "failed"
        return "ready" if needs <= self.done else "loading"

    def settle(self) -> list[str]:
        """Main thread: assign every complete object; record (and return) new failures.
        Notes from ``on_torch`` (e.g. GPU generators not restored) go to ``notes``."""
        newly_failed = []
        recovered: dict[str, str] = {}
        lost: list[str] = []
        with self._cv:
            states = {n: self._state(n) for n in self.pending()}
            torch_ready = self.torch_ready
        if torch_ready and self.on_torch:
            todo, self.on_torch = self.on_torch, []
            for apply in todo:
                try:
                    self.notes += apply()
                except Exception as e:  # the generators stay as they are; the user is told
                    self.notes.append(f"torch's random state was not restored: {e}")
        for name, state in states.items():
            obj, needs, tracked = self.objects[name]
            if self._rebound(name):  # the user's value wins, whatever became of ours
                self.rebound.append(name)
                self.notes.append(f"{name} was bound anew while it loaded: the new value stays")
                continue
            if state == "ready" and isinstance(obj, Later):
                try:
                    obj = obj.make(name)
                except Exception as e:  # that object fails, by name; the others go on
                    self.failed[name] = (
                        str(e) if isinstance(e, LaterFailed) else f"{type(e).__name__}: {e}"
                    )
                    newly_failed.append(name)
                    continue
                self.objects[name] = (obj, needs, tracked)
            if state == "ready":
                if self._rebound(name):  # checked again just before: building ran user code
                    self.rebound.append(name)
                    continue
                self.ns[name] = obj
                if tracked:
                    track(obj, name)
                self.assigned.append(name)
            elif state == "failed":
                bad = sorted(i for i in needs if i in self.bad)
                why = self.bad[bad[0]]
                older = self._fall_back(name, why)
                if older is not None and not self._rebound(name):
                    obj, recovered[name] = older
                    self.ns[name] = obj
                    if tracked:
                        track(obj, name)
                    self.assigned.append(name)
                    continue
                self.failed[name] = f"its tensor data could not be restored: {why}"
                if self.on_lost is not None:
                    self.on_lost(name)
                lost.append(name)
                newly_failed.append(name)
        if not self.outstanding():
            self.objects = {}  # the graph now lives in the namespace (or nowhere)
        if (recovered or lost) and self.on_damage is not None:
            self.on_damage(recovered, lost)
        return newly_failed

    def _fall_back(self, name: str, why: str):
        """(object, checkpoint id) from the newest older checkpoint whose copy verifies,
        said in a note; None where there is none."""
        found = None
        if self.fallback is not None:
            try:
                found = self.fallback(name)
            except Exception as e:  # that copy is no use either: the object stays failed
                self.notes.append(f"{name}: no older copy could be restored ({e})")
        if found is None:
            return None
        obj, checkpoint_id = found
        self.notes.append(
            f"{name} was damaged in checkpoint {self.m.id} ({why}); restored its older copy "
            f"from checkpoint {checkpoint_id} instead"
        )
        return obj, checkpoint_id

    def wait(self, names=None, show=None) -> None:
        """Block until ``names`` (default: all) are ready or failed, then settle.
        ``show(line)`` is called about twice a second with what is being waited for."""
        self.start()  # a kernel starts it once its call is answered (begin): not yet
        want = [n for n in (self.pending() if names is None else names) if n in self.objects]
        # a cell naming torch waits for it, so torch's RNG state is in before it runs
        torch = bool(self.on_torch) and (names is None or "torch" in names)
        shown = None  # when the line was last shown: each storage read wakes this loop
        with self._cv:
            while True:
                loading = [n for n in want if self._state(n) == "loading"]
                if torch and not self.torch_ready and "torch" not in loading:
                    loading.append("torch")
                if not loading or self._stop or self._finished:
                    break
                now = time.monotonic()
                if show is not None and (shown is None or now - shown >= 0.5):
                    show(self._line(loading))
                    shown = now
                self._cv.wait(0.5)

    def _line(self, loading: list[str]) -> str:
        needs = set().union(*(self.objects[n][1] for n in loading if n in self.objects))
        total = sum(self.m.storages[i].nbytes for i in needs)
        got = sum(self.m.storages[i].nbytes for i in needs if i in self.done)
        names = ", ".join(loading[:3]) + (" …" if len(loading) > 3 else "")
        importing = not self.torch_ready and (
            "torch" in loading
            or any(isinstance(self.objects[n][0], Later) for n in loading if n in self.objects)
        )
        if not total:  # only modules
            return f"loading {names}" + (" (importing torch)…" if importing else "…")
        done = f"{format_bytes(got)}/{format_bytes(total)}"
        return f"loading {names} ({done}" + ("; importing torch)…" if importing else ")…")


# ----------------------------------------------------------------- kernel glue
def begin(load: LazyLoad) -> None:
    """Make ``load`` the active one and guard the namespace until it is done."""
    global _active
    cancel()
    _active = load
    load.hold()
    shell = _shell()
    if shell is not None and load.ns is shell.user_ns:
        with contextlib.suppress(ValueError):
            shell.events.unregister("pre_run_cell", before_cell)
        shell.events.register("pre_run_cell", before_cell)
        loop = getattr(getattr(shell, "kernel", None), "io_loop", None)
        if loop is not None:  # damage is settled (and told) when found, not at the next cell
            load.on_damaged = functools.partial(loop.add_callback, _settle_damaged, load)
            # once the kernel has answered the request that restored (a server's resume
            # waits for that answer): reading and ``import torch`` share the interpreter
            # lock with the thread that sends it; a cell that needs the objects first
            # starts it itself (wait)
            loop.add_callback(load.start)
            return
    load.start()


def active() -> LazyLoad | None:
    return _active


def cancel() -> None:
    global _active
    if _active is not None:
        _active.cancel()
        _finish()


def wait(names=None) -> dict[str, str]:
    """Wait until the objects of the running lazy restore (or ``names`` of them) are in the
    namespace; returns the ones that failed, name -> why. A checkpoint calls this first."""
    load = _active
    if load is None:
        return {}
    load.wait(names)
    load.settle()
    failed = dict(load.failed)
    _say_notes(load)
    if not load.outstanding():
        _finish()
    return failed


def _settle_damaged(load: LazyLoad) -> None:
    """The kernel's event loop, between cells, once the reader found damage: fall back to
    older copies or record the loss now (``on_damage`` tells the server), and leave the
    warnings to the next cell."""
    if _active is not load:
        return  # replaced by another restore meanwhile
    for name in load.settle():
        load.notes.append(f"{name} was not restored: {load.failed[name]}")


def _finish() -> None:
    global _active
    shell = _shell()
    if shell is not None:
        with contextlib.suppress(ValueError):
            shell.events.unregister("pre_run_cell", before_cell)
    _active = None


def before_cell(info=None) -> None:
    """IPython ``pre_run_cell`` hook: wait for what this cell uses, assign what is ready,
    and say which objects could not be restored."""
    load = _active
    if load is None:
        return
    code = getattr(info, "raw_cell", "") or ""
    shell = _shell()
    if shell is not None:
        with contextlib.suppress(Exception):
            code = shell.transform_cell(code)
    names = names_used(code, load.ns)
    needed = None if names is None else [n for n in load.pending() if n in names]
    if names is not None and "torch" in names and load.on_torch and "torch" not in needed:
        needed.append("torch")  # torch's RNG state goes in before a cell that uses torch
    if needed is None or needed:
        shown = []

        def show(line):
            print(f"\r{line}", end="", flush=True)
            shown.append(line)

        load.wait(needed, show)
        if shown:
            print("\r" + " " * len(shown[-1]) + "\r", end="", flush=True)
    for name in load.settle():
        print(f"jupyter-pause: {name} was not restored: {load.failed[name]}", file=sys.stderr)
    _say_notes(load)
    if not load.outstanding():
        _finish()


def _say_notes(load: LazyLoad) -> None:
    for note in load.notes:
        print(f"jupyter-pause: {note}", file=sys.stderr)
    load.notes = []
