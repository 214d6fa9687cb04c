"""Every checkpoint accounts for every name, and every restore for every name its
checkpoint holds (issue #36); what cannot come back is named, with why."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

import jupyter_pause as jp
from jupyter_pause.engine import api, changes, checks, records
from jupyter_pause.engine.errors import UnsavableObject


def run(sh, code):
    result = sh.run_cell(code)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result


def checkpoint(sh):
    run(sh, "_res = jp.checkpoint(**_ck, progress=False)")
    return sh.user_ns.pop("_res")


def test_an_incremental_pass_that_loses_a_name_gives_way_to_a_full_one(
    shell, ck, monkeypatch, caplog
):
    # threads other tests of this process left running would make every pass a full one
    monkeypatch.setattr(changes, "notebook_threads_alive", lambda: False)
    run(shell, "a = [1, 2]\nb = {'k': 3}\nc = 'x'")
    checkpoint(shell)
    real = records._Pass.combine
    lost = []

    def loses_a_group(self, fresh, reused):
        out = real(self, fresh, reused)
        if reused:  # the incremental pass
            lost.append("b")
            return [g for g in out if "b" not in g.names]
        return out

    monkeypatch.setattr(records._Pass, "combine", loses_a_group)
    run(shell, "c = 'y'")
    with caplog.at_level(logging.WARNING, logger="jupyter_pause"):
        res = checkpoint(shell)
    assert lost and {"a", "b", "c"} <= set(res.saved) and res.records_reused == 0
    assert "fell back to a full one: neither saved nor skipped: b" in caplog.text
    out: dict = {}
    jp.restore(namespace=out, lazy=False, progress=False, **ck)
    assert out["b"] == {"k": 3}


def test_a_pass_that_cannot_account_for_a_name_commits_nothing(ck, monkeypatch):
    real = records._Pass.combine
    monkeypatch.setattr(
        records._Pass,
        "combine",
        lambda self, f, r: [g for g in real(self, f, r) if "b" not in g.names],
    )
    with pytest.raises(records.Unaccounted, match="neither saved nor skipped: b"):
        jp.checkpoint(namespace={"a": [1], "b": [2]}, progress=False, **ck)
    assert checks.checkpoint_ids(ck_dir(ck)) == []


def ck_dir(ck):
    from jupyter_pause.engine import paths

    return paths.notebook_dir(ck["dir"], ck["notebook"])


def test_a_restore_that_does_not_bring_a_name_back_says_so(ck, monkeypatch):
    jp.checkpoint(namespace={"a": [1], "b": [2]}, progress=False, **ck)
    real = api._load_groups

    def forgets_b(data, m, records_, loader, ns, by_record):
        objs, failures = real(data, m, records_, loader, ns, by_record)
        return {i: o for i, o in objs.items() if by_record.get(i) != "b"}, failures

    monkeypatch.setattr(api, "_load_groups", forgets_b)
    out: dict = {}
    with pytest.warns(UserWarning, match="b: the checkpoint holds it"):
        res = jp.restore(namespace=out, lazy=False, progress=False, **ck)
    assert res.restored == ["a"] and "b" in res.failed


CLASS_THAT_DOES_NOT_LOAD = """
class Lookup:
    def __init__(self):
        self.table = {}
    def __getattr__(self, name):          # `table` is not there yet while it is unpickled
        return self.table[name]
"""


def test_an_object_that_would_not_load_is_named_when_it_is_saved(ck):
    ns = {"__name__": "__main__"}
    exec(CLASS_THAT_DOES_NOT_LOAD + "sim = Lookup()\nfine = [1]\n", ns)
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert "fine" in res.saved and "sim" not in res.saved
    assert res.skipped["sim"].startswith(
        "it would not load again (tried when saved): RecursionError"
    )


def test_a_tracked_object_that_would_not_load_stops_the_checkpoint(ck):
    ns = {"__name__": "__main__"}
    exec(CLASS_THAT_DOES_NOT_LOAD, ns)
    jp.track(ns["Lookup"](), "sim")
    try:
        with pytest.raises(UnsavableObject, match="would not load again"):
            jp.checkpoint(namespace=ns, progress=False, **ck)
    finally:
        jp.untrack("sim")


def test_a_closed_file_is_named_as_closed(tmp_path, ck):
    with open(tmp_path / "f.txt", "w") as f:
        f.write("x")
    res = jp.checkpoint(namespace={"f": f}, progress=False, **ck)
    assert res.skipped["f"] == "a closed file cannot be saved; open it again after the restore"


SHELL_STATE = """
from IPython.core.magic import register_cell_magic, register_line_magic
@register_cell_magic
def do_not_run_in_jupyter(line, cell):
    print("not run")
register_line_magic(lambda line: line)   # nothing holds it: it cannot come back
%load_ext autoreload
%autoreload 2
import matplotlib
matplotlib.use("svg")
x = 1
"""

FRESH_SHELL = """
import sys
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
r = sh.run_cell("import jupyter_pause as jp\\nres = jp.restore(progress=False, **{ck!r})")
assert r.success, r.error_in_exec
assert sh.run_cell("%%do_not_run_in_jupyter\\nraise SystemExit(3)").success
reloader = sh.magics_manager.registry["AutoreloadMagics"]._reloader
assert reloader.enabled and reloader.check_all
import matplotlib
assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
assert sh.user_ns["res"].notes == [], sh.user_ns["res"].notes
print("OK")
"""


def test_the_shell_a_notebook_set_up_comes_back(shell, ck):
    pytest.importorskip("matplotlib")
    run(shell, SHELL_STATE)
    res = checkpoint(shell)
    assert res.skipped["%<lambda>"].startswith("a magic made from something the namespace")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FRESH_SHELL.format(ck=ck))],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ),
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
