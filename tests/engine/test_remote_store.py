"""Checkpoints in a bucket (engine/remote.py) against a real SeaweedFS on 127.0.0.1:
URLs, the round trip through a fresh cache, dedup, retention, delete, the sweep,
corruption, credentials, a missing bucket and a store killed in the middle of an upload."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import threading
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import obstore
import pytest
import torch

from jupyter_pause.engine import api, checks, errors, paths, plan, remote, store, tensors
from jupyter_pause.engine import mirror as folder_mirror
from jupyter_pause.engine.manifest import PICKLE
from tests.objectstores import FakeGCS, Gate, Seaweed

NB = "work/demo.ipynb"


@pytest.fixture
def url(bucket):
    return f"s3://{bucket}/ck"


@pytest.fixture(params=["s3", "gs"])
def either_url(request):
    """The same test on SeaweedFS and on fake-gcs-server."""
    return request.getfixturevalue("url" if request.param == "s3" else "gs_url")


def client(url):
    return remote.open_store(paths.parse_bucket(url))


def keys(url) -> list[str]:
    return sorted(m["path"] for batch in obstore.list(client(url)) for m in batch)


def mirror(url) -> remote.Remote:
    b = paths.parse_bucket(url)
    nbdir = paths.notebook_dir(b, NB)
    return remote.Remote(b, f"{nbdir.parent.name}/{nbdir.name}")


def new_cache(tmp_path, monkeypatch, name: str) -> Path:
    """Another machine: an empty cache (the user's key came along)."""
    cache = tmp_path / name
    monkeypatch.setenv(paths.ENV_CACHE, str(cache))
    return cache


def state(n: int = 1) -> dict:
    return {
        "__name__": "__main__",
        "model": torch.nn.Linear(256, 256 * n),
        "table": np.arange(300_000, dtype=np.float64) * n,
        "step": n,
    }


# ------------------------------------------------------------------ URLs
@pytest.mark.parametrize(
    "text",
    ["s3:/bucket/ck", "http://example.com/ck", "s3://ab/ck", "s3://Bucket/ck", "gs://b/../x"],
)
def test_a_url_that_is_not_a_store_is_refused_not_taken_as_a_folder(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="checkpoint directory|bucket name|prefix"):
        api.checkpoint(dir=text, notebook=NB, namespace=state(), progress=False)
    monkeypatch.setenv(paths.ENV_DIR, text)
    with pytest.raises(ValueError):
        api.checkpoint(notebook=NB, namespace=state(), progress=False)
    assert list(tmp_path.iterdir()) == []  # no folder named "s3:" or "http:"


def test_bucket_urls_parse_and_cache_privately(monkeypatch, tmp_path):
    monkeypatch.delenv(paths.ENV_CACHE, raising=False)
    b = paths.location("s3://my-bucket//a/b/")
    assert (b.scheme, b.bucket, b.prefix, b.url) == ("s3", "my-bucket", "a/b", "s3://my-bucket/a/b")
    assert b.cache.parent == paths.pause_data_dir() / "checkpoint-cache"
    monkeypatch.setenv(paths.ENV_DIR, "gs://other-bucket")
    assert paths.bucket_of().url == "gs://other-bucket"
    monkeypatch.setenv(paths.ENV_CACHE, str(tmp_path / "c"))
    assert paths.checkpoint_root() == tmp_path / "c"
    assert paths.kernel_env() == {
        paths.ENV_DIR: "gs://other-bucket",
        paths.ENV_CACHE: str(tmp_path / "c"),
    }
    assert paths.bucket_of(str(tmp_path)) is None


# ------------------------------------------------------------------ round trip
@pytest.mark.parametrize("lazy", [False, True])
def test_fresh_cache_restores_from_the_bucket(url, tmp_path, monkeypatch, lazy):
    new_cache(tmp_path, monkeypatch, "node-a")
    ns = state()
    r = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    assert r.store == url and r.bytes_uploaded >= r.bytes_written > 1_000_000
    assert any(k.endswith(f"{r.id}/manifest.sig") for k in keys(url))

    new_cache(tmp_path, monkeypatch, "node-b")
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=lazy)
    api.lazy_mod.wait()
    assert rr.id == r.id and rr.bytes_downloaded > 1_000_000
    assert any("downloaded from " + url in n for n in rr.notes)
    assert torch.equal(out["model"].weight, ns["model"].weight)
    assert np.array_equal(out["table"], ns["table"]) and out["step"] == 1
    assert [c.id for c in store.list_checkpoints(url, NB)] == [r.id]


@pytest.mark.parametrize("lazy", [False, True])
def test_records_kept_apart_come_back_from_the_bucket(url, tmp_path, monkeypatch, lazy):
    """A group whose records are a storage of their own (format 3) and an array of
    strings: both files travel; a re-pause that changes neither uploads neither."""
    new_cache(tmp_path, monkeypatch, "node-a")
    ns = {
        "rows": [{"i": i, "s": str(i)} for i in range(60_000)],
        "words": np.array([f"w{i}" for i in range(10_000)], dtype=object),
        "step": 1,
    }
    first = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    ns["step"] = 2
    second = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    assert first.bytes_uploaded > 1_000_000 and second.bytes_uploaded < 100_000
    new_cache(tmp_path, monkeypatch, "node-b")
    out = {"__name__": "__main__"}
    api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=lazy)
    api.lazy_mod.wait()
    assert out["rows"] == ns["rows"] and list(out["words"]) == list(ns["words"])
    assert out["step"] == 2


def test_one_name_restores_from_the_bucket_with_only_its_files(url, tmp_path, monkeypatch):
    """Restoring a name on a machine without the checkpoint downloads that object's files
    alone, and does not ask for the others (it used to find them missing)."""
    new_cache(tmp_path, monkeypatch, "a")
    ns = large_state()
    r = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    new_cache(tmp_path, monkeypatch, "b")
    out = {"__name__": "__main__"}
    rr = api.restore(r.id, "first", dir=url, notebook=NB, namespace=out, progress=False)
    assert rr.restored == ["first"] and np.array_equal(out["first"], ns["first"])
    nbdir = paths.notebook_dir(url, NB)
    m = checks.read_manifest(nbdir, r.id)
    assert not (nbdir / m.storages[m.objects["second"].storages[0]].file).exists()


