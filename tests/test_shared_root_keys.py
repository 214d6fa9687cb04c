"""Two servers of one Unix user (a hub whose servers all run as jovyan) share a checkpoint
root, each with its own data folder and so its own signing key: neither deletes nor
expires the other's checkpoints; only an administrator's clean-up that names what it
removes does (real servers and kernels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_pause.cli import main
from jupyter_pause.client import ClientError, LocalServer
from jupyter_pause.engine import paths

REPO = Path(__file__).resolve().parent.parent
NB = "nb.ipynb"

pytestmark = pytest.mark.slow


def server(tmp_path: Path, name: str, shared: Path) -> LocalServer:
    root = tmp_path / name / "notebooks"
    root.mkdir(parents=True)
    nb = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    (root / NB).write_text(json.dumps(nb))
    return LocalServer(
        root,
        tmp_path / name / "state",
        checkpoints=shared,
        env={
            "JUPYTER_DATA_DIR": str(tmp_path / name / "data"),  # its own key
            "JUPYTER_CONFIG_DIR": str(tmp_path / name / "config"),
            "PYTHONPATH": str(REPO),
        },
        # no pause at shutdown: A's own retention (keep=1) would expire the checkpoint
        extra_args=["--PauseApp.keep_checkpoints=1", "--PauseApp.shutdown_grace=0"],
    )


def checkpoint(client, value: int) -> str:
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    client.evaluate(kernel_id, f"x = {value}\nprint(1)")
    assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"
    return client.session_status(NB)["last_checkpoint"]["id"]


def test_another_keys_checkpoint_is_neither_deleted_nor_expired(tmp_path, monkeypatch, capsys):
    shared = tmp_path / "shared"
    a, b = server(tmp_path, "a", shared), server(tmp_path, "b", shared)
    try:
        alice, bob = a.start(), b.start()
        theirs = checkpoint(alice, 1)
        folder = paths.notebook_dir(shared, NB) / theirs
        assert theirs in [c["id"] for c in bob.checkpoints(NB)]  # the same folder: listed

        # B's DELETE of A's checkpoint, before B has a key of its own and with one
        with pytest.raises(ClientError) as no_key:
            bob.delete_checkpoint(NB, theirs)
        mine = [checkpoint(bob, i) for i in range(3)]  # keep=1: B's retention runs
        with pytest.raises(ClientError) as own_key:
            bob.delete_checkpoint(NB, theirs)
        for refused in (no_key.value, own_key.value):
            assert refused.status == 403
            assert str(folder) in str(refused) and "--force-foreign" in str(refused)
        assert folder.is_dir(), "B's retention expired A's checkpoint"
        ids = [c["id"] for c in bob.checkpoints(NB)]
        assert theirs in ids and mine[-1] in ids and not set(mine[:-1]) & set(ids)
        listed = alice.api("GET", "checkpoints", path=NB, verify="1")["checkpoints"]
        assert {c["id"]: c["status"] for c in listed}[theirs] == "ok"  # intact, for A
    finally:
        a.stop()
        b.stop()

    # the administrator's clean-up, as B's user: refused without --force-foreign, then named
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "b" / "data"))
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    assert main(["delete", NB, theirs, "--dir", str(shared)]) == 1
    assert "refusing to delete" in capsys.readouterr().err and folder.is_dir()
    assert main(["delete", NB, theirs, "--dir", str(shared), "--force-foreign"]) == 0
    out = capsys.readouterr().out
    assert (
        f"removed {folder} (not this user's: it was signed with the key whose fingerprint is" in out
    )
    assert not folder.exists()
    assert main(["delete", NB, mine[-1], "--dir", str(shared)]) == 0  # B's own: no flag
    assert capsys.readouterr().out.strip() == f"removed {folder.parent / mine[-1]}"
