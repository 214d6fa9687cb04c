"""Faults injected into a real server with real kernels: every one ends in a
truthful state the user can act on, and the server keeps answering."""

import json
import os
import signal
import time

import pytest

from .helpers import (
    api,
    execute,
    gate_code,
    operate,
    running_notebook,
    session_status,
    start_client,
    start_session,
    wait_for_state,
    wait_operation,
    wait_until,
)


@pytest.fixture
def jp_server_config(jp_server_config):
    # no periodic idle check: what these tests see comes from events, not polls
    return {
        **jp_server_config,
        "PauseApp": {**jp_server_config["PauseApp"], "idle_check_interval": 3600},
    }


def manager_of(jp_serverapp):
    return jp_serverapp.web_app.settings["jupyter_pause_manager"]


def ledger_of(jp_serverapp):
    return jp_serverapp.web_app.settings["jupyter_pause_ledger"]


# ------------------------------------------------- the kernel dies mid-pause


@pytest.mark.parametrize("death", ["os._exit", "SIGKILL"])
async def test_a_kernel_that_dies_during_the_pause_checkpoint_is_told_truthfully(
    jp_fetch, jp_serverapp, notebook_path, tmp_path, death
):
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 1")
    earlier = (await operate(jp_fetch, "checkpoint", notebook_path))["outcome"]
    assert earlier == "succeeded"
    earlier_id = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]
    await execute(
        jp_serverapp,
        kernel_id,
        "x = 2\n" + gate_code(tmp_path, exit_code=3 if death == "os._exit" else None),
    )

    code, body = await api(
        jp_fetch, "sessions", "pause", method="POST", body={"path": notebook_path}
    )
    assert code == 202, body
    if death == "SIGKILL":
        await wait_until(lambda: (tmp_path / "started").exists(), what="the checkpoint's write")
        pid = jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
        os.kill(pid, signal.SIGKILL)
    # today's code waited kernel_call_timeout (an hour) here, answering 409 meanwhile
    op = await wait_operation(jp_fetch, body["operation"]["id"], timeout=90)

    assert op["outcome"] == "failed"
    assert "kernel died" in op["error"] and "lost" in op["error"]
    assert earlier_id in op["error"]  # the checkpoint that is intact, named
    assert "keeps running" not in op["error"]
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "failed"
    assert session["live_state"] == "fresh"  # Jupyter restarted it, empty

    op = await operate(jp_fetch, "resume", notebook_path)
    assert op["outcome"] == "succeeded", op
    session = await session_status(jp_fetch, notebook_path)
    assert await execute(jp_serverapp, session["kernel_id"], "x") == "1"
    types = [e.type.value for e in ledger_of(jp_serverapp).events(path=notebook_path)]
    assert "checkpoint-failed" in types and "kernel-stopped" in types


# ------------------------------------------------ a claim that cannot be saved


async def test_a_claim_the_full_data_directory_cannot_record_is_rolled_back(
    jp_fetch, jp_serverapp, notebook_path
):
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 1")
    sessions_file = manager_of(jp_serverapp).store.path
    if sessions_file.exists():
        sessions_file.unlink()
    # the file system refuses the write: a folder stands where the file goes
    sessions_file.mkdir(parents=True)
    (sessions_file / "in-the-way").write_text("")

    code, answer = await api(
        jp_fetch, "sessions", "checkpoint", method="POST", body={"path": notebook_path}
    )
    assert code == 503, answer
    assert "nothing was started" in answer["message"]
    session = await session_status(jp_fetch, notebook_path)
    assert session["operation"] is None or session["operation"]["outcome"] != "running"

    (sessions_file / "in-the-way").unlink()
    sessions_file.rmdir()
    # today: 409 "already running" until the server restarts
    op = await operate(jp_fetch, "checkpoint", notebook_path)
    assert op["outcome"] == "succeeded", op


# ----------------------------------------------------- the server never blocks


async def delete_checkpoint(jp_fetch, checkpoint_id: str, path: str, **kwargs):
    """DELETE a checkpoint of ``path``; (status code, answer)."""
    return await api(
        jp_fetch, "checkpoints", checkpoint_id, method="DELETE", params={"path": path}, **kwargs
    )


async def delete_refused(jp_fetch, checkpoint_id: str, path: str) -> dict:
    """DELETE a checkpoint being written: refused (409) well within a minute; the answer."""
    code, answer = await delete_checkpoint(jp_fetch, checkpoint_id, path, request_timeout=60)
    assert code == 409, answer
    return answer