def test_a_lazy_restore_downloads_a_file_only_when_its_object_is_read(
    url, seaweed, tmp_path, monkeypatch
):
    """Restore straight from the store: with the download of one large object's file held
    at the store, the restore returns and another object loads; the held one follows once
    its download is let through."""
    new_cache(tmp_path, monkeypatch, "a")
    ns = {
        "__name__": "__main__",
        "first": np.full(3_000_000, 1.0),  # 24 MB: above EAGER_BELOW, read in the background
        "second": np.full(6_000_000, 2.0),  # 48 MB, read after the smaller one
    }
    r = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    m = checks.read_manifest(paths.notebook_dir(url, NB), r.id)
    held = m.storages[m.objects["second"].storages[0]].file
    gate = Gate(seaweed.endpoint, held.rsplit("/", 1)[-1])
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", gate.endpoint)
        new_cache(tmp_path, monkeypatch, "b")
        out = {"__name__": "__main__"}
        rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=True)
        assert set(rr.loading) == {"first", "second"}
        assert api.lazy_mod.wait(["first"]) == {}
        assert np.array_equal(out["first"], ns["first"])
        assert gate.wait_held() and not gate.timed_out  # "second": still held at the store
        assert "second" not in out
        gate.release()
        assert api.lazy_mod.wait() == {}
        assert np.array_equal(out["second"], ns["second"]) and not gate.timed_out
    finally:
        gate.release()
        api.lazy_mod.cancel()
        gate.stop()


def test_a_re_pause_after_a_small_change_uploads_under_a_megabyte(url, tmp_path, monkeypatch):
    new_cache(tmp_path, monkeypatch, "c")
    ns = state()
    first = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    ns["step"] = 2
    second = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    assert first.bytes_uploaded > 2_000_000
    assert 0 < second.bytes_uploaded < 1_000_000
    # the upload is a step of its own on a pause's timeline (issue #41), after the commit
    for result in (first, second):
        assert list(result.phases)[-2:] == ["commit", "upload"], result.phases


def test_a_save_committed_here_is_staged_smallest_file_first_and_only_what_changed(
    url, tmp_path, monkeypatch
):
    """``checkpoint(upload=False)`` commits in the cache alone; ``folder_mirror.delta`` names what
    the bucket lacks of it, smallest first (the pickle and the small objects before the
    tensors: a flush short of time sends them first), after a small change only that
    change; ``folder_mirror.stage`` commits it there."""
    new_cache(tmp_path, monkeypatch, "c")
    bucket = paths.parse_bucket(url)
    nbdir = paths.notebook_dir(bucket, NB)
    ns = state()
    first = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False, upload=False)
    assert first.id not in remote.committed(mirror(url).listing())  # nothing sent yet
    wanted = folder_mirror.delta(bucket, nbdir)
    sizes = [size for _, size in wanted.files]
    assert wanted.checkpoint == first.id and sizes == sorted(sizes) and sizes[-1] > 2_000_000
    assert [n for n, _ in wanted.files].index(f"{first.id}/{PICKLE}") < len(sizes) - 1
    assert folder_mirror.stage(bucket, nbdir, wanted=wanted) == wanted
    assert first.id in remote.committed(mirror(url).listing())
    assert folder_mirror.delta(bucket, nbdir).files == ()

    ns["step"] = 2
    second = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False, upload=False)
    small = folder_mirror.delta(bucket, nbdir)
    assert small.checkpoint == second.id and 0 < small.bytes < 1_000_000


def test_each_blob_is_uploaded_while_the_next_is_written(url, tmp_path, monkeypatch):
    """The upload overlaps the writing of the local copy: the first object's blob is in
    the bucket before the second object's is written (the signature still comes last)."""
    new_cache(tmp_path, monkeypatch, "c")
    ns = {"__name__": "__main__", "a": np.full(2_000_000, 1.0), "b": np.full(2_000_000, 2.0)}
    write = tensors.write_safetensors
    seen_before: list[list[str]] = []

    def write_once_the_previous_blob_is_up(txn, tmp_name, storages, progress=None, phases=None):
        if txn.staged:  # wait (with a deadline) for the blob staged before to be up
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                up = [n for n in mirror(url).listing() if n.startswith("blobs/")]
                if up:
                    break
                time.sleep(0.05)
            seen_before.append(sorted(mirror(url).listing()))
        return write(txn, tmp_name, storages, progress, phases)

    monkeypatch.setattr(tensors, "write_safetensors", write_once_the_previous_blob_is_up)
    r = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    assert seen_before and all(seen_before)
    assert all(n.startswith("blobs/") for n in seen_before[-1])  # no signature yet
    committed, blobs = referenced_in_bucket(url)
    assert committed == [r.id] and len(blobs) >= 2
    assert r.bytes_uploaded > 32_000_000


def test_files_are_uploaded_from_a_mapping_of_them(url, tmp_path, monkeypatch):
    """Each file goes up from a read-only mapping (the page cache the write filled), not
    read through a file object into fresh buffers; a multi-part file and an empty one
    arrive byte for byte."""
    sent = []
    put = obstore.put

    def note(store, key, data, **kwargs):
        if not inspect.isgenerator(data):
            sent.append((key, type(data).__name__))
            return put(store, key, data, **kwargs)
        kinds = set()  # a file of several parts goes as slices of its mapping

        def watched():
            for piece in data:
                kinds.add(type(piece).__name__)
                yield piece

        done = put(store, key, watched(), **kwargs)
        sent.append((key, f"parts of {', '.join(sorted(kinds))}"))
        return done

    monkeypatch.setattr(obstore, "put", note)
    big = tmp_path / "big"
    big.write_bytes(os.urandom(remote.PART + 12345))  # two parts
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    m = mirror(url)
    m.upload([("x/big", big), ("x/empty", empty)])
    assert dict(sent) == {m.key("x/big"): "parts of memoryview", m.key("x/empty"): "bytes"}
    assert bytes(obstore.get(m.store, m.key("x/big")).bytes()) == big.read_bytes()
    assert bytes(obstore.get(m.store, m.key("x/empty")).bytes()) == b""

    sent.clear()  # the early uploads of a checkpoint's blobs too
    new_cache(tmp_path, monkeypatch, "c")
    api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    blobs = {kind for key, kind in sent if "/blobs/" in key}
    assert blobs == {"memoryview"}


