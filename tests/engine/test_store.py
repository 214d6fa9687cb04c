"""Atomic commit (SIGKILL mid-write), listing, retention, GC, delete, verify, torch-free store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import checks, errors, paths, store


def test_ids_are_utc_seconds_with_suffix(ck):
    a = jp.checkpoint(namespace={"x": 1}, **ck)
    b = jp.checkpoint(namespace={"x": 2}, **ck)
    assert paths.is_checkpoint_id(a.id) and paths.is_checkpoint_id(b.id)
    assert a.id != b.id
    ids = [i.id for i in jp.list_checkpoints(ck["dir"], ck["notebook"])]
    assert ids == sorted(ids, key=paths.id_sort_key) and ids[-1] == b.id
    assert sorted(["2026-01-01T00-00-00-10", "2026-01-01T00-00-00-2"], key=paths.id_sort_key)[
        0
    ].endswith("-2")


def test_notebook_folder_is_safe(tmp_path):
    root = tmp_path / "root"
    for key in ["../../etc/passwd", "/abs/path.ipynb", "..", "a/../../b", "nb\x00x", "ü.ipynb"]:
        d = paths.notebook_dir(root, key)
        assert d.parent == paths.user_root(root) and ".." not in d.name and "/" not in d.name
        assert d.parent.parent == root
    assert paths.notebook_dir(root, "a/b.ipynb") != paths.notebook_dir(root, "a_b.ipynb")
    with pytest.raises(ValueError):
        paths.check_id("../x")


def test_default_root_and_notebook_from_env(tmp_path, monkeypatch):
    monkeypatch.delenv("JUPYTER_PAUSE_CHECKPOINT_DIR")
    monkeypatch.setenv("JPY_SESSION_NAME", "work/env.ipynb")
    res = jp.checkpoint(namespace={"x": 1}, progress=False)
    expected = tmp_path / "jupyter-data" / "pause" / "checkpoints"
    assert res.path.startswith(str(expected)) and res.notebook == "work/env.ipynb"


WRITER = """
import os, sys, time
import numpy as np
import jupyter_pause as jp
from jupyter_pause.engine import tensors
real = tensors.write_all
state = {"n": 0}
def slow_write(f, data):
    real(f, data)
    state["n"] += 1
    if state["n"] == 3:                      # header + some data are on disk
        open(sys.argv[1], "w").close()
        time.sleep(60)
