"""Reads never write: ``GET activity`` (polled by the hub service and Kubeflow's
culler on every server) and ``GET sessions/unsaveable`` record no ledger row and
rewrite no sessions.json, even when the sessions lag behind the kernels."""

import pytest

from jupyter_pause.lifecycle import Session, State

from .helpers import api, start_session, wait_for_state, wait_until


@pytest.fixture
def jp_server_config(jp_server_config):
    config = {**jp_server_config, "PauseApp": dict(jp_server_config["PauseApp"])}
    # the idle watcher's own check reconciles (a writer): not during this test
    config["PauseApp"].update(auto_pause=True, idle_check_interval=3600)
    return config


async def test_polling_activity_and_unsaveable_writes_nothing(
    jp_fetch, jp_serverapp, notebook_path
):
    manager = jp_serverapp.web_app.settings["jupyter_pause_manager"]
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    model = await start_session(jp_fetch, notebook_path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await wait_until(
        lambda: (
            manager.store.sessions.get(notebook_path)
            and manager.store.sessions[notebook_path].kernel_id == kernel_id
        ),
        what="the kernel's start event to reach the sessions",
    )
    # a kernel gone without its event having been heard yet: a reconcile would record
    # its stop and rewrite sessions.json; a read must leave that to the writers
    manager.store.sessions["gone.ipynb"] = Session(
        path="gone.ipynb", state=State.RUNNING, kernel_id="a-kernel-that-is-gone"
    )
    rows = len(ledger.events())
    modified = manager.store.path.stat().st_mtime_ns

    for _ in range(20):
        code, activity = await api(jp_fetch, "activity")
        assert code == 200
        # the truth all the same: the live kernel is there, the gone one is not
        assert [s["path"] for s in activity["sessions"]] == [notebook_path]
        code, body = await api(jp_fetch, "sessions", "unsaveable", params={"path": notebook_path})
        assert code == 200 and body["unsaveable"] == {}

    assert len(ledger.events()) == rows
    assert manager.store.path.stat().st_mtime_ns == modified
    assert manager.store.sessions["gone.ipynb"].kernel_id == "a-kernel-that-is-gone"
