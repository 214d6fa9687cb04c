"""Bundles (engine/bundle.py): a checkpoint moved to another person or environment.

"Another person" is another Jupyter data folder (so another signing key), another
checkpoint root and another ``$JUPYTERHUB_USER``. Nothing in a bundle is unpickled by an
import; a tampered one, or one with a name outside the bundle's, is refused before
anything reaches the store."""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import jupyter_pause as jp
from jupyter_pause.engine import bundle, checks, durable, errors, paths, signing, store
from jupyter_pause.engine.manifest import Manifest

NB = "work/demo.ipynb"
NOTEBOOK = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


class Planted:
    """Unpickling it creates a file: the proof that a pickle was loaded."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def become(monkeypatch, tmp_path: Path, who: str) -> Path:
    """Switch to user ``who``: their own data folder (key), checkpoint root and folder."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / who / "data"))
    monkeypatch.setenv(paths.ENV_DIR, str(tmp_path / who / "ck"))
    monkeypatch.setenv("JUPYTERHUB_USER", who)
    home = tmp_path / who / "notebooks"
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(home)
    return home


@pytest.fixture
def exported(tmp_path, monkeypatch):
    """alice's checkpoint of NB, exported: (bundle path, checkpoint id)."""
    home = become(monkeypatch, tmp_path, "alice")
    (home / "work").mkdir()
    (home / NB).write_text(NOTEBOOK)
    ns = {"x": 42, "arr": np.arange(1 << 18, dtype=np.float64), "cfg": {"lr": 0.1}}
    cid = jp.checkpoint(namespace=ns, notebook=NB, progress=False).id
    out = tmp_path / "demo.bundle"
    done = bundle.export(out, home / NB, notebook=NB)
    assert done.checkpoint == cid and done.key_id == signing.key_id(signing.load_key())
    assert os.stat(out).st_mode & 0o777 == 0o600  # a namespace holds secrets
    return out, cid


def restored(notebook: str = NB) -> dict:
    ns: dict = {}
    jp.restore(namespace=ns, notebook=notebook, progress=False, lazy=False)
    return ns


