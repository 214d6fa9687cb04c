"""Restore a checkpoint into a resume's kernel, as a step of the manager's resume.

The :class:`Restorer` stands below the manager, which claims the notebook, waits for
capacity and a kernel, and decides what follows: it asks the kernel to restore
(``kernel_ops.restore``) and records what the kernel answered in the session, the
ledger and the operation's messages (a rollback, or a loss, is never silent).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..clock import SYSTEM, Clock
from ..engine import paths as checkpoint_paths
from ..engine import store as checkpoint_store
from ..ledger import EventType
from ..lifecycle import LiveState, Operation, Session, State, Step
from ..protocol import RestoreReply
from .catalogue import Catalogue
from .classify import WorkloadClassifier
from .prewarm import Prewarmer
from .reconcile import Reconciler
from .recorder import Recorder
from .staging import lost_at_stop


@dataclasses.dataclass(kw_only=True, eq=False)
class Restorer:
    kernel_manager: Any
    call: Any
    recorder: Recorder
    reconciler: Reconciler
    catalogue: Catalogue
    prewarmer: Prewarmer
    #: the checkpoint root as a kernel call names it
    kernel_checkpoint_dir: str | None
    kernel_call_timeout: float
    classifier: WorkloadClassifier
    log: Any
    clock: Clock = SYSTEM

    async def kernel(self, session: Session, op: Operation) -> tuple[str, bool]:
        """The kernel the resume restores into, and whether it started it
        (:meth:`.Reconciler.kernel_for_resume`); one started is classified and recorded."""
        kernel_id, started_here = await self.reconciler.kernel_for_resume(session, op)
        if started_here:
            await self.classifier.classify(session)
            self.recorder.record(EventType.KERNEL_STARTED, session, op)
        return kernel_id, started_here

    async def restore(
        self, session: Session, op: Operation, kernel_id: str, chosen, fill, checkpoint_id
    ) -> None:
        """Restore ``chosen`` (the prewarmer's choice; None: ``checkpoint_id`` as named)
        into the kernel, with the read-ahead's ``fill``; the kernel's error is raised."""
        path = session.path
        self.recorder.move(session, State.RESTORING, op, "restoring the checkpoint")
        self.recorder.record(EventType.RESTORE_STARTED, session, op)
        km = self.kernel_manager.get_kernel(kernel_id)
        try:
            reply = await self.call(
                km,
                "restore",
                timeout=self.kernel_call_timeout,
                on_progress=op.show,
                on_answering=lambda: op.mark(Step.KERNEL_ANSWERING, self.clock.time()),
                notebook=path,
                dir=self.kernel_checkpoint_dir,
                checkpoint_id=chosen.id if chosen else checkpoint_id,
                or_older=chosen is not None and checkpoint_id is None,
                handoff=fill.token() if fill else None,
                operation=op.id,
                synced=True,
            )
        finally:
            op.progress = None
            self.prewarmer.handed_over(fill)  # the kernel has taken what it takes
        result = RestoreReply.from_json(reply)
        op.mark_kernel(result.steps, result.took, self.clock.time())
        nonce = result.nonce
        session.live_state = (
            LiveState.RESTORED if nonce and nonce == session.pause_nonce else LiveState.FRESH
        )
        session.restored_from = "checkpoint"
        session.state_checkpoint = result.id
        # the server or the kernel passed over newer checkpoints that did not verify
        op.messages.extend(chosen.notes(result.id) if chosen else [])
        op.messages.extend(result.notes)
        op.messages.extend(older_than_named(session, chosen, checkpoint_id, result.id))
        told = lost_at_stop(session.final_save, result.id)
        if told:  # its node stopped before the bucket had its last state: never silence
            op.messages.append(told)
        session.final_save = None
        lost = checkpoint_store.lost_of(result.metadata)
        self.recorder.note_lost(
            session,
            op,
            lost,
            f"the restored checkpoint {result.id}",
            why="the kernel that wrote it had lost them",
        )
        self.reconciler.watch_for_death(kernel_id)
        self.reconciler.restore_finished(
            session,
            op,
            ahead=op.options.get("scheduled"),
            restored_from="checkpoint",
            checkpoint_id=result.id,
            bytes=result.bytes,
            seconds=result.seconds,
            gpus=result.gpus,
        )

    async def failed(
        self, session: Session, op: Operation, error: Exception, checkpoint_id, fill, started
    ) -> str:
        """The restore failed: recorded, the read-ahead's ``fill`` dropped and the kernel
        it ``started`` (if any) stopped; what to tell, with the checkpoints the notebook
        can resume from instead."""
        self.prewarmer.handed_over(fill, failed=True)
        told = str(error)
        others = await self.catalogue.alternatives(session.path, checkpoint_id)
        if others:
            told += f". Checkpoints you can resume from instead: {', '.join(others)}"
        self.recorder.record(EventType.RESTORE_FAILED, session, op, error=str(error))
        if started is not None:
            try:
                await self.reconciler.shutdown_kernel(started)
            except Exception:
                self.log.warning("jupyter-pause: could not stop kernel %s", started)
            session.kernel_id = None
        return told


def older_than_named(session, chosen, checkpoint_id, restored: str) -> list[str]:
    """A resume that restored an older checkpoint than the one the notebook's session
    (or its record in the bucket) names, which is gone: a rollback is never silent."""
    named = (session.last_checkpoint or {}).get("id")
    if checkpoint_id is not None or not named or named == restored:
        return []
    if chosen is not None and named in chosen.passed_over:
        return []  # said already, with why
    if checkpoint_paths.id_sort_key(restored) >= checkpoint_paths.id_sort_key(named):
        return []
    return [
        f"The notebook's newest checkpoint, {named}, is gone (deleted, or never fully "
        f"stored); restored the older {restored}: what was done between them is not back."
    ]
