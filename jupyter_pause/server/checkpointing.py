"""Checkpoint a notebook's kernel, as a step of the manager's operations (a pause, a
checkpoint, a stopping server's last save).

The :class:`Checkpointer` stands below the manager, which claims the notebook and
decides what follows: it makes sure no user cell runs (waits for it, or interrupts it),
asks the kernel for its checkpoint (``kernel_ops.checkpoint``) and records what the
kernel answered in the session, the ledger and the operation's messages.  On failure
the kernel keeps running, and :meth:`Checkpointer.checkpoint` returns False.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

from ..clock import SYSTEM, Clock
from ..engine import paths as checkpoint_paths
from ..engine import signing
from ..ledger import EventType
from ..lifecycle import SHUTDOWN_REASON, Operation, Session, SessionStore, State, Step
from ..protocol import CheckpointReply, user_skipped
from .bucket_sessions import BucketSessions
from .catalogue import Catalogue
from .errors import Conflict, PauseError
from .kernels import KernelCallError, KernelDied
from .reconcile import Reconciler, execution_state
from .recorder import Recorder

#: seconds a pause waits for a busy kernel to report idle before refusing: a client
#: that has seen its cell end (IOPub idle on its websocket) can ask before the
#: server's own IOPub listener has updated the kernel's state
BUSY_GRACE = 2.0


@dataclasses.dataclass(kw_only=True, eq=False)
class Checkpointer:
    """``staged``: the checkpoints go to a bucket, and a background save is staged there
    (server/staging.py) rather than uploaded by its kernel."""

    kernel_manager: Any
    call: Any
    store: SessionStore
    recorder: Recorder
    reconciler: Reconciler
    catalogue: Catalogue
    checkpoint_dir: str | checkpoint_paths.Bucket | None
    keep_checkpoints: int
    kernel_call_timeout: float
    idle_wait_timeout: float
    log: Any
    clock: Clock = SYSTEM
    shared: BucketSessions | None = None
    staged: bool = False

    @property
    def kernel_checkpoint_dir(self) -> str | None:
        """The checkpoint root as a kernel call names it (JSON): a bucket by its URL, the
        kernel's cache being in its environment (:meth:`kernel_settings`)."""
        if isinstance(self.checkpoint_dir, checkpoint_paths.Bucket):
            return self.checkpoint_dir.url
        return self.checkpoint_dir

    def kernel_settings(self) -> dict[str, str]:
        """The server's settings a kernel's magics and engine honour, handed to
        every kernel at start (as environment variables the engine reads):
        where checkpoints live, how many are kept, and the key that signs them."""
        return {
            **checkpoint_paths.kernel_env(self.checkpoint_dir),
            checkpoint_paths.ENV_KEEP: str(self.keep_checkpoints),
            checkpoint_paths.ENV_KEY_FILE: str(signing.key_path()),
        }

    # ---------------------------------------------------------- a quiet kernel

    async def quiesce(self, session: Session, op: Operation) -> None:
        """Make sure no user cell runs: wait (after_cell) or interrupt (force)."""
        kernel_id = session.kernel_id
        if op.options.get("after_cell"):
            op.step = "waiting for the running cell to finish"
            await self.wait_idle(kernel_id, self.idle_wait_timeout)
            op.mark(Step.CELL_ENDED, self.clock.time())
        elif execution_state(self.kernel_manager, kernel_id) == "busy" and op.options.get("force"):
            op.step = "interrupting the running cell"
            await self.kernel_manager.interrupt_kernel(kernel_id)
            op.messages.append("The running cell was interrupted so that the notebook could pause.")
            self.recorder.record(EventType.KERNEL_INTERRUPTED, session, op)
            await self.wait_idle(kernel_id, 30)
            op.mark(Step.CELL_ENDED, self.clock.time(), note="interrupted")

    async def idle_or_refuse(self, kernel: dict, refusal: str) -> None:
        """Before an operation that needs an idle kernel (Jupyter's model of it): a busy
        one has :data:`BUSY_GRACE` to report idle, else :class:`Conflict` (``refusal``)."""
        if kernel.get("execution_state") != "busy":
            return
        try:
            await self.wait_idle(kernel["id"], BUSY_GRACE)
        except PauseError:
            raise Conflict(refusal) from None

    async def wait_idle(self, kernel_id: str, timeout: float) -> None:
        """Return once the kernel is not busy; :class:`Conflict` after ``timeout``."""
        deadline = time.monotonic() + timeout
        await asyncio.sleep(0.1)
        while execution_state(self.kernel_manager, kernel_id) == "busy":
            if time.monotonic() > deadline:
                raise Conflict(f"the kernel stayed busy for {timeout:.0f} s")
            await asyncio.sleep(0.1)

    # -------------------------------------------------------------- checkpoint

    async def checkpoint(
        self,
        session: Session,
        op: Operation,
        *,
        pause: bool,
        report: bool = True,
        upload: bool = True,
    ) -> bool:
        """Checkpoint the session's kernel; on failure the kernel keeps running.

        ``report`` False leaves failing the operation to the caller.  ``upload`` False,
        with a bucket: the kernel commits the checkpoint in the local cache only, and the
        stager puts it in the bucket (a background save, a stopping server's last).
        """
        autosave = _autosave(op)
        self.recorder.move(session, State.CHECKPOINTING, op, "checkpointing the kernel's state")
        self.recorder.record(EventType.CHECKPOINT_STARTED, session, op, **autosave)
        nonce = uuid.uuid4().hex if pause else None
        try:
            km = self.kernel_manager.get_kernel(session.kernel_id)
            reply = await self.call(
                km,
                "checkpoint",
                timeout=self.kernel_call_timeout,
                on_progress=op.show,
                on_answering=lambda: op.mark(Step.KERNEL_ANSWERING, self.clock.time()),
                notebook=session.path,
                dir=self.kernel_checkpoint_dir,
                nonce=nonce,
                keep=self.keep_checkpoints,
                operation=op.id,
                lost_from=session.lost.checkpoint if session.lost else None,
                **autosave,
                **({} if upload else {"upload": False}),
            )
            result = CheckpointReply.from_json(reply)
            op.mark_kernel(result.steps, result.took, self.clock.time())
            op.mark(Step.CHECKPOINT_RETURNED, self.clock.time())
        except KernelDied as e:
            await self.reconciler.kernel_died(session, op, str(e), report=report)
            return False
        except (KernelCallError, KeyError) as e:
            await self._failed(session, op, e, pause=pause, report=report)
            return False
        finally:
            op.progress = None
        await self._succeeded(session, op, result, nonce=nonce, upload=upload)
        return True

    async def _failed(
        self, session: Session, op: Operation, e: Exception, *, pause: bool, report: bool
    ) -> None:
        """The kernel's checkpoint failed: it keeps running; the cause first (a notice
        has room for a line), then what it means."""
        autosave = _autosave(op)
        if autosave:
            then = "Autosave failed; the kernel keeps running and its last saved state is intact."
        elif op.options.get("reason") == SHUTDOWN_REASON:
            then = (
                "The checkpoint failed, so the notebook was not saved; its kernel is being "
                "stopped with the server: what it did since its last checkpoint is lost."
            )
        elif pause:
            then = (
                "The checkpoint failed, so the notebook was not paused; its kernel keeps running."
            )
        else:
            then = "The checkpoint failed; the kernel keeps running."
        error = f"{e}\n{then}"
        await self._written_here(session, op)
        self.recorder.record(EventType.CHECKPOINT_FAILED, session, op, error=str(e), **autosave)
        self.recorder.move(session, State.RUNNING, op, error=error)
        if report:
            self.recorder.fail(session, op, error)

    async def _succeeded(
        self,
        session: Session,
        op: Operation,
        result: CheckpointReply,
        *,
        nonce: str | None,
        upload: bool,
    ) -> None:
        """What the kernel's checkpoint answered, kept in the session and the ledger."""
        autosave = _autosave(op)
        session.last_checkpoint = {
            "id": result.id,
            "time": self.clock.time(),
            "bytes": result.bytes,
            **autosave,
        }
        if self.staged and upload:  # the kernel's call returned once it was there
            session.bucket_checkpoint = dict(session.last_checkpoint)
        session.final_save = None  # a new state: what a stop left is no longer news
        session.gpus = result.gpus
        session.state_checkpoint = result.id
        if self.shared is not None:  # the notebook file travels with the state
            await self.shared.keep_notebook(session, op)
        self.reconciler.watch_for_death(session.kernel_id)
        if nonce:
            session.pause_nonce = nonce
        refused = checkpoint_paths.user_folder(self.checkpoint_dir).refused
        if refused:  # another user's folder in a shared root: not used, and the user told
            self.log.warning("jupyter-pause: %s", refused)
            op.messages.append(f"Not in the shared checkpoint folder: {refused}")
        self.recorder.note_lost(session, op, result.lost, f"checkpoint {result.id}")
        skipped = user_skipped(result.skipped)
        if skipped:
            names = ", ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
            op.messages.append(f"Not saved: {names}")
        self.recorder.record(
            EventType.CHECKPOINT_FINISHED,
            session,
            op,
            checkpoint_id=result.id,
            bytes=result.bytes,
            bytes_written=result.bytes_written,
            seconds=result.seconds,
            skipped=sorted(skipped),
            gpus=result.gpus,
            **autosave,
        )

    async def _written_here(self, session: Session, op: Operation) -> None:
        """A checkpoint that failed after it was committed here (its upload to the bucket
        did not finish) is what a resume would restore: the session names it."""
        newest = await self.catalogue.newest_here(session.path)
        last = session.last_checkpoint or {}
        if newest is None or newest["id"] == last.get("id"):
            return
        if last.get("id") and checkpoint_paths.id_sort_key(newest["id"]) <= (
            checkpoint_paths.id_sort_key(last["id"])
        ):
            return
        session.last_checkpoint = {**newest, "time": self.clock.time()}
        op.messages.append(
            f"Checkpoint {newest['id']} was written on this machine but is not in the "
            "bucket; a resume here restores it, and the next pause uploads it."
        )

    async def others(self, session: Session, op: Operation) -> list[Session] | None:
        """Checkpoint every other live notebook (server-scope backends).

        If one fails, nothing is released: the pod stays, every kernel keeps
        running, and the error names the notebook.
        """
        others = [
            s
            for s in self.store.sessions.values()
            if s is not session and s.kernel_id and s.state in (State.RUNNING, State.READY)
        ]
        for other in others:
            if not await self.checkpoint(other, op, pause=True, report=False):
                error = (
                    f"the workspace was not paused: checkpoint of {other.path} failed "
                    f"({other.error}); every kernel keeps running"
                )
                for done in [session, *others]:
                    if done.state == State.CHECKPOINTING:
                        self.recorder.move(done, State.RUNNING, op)
                self.recorder.move(session, State.RUNNING, op, error=error)
                self.recorder.fail(session, op, error)
                return None
        return others


def _autosave(op: Operation) -> dict[str, bool]:
    """What marks a background save's checkpoint and events as such (none for others)."""
    return {"autosave": True} if op.options.get("autosave") else {}
