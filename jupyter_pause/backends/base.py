"""The interface every backend implements.

The server's session manager owns the lifecycle and the application
checkpoint (it is the same on every platform, and it is the fallback when a
platform snapshot cannot be restored).  A backend only answers three
questions:

* ``release``: the sessions are checkpointed; free their accelerator.
* ``acquire``: a session is about to be restored; make compute available
  (or report that the session waits for capacity).
* ``startup``: the server has just started; did it come back from a
  platform snapshot (live kernels intact) or is this a cold start?

and may listen to one event, ``stopping``: the server is shutting down
(the platform may be stopping it as the last step of a pause).

A backend whose platform has a place outside the server for the fleet's
figures (the hub service, a workspace's state object) takes the server's
rolled-up ledger rows in ``publish_fleet``, so that a stopped server is still
counted (``jupyter pause report --fleet``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from traitlets import Instance, Unicode, Union, default
from traitlets.config import LoggingConfigurable

from ..clock import SYSTEM, Clock
from ..engine import paths
from ..lifecycle import SHUTDOWN_REASON

if TYPE_CHECKING:
    from ..lifecycle import Session
    from ..report.fleet import FleetRow


class BackendError(Exception):
    """The platform refused or failed; the message says what to do."""


@dataclass
class StartupReport:
    """How the server came back."""

    restored_from: str | None = None  # "snapshot" when live kernels came back, else None
    detail: str = ""
    #: after a cold start, paused notebooks resume from their checkpoints by themselves
    #: (the backend is so configured), rather than wait for Resume
    auto_resume: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReleaseFacts:
    """What :meth:`PauseBackend.release` did, for the pause's ``accelerator-released`` rows."""

    #: when the accelerator was freed (a kernel's stop); None: when the release returned
    released_at: float | None = None
    #: "snapshot": this very process is the copy restored from the snapshot the release
    #: took (its kernels are live), and ``came_back`` is what it found
    restored_from: str | None = None
    came_back: dict[str, Any] = field(default_factory=dict)
    #: the platform's own facts, recorded as they are (``snapshot``, ``hub_answer``, ...)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TerminationNotice:
    """The platform says the machine under the server is about to go (a spot or
    preemptible VM reclaimed, a node drained): ``source`` who said it (``gke``,
    ``kubelet``, ``aws-node-termination-handler``), ``kind`` what (``termination``,
    ``spot-interruption``, ``rebalance-recommendation``, ``shutdown``, ...), ``detail``
    how it was read (the taint, label or condition), ``certain`` False for a warning
    that may not be followed by the end (AWS's rebalance recommendation)."""

    source: str
    kind: str
    detail: str
    node: str = ""
    certain: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def schedule_summary(sessions) -> dict[str, Any] | None:
    """The earliest of the pausing notebooks' scheduled resumes, or None.

    Server-scope backends keep it outside the server, with whatever starts
    the server again (a Kubernetes annotation, the hub service): the server
    comes back for the earliest, and then resumes each notebook at its own time.
    """
    schedules = [s.schedule for s in sessions if getattr(s, "schedule", None)]
    return min(schedules, key=lambda s: s["at"]) if schedules else None


class PauseBackend(LoggingConfigurable):
    """Base class; subclasses are chosen with ``PauseApp.backend_class``."""

    #: Short name shown in the status API.
    name = "base"

    #: "notebook": pausing one notebook frees its accelerator on its own (local).
    #: "server": the accelerator belongs to the whole server (a pod); pausing
    #: one notebook pauses them all, so every running kernel is checkpointed.
    scope = "notebook"

    #: handed down by ``PauseApp`` when it builds the backend, never read back from it
    state_dir = Unicode(help="PauseApp.state_dir: where the backend keeps its own records")
    checkpoint_dir = Union(
        [Unicode(), Instance(paths.Bucket)],
        allow_none=True,
        help="PauseApp's checkpoint root, a folder or a bucket; None: the engine's default",
    )

    @default("state_dir")
    def _default_state_dir(self):
        return str(paths.pause_data_dir())

    def __init__(self, ledger=None, clock: Clock = SYSTEM, **kwargs):
        super().__init__(**kwargs)
        #: the server's ledger, for events only the platform sees (snapshots, capacity)
        self.ledger = ledger
        #: the server's wall clock (``PauseApp`` hands it down; tests step it): when the
        #: platform's rows and annotations happened
        self.clock = clock

    async def release(self, sessions: list[Session], shutdown_kernel: Callable) -> ReleaseFacts:
        """Free the accelerator of ``sessions`` after their checkpoints are durable.

        ``shutdown_kernel(kernel_id)`` is an async callable provided by the
        manager.  Returns what happened, for the ledger.
        Raise :class:`BackendError` to leave everything running.
        """
        raise NotImplementedError

    async def release_at_shutdown(
        self, sessions: list[Session], shutdown_kernel: Callable
    ) -> ReleaseFacts:
        """The release of a pause at server shutdown, the same on every platform: the
        kernels stop (as the server's own clean-up would stop them); the platform stops
        the server already."""
        released_at = None
        for session in sessions:
            if session.kernel_id:
                released_at = await shutdown_kernel(session.kernel_id)
        if released_at is None:
            return ReleaseFacts()
        return ReleaseFacts(released_at=released_at, details={"reason": SHUTDOWN_REASON})

    async def acquire(self, session: Session, report_waiting: Callable[[str], None]) -> None:
        """Make compute available before a restore; call ``report_waiting(reason)``
        while waiting for capacity.  The default needs nothing."""

    async def startup(self) -> StartupReport:
        """Called once when the server starts."""
        return StartupReport()

    async def termination_notice(self) -> TerminationNotice | None:
        """Whether the platform has said that the machine under the server is about to
        go (asked every ``PauseApp.notice_interval``): None here, and wherever the
        platform has no way to say it.  Raises what the platform raised."""
        return None

    async def stopping(self) -> None:
        """Called once when the server shuts down, before its kernels are stopped
        and before the manager and the ledger close.  The default needs nothing."""

    async def publish_fleet(self, rows: list[FleetRow]) -> str | None:
        """Hand this server's rolled-up ledger rows (one per notebook, each
        replacing its older self) to where the fleet is read; return where, or
        None where the platform keeps no fleet (the default).  Raise
        :class:`BackendError` when that place did not take them."""
        return None

    def keeps_fleet(self) -> bool:
        """Whether :meth:`publish_fleet` may hand the rows anywhere: where it cannot,
        they are never made (nor the checkpoint store measured on disk for them).
        Backends that override :meth:`publish_fleet` may (say so more precisely)."""
        return type(self).publish_fleet is not PauseBackend.publish_fleet

    def describe(self) -> dict[str, Any]:
        """Backend facts for ``GET status``."""
        return {"name": self.name, "scope": self.scope}
