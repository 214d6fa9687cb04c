"""Tensors and arrays: collected during pickling, hashed, streamed to safetensors, read back.

Why this exists instead of ``torch.save``/``pickle``:

* **No pickle bytes for tensor data.** The pickler only records *where* each
  tensor lives (storage index, dtype, shape, stride, offset, requires_grad,
  Parameter-ness); the bytes are streamed one storage at a time into plain
  safetensors files, so extra memory stays around one chunk (T2) and the write
  runs at disk speed (T1).
* **Each storage once.** Views, tied weights and ``Parameter``/``.data`` pairs
  share a storage; we save the storage once and rebuild every tensor as a view
  of it, so sharing survives a restore (``untyped_storage().data_ptr()`` equal).
* **Portable.** A storage that some tensor covers exactly (the usual case: every
  weight of a model) is written under that tensor's name, dtype and shape, so
  ``safetensors.torch.load_file`` on the blob gives a normal state_dict. Only
  storages seen through views alone are written as flat ``U8`` buffers.
* **Incremental.** Every storage gets an xxh3_128 digest; a digest already in a
  previous checkpoint is not written again. In-process, a cache keyed by
  (device, data_ptr, nbytes) and validated by the tensor's ``_version`` counter
  plus a small sampled fingerprint skips even the hashing (T5).

torch and numpy are imported lazily: only if the user's objects contain them.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import pickle
import struct
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import xxhash

from . import handed as handed_mod
from . import paths
from .buffers import (
    DATA_ALIGN,
    HUGE_ADVICE_MIN,
    MADV_NOHUGEPAGE,
    MADV_POPULATE_WRITE,
    advise_in_slices,
    libc_madvise,
    page_span,
)
from .errors import CorruptCheckpoint, DeviceUnavailable
from .manifest import FileEntry, StorageEntry
from .phases import Phases, timed
from .sharing import ATOMIC

CHUNK = 64 << 20  # bytes per device<->host staging step: bounds the extra memory
CPU_CHUNK = 8 << 20  # bytes per write/hash step from host memory (cache-sized)
SMALL_FILE = 1 << 20  # objects with less new data than this share one file
FAST_PATH_MIN = 1 << 20  # below this, hashing is cheaper than being clever

TORCH_SAFE = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "complex64": "C64",
}
NUMPY_SAFE = {
    "<f8": "F64",
    "<f4": "F32",
    "<f2": "F16",
    "<i8": "I64",
    "<i4": "I32",
    "<i2": "I16",
    "|i1": "I8",
    "|u1": "U8",
    "<u2": "U16",
    "<u4": "U32",
    "<u8": "U64",
    "|b1": "BOOL",
    "<c8": "C64",
}


# ----------------------------------------------------------------- placeholders for pickles
def _rebuild_tensor(*args):  # resolved by the unpickler to the loader's method
    raise RuntimeError("this pickle must be loaded with jupyter_pause.restore()")


def _rebuild_array(*args):  # likewise
    raise RuntimeError("this pickle must be loaded with jupyter_pause.restore()")


def _rebuild_objects(*args):  # likewise
    raise RuntimeError("this pickle must be loaded with jupyter_pause.restore()")


def _rebuild_meta(dtype_name, shape, stride, requires_grad, kind):
    import torch

    t = torch.empty_strided(shape, stride, dtype=getattr(torch, dtype_name), device="meta")
    if kind == "param":
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


GRAD = "__jupyter_pause_grad__"  # key of a leaf tensor's .grad in its pickled state


def _set_tensor_state(t, state):
    grad = state.pop(GRAD, None)
    if grad is not None:
        t.grad = grad
    t.__dict__.update(state)


# ----------------------------------------------------------------- collection
@dataclass
class Storage:
    """One buffer to save. ``data`` is a flat uint8 view of it (torch tensor or numpy array)."""

    kind: str  # "torch" | "numpy"
    device: str
    nbytes: int
    data: Any
    owner: str
    name: str = ""  # local name inside the owner ("fc.weight"); "" for the owner itself
    dtype: str = "uint8"  # dtype of the portable view, if any
    shape: list[int] | None = None  # shape of the portable view; None -> flat U8
    reps: list = field(default_factory=list)  # every tensor object seen on it
    skey: tuple = ()
    xxh3: str | None = None
    file: str | None = None
    key: str | None = None
    safe_dtype: str = "U8"
    #: its sampled fingerprint, once taken in this checkpoint (``cached_digest``)
    sampled: str | None = None


def local_names(owner: str, obj: Any) -> dict[int, str]:
    """id(tensor) -> readable name inside ``obj`` (module parameter paths, dict keys)."""
    names: dict[int, str] = {}
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")

    def is_array(v):
        return (torch is not None and isinstance(v, torch.Tensor)) or (
            np is not None and isinstance(v, np.ndarray)
        )

    def walk(o, prefix, depth):
        if torch is not None and isinstance(o, torch.nn.Module):
            for n, p in o.named_parameters(prefix=prefix.rstrip("."), remove_duplicate=False):
                names.setdefault(id(p), n)
            for n, b in o.named_buffers(prefix=prefix.rstrip("."), remove_duplicate=False):
                names.setdefault(id(b), n)
        elif isinstance(o, dict) and depth < 4:
            for k, v in list(o.items())[:100_000]:
                if isinstance(k, (str, int)):
                    if is_array(v):
                        names.setdefault(id(v), f"{prefix}{k}")
                    elif isinstance(v, (dict, list, tuple)) or (
                        torch is not None and isinstance(v, torch.nn.Module)
                    ):
                        walk(v, f"{prefix}{k}.", depth + 1)
        elif isinstance(o, (list, tuple)) and depth < 4:
            for i, v in enumerate(o[:100_000]):
                if is_array(v):
                    names.setdefault(id(v), f"{prefix}{i}")
                elif isinstance(v, (dict, list, tuple)):
                    walk(v, f"{prefix}{i}.", depth + 1)

    if is_array(obj):
        names[id(obj)] = ""
    else:
        with contextlib.suppress(Exception):  # naming is cosmetic; never fail over it
            walk(obj, "", 0)
    return names


class Collector:
    """Called by the pickler for every tensor/array; returns the reduce tuple that replaces it."""

    def __init__(self):
        self.storages: list[Storage] = []
        self._index: dict[tuple, int] = {}
        self.owner = ""
        self._obj: Any = None
        self._names: dict[int, str] | None = None
        self.touched: list[int] = []  # storages first referenced by the current record
        self._seen: set[int] = set()
        # the current group (records pickled with one memo): the pickle refers to its
        # storages by their position in ``local`` (see docs/engine.md, format 2)
        self.local: list[int] = []
        self._local_of: dict[int, int] = {}
        #: (weak reference to each tensor/array reduced in the group, what it reduced to),
        #: so that a later checkpoint can check the group's records still describe them
        self.log: list[tuple[Any, tuple]] = []
        self.in_band = False  # the group pickled tensor data in-band: never reuse it
        #: ids of the arrays that own the memory of the object arrays the group pickled
        #: (their items are pickled, not stored): a group that reaches the same one
        #: changes with this one (records._dirty_names)
        self.object_bases: set[int] = set()

    def begin_group(self) -> None:
        self.local, self._local_of, self.log, self.in_band = [], {}, [], False
        self._seen = set()
        self.object_bases = set()

    def object_array(self, a) -> None:
        """Note an array of Python objects, pickled in the group's records."""
        ndarray = sys.modules["numpy"].ndarray
        base = a
        while isinstance(base.base, ndarray):
            base = base.base
        self.object_bases.add(id(base))

    def begin(self, owner: str, obj: Any) -> None:
        self.owner = owner
        self._obj = obj
        self._names = None  # computed when the record holds a tensor (cosmetic, and slow)
        self.touched = []

    @property
    def names(self) -> dict[int, str]:
        if self._names is None:
            self._names = local_names(self.owner, self._obj)
        return self._names

    def _add(self, idx: int) -> int:
        """Note storage ``idx`` in the current record and group; its index in the group."""
        if idx not in self._seen:
            self._seen.add(idx)
            self.touched.append(idx)
        local = self._local_of.get(idx)
        if local is None:
            local = self._local_of[idx] = len(self.local)
            self.local.append(idx)
        return local

    def touched_in_group(self) -> list[int]:
        """The storages first referenced by the current record, as positions in its group."""
        return [self._local_of[i] for i in self.touched]

    def _logged(self, obj, result):
        try:
            ref = weakref.ref(obj)
        except TypeError:
            self.in_band = True
            return result
        if len(result) > 2:
            state = result[2]
            sig = (result[1], tuple((k, id(v)) for k, v in state.items()))
        else:
            sig = (result[1], None)
        self.log.append((ref, sig))
        return result

    # -- torch ---------------------------------------------------------------
    def reduce_torch(self, t):
        torch = sys.modules["torch"]
        cls = type(t)
        if cls is torch.nn.Parameter:
            kind = "param"
        elif cls is torch.Tensor:
            kind = "tensor"
        else:
            self.in_band = True
            return NotImplemented  # other subclasses: their own reduction (in-band)
        if t.layout is not torch.strided or t.is_quantized or t.is_nested:
            self.in_band = True
            return NotImplemented  # sparse: torch reduces to strided parts, which come back here
        dtype_name = str(t.dtype).removeprefix("torch.")
        rg = bool(t.requires_grad)
        if t.device.type == "meta":
            return self._logged(
                t, (_rebuild_meta, (dtype_name, tuple(t.shape), tuple(t.stride()), rg, kind))
            )
        src = t.detach()
        if src.is_conj() or src.is_neg():
            src = src.resolve_conj().resolve_neg()  # materialise lazy bits (sharing lost)
        st = src.untyped_storage()
        nbytes = st.nbytes()
        # keyed like a numpy array over the same memory (torch.from_numpy): saved once,
        # shared again after a restore
        skey = (str(src.device), st.data_ptr(), nbytes) if nbytes else ("empty", id(t))
        idx = self._index.get(skey)
        if idx is None:
            u8 = torch.empty(0, dtype=torch.uint8, device=src.device).set_(st)
            idx = len(self.storages)
            self.storages.append(
                Storage(
                    kind="torch",
                    device=str(src.device),
                    nbytes=nbytes,
                    data=u8,
                    owner=self.owner,
                    name=self.names.get(id(t), f"t{idx}"),
                    reps=[t],
                    skey=skey,
                )
            )
            self._index[skey] = idx
        s = self.storages[idx]
        if s.kind == "torch" and not any(r is t for r in s.reps):
            s.reps.append(t)
        if (
            s.shape is None
            and dtype_name in TORCH_SAFE
            and src.storage_offset() == 0
            and src.is_contiguous()
            and src.numel() * src.element_size() == nbytes
        ):
            s.shape, s.dtype, s.safe_dtype = list(src.shape), dtype_name, TORCH_SAFE[dtype_name]
            if id(t) in self.names:
                s.name = self.names[id(t)]
        args = (
            self._add(idx),
            dtype_name,
            tuple(src.shape),
            tuple(src.stride()),
            src.storage_offset(),
            rg,
            kind,
        )
        state = dict(t.__dict__)
        if t.is_leaf and t.requires_grad and t.grad is not None:
            state[GRAD] = t.grad  # saved like any tensor (its own storage)
        if state:
            return self._logged(t, (_rebuild_tensor, args, state, None, None, _set_tensor_state))
        return self._logged(t, (_rebuild_tensor, args))

    # -- arrays of Python objects ----------------------------------------------
    def reduce_objects(self, a, checked: bool = False):
        """An array of str, int, float, None... (pandas' strings without pyarrow): the
        memory it views becomes a storage of kind "objects" (:func:`materialize`), pickled
        once however many variables view it, and views of it again after a restore. Other
        object arrays (their items may be shared, or be anything): NotImplemented.
        ``checked``: its items were found atomic when the group was pickled, and no code
        could reach them since (records._replay)."""
        np = sys.modules["numpy"]
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.dtype != a.dtype or not (root.flags.c_contiguous or root.flags.f_contiguous):
            return NotImplemented
        skey = ("objects", id(root))
        idx = self._index.get(skey)
        if idx is None:
            if root.size < OBJECTS_MIN or not (checked or _atomic(root)):
                return NotImplemented
            idx = len(self.storages)
            self.storages.append(
                Storage(
                    kind="objects",
                    device="cpu",
                    nbytes=0,
                    data=root,
                    owner=self.owner,
                    name=self.names.get(id(a), f"t{idx}"),
                    skey=skey,
                )
            )
            self._index[skey] = idx
        offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        args = (self._add(idx), a.shape, a.strides, offset, bool(a.flags.writeable))
        return self._logged(a, (_rebuild_objects, args))

    # -- numpy ---------------------------------------------------------------
    def reduce_numpy(self, a):
        np = sys.modules["numpy"]
        if a.dtype.hasobject:
            self.in_band = True
            return NotImplemented  # object arrays hold Python objects: pickle them
        root = _numpy_root(a, np)
        if root is None:
            root = np.ascontiguousarray(a)  # no shareable base: save a compact copy
            view = root
        else:
            view = a
        ptr = root.__array_interface__["data"][0]
        nbytes = root.nbytes
        skey = ("cpu", ptr, nbytes) if nbytes else ("empty", id(a))
        idx = self._index.get(skey)
        if idx is None:
            flat = root.ravel(order="K").view(np.uint8) if nbytes else np.empty(0, np.uint8)
            idx = len(self.storages)
            self.storages.append(
                Storage(
                    kind="numpy",
                    device="cpu",
                    nbytes=nbytes,
                    data=flat,
                    owner=self.owner,
                    name=self.names.get(id(a), f"t{idx}"),
                    skey=skey,
                )
            )
            self._index[skey] = idx
        s = self.storages[idx]
        offset = view.__array_interface__["data"][0] - ptr
        if (
            s.shape is None
            and offset == 0
            and view.flags.c_contiguous
            and view.nbytes == nbytes
            and view.dtype.str in NUMPY_SAFE
        ):
            s.shape, s.dtype, s.safe_dtype = (
                list(view.shape),
                view.dtype.str,
                NUMPY_SAFE[view.dtype.str],
            )
            if id(a) in self.names:
                s.name = self.names[id(a)]
        args = (
            self._add(idx),
            view.dtype,
            view.shape,
            view.strides,
            offset,
            bool(a.flags.writeable),
        )
        return self._logged(a, (_rebuild_array, args))


