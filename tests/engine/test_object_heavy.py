"""Object-heavy namespaces (issue #36): large containers pickled in chunks of their own
memo, arrays of Python objects kept as storages, large groups' records apart from
objects.pkl (format 3), pandas' copy on write kept across a restore, and a lazy restore
that does not walk what it has read already."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pandas as pd
import pytest

import jupyter_pause as jp
from jupyter_pause.engine import bundle, checks, errors, lazy, paths, pickling, store

from .conftest import main_ns


def restored(ck, **kw) -> dict:
    out = {"__name__": "__main__"}
    jp.restore(namespace=out, progress=False, **{"lazy": False, **kw}, **ck)
    lazy.wait()
    return out


# ------------------------------------------------------------------ chunks
def test_a_large_list_keeps_what_another_variable_holds_of_it(ck):
    """A chunk whose item something else holds too is not pickled apart: the list is
    pickled again with one memo, and the item is one object after the restore."""
    ns = main_ns(
        "class Point:\n    def __init__(self, i):\n        self.i = i\n"
        "rows = [{'i': i, 'tags': [i % 7]} for i in range(40_000)]\n"
        "special = rows[1234]\n"
        "points = [Point(i) for i in range(40_000)]\n"
        "inner = [[i] for i in range(40_000)]\n"
        "holder = {'x': inner[7]}\n"
        "words = [str(i) for i in range(40_000)]\n"
    )
    jp.checkpoint(namespace=ns, progress=False, **ck)
    for lazy_ in (False, True):
        out = restored(ck, lazy=lazy_)
        assert out["special"] is out["rows"][1234] and out["rows"][5] == {"i": 5, "tags": [5]}
        assert out["holder"]["x"] is out["inner"][7]
        assert {type(p) for p in out["points"]} == {out["Point"]} and out["points"][-1].i == 39_999
        assert out["words"] == ns["words"]


def test_a_chunk_that_shares_an_object_is_pickled_again_with_one_memo(ck, monkeypatch):
    shared = []
    real = pickling.StatePickler._chunks

    def noted(self, parts):
        try:
            yield from real(self, parts)
        except pickling.ChunkShared:
            shared.append(True)
            raise

    monkeypatch.setattr(pickling.StatePickler, "_chunks", noted)
    ns = main_ns("rows = [[i] for i in range(40_000)]\nalias = rows[20_000]\n")
    jp.checkpoint(namespace=ns, progress=False, **ck)
    assert shared  # the chunks were tried, and given up
    out = restored(ck)
    assert out["alias"] is out["rows"][20_000]


# ------------------------------------------------------------------ arrays of objects
def test_views_of_an_array_of_strings_view_it_again(ck, nbdir):
    ns = main_ns(
        "import numpy as np\n"
        "words = np.array([f'w{i}' for i in range(10_000)], dtype=object)\n"
        "some = words[10:20]\n"
        "grid = words.reshape(100, 100)\n"
        "column = grid[:, 3]\n"
    )
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    m = checks.read_manifest(nbdir, res.id)
    assert [s.kind for s in m.storages].count("objects") == 1  # pickled once for all four
    for lazy_ in (False, True):
        out = restored(ck, lazy=lazy_)
        assert list(out["column"]) == list(ns["column"]) and out["some"][0] == "w10"
        out["words"][13] = "changed"
        assert out["some"][3] == "changed" and out["grid"][0, 13] == "changed"


def test_an_array_of_lists_is_pickled_with_its_variable(ck, nbdir):
    ns = main_ns(
        "import numpy as np\n"
        "tokens = np.empty(5000, dtype=object)\n"
        "for i in range(5000):\n    tokens[i] = ['t', i]\n"
    )
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    assert "objects" not in {s.kind for s in checks.read_manifest(nbdir, res.id).storages}
    assert restored(ck)["tokens"][4321] == ["t", 4321]


def test_columns_of_strings_viewed_by_many_frames_are_pickled_once(ck, nbdir):
    words = np.array([f"w{i % 97} {i}" for i in range(30_000)], dtype=object)
    df = pd.DataFrame({"n": np.arange(30_000), "t": pd.Series(words, dtype=object)})
    ns = {"df": df, **{f"col{i}": df["t"] for i in range(8)}, "head": df.iloc[:100]}
    res = jp.checkpoint(namespace=ns, progress=False, **ck)
    m = checks.read_manifest(nbdir, res.id)
    assert [s.kind for s in m.storages].count("objects") == 1
    out = restored(ck)
    assert out["col3"].equals(df["t"]) and out["head"].equals(df.iloc[:100])


def test_a_restored_frame_copies_on_write_as_the_original_did(ck):
    df = pd.DataFrame({"a": np.arange(6.0), "t": pd.Series(list("abcdef"), dtype=object)})
    ns = {"df": df, "s": df["a"], "t": df["t"], "v": df.iloc[1:3]}
    jp.checkpoint(namespace=ns, progress=False, **ck)
    for lazy_ in (False, True):
        out = restored(ck, lazy=lazy_)
        out["df"].iloc[1, 0] = 99.0
        out["df"].iloc[1, 1] = "Z"
        assert out["s"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert out["t"].tolist() == list("abcdef")
        assert out["v"].values.tolist() == [[1.0, "b"], [2.0, "c"]]
        assert out["df"].iloc[1, 0] == 99.0 and out["df"].iloc[1, 1] == "Z"


# ------------------------------------------------------------------ records apart (format 3)
def checkpoint(sh):
    assert sh.run_cell("_res = jp.checkpoint(**_ck, progress=False)").success
    return sh.user_ns.pop("_res")


def test_a_large_group_keeps_its_records_apart_and_its_reuse_writes_nothing(shell, ck, nbdir):
    assert shell.run_cell(
        "big = [{'i': i, 'name': str(i), 'tags': [i % 7]} for i in range(60_000)]\nn = 1"
    ).success
    first = checkpoint(shell)
    m = checks.read_manifest(nbdir, first.id)
    apart = [g for g in m.groups if g.records is not None]
    assert len(apart) == 1 and m.storages[apart[0].records].nbytes > 1_000_000
    assert shell.run_cell("n = 2").success
    second = checkpoint(shell)
    assert second.records_reused >= 1 and second.bytes_written < 100_000
    again = checks.read_manifest(nbdir, second.id)
    kept = [g.records for g in again.groups if g.records is not None]
    assert again.storages[kept[0]].file == m.storages[apart[0].records].file
    for lazy_ in (False, True):
        out = restored(ck, lazy=lazy_)
        assert out["big"][59_999] == {"i": 59_999, "name": "59999", "tags": [59_999 % 7]}
    some = {}
    jp.restore(second.id, "n", namespace=some, progress=False, **ck)
    assert some == {"n": 2}


def test_damaged_records_make_a_restore_fall_back_and_verify_names_them(ck, nbdir):
    ns = {"big": [{"i": i, "s": str(i)} for i in range(60_000)]}
    older = jp.checkpoint(namespace=ns, progress=False, **ck)
    ns["big"].append("newer")
    newer = jp.checkpoint(namespace=ns, progress=False, **ck)
    m = checks.read_manifest(nbdir, newer.id)
    s = m.storages[next(g.records for g in m.groups if g.records is not None)]
    path = nbdir / s.file
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # in the records, past the header
    path.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptCheckpoint):
        store.verify_checkpoint(ck["dir"], ck["notebook"], newer.id)
    res = jp.restore(namespace=(out := {}), lazy=False, progress=False, **ck)
    assert res.id == older.id and out["big"][-1] != "newer" and res.passed_over


def test_records_apart_travel_in_a_bundle_and_are_signed_again(tmp_path, ck, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    (home / "nb.ipynb").write_text(
        '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    )
    ns = {"big": [{"i": i, "s": str(i)} for i in range(80_000)]}
    jp.checkpoint(namespace=ns, notebook="nb.ipynb", dir=ck["dir"], progress=False)
    out = bundle.export(tmp_path / "b.zip", home / "nb.ipynb", notebook="nb.ipynb", dir=ck["dir"])
    assert any(n.startswith("blobs/") for n in zipfile.ZipFile(out.path).namelist())
    done = bundle.import_bundle(out.path, to="copy.ipynb", dir=ck["dir"])
    got = {}
    jp.restore(namespace=got, notebook="copy.ipynb", dir=ck["dir"], lazy=False, progress=False)
    assert got["big"][-1] == {"i": 79_999, "s": "79999"}
    assert done.manifest.groups[0].records is not None


# ------------------------------------------------------------------ lazy restores
def test_a_lazy_restore_does_not_walk_what_it_read_already(ck, monkeypatch):
    ns = {f"small{i}": {"i": i, "v": [i] * 3} for i in range(300)}
    ns["big"] = np.ones(4_000_000)  # 32 MB: read in the background
    jp.checkpoint(namespace=ns, progress=False, **ck)
    walked = []
    real = lazy.storages_reached
    monkeypatch.setattr(
        lazy, "storages_reached", lambda obj, *a: walked.append(obj) or real(obj, *a)
    )
    out = {"__name__": "__main__"}
    res = jp.restore(namespace=out, lazy=True, progress=False, **ck)
    assert "small7" in res.restored and out["small7"] == {"i": 7, "v": [7, 7, 7]}
    assert len(walked) == 1 and walked[0] is out.get("big", walked[0])
    assert lazy.wait() == {} and out["big"].sum() == 4_000_000


# ------------------------------------------------------------------ without pyarrow
WITHOUT_PYARROW_FRAME = """
import sys
sys.path.insert(0, {without!r})
import sitecustomize  # noqa: F401 (pyarrow unimportable from here on)
import numpy as np, pandas as pd, jupyter_pause as jp
df = pd.DataFrame({{"a": range(1000), "t": [str(i) for i in range(1000)]}})
assert type(df["t"].array).__name__ == "StringArray", type(df["t"].array)
ns = {{"df": df, "s": df["a"], "t": df["t"], "keep": [1, 2]}}
jp.checkpoint(namespace=ns, progress=False, dir={dir!r}, notebook="nb")
out = {{}}
jp.restore(namespace=out, progress=False, lazy=False, dir={dir!r}, notebook="nb")
out["df"].iloc[0, 1] = "Z"
assert out["t"].iloc[0] == "0" and out["df"]["t"].equals(df["t"].where(df.index > 0, "Z"))
print("OK")
"""


def test_a_frame_of_python_strings_restores_and_copies_on_write(tmp_path):
    from pathlib import Path

    without = str(Path(__file__).parent / "without_pyarrow")
    code = textwrap.dedent(WITHOUT_PYARROW_FRAME.format(without=without, dir=str(tmp_path / "ck")))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_paths_are_unchanged(ck):  # the bundle test above moved the cwd only for itself
    assert paths.notebook_key(ck["notebook"]).endswith("demo.ipynb")
