"""Background autosave (a workload class's ``autosave_every``), on a real server with
real kernels: a hard kill loses at most one interval of work, no autosave begins while
a cell runs, autosaves never push out the user's checkpoints, and an autosave of a
namespace where nothing changed writes (almost) nothing."""

import asyncio
import logging
import os
import signal
import time
from types import SimpleNamespace

import pytest

from jupyter_pause.engine import paths
from jupyter_pause.idle_policy import STAGE_EVERY, WorkloadClass, load_classes
from jupyter_pause.ledger import EventType, LedgerEvent
from jupyter_pause.lifecycle import State
from jupyter_pause.server.autosave import Autosaver

from .fakes import FakeClock
from .helpers import (
    api,
    execute,
    operate,
    running_notebook,
    session_status,
    wait_until,
)

#: seconds of use between two autosaves (a class's autosave_every)
INTERVAL = 2.0
#: a cell that ends after more than one interval of use
PAST_INTERVAL = f"time.sleep({INTERVAL + 0.5})"


@pytest.fixture
def auto_pause():
    return True


@pytest.fixture
def jp_server_config(jp_server_config, auto_pause):
    return {
        **jp_server_config,
        "PauseApp": {
            "backend": "local",
            "keep_checkpoints": 1,
            "auto_pause": auto_pause,
            "workload_classes": {"gpu-interactive": {"autosave_every": INTERVAL}},
        },
    }


def manager_of(jp_serverapp):
    return jp_serverapp.web_app.settings["jupyter_pause_manager"]


def events(jp_serverapp, path, type_):
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    return [e for e in ledger.events(path=path) if e.type.value == type_]


def autosaves(jp_serverapp, path, type_="checkpoint-finished"):
    return [e for e in events(jp_serverapp, path, type_) if e.data.get("autosave")]


async def next_autosave(jp_serverapp, path, count):
    """Wait for the ``count``-th autosave to finish; returns its ledger event."""
    done = await wait_until(
        lambda: len(autosaves(jp_serverapp, path)) >= count and autosaves(jp_serverapp, path),
        timeout=90,
        what=f"autosave #{count}",
    )
    return done[count - 1]


async def test_a_killed_kernel_loses_at_most_one_interval_of_work(
    jp_fetch, jp_serverapp, notebook_path
):
    kernel_id = await running_notebook(
        jp_fetch, jp_serverapp, notebook_path, "import time\nwork = [1]"
    )
    # the user's own checkpoint (keep_checkpoints=1): autosaves must not push it out
    assert (await operate(jp_fetch, "checkpoint", notebook_path))["outcome"] == "succeeded"
    mine = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]

    await execute(jp_serverapp, kernel_id, f"{PAST_INTERVAL}\nwork.append(2)")
    saved = (await next_autosave(jp_serverapp, notebook_path, 1)).data["checkpoint_id"]
    await execute(jp_serverapp, kernel_id, "work.append(3)")  # within the interval: unsaved

    kernels = jp_serverapp.kernel_manager
    pid = kernels.get_kernel(kernel_id).provisioner.pid
    os.kill(pid, signal.SIGKILL)
    await wait_until(
        lambda: kernel_id in kernels and kernels.get_kernel(kernel_id).provisioner.pid != pid,
        timeout=90,
        what="Jupyter restarting the killed kernel",
    )

    # the server hears of the death: the notebook is failed, naming the state that is kept
    session = await wait_until(
        lambda: _failed(jp_fetch, notebook_path), timeout=90, what="the death told"
    )
    assert saved in session["error"]
    assert session["last_checkpoint"]["id"] == saved  # the status tells which state is saved
    assert session["last_checkpoint"]["autosave"] is True
    assert session["last_saved"] == session["last_checkpoint"]["time"]
    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert code == 200, listing
    assert {c["id"] for c in listing["checkpoints"]} == {mine, saved}

    # the notebook resumes from the autosave: the work of the last interval is all it lost
    op = await operate(jp_fetch, "resume", notebook_path)
    assert op["outcome"] == "succeeded", op
    kernel_id = (await session_status(jp_fetch, notebook_path))["kernel_id"]
    assert await execute(jp_serverapp, kernel_id, "work") == "[1, 2]"

    # and autosave goes on in the resumed kernel
    await execute(jp_serverapp, kernel_id, f"import time\n{PAST_INTERVAL}\nwork.append(4)")
    following = (await next_autosave(jp_serverapp, notebook_path, 2)).data["checkpoint_id"]
    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert {c["id"] for c in listing["checkpoints"]} == {mine, following}