def test_an_eager_restore_hashes_what_it_downloads_once(url, tmp_path, monkeypatch):
    """The eager restore hashes every tensor as it reads it: the download is not hashed
    whole before as well (a damaged download is still caught: the corruption test)."""
    new_cache(tmp_path, monkeypatch, "a")
    r = api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    new_cache(tmp_path, monkeypatch, "b")
    whole = []
    check = checks.check_blob
    monkeypatch.setattr(
        checks, "check_blob", lambda p, e, full=False: whole.append(p) if full else check(p, e)
    )
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    assert rr.id == r.id and rr.bytes_downloaded > 1_000_000
    assert whole == []
    assert np.array_equal(out["table"], state()["table"])


@pytest.fixture
def held_copies(monkeypatch):
    """The local copies an eager restore writes once it has returned, held until the
    test sets the event, or until a checkpoint of this process waits for them."""
    go = threading.Event()
    write, wait = folder_mirror._write_copies, folder_mirror.wait_for_copies

    def held(*args):
        go.wait(120)
        write(*args)

    def waited(nbdir):
        if folder_mirror._COPYING.get(str(nbdir)):  # (not the first checkpoint's, with none)
            go.set()
        wait(nbdir)

    monkeypatch.setattr(folder_mirror, "_write_copies", held)
    monkeypatch.setattr(folder_mirror, "wait_for_copies", waited)
    return go


def large_state(n: int = 1) -> dict:
    """Objects a lazy restore reads in the background (24 and 48 MB: above EAGER_BELOW),
    one of them over two ranged GETs, beside small ones it reads before it returns."""
    return {
        **state(n),
        "first": np.full(3_000_000, 1.0 * n),
        "second": torch.full((6_000_000,), 2.0 * n, dtype=torch.float64),
    }


def same_state(out: dict, ns: dict) -> bool:
    return (
        torch.equal(out["model"].weight, ns["model"].weight)
        and np.array_equal(out["table"], ns["table"])
        and np.array_equal(out["first"], ns["first"])
        and torch.equal(out["second"], ns["second"])
        and out["step"] == ns["step"]
    )


@pytest.mark.parametrize("lazy", [False, True])
def test_a_restore_reads_the_bucket_straight_into_memory_then_keeps_a_copy(
    url, tmp_path, monkeypatch, held_copies, lazy
):
    """No tensor file is downloaded to disk and read back: every object is in memory
    before a byte of its file is written here, and the copy comes after, whole and
    verified. Issue #37: a lazy restore too, which reads its large objects in the
    background (it used to download each file to the cache, then read it)."""
    new_cache(tmp_path, monkeypatch, "a")
    ns = large_state()
    r = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    download = remote.Remote.download

    def small_files_only(self, files, progress=None):
        files = list(files)
        assert not [name for name, _, _ in files if name.startswith("blobs/")]
        return download(self, files, progress)

    monkeypatch.setattr(remote.Remote, "download", small_files_only)
    new_cache(tmp_path, monkeypatch, "b")
    nbdir = paths.notebook_dir(url, NB)
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=lazy)
    assert rr.bytes_downloaded > 2_000_000
    assert {"first", "second"} <= set(rr.loading) if lazy else not rr.loading
    assert api.lazy_mod.wait() == {}
    assert same_state(out, ns)
    m = checks.read_manifest(nbdir, r.id)
    assert not [rel for rel in m.files if (nbdir / rel).exists()]  # nothing written yet
    assert not list(nbdir.rglob("*.part-*"))
    held_copies.set()
    folder_mirror.wait_for_copies(nbdir)
    assert not list(nbdir.rglob("*.part-*"))
    for rel, entry in m.files.items():
        assert checks.check_blob(nbdir / rel, entry, full=True) is None, rel


def test_a_lazy_restore_from_the_bucket_fails_only_what_a_damaged_file_holds(
    url, tmp_path, monkeypatch
):
    """A tensor file read in the background that does not match its signed hash fails
    the objects that reach it, which come back from the older checkpoint (a note says
    so); the others are restored; the file is deleted from the bucket, and not kept
    here."""
    new_cache(tmp_path, monkeypatch, "a")
    api.checkpoint(dir=url, notebook=NB, namespace=large_state(1), progress=False)
    ns = large_state(2)
    new = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    nbdir = paths.notebook_dir(url, NB)
    m = checks.read_manifest(nbdir, new.id)
    victim = m.storages[m.objects["second"].storages[0]].file
    data = bytearray((nbdir / victim).read_bytes())
    data[-100] ^= 0xFF  # in the data, same size
    obstore.put(mirror(url).store, mirror(url).key(victim), bytes(data))

    new_cache(tmp_path, monkeypatch, "b")
    nbdir = paths.notebook_dir(url, NB)
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=True)
    assert rr.id == new.id and "second" in rr.loading
    assert api.lazy_mod.wait() == {}
    assert torch.equal(out["second"], large_state(1)["second"])  # the older copy
    assert np.array_equal(out["first"], ns["first"]) and out["step"] == 2
    assert victim not in mirror(url).listing()
    folder_mirror.wait_for_copies(nbdir)
    assert not (nbdir / victim).exists()
    other = m.storages[m.objects["first"].storages[0]].file
    assert checks.check_blob(nbdir / other, m.files[other], full=True) is None


@pytest.mark.parametrize("lazy", [False, True])
def test_a_checkpoint_after_a_restore_from_the_bucket_waits_for_its_copies(
    url, tmp_path, monkeypatch, held_copies, lazy
):
    """Right after the restore, a checkpoint finds the restored tensors' files here and
    writes none of them again."""
    new_cache(tmp_path, monkeypatch, "a")
    ns = large_state()
    api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    new_cache(tmp_path, monkeypatch, "b")
    out = {"__name__": "__main__"}
    api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=lazy)
    out["step"] = 2
    again = api.checkpoint(dir=url, notebook=NB, namespace=out, progress=False)
    assert again.bytes_written < 100_000, again.summary()
    assert again.bytes_uploaded < 100_000


