"""``jupyter pause verify`` and ``%restore`` without an id / with ``--partial``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.cli import main
from jupyter_pause.engine import store

from .test_trust import flip_tensor_byte, roll_back


@pytest.fixture
def damaged(ck, nbdir):
    """Two checkpoints; the newer one's model data has one flipped byte."""
    ns = {"model": torch.nn.Linear(512, 512), "arr": np.arange(10.0)}
    a = jp.checkpoint(namespace=ns, **ck)
    ns["model"] = torch.nn.Linear(512, 512)
    b = jp.checkpoint(namespace=ns, **ck)
    flip_tensor_byte(nbdir, store.get_manifest(ck["dir"], ck["notebook"], b.id), "model")
    return a.id, b.id


def test_verify_reports_which_checkpoints_restore(ck, damaged, capsys):
    good, bad = damaged
    rc = main(["verify", ck["notebook"], "--dir", ck["dir"], "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["healthy"] is False
    (nb,) = report["notebooks"]
    assert nb["notebook"] == ck["notebook"] and nb["restorable"] == [good]
    status = {c["id"]: c for c in nb["checkpoints"]}
    assert status[bad]["status"] == "damaged" and "'model'" in status[bad]["problem"]

    rc = main(["verify", "--dir", ck["dir"]])  # every notebook of this user, as text
    out = capsys.readouterr().out
    assert rc == 1 and f"resume and %restore use {good}" in out and "damaged" in out


def test_verify_names_an_older_checkpoint_copied_over_the_newest(ck, nbdir, capsys):
    old = jp.checkpoint(namespace={"x": 1}, **ck)
    new = jp.checkpoint(namespace={"x": 2}, **ck)
    roll_back(nbdir, old.id, new.id)
    main(["verify", ck["notebook"], "--dir", ck["dir"]])
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip().startswith(new.id))
    assert "untrusted" in line and f"it is checkpoint {old.id}" in line and "rollback" in line
    assert f"resume and %restore use {old.id}" in out


def test_verify_a_healthy_store_exits_zero(ck, capsys):
    jp.checkpoint(namespace={"x": 1}, **ck)
    assert main(["verify", "--dir", ck["dir"]]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.fixture
def ip(ck, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("JPY_SESSION_NAME", ck["notebook"])
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_pause")
    yield shell
    InteractiveShell.clear_instance()


def test_restore_magic_falls_back_and_partial_skips_the_damaged(ip, ck, damaged, capsys):
    good, bad = damaged
    ip.run_line_magic("restore", f"--dir {ck['dir']} -q")
    out = capsys.readouterr().out
    assert f"checkpoint {bad} was passed over" in out and f"restored {good} instead" in out
    ip.user_ns.pop("model")
    with pytest.warns(UserWarning):
        ip.run_line_magic("restore", f"{bad} --partial --dir {ck['dir']} -q")
    err = capsys.readouterr().err
    assert "not restored model" in err and "damaged" in err
    assert "model" not in ip.user_ns and np.array_equal(ip.user_ns["arr"], np.arange(10.0))
