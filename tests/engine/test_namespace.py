"""Namespace selection: what is saved, what is skipped, and the reasons."""

from __future__ import annotations

import io
import math
import os

import numpy as np

import jupyter_pause as jp
from jupyter_pause.engine import namespace


def test_select_skips_ipython_modules_and_unsavable():
    ns = {
        "__name__": "__main__",
        "__builtins__": __builtins__,
        "In": [""],
        "Out": {},
        "_": 1,
        "__": 2,
        "_i1": "x = 1",
        "_3": 3,
        "exit": object(),
        "get_ipython": object(),
        "np": np,
        "m": math,
        "f": io.FileIO(__file__),  # an open file (an in-memory StringIO is saved)
        "g": (i for i in range(2)),
        "x": 1,
        "_private": 2,
    }
    cand, skipped, modules = namespace.select(ns)
    assert set(cand) == {"x", "_private"}
    assert modules == {"np": "numpy", "m": "math"}
    assert skipped["np"].startswith("module") and "generator" in skipped["g"]
    assert "open file" in skipped["f"]
    assert "In" in skipped[namespace.HISTORY_KEY] and "_i1" in skipped[namespace.HISTORY_KEY]
    assert "__builtins__" not in skipped


def test_modules_reimported_on_restore(ck):
    ns = {"np": np, "osp": os.path, "x": np.arange(3)}
    res = jp.checkpoint(namespace=ns, **ck)
    assert res.saved == ["x"] and "np" in res.skipped
    out = {}
    r = jp.restore(namespace=out, **ck)
    assert out["np"] is np and out["osp"] is os.path and set(r.modules) == {"np", "osp"}


def test_outside_ipython_uses_main(ck, monkeypatch):
    import __main__

    monkeypatch.setattr(__main__, "from_main_test_var", 42, raising=False)
    res = jp.checkpoint("from_main_test_var", **ck)
    assert res.saved == ["from_main_test_var"]


def test_in_ipython_uses_user_ns(ck):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("ipy_var = [1, 2, 3]\n_ = 5")
        res = jp.checkpoint(**ck)
        assert "ipy_var" in res.saved and "_" not in res.saved and "In" not in res.saved
        shell.user_ns.pop("ipy_var")
        jp.restore(**ck)
        assert shell.user_ns["ipy_var"] == [1, 2, 3]
    finally:
        InteractiveShell.clear_instance()
