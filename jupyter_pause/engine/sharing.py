"""Which objects two variables may share, found without a Python call per object.

A checkpoint pickles each variable alone first (engine/records.py); variables that hold
one object between them must then be pickled together, with one memo, or the object
comes back twice. The pickler hands every object it saves to ``list.append`` (its
``persistent_id``: a C call, no Python frame), and this module reads that list with C
loops (``map`` over ``sys.getrefcount``, ``type`` and ``id``, and numpy over the
results); Python code runs only for the few objects that pass those tests.

Two figures come out of each pickle (:class:`Seen`):

* ``shared``: the objects another variable may hold *now*. An object reachable from two
  variables has at least two referrers (the paths to it from each meet at it or above
  it), or it is a variable itself. So only objects with two or more references, and the
  variables' own objects (``roots``), can be shared; an object with one reference, held
  by its parent alone, cannot. Those are kept alive until the checkpoint ends, so that
  their ids cannot be reused.
* ``ids``: every object of the pickle whose identity matters and which some object holds
  (a temporary that a ``__reduce__`` made has no referrer). A later checkpoint compares
  what it pickles again with the groups it reuses by these: a cell may bind a new name to
  an object that was held once when the group was pickled (``alias = registry.a[5]``).

Whose identity does not matter: immutable values (str, numbers, tuples, ...), classes and
functions found again by name, numpy dtypes and scalars, and numpy arrays other than a
variable itself (their memory stays shared through the storages, engine/tensors.py).
Pandas' own parts (indexes, extension arrays, dtypes, block managers) are in that list
too: pandas copies on write, so a frame and the frames made from it behave as copies of
each other, and pickling them apart keeps that; a DataFrame or Series itself stays an
object whose identity matters.
"""

from __future__ import annotations

import itertools
import operator
import sys
import types
from dataclasses import dataclass, field
from typing import Any

#: exact types that hold no other object: a container of only these cannot share anything
ATOMIC = frozenset({str, bytes, int, float, complex, bool, type(None)})

# exact types whose sharing between variables does not matter (immutable values, markers);
# pickling.py adds its own markers through :func:`identity_free`
_IDENTITY_FREE = {
    *ATOMIC,
    tuple,
    frozenset,
    range,
    slice,
    types.CodeType,
    types.ModuleType,
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    type(Ellipsis),
    type(NotImplemented),
}

VECTOR_MIN = 4096  # below this many objects a Python loop is cheaper than numpy's set-up


def identity_free(*classes: type) -> None:
    """Declare exact types whose instances never need to stay shared (markers)."""
    _IDENTITY_FREE.update(classes)
    _VERDICT.clear()


# ----------------------------------------------------------------- by-value code
def by_value(obj) -> bool:
    """True if ``obj`` (a function or class) cannot be found again by module + qualname."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if module == "__main__" or module is None:
        return True
    if "<locals>" in qualname or "<lambda>" in qualname:
        return True
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    # e.g. namedtuple's _make (module "collections", qualname "Point._make")
    return found is not obj


def class_by_value(cls) -> bool:
    if cls.__module__ == "builtins" or not isinstance(cls.__dict__.get("__module__"), str):
        return False  # C types: never rebuild by value
    return by_value(cls)


# ----------------------------------------------------------------- types
_FREE, _KEEP, _ASK = 0, 1, 2  # a type's verdict; _ASK: it depends on the object


class _Verdicts(dict):
    """type -> verdict, decided on first sight (``map(_VERDICT.__getitem__, ...)`` stays
    a C loop for the types already seen)."""

    def __missing__(self, t: type) -> int:
        v = self[t] = _decide(t)
        return v


_VERDICT = _Verdicts()
_verdict = _VERDICT.__getitem__


#: ids of the mutable objects that classes found by name hold (``NDFrame._metadata``):
#: their instances' pickles all reach them, yet no variable owns them
_CLASS_HELD: set[int] = set()
_CODE_TYPES = ("cython_function_or_method", "fused_cython_function")


def _decide(t: type) -> int:
    for c in t.__mro__:
        if not class_by_value(c):
            _CLASS_HELD.update(
                id(v) for v in c.__dict__.values() if type(v) in (list, dict, set, bytearray)
            )
    if t in _IDENTITY_FREE:
        return _FREE
    if t is types.FunctionType or issubclass(t, type) or t.__name__ in _CODE_TYPES:
        return _ASK  # by value (a cell's) or found by name
    np = sys.modules.get("numpy")
    if np is not None and (
        issubclass(t, (np.dtype, np.generic)) or t in (np.ndarray, np.memmap) or t is type(np.dtype)
    ):
        return _ASK if t in (np.ndarray, np.memmap) else _FREE  # an array: free unless a root
    torch = sys.modules.get("torch")
    if torch is not None and t in (torch.dtype, torch.device, torch.Size, torch.layout):
        return _FREE
    if _pandas_part(t):
        return _ASK  # free unless a variable (``idx = df.index``)
    return _KEEP


def _pandas_part(t: type) -> bool:
    """One of pandas' own parts (see the module doc), not a DataFrame or Series."""
    pd = sys.modules.get("pandas")
    if pd is None or not (t.__module__ or "").startswith("pandas"):
        return False
    if issubclass(t, (pd.DataFrame, pd.Series)):
        return False
    ext = getattr(getattr(pd, "api", None), "extensions", None)
    parts = tuple(
        c
        for c in (
            pd.Index,
            getattr(ext, "ExtensionArray", None),
            getattr(ext, "ExtensionDtype", None),
            pd.Timestamp,
            pd.Timedelta,
            pd.Period,
            pd.Interval,
            type(pd.NaT),
            type(pd.NA),
        )
        if isinstance(c, type)
    )
    return issubclass(t, parts) or t.__module__.startswith(
        ("pandas._libs", "pandas.core.internals", "pandas.core.flags")
    )


