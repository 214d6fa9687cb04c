"""A paused notebook's record in the bucket: what any server needs to list, schedule and
resume it, when it shares nothing with the server that paused it but the bucket and the
user's key.

Beside a notebook's checkpoints, in the same folder of the bucket::

    <prefix>/<user folder>/<notebook folder>/session/record.json        the record, signed
    <prefix>/<user folder>/<notebook folder>/session/<xxh3>.ipynb        the notebook as of
                                                                          the last pause

The record says where the notebook is (``paused``, ``failed``; or held by one server:
``running``, ``pausing``, ``resuming``), since when and why, its schedule, and the
checkpoint a resume must use; the notebook file is named by its hash, which the record
carries, so a node that lacks the file can write it back.  It is signed with the user's
key (HMAC-SHA256, as a manifest is) and bound to its notebook folder and owner, so a
record copied from another notebook or written without the key is refused, never used.

Every write is conditional on the version last read (the object's ETag, and on GCS its
generation): a record is never overwritten by a server that has not seen it, and of two
servers that race to resume one notebook, exactly one wins
(:class:`RecordConflict` for the other, with the record that won).  A server that holds a
notebook renews its record four times every :data:`STALE` seconds (the default of
``c.PauseApp.bucket_hold_timeout``); a hold not renewed for that long is a server that died (a lost node, a preemption), and the notebook
can be resumed from its checkpoint elsewhere.

This module only reads and writes the records (asynchronously, with obstore's async
API); the server decides when (server/bucket_sessions.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import xxhash

from . import paths, signing
from .errors import RemoteStoreError, UntrustedCheckpoint
from .manifest import SESSION
from .remote import describe, open_store

FORMAT = "jupyter-pause-session/1"
RECORD = "record.json"
#: seconds after which a hold that was not renewed is a server that is gone (renewed four
#: times as often)
STALE = 120.0

#: states in which one server holds the notebook (its kernel, or an operation on it)
HELD = frozenset({"running", "pausing", "resuming"})
#: states any server may resume from
RESUMABLE = frozenset({"paused", "failed"})
STATES = HELD | RESUMABLE


@dataclass(frozen=True)
class SessionRecord:
    """What the bucket says of one notebook (all times are epoch seconds)."""

    notebook: str  # its server-relative path
    state: str  # one of STATES
    node: str  # the server that wrote it: ``machine:id``, the id kept in its state_dir
    since: float  # when the notebook entered this state
    heartbeat: float  # when ``node`` last said it holds the notebook
    owner: str = ""  # the user whose key signed it
    #: the checkpoint a resume must use: {id, time, bytes} (None: none yet)
    checkpoint: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = None  # lifecycle.Session.schedule
    #: the pause that made it paused: {id, started, finished, options} (who, why)
    paused: dict[str, Any] | None = None
    error: str | None = None  # why it failed, for a failed notebook
    kernel_name: str | None = None
    workload_class: str | None = None
    #: the notebook file as of the last pause: {xxh3, bytes} of session/<xxh3>.ipynb
    notebook_file: dict[str, Any] | None = None
    #: what the last save of a stopping server left here: {outcome (newest, older,
    #: none), checkpoint, at, newest, why, stopped} (server/staging.py ``final_save``)
    final_save: dict[str, Any] | None = None

    @property
    def where(self) -> str:
        """The server that wrote it, as a person tells it from others."""
        machine, _, server = self.node.rpartition(":")
        return f"{machine or '?'} (server {server})"

    def held_by_other(self, node: str, now: float, stale_after: float = STALE) -> bool:
        """Whether another server holds the notebook now (and has said so lately)."""
        return self.state in HELD and self.node != node and not self.stale(now, stale_after)

    def stale(self, now: float, stale_after: float = STALE) -> bool:
        """A hold that was not renewed in time: its server is gone."""
        return self.state in HELD and now - self.heartbeat > stale_after

    def resumable(self, now: float, stale_after: float = STALE) -> bool:
        """Any server may resume it: paused, failed, or held by a server that is gone."""
        return self.state in RESUMABLE or self.stale(now, stale_after)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> SessionRecord:
        """Raises ValueError for anything that is not a record."""
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or not {"notebook", "state", "node"} <= set(data):
            raise ValueError("not a session record")
        record = cls(**{k: v for k, v in data.items() if k in known})
        if record.state not in STATES or not isinstance(record.notebook, str):
            raise ValueError(f"a session record in an unknown state {record.state!r}")
        return record


@dataclass(frozen=True)
class Stored:
    """A record as read from the bucket, with the version a conditional write needs.

    ``record`` is None when there is none, or when it cannot be trusted: then
    ``problem`` says why (signed with another key, or none here; bound to another
    notebook; damaged)."""

    record: SessionRecord | None = None
    problem: UntrustedCheckpoint | None = None
    e_tag: str | None = None
    version: str | None = None
    #: what a record signed with a key this server lacks says (its notebook, its state),
    #: to show the notebook and name the key; never acted on
    unverified: SessionRecord | None = None

    @property
    def exists(self) -> bool:
        return self.e_tag is not None


class RecordConflict(Exception):
    """Another server wrote the record since this one read it: ``current`` is what won."""

    def __init__(self, current: Stored):
        self.current = current
        super().__init__("the session record changed in the bucket since it was read")


@dataclass
class _Folder:
    """One notebook folder's session objects: their keys."""

    base: str

    @property
    def record(self) -> str:
        return f"{self.base}/{SESSION}/{RECORD}"

    def notebook(self, digest: str) -> str:
        return f"{self.base}/{SESSION}/{digest}.ipynb"