def rewrite(src: Path, dst: Path, change) -> Path:
    """A copy of bundle ``src`` with ``change(name, data) -> [(name, data), ...]``."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            for name, data in change(info.filename, z.read(info)):
                out.writestr(name, data)
    return dst


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def test_the_same_user_elsewhere_imports_without_trust(exported, tmp_path, monkeypatch):
    path, cid = exported
    key = (tmp_path / "alice" / "data" / "pause" / "secret").read_bytes()
    home = become(monkeypatch, tmp_path, "alice-laptop")  # another machine, the key copied
    durable.makedirs(signing.key_path().parent)
    signing.key_path().write_bytes(key)
    done = bundle.import_bundle(path)
    assert not done.trusted and done.notebook_written and (home / NB).read_text() == NOTEBOOK
    m = store.get_manifest(notebook=NB)  # verifies with this key, bound to this user
    assert m.owner == "alice-laptop" and m.metadata[bundle.IMPORTED]["checkpoint"] == cid
    ns = restored()
    assert ns["x"] == 42 and ns["cfg"] == {"lr": 0.1} and ns["arr"][-1] == (1 << 18) - 1


def test_an_older_checkpoint_copied_over_the_newest_is_not_exported_as_it(tmp_path, monkeypatch):
    """Issue #37: exported by the newest id, or as the newest, the rolled-back files used
    to leave as that checkpoint."""
    from .test_trust import roll_back

    home = become(monkeypatch, tmp_path, "alice")
    (home / "work").mkdir()
    (home / NB).write_text(NOTEBOOK)
    old = jp.checkpoint(namespace={"x": 1}, notebook=NB, progress=False).id
    new = jp.checkpoint(namespace={"x": 2}, notebook=NB, progress=False).id
    roll_back(paths.notebook_dir(None, NB), old, new)
    with pytest.raises(errors.UntrustedCheckpoint, match="rollback"):
        bundle.export(tmp_path / "new.bundle", home / NB, notebook=NB, checkpoint_id=new)
    assert not (tmp_path / "new.bundle").exists()
    assert bundle.export(tmp_path / "b", home / NB, notebook=NB).checkpoint == old


def test_another_persons_bundle_is_refused_until_trusted(exported, tmp_path, monkeypatch):
    path, cid = exported
    home = become(monkeypatch, tmp_path, "bob")
    with pytest.raises(errors.BundleRefused) as refused:
        bundle.import_bundle(path)
    e = refused.value
    assert e.kind == "other-key" and "Nothing was imported" in str(e)
    alice = json.loads(zipfile.ZipFile(path).read(bundle.HEADER))["origin"]
    for shown in (alice["key_id"], "alice", alice["host"], alice["time"], "--trust", "sha256:"):
        assert shown in str(e)
    assert not (home / NB).exists() and not paths.notebook_dir(None, NB).exists()
    assert not signing.key_path().exists()  # a refused import writes nothing, not even a key

    done = bundle.import_bundle(path, trust=True)
    assert done.trusted and done.origin.user == "alice" and done.notebook_file == home / NB
    infos = store.list_checkpoints(notebook=NB)
    assert [(i.id, i.status) for i in infos] == [(done.checkpoint, "ok")]  # bob's now
    assert store.get_manifest(notebook=NB).metadata[bundle.IMPORTED]["trust"] == "--trust"
    store.verify_checkpoint(notebook=NB, checkpoint_id=done.checkpoint)
    ns = restored()
    assert ns["x"] == 42 and np.array_equal(ns["arr"], np.arange(1 << 18, dtype=np.float64))

    # imported again: the notebook file is the same (left alone), the checkpoint a new one
    again = bundle.import_bundle(path, trust=True)
    assert not again.notebook_written and again.checkpoint != done.checkpoint


def test_a_pickle_is_never_loaded_by_an_import(tmp_path, monkeypatch):
    home = become(monkeypatch, tmp_path, "mallory")
    (home / "nb.ipynb").write_text(NOTEBOOK)
    marker = tmp_path / "pickle-ran"
    jp.checkpoint(namespace={"p": Planted(str(marker))}, notebook="nb.ipynb", progress=False)
    # the checkpoint loaded the record back once, in mallory's own process (records.py,
    # TRIAL_MAX): what matters is that nothing on bob's side ever does
    marker.unlink()
    out = bundle.export(tmp_path / "evil.bundle", home / "nb.ipynb", notebook="nb.ipynb").path

    become(monkeypatch, tmp_path, "bob")
    with pytest.raises(errors.BundleRefused, match="another key"):
        bundle.import_bundle(out)
    assert not marker.exists(), "a refused import unpickled the bundle"
    bundle.import_bundle(out, trust=True)
    assert not marker.exists(), "an import unpickled the bundle"
    restored("nb.ipynb")  # trusted, restored: now it runs (the proof that it would have)
    assert marker.exists()


@pytest.mark.parametrize("what", ["manifest", "blob", "pickle", "notebook", "header"])
def test_a_tampered_bundle_is_refused_before_anything_is_loaded(
    exported, tmp_path, monkeypatch, what
):
    path, _ = exported
    m = Manifest.from_bytes(zipfile.ZipFile(path).read("checkpoint/manifest.json"))
    blob = next(iter(m.files))
    name = {"manifest": "checkpoint/manifest.json", "blob": blob, "pickle": "checkpoint/objects.pkl",
            "notebook": bundle.NOTEBOOK, "header": bundle.HEADER}[what]  # fmt: skip
    at = {"blob": m.files[blob].bytes - 5, "header": 30}.get(what, 20)  # a tensor's data
    bad = rewrite(
        path, tmp_path / "bad.bundle", lambda n, d: [(n, flip(d, at) if n == name else d)]
    )
    # signed with my key; trusted (another's header is vouched for only by its digest)
    for who, trust in (("alice", False), ("bob", True))[: 1 if what == "header" else 2]:
        home = become(monkeypatch, tmp_path, who)
        before = sorted(p.relative_to(home) for p in home.rglob("*"))
        ids = checks.checkpoint_ids(paths.notebook_dir(None, NB))
        with pytest.raises(errors.BundleRefused) as refused:
            bundle.import_bundle(bad, trust=trust)
        assert refused.value.kind in ("damaged", "tampered"), refused.value
        assert checks.checkpoint_ids(paths.notebook_dir(None, NB)) == ids
        assert sorted(p.relative_to(home) for p in home.rglob("*")) == before
        nbdir = paths.notebook_dir(None, NB)
        assert not [p for p in nbdir.glob(".tmp-*")] if nbdir.exists() else True


def test_a_bundle_signed_with_my_key_but_altered_is_tampered(exported, tmp_path, monkeypatch):
    """Rewritten consistently (every hash fixed up), it still fails my key's HMAC."""
    path, _ = exported

    def forge(name, data):
        if name != bundle.HEADER:
            return [(name, data)]
        header = json.loads(data)
        header["origin"]["user"] = "someone-else"
        return [(name, json.dumps(header).encode())]

    bad = rewrite(path, tmp_path / "forged.bundle", forge)
    become(monkeypatch, tmp_path, "alice")
    with pytest.raises(errors.BundleRefused, match="altered after it was signed") as refused:
        bundle.import_bundle(bad)
    assert refused.value.kind == "tampered"


