"""A server stopped as it starts: nothing of jupyter-pause runs on after the stop."""

import asyncio

import pytest


def pause_tasks():
    """The tasks still running code of jupyter_pause."""
    return [
        t
        for t in asyncio.all_tasks()
        if t is not asyncio.current_task()
        and any("jupyter_pause" in f.f_code.co_filename for f in t.get_stack())
    ]


@pytest.mark.parametrize("turns", [0, 1, 3, 20], ids=["before", "at", "during", "after"])
async def test_a_stop_right_after_the_start_leaves_no_task_running(jp_serverapp, turns):
    """A stop that comes before the start-up ran, or while it runs, is not followed by
    loops that the start-up begins (seen in CI: a scheduler and a lease heartbeat left
    pending on a closed loop; a stop that waited minutes for the fleet's loop)."""
    (pause,) = jp_serverapp.extension_manager.extension_apps["jupyter_pause"]
    for _ in range(turns):
        await asyncio.sleep(0)
    await asyncio.wait_for(pause.stop_extension(), 60)
    assert not pause_tasks()
