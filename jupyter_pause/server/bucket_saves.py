"""A notebook's saves in the bucket, as its session tells them (server/staging.py moves
the bytes): a background save staged there, retried while it fails; a stopping server's
last save, and what the bucket holds of it then (``session.final_save``).  It stands
below the manager, which calls it at those two points of its operations."""

from __future__ import annotations

import asyncio

from ..clock import Clock
from ..engine import paths as checkpoint_paths
from ..engine.errors import CheckpointError
from ..lifecycle import Operation, Session, SessionStore
from .recorder import Recorder
from .staging import Stager, describe_final_save, final_save

#: seconds before a failed background staging is tried again, and the most between tries
STAGE_RETRY, STAGE_RETRY_MAX = 10.0, 300.0


class BucketSaves:
    def __init__(
        self, *, stager: Stager, store: SessionStore, recorder: Recorder, clock: Clock, log
    ):
        self.stager = stager
        self.store = store
        self.recorder = recorder
        self.clock = clock
        self.log = log

    async def final_save(self, session: Session, op: Operation) -> None:
        """A stopping server's last save of a notebook, with a bucket: its checkpoint,
        just committed here, goes to the bucket if it can before ``upload_by``
        (server/staging.py); ``session.final_save`` says what the bucket holds then (the
        newest state, an older staged one, or none), and so do the log, the ledger's
        ``paused`` row and the bucket's record."""
        left = op.options["upload_by"] - self.clock.time()
        op.step = "uploading its last changes"
        flushed = await self.stager.flush(session.path, self.clock.monotonic() + left)
        newest = session.last_checkpoint or {}
        if flushed.committed:
            self.holds(session, flushed.delta.checkpoint)
        held = session.bucket_checkpoint or {}
        if flushed.committed or held.get("id") == newest.get("id"):
            outcome, why = "newest", None
        else:
            outcome, why = ("older" if held.get("id") else "none"), flushed.why
        session.final_save = final_save(
            outcome,
            held,
            newest.get("id"),
            why,
            self.clock.time(),
            flushed.delta.bytes if flushed.delta else None,
        )
        said = describe_final_save(session.final_save)
        if outcome == "newest":
            self.log.info("jupyter-pause: %s: %s", session.path, said)
        else:
            self.log.warning("jupyter-pause: %s: %s", session.path, said)
            op.messages.append(said)

    async def stage(self, session: Session) -> None:
        """A background save committed here goes to the bucket (server/staging.py); the
        session then names it as the bucket's newest, and its record follows.  One that
        fails is tried again, twice as late each time (at most :data:`STAGE_RETRY_MAX`),
        while the notebook keeps its kernel: an idle kernel's bucket must not stay behind."""
        kernel_id, wait = session.kernel_id, STAGE_RETRY
        while True:
            try:
                staged = await self.stager.stage(session.path)
                break
            except (CheckpointError, OSError) as e:
                self.log.warning(
                    "jupyter-pause: could not stage %s in the bucket (trying again in %.0f s): %s",
                    session.path,
                    wait,
                    e,
                )
            await asyncio.sleep(wait)
            if self.store.sessions.get(session.path) is not session or (
                session.kernel_id != kernel_id
            ):
                return
            wait = min(2 * wait, STAGE_RETRY_MAX)
        if staged is None or self.store.sessions.get(session.path) is not session:
            return
        self.holds(session, staged.checkpoint)

    def holds(self, session: Session, checkpoint_id: str) -> None:
        """The bucket holds ``checkpoint_id`` of the session's notebook now: the session,
        and so the bucket's record of it, name it (unless it names a newer one)."""
        held = session.bucket_checkpoint or {}
        if held.get("id") and checkpoint_paths.id_sort_key(held["id"]) >= (
            checkpoint_paths.id_sort_key(checkpoint_id)
        ):
            return
        last = session.last_checkpoint or {}
        session.bucket_checkpoint = (
            dict(last)
            if last.get("id") == checkpoint_id
            else {"id": checkpoint_id, "time": checkpoint_paths.id_time(checkpoint_id)}
        )
        self.recorder.save()
