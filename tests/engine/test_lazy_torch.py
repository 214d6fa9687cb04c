"""A lazy restore into a process that has not imported torch (a fresh kernel) does not wait
for ``import torch``: what needs torch is unpickled once the background import is done.

Each test runs a child process with a real IPython shell. The child holds torch's import
at a gate (``helpers.torch_gate``: torch's loader waits for a file), so "the restore
returned before torch was in" is certain, not a race: had the restore or the first cell
needed torch on the main thread, the child would hang at the gate and the test would
fail on its deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch

import jupyter_pause as jp

from ..helpers import torch_gate

DEADLINE = 120

PRELUDE = """
import json, sys
GATE = {gate!r}

def open_gate():  # torch may come in now
    open(GATE, "w").close()

from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
ns = shell.user_ns
import jupyter_pause as jp
from jupyter_pause.engine import lazy
assert "torch" not in sys.modules
ck = {ck!r}
out = {{}}

# opens the gate as the main thread starts to wait in a lazy load's wait() (a checkpoint
# waiting for what is still loading)
def open_gate_when_waiting():
    real = lazy.LazyLoad.wait

    def wait(self, *args, **kwargs):
        open_gate()
        return real(self, *args, **kwargs)

    lazy.LazyLoad.wait = wait

def cell(code):
    r = shell.run_cell(code)
    if r.error_in_exec is not None:
        raise r.error_in_exec
