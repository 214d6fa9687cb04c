"""The bucket is the truth for a paused notebook: each server that keeps its checkpoints
in a bucket publishes its notebooks' sessions there, and lists, schedules and resumes
those another server paused (engine/session_record.py holds the format and the rules).

* **Publish.**  After every change of the sessions (``SessionStore.listeners``), each
  notebook that has a checkpoint and whose record would now say something else is
  written, one write at a time per notebook, conditionally on the version this server
  last read.  A pause waits for its record (:meth:`before_release`): the bucket names
  the pause's checkpoint, and keeps the notebook file, before the kernel goes.
* **Hold.**  Four times every ``hold_timeout`` seconds, the records of the notebooks
  this server holds (a kernel, an operation) are renewed; a hold not renewed for
  ``hold_timeout`` is a server that is gone, and another server may then resume the
  notebook.
* **Claim.**  A resume first writes ``resuming`` over the record it read
  (:meth:`claim`): of two servers that race, one wins, and the other answers ``409``,
  naming the server that has it.
* **Learn.**  Every ``interval`` seconds (and at start-up) the records are listed; a
  notebook another server paused, or whose server is gone, becomes a paused (or
  failed) session here, schedule included, so ``GET status``, the CLI, the UI and the
  scheduler see it; a paused session here that another server resumed since is
  dropped.  A record signed with a key this server lacks shows its notebook as failed,
  with a reason that names the key it needs.

When records disagree, the newer one wins: one that another server wrote after this
server's last read is never overwritten unless this server's session is newer, and a
notebook another server holds is never taken from it while its hold is renewed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import nbformat
import xxhash
from jupyter_server.utils import ensure_async

from ..clock import SYSTEM, Clock
from ..engine import signing
from ..engine.errors import CheckpointError, RemoteStoreError
from ..engine.session_record import (
    HELD,
    STALE,
    RecordConflict,
    Records,
    SessionRecord,
    Stored,
)
from ..lifecycle import BUSY_STATES, Operation, Session, SessionStore, State
from .errors import Conflict, Unavailable
from .staging import describe_final_save, final_save

#: what a record says of a notebook in each lifecycle state
RECORD_STATE = {
    State.RUNNING: "running",
    State.READY: "running",
    State.CHECKPOINTING: "running",
    State.PAUSING: "pausing",
    State.PAUSED: "paused",
    State.RESUMING: "resuming",
    State.WAITING_FOR_CAPACITY: "resuming",
    State.RESTORING: "resuming",
    State.FAILED: "failed",
    # the kernel is alive, its GPU memory in host memory: this server holds it
    State.HIBERNATING: "running",
    State.HIBERNATED: "running",
    State.WAKING: "running",
}

#: seconds a stopping server waits for its last records
CLOSE_WAIT = 5.0


def _clock_time(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


class BucketSessions:
    def __init__(
        self,
        *,
        records: Records,
        store: SessionStore,
        contents_manager,
        node: str,
        interval: float,
        log,
        clock: Clock = SYSTEM,
        hold_timeout: float = STALE,
    ):
        self.records = records
        self.store = store
        self.contents_manager = contents_manager
        self.node = node
        self.interval = interval
        #: a hold not renewed for this long is a server that is gone; renewed 4 times as often
        self.hold_timeout = hold_timeout
        self.log = log
        self.clock = clock
        #: the record of each notebook as this server last read or wrote it
        self.known: dict[str, Stored] = {}
        #: what this server last published (or learned) of each notebook
        self.published: dict[str, dict[str, Any]] = {}
        #: notebooks another server took over from this one: no longer published here
        self.detached: set[str] = set()
        #: the notebook file of each notebook as of its last checkpoint here (or as learned)
        self.notebook_files: dict[str, dict[str, Any]] = {}
        #: notebook folder -> the ETag of its record as listed, and the record as read
        self._seen: dict[str, tuple[str, Stored]] = {}
        self._pending: set[str] = set()
        #: why the last write of a notebook's record failed
        self.failed: dict[str, str] = {}
        self._writing: dict[str, asyncio.Task] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._loops: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        store.listeners.append(self.saved)

    # ----------------------------------------------------------------- what to say

    def intent(self, session: Session) -> dict[str, Any] | None:
        """What the record of ``session`` should say now (None: nothing to share, no
        checkpoint in the bucket yet, nor a stopping server's word on it).  The checkpoint
        it names is the newest the bucket holds: a background save still staged from
        here is not there yet."""
        checkpoint = session.bucket_checkpoint
        if not checkpoint and not session.final_save:
            return None
        state = RECORD_STATE[session.state]
        error = session.error
        if state in HELD and session.final_save is not None:
            # the server stops with an operation still under way: it holds it no more, and
            # another server may resume what the bucket has
            state, error = "failed", describe_final_save(session.final_save)
        op = session.operation
        paused = None
        if state == "paused" and op is not None and op.kind == "pause":
            paused = {
                "id": op.id,
                "started": op.started,
                "finished": op.finished,
                "options": op.options,
                "node": op.owner,
            }
        return {
            "state": state,
            "checkpoint": {k: checkpoint.get(k) for k in ("id", "time", "bytes")}
            if checkpoint
            else None,
            "schedule": session.schedule,
            "paused": paused,
            "error": error if state == "failed" else None,
            "kernel_name": session.kernel_name,
            "workload_class": session.workload_class,
            "notebook_file": self.notebook_files.get(session.path),
            "final_save": session.final_save,
        }

    def _record(self, session: Session, intent: dict[str, Any]) -> SessionRecord:
        now = self.clock.time()
        return SessionRecord(
            notebook=session.path,
            node=self.node,
            since=session.since,
            heartbeat=now,
            owner=self.records.user,
            **intent,
        )

    # -------------------------------------------------------------------- publish

    def saved(self) -> None:
        """The sessions were saved: write the records that now say something else (on
        the event loop; a save made on another thread is handed to it)."""
        if self._closing:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not on the loop's thread (or before it runs: start() looks)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self.saved)
            return
        for path, session in self.store.sessions.items():
            if path in self.detached:
                continue
            intent = self.intent(session)
            if intent is not None and intent != self.published.get(path):
                self._write_soon(path)

    def _write_soon(self, path: str) -> None:
        self._pending.add(path)
        if path not in self._writing:
            task = asyncio.ensure_future(self._writer(path))
            self._writing[path] = task
            task.add_done_callback(lambda _: self._writing.pop(path, None))

    async def _writer(self, path: str) -> None:
        """Write ``path``'s record until it says what its session says (one at a time)."""
        while path in self._pending:
            self._pending.discard(path)
            try:
                await self._publish(path)
                self.failed.pop(path, None)
            except (RemoteStoreError, CheckpointError) as e:
                self.failed[path] = str(e)
                self.log.warning(
                    "jupyter-pause: could not write the bucket's record of %s: %s", path, e
                )
                return  # the next change, or the next heartbeat, tries again
            except Exception as e:
                self.failed[path] = str(e)
                self.log.exception("jupyter-pause: the bucket's record of %s", path)
                return

    async def flush(self, path: str) -> str | None:
        """Write ``path``'s record now and wait for it; returns why it failed, or None."""
        self._write_soon(path)
        await asyncio.shield(self._writing[path])
        return self.failed.get(path)

    def _lock(self, path: str) -> asyncio.Lock:
        """One read-and-write of a notebook's record at a time, on this server."""
        return self._locks.setdefault(path, asyncio.Lock())

    async def _publish(self, path: str, *, renew: bool = False) -> None:
        async with self._lock(path):
            await self._publish_locked(path, renew=renew)

    async def _publish_locked(self, path: str, *, renew: bool) -> None:
        session = self.store.sessions.get(path)
        if session is None or path in self.detached:
            return
        intent = self.intent(session)
        if intent is None or (intent == self.published.get(path) and not renew):
            return
        key = signing.load_key()
        expected = self.known.get(path)
        if expected is None:  # never read here: what the bucket says may be newer
            expected = await self.records.read(path, key)
            if not self._ours_is_newer(session, expected):
                self.known[path] = expected
                self._yield(session, expected)
                return
        for _ in range(5):
            try:
                self.known[path] = await self.records.write(
                    self._record(session, intent), expected, key
                )
                self.published[path] = intent
                return
            except RecordConflict as conflict:
                expected = conflict.current
                if not self._ours_is_newer(session, expected):
                    self.known[path] = expected
                    self._yield(session, expected)
                    return
        raise RemoteStoreError(
            self.records.bucket.url, "write the session record", "it kept changing"
        )

    def _ours_is_newer(self, session: Session, current: Stored) -> bool:
        """Whether this server's session may replace the record the bucket holds now."""
        theirs = current.record
        if not current.exists:
            return True
        if theirs is None:  # not this user's key: never overwritten
            return False
        if theirs.node == self.node:  # this server's own write, whose answer was lost
            return True
        if theirs.held_by_other(self.node, self.clock.time(), self.hold_timeout):
            return False
        return theirs.since < session.since

    def _yield(self, session: Session, current: Stored) -> None:
        """Another server's record won: this one stops saying otherwise."""
        theirs = current.record
        if theirs is None:
            self.detached.add(session.path)
            self.log.warning(
                "jupyter-pause: not sharing %s through the bucket: %s",
                session.path,
                current.problem,
            )
            return
        if session.state.has_kernel or session.busy:
            self.detached.add(session.path)
            session.error = (
                f"{session.path} is {theirs.state} on another server, {theirs.where}, since "
                f"{_clock_time(theirs.since)}: the bucket follows that server now, so this "
                "kernel's later checkpoints are not shared with other servers"
            )
            self.log.warning("jupyter-pause: %s", session.error)
            self._save()
            return
        self._learn(theirs)

    async def keep_notebook(self, session: Session, op: Operation) -> None:
        """A checkpoint is committed: keep the notebook file as it is now beside it (once
        per version), for the record to name; another server that lacks the file writes
        it back at its resume."""
        try:
            content = await self._notebook_content(session.path)
            digest = xxhash.xxh3_128_hexdigest(content)
            if (self.notebook_files.get(session.path) or {}).get("xxh3") != digest:
                self.notebook_files[session.path] = await self.records.put_notebook(
                    session.path, content
                )
        except Exception as e:  # the store, or a contents manager that cannot: say so
            op.messages.append(f"The notebook file was not kept in the bucket: {e}")

    async def before_release(self, session: Session, op: Operation) -> None:
        """A pause is about to release the kernel: the record names its checkpoint and
        notebook file (``pausing``) before the kernel goes."""
        failed = await self.flush(session.path)
        if failed:
            op.messages.append(
                f"Other servers were not told of this pause ({failed}); this server resumes it."
            )
        elif session.path in self.notebook_files:  # the copies no record names any more
            keep = self.notebook_files[session.path]["xxh3"]
            await self.records.drop_notebooks(session.path, keep)

    async def _notebook_content(self, path: str) -> bytes:
        model = await ensure_async(self.contents_manager.get(path, content=True, type="notebook"))
        return nbformat.writes(nbformat.from_dict(model["content"])).encode()

    # ---------------------------------------------------------------------- claim

    async def claim(self, path: str) -> None:
        """Before a resume: take the notebook in the bucket (``resuming``), unless another
        server holds it; raises :class:`PauseError` (409) naming that server."""
        async with self._lock(path):
            await self._claim_locked(path)

    async def _claim_locked(self, path: str) -> None:
        key = signing.load_key(create=False)
        current = await self._read(path, key)
        if not current.exists:
            return  # never shared: this server's own
        theirs = current.record
        if theirs is None:
            raise Conflict(f"{path!r} cannot be resumed here: {current.problem.reason}")
        now = self.clock.time()
        if theirs.held_by_other(self.node, now, self.hold_timeout):
            raise Conflict(self._held_message(path, theirs))
        session = self.store.sessions.get(path)
        intent = dict(self.intent(session) or {}) if session else {}
        intent.update(state="resuming", checkpoint=intent.get("checkpoint") or theirs.checkpoint)
        record = SessionRecord(
            **{
                **theirs.to_json(),
                **intent,
                "node": self.node,
                "since": now,
                "heartbeat": now,
                "owner": self.records.user,
            }
        )
        try:
            self.known[path] = await self.records.write(record, current, key or signing.load_key())
        except RecordConflict as conflict:  # another server wrote it since it was read
            self.known[path] = conflict.current
            winner = conflict.current.record
            if winner is None:
                why = f"{path!r} cannot be resumed here: {conflict.current.problem}"
            elif winner.state in HELD:
                why = self._held_message(path, winner)
            else:
                why = f"{path!r} changed on another server, {winner.where}, meanwhile; try again"
            raise Conflict(why) from None
        self.published[path] = {**intent, "state": "resuming"}
        self.detached.discard(path)

    async def claim_to_resume(self, path: str) -> list[str]:
        """Take the notebook in the bucket (:meth:`claim`: of two servers that race, one
        wins) and bring its notebook file if this server lacks it; what to tell."""
        await self.claim(path)
        try:
            note = await self.bring_notebook(path)
        except BaseException:
            self.unclaim(path)
            raise
        return [note] if note else []

    def unclaim(self, path: str) -> None:
        """A claimed resume did not start: the record says what the session says again."""
        self.published.pop(path, None)
        self._write_soon(path)

    def _held_message(self, path: str, theirs: SessionRecord) -> str:
        doing = {"resuming": "being resumed", "pausing": "being paused"}.get(
            theirs.state, "running"
        )
        return (
            f"{path!r} is {doing} on another server, {theirs.where}, since "
            f"{_clock_time(theirs.since)}; pause it there first, or wait for it"
        )

    async def _read(self, path: str, key: bytes | None) -> Stored:
        try:
            return await self.records.read(path, key)
        except RemoteStoreError as e:
            raise Unavailable(str(e)) from e

    # ------------------------------------------------------- the notebook file

    def notebook_file(self, path: str) -> dict[str, Any] | None:
        """The notebook file the bucket keeps for ``path``, as its record names it."""
        stored = self.known.get(path)
        record = stored.record if stored else None
        return record.notebook_file if record else None

    async def bring_notebook(self, path: str) -> str | None:
        """Before a resume: the notebook as of its pause, written here if this server
        lacks it; if the file here differs, that version is kept beside it.  Returns what
        the person should be told, or None."""
        entry = self.notebook_file(path)
        if entry is None:
            return None
        try:
            content = await self.records.get_notebook(path, entry)
            paused = nbformat.reads(content.decode(), as_version=4)
        except (RemoteStoreError, ValueError, UnicodeDecodeError) as e:
            return f"The notebook file kept in the bucket could not be read: {e}"
        cm = self.contents_manager
        model = {"type": "notebook", "format": "json", "content": paused}
        if not await ensure_async(cm.file_exists(path)):
            await ensure_async(cm.save(model, path))
            return f"{path} was written from the copy kept at its pause (this server lacked it)."
        here = await ensure_async(cm.get(path, content=True, type="notebook"))
        if _cells(here["content"]) == _cells(paused):
            return None
        beside = _beside(path, entry["xxh3"][:8])
        if not await ensure_async(cm.file_exists(beside)):
            await ensure_async(cm.save(model, beside))
        return (
            f"{path} here differs from the notebook as it was paused; that version is kept "
            f"as {beside}, and {path} is left as it is."
        )

    # ---------------------------------------------------------------------- learn

    async def refresh(self) -> None:
        """List the records and learn what changed since the last look."""
        key = signing.load_key(create=False)
        versions = await self.records.versions()
        for folder, e_tag in versions.items():
            seen = self._seen.get(folder)
            if seen is None or seen[0] != e_tag:
                seen = self._seen[folder] = (e_tag, await self.records.read_folder(folder, key))
            elif not (seen[1].record and seen[1].record.state in HELD):
                continue  # unchanged; a hold unchanged is a hold that may have gone stale
            self._consider(seen[1])

    def _consider(self, stored: Stored) -> None:
        theirs = stored.record or stored.unverified
        if theirs is None:
            self.log.warning("jupyter-pause: a session record in the bucket: %s", stored.problem)
            return
        path = theirs.notebook
        if path in self._writing or theirs.node == self.node:
            return  # this server writes it: what it says is ours
        session = self.store.sessions.get(path)
        if stored.record is None:  # signed with a key this server lacks: say so
            if session is None or (not session.state.has_kernel and not session.busy):
                self._learn(theirs, problem=stored.problem)
            return
        self.known[path] = stored
        if session is not None and (session.busy or session.state in BUSY_STATES):
            return  # an operation here decides
        now = self.clock.time()
        if theirs.resumable(now, self.hold_timeout):
            if session is not None and (session.state.has_kernel or session.since >= theirs.since):
                return  # this server runs it, or knows newer
            self._learn(theirs)
        elif (
            theirs.held_by_other(self.node, now, self.hold_timeout)
            and session is not None
            and session.state in (State.PAUSED, State.FAILED)
            and not session.kernel_id
        ):  # another server resumed what this one still shows paused
            del self.store.sessions[path]
            self.published.pop(path, None)
            self._save()
            self.log.info(
                "jupyter-pause: %s is no longer paused here: %s",
                path,
                self._held_message(path, theirs),
            )

    def _learn(self, theirs: SessionRecord, problem=None) -> None:
        """Make ``theirs`` this server's session of its notebook."""
        now = self.clock.time()
        failed = problem is not None or theirs.state != "paused"
        if problem is not None:
            why = f"paused on another server, {theirs.where}, and {problem.reason}"
        elif theirs.stale(now, self.hold_timeout):
            why = (
                f"its server, {theirs.where}, stopped answering at "
                f"{_clock_time(theirs.heartbeat)}; resume restores its last checkpoint"
            )
        else:
            why = theirs.error
        final = theirs.final_save
        if final is None and theirs.stale(now, self.hold_timeout):  # its server died: say so
            final = final_save(
                "older" if theirs.checkpoint else "none",
                theirs.checkpoint,
                None,
                f"its server, {theirs.where}, stopped answering at {_clock_time(theirs.heartbeat)}",
                theirs.heartbeat,
            )
        op = None
        if theirs.paused:
            op = Operation(
                kind="pause",
                path=theirs.notebook,
                **({"id": str(theirs.paused["id"])} if theirs.paused.get("id") else {}),
                started=float(theirs.paused.get("started") or theirs.since),
                finished=theirs.paused.get("finished"),
                outcome="succeeded",
                options=dict(theirs.paused.get("options") or {}),
                owner=str(theirs.paused.get("node") or theirs.node),
                heartbeat=theirs.since,
            )
        session = Session(
            path=theirs.notebook,
            state=State.FAILED if failed else State.PAUSED,
            since=theirs.since,
            kernel_name=theirs.kernel_name,
            operation=op,
            last_checkpoint=theirs.checkpoint,
            error=why if failed else None,
            workload_class=theirs.workload_class,
            schedule=theirs.schedule if not failed else None,
            state_checkpoint=(theirs.checkpoint or {}).get("id"),
            origin=theirs.where,
            bucket_checkpoint=theirs.checkpoint,
            final_save=final if final and final.get("outcome") != "newest" else None,
        )
        self.store.sessions[session.path] = session
        if theirs.notebook_file:
            self.notebook_files[session.path] = theirs.notebook_file
        self.published[session.path] = self.intent(session) or {}
        self.detached.discard(session.path)
        self._save()
        self.log.info(
            "jupyter-pause: %s is %s, as the bucket says (paused on %s)",
            session.path,
            session.state.value,
            theirs.where,
        )

    def _save(self) -> None:
        try:
            self.store.save()
        except OSError as e:
            self.log.error("jupyter-pause: could not save %s: %s", self.store.path, e)

    # ----------------------------------------------------------------- the loops

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.saved()  # what changed before the loops ran
        self._loops = [
            asyncio.ensure_future(self._every(self.interval, self.refresh, "list")),
            asyncio.ensure_future(self._every(self.hold_timeout / 4, self.renew, "renew")),
        ]

    async def renew(self) -> None:
        """Say again that this server holds the notebooks it holds."""
        for path, said in list(self.published.items()):
            if said.get("state") in HELD and path not in self.detached:
                try:
                    await self._publish(path, renew=True)
                except (RemoteStoreError, CheckpointError) as e:
                    self.log.warning("jupyter-pause: could not renew %s in the bucket: %s", path, e)

    async def _every(self, seconds: float, work, what: str) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await work()
            except RemoteStoreError as e:
                self.log.warning("jupyter-pause: could not %s the bucket's records: %s", what, e)
            except Exception:
                self.log.exception("jupyter-pause: the bucket's records (%s)", what)

    async def close(self) -> None:
        """Stop the loops; wait a little for the records still being written."""
        for task in self._loops:
            task.cancel()
        self._closing = True
        pending = list(self._writing.values())
        if pending:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), CLOSE_WAIT)


def _cells(notebook) -> str:
    """A notebook's cells as one comparable text (their metadata and ids aside)."""
    return json.dumps(
        [
            [c.get("cell_type"), c.get("source"), c.get("outputs", [])]
            for c in notebook.get("cells", [])
        ],
        sort_keys=True,
    )


def _beside(path: str, tag: str) -> str:
    """``work/demo.ipynb`` -> ``work/demo (as paused, 1a2b3c4d).ipynb``."""
    stem, dot, ext = path.rpartition(".")
    return f"{stem} (as paused, {tag}).{ext}" if dot else f"{path} (as paused, {tag})"