@pytest.mark.parametrize("evil", ["../escaped.txt", "/tmp/abs.txt", "blobs/../../x.safetensors"])
def test_entries_outside_the_bundle_are_refused(exported, tmp_path, monkeypatch, evil):
    path, _ = exported
    bad = rewrite(
        path,
        tmp_path / "slip.bundle",
        lambda n, d: [(n, d)] + ([(evil, b"pwned")] if n == bundle.HEADER else []),
    )
    assert evil in zipfile.ZipFile(bad).namelist()
    home = become(monkeypatch, tmp_path, "bob")
    with pytest.raises(errors.BundleRefused, match="no bundle holds") as refused:
        bundle.import_bundle(bad, trust=True)
    assert refused.value.kind == "unsafe-entry"
    assert not list(tmp_path.rglob("escaped.txt")) and not Path("/tmp/abs.txt").exists()
    assert not paths.notebook_dir(None, NB).exists() and not (home / NB).exists()


def test_a_compressed_entry_is_refused(exported, tmp_path, monkeypatch):
    """A deflated entry may inflate to any size (a zip bomb): bundles are stored."""
    path, _ = exported
    bad = tmp_path / "bomb.bundle"
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as out:
        for info in z.infolist():
            out.writestr(info.filename, z.read(info))
    become(monkeypatch, tmp_path, "bob")
    with pytest.raises(errors.BundleRefused, match="compressed or encrypted") as refused:
        bundle.import_bundle(bad, trust=True)
    assert refused.value.kind == "unsafe-entry"
    assert not paths.notebook_dir(None, NB).exists()


def test_a_notebook_path_outside_the_folder_needs_to(tmp_path, monkeypatch):
    home = become(monkeypatch, tmp_path, "alice")
    (home / "nb.ipynb").write_text(NOTEBOOK)
    jp.checkpoint(namespace={"x": 1}, notebook="../../etc/nb.ipynb", progress=False)
    out = bundle.export(tmp_path / "b.bundle", home / "nb.ipynb", notebook="../../etc/nb.ipynb")
    home = become(monkeypatch, tmp_path, "bob")
    with pytest.raises(errors.BundleRefused, match="--to NOTEBOOK"):
        bundle.import_bundle(out.path, trust=True)
    assert not list(tmp_path.rglob("etc"))
    done = bundle.import_bundle(out.path, trust=True, to="mine/nb.ipynb")
    assert done.notebook_file == home / "mine" / "nb.ipynb" and restored("mine/nb.ipynb")["x"] == 1


def test_a_different_notebook_in_the_way_is_not_overwritten(exported, tmp_path, monkeypatch):
    path, _ = exported
    home = become(monkeypatch, tmp_path, "bob")
    (home / "work").mkdir()
    (home / NB).write_text("bob's own notebook")
    with pytest.raises(errors.BundleRefused, match="exists and differs") as refused:
        bundle.import_bundle(path, trust=True)
    assert refused.value.kind == "notebook-exists"
    assert (home / NB).read_text() == "bob's own notebook"
    assert not checks.checkpoint_ids(paths.notebook_dir(None, NB))
    done = bundle.import_bundle(path, trust=True, to="work/from-alice.ipynb")
    assert (home / "work/from-alice.ipynb").read_text() == NOTEBOOK
    assert (home / NB).read_text() == "bob's own notebook"
    assert restored("work/from-alice.ipynb")["x"] == 42 and done.notebook == "work/from-alice.ipynb"


def test_the_checkpoint_records_the_packages_its_objects_need(tmp_path, monkeypatch):
    become(monkeypatch, tmp_path, "alice")
    ns = {"np": np, "arr": np.zeros(3), "path": Path("/x")}
    jp.checkpoint(namespace=ns, notebook=NB, progress=False)
    m = store.get_manifest(notebook=NB)
    assert m.versions["packages"] == {"numpy": np.__version__}  # pathlib is the stdlib's
    assert bundle.needed_packages(m) == ["numpy"]


