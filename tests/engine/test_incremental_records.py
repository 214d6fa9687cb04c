"""Incremental re-checkpoints (engine/records.py, engine/changes.py): only the groups of
variables that a cell could have changed are pickled again, the others' records are
copied; a change through any alias is still saved.

Every test runs cells in a real IPython shell (its events drive the change tracker),
checkpoints from a cell, then restores into a fresh namespace and compares with the live
objects."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import api, changes, durable, manifest, records, store, tensors


@pytest.fixture
def shell(shell):
    run(shell, "import numpy as np\nimport torch")
    return shell


def run(sh, code, silent=False):
    result = sh.run_cell(code, silent=silent)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result


def checkpoint(sh):
    run(sh, "_res = jp.checkpoint(**_ck, progress=False)")
    return sh.user_ns.pop("_res")


def restored(ck):
    out: dict = {}
    jp.restore(namespace=out, lazy=False, progress=False, **ck)
    return out


def test_one_small_change_reuses_every_other_record(shell, ck, monkeypatch):
    run(
        shell,
        "big = [{'id': i, 'tags': [i % 7]} for i in range(5000)]\n"
        "arr = np.arange(300_000, dtype=np.float64)\n"
        "model = torch.nn.Linear(256, 256)\n"
        "n = 1",
    )
    first = checkpoint(shell)
    assert first.records_reused == 0  # nothing to reuse yet
    pickled = []
    real = records.pickle_group
    monkeypatch.setattr(
        records, "pickle_group", lambda names, *a: pickled.extend(names) or real(names, *a)
    )
    run(shell, "n = 2")
    second = checkpoint(shell)
    assert second.records_reused == 3  # big, arr, model copied
    assert set(pickled) == {"n", api.RNG_RECORD}
    assert not second.files_written  # and no tensor data written again
    out = restored(ck)
    assert out["n"] == 2 and out["big"] == shell.user_ns["big"]
    assert np.array_equal(out["arr"], shell.user_ns["arr"])
    assert torch.equal(out["model"].weight, shell.user_ns["model"].weight)


def test_a_list_appended_through_another_name_is_saved(shell, ck):
    run(shell, "a = [1, 2]\nb = a\nholder = {'items': a}\nother = [0]")
    checkpoint(shell)
    run(shell, "b.append(3)")
    res = checkpoint(shell)
    assert res.records_reused >= 1  # other
    out = restored(ck)
    assert out["a"] == [1, 2, 3] and out["a"] is out["b"] is out["holder"]["items"]


def test_objects_of_unchanged_variables_reached_another_way_stay_shared(shell, ck):
    """A cell that reaches objects of variables it never names (here through a module)
    and binds them to a new name: the new variable joins their group, whether it is
    compared with the reused groups directly (it holds few objects) or through an index
    of every object they hold (it holds many)."""
    run(
        shell,
        "import sys, types\n"
        "a = [[i] for i in range(2000)]\nother = [{'k': i} for i in range(3000)]\n"
        "sys.modules['registry'] = types.ModuleType('registry')\n"
        "sys.modules['registry'].a, sys.modules['registry'].other = a, other",
    )
    checkpoint(shell)
    run(shell, "import registry\nalias = registry.a[5]")  # one shared object
    first = checkpoint(shell)
    assert first.records_reused >= 1  # other
    run(shell, "everything = [registry.a, registry.other, list(registry.a)]")  # many
    checkpoint(shell)
    out = {}  # (a restore makes the next checkpoint a full one: restore after both)
    jp.restore(first.id, namespace=out, lazy=False, progress=False, **ck)
    assert out["alias"] is out["a"][5]
    out = restored(ck)
    assert out["everything"][0] is out["a"] and out["everything"][1] is out["other"]
    assert out["everything"][2][7] is out["a"][7] and out["alias"] is out["a"][5]


def test_a_dict_mutated_through_a_function_is_saved(shell, ck):
    run(
        shell,
        "d = {}\nconfig = {'lr': 1}\nwrap = [config]\n"
        "def put(k, v):\n    d[k] = v\n"
        "def tweak(target):\n    target['lr'] = 2\n",
    )
    checkpoint(shell)
    run(shell, "put('x', 1)")
    run(shell, "tweak(wrap[0])")  # config changed, never named
    checkpoint(shell)
    out = restored(ck)
    assert out["d"] == {"x": 1}
    assert out["config"] == {"lr": 2} and out["wrap"][0] is out["config"]


def test_a_method_of_a_cell_class_changing_a_global_is_saved(shell, ck):
    run(
        shell,
        "log = []\nclass Acc:\n    def add(self):\n        log.append(len(log))\nacc = Acc()",
    )
    checkpoint(shell)
    run(shell, "acc.add(); acc.add()")
    checkpoint(shell)
    assert restored(ck)["log"] == [0, 1]


def test_a_model_changed_through_its_optimizer_is_saved(shell, ck):
    run(
        shell,
        "torch.manual_seed(0)\nmodel = torch.nn.Linear(8, 8)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.5)\n"
        "model(torch.ones(2, 8)).sum().backward()\n"
        "def train():\n    opt.step()\n"
        "unrelated = list(range(10))",
    )
    checkpoint(shell)
    run(shell, "train()")  # names neither model nor opt
    res = checkpoint(shell)
    assert res.records_reused >= 1  # unrelated
    out = restored(ck)
    live = shell.user_ns["model"]
    assert torch.equal(out["model"].weight, live.weight)
    assert out["opt"].param_groups[0]["params"][0] is out["model"].weight


def test_a_numpy_view_written_through_is_saved(shell, ck):
    # 2 MiB: big enough for the digest shortcut of untouched arrays, which must not apply
    # here (a write far from the sampled bytes, through a view another group holds)
    run(shell, "base = np.zeros(1 << 18)\nview = base[1001:1011]\ntbase = torch.zeros(100)")
    run(shell, "tview = tbase[5:10]")
    checkpoint(shell)
    run(shell, "view[:] = 7")
    run(shell, "tview.fill_(3)")
    res = checkpoint(shell)
    assert res.records_reused >= 2  # base and tbase: their data is checked by digest
    out = restored(ck)
    assert (out["base"][1001:1011] == 7).all() and out["base"].sum() == 70
    assert torch.equal(out["tbase"], shell.user_ns["tbase"])
    out["view"][0] = -1
    assert out["base"][1001] == -1  # still a view of it


def test_a_tensor_given_a_new_shape_through_an_alias_is_saved(shell, ck):
    run(shell, "w = torch.nn.Parameter(torch.zeros(4))\nholder = [w]\nkeep = [1]")
    checkpoint(shell)
    run(shell, "holder[0].data = torch.ones(2, 3)")
    checkpoint(shell)
    assert restored(ck)["w"].shape == (2, 3)


def test_code_whose_names_cannot_be_known_makes_a_full_checkpoint(shell, ck):
    run(shell, "x = [1]\ny = [2]")
    checkpoint(shell)
    run(shell, "exec('x.append(5)')")
    res = checkpoint(shell)
    assert res.records_reused == 0
    assert restored(ck)["x"] == [1, 5]


def test_a_silent_execution_makes_a_full_checkpoint(shell, ck):
    run(shell, "x = [1]\ny = [2]")
    checkpoint(shell)
    run(shell, "x.append(6)", silent=True)  # no pre_run_cell: its code is not seen
    res = checkpoint(shell)
    assert res.records_reused == 0
    assert restored(ck)["x"] == [1, 6]


def test_a_restore_makes_the_next_checkpoint_full(shell, ck):
    run(shell, "x = [1]\ny = [2]")
    checkpoint(shell)
    run(shell, "_ = jp.restore(**_ck, progress=False, lazy=False)")
    run(shell, "x.append(2)")
    assert checkpoint(shell).records_reused == 0
    assert restored(ck)["x"] == [1, 2]


def test_full_pickles_everything(shell, ck):
    run(shell, "x = [1]\ny = [2]")
    checkpoint(shell)
    run(shell, "_res = jp.checkpoint(**_ck, progress=False, full=True)")
    assert shell.user_ns.pop("_res").records_reused == 0


def test_names_touched():
    assert changes.names_touched("a = b + c.d\ndef f():\n    return e") >= {"a", "b", "c", "f", "e"}
    assert changes.names_touched("import os.path as p, json\nfrom x import y") >= {
        "p",
        "json",
        "y",
    }
    assert changes.names_touched("try:\n    pass\nexcept E as err:\n    pass") >= {"err", "E"}
    assert changes.names_touched("eval('x')") is None
    assert changes.names_touched("from m import *") is None
    assert changes.names_touched("x = (") is None
    ipython_magic = "get_ipython().run_line_magic('checkpoint', '')"
    assert changes.names_touched(ipython_magic) == set()
    assert changes.names_touched("get_ipython().run_line_magic('time', 'x')") is None


def test_a_tensor_reshaped_outside_any_cell_is_saved(shell, ck):
    """No cell names it (a thread, a callback): the replay of its group's tensors sees
    the new shape, and the whole namespace is pickled again."""
    run(shell, "w = torch.zeros(4)\nkeep = [1]")
    checkpoint(shell)
    shell.user_ns["w"].data = torch.ones(2, 3)  # behind the tracker's back
    res = checkpoint(shell)
    assert res.records_reused == 0
    assert restored(ck)["w"].shape == (2, 3)


def test_an_untouched_array_keeps_its_digest_and_a_touched_one_is_hashed(shell, ck, monkeypatch):
    run(shell, "a = np.zeros(1 << 18)\nb = np.zeros(1 << 18)")
    checkpoint(shell)
    hashed = []
    real = tensors.hash_storage
    monkeypatch.setattr(tensors, "hash_storage", lambda s: hashed.append(s.owner) or real(s))
    run(shell, "b[12345] = 1.0")
    checkpoint(shell)
    assert [h for h in hashed if h != api.RNG_RECORD] == ["b"]  # not a
    assert restored(ck)["b"][12345] == 1.0


FORMAT1 = Path(__file__).parent / "data" / "format1"  # written by the format-1 engine


def test_a_format_1_checkpoint_still_restores(ck, nbdir):
    """One memo over all records: shared objects stay shared, a subset loads its records
    0..k, and the next checkpoint (format 2) restores too."""
    durable.makedirs(nbdir.parent)  # this user's own folder (one open to others is refused)
    shutil.copytree(FORMAT1, nbdir)
    out: dict = {}
    jp.restore(namespace=out, lazy=False, progress=False, trust=True, **ck)
    assert out["a"]["items"] is out["b"][0] and out["a"]["items"] == [1, 2, 3]
    assert out["opt"].param_groups[0]["params"][0] is out["model"][0].weight
    assert np.array_equal(out["arr"], np.arange(12, dtype=np.float32).reshape(3, 4))
    out["view"][0] = 42
    assert out["arr"][1, 0] == 42
    some: dict = {}
    jp.restore("opt", namespace=some, progress=False, trust=True, **ck)
    assert some["opt"].param_groups[0]["params"][0].shape == (3, 4)
    jp.checkpoint(namespace=out, progress=False, trust=True, **ck)
    again: dict = {}
    jp.restore(namespace=again, lazy=False, progress=False, **ck)
    assert again["a"]["items"] is again["b"][0]
    assert store.get_manifest(ck["dir"], ck["notebook"]).format == manifest.FORMAT


def test_a_thread_still_running_between_cells_makes_a_full_checkpoint(shell, ck):
    run(
        shell,
        "import threading\nhistory = []\nother = [0]\ngo = threading.Event()\n"
        "done = threading.Event()\n"
        "def train():\n    go.wait(60)\n    history.append(1)\n    done.set()\n"
        "worker = threading.Thread(target=train, daemon=True)\nworker.start()",
    )
    checkpoint(shell)
    run(shell, "go.set()\nassert done.wait(60)")  # names neither history nor train
    run(shell, "worker.join(60)")
    res = checkpoint(shell)
    assert res.records_reused == 0
    assert restored(ck)["history"] == [1]


def test_a_large_pickle_spooled_to_disk_is_reused_and_restored(shell, ck):
    """A group whose pickle outgrows records.SPOOL_IN_MEMORY is spooled to an unlinked
    file (issue #31); the next checkpoint copies its records from there."""
    run(shell, "import os\nblob = os.urandom(12 << 20)\nn = 1")
    checkpoint(shell)
    run(shell, "n = 2")
    res = checkpoint(shell)
    assert res.records_reused >= 1  # blob, copied from its spool
    reused = [g for g in api._STATE[str(Path(res.path).parent)].groups if g.names == ["blob"]]
    assert reused and reused[0].data.on_disk
    out = restored(ck)
    assert out["blob"] == shell.user_ns["blob"] and out["n"] == 2
