"""Pickling the object graph around the tensors.

Plain ``pickle`` with two additions, both done in ``reducer_override`` (which the
C pickler only calls for objects it has no built-in fast path for, so plain data
pickles at full C speed, T9):

1. Tensors and numpy arrays are replaced by small references handled by
   :mod:`.tensors`; their bytes never enter the pickle.
2. Functions and classes defined in notebook cells (module ``__main__``) cannot
   be pickled by reference, because a fresh kernel has no such attribute. They
   are pickled *by value* (code object via ``marshal``, defaults, closure, class
   dict), in the spirit of cloudpickle, which is not a dependency. A function's
   globals are *the restored namespace itself*, so after a restore it sees the
   restored variables, exactly like a cell-defined function does.

All variables are written with **one** pickler (one memo) as consecutive
records, so objects shared between variables (an optimizer's references to a
model's parameters) stay shared after a restore.

Limits (honest): by-value code needs the same Python minor version on restore;
``Enum`` classes defined in cells, generators, open files, sockets, locks and
C-extension objects without pickle support cannot be saved (they are skipped
and reported); an object whose ``__reduce__`` lies is saved wrongly, as with any
pickle-based tool. ``dill`` is not used.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import io
import itertools
import marshal
import os
import pickle
import sys
import threading
import types
import typing
import weakref
from typing import Any

from . import namespace as ns_mod
from . import sharing, tensors
from .errors import CheckpointError

PROTOCOL = 5


# ----------------------------------------------------------------- markers
class _NamespaceRef:
    """Stands for "the namespace being restored into" (cell functions' globals)."""

    def __reduce__(self):
        return (_namespace, ())


NAMESPACE = _NamespaceRef()


def _namespace():  # replaced by the unpickler
    raise RuntimeError("this pickle must be loaded with jupyter_pause.restore()")


class _EmptyCell:
    def __reduce__(self):
        return "EMPTY_CELL"


EMPTY_CELL = _EmptyCell()


# ----------------------------------------------------------------- rebuild helpers (stable names!)
def _load_code(pyver, data):
    if tuple(pyver) != tuple(sys.version_info[:2]):
        raise CheckpointError(
            f"it contains code defined in a notebook cell under Python {pyver[0]}.{pyver[1]}, "
            f"but this kernel runs {sys.version_info[0]}.{sys.version_info[1]}: re-run the cell "
            "that defines it"
        )
    return marshal.loads(data)


def _module_dict(name):
    return importlib.import_module(name).__dict__


def _make_function(code, globals_, name, ncells):
    closure = tuple(types.CellType() for _ in range(ncells)) if ncells else None
    return types.FunctionType(code, globals_, name, None, closure)


def _function_setstate(func, state):
    cells = state.pop("cells", ())
    for cell, value in zip(func.__closure__ or (), cells, strict=False):
        if value is not EMPTY_CELL:
            cell.cell_contents = value
    d = state.pop("__dict__", None)
    for k, v in state.items():
        setattr(func, k, v)
    if d:
        func.__dict__.update(d)


def _make_class(metaclass, name, bases, type_kwargs):
    return types.new_class(name, bases, {"metaclass": metaclass}, lambda ns: ns.update(type_kwargs))


def _class_setstate(cls, state):
    for k, v in state.items():
        setattr(cls, k, v)


def _make_typevar(name, bound, constraints, covariant, contravariant):
    return typing.TypeVar(
        name, *constraints, bound=bound, covariant=covariant, contravariant=contravariant
    )


def reduce_typevar(tv):
    """A ``TypeVar`` made in a cell (``T = TypeVar("T")``) pickles by reference to
    ``__main__.T`` by default, which a fresh kernel does not have yet while it rebuilds
    ``class Box(Generic[T])``: rebuild it by value instead."""
    if getattr(tv, "__module__", None) not in ("__main__", None) and not _by_value(tv):
        return NotImplemented
    return (
        _make_typevar,
        (
            tv.__name__,
            tv.__bound__,
            tv.__constraints__,
            tv.__covariant__,
            tv.__contravariant__,
        ),
    )


def _dead_weakref():
    """A weak reference whose object was gone when it was saved: dead again."""
    return weakref.ref(_Gone())


class _Gone:
    pass


def reduce_weakref(ref):
    """A ``weakref.ref`` is saved as a reference to its object (shared with the variable
    that holds it, so it is alive again after a restore); callbacks are not saved."""
    obj = ref()
    if obj is None:
        return (_dead_weakref, ())
    return (weakref.ref, (obj,))


def _make_lru_cache(func, maxsize, typed):
    return functools.lru_cache(maxsize=maxsize, typed=typed)(func)


def reduce_lru_cache(wrapper):
    """``@functools.lru_cache`` on a cell function: the wrapper cannot be found by name in a
    fresh kernel, so rebuild it around the function (by value). The cache starts empty."""
    if not _by_value(wrapper):
        return NotImplemented
    params = wrapper.cache_parameters()
    return (_make_lru_cache, (wrapper.__wrapped__, params["maxsize"], params["typed"]))


def _make_enum(metaclass, name, bases, attrs, members, qualname, module):
    def body(ns):  # ns is the Enum's own namespace: assigning a name makes a member
        ns["__module__"] = module
        ns["__qualname__"] = qualname
        for k, v in attrs.items():
            ns[k] = v
        for k, v in members:
            ns[k] = v

    return types.new_class(name, bases, {"metaclass": metaclass}, body)


def reduce_enum(cls):
    """An ``Enum`` defined in a cell: rebuilt by running its class body again (members in
    order, with their values, and the methods and attributes defined in the body)."""
    # ``_value_`` and ``_member_map_``: enum's documented sunder names
    members = [(k, m._value_) for k, m in cls.__dict__["_member_map_"].items()]
    names = {k for k, _ in members}
    attrs = {
        k: v
        for k, v in cls.__dict__.items()
        if k not in names and k not in _ENUM_OWN and not _is_sunder(k)
    }  # what the body defined: not the members, not the metaclass's _sunder_ bookkeeping
    return (
        _make_enum,
        (type(cls), cls.__name__, cls.__bases__, attrs, members, cls.__qualname__, cls.__module__),
    )


_ENUM_OWN = {"__module__", "__qualname__", "__new__", "__dict__", "__weakref__"}


def _is_sunder(name: str) -> bool:
    return len(name) > 2 and name[0] == name[-1] == "_" and name[1] != "_" and name[-2] != "_"


def _open_memmap(filename, dtype, mode, offset, shape, order):
    import numpy as np

    if not os.path.exists(filename):
        raise CheckpointError(
            f"it is a numpy.memmap of {filename}, which no longer exists; restore the file, "
            "then restore again"
        )
    return np.memmap(
        filename,
        dtype=dtype,
        mode="r+" if mode == "w+" else mode,
        offset=offset,
        shape=shape,
        order=order,
    )


def _identity(filename) -> tuple[int, int, int, int]:
    st = os.stat(filename)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _open_memmap_slice(filename, identity, mode, start, span, first, dtype, shape, strides):
    """A slice of a memmap: the ``span`` bytes it reaches from ``start`` in the file,
    mapped again, and viewed as it was (``first`` bytes in, with its strides)."""
    import numpy as np

    if os.path.exists(filename) and _identity(filename) != tuple(identity):
        raise CheckpointError(
            f"it is a slice of a numpy.memmap of {filename}, which changed since the "
            "checkpoint (another file, size or modification time); its data was not saved"
        )
    whole = _open_memmap(filename, np.uint8, mode, start, (span,), "C")
    view = np.ndarray.__new__(np.memmap, shape, dtype, buffer=whole, offset=first, strides=strides)
    # what numpy.memmap.__new__ sets on a memmap (``_mmap`` is numpy's, it has no setter)
    view._mmap, view.filename, view.mode, view.offset = (
        whole._mmap,
        whole.filename,
        whole.mode,
        start + first,
    )
    return view


def _make_parametrized(cls):
    return cls.__new__(cls)


def _parametrized_setstate(module, state):
    """Give the module its state (the originals live in ``parametrizations``), then let
    torch put its parametrized class and properties back, as ``register_parametrization``
    does, without recomputing the originals from the current weight."""
    from torch.nn.utils import parametrize

    module.__dict__.update(state)
    # torch's own helpers (what register_parametrization calls): no public API does this
    parametrize._inject_new_class(module)
    for name in module.parametrizations:
        parametrize._inject_property(module, name)


def reduce_parametrized(module):
    """A module with parametrizations (``weight_norm``, ``orthogonal``, ...): torch refuses
    to pickle it ("only supported through state_dict()") because its class is made on the
    fly. Saved as its original class plus its state; rebuilt with torch's own helpers."""
    if not hasattr(module, "parametrizations"):
        return NotImplemented  # another class of torch's parametrize module
    return (
        _make_parametrized,
        (type(module).__bases__[0],),
        dict(module.__dict__),
        None,
        None,
        _parametrized_setstate,
    )


def _view_as(array, cls):
    return array.view(cls)


def reduce_method(method):
    """A method bound to a class defined in a cell (a ``classmethod`` that pydantic keeps
    among a model's validators): pickle's default, ``getattr(cls, name)``, runs while the
    class is still being rebuilt, before its attributes are set (``AttributeError``).
    Bound again from its function instead, as cloudpickle does."""
    owner = method.__self__
    if not (isinstance(owner, type) and _class_by_value(owner)):
        return NotImplemented
    return (_bind, (method.__func__, owner))


def _bind(func, owner):
    return types.MethodType(func, owner)


def _mappingproxy(d):
    return types.MappingProxyType(d)


def _make_cached_property(func, attrname, doc):
    cp = functools.cached_property(func)
    cp.attrname = attrname
    cp.__doc__ = doc
    return cp


# ----------------------------------------------------------------- by-value decisions
_by_value = sharing.by_value
_class_by_value = sharing.class_by_value


def _code_names(code, out: set) -> set:
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_names(c, out)
    return out


def _globals_ref(func, namespace):
    g = func.__globals__
    main = sys.modules.get("__main__")
    if g is namespace or (main is not None and g is getattr(main, "__dict__", None)):
        return NAMESPACE
    module = func.__module__
    if module in sys.modules and getattr(sys.modules[module], "__dict__", None) is g:
        return (_module_dict, module)
    # an exec'd / dynamic module: carry just the globals the code uses
    sub = {k: g[k] for k in _code_names(func.__code__, set()) if k in g}
    sub["__name__"] = module
    return sub


def reduce_function(func, namespace):
    ref = _globals_ref(func, namespace)
    cells = []
    for cell in func.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:
            cells.append(EMPTY_CELL)
    state = {
        "__defaults__": func.__defaults__,
        "__kwdefaults__": func.__kwdefaults__,
        "__qualname__": func.__qualname__,
        "__doc__": func.__doc__,
        "__module__": func.__module__,
        "__annotations__": func.__annotations__,
        "__dict__": dict(func.__dict__) or None,
        "cells": cells,
    }
    globals_ = _ModuleDict(ref[1]) if isinstance(ref, tuple) else ref
    return (
        _make_function,
        (func.__code__, globals_, func.__name__, len(cells)),
        state,
        None,
        None,
        _function_setstate,
    )


class _ModuleDict:
    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return (_module_dict, (self.name,))


_SKIP_CLASS_ATTRS = {"__dict__", "__weakref__", "_abc_impl", "__module__", "__qualname__"}


def reduce_class(cls):
    import enum

    if isinstance(cls, enum.EnumMeta):
        return reduce_enum(cls)
    d = dict(cls.__dict__)
    type_kwargs: dict[str, Any] = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    slots = d.pop("__slots__", None)
    if slots is not None:
        slots = (slots,) if isinstance(slots, str) else tuple(slots)
        type_kwargs["__slots__"] = slots
        for name in slots:
            d.pop(name, None)
    if "__doc__" in d:
        type_kwargs["__doc__"] = d.pop("__doc__")
    for k in _SKIP_CLASS_ATTRS:
        d.pop(k, None)
    # class Box(Generic[T]): the bases as written (Generic[T]) rebuild it, the resolved ones
    # (Generic) do not ("Cannot inherit from plain Generic"). But class P(NamedTuple): the
    # base written is a function that builds a class from a class body, and refuses the
    # built class's own dict ("Cannot overwrite NamedTuple attribute __slots__"): those
    # are rebuilt on their resolved bases (tuple), as any class, their dict set after.
    bases = cls.__bases__
    written = d.get("__orig_bases__", ())
    if written and all(isinstance(b, type) or hasattr(b, "__origin__") for b in written):
        bases = d.pop("__orig_bases__")
    d.pop("__parameters__", None)  # recomputed by Generic.__init_subclass__
    return (
        _make_class,
        (type(cls), cls.__name__, bases, type_kwargs),
        d,
        None,
        None,
        _class_setstate,
    )


# ----------------------------------------------------------------- chunks
CHUNK = 8192  # items per chunk (StatePickler._chunks)
CHUNK_MIN = 2 * CHUNK  # a container with fewer items is pickled whole


def _chunked(kind, parts):  # replaced by the unpickler
    raise RuntimeError("this pickle must be loaded with jupyter_pause.restore()")


def _object_array(shape, order, writeable, parts):  # replaced by the unpickler
    raise RuntimeError("this pickle must be loaded with jupyter_pause.restore()")


class _Chunked:
    """A variable's large container, as the chunks its items are pickled in."""

    def __init__(self, kind: str, parts):
        self.kind, self.parts = kind, parts


class _Streamed:
    """Chunks pickled one at a time, as the pickler writes them (StatePickler._stream)."""

    def __init__(self, parts):
        self.parts = parts


class ChunkShared(Exception):
    """A chunk holds an object something else holds too (StatePickler._chunks)."""

    def __init__(self, obj):
        super().__init__(f"a chunk holds a {type(obj).__name__} that something else holds too")


_NOBODY: dict = {}  # ``_NOBODY.get``: a persistent_id that keeps nothing and names nothing


_CHUNKABLE = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset", dict: "dict"}


def _slices(obj, kind: str):
    """Lists of ``obj``'s items, CHUNK at a time (a dict's as [keys, values])."""
    if kind == "dict":
        keys, values = iter(obj), iter(obj.values())
        for _ in range(0, len(obj), CHUNK):
            part = list(itertools.islice(keys, CHUNK))
            yield [*part, *itertools.islice(values, len(part))]
        return
    items = iter(obj)
    for _ in range(0, len(obj), CHUNK):
        yield list(itertools.islice(items, CHUNK))


def _join(kind: str, parts: list) -> Any:
    """The container :func:`_slices` cut into ``parts`` (the lists, unpickled)."""
    if kind == "dict":
        out: dict = {}
        for part in parts:
            half = len(part) // 2
            out.update(zip(part[:half], part[half:], strict=True))
        return out
    items = itertools.chain.from_iterable(parts)
    return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)