async def test_deleting_a_checkpoint_while_one_is_written_never_blocks_the_server(
    jp_fetch, jp_serverapp, notebook_path, tmp_path
):
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 1")
    assert (await operate(jp_fetch, "checkpoint", notebook_path))["outcome"] == "succeeded"
    earlier_id = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]
    await execute(jp_serverapp, kernel_id, gate_code(tmp_path))
    code, body = await api(
        jp_fetch, "sessions", "checkpoint", method="POST", body={"path": notebook_path}
    )
    assert code == 202
    try:
        # the kernel now holds the notebook's lock, in the middle of its write
        await wait_until(lambda: (tmp_path / "started").exists(), what="the checkpoint's write")
        # today: the event loop polls the lock for up to 300 s, and nothing answers
        answer = await delete_refused(jp_fetch, earlier_id, notebook_path)
        assert body["operation"]["id"] in answer["message"]
        code, status = await api(jp_fetch, "status", request_timeout=60)
        assert code == 200
        code, listing = await api(
            jp_fetch, "checkpoints", params={"path": notebook_path}, request_timeout=60
        )
        assert code == 200 and earlier_id in [c["id"] for c in listing["checkpoints"]]
    finally:
        (tmp_path / "release").write_text("")
    op = await wait_operation(jp_fetch, body["operation"]["id"])
    assert op["outcome"] == "succeeded", op
    code, _ = await delete_checkpoint(jp_fetch, earlier_id, notebook_path)
    assert code == 204


async def test_deleting_a_checkpoint_while_the_kernel_writes_one_answers_409_at_once(
    jp_fetch, jp_serverapp, notebook_path, tmp_path
):
    """A %checkpoint typed in the kernel holds the notebook's lock with no
    server operation to refuse on: the DELETE waits briefly, then says why."""
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 1")
    assert (await operate(jp_fetch, "checkpoint", notebook_path))["outcome"] == "succeeded"
    earlier_id = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]
    await execute(jp_serverapp, kernel_id, gate_code(tmp_path))
    client = start_client(jp_serverapp, kernel_id)
    try:
        await client.wait_for_ready(timeout=60)
        client.execute("%checkpoint")
        await wait_until(lambda: (tmp_path / "started").exists(), what="the kernel's write")
        # today: the request waits in a thread for up to 300 s
        answer = await delete_refused(jp_fetch, earlier_id, notebook_path)
        assert "being written" in answer["message"]
        code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
        assert code == 200 and earlier_id in [c["id"] for c in listing["checkpoints"]]
    finally:
        (tmp_path / "release").write_text("")
        client.stop_channels()
    await wait_until(
        lambda: jp_serverapp.kernel_manager.get_kernel(kernel_id).execution_state == "idle",
        what="the kernel's checkpoint finishing",
    )
    code, _ = await delete_checkpoint(jp_fetch, earlier_id, notebook_path)
    assert code == 204


# ------------------------------------------------------------ reads don't write


async def test_status_is_a_pure_read(jp_fetch, jp_serverapp, notebook_path, jp_root_dir):
    model = await start_session(jp_fetch, notebook_path)
    await wait_for_state(jp_serverapp, model["kernel"]["id"], "idle")
    ledger = ledger_of(jp_serverapp)
    store = manager_of(jp_serverapp).store
    await wait_until(lambda: notebook_path in store.sessions, what="the kernel's start event")
    # something for a sync to do: the session moves to another notebook (as
    # JupyterLab's rename does), which Jupyter announces with no kernel event
    (jp_root_dir / "work" / "renamed.ipynb").write_text((jp_root_dir / notebook_path).read_text())
    await jp_fetch(
        "api",
        "sessions",
        model["id"],
        method="PATCH",
        body=json.dumps({"path": "work/renamed.ipynb"}),
    )
    rows = len(ledger.events())
    saved = store.path.read_text() if store.path.exists() else None

    for _ in range(3):
        code, status = await api(jp_fetch, "status")
        assert code == 200
    # the read shows what is live, without recording or saving anything
    assert "work/renamed.ipynb" in [s["path"] for s in status["sessions"]]
    assert len(ledger.events()) == rows
    assert (store.path.read_text() if store.path.exists() else None) == saved


async def test_a_kernel_stopped_outside_a_pause_is_recorded_when_it_stops(
    jp_fetch, jp_serverapp, notebook_path
):
    model = await start_session(jp_fetch, notebook_path)
    await wait_for_state(jp_serverapp, model["kernel"]["id"], "idle")
    store = manager_of(jp_serverapp).store
    await wait_until(lambda: notebook_path in store.sessions, what="the kernel's start event")

    before = time.time()
    await jp_fetch("api", "sessions", model["id"], method="DELETE")

    # no GET status from here on: the kernel's own shutdown event records it
    def stopped():
        return ledger_of(jp_serverapp).events(path=notebook_path, types=["kernel-stopped"])

    (event,) = await wait_until(stopped, timeout=30, what="kernel-stopped in the ledger")
    assert event.time >= before
    assert event.time <= time.time()
    assert notebook_path not in store.sessions


# ------------------------------------------------------------ malformed input


async def test_deeply_nested_json_is_a_bad_request_on_every_post(jp_fetch, notebook_path):
    nested = "[" * 100_000 + "]" * 100_000
    deep_object = '{"path": ' + nested + "}"
    for endpoint in ("pause", "resume", "checkpoint", "postpone"):
        for body in (nested, deep_object):
            response = await jp_fetch(
                "jupyter-pause",
                "api",
                "sessions",
                endpoint,
                method="POST",
                body=body,
                raise_error=False,
            )
            assert response.code == 400, (endpoint, response.code)
            assert json.loads(response.body)["message"]


