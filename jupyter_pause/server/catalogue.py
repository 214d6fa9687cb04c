"""The checkpoint catalogue: what the server reads and changes in the checkpoint store
(list, sizes, verify, rename, delete, the clean-up of dead writers), always off the
event loop.

Store work may wait on a notebook's file lock (a kernel's own ``%checkpoint``) or read
gigabytes (a verify hashes every byte), so it runs in a thread: the event loop keeps
answering.  A checkpoint folder that leads out of the checkpoint root (a symlink) is
refused, never followed; a bucket that cannot be reached answers ``503``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime
from typing import Any

from ..clock import SYSTEM, Clock
from ..engine import checks, mirror
from ..engine import paths as checkpoint_paths
from ..engine import store as checkpoint_store
from ..engine.errors import CheckpointError, RemoteStoreError
from ..engine.paths import id_time
from ..ledger import EventType
from ..lifecycle import OperationInProgress, Session, SessionStore
from .errors import Conflict, NotFound, PauseError, Unavailable
from .recorder import Recorder

#: seconds a request waits for a notebook's checkpoint lock held by another
#: process (a kernel's own %checkpoint) before answering 409
STORE_LOCK_WAIT = 2.0


def _problem(checkpoint_dir, path: str, checkpoint_id: str) -> str | None:
    try:
        checkpoint_store.verify_checkpoint(checkpoint_dir, path, checkpoint_id)
    except CheckpointError as e:
        return str(e)
    return None


class Catalogue:
    def __init__(
        self,
        *,
        checkpoint_dir: str | checkpoint_paths.Bucket | None,
        store: SessionStore,
        recorder: Recorder,
        log,
        clock: Clock = SYSTEM,
    ):
        self.checkpoint_dir = checkpoint_dir
        self.clock = clock
        self.store = store
        self.recorder = recorder
        self.log = log

    async def in_thread(self, function, *args, **kwargs):
        """Run checkpoint-store work in a thread: it reads gigabytes or waits on
        a notebook's file lock, and the event loop must keep answering.

        A checkpoint folder that leads out of the checkpoint root (a symlink)
        is refused, never followed.
        """
        try:
            return await asyncio.to_thread(function, *args, **kwargs)
        except ValueError as e:
            raise Conflict(f"refusing to use the checkpoint folder: {e}") from e
        except RemoteStoreError as e:  # the bucket behind the folder: say so, not 500
            raise Unavailable(str(e)) from e

    async def store_problem(self) -> str | None:
        """Why the checkpoint store cannot be used now (a missing bucket, refused
        credentials, a store that does not answer), or None."""
        try:
            await asyncio.to_thread(mirror.check_store, self.checkpoint_dir)
        except RemoteStoreError as e:
            return str(e)
        return None

    async def present(self, paths: list[str]) -> dict[str, list[str] | None]:
        """The checkpoint ids each notebook's folder holds now, None where that cannot
        be told (no folder here yet: a bucket's cache on a new node); only the folder is
        read, never the bucket."""
        return await asyncio.to_thread(lambda: {path: self._present(path) for path in paths})

    def _present(self, path: str) -> list[str] | None:
        try:
            folder = self.check_folder(path)
            return checks.checkpoint_ids(folder) if folder.is_dir() else None
        except (ValueError, OSError):
            return None

    async def list_checkpoints(self, path: str) -> list[dict[str, Any]]:
        """A notebook's checkpoints, newest first, without their private metadata."""
        return await self.in_thread(self.listing, path)

    async def refuse_resume(
        self, path: str, checkpoint_id: str | None, *, notebook_exists: bool
    ) -> None:
        """Refuse a resume of ``path`` that cannot start: its notebook deleted (its
        checkpoints are kept, and ``%restore`` brings one elsewhere), no checkpoint, or
        none named ``checkpoint_id``."""
        available = [c["id"] for c in await self.list_checkpoints(path)]
        if not notebook_exists:
            kept = f"Its checkpoints are kept ({', '.join(available)}): " if available else ""
            raise NotFound(
                f"the notebook {path!r} was deleted, so it cannot be resumed. {kept}"
                f"to restore one into another notebook, run `%restore --notebook {path} "
                "[checkpoint id]` there.",
            )
        if not available:
            raise Conflict(f"{path!r} has no checkpoint to resume from")
        if checkpoint_id is not None and checkpoint_id not in available:
            raise NotFound(
                f"{path!r} has no checkpoint {checkpoint_id!r}; it has {', '.join(available)}",
            )

    def listing(
        self, path: str, *, private: bool = False, here_only: bool = False
    ) -> list[dict[str, Any]]:
        """``here_only``: what this machine has, without asking the bucket (which may be
        the thing that failed)."""
        self.check_folder(path)
        infos = checkpoint_store.list_checkpoints(
            dir=self.checkpoint_dir, notebook=path, here_only=here_only
        )
        hidden = () if private else ("metadata", "path")
        listing = [
            {k: v for k, v in dataclasses.asdict(info).items() if k not in hidden} for info in infos
        ]
        return sorted(listing, key=lambda c: c["id"], reverse=True)

    def check_folder(self, path: str):
        """The notebook's checkpoint folder; ValueError if it resolves outside
        the checkpoint root, as a symlink planted there would."""
        return checkpoint_paths.notebook_dir(self.checkpoint_dir, path)

    async def storage_by_notebook(self) -> dict[str, int]:
        """Bytes each known notebook's checkpoints occupy on disk now (for reports)."""
        return await self.in_thread(self.measure_storage, list(self.store.sessions))

    def measure_storage(self, paths: list[str]) -> dict[str, int]:
        """Bytes the checkpoints of the notebooks ``paths`` occupy on disk now.

        Measured on disk: incremental checkpoints share files, so adding up
        their sizes would count shared tensors twice.
        """
        usage = {}
        for path in paths:
            try:
                folder = self.check_folder(path)
            except ValueError:
                continue  # never measure (or follow) a folder outside the root
            files = folder.rglob("*") if folder.is_dir() else ()
            usage[path] = sum(f.stat().st_size for f in files if f.is_file())
        return usage

    async def record_kernel_checkpoint(self, path: str, checkpoint_id: str) -> dict[str, Any]:
        """A checkpoint the kernel took by itself (``%checkpoint`` in a cell): the
        server's own checkpoints are in the ledger, and these must count in the
        report too.  Only a checkpoint that exists in the notebook's folder is
        recorded, once; its size is read from the folder, not from the request."""
        if not checkpoint_paths.is_checkpoint_id(checkpoint_id):
            raise PauseError(f"{checkpoint_id!r} is not a checkpoint id (like 2026-11-30T18-02-11)")
        listed = {c["id"]: c for c in await self.list_checkpoints(path)}
        if checkpoint_id not in listed:
            raise NotFound(f"{path!r} has no checkpoint {checkpoint_id!r}")
        checkpoint = listed[checkpoint_id]
        session = self.store.get(path)
        if (session.last_checkpoint or {}).get("id") != checkpoint_id:
            session.state_checkpoint = checkpoint_id
            session.last_checkpoint = {
                "id": checkpoint_id,
                "time": self.clock.time(),
                "bytes": checkpoint["bytes"],
            }
            self.recorder.save()
            self.recorder.record(
                EventType.CHECKPOINT_FINISHED,
                session,
                None,
                checkpoint_id=checkpoint_id,
                bytes=checkpoint["bytes"],
                by="kernel",
            )
        return session.last_checkpoint

    async def delete_checkpoint(self, path: str, checkpoint_id: str) -> None:
        if not checkpoint_paths.is_checkpoint_id(checkpoint_id):
            raise PauseError(f"{checkpoint_id!r} is not a checkpoint id (like 2026-11-30T18-02-11)")
        session = self.store.sessions.get(path)
        if session is not None and session.busy and session.operation.kind != "resume":
            # its checkpoint holds the notebook's lock; do not queue behind it
            raise OperationInProgress(path, session.operation)
        listed = {c["id"]: c for c in await self.list_checkpoints(path)}
        if checkpoint_id not in listed:
            raise NotFound(f"{path!r} has no checkpoint {checkpoint_id!r}")
        await self.in_thread(
            checkpoint_store.delete_checkpoint,
            dir=self.checkpoint_dir,
            notebook=path,
            checkpoint_id=checkpoint_id,
            # a %checkpoint in the kernel may hold the lock for minutes: say so, don't queue
            lock_timeout=STORE_LOCK_WAIT,
        )
        self.recorder.record(
            EventType.CHECKPOINT_DELETED,
            self.store.sessions.get(path) or Session(path=path),
            None,
            checkpoint_id=checkpoint_id,
            bytes=listed.get(checkpoint_id, {}).get("bytes", 0),
        )
        if session is not None and (session.last_checkpoint or {}).get("id") == checkpoint_id:
            # the status shows the latest saved state from the session: keep it true
            newest = next((c for c in listed.values() if c["id"] != checkpoint_id), None)
            if newest is None:
                session.last_checkpoint = None
            else:
                session.last_checkpoint = {
                    "id": newest["id"],
                    "time": datetime.fromisoformat(newest["time"]).timestamp(),
                    "bytes": newest["bytes"],
                }
            self.recorder.save()

    def move_checkpoints(self, old: str, new: str) -> None:
        """Move and re-sign: the signature binds a checkpoint to its notebook."""
        checkpoint_store.rebind(self.checkpoint_dir, old, new)

    def clean_dead_writers(self) -> None:
        """Remove temp folders of dead checkpoint writers in every notebook folder of
        this user (a shared root holds others' too: never ours to touch), skipping
        folders whose lock a live writer holds (never wait for it)."""
        root = checkpoint_paths.user_root(self.checkpoint_dir)
        if not root.is_dir():
            return
        for folder in root.iterdir():
            if folder.is_symlink() or not folder.is_dir():
                continue
            try:
                with checks.locked(folder, timeout=0):
                    checks.gc(folder, locked_already=True)
            except (CheckpointError, OSError) as e:
                self.log.info("jupyter-pause: %s not cleaned now: %s", folder, e)

    async def newest_here(self, path: str) -> dict[str, Any] | None:
        """The newest checkpoint of ``path`` on this machine that a resume would take
        (signed with this user's key), as ``last_checkpoint`` names one; None if none.
        A checkpoint whose upload failed is one of them: the resume restores it."""
        try:
            listing = await self.in_thread(self.listing, path, here_only=True)
        except PauseError:
            return None
        newest = next((c for c in listing if c["status"] == "ok"), None)
        if newest is None:
            return None
        return {"id": newest["id"], "time": id_time(newest["id"]), "bytes": newest["bytes"]}

    async def alternatives(self, path: str, failed_id: str | None) -> list[str]:
        """Checkpoints to offer after a failed resume, newest first: never the one that just
        failed (the newest sound one, when none was named), never a damaged or untrusted one."""
        try:
            listing = await self.list_checkpoints(path)
        except (PauseError, ValueError):
            return []
        sound = [c["id"] for c in listing if c["status"] == "ok"]
        failed_id = failed_id or (sound[0] if sound else None)
        return [c for c in sound if c != failed_id]

    async def verify(self, path: str, listing: list[dict]) -> list[dict]:
        """Add ``problem`` to each checkpoint: None when its signature and every
        hash verify, else why it cannot be resumed from.  Hashing reads every
        byte, so it runs in a thread, never on the event loop."""
        for checkpoint in listing:
            checkpoint["problem"] = await asyncio.to_thread(
                _problem, self.checkpoint_dir, path, checkpoint["id"]
            )
        return listing