def _matters(obj, roots: dict[int, Any]) -> bool:
    """Whether ``obj``'s identity matters, given its type asked (_ASK)."""
    if id(obj) in roots:
        return True
    if isinstance(obj, type):
        return class_by_value(obj)
    if hasattr(obj, "__code__") or type(obj).__name__ in _CODE_TYPES:
        return by_value(obj)
    return False  # a numpy array, or one of pandas' parts, inside a variable


# ----------------------------------------------------------------- reference counts
class _Probe:
    """Held by one object only: read beside the visited objects, it tells what
    ``sys.getrefcount`` says of an object that one other object holds, however the
    reading itself adds references (a slice, a tuple, ``map``'s own)."""


@dataclass
class Seen:
    """What one pickle showed of the objects it saved (see the module doc)."""

    shared: dict[int, Any] = field(default_factory=dict)  # id -> object, kept alive
    ids: Any = frozenset()  # frozenset of ints, or a sorted numpy int64 array


def holds_any(ids, wanted) -> bool:
    """Whether any of the ids ``wanted`` (a collection of ints) is in ``ids`` (a
    :attr:`Seen.ids`)."""
    if not wanted or not len(ids):
        return False
    if isinstance(ids, frozenset):
        return not ids.isdisjoint(wanted)
    import numpy as np

    w = np.fromiter(wanted, dtype=np.int64, count=len(wanted))
    at = np.minimum(np.searchsorted(ids, w), len(ids) - 1)
    return bool((ids[at] == w).any())


SLICE = 1 << 20  # visited objects read at a time: bounds the arrays made beside them


def seen(visited: list, roots: dict[int, Any], skip: int = 0) -> Seen:
    """Read the pickler's ``visited`` list, its memo already cleared (the first ``skip``
    entries, the objects the pickle was handed, left out), then empty it."""
    held: list = []
    for lo in range(skip, len(visited), SLICE):
        held.extend(_held(visited[lo : lo + SLICE], roots))
    visited.clear()
    return _settle(held, roots)


def chunk_ids(visited: list, skip: int = 1):
    """For a pickle of a chunk's items (pickling.StatePickler._chunks), read as
    :func:`seen` does but in C loops alone: the ids of its objects whose identity matters,
    when each is held by exactly one object; None when that cannot be told so quickly (an
    object held more than once, or by a temporary only, or a function, class or array,
    whose identity depends on the object): :func:`seen` then says. Empties ``visited``."""
    probe = [_Probe()]  # held by one list, and by the visited list as the objects are
    visited.append(probe[0])
    objs = list(
        itertools.compress(
            itertools.islice(visited, skip, None),
            map(_verdict, map(type, itertools.islice(visited, skip, None))),
        )
    )
    counts = list(map(sys.getrefcount, objs))
    visited.pop()
    single = counts.pop()
    objs.pop()
    if objs and (min(counts) != single or max(counts) != single):
        return None
    if _ASK in set(map(_verdict, map(type, objs))):
        return None
    visited.clear()
    if len(objs) < VECTOR_MIN:
        return frozenset(map(id, objs))
    import numpy as np

    return np.fromiter(map(id, objs), np.int64, len(objs))