def test_a_tensor_changed_before_its_copy_is_written_is_not_kept(
    url, tmp_path, monkeypatch, held_copies
):
    """The copy is hashed as it is written: a tensor the notebook changed in place
    meanwhile no longer matches its signed hash, so its file is not kept under that
    name, and the next checkpoint saves the change."""
    new_cache(tmp_path, monkeypatch, "a")
    r = api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    new_cache(tmp_path, monkeypatch, "b")
    nbdir = paths.notebook_dir(url, NB)
    out = {"__name__": "__main__"}
    api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    out["table"][0] = -1.0
    held_copies.set()
    folder_mirror.wait_for_copies(nbdir)
    m = checks.read_manifest(nbdir, r.id)
    table = m.storages[m.objects["table"].storages[0]].file
    assert not (nbdir / table).exists()
    assert all((nbdir / rel).exists() for rel in m.files if rel != table)
    assert not list(nbdir.rglob("*.part-*"))
    api.checkpoint(dir=url, notebook=NB, namespace=out, progress=False)
    new_cache(tmp_path, monkeypatch, "c")
    back = {"__name__": "__main__"}
    api.restore(dir=url, notebook=NB, namespace=back, progress=False, lazy=False)
    assert back["table"][0] == -1.0 and np.array_equal(back["table"][1:], state()["table"][1:])


# ------------------------------------------------------------------ retention, delete, sweep
def referenced_in_bucket(url) -> tuple[list[str], list[str]]:
    listing = mirror(url).listing()
    return remote.committed(listing), sorted(n for n in listing if n.startswith("blobs/"))


def test_retention_and_delete_free_only_unshared_blobs(either_url, tmp_path, monkeypatch):
    url = either_url
    new_cache(tmp_path, monkeypatch, "c")
    shared = np.arange(400_000, dtype=np.float64)
    ids = []
    for n in range(3):
        ns = {"__name__": "__main__", "shared": shared, "own": np.full(300_000, float(n))}
        ids.append(api.checkpoint(dir=url, notebook=NB, namespace=ns, keep=2, progress=False).id)
    nbdir = paths.notebook_dir(url, NB)

    def files(*cids):
        return sorted(set().union(*(checks.read_manifest(nbdir, c).files for c in cids)))

    committed, blobs = referenced_in_bucket(url)
    assert committed == ids[1:]  # the same keep policy as on disk
    assert blobs == files(*ids[1:])  # the first one's own blobs are gone
    shared_blob = sorted(set(files(ids[1])) & set(files(ids[2])))
    assert shared_blob
    store.delete_checkpoint(url, NB, ids[1])
    committed, blobs = referenced_in_bucket(url)
    assert committed == ids[2:] and blobs == files(ids[2])
    assert set(shared_blob) <= set(blobs)  # still used by the newest
    # another machine sees the same
    new_cache(tmp_path, monkeypatch, "d")
    assert [c.id for c in store.list_checkpoints(url, NB)] == ids[2:]


def test_the_sweep_removes_what_crashed_uploads_left(either_url, tmp_path, monkeypatch):
    url = either_url
    new_cache(tmp_path, monkeypatch, "c")
    r = api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    m = mirror(url)
    stray = ["2030-01-01T00-00-00/objects.pkl", "2030-01-01T00-00-00/manifest.json"]
    stray += ["blobs/0123456789abcdef0123456789abcdef.safetensors"]
    for name in stray:
        obstore.put(m.store, m.key(name), b"left by a crash")
    nbdir = paths.notebook_dir(url, NB)
    assert folder_mirror.sweep(url, nbdir) == []  # young: maybe an upload under way (another node)
    assert sorted(folder_mirror.sweep(url, nbdir, grace=timedelta(0))) == sorted(stray)
    committed, _ = referenced_in_bucket(url)
    assert committed == [r.id]
    new_cache(tmp_path, monkeypatch, "d")
    out = {"__name__": "__main__"}
    api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    assert out["step"] == 1


# ------------------------------------------------------------------ faults
def test_a_corrupted_object_is_detected_and_the_older_checkpoint_restored(
    url, tmp_path, monkeypatch
):
    new_cache(tmp_path, monkeypatch, "c")
    old = api.checkpoint(dir=url, notebook=NB, namespace=state(1), progress=False)
    new = api.checkpoint(dir=url, notebook=NB, namespace=state(2), progress=False)
    nbdir = paths.notebook_dir(url, NB)
    m = checks.read_manifest(nbdir, new.id)
    own = sorted(set(m.files) - set(checks.read_manifest(nbdir, old.id).files))
    victim = max(own, key=lambda rel: m.files[rel].bytes)
    data = bytearray((nbdir / victim).read_bytes())
    data[-100] ^= 0xFF  # same size: only a hash can tell
    obstore.put(mirror(url).store, mirror(url).key(victim), bytes(data))

    new_cache(tmp_path, monkeypatch, "d")
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    assert rr.id == old.id and new.id in rr.passed_over
    assert "corrupt" in rr.passed_over[new.id]
    assert out["step"] == 1
    assert victim not in mirror(url).listing()  # removed from the bucket ...
    again = api.checkpoint(dir=url, notebook=NB, namespace=state(2), progress=False)
    assert victim in mirror(url).listing()  # ... and uploaded again by the next pause
    new_cache(tmp_path, monkeypatch, "e")
    out = {"__name__": "__main__"}
    assert api.restore(dir=url, notebook=NB, namespace=out, progress=False).id == again.id


def test_a_lazy_restore_finds_a_damaged_header_in_the_bucket_and_falls_back(
    url, tmp_path, monkeypatch
):
    """A lazy restore reads the header of a large file from the bucket before the file
    itself: one that does not match is removed from the bucket, and the restore falls
    back to the older checkpoint."""
    new_cache(tmp_path, monkeypatch, "c")
    first = {"__name__": "__main__", "big": np.full(3_000_000, 1.0)}  # 24 MB: read later
    old = api.checkpoint(dir=url, notebook=NB, namespace=first, progress=False)
    second = {"__name__": "__main__", "big": np.full(3_000_000, 2.0)}
    new = api.checkpoint(dir=url, notebook=NB, namespace=second, progress=False)
    nbdir = paths.notebook_dir(url, NB)
    m = checks.read_manifest(nbdir, new.id)
    victim = m.storages[m.objects["big"].storages[0]].file
    data = bytearray((nbdir / victim).read_bytes())
    data[20] ^= 0x01  # in the header, same size
    obstore.put(mirror(url).store, mirror(url).key(victim), bytes(data))

    new_cache(tmp_path, monkeypatch, "d")
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=True)
    assert rr.id == old.id and new.id in rr.passed_over
    assert api.lazy_mod.wait() == {}
    assert np.array_equal(out["big"], first["big"])
    assert victim not in mirror(url).listing()  # removed from the bucket


