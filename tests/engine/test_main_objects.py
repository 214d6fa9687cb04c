"""Classes and functions defined in notebook cells (module __main__) survive a restore
into a *fresh process*, where no such class exists until the checkpoint brings it back."""

from __future__ import annotations

import subprocess
import sys

import pytest

import jupyter_pause as jp

from .conftest import main_ns

CELLS = """
import dataclasses, functools, math, collections
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()          # zero-arg super(): needs the __class__ cell
        self.fc = torch.nn.Linear(3, 2)
    def forward(self, x):
        return scale(self.fc(x))

@dataclasses.dataclass
class Cfg:
    lr: float = 0.1
    tags: list = dataclasses.field(default_factory=list)

class Shape:
    sides = 0
    __slots__ = ("name",)
    def __init__(self, name): self.name = name
    @property
    def upper(self): return self.name.upper()
    @staticmethod
    def kind(): return "shape"
    @classmethod
    def make(cls, n): return cls(n)
    @functools.cached_property
    def never(self): return 1

Point = collections.namedtuple("Point", "x y")

def scale(x, factor=2.0):
    return x * factor

def fact(n):                        # recursive through the namespace
    return 1 if n <= 1 else n * fact(n - 1)

def counter():
    count = 0
    def bump():
        nonlocal count
        count += 1
        return count
    return bump

square = lambda v: v * v
bump = counter(); bump(); bump()
model = Net()
cfg = Cfg(tags=["a"])
shape = Shape.make("tri")
p = Point(1, 2)
angle = math.pi
partial_scale = functools.partial(scale, factor=3.0)
"""

CHECKS = """
import torch
out = {}
res = jp.restore(namespace=out, dir=DIR, notebook="nb")
assert res.failed == {}, res.failed
x = torch.ones(3)
assert torch.allclose(out["model"](x), out["model"].fc(x) * 2.0)
assert type(out["model"]) is out["Net"] and isinstance(out["model"], torch.nn.Module)
assert out["cfg"] == out["Cfg"](lr=0.1, tags=["a"]), out["cfg"]
import dataclasses
assert [f.name for f in dataclasses.fields(out["Cfg"])] == ["lr", "tags"]
assert out["Cfg"]().tags == [] and out["Cfg"]().tags is not out["Cfg"]().tags
assert out["shape"].upper == "TRI" and out["Shape"].kind() == "shape" and out["shape"].name == "tri"
assert out["p"].x == 1 and out["p"] == (1, 2)
assert out["fact"](5) == 120
assert out["square"](4) == 16
assert out["bump"]() == 3            # closure state survived
assert out["partial_scale"](2) == 6.0
assert out["scale"].__globals__ is out   # globals = the restored namespace
assert out["angle"] == 3.141592653589793 and out["math"].sqrt(4) == 2
print("OK")
"""


def test_cell_defined_objects_roundtrip_in_fresh_process(ck, tmp_path):
    ns = main_ns(CELLS)
    res = jp.checkpoint(namespace=ns, dir=ck["dir"], notebook="nb", progress=False)
    assert res.skipped.keys() <= {"dataclasses", "functools", "math", "collections", "torch"}
    script = f"import jupyter_pause as jp\nDIR = {ck['dir']!r}\n" + CHECKS
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


def test_cell_objects_roundtrip_in_process(ck):
    ns = main_ns(CELLS)
    jp.checkpoint(namespace=ns, **ck)
    out = {}
    jp.restore(namespace=out, **ck)
    assert out["fact"](4) == 24 and out["bump"]() == 3
    assert out["Net"] is not ns["Net"]  # rebuilt by value, not looked up


def test_class_no_longer_exists(ck, tmp_path, monkeypatch):
    """An instance of an importable class whose module is gone at restore time."""
    pkg = tmp_path / "mods"
    pkg.mkdir()
    (pkg / "gone_mod.py").write_text("class Thing:\n    def __init__(self): self.v = 7\n")
    monkeypatch.syspath_prepend(str(pkg))
    import gone_mod

    ns = main_ns()
    ns.update(thing=gone_mod.Thing(), keep=[1, 2])
    jp.checkpoint(namespace=ns, **ck)
    (pkg / "gone_mod.py").unlink()
    monkeypatch.delitem(sys.modules, "gone_mod")
    out = {}
    with pytest.raises(
        jp_errors().RestoreFailed, match=r"thing.*gone_mod\.Thing.*no longer exists"
    ):
        jp.restore(None, "thing", namespace=out, **ck)
    assert out == {}  # nothing half-restored
    with pytest.warns(UserWarning, match="thing"):
        res = jp.restore(namespace=out, **ck)
    assert res.restored == ["keep"] and "thing" in res.failed, res.failed
    assert out["keep"] == [1, 2] and "thing" not in out


def test_by_value_code_needs_same_python(ck, monkeypatch):
    from jupyter_pause.engine import pickling

    jp.checkpoint(namespace=main_ns("def f():\n    return 1\n"), **ck)
    monkeypatch.setattr(pickling.sys, "version_info", (3, 99, 0))
    with pytest.raises(jp_errors().RestoreFailed, match="Python 3.1.*re-run the cell"):
        jp.restore(None, "f", namespace={}, **ck)


def jp_errors():
    from jupyter_pause.engine import errors

    return errors
