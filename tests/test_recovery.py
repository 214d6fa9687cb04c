"""The server is SIGKILLed in the middle of a pause or checkpoint and started
again: every unfinished operation is resolved from the truth on disk and in
the kernels, and the notebook can be worked with at once (real processes)."""

import os
import signal
from pathlib import Path

import pytest

from jupyter_pause.client import LocalServer
from jupyter_pause.engine import paths

from .helpers import REPO, gate_code, kernel_torch_gate, server_env, wait_for, write_notebooks

NB = "nb.ipynb"

pytestmark = pytest.mark.slow


def process_gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.fixture
def server_factory(tmp_path, started):
    root = write_notebooks(tmp_path / "root", NB)
    env = server_env(tmp_path)

    def make(*extra_args, pythonpath=()):
        """A server; ``pythonpath``: folders put before the repository on its (and its
        kernels') ``PYTHONPATH``."""
        path = os.pathsep.join([*map(str, pythonpath), str(REPO)])
        server = LocalServer(
            root, tmp_path / "state", env={**env, "PYTHONPATH": path}, extra_args=list(extra_args)
        )
        started.append(server)
        return server

    return make


def kill_server(server: LocalServer, kernel_pid: int) -> None:
    """SIGKILL the server; its kernels notice their parent is gone and exit."""
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(30)
    wait_for(lambda: process_gone(kernel_pid), 120, what="the orphaned kernel's exit")


def start_notebook(client, code):
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    pid = client.evaluate(kernel_id, f"{code}\nimport os; print(os.getpid())")
    return kernel_id, pid


@pytest.mark.parametrize("kind", ["pause", "checkpoint"])
def test_killed_during_the_kernels_write_the_notebook_ends_failed_with_what_to_resume(
    server_factory, tmp_path, kind
):
    gate = tmp_path / "gate"
    gate.mkdir()
    server = server_factory()
    client = server.start()
    kernel_id, pid = start_notebook(client, "x = 1")
    assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"
    earlier = client.session_status(NB)["last_checkpoint"]["id"]
    assert client.execute(kernel_id, "x = 2\n" + gate_code(gate)).ok
    op = client.pause(NB) if kind == "pause" else client.checkpoint(NB)
    wait_for(lambda: (gate / "started").exists(), 120, what="the checkpoint's write")
    folder = paths.notebook_dir(server.checkpoint_dir, NB)
    assert [p for p in folder.iterdir() if p.name.startswith(".tmp-")]  # mid-write

    kill_server(server, pid)
    client = server_factory().start()

    session = client.session_status(NB)
    assert session["state"] == "failed", session
    assert session["operation"]["id"] == op["id"]
    assert session["operation"]["outcome"] == "failed"
    assert "lost" in session["error"] and earlier in session["error"]
    # the dead writer's temp folder is gone already, not at the next checkpoint
    assert not [p for p in folder.iterdir() if p.name.startswith(".tmp-")]
    # and the notebook is not held: resume works at once (today: 409 forever)
    resumed = client.wait(client.resume(NB))
    assert resumed["outcome"] == "succeeded", resumed
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, "print(x)") == 1


def test_killed_while_pausing_after_the_checkpoint_the_notebook_ends_paused(
    server_factory, tmp_path
):
    gate = tmp_path / "gate"
    gate.mkdir()
    backend = (
        "--PauseApp.backend_class=tests.fault_backends.GatedRelease",
        f"--GatedRelease.gate={gate}",
    )
    server = server_factory(*backend)
    client = server.start()
    _, pid = start_notebook(client, "x = 2")
    op = client.pause(NB)
    wait_for(lambda: (gate / "releasing").exists(), 120, what="the release of the accelerator")
    assert client.session_status(NB)["state"] == "pausing"

    kill_server(server, pid)
    client = server_factory(*backend).start()

    session = client.session_status(NB)
    assert session["state"] == "paused", session
    assert session["kernel_id"] is None
    assert session["operation"]["id"] == op["id"]
    assert session["operation"]["outcome"] == "succeeded"
    assert session["last_checkpoint"]["id"] == client.checkpoints(NB)[0]["id"]
    resumed = client.wait(client.resume(NB))
    assert resumed["outcome"] == "succeeded", resumed
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, "print(x)") == 2


def test_killed_during_a_resumes_background_load_the_notebook_is_paused_again(
    server_factory, tmp_path
):
    """After the restart the kernel is gone (it died with its server), its background
    load unfinished: the notebook is paused on its checkpoint, not `ready` with a kernel
    that does not exist, and a resume restores it (today: 409, "is running")."""
    gate = kernel_torch_gate(tmp_path / "gate")
    (gate / "open").touch()  # the first kernel imports torch at once
    server = server_factory(pythonpath=[gate])
    client = server.start()
    start_notebook(client, "import torch\nbig = torch.arange(1000.0)\nn = 5")
    assert client.wait(client.pause(NB))["outcome"] == "succeeded"
    checkpoint = client.session_status(NB)["last_checkpoint"]["id"]
    (gate / "open").unlink()  # the resumed kernel's load holds at torch's import
    assert client.wait(client.resume(NB))["outcome"] == "succeeded"
    kernel_id = client.session_status(NB)["kernel_id"]
    pid = client.evaluate(kernel_id, "import os; print(os.getpid())")
    pending = "from jupyter_pause.engine import lazy; print(json.dumps(lazy.active().pending()))"
    assert sorted(client.evaluate(kernel_id, "import json\n" + pending)) == ["big", "torch"]

    kill_server(server, pid)
    client = server_factory(pythonpath=[gate]).start()

    session = client.session_status(NB)
    assert session["state"] == "paused", session
    assert session["kernel_id"] is None
    assert checkpoint in session["error"]
    (gate / "open").touch()
    resumed = client.wait(client.resume(NB))
    assert resumed["outcome"] == "succeeded", resumed
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, "print(float(big.sum()) + n)") == 499505.0