@pytest.mark.parametrize("lazy", [False, True])
def test_an_older_checkpoint_copied_over_the_newest_in_the_bucket_is_refused(
    url, tmp_path, monkeypatch, capsys, lazy
):
    """Issue #37: the older checkpoint's signed files, copied over the newest one's in the
    bucket, used to be listed ``ok`` under the newest id on another machine and restored
    by it with no word. Now that machine refuses it by name, before anything is
    unpickled, and a resume without an id says which checkpoint it used, and why."""
    from jupyter_pause import cli

    new_cache(tmp_path, monkeypatch, "a")
    old = api.checkpoint(dir=url, notebook=NB, namespace=state(1), progress=False)
    new = api.checkpoint(dir=url, notebook=NB, namespace=state(2), progress=False)
    m = mirror(url)
    for name in ("manifest.json", "manifest.sig", "objects.pkl"):
        data = obstore.get(m.store, m.key(f"{old.id}/{name}")).bytes()
        obstore.put(m.store, m.key(f"{new.id}/{name}"), bytes(data))

    new_cache(tmp_path, monkeypatch, "b")  # a machine that never saw either
    listed = {i.id: i for i in store.list_checkpoints(url, NB)}
    assert listed[old.id].status == "ok" and listed[new.id].status == "untrusted"
    assert old.id in listed[new.id].problem and "rollback" in listed[new.id].problem
    with pytest.raises(errors.UntrustedCheckpoint) as ei:
        api.restore(new.id, dir=url, notebook=NB, namespace={}, progress=False, lazy=lazy)
    assert ei.value.kind == "other-checkpoint"
    chosen = plan.choose_for_resume(url, NB)
    assert chosen.id == old.id and "rollback" in chosen.passed_over[new.id]

    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=lazy)
    api.lazy_mod.wait()
    assert rr.id == old.id and "rollback" in rr.passed_over[new.id]
    assert f"restored {old.id} instead, the newest checkpoint that verifies" in rr.notes
    assert out["step"] == 1 and np.array_equal(out["table"], state(1)["table"])

    new_cache(tmp_path, monkeypatch, "c")
    capsys.readouterr()
    cli.main(["verify", "--dir", url, "--json"])
    (nb,) = json.loads(capsys.readouterr().out)["notebooks"]
    checked = {c["id"]: c for c in nb["checkpoints"]}
    assert checked[new.id]["status"] == "untrusted" and old.id in checked[new.id]["problem"]
    assert nb["restorable"] == [old.id]


