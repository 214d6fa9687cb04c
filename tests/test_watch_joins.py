"""A cell sent before the server's watch of its kernel has joined the kernel's IOPub is
not missed: a SUB socket hears nothing published before its subscription joined, so
the kernel websocket holds a request that runs code until the watch has heard the
kernel (server/wake.py, server/activity.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import zmq
from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session

from jupyter_pause.server import wake

from .helpers import start_client, start_session, wait_until


def request(session: Session, kind: str, content: dict) -> tuple[str, str]:
    msg = session.msg(kind, content=content)
    msg["channel"] = "shell"
    return msg["header"]["msg_id"], json.dumps(msg, default=json_default)


async def reply_to(ws, msg_id: str, timeout: float) -> dict | None:
    """The kernel's shell reply to ``msg_id`` on the websocket, or None by ``timeout``."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            raw = await asyncio.wait_for(ws.read_message(), left)
        except asyncio.TimeoutError:
            return None
        msg = json.loads(raw)
        if msg.get("channel") == "shell" and msg["parent_header"].get("msg_id") == msg_id:
            return msg
    return None


async def test_a_cell_sent_before_the_watch_joined_the_kernels_iopub_is_seen(
    jp_fetch, jp_ws_fetch, jp_serverapp, monkeypatch
):
    monkeypatch.setattr(wake, "JOIN_WAIT", 120.0)
    path = "join.ipynb"
    kernel_id = (await start_session(jp_fetch, path))["kernel"]["id"]
    monitor = jp_serverapp.web_app.settings["jupyter_pause_activity"]
    await wait_until(lambda: kernel_id in monitor.kernels, what="the kernel watched")
    # a watch whose subscription has not joined yet: it hears nothing the kernel publishes
    monitor.unwatch(kernel_id)
    watch = monitor.watch(kernel_id, path)
    watch.stream.socket.setsockopt(zmq.UNSUBSCRIBE, b"")
    seen = []
    monitor.listeners.append(lambda p, k, event, info: seen.append(event))

    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    session = Session()
    cell, message = request(session, "execute_request", {"code": "x = 1", "silent": False})
    ws.write_message(message)
    # the cell waits for the watch (without the wait it runs now, and its start is lost)
    assert await reply_to(ws, cell, timeout=3) is None

    watch.stream.socket.setsockopt(zmq.SUBSCRIBE, b"")
    other = start_client(jp_serverapp, kernel_id)  # the websocket's requests wait their turn
    try:
        deadline = time.monotonic() + 60
        while not watch.joined.is_set():  # the kernel speaks on IOPub at each request
            assert time.monotonic() < deadline, "the watch never heard the kernel"
            other.kernel_info()  # again, until one is published after the subscription
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(watch.joined.wait(), 1.0)
    finally:
        other.stop_channels()
    assert await reply_to(ws, cell, timeout=60) is not None
    await wait_until(lambda: "cell-finished" in seen, what="the cell's end seen")
    assert seen.count("cell-started") == 1
    ws.close()