sharing.identity_free(_Chunked, _Streamed)


# ----------------------------------------------------------------- the pickler
class StatePickler(pickle.Pickler):
    def __init__(
        self,
        file,
        collector: tensors.Collector,
        namespace: dict | None,
        check_classes: bool = True,
        roots: dict[int, Any] | None = None,
        chunking: bool = True,
    ):
        super().__init__(file, protocol=PROTOCOL)
        self.collector = collector
        self.namespace = namespace
        #: id -> object of every variable of the checkpoint (engine/sharing.py)
        self.roots = roots if roots is not None else {}
        self.chunking = chunking  # large containers and object arrays in chunks (_chunks)
        #: try to rebuild each class saved by value before calling it saved (check_rebuilds)
        self.check_classes = check_classes
        torch = sys.modules.get("torch")
        np = sys.modules.get("numpy")
        self._tensor_base = torch.Tensor if torch is not None else None
        #: global names the by-value code pickled so far reads (a cell function's globals
        #: are the namespace: calling it may change those variables)
        self.code_names: set[str] = set()
        d: dict[type, Any] = {
            types.FunctionType: self._reduce_function,
            types.CodeType: lambda o: (_load_code, (tuple(sys.version_info[:2]), marshal.dumps(o))),
            types.ModuleType: self._reduce_module,
            types.MappingProxyType: lambda o: (_mappingproxy, (dict(o),)),
            property: lambda o: (property, (o.fget, o.fset, o.fdel, o.__doc__)),
            staticmethod: lambda o: (staticmethod, (o.__func__,)),
            classmethod: lambda o: (classmethod, (o.__func__,)),
            types.MethodType: reduce_method,
            typing.TypeVar: reduce_typevar,
            weakref.ref: reduce_weakref,
            functools._lru_cache_wrapper: reduce_lru_cache,  # the stdlib's type of lru_cache
            functools.cached_property: lambda o: (
                _make_cached_property,
                (o.func, o.attrname, o.__doc__),
            ),
        }
        # dataclass sentinels are compared with `is`: keep them by reference
        for name in ("MISSING", "KW_ONLY"):
            sentinel = getattr(dataclasses, name, None)
            if sentinel is not None:
                d[type(sentinel)] = functools.partial(self._reduce_attr, dataclasses, name)
        field_base = getattr(dataclasses, "_FIELD_BASE", None)
        if field_base is not None:
            d[field_base] = lambda o: (getattr, (dataclasses, o.name))
        if np is not None:
            d[np.ndarray] = self._reduce_ndarray
            d[np.memmap] = self._reduce_memmap
            d[np.recarray] = self._reduce_recarray
        d[_Chunked] = self._reduce_chunked
        d[_Streamed] = self._reduce_streamed
        self._dispatch = d
        self._by_class: dict[type, Any] = {}  # cls -> its handler (_handler_for)
        # every object the pickler is asked to save, in order (a C call per object, no
        # Python frame), read by seen() (engine/sharing.py)
        self._visited: list = []
        self.persistent_id = self._visited.append  # returns None: nothing is persistent
        self._chunk_ids: list = []  # what the chunks pickled apart showed (their ids)

    def _reduce_function(self, func):
        if not _by_value(func):
            return NotImplemented
        code = [func.__code__]
        while code:
            c = code.pop()
            self.code_names.update(c.co_names)
            code += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        return reduce_function(func, self.namespace)

    def seen(self) -> sharing.Seen:
        """What the objects pickled so far show of their sharing (engine/sharing.py). Ends
        the pickle: its memo is cleared and the objects visited are forgotten."""
        self.clear_memo()  # its references would count as the objects' own
        out = sharing.seen(self._visited, self.roots)
        if self._chunk_ids:
            out.ids = sharing.merge_ids(out.ids, *self._chunk_ids)
            self._chunk_ids = []
        return out

    def close(self) -> None:
        """Free this pickler now: its dispatch table holds its own bound methods, a cycle
        only the cyclic collector would break, and a checkpoint runs with it paused (a
        pickler per chunk then kept its memo's table: 107 MB beside 420,000 dicts)."""
        self.clear_memo()
        self._dispatch = {}
        self._by_class = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- large containers, pickled in chunks ---------------------------------------
    def _chunks(self, parts):
        """Each of ``parts`` (lists of a container's items, emptied here) pickled on its
        own, one at a time as the pickler writes them (:class:`_Streamed`). Raises
        :class:`ChunkShared` when one holds an object something else holds too: the
        container then needs the one memo of the pickle it is in, and the variable is
        pickled again without chunks (records.pickle_group).

        One memo over millions of objects costs most of a pickle's time (its table no
        longer fits any cache: 1.4 million small dicts pickle in 2.8 s with one memo,
        0.4 s in memos of 10,000). A chunk's objects are each held by one object only
        (engine/sharing.py), so no other chunk and no other variable can hold them, and
        copies cannot come back where one object was. Items that hold nothing (str, int,
        ...) need no such check."""
        for part in parts:
            if sharing.ATOMIC.issuperset(set(map(type, part))):
                yield pickle.dumps(part, protocol=PROTOCOL)
                continue
            buf = io.BytesIO()
            with StatePickler(
                buf, self.collector, self.namespace, self.check_classes, self.roots
            ) as sub:
                sub.dump(part)
                sub.clear_memo()
                part.clear()  # the items' references from this list are not theirs
                ids = sharing.chunk_ids(sub._visited)
                if ids is None:  # not told quickly: read it all
                    found = sharing.seen(sub._visited, self.roots, skip=1)
                    if found.shared:
                        raise ChunkShared(next(iter(found.shared.values())))
                    ids = found.ids
            self.code_names |= sub.code_names
            self._chunk_ids.extend([ids, *sub._chunk_ids])
            yield buf.getvalue()

    def _stream(self, parts):
        """``parts`` as the pickler takes them, each saved outside its memo and its visited
        list (a chunk's bytes hold nothing another variable could share), so that each is
        freed once written: the chunks of a variable never sit in memory together."""
        remembered, fast = self.persistent_id, self.fast
        try:
            for part in parts:
                self.persistent_id, self.fast = _NOBODY.get, True
                yield part
        finally:
            self.persistent_id, self.fast = remembered, fast

    def dump_root(self, obj) -> None:
        """Pickle ``obj``, a variable, in chunks (:meth:`_chunks`) if it is a large list,
        tuple, set or dict; as one pickle otherwise."""
        kind = _CHUNKABLE.get(type(obj))
        if self.chunking and kind is not None and len(obj) >= CHUNK_MIN:
            self.dump(_Chunked(kind, _Streamed(self._chunks(_slices(obj, kind)))))
        else:
            self.dump(obj)

    @staticmethod
    def _reduce_chunked(c):
        return (_chunked, (c.kind, c.parts))

    def _reduce_streamed(self, s):
        return (list, (), None, self._stream(s.parts))

    def _reduce_ndarray(self, a):
        if not a.dtype.hasobject:
            return self.collector.reduce_numpy(a)
        if a.dtype.kind == "O":  # of str, float, ...: a storage, shared like any array's
            reduced = self.collector.reduce_objects(a)
            if reduced is not NotImplemented:
                return reduced
        self.collector.object_array(a)
        if self.chunking and a.dtype.kind == "O" and a.size >= CHUNK_MIN:
            # strings in pandas without pyarrow
            order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
            flat = a.ravel(order=order)
            parts = (flat[i : i + CHUNK].tolist() for i in range(0, flat.size, CHUNK))
            shape = (a.shape, order, bool(a.flags.writeable))
            return (_object_array, (*shape, _Streamed(self._chunks(parts))))
        return NotImplemented  # numpy's own: the items in this pickle's memo

    def _reduce_memmap(self, a):
        """A ``numpy.memmap`` that maps a whole file region comes back as a memmap of that
        file (its data is the file's, not the checkpoint's). A slice of one comes back as
        a memmap of the bytes it spans, checked against the file's identity (device,
        inode, size, modification time): neither is written into the checkpoint. A
        copy-on-write map, whose changes live only in memory, is saved as an array (a
        slice of one as a copy of the slice alone)."""
        import mmap

        np = sys.modules["numpy"]
        self.collector.in_band = True  # its data lives in its own file: re-pickle it
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not (isinstance(root, np.memmap) and isinstance(root.base, mmap.mmap)):
            return self.collector.reduce_numpy(a.view(type=np.ndarray))
        if not root.filename or root.mode == "c" or (root is not a and not a.size):
            view = a.view(type=np.ndarray)
            return self.collector.reduce_numpy(view if root is a else np.array(view))
        if root.mode in ("r+", "w+"):
            root.flush()
        filename = os.fspath(root.filename)
        if root is a:
            order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
            return (_open_memmap, (filename, a.dtype.str, a.mode, a.offset, a.shape, order))
        lo = hi = a.__array_interface__["data"][0]
        for n, stride in zip(a.shape, a.strides, strict=False):
            lo += min(0, stride * (n - 1))
            hi += max(0, stride * (n - 1))
        start = root.offset + lo - root.__array_interface__["data"][0]
        first = a.__array_interface__["data"][0] - lo
        span = hi + a.itemsize - lo
        where = (filename, _identity(filename), root.mode, start, span)
        return (_open_memmap_slice, (*where, first, a.dtype.str, a.shape, a.strides))

    def _reduce_recarray(self, a):
        """A ``recarray``: its memory saved as a plain array's (so that a view keeps
        sharing it with its base), viewed as a recarray again at restore."""
        np = sys.modules["numpy"]
        if a.dtype.hasobject:
            self.collector.in_band = True
            return NotImplemented
        return (_view_as, (a.view(np.ndarray), type(a)))

    @staticmethod
    def _reduce_attr(module, name, obj):
        return (getattr, (module, name))

    @staticmethod
    def _reduce_module(mod):
        name = ns_mod.module_name(mod)
        if name is None:
            raise pickle.PicklingError(f"module {mod.__name__!r} cannot be re-imported by name")
        if ":" in name:  # an extension's submodule: an attribute of its package
            return (ns_mod.reimport, (name,))
        return (importlib.import_module, (name,))

    def reducer_override(self, obj):
        cls = type(obj)
        handler = self._dispatch.get(cls)
        if handler is None:
            handler = self._by_class.get(cls, _UNKNOWN)
            if handler is _UNKNOWN:
                handler = self._by_class[cls] = self._handler_for(cls)
        if handler is not None:
            return handler(obj)
        if isinstance(obj, type) and _class_by_value(obj):
            if self.check_classes:
                check_rebuilds(obj, self.namespace)
            return reduce_class(obj)
        return NotImplemented

    def _handler_for(self, cls: type):
        """How instances of ``cls``, a class without an entry in the dispatch table, are
        reduced here; None: as pickle does."""
        if self._tensor_base is not None:
            if issubclass(cls, self._tensor_base):
                return self.collector.reduce_torch
            if cls.__module__ == "torch.nn.utils.parametrize":
                return reduce_parametrized  # a module with parametrizations, or as pickle does
        pandas_block = _pandas_block()
        if pandas_block is not None and issubclass(cls, pandas_block):
            return reduce_pandas_block
        return None