@pytest.mark.parametrize("auto_pause", [False])
async def test_autosave_runs_with_auto_pause_off(jp_fetch, jp_serverapp, notebook_path, auto_pause):
    """Autosave is not an idle policy: it saves whether auto-pause is on or not."""
    kernel_id = await running_notebook(
        jp_fetch, jp_serverapp, notebook_path, "import time\nwork = [1]"
    )
    await execute(jp_serverapp, kernel_id, f"{PAST_INTERVAL}\nwork.append(2)")
    saved = await next_autosave(jp_serverapp, notebook_path, 1)
    assert saved.data["autosave"] is True
    assert (await session_status(jp_fetch, notebook_path)).get("auto_pause") is None  # off


async def _failed(jp_fetch, path):
    session = await session_status(jp_fetch, path)
    return session if session["state"] == "failed" else None


async def test_no_autosave_begins_while_a_cell_runs(jp_fetch, jp_serverapp, notebook_path):
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "import time")
    long_cell = asyncio.ensure_future(
        execute(jp_serverapp, kernel_id, f"time.sleep({3 * INTERVAL})\nx = 2")
    )
    # three intervals of use pass while the cell runs: no checkpoint begins
    while not long_cell.done():
        assert not events(jp_serverapp, notebook_path, "checkpoint-started")
        await asyncio.sleep(0.1)
    await long_cell
    cell_ended = events(jp_serverapp, notebook_path, "cell-executed")[-1].time
    await next_autosave(jp_serverapp, notebook_path, 1)
    started = events(jp_serverapp, notebook_path, "checkpoint-started")
    assert len(started) == 1 and started[0].data.get("autosave")
    assert started[0].time >= cell_ended


def files_of(folder):
    return {
        os.path.join(root, name): os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    }


async def test_an_autosave_when_nothing_changed_writes_almost_nothing(
    jp_fetch, jp_serverapp, notebook_path
):
    kernel_id = await running_notebook(
        jp_fetch,
        jp_serverapp,
        notebook_path,
        "import time\nimport numpy as np\ndata = np.random.rand(4 << 20)\nnames = {'a': [1, 2]}",
    )
    await execute(jp_serverapp, kernel_id, PAST_INTERVAL)
    first = await next_autosave(jp_serverapp, notebook_path, 1)
    assert first.data["bytes_written"] > 32 << 20  # the 32 MiB array, once
    folder = paths.notebook_dir(manager_of(jp_serverapp).checkpointer.checkpoint_dir, notebook_path)
    before = files_of(folder)

    await execute(jp_serverapp, kernel_id, PAST_INTERVAL)  # uses nothing of the namespace
    second = await next_autosave(jp_serverapp, notebook_path, 2)
    assert second.data["checkpoint_id"] != first.data["checkpoint_id"]
    assert second.data["bytes_written"] < 64 << 10
    new_files = {f: size for f, size in files_of(folder).items() if f not in before}
    assert sum(new_files.values()) < 64 << 10, new_files
    session = await session_status(jp_fetch, notebook_path)
    assert session["last_checkpoint"]["id"] == second.data["checkpoint_id"]


def test_autosave_is_off_unless_a_class_asks_and_its_interval_is_positive():
    classes = load_classes({"gpu-interactive": {"autosave_every": 600}})
    assert classes["gpu-interactive"].autosave_every == 600
    assert classes["cpu-small"].autosave_every is None  # opt-in, per class
    for bad in (0, -5):
        with pytest.raises(ValueError, match="autosave_every"):
            WorkloadClass.from_config("x", {"autosave_every": bad})