def _held(part: list, roots) -> list:
    """The objects of ``part`` whose identity matters and which something holds (the
    visited list aside), each once."""
    probe = [_Probe()]  # held by one list, like an object one other object holds
    part.append(probe[0])
    if len(part) < VECTOR_MIN:
        single = sys.getrefcount(probe[0]) - 1  # not through map: no reference of map's
        out = {}
        for obj in part[:-1]:
            v = _verdict(type(obj))
            if v == _FREE or (v == _ASK and not _matters(obj, roots)) or id(obj) in _CLASS_HELD:
                continue
            if sys.getrefcount(obj) - 1 >= single:
                out[id(obj)] = obj
        return list(out.values())
    import numpy as np

    verdicts = np.fromiter(map(_verdict, map(type, part)), np.int8, len(part))
    look = np.flatnonzero(verdicts != _FREE)  # the probe is always among them
    objs = operator.itemgetter(*look)(part)
    asked = verdicts[look] == _ASK
    del verdicts
    counts = np.fromiter(map(sys.getrefcount, objs), np.int64, len(objs))
    keep = ~asked & (counts >= counts[-1])
    keep[-1] = False  # the probe
    for i in np.flatnonzero(asked):
        keep[i] = _matters(objs[i], roots)
    at = np.flatnonzero(keep)
    ids = (
        np.fromiter(map(id, operator.itemgetter(*at)(objs)), np.int64, at.size)
        if at.size > 1
        else None
    )
    if ids is None:
        return [objs[i] for i in at.tolist()]
    if _CLASS_HELD:
        mine = ~np.isin(ids, np.fromiter(_CLASS_HELD, np.int64, len(_CLASS_HELD)))
        at, ids = at[mine], ids[mine]
    _, first = np.unique(ids, return_index=True)  # an object the pickle met twice: once
    return (
        list(operator.itemgetter(*at[np.sort(first)])(objs))
        if first.size > 1
        else [objs[i] for i in at[first].tolist()]
    )


def _settle(held: list, roots) -> Seen:
    """Count ``held`` again until what only the pickle's own temporaries held (the state
    a ``__reduce__`` returned, and what that holds in turn) has gone: what remains is
    held by the namespace's objects. Those held twice or more, or variables themselves,
    are what may be shared."""
    probe = [_Probe()]
    out = Seen()
    if len(held) < VECTOR_MIN:
        while True:
            held.append(probe[0])
            counts = list(map(sys.getrefcount, held))
            held.pop()
            single = counts.pop()
            if all(c >= single for c in counts):
                break
            held = [o for o, c in zip(held, counts, strict=True) if c >= single]
        out.shared = {
            id(o): o for o, c in zip(held, counts, strict=True) if c > single or id(o) in roots
        }
        out.ids = frozenset(map(id, held))
        return out
    import numpy as np

    while True:
        held.append(probe[0])
        counts = np.fromiter(map(sys.getrefcount, held), np.int64, len(held))
        held.pop()
        single, counts = counts[-1], counts[:-1]
        gone = counts < single
        if not gone.any():
            break
        at = np.flatnonzero(~gone)
        held = list(operator.itemgetter(*at)(held)) if at.size > 1 else [held[i] for i in at]
    ids = np.fromiter(map(id, held), np.int64, len(held))
    wide = np.flatnonzero(
        (counts > single) | np.isin(ids, np.fromiter(roots, np.int64, len(roots)))
    )
    out.shared = {int(ids[i]): held[i] for i in wide.tolist()}
    out.ids = np.sort(ids)
    return out


def merge_ids(*parts):
    """One :attr:`Seen.ids` holding all of ``parts``."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return frozenset()
    if all(isinstance(p, frozenset) for p in parts) and sum(map(len, parts)) < VECTOR_MIN:
        return frozenset().union(*parts)
    import numpy as np

    arrays = [np.fromiter(p, np.int64, len(p)) if isinstance(p, frozenset) else p for p in parts]
    return np.sort(np.concatenate(arrays))