OBJECTS_MIN = 4096  # an array of fewer Python objects is pickled with its variable
OBJECTS_CHUNK = 16384  # items per pickle in a storage of kind "objects"


def _atomic(root) -> bool:
    """Whether every item of an object array is a str, int, float, ... (nothing shared)."""
    return ATOMIC.issuperset(set(map(type, root.ravel(order="K"))))


def materialize(s: Storage) -> bool:
    """Turn an "objects" storage's array into its bytes: its items in memory order, as
    pickles of OBJECTS_CHUNK at a time (small memos: fast), read back by :func:`objects_from`.
    False if there was nothing to do (another kind, or done already)."""
    np = sys.modules["numpy"]
    if s.kind != "objects" or not isinstance(s.data, np.ndarray) or s.data.dtype != object:
        return False
    flat = s.data.ravel(order="K")
    out = io.BytesIO()  # grows in place: no second copy of the bytes, as a join makes
    for i in range(0, flat.size, OBJECTS_CHUNK):
        pickle.dump(flat[i : i + OBJECTS_CHUNK].tolist(), out, protocol=5)
    s.data = np.frombuffer(out.getbuffer(), dtype=np.uint8)
    n = s.data.nbytes
    s.nbytes, s.shape, s.dtype, s.safe_dtype = n, [n], "|u1", "U8"
    return True


