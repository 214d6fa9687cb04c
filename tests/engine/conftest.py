"""Fixtures for the engine tests: an isolated Jupyter data dir (so the HMAC key and
checkpoints of the developer are never touched) and a clean engine state."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    data = tmp_path / "jupyter-data"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("JUPYTER_PAUSE_CHECKPOINT_DIR", str(tmp_path / "ck"))
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delenv("JUPYTER_PAUSE_KEEP", raising=False)
    monkeypatch.setenv("JUPYTER_PAUSE_PROGRESS_AFTER", "3600")  # no bars unless a test asks
    from jupyter_pause.engine import tensors, tracking

    untrack_all(tracking)
    tensors._CACHE.clear()
    yield
    untrack_all(tracking)
    tensors._CACHE.clear()


@pytest.fixture
def ck(tmp_path):
    """Keyword arguments that point checkpoint/restore at this test's folder."""
    return {"dir": str(tmp_path / "ck"), "notebook": "work/demo.ipynb"}


@pytest.fixture
def nbdir(ck):
    from jupyter_pause.engine import paths

    return paths.notebook_dir(ck["dir"], ck["notebook"])


def main_ns(src: str = "") -> dict:
    """A namespace that behaves like a notebook's: objects defined in it live in __main__."""
    ns = {"__name__": "__main__"}
    if src:
        exec(src, ns)
    return ns


def untrack_all(tracking) -> None:
    for name in tracking.tracked():
        tracking.untrack(name)


@pytest.fixture
def shell(ck):
    """A real IPython shell (its events drive the change tracker, as in a kernel), with
    ``jp`` imported and ``_ck`` (hidden) pointing at this test's checkpoints."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_pause.engine import api, changes

    api._STATE.clear()
    sh = InteractiveShell.instance()
    assert sh.run_cell("import jupyter_pause as jp").success
    sh.user_ns["_ck"] = sh.user_ns_hidden["_ck"] = ck
    yield sh
    if changes._tracker is not None:
        changes._stop(changes._tracker)
        changes._tracker = None
    api._STATE.clear()
    InteractiveShell.clear_instance()