def encode(record: SessionRecord, key: bytes) -> bytes:
    """The record as stored: its JSON, and the HMAC of exactly those bytes."""
    body = json.dumps(record.to_json(), sort_keys=True, separators=(",", ":"))
    envelope = {
        "format": FORMAT,
        "record": body,
        "hmac": signing.sign(body.encode(), key),
        "key_id": signing.key_id(key),
    }
    return json.dumps(envelope).encode()


def decode(raw: bytes, folder: str, key: bytes | None) -> Stored:
    """Parse and verify a stored record of the notebook folder ``folder``: its record,
    or the :class:`UntrustedCheckpoint` (``kind`` as for a manifest) that says why it
    cannot be trusted."""
    where = f"the session record of {folder}"
    try:
        envelope = json.loads(raw)
        body = envelope["record"]
        if envelope.get("format") != FORMAT or not isinstance(body, str):
            raise ValueError("unknown format")
        signed_by = str(envelope.get("key_id") or "")
        mac = str(envelope.get("hmac") or "")
        record = SessionRecord.from_json(json.loads(body))
    except (ValueError, KeyError, TypeError) as e:
        return Stored(problem=UntrustedCheckpoint(where, f"it is damaged ({e})", "damaged"))
    if paths.folder_name(record.notebook) != folder.rsplit("/", 1)[-1]:
        problem = UntrustedCheckpoint(
            where,
            f"it is the record of notebook {record.notebook!r}, copied here from elsewhere",
            "other-notebook",
        )
        return Stored(problem=problem)
    if key is None:
        problem = UntrustedCheckpoint(
            where, signing.missing_key_reason(signed_by), "no-key", key_id=signed_by
        )
        return Stored(problem=problem, unverified=record)
    if signed_by != signing.key_id(key):
        problem = UntrustedCheckpoint(
            where, signing.other_key_reason(signed_by, key), "other-key", key_id=signed_by
        )
        return Stored(problem=problem, unverified=record)
    if not signing.verify(body.encode(), mac, key):
        problem = UntrustedCheckpoint(where, "its signature does not match: it was altered")
        return Stored(problem=problem)
    if record.owner and record.owner != paths.owner():
        problem = UntrustedCheckpoint(
            where, f"it belongs to user {record.owner!r}, not {paths.owner()!r}", "other-owner"
        )
        return Stored(problem=problem)
    return Stored(record)


