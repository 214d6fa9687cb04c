"""What a checkpoint and a restore spend their time on (engine/phases.py), and what the
timeline showed was not the work itself (issue #41): a tensor known to have changed is
not hashed before it is written, the blobs retention frees are deleted after the
checkpoint returns, and a kernel's lazy restore starts reading once its call is
answered. Counted and ordered, never timed."""

from __future__ import annotations

import os
import threading
import types

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import checks, lazy, store, tensors

from ..helpers import wait_for

MIB = 1 << 20


def test_a_checkpoint_says_where_its_time_went_in_order(ck):
    ns = {"w": torch.ones(MIB), "n": 1}
    first = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert list(first.phases) == ["prepare", "pickle", "hash", "write", "fsync", "commit"]
    assert all(s >= 0 for s in first.phases.values())
    again = jp.checkpoint(namespace=ns, progress=False, **ck)  # nothing new to write
    assert list(again.phases) == ["prepare", "pickle", "hash", "commit"]
    restored = jp.restore(namespace={}, progress=False, lazy=False, **ck)
    assert list(restored.phases) == ["verify", "imports", "unpickle", "assign"]


@pytest.fixture
def hashed(monkeypatch):
    """The sizes of the large storages hashed apart from their write (a read of their
    bytes of its own; the RNG state's small ones are always hashed)."""
    seen = []
    real = tensors.hash_storage

    def counting(s):
        if s.nbytes >= MIB:
            seen.append(s.nbytes)
        return real(s)

    monkeypatch.setattr(tensors, "hash_storage", counting)
    return seen


def test_a_tensor_changed_in_place_is_read_once_to_be_written(ck, hashed):
    w = torch.zeros(4 * MIB // 4)
    jp.checkpoint(namespace={"w": w}, progress=False, **ck)
    w.add_(1)  # its version moves: no earlier checkpoint has what it holds now
    hashed.clear()
    result = jp.checkpoint(namespace={"w": w}, progress=False, **ck)
    assert hashed == []  # hashed as it was written, not before
    assert result.bytes_written >= w.nbytes
    ns = {}
    jp.restore(namespace=ns, progress=False, lazy=False, **ck)
    assert torch.equal(ns["w"], w)


def test_a_tensor_never_seen_is_still_looked_for_in_earlier_checkpoints(ck, hashed):
    jp.checkpoint(namespace={"w": torch.ones(MIB)}, progress=False, **ck)
    again = torch.ones(MIB)  # the same bytes, loaded anew (say, a model read again)
    result = jp.checkpoint(namespace={"w": again}, progress=False, **ck)
    assert hashed == [again.nbytes]
    assert result.bytes_reused >= again.nbytes and result.bytes_written < MIB


def test_the_blobs_retention_frees_leave_at_once_and_are_deleted_after(ck, nbdir, monkeypatch):
    opened = threading.Event()
    real = store.shutil.rmtree

    def held(path, *args, **kwargs):  # the deletion, held until the test lets it go
        if threading.current_thread().name == "jp-gc":
            assert opened.wait(60), "never let go"
        return real(path, *args, **kwargs)

    monkeypatch.setattr(store.shutil, "rmtree", held)
    for i in range(2):
        jp.checkpoint(namespace={"a": np.full(MIB, i)}, keep=1, progress=False, **ck)
    # what the kept checkpoint does not use is out of blobs/ when the checkpoint returns
    assert {f"blobs/{p.name}" for p in (nbdir / "blobs").iterdir()} == (
        checks.referenced_files(nbdir)
    )
    [trash] = [p for p in nbdir.iterdir() if p.name.startswith(f"{checks.TMP_PREFIX}gc-")]
    assert [p.suffix for p in trash.iterdir()] == [".safetensors"]  # not deleted yet
    opened.set()
    wait_for(lambda: not trash.exists(), what="the freed blob to be deleted")


def test_a_trash_folder_of_a_dead_process_is_removed_by_the_next_checkpoint(ck, nbdir):
    jp.checkpoint(namespace={"a": 1}, progress=False, **ck)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    trash = nbdir / f"{checks.TMP_PREFIX}gc-deadbeef-{dead}"
    trash.mkdir()
    (trash / "x.safetensors").write_bytes(b"x")
    jp.checkpoint(namespace={"a": 2}, progress=False, **ck)
    assert not trash.exists()


class _Loop:
    """The kernel's event loop, as far as a lazy restore uses it."""

    def __init__(self):
        self.callbacks = []

    def add_callback(self, fn, *args):
        self.callbacks.append((fn, args))

    def run(self):
        for fn, args in self.callbacks:
            fn(*args)


def test_in_a_kernel_the_lazy_reader_starts_once_the_call_is_answered(shell, monkeypatch):
    monkeypatch.setattr(lazy, "EAGER_BELOW", 64 << 10)
    loop = _Loop()
    shell.kernel = types.SimpleNamespace(io_loop=loop)
    shell.user_ns["big"] = torch.ones(MIB)
    assert shell.run_cell("jp.checkpoint(progress=False, **_ck)").success
    del shell.user_ns["big"]
    assert shell.run_cell("_r = jp.restore(progress=False, **_ck)").success
    load = lazy.active()
    assert shell.user_ns["_r"].loading == ["big"]
    assert load._thread is None  # nothing read yet: the kernel answers its request first
    loop.run()  # the kernel's loop, once the reply is sent
    assert load._thread is not None
    assert shell.run_cell("assert big.sum() == big.numel()").success


def test_a_cell_that_needs_a_loading_object_starts_the_reader_itself(shell, monkeypatch):
    monkeypatch.setattr(lazy, "EAGER_BELOW", 64 << 10)
    shell.kernel = types.SimpleNamespace(io_loop=_Loop())  # whose loop never runs here
    shell.user_ns["big"] = torch.ones(MIB)
    assert shell.run_cell("jp.checkpoint(progress=False, **_ck)").success
    del shell.user_ns["big"]
    assert shell.run_cell("_r = jp.restore(progress=False, **_ck)").success
    assert shell.run_cell("assert big.sum() == big.numel()").success


def test_an_unchanged_tensor_is_sampled_once_per_checkpoint(ck, monkeypatch):
    ns = {"a": torch.ones(MIB), "b": torch.zeros(MIB)}
    jp.checkpoint(namespace=ns, progress=False, **ck)
    sampled = []
    real = tensors.fingerprint

    def counting(s):
        sampled.append(s.nbytes)
        return real(s)

    monkeypatch.setattr(tensors, "fingerprint", counting)
    result = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert result.bytes_reused >= 2 * 4 * MIB
    assert sorted(sampled) == [4 * MIB, 4 * MIB]  # checked, and kept as it was
    ns["a"].data.mul_(2)  # past the version counter: the sample still sees it
    changed = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert changed.bytes_written >= 4 * MIB