def manifest(versions, storages=()) -> Manifest:
    raw = {"format": "jupyter-pause/2", "id": "2026-01-01T00-00-00", "notebook": NB,
           "created": "", "pickle": {"file": "objects.pkl", "bytes": 0, "xxh3": "", "hmac": ""},
           "versions": versions, "modules": {"np": "numpy", "pd": "pandas"},
           "files": {"blobs/a.safetensors": {"bytes": 1, "xxh3": "", "header_xxh3": ""}},
           "storages": [{"file": "blobs/a.safetensors", "key": "k", "nbytes": 8, "xxh3": "",
                         "kind": "torch", "device": d, "dtype": "float32", "shape": [2],
                         "owner": "t"} for d in storages]}  # fmt: skip
    return Manifest.from_bytes(json.dumps(raw).encode())


THEN = {"python": "3.11.7", "torch": "2.5.1+cu124", "cuda": "12.4", "gpu": ["NVIDIA H100 80GB HBM3"],
        "platform": "Linux-a", "numpy": "1.26.4", "packages": {"numpy": "1.26.4", "pandas": "2.2.0"}}  # fmt: skip


def test_which_environment_differences_matter():
    here = bundle.Environment(
        python="3.12.1",
        platform="Linux-b",
        torch="2.6.0",
        cuda="12.6",
        gpu_model="NVIDIA L4",
        packages={"numpy": "1.26.5", "pandas": None, "torch": "2.6.0"},
    )
    notes = {n.what: n for n in bundle.environment_notes(manifest(THEN, ["cuda:0"]), here)}
    assert {w for w, n in notes.items() if n.matters} == {
        "python",
        "gpu",
        "cuda",
        "package torch",
        "package pandas",
    }
    assert {w for w, n in notes.items() if not n.matters} == {"package numpy", "platform"}
    assert "bytecode" in notes["python"].why and "missing" in str(notes["package pandas"])

    # the same minor versions, tensors on the CPU: nothing that matters
    same = dataclasses.replace(
        here,
        python="3.11.9",
        torch="2.5.0",
        packages={"numpy": "1.26.4", "pandas": "2.2.1", "torch": "2.5.0"},
    )
    notes = bundle.environment_notes(manifest(THEN, ["cpu"]), same)
    assert notes and not [n for n in notes if n.matters], notes
    assert {n.what for n in notes} >= {"python", "gpu", "cuda", "package torch"}

    # CUDA tensors and no GPU here
    none = dataclasses.replace(same, gpu_model=None)
    gpu = [n for n in bundle.environment_notes(manifest(THEN, ["cuda:0"]), none) if n.matters]
    assert [n.what for n in gpu] == ["gpu"] and "--device cpu" in gpu[0].why


@pytest.mark.parametrize(
    "to, why",
    [
        ("sub/", "is not a notebook's name"),
        ("notes.txt", "is not a notebook's name"),
        ("a\x00b.ipynb", "control character"),
        ("linked/nb.ipynb", "is a symbolic link"),
        ("linked/deeper/nb.ipynb", "is a symbolic link"),
        ("afile/nb.ipynb", "is not a folder"),
        ("link.ipynb", "is a symbolic link"),
    ],
)
def test_the_notebook_goes_only_to_a_notebook_name_in_folders_of_this_one(
    exported, tmp_path, monkeypatch, to, why
):
    path, _ = exported
    home = become(monkeypatch, tmp_path, "bob")
    outside = tmp_path / "outside"
    outside.mkdir()
    (home / "linked").symlink_to(outside)
    (home / "afile").write_text("a file")
    (home / "link.ipynb").symlink_to(outside / "nb.ipynb")
    with pytest.raises(errors.BundleRefused, match=why) as refused:
        bundle.import_bundle(path, trust=True, to=to)
    assert refused.value.kind == "unsafe-entry"
    assert list(outside.iterdir()) == []  # nothing written through the link
    assert not paths.user_root().exists()  # nothing committed


def test_a_notebook_that_cannot_be_written_commits_no_checkpoint(exported, tmp_path, monkeypatch):
    path, _ = exported
    become(monkeypatch, tmp_path, "bob")
    too_long = "x" * 300 + ".ipynb"  # a name no file system takes
    with pytest.raises(OSError, match="too long"):
        bundle.import_bundle(path, trust=True, to=too_long)
    assert not checks.checkpoint_ids(paths.notebook_dir(None, too_long))
    done = bundle.import_bundle(path, trust=True, to="short.ipynb")  # and nothing in the way
    assert restored("short.ipynb")["x"] == 42 and done.notebook_written