"""


def state():
    import random

    torch.manual_seed(0)
    random.seed(1)
    np.random.seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 64))
    model[1].weight = torch.nn.Parameter(model[0].weight.t().contiguous())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
    return {
        "model": model,
        "opt": opt,
        "rows": [model[0].weight[0], model[0].weight[1:3]],  # views of a parameter
        "n": 7,
        "words": ["a", "b"],
        "arr": np.arange(12.0),
        "note": "a string that merely mentions torch",
        "torch": torch,
        "np": np,
    }


def run_child(ck, body: str, refuse: bool = False) -> dict:
    gate = Path(ck["dir"]).parent / "torch-gate-open"
    code = torch_gate(gate, refuse=refuse, deadline=DEADLINE)
    code += PRELUDE.format(gate=str(gate), ck=ck) + textwrap.dedent(body)
    code += "\nprint('RESULT ' + json.dumps(out))\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE + 60
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :]) | {"stderr": proc.stderr}


def test_the_namespace_is_back_before_torch_is_imported(ck):
    import random

    src = state()
    jp.checkpoint(namespace=src, progress=False, **ck)
    draws = [torch.rand(1).item(), random.random(), float(np.random.rand())]
    out = run_child(
        ck,
        """
        r = jp.restore(namespace=ns, progress=False, **ck)
        out["torch_imported_at_return"] = lazy.module_ready("torch")
        out["restored"], out["loading"] = sorted(r.restored), sorted(r.loading)
        out["modules"] = r.modules
        cell("x = n + len(words) + arr.sum(); import random; draws = [random.random(), float(np.random.rand())]")
        out["x"], out["draws"] = ns["x"], ns["draws"]
        out["still_loading"] = sorted(lazy.active().pending())
        out["line"] = lazy.active()._line(["model", "torch"])
        open_gate()
        cell("t = torch.rand(1).item(); w = model[0].weight")
        out["torch_draw"] = ns["t"]
        cell("same = [opt.param_groups[0]['params'][0] is w, model[1].weight is not w, rows[0].data_ptr() == w.data_ptr()]")
        out["shared"] = ns["same"]
        out["model_sum"] = float(ns["model"][0].weight.detach().sum())
        out["note"] = ns["note"]
        c = jp.checkpoint(namespace=ns, progress=False, **ck)
        m = jp.engine.store.get_manifest(ck["dir"], ck["notebook"], c.id)
        out["rewritten"] = sorted({s.owner for s in m.storages if s.file in c.files_written})
        """,
    )
    assert out["torch_imported_at_return"] is False
    assert out["restored"] == ["arr", "n", "words"] and out["modules"] == ["np"]
    # torch's objects, any group naming torch, and the torch alias wait for the import
    assert out["loading"] == ["model", "note", "opt", "rows", "torch"]
    assert out["x"] == 7 + 2 + float(np.arange(12.0).sum())
    assert out["still_loading"] == ["model", "note", "opt", "rows", "torch"]
    # what the waiting line says while torch is held: its bytes may all be in already
    assert out["line"].startswith("loading model, torch (") and "importing torch" in out["line"]
    # the generators continue where they were: random and numpy at once, torch before
    # the first cell that names torch
    assert out["draws"] == draws[1:] and out["torch_draw"] == draws[0]
    assert out["shared"] == [True, True, True]
    assert out["model_sum"] == float(src["model"][0].weight.detach().sum())
    assert out["note"] == src["note"]
    # digests known from the restore: no tensor is written again, only numpy's generator
    # state, which the cell's draw changed
    assert out["rewritten"] == ["__jupyter_pause_rng__"]


def test_a_checkpoint_while_torch_is_importing_waits_and_saves_everything(ck):
    src = state()
    jp.checkpoint(namespace=src, progress=False, **ck)
    out = run_child(
        ck,
        """
        jp.restore(namespace=ns, progress=False, **ck)
        open_gate_when_waiting()
        c = jp.checkpoint(namespace=ns, progress=False, **ck)
        out["saved"] = sorted(c.saved)
        out["id"] = c.id
        """,
    )
    assert {"model", "opt", "rows", "n", "arr", "note"} <= set(out["saved"])
    back = {}
    jp.restore(out["id"], namespace=back, progress=False, lazy=False, **ck)
    assert torch.equal(back["model"][0].weight, src["model"][0].weight)
    assert back["opt"].param_groups[0]["params"][0] is back["model"][0].weight


def test_without_torch_its_objects_fail_by_name_and_the_rest_are_restored(ck):
    jp.checkpoint(namespace=state(), progress=False, **ck)
    out = run_child(
        ck,
        """
        r = jp.restore(namespace=ns, progress=False, **ck)
        failed = lazy.wait()
        out["failed"] = {k: v for k, v in failed.items()}
        out["present"] = sorted(k for k in ("n", "words", "arr", "note", "model", "torch") if k in ns)
        """,
        refuse=True,
    )
    # "note" only mentions torch: its group waited for the import, then unpickled fine
    assert out["present"] == ["arr", "n", "note", "words"]
    assert set(out["failed"]) == {"model", "opt", "rows", "torch"}
    assert "No module named 'torch'" in out["failed"]["model"]


def test_a_damaged_blob_fails_only_the_torch_objects_that_use_it(ck, nbdir):
    src = state()
    src["other"] = torch.arange(300_000.0)  # > 1 MiB: a blob of its own
    c = jp.checkpoint(namespace=src, progress=False, **ck)
    m = jp.engine.store.get_manifest(ck["dir"], ck["notebook"], c.id)
    weight = m.storages[m.objects["model"].storages[0]]  # model[0].weight: all three reach it
    assert m.storages[m.objects["other"].storages[0]].file != weight.file
    path = nbdir / weight.file
    start, _raw, header = jp.engine.checks.read_safetensors_header(path)
    raw = bytearray(path.read_bytes())
    raw[start + header[weight.key]["data_offsets"][0] + 1] ^= 0xFF  # one flipped byte
    path.write_bytes(bytes(raw))
    out = run_child(
        ck,
        """
        lazy.EAGER_BELOW = 16  # the model's tensors, too, are read in the background
        jp.restore(namespace=ns, progress=False, **ck)
        open_gate()
        out["failed"] = lazy.wait()
        out["other"] = float(ns["other"].sum()) if "other" in ns else None
        """,
    )
    assert set(out["failed"]) == {"model", "opt", "rows"}
    assert "damaged" in out["failed"]["model"] or "digest" in out["failed"]["model"]
    assert out["other"] == float(src["other"].sum())


def test_damage_in_a_small_tensor_still_passes_over_to_an_older_checkpoint(ck, nbdir):
    """Small tensors are read (into numpy arrays) and verified before the restore returns,
    torch or not: damage there makes it fall back to the newest checkpoint that verifies."""
    src = state()
    older = jp.checkpoint(namespace=src, progress=False, **ck)
    src["n"] = 8
    src["extra"] = torch.ones(3)
    newer = jp.checkpoint(namespace=src, progress=False, **ck)
    m = jp.engine.store.get_manifest(ck["dir"], ck["notebook"], newer.id)
    extra = m.storages[m.objects["extra"].storages[0]]
    path = nbdir / extra.file
    start, _raw, header = jp.engine.checks.read_safetensors_header(path)
    raw = bytearray(path.read_bytes())
    raw[start + header[extra.key]["data_offsets"][0]] ^= 0xFF
    path.write_bytes(bytes(raw))
    out = run_child(
        ck,
        """
        r = jp.restore(namespace=ns, progress=False, **ck)
        out["id"], out["passed_over"], out["n"] = r.id, list(r.passed_over), ns["n"]
        open_gate()
        out["failed"] = lazy.wait()
        out["model"] = "model" in ns
        """,
    )
    assert out["id"] == older.id and out["passed_over"] == [newer.id]
    assert out["n"] == 7 and out["failed"] == {} and out["model"]


def test_a_name_rebound_while_it_loads_keeps_the_users_value(ck):
    """Held at torch's import, the model is still loading when a cell rebinds it through
    ``sys.modules['__main__']`` (a way the hook cannot see): the background restore must
    not overwrite the user's value once torch is in."""
    jp.checkpoint(namespace=state(), progress=False, **ck)
    out = run_child(
        ck,
        """
        jp.restore(namespace=ns, progress=False, **ck)
        out["main_is_ns"] = sys.modules["__main__"].__dict__ is ns
        cell("import sys; sys.modules['__main__'].model = 'mine'")
        open_gate()
        cell("w = opt.param_groups[0]['params'][0]")  # waits for torch: everything settles
        out["model"] = ns["model"]
        out["opt"] = type(ns["opt"]).__name__
        out["pending"] = lazy.active().pending() if lazy.active() else []
        """,
    )
    assert out["main_is_ns"] is True
    assert out["model"] == "mine"
    assert out["opt"] == "SGD" and out["pending"] == []
    assert "model was bound anew while it loaded" in out["stderr"]


