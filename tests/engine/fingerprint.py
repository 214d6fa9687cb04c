"""What a namespace holds, as JSON that two processes can compare: every variable's type
and value, which variables (and items of theirs) are one object, and which arrays share
memory. Used by the differential tests (test_differential.py) in the kernel that made the
state and in the fresh processes that restored it.

It imports nothing but the standard library at import time: a restore process imports it
before the restore, and must have imported nothing the namespace needs.
"""

from __future__ import annotations

import hashlib
import json
import sys
import types

DEPTH = 3  # containers and instances are described this deep
ITEMS = 50  # and at most this many of their items


def fingerprint(ns: dict) -> dict:
    names = sorted(
        n for n, v in ns.items() if not n.startswith("_") and not isinstance(v, types.ModuleType)
    )
    seen: dict[int, str] = {}  # id -> the first path it was met at
    arrays: list[tuple[str, object]] = []
    out = {n: _describe(ns[n], n, seen, arrays, 0) for n in names}
    out["<shared memory>"] = _sharing(arrays)
    return out


def digest(fp: dict) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()


def _h(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _describe(obj, path: str, seen: dict, arrays: list, depth: int):
    if obj is None or isinstance(obj, bool | int | float | str | bytes):
        return repr(obj)
    if id(obj) in seen:  # the same object as another path: aliasing is part of the state
        return {"same as": seen[id(obj)]}
    seen[id(obj)] = path
    kind = type(obj)
    name = f"{kind.__module__}.{kind.__qualname__}"
    np, pd, torch = (sys.modules.get(m) for m in ("numpy", "pandas", "torch"))
    if pd is not None and isinstance(obj, pd.DataFrame | pd.Series):
        return {
            "type": name,
            "dtypes": [str(d) for d in (obj.dtypes if obj.ndim == 2 else [obj.dtype])],
            "value": _h(obj.to_json(orient="split", default_handler=str).encode()),
        }
    if pd is not None and isinstance(obj, pd.Index):
        return {
            "type": name,
            "dtype": str(obj.dtype),
            "name": repr(obj.name),
            "value": repr(list(obj)),
        }
    if np is not None and isinstance(obj, np.ndarray):
        arrays.append((path, obj))
        if obj.dtype.hasobject:
            value = _h(repr(obj.tolist()).encode())
        else:
            value = _h(np.ascontiguousarray(obj).tobytes())
        extra = {"file": str(obj.filename)} if isinstance(obj, np.memmap) else {}
        return {
            "type": name,
            "dtype": str(obj.dtype),
            "shape": list(obj.shape),
            "value": value,
            **extra,
        }
    if torch is not None and isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.layout != torch.strided:
            t = t.to_dense()
        else:
            arrays.append((path, obj))
        data = t.to(torch.float64).contiguous().numpy().tobytes() if t.numel() else b""
        return {
            "type": name,
            "dtype": str(obj.dtype),
            "layout": str(obj.layout),
            "shape": list(obj.shape),
            "grad": obj.requires_grad,
            "value": _h(data),
        }
    if isinstance(obj, types.FunctionType | type):
        return {"type": name, "name": obj.__qualname__}
    if depth >= DEPTH:
        return {"type": name}
    nested = lambda v, p: _describe(v, p, seen, arrays, depth + 1)  # noqa: E731
    if isinstance(obj, dict):
        items = list(obj.items())[:ITEMS]
        return {"type": name, "items": [[repr(k), nested(v, f"{path}[{k!r}]")] for k, v in items]}
    if isinstance(obj, list | tuple):
        return {
            "type": name,
            "items": [nested(v, f"{path}[{i}]") for i, v in enumerate(obj[:ITEMS])],
        }
    if isinstance(obj, set | frozenset):
        return {"type": name, "items": sorted(repr(v) for v in obj)[:ITEMS]}
    if hasattr(obj, "get_params") and hasattr(obj, "fit"):  # a scikit-learn estimator
        fitted = {k: v for k, v in vars(obj).items() if k.endswith("_") and not k.startswith("_")}
        return {
            "type": name,
            "params": repr(sorted(obj.get_params(deep=False).items(), key=lambda kv: kv[0])),
            "fitted": {k: nested(v, f"{path}.{k}") for k, v in sorted(fitted.items())},
        }
    if hasattr(obj, "__dict__"):
        return {"type": name, "attrs": nested(dict(vars(obj)), f"{path}.__dict__")}
    return {"type": name, "repr": repr(obj)[:200]}


def _sharing(arrays: list) -> list:
    """Pairs of array paths whose memory overlaps."""
    np = sys.modules.get("numpy")
    out = []
    for i, (p, a) in enumerate(arrays[:40]):
        for q, b in arrays[i + 1 : 40]:
            numpy_pair = np is not None and isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
            if type(a) is not type(b) and not numpy_pair:
                continue
            if numpy_pair:
                shared = bool(np.shares_memory(a, b))
            else:
                sa, sb = a.untyped_storage(), b.untyped_storage()
                shared = sa.nbytes() > 0 and sa.data_ptr() == sb.data_ptr()
            if shared:
                out.append([p, q])
    return out
