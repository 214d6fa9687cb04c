"""Faults during a lazy restore's background load, against real servers and kernels:
a kernel that loses its state there never costs the checkpoint that still has it.

The kernels hold ``import torch`` at a gate (``helpers.kernel_torch_gate``), so "the
background load is still running" is certain, not a race."""

import os
import signal

import pytest

from jupyter_pause.engine import paths
from jupyter_pause.engine.manifest import MANIFEST, Manifest

from .helpers import kernel_torch_gate, wait_for
from .test_recovery import NB, server_factory, start_notebook  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow


def test_kernels_killed_during_the_background_load_never_cost_the_good_checkpoint(
    server_factory,  # noqa: F811
    tmp_path,
):
    """Three rounds (keep = 3) of: resume the good checkpoint, SIGKILL the kernel while
    its load runs, pause the fresh kernel Jupyter started in its place."""
    gate = kernel_torch_gate(tmp_path / "gate")
    (gate / "open").touch()  # the first kernel imports torch at once
    server = server_factory("--PauseApp.keep_checkpoints=3", pythonpath=[gate])
    client = server.start()
    start_notebook(client, "import torch\nbig = torch.arange(1000.0)\nn = 5")
    assert client.wait(client.pause(NB))["outcome"] == "succeeded"
    good = client.session_status(NB)["last_checkpoint"]["id"]
    (gate / "open").unlink()  # from now on the load holds at torch's import

    for _round in range(3):
        assert client.wait(client.resume(NB, good))["outcome"] == "succeeded"
        kernel_id = client.session_status(NB)["kernel_id"]
        pid = client.evaluate(kernel_id, "import os; print(os.getpid())")
        os.kill(pid, signal.SIGKILL)

        # the status says the state is lost, and which checkpoint still has it
        session = wait_for(
            lambda: (s := client.session_status(NB))["state"] == "failed" and s,
            60,
            what="the server hearing of the kernel's death",
        )
        assert session["lost"]["checkpoint"] == good, session
        assert good in session["error"] and "lost" in session["error"]
        assert session["kernel_id"] == kernel_id and session["live_state"] == "fresh"

        # pausing the fresh kernel warns, in the operation and in the notebook's status
        op = client.wait(client.pause(NB))
        assert op["outcome"] == "succeeded", op
        assert any("big" in m and good in m for m in op["messages"]), op["messages"]
        session = client.session_status(NB)
        assert session["state"] == "paused"
        assert session["lost"]["names"] == {"big": good, "n": good}

    ids = sorted(c["id"] for c in client.checkpoints(NB))
    assert good in ids and len(ids) == 4
    manifest = paths.notebook_dir(server.checkpoint_dir, NB) / ids[-1] / MANIFEST
    assert Manifest.from_bytes(manifest.read_bytes()).metadata["lost"] == {"big": good, "n": good}
    # and the good one still restores everything
    (gate / "open").touch()
    assert client.wait(client.resume(NB, good))["outcome"] == "succeeded"
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, "print(float(big.sum()) + n)") == 499505.0
