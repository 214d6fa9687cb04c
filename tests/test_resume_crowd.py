"""The 9:00 crowd on a real server: notebooks scheduled for the same moment
resume at most ``max_concurrent_resumes`` at a time, in the order they fell
due, the others showing ``waiting-for-capacity``; a server stopped while they
wait leaves them paused, and says so (real servers and kernels)."""

import itertools
import json
import time
from pathlib import Path

import pytest

from jupyter_pause.client import LocalServer

from .helpers import server_env, wait_for, write_notebooks

pytestmark = pytest.mark.slow

ACTIVE = ("resuming", "restoring")


@pytest.fixture
def server_factory(tmp_path, started):
    root = write_notebooks(tmp_path / "root", "a.ipynb", "b.ipynb", "c.ipynb")
    env = server_env(tmp_path)

    def make(limit: int) -> LocalServer:
        server = LocalServer(
            root,
            tmp_path / "state",
            env=env,
            extra_args=[
                f"--PauseApp.max_concurrent_resumes={limit}",
                "--PauseApp.auto_pause=False",
            ],
        )
        started.append(server)
        return server

    return make


def pause_all(client, code_by_path: dict[str, str]) -> None:
    """Open each notebook, run its code, and pause them all (together)."""
    for path, code in code_by_path.items():
        kernel_id = client.open_notebook(path)["kernel"]["id"]
        assert client.execute(kernel_id, code).ok
    ops = [client.pause(path) for path in code_by_path]
    for op in ops:
        assert client.wait(op, timeout=180)["outcome"] == "succeeded"


def by_path(status) -> dict[str, dict]:
    return {s["path"]: s for s in status["sessions"]}


def test_due_resumes_queue_behind_the_bound_and_resume_in_the_order_they_fell_due(
    server_factory,
):
    server = server_factory(limit=1)
    client = server.start()
    names = {"a.ipynb": "x = 'a'", "b.ipynb": "x = 'b'", "c.ipynb": "x = 'c'"}
    pause_all(client, names)

    # all due at once, in an order that is neither the paths' nor the pauses'
    at = time.time() + 3
    due_order = ["b.ipynb", "c.ipynb", "a.ipynb"]
    for i, path in enumerate(due_order):
        client.schedule(path, at + i * 0.001)

    samples = []

    def all_ready():
        sessions = by_path(client.status())
        states = {path: sessions[path]["state"] for path in names}
        samples.append(
            {path: (states[path], sessions[path]["operation"]["step"]) for path in names}
        )
        assert sum(state in ACTIVE for state in states.values()) <= 1, samples[-1]
        assert "failed" not in states.values(), sessions
        return all(state == "ready" for state in states.values()) and sessions

    sessions = wait_for(all_ready, 240, what="every scheduled resume", interval=0.05)

    # the others waited, and said how many were ahead of them
    crowded = [
        s for s in samples if sum(state == "waiting-for-capacity" for state, _ in s.values()) == 2
    ]
    assert crowded, samples
    steps = {step for state, step in crowded[0].values() if state == "waiting-for-capacity"}
    assert steps == {
        "waiting for capacity: 1 resume ahead (at most 1 at a time)",
        "waiting for capacity: 2 resumes ahead (at most 1 at a time)",
    }
    # ready in the order they fell due, and no two restores overlapped
    assert sorted(names, key=lambda path: sessions[path]["since"]) == due_order
    events = client.events()
    spans = []
    for path in names:
        mine = [e for e in events if e["path"] == path]
        start = min(e["time"] for e in mine if e["type"] == "kernel-started" and e["time"] > at)
        end = max(e["time"] for e in mine if e["type"] == "first-cell-runnable")
        spans.append((start, end))
    spans.sort()
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans)), spans
    for path in names:  # each restored its own state
        kernel_id = sessions[path]["kernel_id"]
        assert client.evaluate(kernel_id, "import json; print(json.dumps(x))") == path[0]


def hold_code(folder: Path) -> str:
    """A variable whose unpickling (inside the restore) announces itself with
    ``<folder>/restoring`` and then waits for ``<folder>/release``."""
    return f"""
import os, time
def _held():
    open({str(folder / "restoring")!r}, "w").close()
    end = time.monotonic() + 120
    while not os.path.exists({str(folder / "release")!r}) and time.monotonic() < end:
        time.sleep(0.05)
    return "held"
class Hold:
    def __reduce__(self):
        return (_held, ())
held = Hold()
"""


def test_a_server_stopped_while_resumes_wait_leaves_them_paused(server_factory, tmp_path):
    folder = tmp_path / "hold"
    folder.mkdir()
    server = server_factory(limit=1)
    client = server.start()
    try:
        pause_all(client, {"a.ipynb": hold_code(folder), "b.ipynb": "x = 'b'"})
        client.resume("a.ipynb")
        wait_for(lambda: (folder / "restoring").exists(), 120, what="a's restore under way")
        waiting = client.resume("b.ipynb")
        wait_for(
            lambda: client.session_status("b.ipynb")["state"] == "waiting-for-capacity",
            60,
            what="b waiting for capacity",
        )
        assert client.operation(waiting["id"])["step"] == (
            "waiting for capacity: 1 resume ahead (at most 1 at a time)"
        )

        server.stop()  # SIGTERM: Jupyter Server shuts its extensions down
        assert server.process.returncode is not None
        stored = json.loads((tmp_path / "state" / "sessions.json").read_text())["sessions"]
        b = stored["b.ipynb"]
        assert b["state"] == "paused", b
        assert b["operation"]["outcome"] == "failed"
        assert "waited for capacity: nothing was restored" in b["operation"]["error"]

        client = server.start()
        b = client.session_status("b.ipynb")
        assert b["state"] == "paused" and "waited for capacity" in b["error"]
        assert client.wait(client.resume("b.ipynb"), timeout=180)["outcome"] == "succeeded"
        assert client.session_status("b.ipynb")["state"] == "ready"
    finally:
        (folder / "release").touch()
