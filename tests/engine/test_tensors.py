"""Tensors and arrays: dtypes, strides, sharing, Parameters, portability."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import jupyter_pause as jp
from jupyter_pause.engine import store
from jupyter_pause.engine.api import RNG_RECORD


def roundtrip(ns, ck, **kw):
    jp.checkpoint(namespace=ns, **ck, **kw)
    out = {}
    jp.restore(namespace=out, **ck)
    return out


def user_storages(m):
    return [s for s in m.storages if s.owner != RNG_RECORD]


def ptr(t):
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize(
    "dtype",
    [torch.bfloat16, torch.float16, torch.float32, torch.int64, torch.bool, torch.complex64],
)
def test_dtypes_and_values(ck, dtype):
    t = (torch.randn(5, 3) * 10).to(dtype)
    out = roundtrip({"t": t}, ck)
    assert out["t"].dtype == dtype and out["t"].shape == t.shape
    assert torch.equal(out["t"], t)


def test_non_contiguous_strides_and_offsets(ck):
    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    ns = {
        "base": base,
        "tr": base.transpose(0, 2),
        "sl": base[1:, ::2, 3],
        "ex": base[0, 0].expand(4, 5),
    }
    out = roundtrip(ns, ck)
    for k, v in ns.items():
        assert out[k].stride() == v.stride(), k
        assert out[k].storage_offset() == v.storage_offset(), k
        assert torch.equal(out[k], v), k
    assert len({ptr(out[k]) for k in ns}) == 1  # all views of one storage


def test_views_only_storage_saved_once(ck, nbdir):
    base = torch.arange(1000, dtype=torch.float32)
    ns = {"a": base[:10], "b": base[500:]}  # base itself not saved
    out = roundtrip(ns, ck)
    assert ptr(out["a"]) == ptr(out["b"])
    m = store.get_manifest(ck["dir"], ck["notebook"])
    (s,) = user_storages(m)
    assert s.nbytes == 4000 and s.dtype == "uint8" and s.shape == [4000]  # flat: no whole view


def test_requires_grad_and_parameters(ck):
    lin = torch.nn.Linear(3, 2)
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    leaf = torch.zeros(3, requires_grad=True)
    nonleaf = leaf * 2
    out = roundtrip({"lin": lin, "frozen": frozen, "leaf": leaf, "nonleaf": nonleaf}, ck)
    assert isinstance(out["lin"].weight, torch.nn.Parameter) and out["lin"].weight.requires_grad
    assert isinstance(out["frozen"], torch.nn.Parameter) and not out["frozen"].requires_grad
    assert type(out["leaf"]) is torch.Tensor and out["leaf"].requires_grad
    assert out["nonleaf"].requires_grad and out["nonleaf"].is_leaf  # graph is not saved
    assert torch.equal(out["lin"].weight, lin.weight)


def test_tied_weights_and_optimizer_share_parameters(ck):
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.Sequential(emb, head).to(torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.tensor([1, 2])).float().sum().backward()
    opt.step()
    out = roundtrip({"model": model, "opt": opt}, ck)
    m2, o2 = out["model"], out["opt"]
    assert m2[0].weight is m2[1].weight
    assert ptr(m2[0].weight) == ptr(m2[1].weight)
    assert o2.param_groups[0]["params"][0] is m2[0].weight
    state = o2.state[m2[0].weight]
    assert torch.equal(state["exp_avg"], opt.state[model[0].weight]["exp_avg"])
    o2.step()  # still usable


def test_data_and_parameter_share_storage(ck):
    p = torch.nn.Parameter(torch.randn(4))
    out = roundtrip({"p": p, "d": p.data}, ck)
    assert ptr(out["p"]) == ptr(out["d"])


def test_numpy_arrays_views_and_dtypes(ck):
    a = np.arange(100, dtype=np.float64).reshape(10, 10)
    f = np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    rec = np.zeros(3, dtype=[("x", "<i4"), ("y", ">f8")])
    rec["y"] = [1.5, 2.5, 3.5]
    ns = {
        "a": a,
        "v": a[::3, 1::2],
        "rev": a[::-1, 0],
        "f": f,
        "rec": rec,
        "c": np.array([1 + 2j, 3 - 4j]),
        "be": np.arange(4, dtype=">i8"),
        "zero_d": np.array(3.5),
        "empty": np.zeros((0, 3)),
        "obj": np.array([{"k": 1}, None], dtype=object),
        "ro": np.arange(3.0),
    }
    ns["ro"].flags.writeable = False
    out = roundtrip(ns, ck)
    for k, v in ns.items():
        assert out[k].dtype == v.dtype, k
        assert out[k].shape == v.shape, k
        if v.dtype != object:
            np.testing.assert_array_equal(out[k], v)
    assert out["obj"][0] == {"k": 1}
    assert np.shares_memory(out["a"], out["v"]) and np.shares_memory(out["a"], out["rev"])
    assert out["v"].strides == ns["v"].strides
    assert out["f"].flags.f_contiguous
    assert not out["ro"].flags.writeable and out["a"].flags.writeable


def test_tensors_are_not_in_the_pickle(ck, nbdir):
    big = torch.randn(256, 256)  # 256 KiB
    arr = np.random.rand(256, 128)
    jp.checkpoint(namespace={"big": big, "arr": arr}, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"])
    assert m.records[m.rng_record] < 1024  # the two object records are tiny
    assert sum(s.nbytes for s in user_storages(m)) == big.nbytes + arr.nbytes


def test_weights_are_plain_safetensors(ck, nbdir):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 16)).to(
        torch.bfloat16
    )
    jp.checkpoint(namespace={"model": model}, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"])
    (rel,) = {s.file for s in user_storages(m)}
    sd = load_file(nbdir / rel)
    ref = model.state_dict()
    assert set(sd) == set(ref)
    for k in ref:
        assert sd[k].dtype == torch.bfloat16 and torch.equal(sd[k], ref[k])


def test_manifest_describes_everything(ck, nbdir):
    model = torch.nn.Linear(4, 4).half()
    res = jp.checkpoint(namespace={"model": model, "x": 3}, **ck)
    raw = json.loads((nbdir / res.id / "manifest.json").read_text())
    assert raw["versions"]["python"] and raw["versions"]["torch"] == torch.__version__
    assert "cuda" in raw["versions"] and "gpu" in raw["versions"]
    assert set(raw["objects"]) == {"model", "x"}
    assert raw["objects"]["model"]["type"] == "torch.nn.modules.linear.Linear"
    for s in raw["storages"]:
        if s["owner"] == RNG_RECORD:
            continue
        assert s["device"] == "cpu" and s["dtype"] == "float16" and len(s["xxh3"]) == 32
        assert s["file"] in raw["files"]
    for f in raw["files"].values():
        assert len(f["xxh3"]) == 32 and f["tensors"]


def test_meta_tensors_and_empty(ck):
    ns = {"meta": torch.empty(3, 4, device="meta"), "e": torch.empty(0), "e2": torch.empty(0, 5)}
    out = roundtrip(ns, ck)
    assert out["meta"].device.type == "meta" and out["meta"].shape == (3, 4)
    assert out["e"].shape == (0,) and out["e2"].shape == (0, 5)


def test_sparse_and_conj_tensors(ck):
    sp = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2))
    c = torch.tensor([1 + 1j, 2 - 1j]).conj()
    out = roundtrip({"sp": sp, "c": c}, ck)
    assert torch.equal(out["sp"].to_dense(), sp.to_dense())
    assert torch.equal(out["c"], c.resolve_conj())