def test_staging_is_on_by_default_for_the_classes_that_pause_and_only_with_a_bucket():
    classes = load_classes()
    assert classes["gpu-interactive"].stage_every == STAGE_EVERY
    assert classes["long-running"].stage_every == STAGE_EVERY
    assert classes["cpu-small"].stage_every is None  # its action is "checkpoint"
    assert WorkloadClass.from_config("mine", {"action": "pause"}).stage_every == STAGE_EVERY
    off = WorkloadClass.from_config("mine", {"action": "pause", "stage_every": None})
    assert off.stage_every is None
    policy = WorkloadClass.from_config("x", {"autosave_every": 300, "stage_every": 60})
    assert (policy.save_every(bucket=True), policy.save_every(bucket=False)) == (60, 300)
    with pytest.raises(ValueError, match="stage_every"):
        WorkloadClass.from_config("x", {"stage_every": 0})


def saver_over(operations, session, clock: FakeClock) -> Autosaver:
    """An autosaver of ``nb.ipynb`` (``session``) every 0.01 s of ``clock``, whose monitor
    sees no cell running, over ``operations``."""
    policy = WorkloadClass.from_config("x", {"autosave_every": 0.01})

    async def workload_class(session):
        return policy, "test"

    return Autosaver(
        operations=operations,
        store=SimpleNamespace(sessions={"nb.ipynb": session}),
        activity=SimpleNamespace(for_path=lambda path: SimpleNamespace(busy=False)),
        ledger=None,
        workload_class=workload_class,
        log=logging.getLogger("test"),
        clock=clock,
    )


async def test_a_first_cell_that_starts_before_its_kernel_start_is_recorded_counts():
    """The reconciler records a kernel's start once it is classified, which may come after
    the first cell started (a cell sent as the notebook opens): that cell is the new
    kernel's own use, and is saved; an older kernel's cells are not the new one's."""
    saved = []

    class Operations:
        async def checkpoint(self, path, *, autosave=False):
            saved.append(path)

        def execution_state(self, kernel_id):
            return "idle"

    session = SimpleNamespace(kernel_id="k1", busy=False, state=State.RUNNING)
    clock = FakeClock()
    saver = saver_over(Operations(), session, clock)
    saver.on_activity("nb.ipynb", "k1", "cell-started", {})
    saver.on_ledger(LedgerEvent(EventType.KERNEL_STARTED, time.time(), "nb.ipynb", "k1"))
    clock.advance(1)  # the cell ran for longer than the class's interval
    saver.on_activity("nb.ipynb", "k1", "cell-finished", {})
    await wait_until(lambda: saved, timeout=30, what="the autosave")
    assert saved == ["nb.ipynb"]

    saver.on_ledger(LedgerEvent(EventType.CHECKPOINT_FINISHED, time.time(), "nb.ipynb", "k1"))
    saver.on_activity("nb.ipynb", "k1", "cell-started", {})
    session.kernel_id = "k2"  # restarted: the old kernel's cell is not the new one's
    saver.on_ledger(LedgerEvent(EventType.KERNEL_STARTED, time.time(), "nb.ipynb", "k2"))
    assert "nb.ipynb" not in saver.unsaved


async def test_an_autosave_waits_out_jupyters_busy_state_once_the_monitor_saw_the_cell_end():
    """Jupyter reads IOPub on a stream of its own and may still say ``busy`` when the
    monitor has seen the cell end; with no later cell to try again, the autosave waits
    until it says ``idle``, not until the next cell."""
    saved, states = [], ["busy", "busy", "busy"]

    class Operations:
        async def checkpoint(self, path, *, autosave=False):
            saved.append(path)

        def execution_state(self, kernel_id):
            return states.pop() if states else "idle"

    session = SimpleNamespace(kernel_id="k1", busy=False, state=State.RUNNING)
    clock = FakeClock()
    saver = saver_over(Operations(), session, clock)
    saver.on_activity("nb.ipynb", "k1", "cell-started", {})
    clock.advance(1)  # the cell ran for longer than the class's interval
    saver.on_activity("nb.ipynb", "k1", "cell-finished", {})
    await wait_until(lambda: saved, timeout=30, what="the autosave")
    assert saved == ["nb.ipynb"] and states == []
