"""Unsaveable objects: the cells that made them are recorded, offered after a restore,
and re-run only when the user asks."""

from __future__ import annotations

import pytest

from jupyter_pause.engine import rerun, store


@pytest.fixture
def ip(ck, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("JPY_SESSION_NAME", ck["notebook"])
    monkeypatch.setenv("JUPYTER_PAUSE_CHECKPOINT_DIR", ck["dir"])
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_pause")
    yield shell
    InteractiveShell.clear_instance()
    rerun.offer([])


def run(ip, code):
    result = ip.run_cell(code, store_history=True)
    result.raise_error()


def test_cells_that_made_skipped_names_are_offered_and_run_only_on_request(ip, ck, capsys):
    run(ip, "import threading, sqlite3")
    run(ip, "conn = sqlite3.connect(':memory:')\ncursor = conn.cursor()")
    run(ip, "lock = threading.Lock()\nkept = 41")
    run(ip, "kept += 1")
    ip.run_line_magic("checkpoint", "-q")
    m = store.get_manifest(ck["dir"], ck["notebook"])
    assert [(c.cell, c.names) for c in m.rerun] == [(2, ["conn", "cursor"]), (3, ["lock"])]

    for name in ("conn", "cursor", "lock", "kept"):
        ip.user_ns.pop(name)
    ip.run_line_magic("restore", "-q")
    out = capsys.readouterr().out
    assert "re-run cell [2] to recreate conn, cursor" in out and "cell [3]" in out
    assert ip.user_ns["kept"] == 42
    assert "conn" not in ip.user_ns and "lock" not in ip.user_ns  # nothing ran by itself
    assert [o["cell"] for o in rerun.offered()] == [2, 3]

    with pytest.raises(ValueError, match="not offered"):
        rerun.rerun([99])
    assert rerun.rerun([2]) == {2: "ok"}
    assert ip.user_ns["cursor"].execute("select 1").fetchone() == (1,)
    assert "lock" not in ip.user_ns and [o["cell"] for o in rerun.offered()] == [3]
    assert rerun.rerun() == {3: "ok"} and ip.user_ns["lock"].acquire()
    # a re-run cell runs whole (cell 3 also sets kept = 41): why the source is shown first
    assert ip.user_ns["kept"] == 41


def test_bound_names():
    src = (
        "import os.path as p, sys\nfrom x import y as z\na, (b, c) = 1, (2, 3)\n"
        "for i in range(3):\n    j = i\nwith open('f') as fh:\n    pass\n"
        "def f():\n    inner = 1\nclass K:\n    attr = 2\nif (w := 5):\n    q = 1\n"
    )
    assert rerun._bound_names(src) == {
        "p",
        "sys",
        "z",
        "a",
        "b",
        "c",
        "i",
        "j",
        "fh",
        "f",
        "K",
        "w",
        "q",
    }
    assert rerun._bound_names("not python (") == set()
