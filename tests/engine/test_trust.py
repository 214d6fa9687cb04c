"""Checkpoints you can trust: corruption never spreads into a later checkpoint, malformed
metadata never crashes, a checkpoint belongs to one notebook and one user, files are
private, and restore falls back by itself to the newest checkpoint that verifies."""

from __future__ import annotations

import json
import os
import shutil
import stat

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jupyter_pause as jp
from jupyter_pause.engine import checks, durable, errors, paths, plan, signing, store
from jupyter_pause.engine import lazy as lazy_mod


def flip_tensor_byte(nbdir, m, owner, offset=3):
    """Flip one byte inside the data of ``owner``'s first tensor (in place, like bit rot)."""
    s = next(s for s in m.storages if s.owner == owner)
    start, _, header = checks.read_safetensors_header(nbdir / s.file)
    pos = start + header[s.key]["data_offsets"][0] + offset
    with open(nbdir / s.file, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x10]))
    return s.file


def fresh(ck):
    """Restore into a new namespace, as a fresh kernel would."""
    ns: dict = {}
    return jp.restore(namespace=ns, progress=False, **ck), ns


# ------------------------------------------------------------ corruption never spreads
@pytest.mark.parametrize("owner", ["model", "small"])  # its own blob / the shared small one
def test_reuse_never_references_a_damaged_blob(ck, nbdir, owner):
    ns = {"model": torch.nn.Linear(512, 512), "small": np.arange(10.0), "cfg": {"lr": 0.1}}
    a = jp.checkpoint(namespace=ns, **ck)
    rel = flip_tensor_byte(nbdir, store.get_manifest(ck["dir"], ck["notebook"], a.id), owner)
    b = jp.checkpoint(namespace=ns, **ck)  # nothing changed: everything would be reused
    assert any(rel in q for q in b.quarantined), b.quarantined
    assert "found damaged and wrote again from memory" in b.summary()
    store.verify_checkpoint(ck["dir"], ck["notebook"], b.id)  # intact: rewritten from memory
    _, got = fresh({**ck})
    assert torch.equal(got["model"].weight, ns["model"].weight)
    assert np.array_equal(got["small"], ns["small"])
    # the damaged copy is kept aside for a post-mortem, with the reason
    qdir = nbdir / checks.QUARANTINE
    whys = [p.read_text() for p in qdir.iterdir() if p.name.endswith(".why")]
    assert any(rel in w for w in whys)


def test_truncated_blob_is_not_reused(ck, nbdir):
    ns = {"w": torch.arange(4096.0)}
    a = jp.checkpoint(namespace=ns, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"], a.id)
    path = nbdir / m.storages[0].file
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 100)
    b = jp.checkpoint(namespace=ns, **ck)
    assert b.quarantined and b.bytes_written > 4096 * 4
    store.verify_checkpoint(ck["dir"], ck["notebook"], b.id)


def test_restore_falls_back_to_the_newest_that_verifies_and_says_so(ck, nbdir):
    ns = {"w": torch.arange(1000.0), "note": "first"}
    a = jp.checkpoint(namespace=ns, **ck)
    ns.update(w=torch.arange(1000.0) * 2, note="second")
    b = jp.checkpoint(namespace=ns, **ck)
    flip_tensor_byte(nbdir, store.get_manifest(ck["dir"], ck["notebook"], b.id), "w")
    res, got = fresh(ck)
    assert res.id == a.id and got["note"] == "first"
    assert list(res.passed_over) == [b.id] and "'w' is corrupt" in res.passed_over[b.id]
    assert any(f"restored {a.id} instead" in n for n in res.notes)
    with pytest.raises(errors.CorruptCheckpoint):  # an explicit id never falls back
        jp.restore(b.id, namespace={}, progress=False, **ck)


def test_when_nothing_verifies_the_newest_error_names_the_others(ck, nbdir):
    ns = {"w": torch.arange(1000.0)}
    a = jp.checkpoint(namespace=ns, **ck)
    ns["w"] = torch.arange(1000.0) + 1
    b = jp.checkpoint(namespace=ns, **ck)
    for cid in (a.id, b.id):
        flip_tensor_byte(nbdir, store.get_manifest(ck["dir"], ck["notebook"], cid), "w")
    with pytest.raises(errors.CorruptCheckpoint, match=f"newer checkpoints failed too: {b.id}"):
        jp.restore(namespace={}, progress=False, **ck)


