"""Bad input and bad luck: each error names the object and says what to do; nothing saved is lost."""

from __future__ import annotations

import dataclasses
import errno
import os
import threading

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import api, checks, errors, signing, tensors


def test_unknown_names(ck):
    with pytest.raises(errors.UnknownName, match="'nope'"):
        jp.checkpoint("nope", namespace={"x": 1}, **ck)
    jp.checkpoint(namespace={"x": 1}, **ck)
    with pytest.raises(errors.UnknownName, match="'y'.*Available: x"):
        jp.restore(None, "y", namespace={}, **ck)


def test_a_misspelt_option_is_a_type_error_that_names_it(ck):
    with pytest.raises(TypeError, match=r"checkpoint\(\) got an unexpected keyword argument 'kep'"):
        jp.checkpoint(namespace={"x": 1}, kep=1, **ck)
    jp.checkpoint(namespace={"x": 1}, **ck)
    with pytest.raises(TypeError, match=r"restore\(\) got an unexpected keyword argument 'lazzy'"):
        jp.restore(namespace={}, lazzy=False, **ck)


@pytest.mark.parametrize(
    ("documented", "defaults"),
    [(api.CheckpointOptions, api._CheckpointOptions), (api.RestoreOptions, api._RestoreOptions)],
)
def test_each_documented_option_has_its_default(documented, defaults):
    assert set(documented.__annotations__) == {f.name for f in dataclasses.fields(defaults)}


def test_restore_name_that_was_skipped_says_why(ck):
    jp.checkpoint(namespace={"x": 1, "lock": threading.Lock()}, **ck)
    with pytest.raises(errors.UnknownName, match="skipped when saving: lock: a lock"):
        jp.restore(None, "lock", namespace={}, **ck)


def test_missing_checkpoint(ck):
    with pytest.raises(errors.CheckpointNotFound, match="%checkpoint first"):
        jp.restore(namespace={}, **ck)
    jp.checkpoint(namespace={"x": 1}, **ck)
    with pytest.raises(errors.CheckpointNotFound, match="--list"):
        jp.restore("2020-01-01T00-00-00", namespace={}, **ck)


def test_restore_name_as_first_argument(ck):
    jp.checkpoint(namespace={"x": 1, "y": 2}, **ck)
    out = {}
    res = jp.restore("y", namespace=out, **ck)
    assert out == {"y": 2} and res.restored == ["y"]


def test_disk_full_keeps_previous(ck, nbdir, monkeypatch):
    jp.checkpoint(namespace={"a": np.ones(1000)}, **ck)

    def full(f, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(tensors, "write_all", full)
        with pytest.raises(errors.DiskError, match="disk is full.*previous checkpoint is intact"):
            jp.checkpoint(namespace={"a": np.zeros(1000)}, **ck)
    assert len(jp.list_checkpoints(ck["dir"], ck["notebook"])) == 1
    assert not [p for p in nbdir.iterdir() if p.name.startswith(checks.TMP_PREFIX)]
    out = {}
    jp.restore(namespace=out, **ck)
    assert out["a"].sum() == 1000


def test_unwritable_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(errors.DiskError, match="--dir"):
        jp.checkpoint(namespace={"x": 1}, dir=blocker / "sub", progress=False)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(errors.DiskError, match="not writable"):
            jp.checkpoint(namespace={"x": 1}, dir=ro, progress=False)
    finally:
        ro.chmod(0o700)


def test_tracked_unsavable_fails_whole_checkpoint(ck):
    first = jp.checkpoint(namespace={"x": 1}, **ck)
    jp.track(threading.Lock(), "lock")
    with pytest.raises(errors.UnsavableObject, match="'lock'.*untrack"):
        jp.checkpoint(namespace={"x": 2}, **ck)
    jp.untrack("lock")
    g = (i for i in range(3))
    jp.track(type("Holder", (), {"g": g})(), "holder")  # fails only when pickled
    with pytest.raises(errors.UnsavableObject, match="'holder'"):
        jp.checkpoint(namespace={"x": 2}, **ck)
    assert [c.id for c in jp.list_checkpoints(ck["dir"], ck["notebook"])] == [first.id]


def test_explicit_name_unsavable(ck):
    with pytest.raises(errors.UnsavableObject, match="'g'"):
        jp.checkpoint("g", namespace={"g": (i for i in range(2))}, **ck)


def test_tracked_object_saved_and_retracked(ck):
    obj = {"weights": np.arange(3)}
    jp.track(obj, "state")
    res = jp.checkpoint(namespace={"other": 1}, **ck)
    assert set(res.saved) == {"state", "other"}
    jp.untrack("state")
    out = {}
    jp.restore(namespace=out, **ck)
    assert out["state"]["weights"].tolist() == [0, 1, 2]
    from jupyter_pause.engine.api import tracked

    assert tracked()["state"] is out["state"]
    with pytest.raises(ValueError):
        jp.track(1, "not an identifier")


def test_metadata_must_be_json(ck):
    with pytest.raises(ValueError, match="JSON"):
        jp.checkpoint(namespace={}, metadata={"x": object()}, **ck)


def _fake_cuda_checkpoint(ck, nbdir, device="cuda:3"):
    """Rewrite a CPU checkpoint as if its tensor had been on ``device`` (and re-sign it)."""
    res = jp.checkpoint(namespace={"w": torch.arange(4.0)}, **ck)
    m = checks.read_manifest(nbdir, res.id)
    for s in m.storages:
        if s.owner == "w":
            s.device = device
    data = m.to_bytes()
    (nbdir / res.id / "manifest.json").write_bytes(data)
    (nbdir / res.id / "manifest.sig").write_text(signing.sign(data))


@pytest.mark.skipif(torch.cuda.device_count() > 3, reason="needs a machine without cuda:3")
def test_device_unavailable_and_mapping(ck, nbdir):
    _fake_cuda_checkpoint(ck, nbdir)
    with pytest.raises(errors.DeviceUnavailable, match="'w' was saved on cuda:3.*device='cpu'"):
        jp.restore(namespace={}, **ck)
    for spec in ("cpu", "cuda:3=cpu"):
        out = {}
        jp.restore(namespace=out, device=spec, **ck)
        assert out["w"].device.type == "cpu" and out["w"].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="bad device mapping"):
        jp.restore(namespace={}, device="cuda:3=", **ck)


def test_unsavable_namespace_objects_are_skipped_not_fatal(ck):
    class Local:  # defined in a function: pickled by value, but holds a lock
        def __init__(self):
            self.lock = threading.Lock()

    ns = {"ok": [1, 2], "bad": Local(), "also_ok": {"k": np.ones(2)}}
    res = jp.checkpoint(namespace=ns, **ck)
    assert "lock" in res.skipped["bad"] and set(res.saved) == {"ok", "also_ok"}
