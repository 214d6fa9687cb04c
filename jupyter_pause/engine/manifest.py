"""The checkpoint manifest: one JSON file that describes everything in a checkpoint.

``manifest.json`` is the single source of truth for a checkpoint: which objects
it holds, which pickle record rebuilds each, which tensor storages live in which
safetensors file under which key, every hash, and the software versions that
wrote it. It is plain JSON so that the server (which never imports torch) and a
human with ``jq`` can both read it, and so that the weights stay usable without
jupyter-pause (see docs/engine.md). ``manifest.sig`` holds its HMAC.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field, fields
from typing import Any

FORMAT = "jupyter-pause/3"
# format 1: one memo over all records (records 0..k load together); format 2: every
# group's records in objects.pkl; both still restored
FORMATS = ("jupyter-pause/1", "jupyter-pause/2", FORMAT)
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
PICKLE = "objects.pkl"
BLOBS = "blobs"
#: the notebook's session record and notebook file in a bucket (engine/session_record.py)
SESSION = "session"


class Records:
    """A checkpoint's records as the manifest's offsets count them, when some groups keep
    theirs apart from objects.pkl (format 3). ``pieces``: (where a group's run of records
    starts, the bytes holding it, where in those it starts, its length), with None as the
    bytes of a group that was not read. Sliced within one piece, as bytes are."""

    def __init__(self, pieces: list[tuple[int, bytes | None, int, int]], size: int):
        self._starts = [p[0] for p in pieces]
        self._pieces = pieces
        self._size = size

    def __len__(self) -> int:
        return self._size

    def _at(self, start: int, stop: int) -> tuple[bytes, int]:
        """The bytes holding ``start``-``stop``, and where ``start`` is in them."""
        k = bisect.bisect_right(self._starts, start) - 1
        base, data, at, size = self._pieces[k] if k >= 0 else (0, None, 0, 0)
        if data is None or stop - base > size:
            raise ValueError(f"records {start}-{stop} were not read")
        return data, at + start - base

    def __getitem__(self, span: slice):
        """The bytes of ``span``: a piece's whole bytes as they are (``io.BytesIO`` takes
        them without a copy), anything else a memoryview."""
        start, stop, _ = span.indices(self._size)
        data, at = self._at(start, stop)
        if at == 0 and stop - start == len(data):
            return data
        return memoryview(data)[at : at + stop - start]

    def find(self, sub: bytes, start: int, stop: int) -> int:
        data, at = self._at(start, stop)
        found = data.find(sub, at, at + stop - start)
        return -1 if found < 0 else found - at + start


@dataclass
class StorageEntry:
    """One underlying tensor/array buffer, saved once however many views share it."""

    file: str  # relative to the notebook folder, e.g. "blobs/<hash>.safetensors"
    key: str  # tensor name inside that safetensors file
    nbytes: int
    xxh3: str  # xxh3_128 of the raw bytes
    kind: str  # "torch" or "numpy"
    device: str  # "cpu", "cuda:0", ...
    dtype: str  # dtype of the key as written in the file ("bfloat16", "float32", "uint8")
    shape: list[int]
    owner: str  # first object that referenced it (named in errors)


@dataclass
class FileEntry:
    """A safetensors file. ``xxh3`` = xxh3_128(header bytes || digest of each tensor, in order)."""

    bytes: int
    xxh3: str
    header_xxh3: str
    tensors: dict[str, str] = field(default_factory=dict)  # key -> xxh3_128 of its bytes


@dataclass
class ObjectEntry:
    type: str
    dump: int  # index of its record in objects.pkl (records load in order; later ones may refer to earlier)
    storages: list[int] = field(default_factory=list)
    bytes: int = 0  # tensor bytes it references
    tracked: bool = False


@dataclass
class GroupEntry:
    """Consecutive records pickled with one memo (format 2): variables that share objects.
    A group loads on its own; its pickle names storages by position in ``storages``."""

    first: int  # index of its first record
    storages: list[int] = field(default_factory=list)  # group position -> storage index
    #: format 3: the storage holding its records, kept apart from objects.pkl (a large
    #: group: a later checkpoint that reuses it writes nothing), and their HMAC-SHA256
    records: int | None = None
    hmac: str | None = None


@dataclass
class PickleEntry:
    file: str
    bytes: int
    xxh3: str
    hmac: str  # HMAC-SHA256: xxh3 is not collision resistant, the pickle runs code


@dataclass
class RerunCell:
    """The cell that last bound names this checkpoint could not save (for a consented re-run)."""

    cell: int  # IPython execution count: In[cell]
    source: str
    names: list[str] = field(default_factory=list)


@dataclass
class Manifest:
    id: str
    notebook: str
    created: str  # ISO 8601 UTC
    pickle: PickleEntry
    format: str = FORMAT
    versions: dict[str, Any] = field(default_factory=dict)
    files: dict[str, FileEntry] = field(default_factory=dict)
    storages: list[StorageEntry] = field(default_factory=list)
    objects: dict[str, ObjectEntry] = field(default_factory=dict)
    #: byte offset of each record in the records: objects.pkl, with the records of each
    #: group kept in a storage of its own (format 3) read into their place
    records: list[int] = field(default_factory=list)
    rng_record: int | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # name -> module to re-import
    metadata: dict[str, Any] = field(default_factory=dict)
    bytes_total: int = 0  # tensor bytes referenced
    bytes_written: int = 0  # bytes newly written by this checkpoint
    owner: str = ""  # user who wrote it (signed with the rest; checked on list and restore)
    rerun: list[RerunCell] = field(default_factory=list)  # cells that made the skipped names
    groups: list[GroupEntry] = field(default_factory=list)  # format 2; [] in format 1
    shell: dict[str, Any] = field(default_factory=dict)  # IPython's own state (engine/shell.py)

    # -- JSON -----------------------------------------------------------------
    def to_bytes(self) -> bytes:
        # json's C encoder, which takes no indent (a manifest of thousands of storages took
        # longer to write than a re-checkpoint's pickling); each entry is a plain dataclass
        return json.dumps(self, default=vars, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and check the shape of a manifest. Anything malformed (bad UTF-8, bad JSON,
        wrong types, indices out of range) raises ValueError, never anything else: listings
        read manifests of checkpoints nobody vouched for yet."""
        try:
            raw = json.loads(data.decode("utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
            if raw.get("format") not in FORMATS:
                raise ValueError(f"unsupported checkpoint format {raw.get('format')!r}")
            raw["pickle"] = PickleEntry(**raw["pickle"])
            raw["files"] = {k: FileEntry(**v) for k, v in raw.get("files", {}).items()}
            raw["storages"] = [StorageEntry(**s) for s in raw.get("storages", [])]
            raw["objects"] = {k: ObjectEntry(**v) for k, v in raw.get("objects", {}).items()}
            raw["rerun"] = [RerunCell(**r) for r in raw.get("rerun", [])]
            raw["groups"] = [GroupEntry(**g) for g in raw.get("groups", [])]
            known = {f.name for f in fields(cls)}
            m = cls(**{k: v for k, v in raw.items() if k in known})
            m.check_shape()
        except ValueError:
            raise
        except (AttributeError, KeyError, TypeError, IndexError, RecursionError) as e:
            raise ValueError(f"malformed manifest ({type(e).__name__}: {e})") from None
        return m

    def check_shape(self) -> None:
        """Raise ValueError where a field does not have the type or range the format gives it."""

        def need(ok, what):
            if not ok:
                raise ValueError(f"malformed manifest: {what}")

        def ints(xs):
            return isinstance(xs, list) and all(type(x) is int and x >= 0 for x in xs)

        for name in ("id", "notebook", "created", "owner"):
            need(isinstance(getattr(self, name), str), name)
        need(type(self.pickle.bytes) is int and isinstance(self.pickle.file, str), "pickle")
        need(type(self.bytes_total) is int and type(self.bytes_written) is int, "bytes")
        need(ints(self.records), "records")
        need(self.rng_record is None or type(self.rng_record) is int, "rng_record")
        for d in (self.skipped, self.modules, self.metadata, self.versions, self.shell):
            need(isinstance(d, dict), "a mapping")
        for f in self.files.values():
            need(type(f.bytes) is int and isinstance(f.tensors, dict), "files")
        for s in self.storages:
            need(type(s.nbytes) is int and s.file in self.files, "storages")
        n = len(self.storages)
        for o in self.objects.values():
            need(ints(o.storages) and all(i < n for i in o.storages), "object storages")
            need(type(o.dump) is int and 0 <= o.dump < len(self.records), "object record")
        firsts = [g.first for g in self.groups]
        need(ints(firsts) and firsts == sorted(set(firsts)), "groups")
        need(not firsts or (firsts[0] == 0 and firsts[-1] < len(self.records)), "groups")
        for g in self.groups:
            need(ints(g.storages) and all(i < n for i in g.storages), "group storages")
            need(g.records is None or (type(g.records) is int and 0 <= g.records < n), "group")
            need((g.records is None) == (g.hmac is None), "group records")
            need(g.hmac is None or isinstance(g.hmac, str), "group records")

    # -- groups ---------------------------------------------------------------
    def spans(self) -> list[tuple[int, int, list[int] | None]]:
        """(first record, end record, group position -> storage index or None) of each
        group of records that load with one memo; format 1 has one group of them all."""
        if not self.groups:
            return [(0, len(self.records), None)]
        ends = [g.first for g in self.groups[1:]] + [len(self.records)]
        return [(g.first, end, g.storages) for g, end in zip(self.groups, ends, strict=True)]

    def records_storages(self) -> set[int]:
        """The storages that hold records (format 3), not tensors or arrays."""
        return {g.records for g in self.groups if g.records is not None}

    def apart(self, records: list[int]) -> dict[int, int]:
        """Of the groups that hold the given records: group index -> the storage its
        records are kept in (format 3), for those kept apart from objects.pkl."""
        out = {}
        for k, (first, end, _local) in enumerate(self.spans()):
            g = self.groups[k] if self.groups else None
            if g is not None and g.records is not None and any(first <= r < end for r in records):
                out[k] = g.records
        return out

    def records_to_load(self, wanted: set[int]) -> list[int]:
        """The records to unpickle for the ``wanted`` ones: in each group, every record up
        to the last one wanted (later records of a group may refer to earlier ones)."""
        out: list[int] = []
        for first, end, _local in self.spans():
            last = max((r for r in wanted if first <= r < end), default=None)
            if last is not None:
                out.extend(range(first, last + 1))
        return out

    # -- helpers --------------------------------------------------------------
    def files_of(self, names) -> set[str]:
        """Files holding the storages the given objects need."""
        return {self.storages[i].file for n in names for i in self.objects[n].storages}

    def owners_of_file(self, file: str) -> list[str]:
        return sorted(
            {
                n
                for n, o in self.objects.items()
                for i in o.storages
                if self.storages[i].file == file
            }
        )