def test_partial_restore_names_and_skips_the_damaged_objects(ck, nbdir):
    ns = {"model": torch.nn.Linear(512, 512), "arr": np.arange(10.0), "cfg": {"a": 1}}
    res = jp.checkpoint(namespace=ns, **ck)
    flip_tensor_byte(nbdir, store.get_manifest(ck["dir"], ck["notebook"], res.id), "model")
    with pytest.raises(errors.CorruptCheckpoint, match="'model'"):
        jp.restore(res.id, namespace={}, progress=False, **ck)
    got: dict = {}
    with pytest.warns(UserWarning, match="model"):
        out = jp.restore(res.id, namespace=got, partial=True, progress=False, **ck)
    assert set(out.failed) == {"model"} and "damaged" in out.failed["model"]
    assert sorted(out.restored) == ["arr", "cfg"] and "model" not in got
    assert np.array_equal(got["arr"], ns["arr"]) and got["cfg"] == {"a": 1}


def test_scrub_reports_each_checkpoint(ck, nbdir):
    ns = {"w": torch.arange(1000.0), "shared": np.arange(5.0)}
    a = jp.checkpoint(namespace=ns, **ck)
    ns["w"] = torch.arange(1000.0) * 3
    b = jp.checkpoint(namespace=ns, **ck)
    flip_tensor_byte(nbdir, store.get_manifest(ck["dir"], ck["notebook"], b.id), "w")
    report = {i.id: i for i in store.scrub(nbdir)}
    assert report[a.id].status == "ok" and report[b.id].status == "damaged"
    assert "'w'" in report[b.id].problem


# ------------------------------------------------------------ malformed metadata
def test_non_utf8_signature_is_listed_as_damaged_and_skipped(ck, nbdir):
    a = jp.checkpoint(namespace={"x": 1}, **ck)
    b = jp.checkpoint(namespace={"x": 2}, **ck)
    (nbdir / b.id / "manifest.sig").write_bytes(b"\xff\xfe not a signature")
    listed = {i.id: i for i in jp.list_checkpoints(ck["dir"], ck["notebook"])}
    assert listed[b.id].status == "damaged" and not listed[b.id].trusted
    assert store.latest_checkpoint(ck["dir"], ck["notebook"]).id == a.id
    c = jp.checkpoint(namespace={"x": 3}, **ck)  # later checkpoints keep working
    assert fresh(ck)[0].id == c.id


def test_bit_rotted_manifest_reads_as_damaged_not_tampered(ck, nbdir):
    a = jp.checkpoint(namespace={"x": 1}, **ck)
    path = nbdir / a.id / "manifest.json"
    data = bytearray(path.read_bytes())
    data[data.index(b'"created"') + 20] ^= 0x01  # one bit, inside a string
    path.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptCheckpoint, match="damaged on disk") as ei:
        jp.restore(a.id, namespace={}, progress=False, **ck)
    assert "tampered" not in str(ei.value) and "trust=True" not in str(ei.value)
    (info,) = jp.list_checkpoints(ck["dir"], ck["notebook"])
    assert info.status == "damaged"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    which=st.sampled_from(["manifest.json", "manifest.sig"]),
    junk=st.one_of(
        st.binary(max_size=64),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
            max_leaves=8,
        ).map(lambda v: json.dumps(v).encode()),
    ),
)
def test_any_malformed_metadata_is_listed_never_a_crash(tmp_path_factory, which, junk):
    ck = {"dir": str(tmp_path_factory.mktemp("ck")), "notebook": "nb"}
    nbdir = paths.notebook_dir(**ck)
    a = jp.checkpoint(namespace={"x": 1}, progress=False, **ck)
    b = jp.checkpoint(namespace={"x": 2}, progress=False, **ck)
    (nbdir / b.id / which).write_bytes(junk)
    listed = {i.id: i for i in jp.list_checkpoints(**ck)}
    assert listed[b.id].status in ("damaged", "untrusted") and listed[a.id].status == "ok"
    assert fresh(ck)[0].id == a.id  # falls back
    jp.checkpoint(namespace={"x": 3}, progress=False, **ck)


def test_a_manifest_with_wrong_types_is_damaged(ck, nbdir):
    a = jp.checkpoint(namespace={"x": 1}, **ck)
    m = json.loads((nbdir / a.id / "manifest.json").read_text())
    m["objects"]["x"]["dump"] = 99  # out of range, then re-signed as if by this user
    data = json.dumps(m).encode()
    (nbdir / a.id / "manifest.json").write_bytes(data)
    (nbdir / a.id / "manifest.sig").write_bytes(
        signing.sign_manifest(data, signing.load_key()).to_bytes()
    )
    (info,) = jp.list_checkpoints(ck["dir"], ck["notebook"])
    assert info.status == "damaged" and "malformed" in info.problem