def test_wrong_credentials_are_named_and_a_retry_completes(url, tmp_path, monkeypatch):
    new_cache(tmp_path, monkeypatch, "c")
    good = os.environ["AWS_SECRET_ACCESS_KEY"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(errors.RemoteStoreError, match="access denied.*credentials"):
        api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", good)
    assert keys(url) == []
    r = api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    committed, _ = referenced_in_bucket(url)
    assert committed == [r.id]


def test_a_missing_bucket_is_named(seaweed, tmp_path, monkeypatch):
    for k, v in seaweed.env().items():
        monkeypatch.setenv(k, v)
    new_cache(tmp_path, monkeypatch, "c")
    with pytest.raises(errors.RemoteStoreError, match="does not exist|NoSuchBucket"):
        api.checkpoint(dir="s3://no-such-bucket/ck", notebook=NB, namespace=state(), progress=False)


def test_a_bucket_out_of_quota_is_named_the_local_copy_kept_and_a_retry_completes(
    seaweed, url, bucket, tmp_path, monkeypatch
):
    new_cache(tmp_path, monkeypatch, "c")
    seaweed.fill_quota(bucket)
    ns = state()
    with pytest.raises(errors.RemoteStoreError, match="refused the request.*out of quota"):
        api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    nbdir = paths.notebook_dir(url, NB)
    assert len(checks.checkpoint_ids(nbdir)) == 1  # kept locally
    assert remote.committed(mirror(url).listing()) == []

    seaweed.lift_quota(bucket)
    r = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    committed, _ = referenced_in_bucket(url)
    assert committed == [*checks.checkpoint_ids(nbdir)] and committed[-1] == r.id  # both up
    new_cache(tmp_path, monkeypatch, "d")
    out = {"__name__": "__main__"}
    assert api.restore(dir=url, notebook=NB, namespace=out, progress=False).id == r.id
    assert torch.equal(out["model"].weight, ns["model"].weight)


def test_store_killed_mid_upload_then_back_a_retry_completes_and_nothing_is_orphaned(
    tmp_path, monkeypatch
):
    server = Seaweed(tmp_path / "weed")
    server.start()
    try:
        server.create_bucket("killed")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        url = "s3://killed/ck"
        new_cache(tmp_path, monkeypatch, "c")
        upload = remote.Remote.upload

        def upload_then_kill(self, files, progress=None, pace=None):
            def kill_after_the_first(n):  # the others are still on their way
                server.kill()

            upload(self, files, kill_after_the_first)

        monkeypatch.setattr(remote.Remote, "upload", upload_then_kill)
        ns = {"__name__": "__main__"}
        ns.update({f"big{i}": np.full(3_000_000, float(i)) for i in range(4)})  # 4 x 24 MB
        with pytest.raises(errors.RemoteStoreError, match="the store does not answer"):
            api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
        monkeypatch.setattr(remote.Remote, "upload", upload)
        nbdir = paths.notebook_dir(url, NB)
        assert len(checks.checkpoint_ids(nbdir)) == 1  # kept locally
        server.start()  # the same data folder
        r = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
        folder_mirror.sweep(url, nbdir, grace=timedelta(0))
        assert unfinished_uploads(url) == []  # the parts the kill cut short: aborted
        committed, blobs = referenced_in_bucket(url)
        assert committed == [*checks.checkpoint_ids(nbdir)][-len(committed) :]
        assert r.id in committed
        refs = checks.referenced_files(nbdir)
        assert set(blobs) <= refs  # no orphan
        shutil.rmtree(tmp_path / "c")
        new_cache(tmp_path, monkeypatch, "d")
        out = {"__name__": "__main__"}
        api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
        assert all(np.array_equal(out[f"big{i}"], ns[f"big{i}"]) for i in range(4))
    finally:
        server.stop()


# ------------------------------------------------------------------ verify and gc on a bucket
def test_verify_and_gc_work_on_a_bucket(either_url, tmp_path, monkeypatch, capsys):
    from jupyter_pause import cli

    url = either_url
    new_cache(tmp_path, monkeypatch, "c")
    ids = [
        api.checkpoint(dir=url, notebook=NB, namespace=state(n), keep=5, progress=False).id
        for n in (1, 2, 3)
    ]
    new_cache(tmp_path, monkeypatch, "fresh")  # a machine that has seen none of them
    capsys.readouterr()
    assert cli.main(["verify", "--dir", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [nb["restorable"] for nb in report["notebooks"]] == [ids]

    nbdir = paths.notebook_dir(url, NB)
    own = set(checks.read_manifest(nbdir, ids[0]).files) - set(
        checks.read_manifest(nbdir, ids[1]).files
    )
    victim = sorted(own)[0]
    obstore.put(mirror(url).store, mirror(url).key(victim), b"overwritten")
    new_cache(tmp_path, monkeypatch, "fresh2")
    assert cli.main(["verify", "--dir", url, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    statuses = {c["id"]: c["status"] for c in report["notebooks"][0]["checkpoints"]}
    assert statuses == {ids[0]: "damaged", ids[1]: "ok", ids[2]: "ok"}

    new_cache(tmp_path, monkeypatch, "admin")
    out = store.expire(url, older_than=0)
    assert not out.errors and len(out.deleted) == 2
    committed, blobs = referenced_in_bucket(url)
    assert committed == ids[2:]
    assert blobs == sorted(checks.read_manifest(nbdir, ids[2]).files)  # nothing orphaned


# ------------------------------------------------------------------ random cycles
class Crash(BaseException):
    """The writer dies in the middle of an upload (what reached the bucket stays)."""


def test_random_pause_resume_delete_crash_cycles_leave_no_orphan(either_url, tmp_path, monkeypatch):
    import random

    from jupyter_pause.engine.manifest import MANIFEST, Manifest

    url = either_url

    rng = random.Random(28)
    real_upload = remote.Remote.upload
    crash_after = [None]

    def upload(self, files, progress=None, pace=None):
        files = list(files)
        if crash_after[0] is not None and crash_after[0] < len(files):
            real_upload(self, files[: crash_after[0]], progress)
            raise Crash()
        real_upload(self, files, progress)

    monkeypatch.setattr(remote.Remote, "upload", upload)
    new_cache(tmp_path, monkeypatch, "node-0")
    ns = state()
    counts = {"pause": 0, "resume": 0, "delete": 0, "crash": 0}
    for cycle in range(100):
        op = rng.choices(["pause", "resume", "delete", "crash"], [4, 2, 1, 2])[0]
        counts[op] += 1
        if op in ("pause", "crash"):
            ns["step"] = cycle
            if rng.random() < 0.3:
                ns["table"] = np.full(100_000, float(cycle))
            crash_after[0] = rng.randrange(0, 4) if op == "crash" else None
            try:
                api.checkpoint(dir=url, notebook=NB, namespace=ns, keep=3, progress=False)
            except Crash:
                if rng.random() < 0.5:  # the node died too: its cache is gone
                    new_cache(tmp_path, monkeypatch, f"node-{cycle}")
            crash_after[0] = None
        elif op == "resume":
            new_cache(tmp_path, monkeypatch, f"node-{cycle}")  # somewhere else
            if store.list_checkpoints(url, NB):
                out = {"__name__": "__main__"}
                api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
                ns = out
        else:
            ids = [c.id for c in store.list_checkpoints(url, NB)]
            if ids:
                store.delete_checkpoint(url, NB, rng.choice(ids))
    assert min(counts.values()) > 5, counts

    # an hour later, the sweeper (grace 0 here) finds what crashes left
    new_cache(tmp_path, monkeypatch, "admin")
    nbdir = paths.notebook_dir(url, NB)
    folder_mirror.pull(url, nbdir)
    folder_mirror.sweep(url, nbdir, grace=timedelta(0))
    listing = mirror(url).listing()
    ids = remote.committed(listing)
    needed = set()
    for cid in ids:
        m = mirror(url)
        data = obstore.get(m.store, m.key(f"{cid}/{MANIFEST}")).bytes()
        needed |= set(Manifest.from_bytes(bytes(data)).files)
        needed |= {f"{cid}/{n}" for n in (MANIFEST, remote.SIGNATURE, "objects.pkl")}
    orphans = sorted(set(listing) - needed)
    assert orphans == []
    assert needed <= set(listing)  # and every committed checkpoint is whole
    for cid in ids:
        out = {"__name__": "__main__"}
        assert api.restore(cid, dir=url, notebook=NB, namespace=out, progress=False).id == cid


def unfinished_uploads(url) -> list[str]:
    b = paths.parse_bucket(url)
    xml = remote._s3_request(b, "GET", query=[("uploads", "")]).decode()
    return [k.split("</Key>")[0] for k in xml.split("<Key>")[1:]]


def test_an_interrupted_multipart_upload_is_aborted_by_the_sweep(url, tmp_path, monkeypatch):
    new_cache(tmp_path, monkeypatch, "c")
    api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    m = mirror(url)
    b = paths.parse_bucket(url)
    # what a writer that died after starting a multipart upload leaves
    remote._s3_request(b, "POST", m.key("blobs/feedfacefeedfacefeedfacefeedface.safetensors"),
                       [("uploads", "")])  # fmt: skip
    assert len(unfinished_uploads(url)) == 1
    nbdir = paths.notebook_dir(url, NB)
    assert folder_mirror.sweep(url, nbdir) == []  # maybe a writer still at it
    swept = folder_mirror.sweep(url, nbdir, grace=timedelta(0))
    assert swept == [
        "blobs/feedfacefeedfacefeedfacefeedface.safetensors (unfinished multipart upload)"
    ]
    assert unfinished_uploads(url) == []


def kill_after_the_first_part(monkeypatch, kill):
    """The store is killed once the first ranged GET of an eager restore's tensor data
    has come in (the others are still on their way).  Returns what undoes it."""
    read_into = remote.Remote.read_into

    def read_then_kill(self, files, on_part=None):
        def killing(name, filled):
            kill()
            if on_part is not None:
                on_part(name, filled)

        read_into(self, files, killing)

    monkeypatch.setattr(remote.Remote, "read_into", read_then_kill)
    return lambda: monkeypatch.setattr(remote.Remote, "read_into", read_into)


def test_store_killed_mid_restore_then_back_a_retry_restores(tmp_path, monkeypatch):
    server = Seaweed(tmp_path / "weed")
    server.start()
    try:
        server.create_bucket("killed-restore")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        url = "s3://killed-restore/ck"
        new_cache(tmp_path, monkeypatch, "writer")
        ns = {"__name__": "__main__", "big": np.arange(12_000_000, dtype=np.float64)}  # 96 MB
        api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)

        cache = new_cache(tmp_path, monkeypatch, "reader")
        undo = kill_after_the_first_part(monkeypatch, server.kill)
        out = {"__name__": "__main__"}
        with pytest.raises(
            errors.RemoteStoreError, match="killed-restore/ck: the store does not answer"
        ):
            api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
        undo()
        assert "big" not in out
        assert not list(cache.rglob("*.part-*"))  # no half file left to be mistaken
        server.start()
        api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
        assert np.array_equal(out["big"], ns["big"])
    finally:
        server.stop()


def test_store_killed_mid_lazy_restore_fails_what_it_had_not_read(tmp_path, monkeypatch):
    """The store dies while a lazy restore reads its large objects in the background: the
    objects whose bytes had not all come in fail, by name and cause, the others are
    restored, nothing half read is kept here, and a retry restores everything."""
    server = Seaweed(tmp_path / "weed")
    server.start()
    try:
        server.create_bucket("killed-lazy")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        url = "s3://killed-lazy/ck"
        new_cache(tmp_path, monkeypatch, "writer")
        ns = large_state()
        api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)

        cache = new_cache(tmp_path, monkeypatch, "reader")
        read_into = remote.Remote.read_into

        def killed_in_the_background(self, files, on_part=None, **lazily):
            if not lazily:  # what the restore reads before it returns
                return read_into(self, files, on_part)

            def killing(name, filled):
                server.kill()
                on_part(name, filled)

            return read_into(self, files, killing, **lazily)

        monkeypatch.setattr(remote.Remote, "read_into", killed_in_the_background)
        out = {"__name__": "__main__"}
        rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=True)
        assert {"first", "second"} <= set(rr.loading) and out["step"] == 1
        failed = api.lazy_mod.wait()
        assert failed and set(failed) <= {"first", "second"}
        assert all("does not answer" in why for why in failed.values()), failed
        assert same_state(out | {n: ns[n] for n in failed}, ns)  # the others came back
        nbdir = paths.notebook_dir(url, NB)
        folder_mirror.wait_for_copies(nbdir)
        assert not list(cache.rglob("*.part-*"))
        m = checks.read_manifest(nbdir, rr.id)
        for name in failed:
            assert not (nbdir / m.storages[m.objects[name].storages[0]].file).exists()

        monkeypatch.setattr(remote.Remote, "read_into", read_into)
        server.start()
        back = {"__name__": "__main__"}
        api.restore(dir=url, notebook=NB, namespace=back, progress=False, lazy=True)
        assert api.lazy_mod.wait() == {} and same_state(back, ns)
    finally:
        api.lazy_mod.cancel()
        server.stop()


# ------------------------------------------------------------------ GCS
def test_gs_a_checkpoint_in_a_gcs_bucket_restores_on_another_machine(
    fake_gcs, tmp_path, monkeypatch
):
    """fake-gcs-server serves object_store's reads, lists and deletes, but not its XML
    PUT: the checkpoint is put there, file by file under the same keys, with the JSON
    API, as another machine's pause would have uploaded it."""
    fake_gcs.create_bucket("gcs-ckpt")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.client_endpoint)
    url = "gs://gcs-ckpt/ck"
    local = tmp_path / "writer"
    ns = state()
    old = api.checkpoint(dir=str(local), notebook=NB, namespace=state(9), progress=False)
    new = api.checkpoint(dir=str(local), notebook=NB, namespace=ns, progress=False)
    nbdir = paths.notebook_dir(str(local), NB)
    rel = f"ck/{nbdir.parent.name}/{nbdir.name}"
    for f in sorted(p for p in nbdir.rglob("*") if p.is_file() and not p.name.startswith(".")):
        fake_gcs.upload("gcs-ckpt", f"{rel}/{f.relative_to(nbdir)}", f.read_bytes())

    new_cache(tmp_path, monkeypatch, "reader")
    assert [c.id for c in store.list_checkpoints(url, NB)] == [old.id, new.id]
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False)
    api.lazy_mod.wait()
    assert rr.id == new.id and any("downloaded from gs://gcs-ckpt/ck" in n for n in rr.notes)
    assert torch.equal(out["model"].weight, ns["model"].weight) and out["step"] == 1

    # a corrupted object: detected, removed from the bucket, the older one restored
    m = checks.read_manifest(nbdir, new.id)
    victim = sorted(set(m.files) - set(checks.read_manifest(nbdir, old.id).files))[0]
    data = bytearray((nbdir / victim).read_bytes())
    data[-10] ^= 0xFF
    fake_gcs.upload("gcs-ckpt", f"{rel}/{victim}", bytes(data))
    new_cache(tmp_path, monkeypatch, "reader-2")
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    assert rr.id == old.id and out["step"] == 9
    b = paths.parse_bucket(url)
    assert victim not in remote.Remote(b, f"{nbdir.parent.name}/{nbdir.name}").listing()