_UNKNOWN = object()
_PANDAS_BLOCK = ("pandas._libs.internals", "_unpickle_block")  # what pandas' blocks reduce to


def _noted(make, made: list, *args):
    """``make(*args)``, the result noted in ``made`` (pandas blocks: link_pandas_blocks)."""
    out = make(*args)
    made.append(out)
    return out


def link_pandas_blocks(blocks: list) -> None:
    """Let the pandas blocks a restore made over one storage's memory track each other, as
    pandas' own blocks did before the checkpoint (``s = df["a"]``, ``df.iloc[a:b]``): a
    write to one frame then copies its block first instead of changing the others (pandas
    copies on write; without this, a restored ``df.loc[0, "a"] = 9`` changed ``s`` too)."""
    np = sys.modules.get("numpy")
    by_memory: dict[int, list] = {}
    for block in blocks:
        values = getattr(block, "values", None)
        if np is None or type(values) is not np.ndarray or not hasattr(block, "refs"):
            continue
        base = values
        while isinstance(base.base, np.ndarray):
            base = base.base
        by_memory.setdefault(id(base), []).append(block)
    for same in by_memory.values():
        refs = same[0].refs
        for block in same[1:]:
            if block.refs is not refs:
                refs.add_reference(block)
                block.refs = refs


