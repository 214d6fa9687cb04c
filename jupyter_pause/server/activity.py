"""What the user did in each kernel, read from the kernel's IOPub channel.

Jupyter Server's own ``last_activity`` moves for any tracked message, including
our silent housekeeping requests.  Idleness and accounting need the user's
activity only, so this monitor subscribes to each kernel's IOPub and keeps:

* cell executions: ``execute_input`` (sent only for non-silent requests, so
  never for ours) opens a cell; the ``status: idle`` with the same parent
  closes it, with its duration;
* comm traffic the user caused: a ``busy`` status whose parent is a
  ``comm_msg`` from the frontend (a widget moved);
* whether a user cell is running right now (``busy``).

A SUB socket hears nothing published before its subscription joined the kernel's
IOPub, and a cell sent at once might start unseen: the kernel websocket
(server/wake.py) holds a request that runs code until the kernel's watch has heard
its first message (:meth:`ActivityMonitor.joining`), which the websocket's own nudge
brings.

Listeners receive ``(path, kernel_id, event, info)`` with ``event`` one of
``"cell-started"``, ``"cell-finished"``, ``"comm"``.

Each moment is read on both clocks (:class:`~jupyter_pause.clock.Instant`):
idleness and cell durations are measured on the monotonic one, so a step of
the wall clock is never taken for idleness; the wall clock is for display
and the ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from zmq.eventloop.zmqstream import ZMQStream

from ..clock import SYSTEM, Clock, Instant


@dataclass
class KernelActivity:
    kernel_id: str
    path: str
    clock: Clock = field(default=SYSTEM, repr=False)
    #: when the kernel (or the resumed session) started, and the user's last activity
    started: Instant = field(init=False)
    last_user_activity: Instant = field(init=False)
    last_cell_finished: float | None = None  # wall clock
    running_cell: str | None = None  # parent msg_id of the user cell running now
    running_since: float | None = None  # monotonic clock
    stream: ZMQStream | None = None
    #: set at the first IOPub message: the subscription has joined the kernel's IOPub (a
    #: SUB socket hears nothing published before it joined, a cell's start included)
    joined: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def __post_init__(self) -> None:
        self.reset_clock()

    @property
    def busy(self) -> bool:
        return self.running_cell is not None

    def reset_clock(self) -> None:
        """Start the idle clock afresh (after a resume or a postponement).

        Stale timestamps never count: after a snapshot restore the clocks
        jump by the whole pause, which must not read as idleness.
        """
        self.started = self.last_user_activity = Instant.now(self.clock)


Listener = Callable[[str, str, str, dict], None]


class ActivityMonitor:
    """One IOPub subscription per kernel, started and stopped by the manager."""

    def __init__(self, kernel_manager, *, clock: Clock = SYSTEM):
        self.kernel_manager = kernel_manager
        self.clock = clock
        self.kernels: dict[str, KernelActivity] = {}
        self.listeners: list[Listener] = []

    def watch(self, kernel_id: str, path: str) -> KernelActivity:
        activity = self.kernels.get(kernel_id)
        if activity is not None:
            activity.path = path
            return activity
        activity = KernelActivity(kernel_id=kernel_id, path=path, clock=self.clock)
        kernel = self.kernel_manager.get_kernel(kernel_id)
        stream = kernel.connect_iopub()
        session = kernel.session

        def on_recv(parts):
            activity.joined.set()
            _, msg = session.feed_identities(parts)
            msg = session.deserialize(msg, content=True)
            self._on_message(activity, msg)

        stream.on_recv(on_recv)
        activity.stream = stream
        self.kernels[kernel_id] = activity
        return activity

    def unwatch(self, kernel_id: str) -> None:
        activity = self.kernels.pop(kernel_id, None)
        if activity and activity.stream is not None:
            activity.stream.close()

    def joining(self, kernel_id: str) -> asyncio.Event | None:
        """What to wait for before a request that runs code reaches ``kernel_id``: its
        watch's first IOPub message, while it has heard none (else None, watched or not)."""
        activity = self.kernels.get(kernel_id)
        if activity is None or activity.joined.is_set():
            return None
        return activity.joined

    def for_path(self, path: str) -> KernelActivity | None:
        for activity in self.kernels.values():
            if activity.path == path:
                return activity
        return None

    def close(self) -> None:
        for kernel_id in list(self.kernels):
            self.unwatch(kernel_id)

    def _on_message(self, activity: KernelActivity, msg: dict) -> None:
        msg_type = msg["header"]["msg_type"]
        parent = msg.get("parent_header") or {}
        now = Instant.now(self.clock)
        if msg_type == "execute_input":
            activity.running_cell = parent.get("msg_id")
            activity.running_since = now.monotonic
            activity.last_user_activity = now
            self._emit(activity, "cell-started", {})
        elif msg_type == "status":
            state = msg["content"].get("execution_state")
            if (
                state == "idle"
                and activity.running_cell
                and parent.get("msg_id") == activity.running_cell
            ):
                duration = now.monotonic - (activity.running_since or now.monotonic)
                activity.running_cell = None
                activity.running_since = None
                activity.last_cell_finished = now.wall
                activity.last_user_activity = now
                self._emit(activity, "cell-finished", {"duration": duration})
            elif state == "busy" and parent.get("msg_type") == "comm_msg":
                activity.last_user_activity = now
                self._emit(activity, "comm", {})

    def _emit(self, activity: KernelActivity, event: str, info: dict) -> None:
        for listener in self.listeners:
            listener(activity.path, activity.kernel_id, event, info)
