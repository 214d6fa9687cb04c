"""Lazy restore (engine/lazy.py): the graph and small objects at once, large tensors in the
background, nothing ever half loaded, a damaged blob fails only the objects that use it.

The background reader is held at a gate where a test needs an ordering to be certain;
every wait polls a condition with a deadline."""

from __future__ import annotations

import itertools
import threading
import types

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import checks, lazy, store, tensors
from jupyter_pause.engine.changes import names_used

DEADLINE = 120


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    """Objects of 64 KiB and more load in the background (keeps the tests small)."""
    monkeypatch.setattr(lazy, "EAGER_BELOW", 64 << 10)
    yield
    lazy.cancel()


@pytest.fixture
def gate(monkeypatch):
    """The background reader stops before each storage until the gate is open."""
    opened = threading.Event()
    real = tensors.read_storage

    def gated(*args, **kwargs):
        if threading.current_thread().name == "jp-lazy-restore":
            assert opened.wait(DEADLINE), "gate never opened"
        return real(*args, **kwargs)

    monkeypatch.setattr(tensors, "read_storage", gated)
    yield opened
    opened.set()  # let a reader still held here see that it was cancelled


def cell(code):
    return types.SimpleNamespace(raw_cell=code)


def run_in_thread(fn):
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.Linear(256, 128))
    model[1].weight = torch.nn.Parameter(model[0].weight.t().contiguous())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 128)).sum().backward()
    opt.step()
    big = torch.randn(600, 600)  # > 1 MiB: a blob of its own
    arr = np.random.default_rng(0).random(40_000)
    return {
        "model": model,
        "opt": opt,
        "big": big,
        "rows": [big[0], big[1:3]],  # views of big
        "arr": arr,
        "arr_half": arr[::2],
        "n": 7,
        "words": ["a", "b"],
    }


def same(a, b):
    return all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_small_objects_first_large_ones_in_the_background(ck, gate):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    ns = {}
    res = jp.restore(namespace=ns, lazy=True, **ck)
    assert ns["n"] == 7 and ns["words"] == ["a", "b"]
    assert set(res.loading) == {"model", "opt", "big", "rows", "arr", "arr_half"}
    assert not set(res.loading) & set(ns)  # nothing half loaded is visible
    assert res.bytes_loading > 600 * 600 * 4
    gate.set()
    assert lazy.wait() == {}
    assert same(ns["model"], src["model"]) and torch.equal(ns["big"], src["big"])
    assert np.array_equal(ns["arr_half"], src["arr_half"])
    assert lazy.active() is None


def test_sharing_survives_a_lazy_restore(ck, gate):
    jp.checkpoint(namespace=state(), **ck)
    ns = {}
    jp.restore(namespace=ns, lazy=True, **ck)
    gate.set()
    lazy.wait()
    model, opt, big, rows = ns["model"], ns["opt"], ns["big"], ns["rows"]
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in model.parameters()]
    assert set(map(id, opt.state)) <= {id(p) for p in model.parameters()}
    assert rows[0].untyped_storage().data_ptr() == big.untyped_storage().data_ptr()
    big[0, 0] = 123.0
    assert rows[0][0].item() == 123.0
    assert np.shares_memory(ns["arr"], ns["arr_half"])
    assert model[0].weight.grad is not None


def test_an_object_that_reaches_a_loading_one_waits_for_it(ck, gate):
    jp.checkpoint(namespace=state(), **ck)
    ns = {}
    res = jp.restore(namespace=ns, lazy=True, **ck)
    assert "opt" in res.loading  # small itself, but it holds the model's parameters
    assert "rows" in res.loading  # views of big


@pytest.mark.parametrize("touch", list(itertools.permutations(["model", "big", "arr_half"])))
@pytest.mark.parametrize("read", ["forward", "backward"])
def test_every_ordering_gives_full_values(ck, monkeypatch, touch, read):
    """Cells touch the objects in every order while the reader goes either way."""
    src = state()
    jp.checkpoint(namespace=src, **ck)
    real_order = lazy.LazyLoad.order
    if read == "backward":
        monkeypatch.setattr(lazy.LazyLoad, "order", lambda self: real_order(self)[::-1])
    ns = {}
    jp.restore(namespace=ns, lazy=True, **ck)
    for name in touch:
        lazy.before_cell(cell(f"{name}.sum()"))
        assert name in ns
        if name == "model":
            assert same(ns["model"], src["model"])
        elif name == "big":
            assert torch.equal(ns["big"], src["big"])
        else:
            assert np.array_equal(ns["arr_half"], src["arr_half"])
    lazy.wait()
    assert torch.equal(ns["rows"][1], src["rows"][1])


def test_a_cell_that_does_not_touch_a_loading_object_runs_at_once(ck, gate):
    jp.checkpoint(namespace=state(), **ck)
    ns = {}
    jp.restore(namespace=ns, lazy=True, **ck)
    t = run_in_thread(lambda: lazy.before_cell(cell("n + len(words)")))
    t.join(DEADLINE)
    assert not t.is_alive()  # the gate is still closed: it did not wait for the reader
    assert "model" not in ns


def test_a_cell_that_touches_one_waits_for_it_and_says_so(ck, gate, capsys):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    ns = {}
    jp.restore(namespace=ns, lazy=True, **ck)
    t = run_in_thread(lambda: lazy.before_cell(cell("y = big.sum()")))
    _wait_for(lambda: "loading big" in capsys.readouterr().out)
    assert t.is_alive() and "big" not in ns
    gate.set()
    t.join(DEADLINE)
    assert torch.equal(ns["big"], src["big"])