def _pandas_block() -> type | None:
    """pandas' Block, the base of the blocks a DataFrame keeps its columns in."""
    internals = sys.modules.get("pandas._libs.internals")
    block = getattr(internals, "Block", None)
    return block if isinstance(block, type) else None


def reduce_pandas_block(block):
    """A pandas block as pandas reduces it, but with the array it holds rather than the
    contiguous copy pandas makes of a view (``df.iloc[a:b]`` of several columns): the view
    then keeps sharing its frame's memory after a restore, as it did before, and it is
    the same array at the next checkpoint, so the block's records can be copied again
    (engine/records.py). A restore links the blocks that share memory as pandas links
    them (copy on write: tensors.link_pandas_blocks)."""
    reduced = block.__reduce_ex__(PROTOCOL)
    np = sys.modules.get("numpy")
    values = getattr(block, "values", None)
    if (
        np is not None
        and isinstance(reduced, tuple)
        and len(reduced) >= 2
        and isinstance(reduced[1], tuple)
        and reduced[1]
        and type(values) is np.ndarray
        and type(reduced[1][0]) is np.ndarray
        and reduced[1][0] is not values
        and reduced[1][0].shape == values.shape
        and reduced[1][0].dtype == values.dtype
    ):
        return (reduced[0], (values, *reduced[1][1:]), *reduced[2:])
    return reduced


