"""A server-scope pause whose platform stops the server afterwards (the Hub,
Kubernetes without a snapshot): until it does, the kernels it took live on, and
the stop's own reconcile must not take them for kernels a user started (the
ledger would count the paused notebook as allocated again, for the whole stop)."""

import pytest

from jupyter_pause.backends.base import PauseBackend, ReleaseFacts

from .helpers import api, execute, session_status, start_session, wait_for_state, wait_operation


class StopLaterBackend(PauseBackend):
    """Releases by having the platform stop the server later: kernels stay until then."""

    name = "stop-later"
    scope = "server"

    async def release(self, sessions, shutdown_kernel):
        return ReleaseFacts(details={"server": "alice/"})


@pytest.fixture
def jp_server_config(jp_server_config):
    return {
        **jp_server_config,
        "PauseApp": {"backend_class": StopLaterBackend, "auto_pause": False},
    }


async def test_the_kernels_a_pause_handed_to_the_platform_are_not_adopted(
    jp_fetch, jp_serverapp, notebook_path
):
    model = await start_session(jp_fetch, notebook_path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await execute(jp_serverapp, kernel_id, "a = 1")
    code, body = await api(
        jp_fetch, "sessions", "pause", method="POST", body={"path": notebook_path}
    )
    assert code == 202
    op = await wait_operation(jp_fetch, body["operation"]["id"])
    assert op["outcome"] == "succeeded", op
    assert kernel_id in jp_serverapp.kernel_manager  # the platform has not stopped it yet

    manager = jp_serverapp.web_app.settings["jupyter_pause_manager"]
    await manager.sync()  # as the server's stop does (save_all), before the kernels go

    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "paused"
    types = [e.type.value for e in manager.ledger.events(path=notebook_path)]
    assert "kernel-started" not in types[types.index("paused") :], types
