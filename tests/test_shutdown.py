"""A server stopped by a signal (SIGTERM: systemctl stop, a pod deleted or preempted;
SIGINT: Ctrl-C, JupyterHub's first stop signal) pauses every live notebook on its
checkpoint within ``PauseApp.shutdown_grace``; what it cannot save is named; the next
server shows the truth from its first status (real server processes and kernels)."""

import contextlib
import json
import signal
import sys
import threading
import uuid

import pytest
import websocket

from jupyter_pause.client import LocalServer

from .helpers import server_env, wait_for, write_notebooks

NOTEBOOKS = ("one.ipynb", "two.ipynb")

pytestmark = pytest.mark.slow


@pytest.fixture
def server_factory(tmp_path, started):
    root = write_notebooks(tmp_path / "root", *NOTEBOOKS)
    env = server_env(tmp_path)

    def make(grace: float, wrapper: tuple[str, ...] = ()):
        server = LocalServer(
            root,
            tmp_path / "state",
            env=env,
            extra_args=[f"--PauseApp.shutdown_grace={grace}"],
            wrapper=list(wrapper),
        )
        started.append(server)
        return server

    return make


def hold_state(client, path: str, value: int) -> str:
    """The notebook's kernel holds a module's object, a function and a number."""
    kernel_id = client.open_notebook(path)["kernel"]["id"]
    code = f"import collections\ncounts = collections.Counter('abracadabra')\nn = {value}\n"
    code += "def twice(x):\n    return 2 * x\n"
    assert client.execute(kernel_id, code).ok
    return kernel_id


def stop_with(server: LocalServer, signum: int, within: float) -> None:
    server.process.send_signal(signum)
    server.process.wait(within)  # TimeoutExpired: the server did not stop by then


def open_channels(client, kernel_id: str):
    """A kernel's websocket, as JupyterLab keeps it open (the JSON protocol)."""
    url = client.base_url.replace("http", "ws", 1) + f"api/kernels/{kernel_id}/channels"
    header = [f"Authorization: token {client.token}"]
    return websocket.create_connection(f"{url}?session_id={uuid.uuid4().hex}", header=header)


def run_cell(channels, code: str, timeout: float = 30) -> dict:
    """Send ``code`` as a cell on open ``channels``; the content of its execute_reply."""
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "session": msg_id,
              "username": "test", "version": "5.3"}  # fmt: skip
    content = {"code": code, "silent": False, "store_history": True, "allow_stdin": False}
    channels.send(json.dumps({"header": header, "parent_header": {}, "metadata": {},
                              "content": content, "channel": "shell", "buffers": []}))  # fmt: skip
    channels.settimeout(timeout)
    while True:
        msg = json.loads(channels.recv())
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_reply":
            return msg["content"]


#: runs the server as a shell runs a background job (`jupyter server &`, a hub started
#: so): SIGINT ignored, which the exec'd server inherits
IN_THE_BACKGROUND = (
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.argv[1], sys.argv[1:])",
)


@pytest.mark.parametrize(
    "signum, wrapper",
    [(signal.SIGTERM, ()), (signal.SIGINT, ()), (signal.SIGINT, IN_THE_BACKGROUND)],
    ids=["SIGTERM", "SIGINT", "SIGINT-background"],
)
def test_a_signal_pauses_every_live_notebook_and_the_next_server_resumes_them(
    server_factory, signum, wrapper
):
    grace = 30
    server = server_factory(grace, wrapper)
    client = server.start()
    for value, path in enumerate(NOTEBOOKS, start=1):
        hold_state(client, path, value)

    stop_with(server, signum, within=grace + 15)
    assert "NOT saved" not in server.log_tail(100_000)

    client = server.start()
    for path in NOTEBOOKS:
        session = client.session_status(path)  # the first status already tells
        assert session["state"] == "paused", session
        assert session["paused_by"] == "server-shutdown"
        assert session["kernel_id"] is None and session["last_checkpoint"]["id"]
    events = client.events()
    requested = [e for e in events if e["type"] == "pause-requested"]
    assert sorted(e["path"] for e in requested) == sorted(NOTEBOOKS)
    assert {e["data"]["reason"] for e in requested} == {"server-shutdown"}
    assert not [e for e in events if e["type"] in ("not-saved", "operation-failed")]

    for value, path in enumerate(NOTEBOOKS, start=1):
        assert client.wait(client.resume(path))["outcome"] == "succeeded"
        kernel_id = client.session_status(path)["kernel_id"]
        assert client.evaluate(kernel_id, "print([twice(n), counts['a']])") == [2 * value, 5]


def test_a_kernel_busy_past_the_grace_is_named_and_the_next_server_says_it_failed(
    server_factory,
):
    grace = 5
    server = server_factory(grace)
    client = server.start()
    hold_state(client, NOTEBOOKS[0], 1)
    busy = hold_state(client, NOTEBOOKS[1], 2)
    assert client.wait(client.checkpoint(NOTEBOOKS[1]))["outcome"] == "succeeded"
    busy_saved = client.session_status(NOTEBOOKS[1])["last_checkpoint"]["id"]

    def long_cell():
        with contextlib.suppress(Exception):  # the server stops under it
            client.execute(busy, "import time\ntime.sleep(600)", timeout=300)

    threading.Thread(target=long_cell, daemon=True).start()
    wait_for(
        lambda: client.session_status(NOTEBOOKS[1])["execution_state"] == "busy",
        60,
        "the long cell to run",
    )
    channels = open_channels(client, busy)  # JupyterLab's, open before the signal
    server.process.send_signal(signal.SIGTERM)
    wait_for(
        lambda: "the server stops: saving" in server.log_tail(100_000), 30, "the saves to begin"
    )
    # a cell sent now is refused at once, as the kernel refuses one: it would be lost
    reply = run_cell(channels, "print('ran')")
    assert reply["status"] == "error" and reply["ename"] == "ServerStopping", reply
    server.process.wait(grace + 60)
    log = server.log_tail(100_000)
    assert f"{NOTEBOOKS[1]} was NOT saved before the server stopped (kernel busy)" in log
    # each success is said as well as each failure
    assert f"{NOTEBOOKS[0]} was saved before the server stopped (checkpoint 20" in log

    client = server.start()
    saved, lost = (client.session_status(path) for path in NOTEBOOKS)
    assert saved["state"] == "paused" and saved["paused_by"] == "server-shutdown"
    assert lost["state"] == "failed" and lost["kernel_id"] is None, lost
    assert "not saved" in lost["error"]
    # the state its checkpoint has is offered back
    assert lost["saved_state_unrestored"]["checkpoint"] == busy_saved, lost
    [event] = [e for e in client.events() if e["type"] == "not-saved"]
    assert event["path"] == NOTEBOOKS[1] and event["data"]["why"] == "kernel busy"


def test_a_save_that_fails_at_shutdown_says_the_kernel_is_being_stopped(server_factory):
    server = server_factory(30)
    client = server.start()
    hold_state(client, NOTEBOOKS[0], 1)
    server.checkpoint_dir.write_text("not a folder")  # every checkpoint now fails
    stop_with(server, signal.SIGTERM, within=60)
    log = server.log_tail(100_000)
    [line] = [line for line in log.splitlines() if "was NOT saved" in line]
    assert f"{NOTEBOOKS[0]} was NOT saved before the server stopped (error)" in line
    failure = log[log.index(line) :]
    assert "is being stopped with the server" in failure and "keeps running" not in failure