# ------------------------------------------------------------ one notebook, one user
def test_replayed_checkpoint_of_another_notebook_is_untrusted(ck, nbdir, tmp_path):
    other = {"dir": ck["dir"], "notebook": "other.ipynb"}
    theirs = jp.checkpoint(namespace={"secret": "other notebook"}, **other)
    mine = jp.checkpoint(namespace={"secret": "mine"}, **ck)
    other_dir = paths.notebook_dir(**other)
    replay = "2099-01-01T00-00-00"  # newer than anything: it would be picked first
    shutil.copytree(other_dir / theirs.id, nbdir / replay)
    for blob in (other_dir / "blobs").iterdir():
        shutil.copy(blob, nbdir / "blobs" / blob.name)
    listed = {i.id: i for i in jp.list_checkpoints(ck["dir"], ck["notebook"])}
    assert not listed[replay].trusted and "other.ipynb" in listed[replay].problem
    with pytest.raises(errors.UntrustedCheckpoint) as ei:
        jp.restore(replay, namespace={}, progress=False, **ck)
    assert ei.value.kind == "other-notebook"
    res, got = fresh(ck)
    assert res.id == mine.id and got["secret"] == "mine" and replay in res.passed_over


def roll_back(nbdir, older: str, newer: str) -> None:
    """Copy checkpoint ``older``'s signed files over ``newer``'s: each still signs fine."""
    for name in ("manifest.json", "manifest.sig", "objects.pkl"):
        shutil.copyfile(nbdir / older / name, nbdir / newer / name)


@pytest.mark.parametrize("lazy", [False, True])
def test_an_older_checkpoint_copied_over_the_newest_is_refused_as_a_rollback(ck, nbdir, lazy):
    """Issue #37: the older state, copied over the newest checkpoint's files, used to be
    listed ``ok`` under the newest id and restored by it with no word. Now the manifest's
    id, which its signature covers, must be the folder's."""
    old = jp.checkpoint(namespace={"x": 1, "w": torch.arange(4.0)}, **ck)
    new = jp.checkpoint(namespace={"x": 2, "w": torch.arange(5.0)}, **ck)
    roll_back(nbdir, old.id, new.id)

    listed = {i.id: i for i in jp.list_checkpoints(ck["dir"], ck["notebook"])}
    assert listed[old.id].status == "ok"
    assert listed[new.id].status == "untrusted" and not listed[new.id].trusted
    assert old.id in listed[new.id].problem and "rollback" in listed[new.id].problem
    with pytest.raises(errors.UntrustedCheckpoint) as ei:
        jp.restore(new.id, namespace={}, progress=False, lazy=lazy, **ck)
    assert ei.value.kind == "other-checkpoint"

    ns: dict = {}  # without an id: the newest that verifies, and why the other was not
    res = jp.restore(namespace=ns, progress=False, lazy=lazy, **ck)
    lazy_mod.wait()
    assert res.id == old.id and ns["x"] == 1 and torch.equal(ns["w"], torch.arange(4.0))
    assert "rollback" in res.passed_over[new.id]
    assert f"restored {old.id} instead, the newest checkpoint that verifies" in res.notes

    chosen = plan.choose_for_resume(ck["dir"], ck["notebook"])
    assert chosen.id == old.id and "rollback" in chosen.passed_over[new.id]
    assert plan.choose_for_resume(ck["dir"], ck["notebook"], new.id) is None
    scrubbed = {i.id: i for i in store.scrub(nbdir)}
    assert scrubbed[new.id].status == "untrusted" and old.id in scrubbed[new.id].problem
    assert scrubbed[old.id].status == "ok"
    assert store.latest_checkpoint(ck["dir"], ck["notebook"], verify=True).id == old.id


