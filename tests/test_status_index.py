"""``GET status`` from an index (server/status_index.py): a request builds no row of a
session that has not changed since the last request; a change has its row alone built
again; the rows of notebooks with a kernel or a running operation are built at every
request, and show what changed without a save. Rows are counted, never timed (``make
bench`` times it at 100 and 1,000 sessions)."""

import time

import pytest

from jupyter_pause.lifecycle import Operation, SessionStore, State
from jupyter_pause.protocol import CallProgress
from jupyter_pause.server import status_index

from .fakes import make_manager

N = 200
PATHS = [f"nb{i:03d}.ipynb" for i in range(N)]


@pytest.fixture
def built(monkeypatch):
    """The paths whose row a status request built, in order."""
    paths = []
    real = status_index.status_row

    async def counting(path, *args, **kwargs):
        paths.append(path)
        return await real(path, *args, **kwargs)

    monkeypatch.setattr(status_index, "status_row", counting)
    return paths


def paused_notebooks(tmp_path):
    manager = make_manager(tmp_path, notebooks=PATHS)
    for path in PATHS:
        session = manager.store.get(path)
        session.state = State.PAUSED
        session.kernel_name = "python3"
        session.workload_class = "gpu-interactive"
        session.operation = Operation(kind="pause", path=path, outcome="succeeded")
        session.last_checkpoint = {"id": "2026-12-01T10-00-00", "time": 1.0, "bytes": 10}
    manager.store.save()
    return manager


def row(status, path):
    return next(r for r in status["sessions"] if r["path"] == path)


async def test_a_status_request_builds_no_row_of_an_unchanged_session(tmp_path, built):
    manager = paused_notebooks(tmp_path)
    first = await manager.status()
    assert sorted(built) == PATHS  # each once, the first time
    built.clear()
    again = await manager.status()
    assert built == []
    assert again["sessions"] == first["sessions"]

    # a schedule set: that row alone is built again, and says it
    manager.schedules.set(PATHS[7], time.time() + 3600)
    built.clear()
    third = await manager.status()
    assert built == [PATHS[7]]
    assert row(third, PATHS[7])["schedule"] is not None
    assert row(third, PATHS[8]) == row(first, PATHS[8])

    # a session gone: its row goes, nothing else is built
    del manager.store.sessions[PATHS[9]]
    manager.store.save()
    built.clear()
    fourth = await manager.status()
    assert built == [] and PATHS[9] not in [r["path"] for r in fourth["sessions"]]


async def test_rows_of_kernels_and_running_operations_are_built_at_each_request(tmp_path, built):
    manager = paused_notebooks(tmp_path)
    live = manager.store.get(PATHS[0])
    live.state = State.RUNNING
    live.kernel_id = manager.kernel_manager.start({"x": 1})
    manager.reconciler.session_manager.paths[PATHS[0]] = live.kernel_id
    busy = manager.store.get(PATHS[1])
    busy.state = State.RESUMING
    busy.operation = Operation(kind="resume", path=PATHS[1])
    manager.store.save()
    await manager.status()
    built.clear()

    # what changes without a save shows: here, an operation's progress
    busy.operation.show(CallProgress(phase="reading", done=1, total=2))
    status = await manager.status()
    assert sorted(built) == PATHS[:2]
    assert row(status, PATHS[1])["operation"]["progress"]["done"] == 1
    assert row(status, PATHS[0])["kernel_id"] == live.kernel_id


def test_the_store_says_which_sessions_each_save_changed(tmp_path):
    store = SessionStore(tmp_path / "sessions.json")
    store.get("a.ipynb")
    store.get("b.ipynb")
    store.save()
    assert store.take_changed() == {"a.ipynb", "b.ipynb"}
    store.save()
    assert store.take_changed() == set()
    store.sessions["a.ipynb"].state = State.PAUSED
    del store.sessions["b.ipynb"]
    store.save()
    assert store.take_changed() == {"a.ipynb", "b.ipynb"}
    # a save that cannot be written still says what changed in memory
    store.sessions["a.ipynb"].error = "full disk"
    store.path = tmp_path / "sessions.json" / "not-a-folder" / "sessions.json"
    with pytest.raises(OSError):
        store.save()
    assert store.take_changed() == {"a.ipynb"}