sharing.identity_free(_ModuleDict, _NamespaceRef, _EmptyCell)


DEEP_RECURSION_LIMIT = 100_000
DEEP_STACK_BYTES = 512 << 20  # virtual: only the pages a deep graph touches are used


def deep(fn, *args):
    """``fn(*args)`` in a thread whose C stack and recursion limit fit deeply nested
    objects: a linked list of a few thousand nodes exceeds Python's default limit of
    1,000 when pickled or unpickled. Used only after a RecursionError."""
    outcome: dict[str, Any] = {}

    def run():
        try:
            outcome["value"] = fn(*args)
        except BaseException as e:  # re-raised in the caller's thread
            outcome["error"] = e

    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    threading.stack_size(DEEP_STACK_BYTES)
    try:
        worker = threading.Thread(target=run, name="jupyter-pause-deep")
        sys.setrecursionlimit(max(old_limit, DEEP_RECURSION_LIMIT))
        worker.start()
    finally:
        threading.stack_size(old_stack)
    try:
        worker.join()
    finally:
        sys.setrecursionlimit(old_limit)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class _NullWriter:
    def write(self, b):
        return len(b)


def probe(obj, namespace) -> str | None:
    """Pickle ``obj`` alone to nowhere; return why it cannot be saved, or None."""

    def dump():
        with StatePickler(_NullWriter(), tensors.Collector(), namespace) as p:
            p.dump(obj)

    try:
        try:
            dump()
        except RecursionError:
            deep(dump)
    except Exception as e:  # any failure means "cannot save"
        return describe(e)
    return None