def test_checkpoint_of_another_owner_is_untrusted(ck, nbdir, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    a = jp.checkpoint(namespace={"x": 1}, **ck)
    alice_dir = paths.notebook_dir(ck["dir"], ck["notebook"])
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")  # same key, another owner
    bob_dir = paths.notebook_dir(ck["dir"], ck["notebook"])
    assert bob_dir != alice_dir
    durable.makedirs(bob_dir.parent)  # bob's own folder (one open to others is refused)
    shutil.copytree(alice_dir, bob_dir)
    with pytest.raises(errors.UntrustedCheckpoint) as ei:
        jp.restore(a.id, namespace={}, progress=False, **ck)
    assert ei.value.kind == "other-owner" and "alice" in str(ei.value)


def test_rebind_after_a_rename(ck, nbdir):
    a = jp.checkpoint(namespace={"x": 41}, **ck)
    moved = store.rebind(ck["dir"], ck["notebook"], "work/renamed.ipynb")
    assert moved == [a.id] and not nbdir.exists()
    got: dict = {}
    jp.restore(namespace=got, dir=ck["dir"], notebook="work/renamed.ipynb", progress=False)
    assert got["x"] == 41


def test_files_and_folders_are_private_whatever_the_umask(ck, nbdir):
    old = os.umask(0)
    try:
        jp.checkpoint(namespace={"token": "s3cret", "w": torch.arange(10.0)}, **ck)
        jp.checkpoint(namespace={"token": "s3cret", "w": torch.arange(11.0)}, **ck)
    finally:
        os.umask(old)
    user_root = paths.user_root(ck["dir"])
    seen = 0
    for path in [user_root, *user_root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
        seen += 1
    assert seen > 8
    assert stat.S_IMODE(signing.key_path().stat().st_mode) == 0o600


def test_shared_root_users_never_touch_each_others_checkpoints(tmp_path, monkeypatch):
    root = str(tmp_path / "shared")

    def become(user):
        monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / f"data-{user}"))  # own key
        if user:
            monkeypatch.setenv("JUPYTERHUB_USER", user)
        else:
            monkeypatch.delenv("JUPYTERHUB_USER", raising=False)

    become("alice")
    alice = jp.checkpoint(namespace={"x": "alice"}, dir=root, notebook="nb.ipynb", progress=False)
    become("bob")
    for i in range(3):
        jp.checkpoint(namespace={"x": i}, dir=root, notebook="nb.ipynb", keep=1, progress=False)
    assert paths.notebook_dir(root, "nb.ipynb") != alice_dir(root, monkeypatch)
    become("alice")
    assert [i.id for i in jp.list_checkpoints(root, "nb.ipynb")] == [alice.id]


def alice_dir(root, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("JUPYTERHUB_USER", "alice")
        return paths.notebook_dir(root, "nb.ipynb")


def test_same_unix_user_other_key_is_never_expired_or_deleted(tmp_path, monkeypatch, ck):
    """Two servers running as the same user name (e.g. jovyan) on one volume, each with its
    own key: retention and delete leave the other's checkpoints alone."""
    first = jp.checkpoint(namespace={"x": "first"}, **ck)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "other-data"))  # another key
    for i in range(3):
        jp.checkpoint(namespace={"x": i}, keep=1, **ck)
    ids = [i.id for i in jp.list_checkpoints(ck["dir"], ck["notebook"])]
    assert first.id in ids and len(ids) == 2
    with pytest.raises(errors.ForeignCheckpoint, match="not deleted"):
        store.delete_checkpoint(ck["dir"], ck["notebook"], first.id)


# ------------------------------------------------------------ key problems
def test_regenerated_key_says_so_not_tampering(ck):
    a = jp.checkpoint(namespace={"x": 1}, **ck)
    signing.key_path().unlink()
    signing.load_key()  # a new key
    with pytest.raises(errors.UntrustedCheckpoint) as ei:
        jp.restore(a.id, namespace={}, progress=False, **ck)
    text = str(ei.value)
    assert ei.value.kind == "other-key" and ei.value.foreign
    # it names the key it needs, this server's, and where the needed one must go
    assert f"signed with the key whose fingerprint is {ei.value.key_id}, not" in text
    assert f"copy the key with fingerprint {ei.value.key_id} to {signing.key_path()}" in text
    assert "created at" in text and "not damaged" in text
    assert "tamper" not in text and "altered" not in text and "corrupt" not in text.lower()
    (info,) = jp.list_checkpoints(ck["dir"], ck["notebook"])
    assert info.status == "untrusted" and "fingerprint" in info.problem


def test_missing_key_says_so(ck):
    a = jp.checkpoint(namespace={"x": 1}, **ck)
    signing.key_path().unlink()
    with pytest.raises(errors.UntrustedCheckpoint, match="this server has no key") as ei:
        jp.restore(a.id, namespace={}, progress=False, **ck)
    assert ei.value.kind == "no-key" and ei.value.key_id
    assert f"copy the key with fingerprint {ei.value.key_id} to" in str(ei.value)


@pytest.mark.parametrize("damage", ["empty", "unreadable"])
def test_unusable_key_file_gets_its_own_error(ck, damage):
    jp.checkpoint(namespace={"x": 1}, **ck)
    path = signing.key_path()
    path.unlink()
    if damage == "empty":
        path.write_bytes(b"")
    else:
        path.mkdir()  # unreadable as a file, even for root
    with pytest.raises(errors.KeyProblem, match="signing key .* is unusable") as ei:
        jp.checkpoint(namespace={"x": 2}, **ck)
    assert "check the disk" not in str(ei.value)
    listed = jp.list_checkpoints(ck["dir"], ck["notebook"])  # listing still works
    assert listed[0].status == "untrusted" and "unusable" in listed[0].problem