@pytest.fixture
def gs_url(fake_gcs, request, monkeypatch):
    """A fresh bucket on the session's fake-gcs-server, the emulator variable set."""
    import re
    import secrets

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{name}-{secrets.token_hex(3)}"
    fake_gcs.create_bucket(name)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.client_endpoint)
    return f"gs://{name}/ck"


def test_gs_a_pause_uploads_to_the_bucket_and_another_machine_restores(
    gs_url, tmp_path, monkeypatch
):
    url = gs_url
    new_cache(tmp_path, monkeypatch, "node-a")
    ns = state()
    first = api.checkpoint(dir=url, notebook=NB, namespace=ns, keep=2, progress=False)
    assert first.store == url and first.bytes_uploaded >= first.bytes_written > 1_000_000
    ns["step"] = 2
    second = api.checkpoint(dir=url, notebook=NB, namespace=ns, keep=2, progress=False)
    assert 0 < second.bytes_uploaded < 1_000_000  # the blobs are shared
    committed, blobs = referenced_in_bucket(url)
    assert committed == [first.id, second.id]

    new_cache(tmp_path, monkeypatch, "node-b")
    out = {"__name__": "__main__"}
    rr = api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    assert rr.id == second.id and any("downloaded from " + url in n for n in rr.notes)
    assert torch.equal(out["model"].weight, ns["model"].weight) and out["step"] == 2
    assert np.array_equal(out["table"], ns["table"])

    store.delete_checkpoint(url, NB, second.id)
    committed, after = referenced_in_bucket(url)
    assert committed == [first.id] and after == blobs  # every blob still used by the first


