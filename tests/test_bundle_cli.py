"""``jupyter pause export`` / ``import`` with real servers and kernels: a notebook's state
moved to another person (another Jupyter data folder, so another signing key, and another
checkpoint root), refused until trusted, then restored in a fresh kernel of their server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jupyter_pause.cli import main
from jupyter_pause.client import LocalServer

REPO = Path(__file__).resolve().parent.parent
NB = "demo.ipynb"  # the test client names a nested notebook's session by its path

pytestmark = pytest.mark.slow


def person(tmp_path: Path, name: str) -> LocalServer:
    root = tmp_path / name / "notebooks"
    root.mkdir(parents=True)
    return LocalServer(
        root,
        tmp_path / name / "state",
        checkpoints=tmp_path / name / "ck",
        env={
            "JUPYTER_DATA_DIR": str(tmp_path / name / "data"),  # their own key
            "JUPYTER_CONFIG_DIR": str(tmp_path / name / "config"),
            "PYTHONPATH": str(REPO),
        },
        extra_args=["--PauseApp.shutdown_grace=0"],
    )


def as_(monkeypatch, server: LocalServer) -> list[str]:
    """Run the CLI as that person, in their server's root; the --dir argument."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", server.env["JUPYTER_DATA_DIR"])
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    monkeypatch.delenv("JUPYTER_PAUSE_CHECKPOINT_DIR", raising=False)
    monkeypatch.chdir(server.root_dir)
    return ["--dir", str(server.checkpoint_dir)]


def test_a_session_moves_to_another_person(tmp_path, monkeypatch, capsys):
    alice, bob = person(tmp_path, "alice"), person(tmp_path, "bob")
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {},
                     "outputs": [], "source": "x = 41 + 1"}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    (alice.root_dir / NB).write_text(json.dumps(nb))
    try:
        client = alice.start()
        kernel_id = client.open_notebook(NB)["kernel"]["id"]
        code = "import torch\nx = 41 + 1\nt = torch.arange(6.0).reshape(2, 3)\ncfg = {'lr': 0.1}"
        assert client.execute(kernel_id, code).ok
        assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"
    finally:
        alice.stop()

    bundle = tmp_path / "demo.bundle"
    assert main(["export", NB, "-o", str(bundle), *as_(monkeypatch, alice)]) == 0
    out = capsys.readouterr().out
    key_id = re.search(r"signed with key (\w+)", out).group(1)
    digest = re.search(r"digest (sha256:\w+)", out).group(1)

    bob_dir = as_(monkeypatch, bob)
    assert main(["import", str(bundle), *bob_dir]) == 1
    err = capsys.readouterr().err
    assert "refusing to import" in err and "--trust" in err and "Nothing was imported" in err
    assert key_id in err and digest in err
    assert not (bob.root_dir / NB).exists() and not bob.checkpoint_dir.exists()

    # another torch here: the import says it matters
    monkeypatch.setenv("JUPYTER_PAUSE_FINGERPRINT", json.dumps({"torch": "1.0.0"}))
    assert main(["import", str(bundle), "--trust", *bob_dir]) == 0
    out = capsys.readouterr().out
    assert f"trusted with --trust: signer's key {key_id}, bundle digest {digest}" in out
    assert f"wrote {bob.root_dir / NB}" in out
    assert re.search(r"matters: package torch: 2\.\S+ -> 1\.0\.0", out), out
    assert json.loads((bob.root_dir / NB).read_text()) == nb
    monkeypatch.delenv("JUPYTER_PAUSE_FINGERPRINT")

    try:
        client = bob.start()
        listed = client.checkpoints(NB)
        assert [c["status"] for c in listed] == ["ok"]  # bob's own now: signed with his key
        kernel_id = client.open_notebook(NB)["kernel"]["id"]
        assert (
            client.evaluate(
                kernel_id, "import sys, json; print(json.dumps('torch' in sys.modules))"
            )
            is False
        )
        res = client.execute(kernel_id, "%restore")
        assert res.ok, res.stderr
        got = client.evaluate(
            kernel_id,
            "print(json.dumps([x, cfg, t.tolist(), type(t).__module__, str(t.dtype)]))",
        )
        assert got == [
            42,
            {"lr": 0.1},
            [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],
            "torch",
            "torch.float32",
        ]
    finally:
        bob.stop()