@dataclass
class Records:
    """This user's session records in a bucket (the notebook folders under the user's
    folder).  Every call raises :class:`RemoteStoreError` when the store cannot be
    reached, never an obstore exception."""

    bucket: paths.Bucket
    user: str = field(default_factory=paths.owner)

    def __post_init__(self):
        self.store = open_store(self.bucket)
        rel = paths.folder_name(self.user)
        self.base = "/".join(p for p in (self.bucket.prefix, rel) if p)

    def folder(self, notebook: str) -> _Folder:
        return _Folder(f"{self.base}/{paths.folder_name(notebook)}")

    def _fail(self, action: str, e: BaseException) -> RemoteStoreError:
        return RemoteStoreError(self.bucket.url, action, describe(e))

    async def versions(self) -> dict[str, str]:
        """Every record of this user: its notebook folder -> its ETag (one listing)."""
        import obstore

        out = {}
        suffix = f"/{SESSION}/{RECORD}"
        try:
            async for batch in obstore.list(self.store, prefix=self.base + "/", chunk_size=1000):
                for meta in batch:
                    name = meta["path"]
                    if name.endswith(suffix):
                        folder = name[len(self.base) + 1 : -len(suffix)]
                        if "/" not in folder:
                            out[folder] = str(meta.get("e_tag") or "")
        except Exception as e:
            raise self._fail("list the session records", e) from e
        return out

    async def read_folder(self, folder: str, key: bytes | None) -> Stored:
        """The record of the notebook folder ``folder`` (a name from :meth:`versions`)."""
        return await self._read(_Folder(f"{self.base}/{folder}"), key)

    async def read(self, notebook: str, key: bytes | None) -> Stored:
        return await self._read(self.folder(notebook), key)

    async def _read(self, folder: _Folder, key: bytes | None) -> Stored:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            got = await obstore.get_async(self.store, folder.record)
            raw = bytes(await got.bytes_async())
        except (FileNotFoundError, NotFoundError):  # obstore raises the former
            return Stored()
        except Exception as e:
            raise self._fail("read the session record", e) from e
        meta = got.meta
        return replace(
            decode(raw, folder.base, key),
            e_tag=meta.get("e_tag") or "",
            version=meta.get("version"),
        )

    async def write(self, record: SessionRecord, expected: Stored, key: bytes) -> Stored:
        """Write ``record`` if the bucket still holds ``expected`` (the version read last;
        ``Stored()`` for none); raises :class:`RecordConflict` with what it holds instead."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        folder = self.folder(record.notebook)
        if expected.exists:
            mode: Any = {"e_tag": expected.e_tag, "version": expected.version}
            if expected.version is None:
                del mode["version"]
        else:
            mode = "create"
        try:
            put = await obstore.put_async(self.store, folder.record, encode(record, key), mode=mode)
        except (AlreadyExistsError, PreconditionError):
            raise RecordConflict(await self._read(folder, key)) from None
        except Exception as e:
            if "Version required" in str(e):  # GCS: an ETag alone does not do; read again
                current = await self._read(folder, key)
                if current.e_tag != expected.e_tag:
                    raise RecordConflict(current) from None
                return await self.write(record, current, key)
            raise self._fail("write the session record", e) from e
        return Stored(record, None, put.get("e_tag"), put.get("version"))

    async def put_notebook(self, notebook: str, content: bytes) -> dict[str, Any]:
        """Keep the notebook file beside its record; returns the record's ``notebook_file``."""
        import obstore

        digest = xxhash.xxh3_128_hexdigest(content)
        try:
            await obstore.put_async(self.store, self.folder(notebook).notebook(digest), content)
        except Exception as e:
            raise self._fail("keep the notebook file", e) from e
        return {"xxh3": digest, "bytes": len(content)}

    async def get_notebook(self, notebook: str, entry: dict[str, Any]) -> bytes:
        """The notebook file a record names, checked against its signed hash."""
        import obstore

        digest = str(entry.get("xxh3") or "")
        try:
            got = await obstore.get_async(self.store, self.folder(notebook).notebook(digest))
            content = bytes(await got.bytes_async())
        except Exception as e:
            raise self._fail("read the notebook file", e) from e
        if xxhash.xxh3_128_hexdigest(content) != digest:
            raise RemoteStoreError(
                self.bucket.url,
                "read the notebook file",
                f"the copy of {notebook!r} does not match its signed hash (damaged)",
            )
        return content

    async def drop_notebooks(self, notebook: str, keep: str | None) -> None:
        """Delete the notebook files kept beside a record but ``keep`` (best effort)."""
        import obstore

        prefix = f"{self.folder(notebook).base}/{SESSION}/"
        try:
            stale = []
            async for batch in obstore.list(self.store, prefix=prefix, chunk_size=1000):
                stale += [
                    m["path"]
                    for m in batch
                    if m["path"].endswith(".ipynb") and m["path"] != prefix + f"{keep}.ipynb"
                ]
            if stale:
                await obstore.delete_async(self.store, stale)
        except Exception:  # a stray copy costs a few kB; the next pause tries again
            return