@pytest.mark.parametrize(
    "parts, params",
    [
        (("events",), {"after_id": "9" * 40}),
        (("events",), {"after_id": "-" + "9" * 40}),
        (("events",), {"since": "nan"}),
        (("events",), {"since": "inf"}),
        (("events",), {"since": "1e400"}),
        (("report",), {"since": "nan"}),
        (("report",), {"until": "-inf"}),
        (("report",), {"since": "1e300"}),
        (("report",), {"since": "10", "until": "5"}),
        (("report.html",), {"since": "inf"}),
    ],
)
async def test_out_of_range_numbers_are_bad_requests(jp_fetch, parts, params):
    response = await jp_fetch("jupyter-pause", "api", *parts, params=params, raise_error=False)
    assert response.code == 400, (parts, params, response.code)


async def test_booleans_are_type_checked(jp_fetch, jp_serverapp, notebook_path):
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 1")
    for value in ("false", 0, 1, None, [], {}):
        for name in ("force", "after_cell"):
            code, answer = await api(
                jp_fetch,
                "sessions",
                "pause",
                method="POST",
                body={"path": notebook_path, name: value},
            )
            assert code == 400, (name, value, answer)
            assert name in answer["message"]
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "running"


async def test_a_checkpoint_folder_that_leads_out_of_the_root_is_refused(
    jp_fetch, jp_serverapp, notebook_path, tmp_path
):
    from jupyter_pause.engine import durable, paths

    manager = manager_of(jp_serverapp)
    folder = paths.notebook_dir(manager.checkpointer.checkpoint_dir, notebook_path)
    durable.makedirs(folder.parent)
    outside = tmp_path / "outside"
    (outside / "2026-01-01T00-00-00").mkdir(parents=True)
    folder.symlink_to(outside)

    code, answer = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert code == 409 and "checkpoint root" in answer["message"], answer
    code, answer = await api(
        jp_fetch,
        "checkpoints",
        "2026-01-01T00-00-00",
        method="DELETE",
        params={"path": notebook_path},
    )
    assert code == 409, answer
    assert (outside / "2026-01-01T00-00-00").is_dir()
    code, _ = await api(jp_fetch, "report")
    assert code == 200


# ------------------------------------------- a paused notebook renamed or deleted


async def test_a_paused_notebook_renamed_takes_its_session_and_checkpoints_along(
    jp_fetch, jp_serverapp, notebook_path
):
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 'kept'")
    assert (await operate(jp_fetch, "pause", notebook_path))["outcome"] == "succeeded"
    paused_id = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]

    # the whole folder moves: the contents manager announces it as one rename
    await jp_fetch("api", "contents", "work", method="PATCH", body=json.dumps({"path": "moved"}))
    moved = "moved/demo.ipynb"

    async def followed():
        _, status = await api(jp_fetch, "status")
        return {s["path"]: s for s in status["sessions"]}.get(moved)

    session = await wait_until(followed, what="the session following the rename")
    assert session["state"] == "paused"
    _, status = await api(jp_fetch, "status")
    assert notebook_path not in [s["path"] for s in status["sessions"]]
    code, listing = await api(jp_fetch, "checkpoints", params={"path": moved})
    assert code == 200 and [c["id"] for c in listing["checkpoints"]] == [paused_id]

    op = await operate(jp_fetch, "resume", moved)
    assert op["outcome"] == "succeeded", op
    kernel_id = (await session_status(jp_fetch, moved))["kernel_id"]
    assert await execute(jp_serverapp, kernel_id, "x") == "'kept'"


async def test_a_deleted_paused_notebook_is_not_resumed_and_its_checkpoints_are_offered(
    jp_fetch, jp_serverapp, notebook_path
):
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 'kept'")
    assert (await operate(jp_fetch, "pause", notebook_path))["outcome"] == "succeeded"
    paused_id = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]
    await jp_fetch("api", "contents", notebook_path, method="DELETE")

    code, answer = await api(
        jp_fetch, "sessions", "resume", method="POST", body={"path": notebook_path}
    )
    assert code == 404, answer
    assert "deleted" in answer["message"] and paused_id in answer["message"]
    assert f"%restore --notebook {notebook_path}" in answer["message"]
    assert not list(jp_serverapp.kernel_manager.list_kernel_ids())  # no kernel for a ghost

    # its checkpoints restore into another notebook
    other = "work/other.ipynb"
    await jp_fetch("api", "contents", other, method="PUT", body=json.dumps({"type": "notebook"}))
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, other, "y = 1")
    await execute(jp_serverapp, kernel_id, f"%restore --notebook {notebook_path} -q")
    assert await execute(jp_serverapp, kernel_id, "x") == "'kept'"
