"""Pausing a whole JupyterHub single-user server and resuming on its next start."""

from __future__ import annotations

import json
import time

import pytest

from jupyter_pause.engine import store as checkpoint_store

from ..helpers import wait_for
from .conftest import as_user, process_exited

pytestmark = pytest.mark.slow

MODEL = """
import hashlib, torch
x = 41
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
"""
DIGEST = """
import hashlib, json
print(json.dumps(hashlib.sha256(b"".join(
    t.detach().cpu().contiguous().numpy().tobytes() for t in model.state_dict().values()
)).hexdigest()))
"""


def paused_sessions(hub, user) -> dict:
    sessions = json.loads((hub.data_dir(user) / "pause" / "sessions.json").read_text())
    return {path: s["state"] for path, s in sessions["sessions"].items()}


def test_pause_stops_the_server_and_the_next_start_resumes_the_notebook(hub_factory):
    hub = hub_factory()
    hub.configure_user("alice", {"JupyterHubBackend": {"resume_on_start": True}})
    path = hub.add_notebook("alice")
    hub.start()
    alice = hub.spawn("alice")
    assert alice.status()["backend"]["name"] == "jupyterhub"  # chosen automatically
    pid = hub.pid("alice")
    kernel = alice.open_notebook(path)["kernel"]["id"]
    assert alice.execute(kernel, MODEL).ok
    digest = alice.evaluate(kernel, DIGEST)

    requested = time.monotonic()
    op = alice.pause(path)
    assert op["outcome"] == "running"
    stopped = hub.wait_stopped("alice")
    wait_for(lambda: process_exited(pid), 60, "alice's server process to exit")

    assert paused_sessions(hub, "alice") == {path: "paused"}
    with as_user("alice"):
        checkpoints = checkpoint_store.list_checkpoints(
            dir=hub.data_dir("alice") / "pause" / "checkpoints", notebook=path
        )
    assert len(checkpoints) == 1

    start = time.monotonic()
    alice = hub.spawn("alice")
    ready = time.monotonic()
    session = wait_for(
        lambda: (s := alice.session_status(path)) and s["state"] == "ready" and s,
        180,
        "the notebook to be resumed",
        interval=0.1,
    )
    runnable = time.monotonic()
    kernel = session["kernel_id"]
    assert alice.evaluate(kernel, "print(x + 1)") == 42
    assert alice.evaluate(kernel, DIGEST) == digest  # bit-identical weights

    types = [e["type"] for e in alice.events()]
    for fact in (
        "accelerator-released",
        "paused",
        "workspace-stopped",
        "capacity-acquired",
        "restore-finished",
        "first-cell-runnable",
    ):
        assert fact in types, (fact, types)
    assert types.index("workspace-stopped") < types.index("capacity-acquired")
    report = alice.api("GET", "report")
    assert [u["key"] for u in report["by_user"]] == ["alice"]  # the Hub's name, not the Unix one
    (pause,) = report["pauses"]
    assert pause["released"] and pause["runnable"] and pause["resume_latency_s"] >= 0
    print(
        f"\nhub pause: request -> server stopped {stopped - requested:.2f} s; "
        f"start request -> first cell runnable {runnable - start:.2f} s "
        f"(the Hub reports the server ready after {ready - start:.2f} s)"
    )


def test_a_pause_the_hub_refuses_leaves_every_kernel_running_and_says_why(hub_factory):
    hub = hub_factory(servers_may_stop=False)  # the Hub's default 'server' role
    path = hub.add_notebook("alice")
    hub.add_notebook("alice", "other.ipynb")
    hub.start()
    alice = hub.spawn("alice")
    kernels = {}
    for name, code in ((path, "x = 41"), ("other.ipynb", "y = 1")):
        kernels[name] = alice.open_notebook(name)["kernel"]["id"]
        assert alice.execute(kernels[name], code).ok

    op = alice.wait(alice.pause(path), timeout=120)

    assert op["outcome"] == "failed"
    assert "403" in op["error"] and "delete:servers!server" in op["error"], op["error"]
    assert "keeps running" in op["error"]
    assert hub.server_model("alice")["ready"]
    for name, kernel in kernels.items():
        session = alice.session_status(name)
        assert session["state"] == "running", session
        assert session["kernel_id"] == kernel
        assert session["last_checkpoint"]["id"]  # both were checkpointed first
    assert alice.evaluate(kernels[path], "print(x + 1)") == 42
    state = json.loads((hub.data_dir("alice") / "pause" / "jupyterhub.json").read_text())
    assert state["state"] == "failed"
