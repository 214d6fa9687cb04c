"""Cases another tool (dill, cloudpickle, Kishu, ElasticNotebook) brings back and we
used not to. Each object is saved from a notebook-like namespace (cell code lives in
``__main__``) and restored into an empty one, as in a fresh kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jupyter_pause as jp

from .conftest import main_ns


def roundtrip(ck, ns):
    res = jp.checkpoint(namespace=ns, **ck)
    got: dict = {"__name__": "__main__"}
    out = jp.restore(namespace=got, **ck)
    return res, out, got


def test_enum_defined_in_a_cell(ck):
    ns = main_ns(
        "import enum\n"
        "class Color(enum.Enum):\n    RED = 1\n    GREEN = 2\n"
        "    def shout(self):\n        return self.name.upper()\n"
        "class Perm(enum.IntFlag):\n    R = 4\n    W = 2\n"
        "c = Color.GREEN\np = Perm.R | Perm.W\n"
    )
    res, out, got = roundtrip(ck, ns)
    assert not res.skipped.get("Color") and not out.failed
    Color = got["Color"]
    assert got["c"] is Color.GREEN and Color(1) is Color.RED and got["c"].shout() == "GREEN"
    assert [m.name for m in Color] == ["RED", "GREEN"]
    assert got["p"] == 6 and got["Perm"].R in got["p"] and isinstance(got["p"], got["Perm"])


def test_lru_cache_decorated_cell_function(ck):
    ns = main_ns(
        "import functools\n@functools.lru_cache(maxsize=32)\ndef sq(x):\n    return x * x\nsq(3)\n"
    )
    _, out, got = roundtrip(ck, ns)
    assert not out.failed and got["sq"](4) == 16
    assert got["sq"].cache_info().maxsize == 32 and got["sq"] is not ns["sq"]


def test_generic_subclass_defined_in_a_cell(ck):
    ns = main_ns(
        "from typing import Generic, TypeVar\nT = TypeVar('T')\n"
        "class Box(Generic[T]):\n    def __init__(self, v):\n        self.v = v\n"
        "b = Box[int](3)\n"
    )
    _, out, got = roundtrip(ck, ns)
    assert not out.failed and isinstance(got["b"], got["Box"]) and got["b"].v == 3
    assert got["Box"].__parameters__ == (got["T"],) and got["Box"][int] is not None


def test_logger_comes_back_by_name(ck):
    import logging

    ns = {"log": logging.getLogger("myapp.train"), "root": logging.getLogger()}
    _, out, got = roundtrip(ck, ns)
    assert got["log"] is logging.getLogger("myapp.train") and got["root"] is logging.getLogger()


def test_weakref_to_a_saved_object(ck):
    ns = main_ns("import weakref\nclass Node:\n    pass\nn = Node()\nn.v = 5\nr = weakref.ref(n)\n")
    _, out, got = roundtrip(ck, ns)
    assert not out.failed and got["r"]() is got["n"] and got["n"].v == 5


def test_in_memory_streams(ck):
    import io

    s = io.StringIO()
    s.write("hello")
    b = io.BytesIO(b"abc")
    b.seek(1)
    res, _, got = roundtrip(ck, {"s": s, "b": b})
    assert not res.skipped
    assert got["s"].getvalue() == "hello" and got["s"].tell() == 5 and got["b"].read() == b"bc"


def test_ipython_display_objects(ck):
    from IPython.display import HTML, Markdown

    res, _, got = roundtrip(ck, {"h": HTML("<b>x</b>"), "md": Markdown("# t")})
    assert not res.skipped and got["h"].data == "<b>x</b>" and got["md"].data == "# t"


def test_memmap_comes_back_as_a_memmap_of_its_file(ck, tmp_path):
    path = tmp_path / "mm.dat"
    mm = np.memmap(path, dtype="float32", mode="w+", shape=(400, 500))
    mm[:] = 7
    res, _, got = roundtrip(ck, {"mm": mm})
    again = got["mm"]
    assert isinstance(again, np.memmap) and again.filename == str(path)
    assert float(again.sum()) == 7 * 400 * 500
    assert res.bytes_total < mm.nbytes // 10  # its data stays in its file
    again[0, 0] = 1
    again.flush()
    assert np.memmap(path, dtype="float32", mode="r", shape=(400, 500))[0, 0] == 1
    path.unlink()
    with pytest.warns(UserWarning, match="no longer exists"):
        out = jp.restore(namespace={}, **ck)
    assert "mm.dat, which no longer exists" in out.failed["mm"]


def test_tensor_sharing_memory_with_numpy_stays_shared(ck):
    a = np.arange(6.0)
    _, _, got = roundtrip(ck, {"a": a, "t": torch.from_numpy(a)})
    got["a"][0] = 42
    assert got["t"][0].item() == 42


def test_parameter_grads_are_saved(ck):
    m = torch.nn.Linear(3, 2)
    m(torch.ones(1, 3)).sum().backward()
    _, _, got = roundtrip(ck, {"m": m})
    assert torch.equal(got["m"].weight.grad, m.weight.grad)
    assert torch.equal(got["m"].bias.grad, m.bias.grad)


def test_a_linked_list_3000_nodes_deep(ck):
    ns = main_ns(
        "class Node:\n    def __init__(self, nxt):\n        self.nxt = nxt\n"
        "head = None\nfor i in range(3000):\n    head = Node(head)\n"
    )
    res, out, got = roundtrip(ck, ns)
    assert "head" in res.saved and not out.failed
    n, node = 0, got["head"]
    while node is not None:
        node, n = node.nxt, n + 1
    assert n == 3000


def test_module_with_parametrizations(ck):
    from torch.nn.utils import parametrize
    from torch.nn.utils.parametrizations import weight_norm

    m = weight_norm(torch.nn.Linear(4, 3))
    x = torch.ones(1, 4)
    res, out, got = roundtrip(ck, {"m": m})
    g = got["m"]
    assert not res.skipped and not out.failed
    assert torch.allclose(g(x), m(x)) and parametrize.is_parametrized(g, "weight")
    assert sorted(n for n, _ in g.named_parameters()) == sorted(n for n, _ in m.named_parameters())
    with torch.no_grad():  # still parametrized: the weight follows its originals
        g.parametrizations.weight.original0.mul_(2)
    assert torch.allclose(g.weight, 2 * m.weight)
