"""Faults during a lazy restore's background load, against real servers and kernels:
a kernel that loses its state there never costs the checkpoint that still has it.

The kernels hold ``import torch`` at a gate (``helpers.kernel_torch_gate``), so "the
background load is still running" is certain, not a race."""

import os
import signal

import pytest

from jupyter_pause.engine import paths
from jupyter_pause.engine.checks import read_safetensors_header
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
        op = client.wait(client.resume(NB, good))
        assert op["outcome"] == "succeeded", op
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


def flip_tensor_byte(folder, manifest: Manifest, name: str) -> None:
    """Flip one byte of ``name``'s tensor data in its safetensors file."""
    s = manifest.storages[manifest.objects[name].storages[0]]
    path = folder / s.file
    start, _raw, header = read_safetensors_header(path)
    raw = bytearray(path.read_bytes())
    raw[start + header[s.key]["data_offsets"][0] + 100] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_a_blob_only_the_background_reader_reads_is_damaged(server_factory, tmp_path):  # noqa: F811
    """``big`` falls back to its copy in the older checkpoint, which verifies; ``other``
    has no other copy: the user is told, and the next pause says it does not have it.
    Both are large enough (> 16 MiB) to be read only in the background."""
    server = server_factory("--PauseApp.keep_checkpoints=2")
    client = server.start()
    kernel_id, _ = start_notebook(client, "import torch\nbig = torch.arange(5_000_000.0)")
    assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"
    older = client.session_status(NB)["last_checkpoint"]["id"]
    assert client.execute(kernel_id, "big = big * 2\nother = torch.ones(5_000_000)").ok
    assert client.wait(client.pause(NB))["outcome"] == "succeeded"
    newer = client.session_status(NB)["last_checkpoint"]["id"]
    folder = paths.notebook_dir(server.checkpoint_dir, NB)
    manifest = Manifest.from_bytes((folder / newer / MANIFEST).read_bytes())
    for name in ("big", "other"):
        flip_tensor_byte(folder, manifest, name)

    op = client.wait(client.resume(NB))
    assert op["outcome"] == "succeeded", op  # the damage is not known yet: not read yet
    kernel_id = client.session_status(NB)["kernel_id"]

    # once the background load found it, the kernel tells the server, no cell run: the
    # resume's operation says what was recovered and what is lost, and the status's lost
    def told():
        session = client.session_status(NB)
        said = session["operation"]["messages"]
        return any("big" in m for m in said) and any("other" in m for m in said) and session

    session = wait_for(told, 60, what="the resume hearing of the damage")
    said = session["operation"]["messages"]
    assert session["operation"]["id"] == op["id"], session["operation"]
    assert any(f"big was damaged in checkpoint {newer}" in m and older in m for m in said), said
    assert any("other" in m and "no checkpoint has a copy that verifies" in m for m in said)
    assert session["lost"]["names"] == {"other": ""}

    # and the notebook hears of it before its next cell
    got = client.execute(kernel_id, "print(float(big[-1]), 'other' in dir())")
    last = [x for x in got.stdout.replace("\r", "\n").splitlines() if x.strip()][-1]
    assert got.ok and last.split() == ["4999999.0", "False"], got
    assert f"restored its older copy from checkpoint {older}" in got.stderr, got.stderr
    assert "other was not restored" in got.stderr, got.stderr

    op = client.wait(client.pause(NB))
    assert op["outcome"] == "succeeded", op
    assert any("does not have other" in m for m in op["messages"]), op["messages"]
    assert client.session_status(NB)["lost"]["names"] == {"other": ""}
    # the sound copy of big is kept: the new checkpoint references it
    assert client.wait(client.resume(NB))["outcome"] == "succeeded"
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, "print(float(big[-1]))") == 4999999.0
