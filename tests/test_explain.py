"""GET status says who paused a notebook and which idle policy applies;
GET checkpoints?verify=1 says which saved states can be resumed from."""

from pathlib import Path

from jupyter_pause.engine import store as checkpoint_store
from jupyter_pause.engine.paths import id_time
from jupyter_pause.lifecycle import LostState, Operation, Session, State
from jupyter_pause.server.explain import paused_by, saved_state_unrestored

from .helpers import api, execute, operate, session_status, start_session, wait_for_state


def paused_session(**options) -> Session:
    return Session(
        path="n.ipynb",
        state=State.PAUSED,
        operation=Operation(kind="pause", path="n.ipynb", options=options),
    )


def test_who_paused_a_notebook():
    assert paused_by(paused_session(auto=True)) == "auto"
    assert paused_by(paused_session(after_cell=True)) == "magic"
    assert paused_by(paused_session(force=False)) == "user"
    running = paused_session(auto=True)
    running.state = State.RUNNING
    assert paused_by(running) is None


def test_a_lost_kernels_saved_state_is_offered_where_resume_can_restore_it():
    saved = {"id": "2026-12-02T14-17-05", "time": 1796221025.5, "bytes": 10}
    session = Session(path="n.ipynb", state=State.FAILED, last_checkpoint=saved)
    assert saved_state_unrestored(session) is None  # failed, nothing lost: no offer
    session.lost = LostState(why="the kernel died (it is gone)", checkpoint=saved["id"])
    assert saved_state_unrestored(session) == {
        "checkpoint": saved["id"],
        "at": saved["time"],
        "lost": "the kernel died (it is gone)",
        "cause": "kernel-died",
    }
    # the offer follows the checkpoints that exist: that one deleted, the newest left;
    # none left, no offer; not known (no folder here yet), the one that has the state
    older = ["2026-12-01T09-30-00-10", "2026-12-01T09-30-00-2"]
    assert saved_state_unrestored(session, older)["checkpoint"] == "2026-12-01T09-30-00-10"
    assert saved_state_unrestored(session, older)["at"] == id_time("2026-12-01T09-30-00")
    assert saved_state_unrestored(session, []) is None
    assert saved_state_unrestored(session, [*older, saved["id"]])["checkpoint"] == saved["id"]
    session.state = State.PAUSED  # re-paused on it at start-up
    assert saved_state_unrestored(session)["checkpoint"] == saved["id"]
    # an older checkpoint than the last one: its time is read from its id
    session.lost.checkpoint = "2026-12-01T09-30-00-2"
    assert saved_state_unrestored(session)["at"] == id_time("2026-12-01T09-30-00")
    assert id_time("2026-12-01T09-30-00") == 1796117400.0
    # a kernel that runs (a new one, started on purpose), or a resume under way
    session.state = State.RUNNING
    assert saved_state_unrestored(session) is None
    session.state = State.FAILED
    session.operation = Operation(kind="resume", path="n.ipynb")
    assert saved_state_unrestored(session) is None
    # resuming it failed: the failed resume's banner offers the checkpoints that verify
    session.operation.outcome = "failed"
    assert saved_state_unrestored(session) is None
    session.operation = Operation(kind="checkpoint", path="n.ipynb", outcome="failed")
    assert saved_state_unrestored(session)["checkpoint"] == "2026-12-01T09-30-00-2"
    # a checkpoint of the new kernel recorded the loss: nothing left to offer
    session.operation = None
    session.lost = LostState(why="the kernel died", names={"x": saved["id"]})
    assert saved_state_unrestored(session) is None


async def test_status_names_who_paused_and_the_policy(jp_fetch, jp_serverapp, notebook_path):
    model = await start_session(jp_fetch, notebook_path)
    await wait_for_state(jp_serverapp, model["kernel"]["id"], "idle")
    session = await session_status(jp_fetch, notebook_path)
    assert session["paused_by"] is None
    assert session["policy"]["workload_class"] == "gpu-interactive"
    assert session["policy"]["idle_threshold"] > 0
    assert session["policy"]["action"] == "pause"

    assert (await operate(jp_fetch, "pause", notebook_path))["outcome"] == "succeeded"
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "paused" and session["paused_by"] == "user"


async def test_verified_listing_marks_the_corrupt_checkpoint(jp_fetch, jp_serverapp, notebook_path):
    model = await start_session(jp_fetch, notebook_path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await execute(jp_serverapp, kernel_id, "import numpy as np\nvalue = np.ones(1000)")
    assert (await operate(jp_fetch, "checkpoint", notebook_path))["outcome"] == "succeeded"
    await execute(jp_serverapp, kernel_id, "value = value * 2")
    assert (await operate(jp_fetch, "checkpoint", notebook_path))["outcome"] == "succeeded"

    code, listing = await api(
        jp_fetch, "checkpoints", params={"path": notebook_path, "verify": "1"}
    )
    assert code == 200
    newer, older = listing["checkpoints"]
    assert newer["problem"] is None and older["problem"] is None

    manager = jp_serverapp.web_app.settings["jupyter_pause_manager"]
    info = next(
        c
        for c in checkpoint_store.list_checkpoints(
            manager.checkpointer.checkpoint_dir, notebook_path
        )
        if c.id == newer["id"]
    )
    pickle_file = Path(info.path) / "objects.pkl"
    data = bytearray(pickle_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    pickle_file.write_bytes(bytes(data))

    code, listing = await api(
        jp_fetch, "checkpoints", params={"path": notebook_path, "verify": "1"}
    )
    newer, older = listing["checkpoints"]
    assert newer["problem"] and older["problem"] is None
    # without verify, the listing stays cheap: only the manifests are read, and the
    # damaged pickle is found only by hashing
    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert [c["status"] for c in listing["checkpoints"]] == ["ok", "ok"]
    assert not any(c["problem"] for c in listing["checkpoints"])


async def test_unsaveable_lists_every_variable_a_pause_would_leave_out(
    jp_fetch, jp_serverapp, notebook_path
):
    model = await start_session(jp_fetch, notebook_path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await execute(
        jp_serverapp,
        kernel_id,
        "import threading\nlock = threading.Lock()\ngen = (i for i in range(3))\nfine = [1, 2]",
    )
    code, body = await api(jp_fetch, "sessions", "unsaveable", params={"path": notebook_path})
    assert code == 200, body
    assert sorted(body["unsaveable"]) == ["gen", "lock"]
    assert all(len(reason) > 0 for reason in body["unsaveable"].values())
    # asking saves nothing and changes nothing
    assert (await session_status(jp_fetch, notebook_path))["state"] == "running"
    assert (
        checkpoint_store.list_checkpoints(
            jp_serverapp.web_app.settings["jupyter_pause_checkpointer"].checkpoint_dir,
            notebook_path,
        )
        == []
    )


async def test_unsaveable_needs_a_kernel(jp_fetch, notebook_path):
    code, body = await api(jp_fetch, "sessions", "unsaveable", params={"path": notebook_path})
    assert code == 409 and "no running kernel" in body["message"]
