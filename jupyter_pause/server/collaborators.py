"""The manager's collaborators, built in one place: :func:`build_collaborators`.

``PauseApp.initialize_settings`` (and, over fakes, the tests' ``make_manager``) call it
once; the manager, the handlers and the background watchers are then handed what they
use, and none of them builds or reaches through another for it.  Each collaborator
stands below whoever orchestrates it, and never calls back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..clock import SYSTEM, Clock
from ..engine import paths as checkpoint_paths
from ..ledger import Ledger
from ..lifecycle import Session, SessionStore
from .activity import ActivityMonitor
from .bucket_saves import BucketSaves
from .bucket_sessions import BucketSessions
from .catalogue import Catalogue
from .checkpointing import Checkpointer
from .classify import WorkloadClassifier
from .hibernate import Hibernator
from .kernels import call_in_kernel
from .ports import Policies
from .prewarm import Prewarmer
from .reconcile import Reconciler
from .recorder import Recorder
from .recovery import Recovery
from .releasing import Releaser
from .restoring import Restorer
from .schedules import Schedules
from .staging import Stager
from .status_index import StatusIndex
from .tasks import Tasks


@dataclass
class Collaborators:
    """Jupyter's managers, the platform's backend, and what the server builds over them."""

    kernel_manager: Any
    session_manager: Any
    contents_manager: Any
    store: SessionStore
    ledger: Ledger
    clock: Clock
    #: how to run a kernel_ops function in a kernel (a fake in unit tests)
    call: Any
    #: the platform's backend (backends/base.py): releases and acquires the accelerator
    backend: Any
    classifier: WorkloadClassifier
    recorder: Recorder
    schedules: Schedules
    catalogue: Catalogue
    activity: ActivityMonitor
    prewarmer: Prewarmer
    reconciler: Reconciler
    tasks: Tasks
    recovery: Recovery
    status_index: StatusIndex
    #: hibernates kernels in place (server/hibernate.py); one that cannot says why
    hibernator: Hibernator
    #: the steps of the manager's operations, over the collaborators above
    #: (:func:`_add_steps`): checkpoint a kernel (server/checkpointing.py), restore into
    #: one (server/restoring.py), release the accelerator (server/releasing.py)
    checkpointer: Checkpointer = field(init=False)
    restorer: Restorer = field(init=False)
    releaser: Releaser = field(init=False)
    #: puts background saves in the bucket, and a stopping server's last ones
    #: (server/staging.py; None: not a bucket)
    stager: Stager | None = None
    #: the sessions as a bucket shares them with other servers (None: not a bucket)
    shared: BucketSessions | None = None
    #: a notebook's saves in the bucket, as its session tells them (None: not a bucket)
    bucket_saves: BucketSaves | None = None

    def staging_lag(self, session: Session) -> dict[str, Any]:
        """What the bucket lacks of the notebook's state now (:meth:`.Stager.lag`)."""
        activity = self.activity.for_path(session.path) if session.kernel_id else None
        return self.stager.lag(session, activity, self.clock.time())