def test_reaching_the_namespace_through_main_waits_for_the_load(ck):
    """``__main__.model`` (IPython's ``__main__`` is the namespace) waits like ``model``
    does; the gate opens only once the cell has started to wait."""
    jp.checkpoint(namespace=state(), progress=False, **ck)
    out = run_child(
        ck,
        """
        jp.restore(namespace=ns, progress=False, **ck)
        open_gate_when_waiting()
        cell("import __main__; kind = type(__main__.model).__name__")
        out["kind"] = ns["kind"]
        cell("from __main__ import *")
        out["rows"] = type(ns["rows"]).__name__
        """,
    )
    assert out["kind"] == "Sequential"
    assert out["rows"] == "list"


def test_a_checkpoint_written_without_torch_waits_for_nothing(ck):
    """Written where torch was not imported, no pickle can name torch: a lazy restore
    assigns everything at once, even a string that mentions it (no search of the
    pickle, which may be hundreds of MB of a frame's Arrow buffers)."""
    body = """
        c = jp.checkpoint(namespace={"note": "it merely mentions torch", "n": 1},
                          progress=False, **ck)
        out["torch"] = jp.engine.store.get_manifest(ck["dir"], ck["notebook"], c.id).versions
        r = jp.restore(namespace=ns, progress=False, **ck)
        out["restored"], out["loading"] = sorted(r.restored), sorted(r.loading)
    """
    out = run_child(ck, body, refuse=True)
    assert out["torch"]["torch"] is None
    assert out["loading"] == [] and out["restored"] == ["n", "note"], out
