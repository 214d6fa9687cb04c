"""Configuration flows one way: the server's settings reach every kernel at
start, and %checkpoint, %restore and %pause honour them."""

import pytest

from jupyter_pause.engine import paths

from .helpers import api, execute, session_status, start_session, wait_for_state, wait_until

KEEP = 5


@pytest.fixture
def custom_dir(tmp_path):
    return tmp_path / "elsewhere" / "checkpoints"


@pytest.fixture
def jp_server_config(jp_server_config, custom_dir):
    return {
        **jp_server_config,
        "PauseApp": {
            **jp_server_config["PauseApp"],
            "keep_checkpoints": KEEP,
            "checkpoint_dir": str(custom_dir),
        },
    }


async def test_the_magics_honour_the_servers_settings(
    jp_fetch, jp_serverapp, notebook_path, custom_dir
):
    model = await start_session(jp_fetch, notebook_path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")

    for i in range(KEEP + 2):
        await execute(jp_serverapp, kernel_id, f"x = {i}\n%checkpoint -q")

    # the server's keep_checkpoints, not the engine's default of 3
    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert code == 200 and len(listing["checkpoints"]) == KEEP
    # in the server's checkpoint_dir, where the server itself looks
    folder = paths.notebook_dir(custom_dir, notebook_path)
    assert len([p for p in folder.iterdir() if paths.is_checkpoint_id(p.name)]) == KEEP

    assert await execute(jp_serverapp, kernel_id, "x = 99\n%restore -q\nx") == str(KEEP + 1)

    await execute(jp_serverapp, kernel_id, "x = 'paused'\n%pause")

    async def paused():
        return (await session_status(jp_fetch, notebook_path))["state"] == "paused"

    await wait_until(paused, timeout=120, what="the %pause")
    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert len(listing["checkpoints"]) == KEEP
    session = await session_status(jp_fetch, notebook_path)
    assert session["last_checkpoint"]["id"] == listing["checkpoints"][0]["id"]