def test_the_waiting_line_is_shown_about_twice_a_second_not_per_storage(ck):
    """Each storage read wakes the waiting hook; printing on every wake-up floods the
    kernel's output channel (one message per storage)."""
    import time

    src = {f"t{i}": torch.randn(20_000) for i in range(60)}  # 60 storages of 80 KB
    jp.checkpoint(namespace=src, **ck)
    ns = {}
    jp.restore(namespace=ns, lazy=True, **ck)
    load = lazy.active()
    shown = []
    t0 = time.monotonic()
    load.wait(list(src), shown.append)
    elapsed = time.monotonic() - t0
    assert len(shown) <= 2 * elapsed + 2, (len(shown), elapsed)
    assert lazy.wait() == {} and all(torch.equal(ns[k], v) for k, v in src.items())


def test_functions_called_by_a_cell_count_as_using_their_globals():
    ns = {}
    exec("def f():\n    return model.weight\nclass C:\n    def m(self):\n        return big", ns)
    assert {"f", "model"} <= names_used("f()", ns)
    assert "big" in names_used("C().m()", ns)
    assert names_used("globals()['model']", ns) is None  # cannot tell: waits for all
    assert names_used("x = (", ns) is None


def test_a_checkpoint_taken_while_loading_saves_the_full_objects(ck, gate, monkeypatch):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    ns = {}
    jp.restore(namespace=ns, lazy=True, **ck)
    assert "model" not in ns
    real_wait = lazy.LazyLoad.wait

    def open_then_wait(self, *a, **k):  # the checkpoint must wait for the reader
        gate.set()
        return real_wait(self, *a, **k)

    monkeypatch.setattr(lazy.LazyLoad, "wait", open_then_wait)
    jp.checkpoint(namespace=ns, **ck)
    out = {}
    jp.restore(namespace=out, lazy=False, **ck)
    assert same(out["model"], src["model"]) and torch.equal(out["big"], src["big"])


def test_a_blob_damaged_mid_way_fails_only_the_objects_that_use_it(ck, nbdir):
    src = state()
    jp.checkpoint(namespace=src, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"])
    (rel,) = {s.file for s in m.storages if s.owner == "big"}
    assert not {s.file for s in m.storages if s.owner == "model"} & {rel}
    path = nbdir / rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte in the middle of big's data
    path.write_bytes(bytes(data))
    checks._VERIFIED.clear()
    ns = {}
    res = jp.restore(namespace=ns, lazy=True, **ck)
    assert "big" in res.loading  # the header is intact: found while reading
    told = []  # what a resumed kernel tells its server (kernel_ops._report_damage)
    lazy.active().on_damage = lambda recovered, lost: told.append((recovered, sorted(lost)))
    failed = lazy.wait()
    assert set(failed) == {"big", "rows"}  # rows are views of big
    assert told == [({}, ["big", "rows"])]  # no older checkpoint has a copy
    assert "tensor" in failed["big"] and rel in failed["big"]
    assert "big" not in ns and "rows" not in ns
    assert same(ns["model"], src["model"]) and ns["n"] == 7


def test_the_first_checkpoint_after_a_lazy_restore_writes_no_tensor(ck):
    big = torch.nn.Linear(1024, 1024)  # 4 MiB: above the digest cache's threshold
    jp.checkpoint(namespace={"model": big}, **ck)
    tensors._CACHE.clear()
    checks._VERIFIED.clear()
    ns = {}
    jp.restore(namespace=ns, lazy=True, **ck)
    res = jp.checkpoint(namespace=ns, **ck)
    assert not res.files_written and res.bytes_written < 20_000


def test_a_new_restore_cancels_one_still_loading(ck, gate):
    jp.checkpoint(namespace=state(), **ck)
    first = {}
    jp.restore(namespace=first, lazy=True, **ck)
    gate.set()
    second = {}
    jp.restore(namespace=second, lazy=False, **ck)
    assert lazy.active() is None and "model" in second


def test_eager_setting_keeps_the_old_behaviour(ck, monkeypatch):
    monkeypatch.setenv(lazy.ENV_RESTORE, "eager")
    assert not lazy.lazy_by_default({})


def _wait_for(cond, deadline=DEADLINE):
    import time

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if cond():
            return
        threading.Event().wait(0.05)
    raise AssertionError("condition not met before the deadline")


def test_torch_is_imported_on_a_helper_thread_while_the_restore_reads(ck, tmp_path):
    """A fresh process that has not imported torch starts importing it as soon as the
    manifest is read, off the main thread (the restore then finds it loaded or loading)."""
    import json
    import subprocess
    import sys
    import textwrap

    jp.checkpoint(namespace={"w": torch.ones(4)}, **ck)
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import importlib, json, sys, threading
            import jupyter_pause as jp
            assert "torch" not in sys.modules
            calls = []
            real = importlib.import_module
            def spy(name, *a, **k):
                calls.append((threading.current_thread().name, name))
                return real(name, *a, **k)
            importlib.import_module = spy
            ns = {{}}
            jp.restore(namespace=ns, progress=False, lazy=False, **{ck!r})
            print(json.dumps([calls, float(ns["w"].sum())]))
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, timeout=300, check=True, text=True
    )
    calls, total = json.loads(out.stdout.strip().splitlines()[-1])
    assert ["jp-restore-imports", "torch"] in calls and total == 4.0
