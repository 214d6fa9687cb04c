"""A resume with the notebook open in a tab (issue #26, item 1): the notebook
keeps one Jupyter session, whose kernel holds the restored state, whoever
started the resume; a pause acts on that kernel, or refuses and says why.

A "tab" here is what JupyterLab does on the wire: POST /api/sessions under a
random path, then PATCH the notebook's path onto it.
"""

import json
import time
import uuid

import pytest

from .helpers import (
    api,
    execute,
    operate,
    running_notebook,
    session_status,
    wait_for_state,
    wait_operation,
    wait_until,
)


@pytest.fixture
def gate(tmp_path):
    folder = tmp_path / "gate"
    folder.mkdir()
    return folder


@pytest.fixture
def jp_server_config(jp_server_config, gate):
    config = {**jp_server_config}
    config["PauseApp"] = {
        **config["PauseApp"],
        "backend_class": "tests.fault_backends.GatedAcquire",
    }
    config["GatedAcquire"] = {"gate": str(gate)}
    return config


async def tab_starts_a_kernel(jp_fetch, path: str) -> dict:
    """What JupyterLab's SessionContext does when a cell runs without a kernel."""
    folder = path.rpartition("/")[0]
    r = await jp_fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps(
            {
                "path": f"{folder}/{uuid.uuid4()}",
                "type": "notebook",
                "name": path.rpartition("/")[2],
                "kernel": {"name": "python3"},
            }
        ),
    )
    model = json.loads(r.body)
    r = await jp_fetch(
        "api", "sessions", model["id"], method="PATCH", body=json.dumps({"path": path})
    )
    return json.loads(r.body)


async def sessions_of(jp_fetch, path: str) -> list[dict]:
    r = await jp_fetch("api", "sessions")
    return [s for s in json.loads(r.body) if s["path"] == path]


async def paused_until_soon(jp_fetch, jp_serverapp, path: str, gate) -> None:
    await running_notebook(jp_fetch, jp_serverapp, path, "x = 41\nnames = ['a', 'b']")
    op = await operate(jp_fetch, "pause", path, resume_at=time.time() + 2)
    assert op["outcome"] == "succeeded", op
    # the schedule fires by itself; its resume stops at the backend's gate
    await wait_until(lambda: (gate / "acquiring").exists(), what="the scheduled resume")


async def test_a_tab_that_starts_a_kernel_during_a_scheduled_resume_gets_the_state(
    jp_fetch, jp_serverapp, notebook_path, gate
):
    await paused_until_soon(jp_fetch, jp_serverapp, notebook_path, gate)
    assert (await session_status(jp_fetch, notebook_path))["state"] == "resuming"
    tab = await tab_starts_a_kernel(jp_fetch, notebook_path)
    (gate / "acquire").touch()

    async def ready():
        return (await session_status(jp_fetch, notebook_path))["state"] == "ready"

    await wait_until(ready, timeout=120, what="the resume")
    (only,) = await sessions_of(jp_fetch, notebook_path)  # one session, the tab's
    assert only["id"] == tab["id"]
    kernel_id = only["kernel"]["id"]
    assert (await session_status(jp_fetch, notebook_path))["kernel_id"] == kernel_id
    await wait_for_state(jp_serverapp, kernel_id)
    assert await execute(jp_serverapp, kernel_id, "x + 1, names") == "(42, ['a', 'b'])"

    op = await operate(jp_fetch, "pause", notebook_path)
    assert op["outcome"] == "succeeded", op
    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert code == 200, listing
    assert {"x", "names"} <= set(listing["checkpoints"][0]["objects"])
    assert jp_serverapp.kernel_manager.list_kernel_ids() == []
    assert await sessions_of(jp_fetch, notebook_path) == []


async def test_a_pause_refuses_a_notebook_with_a_second_session_and_says_why(
    jp_fetch, jp_serverapp, notebook_path, gate
):
    (gate / "acquire").touch()  # no stop at the gate
    await paused_until_soon(jp_fetch, jp_serverapp, notebook_path, gate)

    async def ready():
        return (await session_status(jp_fetch, notebook_path))["state"] == "ready"

    await wait_until(ready, timeout=120, what="the scheduled resume")
    (restored,) = await sessions_of(jp_fetch, notebook_path)
    restored_kernel = restored["kernel"]["id"]
    # a tab that did not follow the resume starts an empty kernel of its own
    tab = await tab_starts_a_kernel(jp_fetch, notebook_path)
    await wait_for_state(jp_serverapp, tab["kernel"]["id"])

    # the status still names the kernel with the state
    session = await session_status(jp_fetch, notebook_path)
    assert session["kernel_id"] == restored_kernel and session["state"] == "ready"
    for verb in ("pause", "checkpoint"):
        code, answer = await api(
            jp_fetch, "sessions", verb, method="POST", body={"path": notebook_path}
        )
        assert code == 409, answer
        assert "two Jupyter sessions" in answer["message"], answer
        assert tab["id"] in answer["message"]
    # nothing was shut down or saved
    assert set(jp_serverapp.kernel_manager.list_kernel_ids()) == {
        restored_kernel,
        tab["kernel"]["id"],
    }
    assert await execute(jp_serverapp, restored_kernel, "x") == "41"

    # once the stray session is gone, the pause saves the state and stops its kernel
    await jp_fetch("api", "sessions", tab["id"], method="DELETE")
    code, answer = await api(
        jp_fetch, "sessions", "pause", method="POST", body={"path": notebook_path}
    )
    assert code == 202, answer
    op = await wait_operation(jp_fetch, answer["operation"]["id"])
    assert op["outcome"] == "succeeded", op
    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert {"x", "names"} <= set(listing["checkpoints"][0]["objects"])
    assert jp_serverapp.kernel_manager.list_kernel_ids() == []