def test_gs_a_missing_bucket_is_an_error_of_the_store_and_a_retry_completes(
    fake_gcs, tmp_path, monkeypatch
):
    """GCS answers 404 ``NoSuchBucket``, translated as on S3; fake-gcs-server answers 500
    with the missing folder: the error names the store and passes the server's words on."""
    import secrets

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.client_endpoint)
    new_cache(tmp_path, monkeypatch, "c")
    name = f"missing-{secrets.token_hex(3)}"
    url = f"gs://{name}/ck"
    with pytest.raises(errors.RemoteStoreError, match=f"checkpoint store {url}: .*{name}"):
        api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    assert checks.checkpoint_ids(paths.notebook_dir(url, NB)) == []  # nothing half-made
    fake_gcs.create_bucket(name)
    r = api.checkpoint(dir=url, notebook=NB, namespace=state(), progress=False)
    assert referenced_in_bucket(url)[0] == [r.id]


@pytest.fixture
def own_gcs(tmp_path, monkeypatch):
    """A fake-gcs-server of the test's own, to kill."""
    server = FakeGCS(tmp_path / "gcs")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.client_endpoint)
    yield server
    server.close()


def eight_mb_arrays(n: int = 4) -> dict:
    """``n`` blobs of 8 MB: each goes up in one request (fake-gcs-server takes no
    multipart XML upload)."""
    ns = {"__name__": "__main__"}
    ns.update({f"big{i}": np.full(1_000_000, float(i)) for i in range(n)})
    return ns


def test_gs_store_killed_mid_upload_then_back_a_retry_completes(own_gcs, tmp_path, monkeypatch):
    own_gcs.create_bucket("killed")
    url = "gs://killed/ck"
    new_cache(tmp_path, monkeypatch, "c")
    upload = remote.Remote.upload

    def upload_then_kill(self, files, progress=None, pace=None):
        def kill_after_the_first(n):  # the others are still on their way
            own_gcs.kill()

        upload(self, files, kill_after_the_first)

    monkeypatch.setattr(remote.Remote, "upload", upload_then_kill)
    ns = eight_mb_arrays()
    with pytest.raises(errors.RemoteStoreError, match="gs://killed/ck: the store does not answer"):
        api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    monkeypatch.setattr(remote.Remote, "upload", upload)
    nbdir = paths.notebook_dir(url, NB)
    assert len(checks.checkpoint_ids(nbdir)) == 1  # kept locally
    own_gcs.start()  # the same data folder
    assert referenced_in_bucket(url)[0] == []  # nothing committed by the cut-off pause
    r = api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)
    folder_mirror.sweep(url, nbdir, grace=timedelta(0))
    committed, blobs = referenced_in_bucket(url)
    assert committed == [*checks.checkpoint_ids(nbdir)] and committed[-1] == r.id
    assert set(blobs) <= checks.referenced_files(nbdir)  # no orphan
    new_cache(tmp_path, monkeypatch, "d")
    out = {"__name__": "__main__"}
    api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    assert all(np.array_equal(out[f"big{i}"], ns[f"big{i}"]) for i in range(4))


def test_gs_store_killed_mid_restore_then_back_a_retry_restores(own_gcs, tmp_path, monkeypatch):
    own_gcs.create_bucket("killed-restore")
    url = "gs://killed-restore/ck"
    new_cache(tmp_path, monkeypatch, "writer")
    ns = eight_mb_arrays(12)
    api.checkpoint(dir=url, notebook=NB, namespace=ns, progress=False)

    cache = new_cache(tmp_path, monkeypatch, "reader")
    undo = kill_after_the_first_part(monkeypatch, own_gcs.kill)
    out = {"__name__": "__main__"}
    with pytest.raises(
        errors.RemoteStoreError, match="killed-restore/ck: the store does not answer"
    ):
        api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    undo()
    assert "big0" not in out
    assert not list(cache.rglob("*.part-*"))  # no half file left to be mistaken
    own_gcs.start()
    api.restore(dir=url, notebook=NB, namespace=out, progress=False, lazy=False)
    assert all(np.array_equal(out[f"big{i}"], ns[f"big{i}"]) for i in range(12))


def test_a_checkpoint_of_which_only_small_files_are_here_does_not_stop_the_next_pause(
    url, tmp_path, monkeypatch
):
    """A renamed notebook's re-bind links what the cache has: of a checkpoint pulled
    from the bucket, only its small files. Not uploadable, and no reason to fail."""
    new_cache(tmp_path, monkeypatch, "c")
    first = api.checkpoint(dir=url, notebook=NB, namespace=state(1), progress=False)
    nbdir = paths.notebook_dir(url, NB)
    mirror(url).delete([f"{first.id}/{remote.SIGNATURE}"])  # not in the bucket (any more)
    for rel in checks.read_manifest(nbdir, first.id).files:
        (nbdir / rel).unlink()  # ... and only its small files here
    second = api.checkpoint(dir=url, notebook=NB, namespace=state(2), keep=5, progress=False)
    committed, _ = referenced_in_bucket(url)
    assert committed == [second.id]
