"""A cell never meets a hibernated kernel: the kernel websocket wakes it first.

:class:`WakingConnection` is Jupyter Server's websocket connection to a kernel, with one
difference: a request on the shell channel that runs code (``execute_request``, and
completion, inspection and comm messages, which reach the user's objects) for a kernel
that is hibernated, or being hibernated, is held while the manager wakes the kernel
(``PauseManager.awake``), then sent on; the messages behind it wait their turn, so their
order is kept. Should the kernel stay hibernated (not enough GPU memory free, the driver
failed), each held request that runs code is answered with an error that says why, as
the kernel would answer, and the kernel never sees it; the others go on.

A request that runs code waits, for :data:`JOIN_WAIT` at most, until the server's watch
of the kernel (server/activity.py) has heard its IOPub: a subscription that has not
joined yet would miss the cell's start, and the autosave and the idle clock with it.

While a stopping server saves its notebooks (server/shutdown.py), a request that runs
code is refused the same way: a cell started then would be lost with the server anyway,
and would make the save wait for it, past the grace, with all that was not saved yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from jupyter_client.jsonutil import json_default
from jupyter_server.services.kernels.connection.base import (
    deserialize_binary_message,
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

from .errors import PauseError

#: shell requests that run no user code: they pass a hibernated kernel by
PASSES = frozenset(
    {"kernel_info_request", "is_complete_request", "history_request", "comm_info_request"}
)
V1 = "v1.kernel.websocket.jupyter.org"
#: seconds a request that runs code waits for the kernel's watch to hear its IOPub
JOIN_WAIT = 1.0
#: what a cell sent while the server stops is told
STOPPING = (
    "the server is stopping and saving this notebook's state; this cell was not run "
    "(it would have been lost, and kept the save waiting)"
)


class WakingConnection(ZMQChannelsWebsocketConnection):
    """Jupyter's kernel websocket connection that wakes a hibernated kernel before a
    request that runs code reaches it."""

    _held: list | None = None  # messages waiting for a wake, in order
    _joined = False  # the kernel's watch heard its IOPub, or was waited for

    def handle_incoming_message(self, incoming_msg) -> None:
        if self._held is not None:
            self._held.append(incoming_msg)
            return
        settings = self.websocket_handler.settings
        manager = settings.get("jupyter_pause_manager")
        if manager is None or not self._runs_code(incoming_msg):
            super().handle_incoming_message(incoming_msg)
        elif manager.stopping:
            self._refuse(incoming_msg, STOPPING, "ServerStopping")
        elif not self._joined and (joining := self._joining(settings)) is not None:
            self._held = [incoming_msg]
            asyncio.ensure_future(self._join_then_send(joining))
        elif manager.hibernated(self.kernel_id):
            self._held = [incoming_msg]
            asyncio.ensure_future(self._wake_then_send(manager))
        else:
            super().handle_incoming_message(incoming_msg)

    def _joining(self, settings) -> asyncio.Event | None:
        activity = settings.get("jupyter_pause_activity")
        joining = activity.joining(self.kernel_id) if activity is not None else None
        self._joined = joining is None
        return joining

    async def _join_then_send(self, joining: asyncio.Event) -> None:
        """Send what was held once the kernel's watch heard its IOPub, so that the cell's
        start is seen; after :data:`JOIN_WAIT` it goes on, seen or not."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(joining.wait(), JOIN_WAIT)
        self._joined = True
        held, self._held = self._held or [], None
        for message in held:  # in order: one may be held again, for a wake
            self.handle_incoming_message(message)

    def _runs_code(self, message) -> bool:
        channel, header = self._peek(message)
        return channel == "shell" and bool(header) and header.get("msg_type") not in PASSES

    async def _wake_then_send(self, manager) -> None:
        error = None
        try:
            await manager.awake(self.kernel_id)
        except PauseError as e:
            error = str(e)
        except Exception as e:  # the request must be answered whatever broke
            self.log.exception("jupyter-pause: could not wake kernel %s", self.kernel_id)
            error = f"the kernel could not be woken: {e}"
        held, self._held = self._held or [], None
        for message in held:  # an interrupt, say, passes whatever became of the wake
            if error is None or not self._runs_code(message):
                super().handle_incoming_message(message)
            else:
                self._refuse(message, error)

    def _peek(self, message) -> tuple[str | None, dict[str, Any] | None]:
        """A websocket message's channel and header, whichever protocol it came in."""
        try:
            if self.subprotocol == V1:
                channel, parts = deserialize_msg_from_ws_v1(message)
                return channel, self.session.unpack(parts[0])
            msg = (
                deserialize_binary_message(message)
                if isinstance(message, bytes)
                else json.loads(message)
            )
            return msg.get("channel") or "shell", msg.get("header")
        except Exception:  # not ours to judge: Jupyter's own handling logs it
            return None, None

    def _refuse(self, message, error: str, name: str = "GPUHibernated") -> None:
        """Answer a held request as the kernel answers a failed one: busy, the error
        (for a cell, in its output), the reply, idle."""
        _, header = self._peek(message)
        kind = header["msg_type"]
        failure = {"ename": name, "evalue": error, "traceback": [f"{name}: {error}"]}
        reply = {"status": "error", **failure}
        if kind == "execute_request":
            reply["execution_count"] = None
        self._send("iopub", "status", {"execution_state": "busy"}, header)
        if kind == "execute_request":
            self._send("iopub", "error", failure, header)
        self._send("shell", kind.replace("_request", "_reply"), reply, header)
        self._send("iopub", "status", {"execution_state": "idle"}, header)

    def _send(self, channel: str, kind: str, content: dict, parent: dict) -> None:
        msg = self.session.msg(kind, content=content, parent=parent)
        if self.subprotocol == V1:
            self.websocket_handler.write_message(
                serialize_msg_to_ws_v1(msg, channel, self.session.pack), binary=True
            )
        else:
            msg["channel"] = channel
            self.websocket_handler.write_message(json.dumps(msg, default=json_default))
