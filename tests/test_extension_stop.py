"""A server stopped as it starts: nothing of jupyter-pause runs on after the stop."""

import asyncio
import json

import pytest

from .helpers import wait_until


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


async def test_a_kernel_start_being_watched_does_not_outlive_the_stop(jp_fetch, jp_serverapp):
    """Jupyter's event bus runs the manager's kernel-start listener as a task nobody
    awaits; for a kernel without a session it waits seconds for one. A stop meanwhile
    waits for it to end (seen in CI: "Task was destroyed but it is pending!
    ... PauseManager.on_kernel_action()")."""
    (pause,) = jp_serverapp.extension_manager.extension_apps["jupyter_pause"]
    await wait_until(lambda: pause.manager.recovered.is_set(), what="the start-up")
    await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
    await wait_until(
        lambda: any("on_kernel_action" in repr(t.get_coro()) for t in pause_tasks()),
        what="the listener for the kernel's start",
    )
    await asyncio.wait_for(pause.stop_extension(), 60)
    assert not pause_tasks()


async def test_a_step_of_the_stop_that_fails_does_not_stop_the_others(jp_serverapp, caplog):
    """Jupyter Server halts if ``stop_extension`` raises: each step is guarded, so one that
    fails (the backend, the scheduler) is logged and the manager and the ledger still close."""
    (pause,) = jp_serverapp.extension_manager.extension_apps["jupyter_pause"]
    await wait_until(lambda: pause.manager.recovered.is_set(), what="the start-up")
    ran = []

    async def fails():
        raise RuntimeError("a step that fails")

    def recorded(name, close):
        def wrapper(*args, **kwargs):
            ran.append(name)
            return close(*args, **kwargs)

        return wrapper

    stop_scheduler = pause.scheduler.stop
    pause.backend_instance.stopping = fails
    pause.scheduler.stop = fails
    pause.manager.close = recorded("manager", pause.manager.close)
    pause.ledger.close = recorded("ledger", pause.ledger.close)
    await asyncio.wait_for(pause.stop_extension(), 60)
    assert ran == ["manager", "ledger"]
    failed = [r.getMessage() for r in caplog.records if "a step that fails" in str(r.exc_info)]
    assert failed == [
        "jupyter-pause: could not tell the backend while the server stops",
        "jupyter-pause: could not stop the scheduler while the server stops",
    ]
    await stop_scheduler()  # what the failing step left running