def describe(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= 300 else text[:297] + "..."


#: class saved by value -> (its ``__dict__`` entries when tried, why it did not rebuild)
_REBUILDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_rebuilds(cls: type, namespace: dict | None) -> None:
    """Refuse (``PicklingError``) a class saved by value that does not rebuild from its
    own pickle, so that a checkpoint never calls saved what it can already tell will not
    load (a metaclass that reads the class body, an attribute looked up on the class
    while it is rebuilt). The class is rebuilt once, into a scratch namespace, and the
    verdict kept until its ``__dict__`` changes. Classes holding tensor data are not
    tried: only a restore has their buffers."""
    entries = tuple((k, id(v)) for k, v in cls.__dict__.items())
    known = _REBUILDS.get(cls)
    if known is None or known[0] != entries:
        known = _REBUILDS[cls] = (entries, _rebuild_fails(cls, namespace))
    if known[1] is not None:
        raise pickle.PicklingError(f"class {cls.__qualname__} would not load again: {known[1]}")


def _rebuild_fails(cls: type, namespace: dict | None) -> str | None:
    buf = io.BytesIO()
    collector = tensors.Collector()
    try:
        with StatePickler(buf, collector, namespace, check_classes=False) as p:
            p.dump(cls)
    except Exception:
        return None  # it does not pickle: saving it says why
    if collector.storages:
        return None
    no_data = types.SimpleNamespace(rebuild_tensor=None, rebuild_array=None)
    try:
        StateUnpickler(io.BytesIO(buf.getvalue()), no_data, {"__name__": "__main__"}).load()
    except Exception as e:
        return describe(e)
    return None


# ----------------------------------------------------------------- the unpickler
class MissingClass(CheckpointError):
    def __init__(self, module, name, error):
        self.module, self.name = module, name
        super().__init__(
            f"needs {module}.{name}, which no longer exists here ({type(error).__name__}: {error}); "
            "install or define it again (re-run its cell), then restore"
        )


class _Resolving:
    """How our unpicklers find classes: tensors and arrays come from the loader, cell
    functions' globals are the namespace being restored into."""

    def __init__(self, file, loader, namespace):
        super().__init__(file)
        self._loader, self._namespace = loader, namespace
        self._special = {
            ("jupyter_pause.engine.tensors", "_rebuild_tensor"): loader.rebuild_tensor,
            ("jupyter_pause.engine.tensors", "_rebuild_array"): loader.rebuild_array,
            ("jupyter_pause.engine.tensors", "_rebuild_objects"): getattr(
                loader, "rebuild_objects", None
            ),
            ("jupyter_pause.engine.pickling", "_namespace"): lambda: namespace,
            ("jupyter_pause.engine.pickling", "_chunked"): self._chunked,
            ("jupyter_pause.engine.pickling", "_object_array"): self._object_array,
        }

    def _part(self, data: bytes):
        """One chunk (StatePickler._chunks): a pickle of its own, in this one's verified
        bytes, loaded with a memo of its own."""
        return StateUnpickler(io.BytesIO(data), self._loader, self._namespace).load()

    def _chunked(self, kind, parts):
        return _join(kind, [self._part(p) for p in parts])

    def _object_array(self, shape, order, writeable, parts):
        import numpy as np

        size = 1
        for n in shape:
            size *= n
        items = itertools.chain.from_iterable(map(self._part, parts))
        out = np.fromiter(items, dtype=object, count=size).reshape(shape, order=order)
        out.flags.writeable = writeable
        return out

    def find_class(self, module, name):
        special = self._special.get((module, name))
        if special is not None:
            return special
        try:
            found = super().find_class(module, name)
        except (ImportError, AttributeError) as e:
            raise MissingClass(module, name, e) from None
        if (module, name) == _PANDAS_BLOCK and hasattr(self._loader, "pandas_blocks"):
            return functools.partial(_noted, found, self._loader.pandas_blocks)
        return found


class StateUnpickler(_Resolving, pickle.Unpickler):
    """The C unpickler: what every restore uses until a record fails."""


class _CarefulUnpickler(_Resolving, pickle._Unpickler):
    """The pure-Python unpickler, used after a record failed: its memo can be set from a
    dict (the C unpickler ignores a dict assigned to ``memo`` on CPython 3.11: its entries
    are not found, and later records then read the wrong objects or crash)."""


class _Lost:
    """Memo placeholder for an object of a record that failed: keeps the memo's numbering
    aligned with the pickler's. Never handed out: records that refer to it are refused."""

    def __repr__(self):
        return "<lost>"


_LOST = _Lost()
_GETS = {"GET", "BINGET", "LONG_BINGET"}
_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
# what these opcodes push is complete the moment it is memoised (a class or function found
# by name, a string): it stays usable even when the rest of its record failed
_WHOLE = {
    "GLOBAL",
    "STACK_GLOBAL",
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "SHORT_BINBYTES",
    "BINBYTES",
    "BINBYTES8",
    "SHORT_BINSTRING",
    "BINSTRING",
    "STRING",
}


def _memo_use(data: bytes, start: int, end: int, next_index: int):
    """(memo indices read, [(memo index written, complete when written)], next index) of
    one record. Protocol 4+ memoises with MEMOIZE, whose index is implicit (the memo's
    size), so the numbering of every record depends on all records before it."""
    import pickletools

    gets, puts = set(), []
    previous = None
    for op, arg, _pos in pickletools.genops(io.BytesIO(memoryview(data)[start:end])):
        if op.name == "MEMOIZE":
            puts.append((next_index, previous in _WHOLE))
            next_index += 1
        elif op.name in _PUTS:
            puts.append((arg, previous in _WHOLE))
            next_index = max(next_index, arg + 1)
        elif op.name in _GETS:
            gets.add(arg)
        elif op.name == "STOP":
            break
        previous = op.name
    return gets, puts, next_index


def load_records(
    data: bytes, offsets: list[int], upto: int, loader, namespace, names: dict | None = None
):
    """Unpickle records 0..upto (inclusive) with one shared memo.

    Returns (objects, failures); ``names`` (record -> variable) words the failures.
    A record that fails is reported and the next ones are still
    tried. The failed record may have left half-built objects in the memo; a later record
    that used them could crash the interpreter (SIGSEGV, not an exception), and simply
    dropping them would shift the memo numbering of every later record. So after a failure
    the memo keeps only complete records' objects, the failed record's slots hold a
    placeholder, and a later record that refers to one is refused (named), not loaded."""
    buf = io.BytesIO(data)
    u = StateUnpickler(buf, loader, namespace)
    objs: dict[int, Any] = {}
    failures: dict[int, str] = {}
    lost: dict[int, int] = {}  # memo index -> the failed record it belonged to
    starts: list[int] = []  # memo size before each record, known once something failed
    fresh_memo = None  # a memo to start a new unpickler with before the next load

    def end_of(i):
        return offsets[i + 1] if i + 1 < len(offsets) else len(data)

    for i in range(upto + 1):
        if starts:  # something failed before: number this record's memo slots too
            gets, puts, after = _memo_use(data, offsets[i], end_of(i), starts[i])
            starts.append(after)
            needs = sorted({lost[g] for g in gets if g in lost})
            if needs:
                names = names or {}
                failures[i] = (
                    "it shares objects with "
                    + ", ".join(names.get(n, f"record {n}") for n in needs)
                    + ", which could not be restored"
                )
                memo = fresh_memo if fresh_memo is not None else u.memo.copy()
                for k, _whole in puts:
                    lost[k] = i
                    memo[k] = _LOST
                fresh_memo = memo
                continue
        if fresh_memo is not None:
            u = _CarefulUnpickler(buf, loader, namespace)
            u.memo = fresh_memo
            fresh_memo = None
        buf.seek(offsets[i])
        try:
            objs[i] = u.load()
            continue
        except CheckpointError as e:
            failures[i] = str(e)
        except Exception as e:
            failures[i] = describe(e)
        if not starts:  # the first failure: number the memo slots of records 0..i
            n = 0
            for j in range(i + 1):
                starts.append(n)
                n = _memo_use(data, offsets[j], end_of(j), n)[2]
            starts.append(n)
        # the C unpickler keeps buffered input and stack state after an error: the next
        # load uses a new one, whose memo holds complete objects only
        memo = u.memo.copy()
        for k, whole in _memo_use(data, offsets[i], end_of(i), starts[i])[1]:
            if not (whole and k in memo):
                lost[k] = i
                memo[k] = _LOST
        fresh_memo = memo
    return objs, failures


def load_groups(data: bytes, manifest, records: list[int], loader, namespace, names=None):
    """Unpickle ``records`` (from ``Manifest.records_to_load``), each group of records with
    its own memo (format 2; format 1 is one group). A failure stays inside its group.
    Returns (objects, failures) keyed by record index, like :func:`load_records`."""
    wanted = set(records)
    offsets = manifest.records
    objs: dict[int, Any] = {}
    failures: dict[int, str] = {}
    for first, end, local in manifest.spans():
        last = max((r for r in wanted if first <= r < end), default=None)
        if last is None:
            continue
        start = offsets[first]
        stop = offsets[end] if end < len(offsets) else len(data)
        whole = (start, stop) == (0, len(data)) and isinstance(data, bytes)
        part = data if whole else data[start:stop]
        rebased = [offsets[r] - start for r in range(first, end)]
        local_names = {r - first: n for r, n in (names or {}).items() if first <= r < end}
        loader.local = local
        try:
            o, f = load_records(part, rebased, last - first, loader, namespace, local_names)
        finally:
            loader.local = None
        objs.update({first + i: v for i, v in o.items()})
        failures.update({first + i: v for i, v in f.items()})
    return objs, failures