tensors.write_all = slow_write
big = np.full(3_000_000, 7.0)
jp.checkpoint(namespace={"big": big, "x": 2}, dir=sys.argv[2], notebook="nb", progress=False)
"""


def test_sigkill_mid_checkpoint_leaves_previous_intact(tmp_path):
    root = tmp_path / "ck"
    jp.checkpoint(namespace={"big": np.zeros(10), "x": 1}, dir=root, notebook="nb", progress=False)
    marker = tmp_path / "writing"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(marker), str(root)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, "writer exited early"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    nbdir = paths.notebook_dir(root, "nb")
    assert any(p.name.startswith(checks.TMP_PREFIX) for p in nbdir.iterdir())  # half-written
    infos = jp.list_checkpoints(root, "nb")
    assert len(infos) == 1  # the half-written one is not listed
    out = {}
    jp.restore(namespace=out, dir=root, notebook="nb", progress=False)
    assert out["x"] == 1 and out["big"].shape == (10,)
    assert store.latest_checkpoint(root, "nb", verify=True).id == infos[0].id
    # the next checkpoint cleans the dead writer's temp folder
    jp.checkpoint(namespace={"x": 3}, dir=root, notebook="nb", progress=False)
    assert not any(p.name.startswith(checks.TMP_PREFIX) for p in nbdir.iterdir())


def test_retention_and_gc(ck, nbdir):
    ids = []
    for i in range(4):
        ids.append(jp.checkpoint(namespace={"a": np.full(1000, i)}, keep=2, **ck).id)
    assert [c.id for c in jp.list_checkpoints(ck["dir"], ck["notebook"])] == ids[-2:]
    refs = checks.referenced_files(nbdir)
    blobs = {f"blobs/{p.name}" for p in (nbdir / "blobs").iterdir()}
    assert blobs == refs  # unreferenced blobs were collected


def test_expiry_deletes_old_checkpoints_but_the_newest_and_their_blobs(ck, nbdir):
    ids = [jp.checkpoint(namespace={"a": np.full(1000, i)}, keep=5, **ck).id for i in range(3)]
    label = f"{nbdir.name}/{{}}".format
    week = 7 * 86400

    assert store.expire(ck["dir"], week).deleted == []  # all made just now
    later = time.time() + 2 * week
    dry = store.expire(ck["dir"], week, dry_run=True, now=later)
    assert dry.deleted == [label(ids[0]), label(ids[1])] and dry.kept == [label(ids[2])]
    assert [c.id for c in jp.list_checkpoints(ck["dir"], ck["notebook"])] == ids

    done = store.expire(ck["dir"], week, now=later)
    assert done.to_json() == {**dry.to_json(), "errors": []}
    assert [c.id for c in jp.list_checkpoints(ck["dir"], ck["notebook"])] == ids[-1:]
    blobs = {f"blobs/{p.name}" for p in (nbdir / "blobs").iterdir()}
    assert blobs == checks.referenced_files(nbdir)  # the deleted ones' blobs went with them


def test_keep_from_env(ck, monkeypatch):
    monkeypatch.setenv("JUPYTER_PAUSE_KEEP", "1")
    for i in range(3):
        jp.checkpoint(namespace={"a": i}, **ck)
    assert len(jp.list_checkpoints(ck["dir"], ck["notebook"])) == 1


def test_delete_latest_and_metadata(ck, nbdir):
    a = jp.checkpoint(namespace={"a": np.ones(5)}, metadata={"pause_nonce": "n1"}, **ck)
    b = jp.checkpoint(namespace={"a": np.zeros(5)}, metadata={"pause_nonce": "n2"}, **ck)
    latest = store.latest_checkpoint(ck["dir"], ck["notebook"])
    assert latest.id == b.id and latest.metadata == {"pause_nonce": "n2"}
    assert latest.objects == ["a"] and latest.bytes > 0 and latest.time.endswith("+00:00")
    store.delete_checkpoint(ck["dir"], ck["notebook"], b.id)
    assert [c.id for c in jp.list_checkpoints(ck["dir"], ck["notebook"])] == [a.id]
    assert set(f"blobs/{p.name}" for p in (nbdir / "blobs").iterdir()) == checks.referenced_files(
        nbdir
    )
    r = jp.restore(namespace={}, **ck)
    assert r.metadata == {"pause_nonce": "n1"}
    with pytest.raises(errors.CheckpointNotFound):
        store.delete_checkpoint(ck["dir"], ck["notebook"], b.id)
    with pytest.raises(ValueError):
        store.delete_checkpoint(ck["dir"], ck["notebook"], "../../x")


def test_verify_names_corrupt_object(ck, nbdir):
    res = jp.checkpoint(namespace={"model": torch.nn.Linear(64, 64), "arr": np.arange(10.0)}, **ck)
    assert store.verify_checkpoint(ck["dir"], ck["notebook"], res.id).id == res.id
    m = store.get_manifest(ck["dir"], ck["notebook"])
    weight = next(s for s in m.storages if s.owner == "model")
    start, _, header = checks.read_safetensors_header(nbdir / weight.file)
    pos = start + header[weight.key]["data_offsets"][0] + 5
    with open(nbdir / weight.file, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(errors.CorruptCheckpoint) as ei:
        store.verify_checkpoint(ck["dir"], ck["notebook"], res.id)
    assert ei.value.name == "model" and weight.file in ei.value.file
    assert store.latest_checkpoint(ck["dir"], ck["notebook"], verify=True) is None
    assert store.latest_checkpoint(ck["dir"], ck["notebook"]) is not None  # cheap check passes


def test_store_importable_without_torch(ck):
    jp.checkpoint(namespace={"t": torch.ones(3)}, **ck)
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None; sys.modules["numpy"] = None; sys.modules["safetensors"] = None
        from jupyter_pause.engine import checks, store
        infos = store.list_checkpoints({ck["dir"]!r}, {ck["notebook"]!r})
        assert len(infos) == 1 and infos[0].objects == ["t"], infos
        store.verify_checkpoint({ck["dir"]!r}, {ck["notebook"]!r})
        assert store.latest_checkpoint({ck["dir"]!r}, {ck["notebook"]!r}, verify=True).id == infos[0].id
        print("OK")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr
