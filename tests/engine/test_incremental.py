"""Incremental checkpoints: unchanged tensors are not written again (counted in bytes)."""

from __future__ import annotations

import numpy as np
import torch

import jupyter_pause as jp
from jupyter_pause.engine import store, tensors


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))  # 2 MiB


def test_unchanged_second_checkpoint_writes_no_tensor_bytes(ck, nbdir):
    ns = {"model": model(), "arr": np.random.rand(300_000)}
    first = jp.checkpoint(namespace=ns, **ck)
    second = jp.checkpoint(namespace=ns, **ck)
    assert first.files_written and not second.files_written
    assert second.bytes_written < 20_000  # just the pickle of the object graph
    assert second.bytes_reused == second.bytes_total - (second.bytes_written)  # all tensor bytes
    out = {}
    jp.restore(namespace=out, **ck)
    assert torch.equal(out["model"][0].weight, ns["model"][0].weight)


def test_one_changed_tensor_is_the_only_one_written(ck, nbdir):
    ns = {"model": model()}
    jp.checkpoint(namespace=ns, **ck)
    with torch.no_grad():
        ns["model"][1].bias.add_(1)
    res = jp.checkpoint(namespace=ns, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"])
    (new,) = res.files_written
    assert [s.key for s in m.storages if s.file == new and s.owner == "model"] == ["model.1.bias"]
    assert res.bytes_written - m.pickle.bytes < 512 * 4 + 1000
    out = {}
    jp.restore(namespace=out, **ck)
    assert torch.equal(out["model"][1].bias, ns["model"][1].bias)
    assert torch.equal(out["model"][0].weight, ns["model"][0].weight)


def test_version_counter_fast_path_skips_hashing(ck, monkeypatch):
    ns = {"model": model()}
    jp.checkpoint(namespace=ns, **ck)
    jp.checkpoint(namespace=ns, **ck)  # fills the cache
    calls = []
    real = tensors.hash_storage
    monkeypatch.setattr(tensors, "hash_storage", lambda s: calls.append(s.nbytes) or real(s))
    jp.checkpoint(namespace=ns, **ck)
    assert calls and max(calls) < tensors.FAST_PATH_MIN  # the 1 MiB weights were not hashed


def test_write_through_data_is_detected(ck):
    """``p.data.mul_()`` does not bump p._version; the sampled fingerprint catches it."""
    ns = {"model": model()}
    jp.checkpoint(namespace=ns, **ck)
    jp.checkpoint(namespace=ns, **ck)
    ns["model"][0].weight.data.mul_(0.5)
    res = jp.checkpoint(namespace=ns, **ck)
    assert res.files_written
    out = {}
    jp.restore(namespace=out, **ck)
    assert torch.equal(out["model"][0].weight, ns["model"][0].weight)


def test_cross_process_dedup_by_content_hash(ck):
    ns = {"model": model()}
    jp.checkpoint(namespace=ns, **ck)
    tensors._CACHE.clear()  # a new kernel: no in-process cache
    fresh = {"model": model()}  # same values, different tensors/addresses
    res = jp.checkpoint(namespace=fresh, **ck)
    assert not res.files_written


def test_numpy_change_detected(ck):
    ns = {"a": np.zeros(400_000)}
    jp.checkpoint(namespace=ns, **ck)
    ns["a"][123_456] = 1.0
    res = jp.checkpoint(namespace=ns, **ck)
    assert res.files_written
    out = {}
    jp.restore(namespace=out, **ck)
    assert out["a"][123_456] == 1.0
