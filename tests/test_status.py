"""GET status: truthful, authenticated, and never counted as activity."""

import asyncio
import json

import pytest
import tornado.httpclient

from jupyter_pause import __version__

from .helpers import held_cell, start_client, start_session, wait_for_state


async def get_status(jp_fetch):
    r = await jp_fetch("jupyter-pause", "api", "status")
    return json.loads(r.body)


async def test_status_lists_a_notebook_session_with_its_real_state(
    jp_fetch, jp_serverapp, notebook_path, tmp_path
):
    model = await start_session(jp_fetch, notebook_path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")

    status = await get_status(jp_fetch)

    assert status["version"] == __version__
    assert status["backend"]["name"] == "local"
    (session,) = status["sessions"]
    assert session["path"] == notebook_path
    assert session["kernel_id"] == kernel_id
    assert session["execution_state"] == "idle"
    assert session["state"] == "running"
    assert session["last_activity"]

    # a busy kernel is reported busy, not from a stale cache
    client = start_client(jp_serverapp, kernel_id)
    release = tmp_path / "release"
    try:
        # a send before the shell socket is connected can be lost
        await client.wait_for_ready(timeout=60)
        # busy until the test has looked: a loaded machine cannot end it unseen
        client.execute(held_cell(release))
        await wait_for_state(jp_serverapp, kernel_id, "busy")
        (session,) = (await get_status(jp_fetch))["sessions"]
        assert session["execution_state"] == "busy"
    finally:
        release.touch()
        client.stop_channels()


async def test_status_refuses_unauthenticated_requests(jp_fetch):
    with pytest.raises(tornado.httpclient.HTTPClientError) as e:
        await jp_fetch("jupyter-pause", "api", "status", headers={"Authorization": ""})
    assert e.value.code == 403


async def test_polling_status_is_not_activity(jp_fetch, jp_serverapp, notebook_path):
    model = await start_session(jp_fetch, notebook_path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await asyncio.sleep(0.5)  # let the kernel's start-up messages settle
    web_app = jp_serverapp.web_app
    server_before = web_app.last_activity()
    api_before = web_app.settings.get("api_last_activity")
    kernel_before = jp_serverapp.kernel_manager.get_kernel(kernel_id).last_activity

    for _ in range(5):
        await get_status(jp_fetch)
        await asyncio.sleep(0.05)

    assert web_app.settings.get("api_last_activity") == api_before
    assert web_app.last_activity() == server_before
    assert jp_serverapp.kernel_manager.get_kernel(kernel_id).last_activity == kernel_before


async def test_kernels_started_by_the_server_load_the_magics(jp_fetch, jp_serverapp, notebook_path):
    model = await start_session(jp_fetch, notebook_path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    client = start_client(jp_serverapp, kernel_id)
    try:
        await client.wait_for_ready(timeout=30)
        reply = await client.execute_interactive(
            "",
            user_expressions={
                "magics": "sorted(get_ipython().magics_manager.magics['line'])",
                "notebook": "__import__('os').environ.get('JUPYTER_PAUSE_NOTEBOOK')",
            },
            timeout=30,
        )
    finally:
        client.stop_channels()
    expressions = reply["content"]["user_expressions"]
    assert "'checkpoint'" in expressions["magics"]["data"]["text/plain"]
    assert expressions["notebook"]["data"]["text/plain"] == repr(notebook_path)


async def test_jupyterlabs_temporary_session_names_are_not_notebooks(
    jp_fetch, jp_serverapp, notebook_path
):
    # JupyterLab starts a session under a UUID path, then renames it to the notebook
    model = await start_session(jp_fetch, "work/0b7e2f1c-5a3d-4c1e-9f00-123456789abc")
    await wait_for_state(jp_serverapp, model["kernel"]["id"], "idle")
    status = await get_status(jp_fetch)
    assert status["sessions"] == []
    await jp_fetch(
        "api", "sessions", model["id"], method="PATCH", body=json.dumps({"path": notebook_path})
    )
    (session,) = (await get_status(jp_fetch))["sessions"]
    assert session["path"] == notebook_path and session["kernel_id"] == model["kernel"]["id"]