class _AtomsOnly:
    """Unpickles only what :func:`materialize` writes: str, int, float, ... in lists. No
    class or function can be named, so these bytes cannot run code."""

    @staticmethod
    def find_class(module, name):
        raise ValueError(f"an objects storage names {module}.{name}")


def objects_from(buf):
    """The flat object array whose items' pickles fill ``buf`` (materialize)."""
    np = sys.modules["numpy"]

    class Loader(_AtomsOnly, pickle.Unpickler):
        pass

    f = io.BytesIO(memoryview(buf).cast("B"))
    loader = Loader(f)
    size = len(f.getbuffer())

    def parts():
        while f.tell() < size:
            yield from loader.load()

    return np.fromiter(parts(), dtype=object)


def view_objects(flat, shape, strides, offset: int, writeable: bool):
    """The view of ``flat`` (objects_from) that an array saved by reduce_objects was."""
    np = sys.modules["numpy"]
    return np.lib.stride_tricks.as_strided(
        flat[offset // flat.itemsize :], shape=shape, strides=strides, writeable=writeable
    )


def _numpy_root(a, np):
    """The ndarray that owns ``a``'s memory, if it is one contiguous block we can save whole."""
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
    if not (base.flags.c_contiguous or base.flags.f_contiguous):
        return None
    if base is a or a.size == 0:
        return base
    # a's byte extent must lie inside base's buffer (as_strided can point anywhere)
    lo = hi = a.__array_interface__["data"][0]
    for n, st in zip(a.shape, a.strides, strict=False):
        lo += min(0, st * (n - 1))
        hi += max(0, st * (n - 1))
    start = base.__array_interface__["data"][0]
    if lo >= start and hi + a.itemsize <= start + base.nbytes:
        return base
    return None


# ----------------------------------------------------------------- hashing
# (device, data_ptr, nbytes) -> (((weakref to a tensor on it, its _version), ...),
#                              sample fingerprint, digest)
# Every tensor object seen on the storage is recorded, because tensors rebuilt with
# ``set_`` (as a restore does) do not share one version counter: an in-place write
# through any of them must invalidate the digest.
_CACHE: dict[tuple, tuple] = {}


def _iter_chunks(s: Storage, chunk: int = CHUNK):
    """Yield the storage's bytes as memoryviews of at most ``chunk`` bytes (one copy for GPU)."""
    if s.nbytes == 0:
        return
    if s.kind != "torch" or s.data.device.type == "cpu":
        # host memory: no copy at all, and small slices, so that the hash that follows each
        # write finds the bytes still in the CPU cache (no second trip to memory)
        mv = memoryview(s.data if s.kind != "torch" else s.data.numpy())
        step = min(chunk, CPU_CHUNK)
        for off in range(0, s.nbytes, step):
            yield mv[off : off + step]
    else:
        for off in range(0, s.nbytes, chunk):
            yield memoryview(s.data[off : off + chunk].cpu().numpy())


def hash_storage(s: Storage) -> str:
    h = xxhash.xxh3_128()
    for mv in _iter_chunks(s):
        h.update(mv)
    return h.hexdigest()


def fingerprint(s: Storage) -> str:
    """xxh3 of ~8 KiB sampled across the storage: catches writes that bypass ``_version``
    (``p.data.mul_()``) in all but pathological cases, for the price of a tiny read."""
    n = s.nbytes
    if s.kind == "torch" and s.data.device.type != "cpu":
        positions = sorted({min(n - 64, (n - 64) * i // 127) for i in range(128)})
        torch = sys.modules["torch"]
        idx = torch.tensor(positions, device=s.data.device)[:, None] + torch.arange(
            64, device=s.data.device
        )
        sample = s.data[idx.flatten()].cpu().numpy().tobytes()
    else:
        arr = s.data.numpy() if s.kind == "torch" else s.data
        sample = arr[_sample_index(n)].tobytes()  # one gather instead of 128 slices
    return xxhash.xxh3_64_hexdigest(sample)


@functools.lru_cache(maxsize=4096)
def _sample_index(n: int):
    import numpy as np

    positions = sorted({min(n - 64, (n - 64) * i // 127) for i in range(128)})
    return (np.array(positions, dtype=np.int64)[:, None] + np.arange(64)).ravel()


def _version(t) -> int | None:
    try:
        return t._version  # torch's version counter (no public name for it)
    except Exception:  # inference tensors have no version counter
        return None


def cached_digest(s: Storage) -> str | None:
    """Digest from the in-process cache if the storage provably did not change: every
    tensor seen on it now was seen when the digest was taken, none of those still alive
    has a new ``_version`` or another storage, and the sampled fingerprint is the same."""
    if s.kind != "torch" or s.nbytes < FAST_PATH_MIN:
        return None
    entry = _CACHE.get(s.skey)
    if entry is None:
        return None
    refs, fp, digest = entry
    known = set()
    for ref, version in refs:
        t = ref()
        if t is None:
            continue
        if _version(t) != version or _data_ptr(t) != s.skey[1]:
            return None
        known.add(id(t))
    if not s.reps or any(id(t) not in known for t in s.reps):
        return None
    s.sampled = fingerprint(s)
    if s.sampled != fp:
        return None
    return digest


def known_changed(s: Storage) -> bool:
    """Whether ``s`` changed since its digest was cached: a tensor seen on it then, still
    alive on the same memory, has another ``_version`` now. No earlier checkpoint holds
    what it holds now, bar a change undone, so hashing it to look for a copy would only
    read its bytes twice: the write hashes them as it goes."""
    entry = _CACHE.get(s.skey) if s.kind == "torch" else None
    if entry is None:
        return False
    for ref, version in entry[0]:
        t = ref()
        if t is not None and _data_ptr(t) == s.skey[1] and _version(t) != version:
            return True
    return False


def _data_ptr(t) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


def remember(s: Storage) -> None:
    """Cache ``s``'s digest for the next checkpoint of this process (see ``_CACHE``)."""
    if s.kind != "torch" or s.nbytes < FAST_PATH_MIN or s.xxh3 is None or not s.reps:
        return
    refs = []
    for t in s.reps:
        v = _version(t)
        if v is None:  # inference tensors: no way to see a change
            return
        try:
            refs.append((weakref.ref(t), v))
        except TypeError:
            return
    # the fingerprint cached_digest took, if any: the bytes are the same (a write since
    # then would have moved a version, and the storage would have been hashed anew)
    _CACHE[s.skey] = (tuple(refs), s.sampled or fingerprint(s), s.xxh3)
    if len(_CACHE) > 100_000:  # never grow without bound in a long-lived kernel
        for k in [k for k, e in _CACHE.items() if all(r() is None for r, _v in e[0])]:
            del _CACHE[k]


def remember_restored(buf, made: list, digest: str) -> None:
    """Register a storage a restore just read and verified (flat uint8 ``buf``, the
    tensors ``made`` on it), so that the first checkpoint after a resume finds its
    digest without hashing it again: an unchanged model re-pauses for free."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(buf, torch.Tensor) or not made:
        return
    nbytes = buf.untyped_storage().nbytes()
    s = Storage(
        kind="torch",
        device=str(buf.device),
        nbytes=nbytes,
        data=buf,
        owner="",
        reps=list(made),
        skey=(str(buf.device), buf.untyped_storage().data_ptr(), nbytes),
        xxh3=digest,
    )
    remember(s)


def digest(s: Storage) -> str:
    d = cached_digest(s)
    if d is None:
        d = hash_storage(s)
    return d


# ----------------------------------------------------------------- writing
def write_all(f, data) -> None:
    """Write all of ``data``; the one place bytes hit the disk (tests inject ENOSPC here)."""
    view = memoryview(data)
    while view:
        n = f.write(view)
        if n is None:
            n = 0
        view = view[n:]


@dataclass
class WrittenFile:
    rel: str
    entry: FileEntry
    storages: list[Storage] = field(default_factory=list)


def unique_keys(storages: list[Storage], prefix_owner: bool) -> None:
    used: set[str] = set()
    for s in storages:
        base = s.name or s.owner
        if prefix_owner and s.name:
            base = f"{s.owner}.{s.name}"
        key, n = base, 1
        while key in used or key == "__metadata__":
            n += 1
            key = f"{base}#{n}"
        used.add(key)
        s.key = key


def write_safetensors(
    txn, tmp_name: str, storages: list[Storage], progress=None, phases: Phases | None = None
) -> WrittenFile:
    """Stream ``storages`` into one safetensors file in the transaction, fsync it, and stage it
    under its content address. Digests not yet known are computed on the fly.

    Every storage whose size is a multiple of DATA_ALIGN starts DATA_ALIGN-aligned in the
    file (the header is padded with spaces, as the format allows, and those storages
    come first): a restore can then use memory holding the file's image as it is
    (engine/handoff.py) and still give each tensor an aligned address."""
    storages = sorted(storages, key=lambda s: s.nbytes % DATA_ALIGN != 0)  # stable
    header: dict[str, Any] = {"__metadata__": {"format": "pt", "producer": "jupyter-pause"}}
    off = 0
    for s in storages:
        if s.shape is not None:
            header[s.key] = {
                "dtype": s.safe_dtype,
                "shape": s.shape,
                "data_offsets": [off, off + s.nbytes],
            }
        else:
            header[s.key] = {
                "dtype": "U8",
                "shape": [s.nbytes],
                "data_offsets": [off, off + s.nbytes],
            }
        off += s.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-(len(raw) + 8) % DATA_ALIGN)
    path = txn.staging_path(tmp_name)
    with paths.private_open(path) as f:
        with timed(phases, "write"):
            write_all(f, struct.pack("<Q", len(raw)) + raw)
            for s in storages:
                h = xxhash.xxh3_128() if s.xxh3 is None else None
                for mv in _iter_chunks(s):
                    write_all(f, mv)
                    if h is not None:
                        h.update(mv)
                    if progress is not None:
                        progress.update(len(mv))
                if h is not None:
                    s.xxh3 = h.hexdigest()
        with timed(phases, "fsync"):
            os.fsync(f.fileno())
    tree = xxhash.xxh3_128()
    tree.update(raw)
    for s in storages:
        tree.update(bytes.fromhex(s.xxh3))
    name = f"{tree.hexdigest()}.safetensors"
    rel = txn.stage_blob(tmp_name, name)
    entry = FileEntry(
        bytes=8 + len(raw) + off,
        xxh3=tree.hexdigest(),
        header_xxh3=xxhash.xxh3_128_hexdigest(raw),
        tensors={s.key: s.xxh3 for s in storages},
    )
    for s in storages:
        s.file = rel
    return WrittenFile(rel, entry, storages)


def storage_entry(s: Storage) -> StorageEntry:
    return StorageEntry(
        file=s.file,
        key=s.key,
        nbytes=s.nbytes,
        xxh3=s.xxh3,
        kind=s.kind,
        device=s.device,
        dtype=s.dtype if s.shape is not None else "uint8",
        shape=s.shape if s.shape is not None else [s.nbytes],
        owner=s.owner,
    )


# ----------------------------------------------------------------- devices
def parse_device_map(spec: str | None):
    """None -> keep; "cpu" / "cuda:0" -> everything there; "cuda:1=cuda:0,cuda:2=cpu" -> per device."""
    if spec is None or spec == "":
        return lambda d: d
    spec = spec.strip()
    if "=" not in spec:
        target = _norm(spec)
        return lambda d: target
    table = {}
    for part in spec.split(","):
        src, _, dst = part.partition("=")
        if not src.strip() or not dst.strip():
            raise ValueError(f"bad device mapping {part!r}: use e.g. 'cuda:1=cuda:0'")
        table[_norm(src)] = _norm(dst)
    return lambda d: table.get(d, d)


def _norm(d: str) -> str:
    d = d.strip()
    return "cuda:0" if d == "cuda" else d


def check_device(device: str, owner: str) -> None:
    if device == "cpu":
        return
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # noqa: F811  (a checkpoint with GPU tensors needs torch anyway)
    kind, _, index = device.partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailable(owner, device, "no CUDA device")
        n = torch.cuda.device_count()
        if index and int(index) >= n:
            raise DeviceUnavailable(owner, device, f"this machine has {n} GPU(s)")
        return
    try:
        torch.empty(0, device=device)
    except Exception as e:
        raise DeviceUnavailable(owner, device, str(e)) from None


# ----------------------------------------------------------------- reading
def read_storages(
    nbdir, manifest, indices, device_of, progress=None, as_numpy=False, handed=None
) -> dict[int, Any]:
    """Read the given storages into freshly allocated buffers on their target devices,
    checking each against its xxh3 digest as it streams in. Raises CorruptCheckpoint naming
    the object; returns {storage index: flat uint8 buffer}.

    CPU buffers are allocated once, with their final size, and filled by positioned reads
    straight from the file (no intermediate copy), 8 MiB at a time, each chunk hashed while
    it is still in the CPU cache. Fresh memory costs the kernel a zeroed page per 4 KiB
    (~0.3 s/GiB on the dev VM: as much as the disk read itself); a helper thread maps the
    pages just ahead of the reader (:class:`Prefaulter`), so on two or more cores that cost
    leaves the critical path and a cold restore runs at about the speed of the disk.

    ``as_numpy``: CPU buffers are numpy arrays whatever their kind, so that a process
    still importing torch can read them (a lazy restore; :func:`buffers.as_torch` later).
    ``handed``: {storage index: (handed.Handed, its buffer)} (``handed.buffers_over``),
    buffers over memory the server filled with some of the files; one that verifies is
    taken as it is, not read (engine/handed.py). The caller closes what it received."""
    from . import checks

    over = handed or {}
    plan = plan_reads(nbdir, manifest, indices)
    # read; a helper thread allocates and maps each CPU buffer just ahead of us
    cpu = [
        (i, "numpy" if as_numpy else manifest.storages[i].kind, manifest.storages[i].nbytes)
        for _path, _rel, items in plan
        for _pos, i in items
        if (manifest.storages[i].kind == "numpy" or device_of(manifest.storages[i]) == "cpu")
        and i not in over
    ]
    out: dict[int, Any] = {}
    with Prefaulter(cpu) as pre:
        for path, rel, items in plan:
            with open(path, "rb", buffering=0) as f:
                with contextlib.suppress(AttributeError, OSError):
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
                for pos, i in items:
                    s = manifest.storages[i]
                    if i in over and handed_mod.take(*over[i], s.xxh3):
                        out[i] = over[i][1]
                        if progress is not None:
                            progress.update(s.nbytes)
                        continue
                    buf = over[i][1] if i in over else pre.get(i)
                    if buf is None and as_numpy and s.kind == "torch":  # not yet a tensor
                        buf = empty_for(s, device_of(s), as_numpy=True)
                    got = read_storage(f, pos, s, device_of(s), progress, buf)
                    pre.release(i)
                    if got[1] != s.xxh3:
                        raise CorruptCheckpoint(s.owner, str(path), f"tensor {s.key!r}")
                    out[i] = got[0]
            if {manifest.storages[i].key for _pos, i in items} >= set(manifest.files[rel].tensors):
                # every tensor of the file was just hashed: the next checkpoint of this
                # process may reuse it without hashing it again (checks.check_blob)
                checks.remember_verified(path)
    return out


def download_storages(dir, nbdir, manifest, indices, progress=None, as_numpy=False):
    """Read the given CPU storages, whose files the folder lacks, from the bucket behind it
    straight into freshly allocated buffers (their headers first, checked against the
    manifest; each tensor hashed once its bytes are in: mirror.stream).  Returns
    ({storage index: flat uint8 buffer}, [mirror.Copy of each file]): what the caller
    hands to ``mirror.keep_copies`` once the restore is done.  ``as_numpy``: as
    :func:`read_storages`."""
    from . import mirror

    rels = sorted({manifest.storages[i].file for i in indices})
    headers = mirror.headers(dir, nbdir, manifest, rels)
    plan = plan_reads(nbdir, manifest, indices, headers)
    buffers = {
        i: _empty("numpy" if as_numpy else manifest.storages[i].kind, manifest.storages[i].nbytes)
        for _path, _rel, items in plan
        for _pos, i in items
    }
    views = {i: flat(buf) for i, buf in buffers.items()}
    mirror.stream(dir, nbdir, manifest, plan, views, progress)
    return buffers, copies_of(manifest, plan, headers, views)


def flat(buf):
    """A flat uint8 CPU buffer as a numpy array over the same memory."""
    return buf.numpy() if hasattr(buf, "numpy") else buf


def copies_of(manifest, plan, headers, views) -> list:
    """The ``mirror.Copy`` of each file of ``plan`` that a restore reads from the bucket
    into ``views`` (storage index -> flat numpy array), to be written here afterwards."""
    from . import mirror

    return [
        mirror.Copy(
            rel,
            manifest.files[rel],
            headers[rel][1],
            [(pos, manifest.storages[i].key, views[i]) for pos, i in items],
        )
        for _path, rel, items in plan
    ]


def plan_reads(
    nbdir, manifest, indices, headers=None
) -> list[tuple[Any, str, list[tuple[int, int]]]]:
    """[(path, file, [(byte position, storage index), ...]), ...] for the given storages,
    each file's header read and checked against the manifest before any data is.
    ``headers``: file -> its header as :func:`checks.read_safetensors_header` gives it, for
    files not here yet (a lazy restore from a bucket: mirror.headers)."""
    from . import checks

    headers = headers or {}
    by_file: dict[str, list[int]] = {}
    for i in indices:
        by_file.setdefault(manifest.storages[i].file, []).append(i)
    # 1. every header first (small reads), checked against the manifest before any data
    plan = []
    for rel, idxs in sorted(by_file.items()):
        path = nbdir / rel
        entry = manifest.files[rel]
        try:
            start, raw, header = headers.get(rel) or checks.read_safetensors_header(path)
        except (OSError, ValueError) as e:
            owner = manifest.storages[idxs[0]].owner
            raise CorruptCheckpoint(owner, str(path), str(e)) from None
        if xxhash.xxh3_128_hexdigest(raw) != entry.header_xxh3:
            raise CorruptCheckpoint(manifest.storages[idxs[0]].owner, str(path), "header changed")
        items = []
        for i in idxs:
            s = manifest.storages[i]
            b, e = header[s.key]["data_offsets"]
            if e - b != s.nbytes:
                raise CorruptCheckpoint(s.owner, str(path), f"tensor {s.key!r} has the wrong size")
            items.append((start + b, i))
        items.sort()
        plan.append((path, rel, items))
    return plan


PREFAULT_AHEAD = 256 << 20  # bytes mapped ahead of the reader, at most
PREFAULT_MIN = 1 << 20  # less to read than this: not worth a helper thread
READ_CHUNK = CPU_CHUNK  # CPU reads: small enough that the hash finds the chunk in cache
# A background read (lazy restore) shares the GIL with the kernel's main thread (cells,
# and in a fresh kernel ``import torch``, which holds it through long C calls). Each
# chunk takes the GIL back at least once; a thread waiting for it loses up to the
# switch interval (5 ms) each time. Beside ``import torch``, reading 2 GB took 2.14 s in
# 8 MiB chunks and 1.62 s in 256 MiB ones (medians of 5; 1.3 s alone): the hash then
# reads each chunk back from memory, which costs far less.
BACKGROUND_READ_CHUNK = 256 << 20
_can_populate = True  # False once MADV_POPULATE_WRITE is refused (kernel older than 5.14)


def _populate(ptr: int, nbytes: int) -> bool:
    """Map (and zero) the pages of ``[ptr, ptr + nbytes)`` with one ``madvise`` call instead
    of one page fault per 4 KiB. It never changes the memory's contents, so it may race
    with a reader filling the same range. False where the kernel or platform cannot."""
    global _can_populate
    madvise = libc_madvise()
    if madvise is None or not _can_populate:
        return False
    if not advise_in_slices(madvise, ptr, nbytes, MADV_POPULATE_WRITE):
        _can_populate = False  # EINVAL: kernel older than 5.14; touch pages from now on
        return False
    return True


def _small_pages(arr) -> None:
    """Take back the huge-page advice numpy gives every large allocation (``np.empty`` of
    4 MiB or more), before the memory is first touched. Filling fresh memory from a file
    took 2-3x longer on huge pages on the dev VM (a 2 GB read: 3.1-5.2 s against 1.3-1.6 s,
    nearly all of it system time), and torch, whose buffers the fresh-read limit uses,
    gives no such advice: a restored array is allocated as a restored tensor is."""
    madvise = libc_madvise()
    if madvise is not None and arr.nbytes >= HUGE_ADVICE_MIN:
        start, end = page_span(arr.ctypes.data, arr.nbytes)
        madvise(start, end - start, MADV_NOHUGEPAGE)


def _empty(kind: str, nbytes: int):
    if kind != "torch":  # numpy's, and the pickled items of an "objects" storage
        import numpy as np

        arr = np.empty(nbytes, dtype=np.uint8)
        _small_pages(arr)
        return arr
    import torch

    return torch.empty(nbytes, dtype=torch.uint8)


def empty_for(s, device: str, as_numpy: bool = False):
    """An unfilled flat uint8 buffer for manifest storage ``s`` on ``device`` (lazy restore);
    ``as_numpy``: a numpy array for a CPU tensor too (see :func:`read_storages`)."""
    if s.kind == "numpy" or device == "cpu":
        return _empty("numpy" if as_numpy else s.kind, s.nbytes)
    import torch

    return torch.empty(s.nbytes, dtype=torch.uint8, device=device)


def _map_pages(buf) -> None:
    """Have the kernel map (and zero) the pages of a fresh flat CPU buffer now."""
    n = len(buf)
    if n < 1 << 16:
        return
    if hasattr(buf, "data_ptr"):  # torch
        addr, arr = buf.data_ptr(), buf.numpy()
    else:
        addr, arr = buf.ctypes.data, buf
    if not _populate(addr, n):
        arr[::4096] = 0  # one write per page (the buffer is not handed out yet)


class Prefaulter:
    """Allocates each CPU buffer with its final size and maps its pages, on a helper
    thread, in read order and at most PREFAULT_AHEAD bytes ahead of the reader.

    The reader takes each buffer only once it is mapped (``get``), so the two threads
    never fault the same pages (measured: racing them was ~40 % slower than waiting).
    ``buffers``: storage index -> a buffer allocated already (a lazy restore built the
    graph over it), to map instead of allocating one."""

    def __init__(self, wanted: list[tuple[int, str, int]], buffers: dict | None = None):
        import threading

        self._wanted = wanted  # (storage index, kind, nbytes) in read order
        self._given = buffers or {}
        self._sizes = {i: nbytes for i, _kind, nbytes in wanted}
        self._ready: dict[int, Any] = {}
        self._ahead = 0  # bytes allocated and not yet released by the reader
        self._error: BaseException | None = None
        self._done = False
        self._stop = False
        self._cv = threading.Condition()
        self._thread = None
        if sum(n for *_, n in wanted) >= PREFAULT_MIN:
            self._thread = threading.Thread(target=self._run, name="jp-prefault", daemon=True)
            self._thread.start()
        else:
            self._done = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._ready.clear()
        return False

    def _run(self) -> None:
        try:
            for i, kind, nbytes in self._wanted:
                with self._cv:
                    while not self._stop and self._ahead and self._ahead + nbytes > PREFAULT_AHEAD:
                        self._cv.wait()
                    if self._stop:
                        return
                    self._ahead += nbytes
                buf = self._given[i] if i in self._given else _empty(kind, nbytes)
                _map_pages(buf)
                with self._cv:
                    self._ready[i] = buf
                    self._cv.notify_all()
        except BaseException as e:  # MemoryError: the reader allocates (and raises) itself
            self._error = e
        finally:
            with self._cv:
                self._done = True
                self._cv.notify_all()

    def get(self, i: int):
        """The mapped buffer for storage ``i`` (None: the reader allocates it itself)."""
        if i not in self._sizes:
            return None
        with self._cv:
            while i not in self._ready and not self._done:
                self._cv.wait()
            return self._ready.pop(i, None)

    def release(self, i: int) -> None:
        """Storage ``i`` is read: the helper may run further ahead."""
        nbytes = self._sizes.get(i)
        if nbytes is None or self._thread is None:
            return
        with self._cv:
            self._ahead -= nbytes
            self._cv.notify_all()


def read_storage(f, pos: int, s, device: str, progress, buf=None, chunk: int | None = None):
    """Read storage ``s`` (at ``pos`` in ``f``) into ``buf`` (allocated if None) on
    ``device``, hashing as it streams; returns the buffer and the digest. ``chunk``: bytes
    per read of a CPU buffer (default READ_CHUNK)."""
    h = xxhash.xxh3_128()
    n = s.nbytes
    if s.kind == "numpy" or device == "cpu":
        if buf is None:
            buf = _empty(s.kind, n)
        mv = memoryview(buf.numpy() if hasattr(buf, "numpy") else buf)  # tensor or array
        fd = f.fileno()
        chunk = chunk or READ_CHUNK
        for off in range(0, n, chunk):
            part = mv[off : off + chunk]
            _pread_exact(fd, pos + off, part)
            h.update(part)  # an 8 MiB chunk is still in cache: no second trip to memory
            if progress is not None:
                progress.update(len(part))
        return buf, h.hexdigest()
    import torch

    # Straight to the device: read chunks into two pinned staging buffers and copy them
    # up asynchronously, so disk reads and host-to-device copies overlap (T10).
    if buf is None:
        buf = torch.empty(n, dtype=torch.uint8, device=device)
    size = min(CHUNK, max(n, 1))
    pinned = device.startswith("cuda")
    stages = [torch.empty(size, dtype=torch.uint8, pin_memory=pinned) for _ in range(2)]
    events = [None, None]
    for k, off in enumerate(range(0, n, CHUNK)):
        j = k % 2
        if events[j] is not None:
            events[j].synchronize()
        m = min(CHUNK, n - off)
        stage = stages[j][:m]
        view = memoryview(stage.numpy())
        _readinto_exact(f, pos + off, view)
        h.update(view)
        buf[off : off + m].copy_(stage, non_blocking=pinned)
        if pinned:
            events[j] = torch.cuda.Event()
            events[j].record()
        if progress is not None:
            progress.update(m)
    if pinned:
        torch.cuda.synchronize(device)
    return buf, h.hexdigest()


def _pread_exact(fd: int, pos: int, view) -> None:
    """Fill ``view`` from file offset ``pos`` (one positioned read per call, no seek)."""
    while len(view):
        n = os.preadv(fd, [view], pos) if _HAS_PREADV else _pread_into(fd, pos, view)
        if not n:
            raise OSError("unexpected end of file")
        view = view[n:]
        pos += n


_HAS_PREADV = hasattr(os, "preadv")


def _pread_into(fd: int, pos: int, view) -> int:
    data = os.pread(fd, len(view), pos)
    view[: len(data)] = data
    return len(data)


def _readinto_exact(f, pos: int, view) -> None:
    _pread_exact(f.fileno(), pos, view)


# ----------------------------------------------------------------- rebuilding
def rebuild_torch(buf, dtype_name, shape, stride, offset, requires_grad, kind):
    import torch

    if not isinstance(buf, torch.Tensor):  # a numpy array's memory (torch.from_numpy)
        buf = torch.from_numpy(buf)
    t = torch.empty(0, dtype=getattr(torch, dtype_name), device=buf.device)
    t.set_(buf.untyped_storage(), offset, shape, stride)
    if kind == "param":
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    if requires_grad:
        t.requires_grad_(True)
    return t


def rebuild_array(buf, dtype, shape, strides, offset, writeable):
    import numpy as np

    if not isinstance(buf, np.ndarray):  # a CPU tensor's memory (tensor.numpy())
        buf = buf.numpy() if buf.device.type == "cpu" else buf.cpu().numpy()

    a = np.ndarray(shape, dtype=dtype, buffer=buf, offset=offset, strides=strides)
    if not writeable:
        a.flags.writeable = False
    return a