def build_collaborators(
    *,
    kernel_manager,
    session_manager,
    contents_manager,
    backend,
    store: SessionStore,
    ledger: Ledger,
    checkpoint_dir: str | checkpoint_paths.Bucket | None,
    keep_checkpoints: int,
    kernel_call_timeout: float,
    idle_wait_timeout: float,
    classifier: WorkloadClassifier,
    policies: Policies,
    log,
    clock: Clock = SYSTEM,
    call=call_in_kernel,
    activity: ActivityMonitor | None = None,
    hibernator: Hibernator | None = None,
    stager: Stager | None = None,
    shared: BucketSessions | None = None,
    kernel_gpus: int = 1,
) -> Collaborators:
    """Every collaborator of the manager, each wired to those below it."""
    recorder = Recorder(store=store, ledger=ledger, log=log, kernel_gpus=kernel_gpus, clock=clock)
    schedules = Schedules(store=store, recorder=recorder, clock=clock)
    catalogue = Catalogue(
        checkpoint_dir=checkpoint_dir, store=store, recorder=recorder, log=log, clock=clock
    )
    activity = activity if activity is not None else ActivityMonitor(kernel_manager, clock=clock)
    prewarmer = Prewarmer(kernel_manager, checkpoint_dir=checkpoint_dir, log=log)
    reconciler = Reconciler(
        kernel_manager=kernel_manager,
        session_manager=session_manager,
        store=store,
        recorder=recorder,
        schedules=schedules,
        catalogue=catalogue,
        activity=activity,
        prewarmer=prewarmer,
        classifier=classifier,
        log=log,
        clock=clock,
    )
    tasks = Tasks()
    recovery = Recovery(
        tasks=tasks,
        call=call,
        kernel_manager=kernel_manager,
        store=store,
        recorder=recorder,
        catalogue=catalogue,
        activity=activity,
        schedules=schedules,
        reconciler=reconciler,
        clock=clock,
        log=log,
    )
    parts = Collaborators(
        kernel_manager=kernel_manager,
        session_manager=session_manager,
        contents_manager=contents_manager,
        store=store,
        ledger=ledger,
        clock=clock,
        call=call,
        backend=backend,
        classifier=classifier,
        recorder=recorder,
        schedules=schedules,
        catalogue=catalogue,
        activity=activity,
        prewarmer=prewarmer,
        reconciler=reconciler,
        tasks=tasks,
        recovery=recovery,
        status_index=StatusIndex(store, policies),
        hibernator=hibernator or Hibernator(None, unavailable="not configured", log=log),
        stager=stager,
        shared=shared,
        bucket_saves=(
            BucketSaves(stager=stager, store=store, recorder=recorder, clock=clock, log=log)
            if stager is not None
            else None
        ),
    )
    if stager is not None:  # the rows of GET status show what the bucket lacks
        parts.status_index.staging = parts.staging_lag
    _add_steps(
        parts,
        checkpoint_dir=checkpoint_dir,
        keep_checkpoints=keep_checkpoints,
        kernel_call_timeout=kernel_call_timeout,
        idle_wait_timeout=idle_wait_timeout,
        log=log,
    )
    return parts


def _add_steps(
    parts: Collaborators,
    *,
    checkpoint_dir: str | checkpoint_paths.Bucket | None,
    keep_checkpoints: int,
    kernel_call_timeout: float,
    idle_wait_timeout: float,
    log,
) -> None:
    """The steps of the manager's operations, each wired to the collaborators below it."""
    parts.checkpointer = Checkpointer(
        kernel_manager=parts.kernel_manager,
        call=parts.call,
        store=parts.store,
        recorder=parts.recorder,
        reconciler=parts.reconciler,
        catalogue=parts.catalogue,
        checkpoint_dir=checkpoint_dir,
        keep_checkpoints=keep_checkpoints,
        kernel_call_timeout=kernel_call_timeout,
        idle_wait_timeout=idle_wait_timeout,
        log=log,
        clock=parts.clock,
        shared=parts.shared,
        staged=parts.stager is not None,
    )
    parts.restorer = Restorer(
        kernel_manager=parts.kernel_manager,
        call=parts.call,
        recorder=parts.recorder,
        reconciler=parts.reconciler,
        catalogue=parts.catalogue,
        prewarmer=parts.prewarmer,
        kernel_checkpoint_dir=parts.checkpointer.kernel_checkpoint_dir,
        kernel_call_timeout=kernel_call_timeout,
        classifier=parts.classifier,
        log=log,
        clock=parts.clock,
    )
    parts.releaser = Releaser(
        backend=parts.backend,
        kernel_manager=parts.kernel_manager,
        recorder=parts.recorder,
        reconciler=parts.reconciler,
        recovery=parts.recovery,
        clock=parts.clock,
        shared=parts.shared,
    )
