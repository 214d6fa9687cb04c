"""CUDA round trips (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import checks, plan, store

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_cuda_roundtrip_stays_on_device(ck):
    model = torch.nn.Linear(64, 64).to("cuda:0", torch.bfloat16)
    view = model.weight[:, ::2]
    jp.checkpoint(namespace={"model": model, "view": view}, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"])
    assert {s.device for s in m.storages if s.owner == "model"} == {"cuda:0"}
    out = {}
    jp.restore(namespace=out, **ck)
    w = out["model"].weight
    assert w.device == torch.device("cuda:0") and w.dtype == torch.bfloat16
    assert torch.equal(w, model.weight) and isinstance(w, torch.nn.Parameter)
    assert out["view"].untyped_storage().data_ptr() == w.untyped_storage().data_ptr()


def test_direct_to_device_load_no_cpu_copy(ck, monkeypatch):
    """Data goes file -> pinned staging chunk -> GPU; no full-size CPU tensor is allocated."""
    big = torch.randn(4096, 1024, device="cuda:0")  # 16 MiB
    jp.checkpoint(namespace={"big": big}, **ck)
    from jupyter_pause.engine import tensors

    monkeypatch.setattr(tensors, "CHUNK", 1 << 20)
    out = {}
    jp.restore(namespace=out, **ck)
    assert out["big"].is_cuda and torch.equal(out["big"], big)


def test_cuda_to_cpu_mapping_and_back(ck):
    t = torch.arange(10.0, device="cuda:0")
    jp.checkpoint(namespace={"t": t}, **ck)
    out = {}
    jp.restore(namespace=out, device="cpu", **ck)
    assert out["t"].device.type == "cpu"
    jp.restore(namespace=out, device="cuda:0=cpu", **ck)
    assert out["t"].device.type == "cpu"


def test_cuda_rng_state(ck):
    torch.cuda.manual_seed_all(7)
    torch.rand(1, device="cuda")
    jp.checkpoint(namespace={"x": 1}, **ck)
    expected = torch.rand(3, device="cuda")
    torch.cuda.manual_seed_all(99)
    jp.restore(namespace={}, **ck)
    assert torch.equal(torch.rand(3, device="cuda"), expected)


def test_cuda_grads_and_a_damaged_reused_blob(ck, nbdir):
    """Gradients of CUDA parameters come back on the device; a reused CUDA blob found
    damaged is written again from GPU memory."""
    model = torch.nn.Linear(512, 512).to("cuda:0")
    model(torch.ones(1, 512, device="cuda:0")).sum().backward()
    first = jp.checkpoint(namespace={"model": model}, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"], first.id)
    blob = nbdir / next(s.file for s in m.storages if s.owner == "model")
    data = bytearray(blob.read_bytes())
    data[-10] ^= 0x01
    blob.write_bytes(bytes(data))
    second = jp.checkpoint(namespace={"model": model}, **ck)
    assert second.quarantined
    store.verify_checkpoint(ck["dir"], ck["notebook"], second.id)
    out = {}
    jp.restore(namespace=out, **ck)
    grad = out["model"].weight.grad
    assert grad.is_cuda and torch.equal(grad, model.weight.grad)


def test_lazy_restore_streams_to_the_device_and_repauses_for_free(ck, monkeypatch):
    """Lazy: the model comes back on its GPU through the pinned staging chunks, in the
    background; its digests are registered, so the next checkpoint writes no tensor."""
    from jupyter_pause.engine import lazy, tensors

    monkeypatch.setattr(lazy, "EAGER_BELOW", 1 << 20)
    monkeypatch.setattr(tensors, "CHUNK", 1 << 20)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.Linear(2048, 64)).cuda()
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 2048, device="cuda")).sum().backward()
    opt.step()
    jp.checkpoint(namespace={"model": model, "opt": opt}, **ck)
    tensors._CACHE.clear()
    checks._VERIFIED.clear()
    out = {}
    res = jp.restore(namespace=out, lazy=True, **ck)
    assert set(res.loading) == {"model", "opt"}
    assert lazy.wait() == {}
    w = out["model"][0].weight
    assert w.is_cuda and torch.equal(w, model[0].weight)
    assert out["opt"].param_groups[0]["params"][0] is w
    again = jp.checkpoint(namespace=out, **ck)
    assert not again.files_written


def test_a_handed_over_restore_serves_the_cpu_and_streams_the_gpu(ck):
    from jupyter_pause.engine import handoff, lazy

    if not handoff.supported():
        pytest.skip("Linux memfd and /proc only")
    src = {"g": torch.randn(8 << 20, device="cuda"), "c": torch.randn(8 << 20)}
    jp.checkpoint(namespace=src, **ck)
    fill = handoff.offer(plan.choose_for_resume(**ck))
    assert len(fill.files) == 1  # the CPU tensor's file: the GPU one streams as ever
    out = {}
    jp.restore(namespace=out, lazy=True, handoff=fill.token(), **ck)
    fill.release()
    assert lazy.wait() == {}
    assert out["g"].is_cuda and torch.equal(out["g"], src["g"])
    assert torch.equal(out["c"], src["c"])
