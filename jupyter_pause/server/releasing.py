"""Release the accelerator of a pause whose checkpoints are durable: the platform's
step of the manager's pause (the backend's ``release``).

The :class:`Releaser` stands below the manager, which claims the notebook, checkpoints
it (and, on a server-scope platform, every other live notebook) and finishes the
operation: it tells other servers (a bucket's shared sessions), asks the backend to
release, and records what the platform did for each notebook of the group.  A release
that fails leaves the kernels running, and says why.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..clock import SYSTEM, Clock
from ..ledger import EventType
from ..lifecycle import Operation, Session, State, Step
from .bucket_sessions import BucketSessions
from .reconcile import Reconciler, execution_state
from .recorder import Recorder
from .recovery import Recovery

#: a pause's step once its state is saved: only the platform's release is left
RELEASING = "releasing the accelerator"


@dataclasses.dataclass(kw_only=True, eq=False)
class Releaser:
    backend: Any
    kernel_manager: Any
    recorder: Recorder
    reconciler: Reconciler
    recovery: Recovery
    clock: Clock = SYSTEM
    shared: BucketSessions | None = None

    async def release(
        self,
        session: Session,
        group: list[Session],
        op: Operation,
        *,
        at_shutdown: bool,
        final: bool,
    ) -> bool:
        """Release the accelerator of ``group`` (``session``, whose pause ``op`` is, and
        the others it takes along), each checkpointed; False once ``op`` failed. ``final``:
        a stopping server's last save, whose upload the session tells.

        The server stops (``at_shutdown``): each notebook is paused on its own, and only
        its kernel is stopped (never the backend's release, which would stop the server
        or take the pod away a second time)."""
        release = self.backend.release_at_shutdown if at_shutdown else self.backend.release
        op.mark(Step.RELEASING, self.clock.time())
        for member in group:
            self.recorder.move(member, State.PAUSING, op, RELEASING)
            if self.shared is not None:  # other servers learn of it before it goes
                await self.shared.before_release(member, op)
        kernel_ids = {m.path: m.kernel_id for m in group}
        try:
            facts = await release(group, self.reconciler.shutdown_kernel)
        except Exception as e:
            error = f"could not release the accelerator: {e}; the kernel keeps running"
            for member in group:
                alive = (
                    member.kernel_id
                    and execution_state(self.kernel_manager, member.kernel_id) is not None
                )
                self.recorder.move(
                    member, State.RUNNING if alive else State.FAILED, op, error=error
                )
            self.recorder.fail(session, op, error)
            return False
        released_at = facts.released_at or self.clock.time()
        op.mark(Step.RELEASED, released_at)
        op.mark(Step.PAUSED, self.clock.time())
        for member in group:
            self.recorder.record(
                EventType.ACCELERATOR_RELEASED,
                member,
                op,
                time_=released_at,
                kernel_id=kernel_ids[member.path],
                gpus=member.gpus,
                **facts.details,
            )
            if facts.restored_from != "snapshot":
                kernel_id = kernel_ids[member.path]
                if kernel_id and self.backend.scope == "server" and not at_shutdown:
                    self.reconciler.released_kernels.add(kernel_id)
                member.kernel_id = None
            self.recorder.move(member, State.PAUSED, op)
            told = {"final_save": member.final_save} if final else {}
            self.recorder.record(EventType.PAUSED, member, op, timeline=list(op.timeline), **told)
        if facts.restored_from == "snapshot":
            # This very process was snapshotted and has just been restored.
            for member in group:
                await self.recovery.came_back_live(member, op)
        return True
