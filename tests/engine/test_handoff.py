"""The server's memory handed to a restore (engine/handoff.py): both sides run in this
process here (the kernel's side opens the server's descriptors through /proc/<pid>/fd
as a kernel does); tests/test_prewarm.py does it across a real server and kernel."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import checks, handoff, lazy, plan, store, tensors

from ..helpers import cached_bytes, drop_cached, memfd_links

pytestmark = pytest.mark.skipif(not handoff.supported(), reason="Linux memfd and /proc only")

MB = 1 << 20


def mapped_from(ptr: int) -> str:
    """What the mapping holding address ``ptr`` maps ("" for anonymous memory, "[heap]"
    for malloc's)."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= ptr < hi:
                return fields[5] if len(fields) > 5 else ""
    raise AssertionError(f"{ptr:#x} is not mapped")


def state():
    w = torch.randn(8 * MB)  # 32 MB
    return {
        "model": {"w": w, "head": w[100:200], "odd": torch.randn(5 * MB + 3)},
        "arr": np.arange(4 * MB, dtype=np.int64),  # 32 MB
        "n": 7,
    }


def resume(ck, fill, **kw):
    """A lazy restore given the fill's token, as the server's restore call does."""
    ns = {}
    res = jp.restore(namespace=ns, lazy=True, handoff=fill.token(), **ck, **kw)
    fill.release()  # the call has returned: the server closes its offer
    return ns, res, lazy.wait()


def test_a_restore_maps_the_memory_the_server_filled(ck):
    src = state()
    cid = jp.checkpoint(namespace=src, **ck).id
    fill = handoff.offer(plan.choose_for_resume(**ck))
    assert fill is not None and fill.checkpoint_id == cid
    ns, res, failed = resume(ck, fill)
    assert not failed and set(res.loading) == {"model", "arr"}
    m = ns["model"]
    assert torch.equal(m["w"], src["model"]["w"]) and torch.equal(m["odd"], src["model"]["odd"])
    assert np.array_equal(ns["arr"], src["arr"]) and ns["n"] == 7
    assert m["head"].untyped_storage().data_ptr() == m["w"].untyped_storage().data_ptr()
    # the bytes are the server's: mapped from its memfd, not copied into fresh memory
    name = f"/memfd:jupyter-pause-{fill.nonce}"
    assert mapped_from(m["w"].data_ptr()) == name
    assert mapped_from(ns["arr"].ctypes.data) == name
    assert m["w"].data_ptr() % tensors.DATA_ALIGN == 0
    assert fill.wait(60) and all(fill.filled.values())
    # and the first checkpoint after it writes no tensor: the digests were learned
    assert jp.checkpoint(namespace=ns, **ck).bytes_written < 1 << 20


def test_writes_stay_in_the_kernel_and_the_memory_is_sealed(ck):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    fill = handoff.offer(plan.choose_for_resume(**ck))
    assert fill.wait(60)
    offered = fill.files[0].offered
    original = os.pread(offered, 1 << 16, 0)
    with pytest.raises(PermissionError):  # F_SEAL_WRITE: nobody can change a byte now
        os.pwrite(offered, b"x", 0)
    ns = {}
    jp.restore(namespace=ns, lazy=True, handoff=fill.token(), **ck)
    assert not lazy.wait()
    ns["model"]["w"].zero_()
    ns["arr"][:] = 0
    assert os.pread(offered, 1 << 16, 0) == original  # a private copy took the writes
    fill.release()


def test_a_fill_that_did_not_finish_is_read_from_the_file(ck, monkeypatch):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    monkeypatch.setattr(handoff.Fill, "start", lambda self: self)  # filled by hand below
    fill = handoff.offer(plan.choose_for_resume(**ck))
    ns = {}
    jp.restore(namespace=ns, lazy=True, handoff=fill.token(), **ck)
    fill.stop.set()  # e.g. the server shuts down before filling anything
    fill._run()
    assert not any(fill.filled.values())
    assert not lazy.wait()  # the kernel read the files itself...
    # ...into memory of its own: the server's holds (nearly) nothing, then or now
    assert all(os.fstat(f.offered).st_blocks * 512 < 64 << 10 for f in fill.files)
    fill.release()
    assert torch.equal(ns["model"]["w"], src["model"]["w"])
    assert np.array_equal(ns["arr"], src["arr"])


def test_unsealed_memory_is_never_taken(ck, monkeypatch):
    """A fill that wrote every byte but did not seal: the restore reads the files instead
    (the bytes it hashed could still change under it)."""
    src = state()
    jp.checkpoint(namespace=src, **ck)
    with monkeypatch.context() as server:  # the kernel's side checks the real seals
        server.setattr(handoff, "SEALS", 0)  # the fill writes every byte, seals nothing
        fill = handoff.offer(plan.choose_for_resume(**ck))
        assert fill.wait(60) and all(fill.filled.values())
    took = []
    real = lazy.LazyLoad._took_handed

    def spy(self, i):
        took.append(real(self, i))
        return took[-1]

    monkeypatch.setattr(lazy.LazyLoad, "_took_handed", spy)
    ns, _res, failed = resume(ck, fill)
    assert not failed and took and not any(took)
    assert torch.equal(ns["model"]["w"], src["model"]["w"])
    assert np.array_equal(ns["arr"], src["arr"])


def test_a_damaged_file_fails_its_objects_by_name(ck, nbdir):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"])
    (rel,) = {s.file for s in m.storages if s.owner == "arr"}
    path = nbdir / rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    checks._VERIFIED.clear()
    fill = handoff.offer(plan.choose_for_resume(**ck))  # the server copies the damage faithfully
    ns, res, failed = resume(ck, fill)
    assert set(failed) == {"arr"} and "tensor" in failed["arr"]
    assert "arr" not in ns
    assert torch.equal(ns["model"]["w"], src["model"]["w"])


@pytest.mark.parametrize("what", ["another nonce", "a pipe as the memory", "another checkpoint"])
def test_a_token_that_is_not_this_fills_is_ignored(ck, what):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    fill = handoff.offer(plan.choose_for_resume(**ck))
    token = fill.token()
    if what == "another nonce":
        token["nonce"] = "0" * 16
    elif what == "a pipe as the memory":
        token["files"] = {rel: [r, r] for rel, (_m, r) in token["files"].items()}
    else:
        token["checkpoint"] = "2020-01-01T00-00-00"
    ns = {}
    jp.restore(namespace=ns, lazy=True, handoff=token, **ck)
    assert not lazy.wait()
    # the kernel's own memory (anonymous, or malloc's heap), read from the file
    assert not mapped_from(ns["model"]["w"].data_ptr()).startswith("/memfd:")
    assert torch.equal(ns["model"]["w"], src["model"]["w"])
    fill.cancel()


def test_the_server_keeps_nothing_open_once_done(ck):
    jp.checkpoint(namespace=state(), **ck)
    before = set(os.listdir("/proc/self/fd"))
    fill = handoff.offer(plan.choose_for_resume(**ck))
    assert len(memfd_links(f"/memfd:jupyter-pause-{fill.nonce}")) >= 2 * len(
        fill.files
    )  # offered, and the fill's own
    assert fill.wait(60)
    fill.release()
    assert len(memfd_links(f"/memfd:jupyter-pause-{fill.nonce}")) == 0
    assert len(os.listdir("/proc/self/fd")) <= len(before)  # the pipes are closed too


def test_a_budget_and_small_files_are_left_to_the_kernel(ck):
    jp.checkpoint(namespace={"small": torch.ones(MB), **state()}, **ck)  # 4 MB: too small
    m = store.get_manifest(ck["dir"], ck["notebook"])
    big = sorted(e.bytes for e in m.files.values() if e.bytes >= handoff.HANDOFF_MIN)
    fill = handoff.offer(plan.choose_for_resume(**ck), budget=big[0])
    assert [f.size for f in fill.files] == big[:1]
    fill.cancel()
    assert handoff.offer(plan.choose_for_resume(**ck), budget=big[0] - 1) is None


def test_storages_whose_size_allows_it_start_aligned(tmp_path, ck, nbdir):
    jp.checkpoint(namespace=state(), **ck)
    for blob in (nbdir / "blobs").iterdir():
        raw = blob.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            b, e = entry["data_offsets"]
            if (e - b) % tensors.DATA_ALIGN == 0:
                assert (8 + n + b) % tensors.DATA_ALIGN == 0, (blob.name, key)


@pytest.mark.parametrize("sealed", [True, False])
def test_an_eager_restore_takes_it_too(ck, sealed, monkeypatch):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    with monkeypatch.context() as server:
        if not sealed:
            server.setattr(handoff, "SEALS", 0)
        fill = handoff.offer(plan.choose_for_resume(**ck))
        assert fill.wait(60)
    ns = {}
    jp.restore(namespace=ns, lazy=False, handoff=fill.token(), **ck)
    fill.release()
    assert torch.equal(ns["model"]["w"], src["model"]["w"])
    assert np.array_equal(ns["arr"], src["arr"])
    name = f"/memfd:jupyter-pause-{fill.nonce}"
    # taken where sealed; else read into the kernel's own memory at the same addresses
    # (all but the partial pages at either end, which may hold a neighbour's bytes)
    w, arr = ns["model"]["w"], ns["arr"]
    assert (mapped_from(w.data_ptr() + w.nbytes // 2) == name) == sealed
    assert (mapped_from(arr.ctypes.data + arr.nbytes // 2) == name) == sealed


def test_a_file_not_in_the_page_cache_lands_in_memory_once(ck, nbdir):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    big = [f for f in (nbdir / "blobs").iterdir() if f.stat().st_size >= handoff.HANDOFF_MIN]
    if not all(drop_cached(f) for f in big):
        pytest.skip("this file system keeps its pages in memory (tmpfs)")
    fill = handoff.offer(plan.choose_for_resume(**ck))
    assert fill.wait(60) and all(fill.filled.values())
    # read around the page cache (O_DIRECT): not a second copy of each byte in memory
    assert all(cached_bytes(f) < f.stat().st_size // 2 for f in big), [
        (cached_bytes(f), f.stat().st_size) for f in big
    ]
    ns, _res, failed = resume(ck, fill)
    assert not failed and torch.equal(ns["model"]["w"], src["model"]["w"])
    assert np.array_equal(ns["arr"], src["arr"])


def test_files_for_the_gpu_are_left_to_the_streaming_read(ck):
    jp.checkpoint(namespace=state(), **ck)
    chosen = plan.choose_for_resume(**ck)
    for s in chosen.manifest.storages:  # as if the model were on a GPU
        if s.owner == "model":
            s.device = "cuda:0"
    fill = handoff.offer(chosen)
    m = store.get_manifest(ck["dir"], ck["notebook"])
    assert {f.rel for f in fill.files} == {s.file for s in m.storages if s.owner == "arr"}
    fill.cancel()
