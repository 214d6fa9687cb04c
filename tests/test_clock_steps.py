"""Steps of the wall clock (an NTP correction, a VM resumed from suspend, a
laptop lid), injected with a fake clock into the real idle watcher, activity
monitor and scheduler: durations are measured on the monotonic clock, and
schedules re-arm from the wall clock."""

import asyncio

import pytest

from jupyter_pause.clock import StampAges
from jupyter_pause.ledger import EventType
from jupyter_pause.lifecycle import State
from jupyter_pause.server.activity import ActivityMonitor, KernelActivity
from jupyter_pause.server.idle_watcher import iso

from .fakes import FakeClock, idle_watcher_for, make_manager, scheduler_for
from .helpers import wait_until

NB = "nb.ipynb"
HOURS = 3600
THRESHOLD = 60


async def settle(manager):
    while manager.tasks.all:
        await asyncio.gather(*list(manager.tasks.all), return_exceptions=True)


async def running(manager):
    session = manager.store.get(NB)
    session.kernel_id = manager.kernel_manager.start({"x": 41})
    manager.reconciler.session_manager.paths[NB] = session.kernel_id
    await manager.sync()
    return session


def watcher_for(manager, clock):
    classes = {
        "gpu-interactive": {
            "idle_threshold": THRESHOLD,
            "min_running_time": 0,
            "warn_before": 10,
            "gpu_utilization_counts": False,
        }
    }
    return idle_watcher_for(manager, clock, classes)


def auto_events(manager):
    return manager.ledger.events(
        path=NB, types=[EventType.AUTO_PAUSE_WARNED, EventType.PAUSE_REQUESTED]
    )


# ------------------------------------------------------------ idleness


STEPS = [30, 2 * HOURS, 24 * HOURS, -30, -2 * HOURS, -24 * HOURS]


@pytest.mark.parametrize("step", STEPS)
async def test_a_wall_clock_step_is_not_idleness(tmp_path, step):
    """Used 2 s before a step of the wall clock, checked 5 s after it: 7 s idle."""
    clock = FakeClock()
    manager = make_manager(tmp_path, clock=clock)
    session = await running(manager)
    watcher = watcher_for(manager, clock)
    manager.activity.for_path(NB).reset_clock()  # the user ran a cell
    used_at = clock.wall

    clock.advance(2)
    clock.step(step)
    clock.advance(5)
    await watcher.check()
    await settle(manager)
    assert session.state == State.RUNNING and not auto_events(manager)
    report = await watcher.report()
    (entry,) = report["sessions"]
    assert entry["idle_seconds"] == 7 and entry["seconds_left"] == THRESHOLD - 7
    assert report["server"]["idle_seconds"] == 7
    # what is shown is when it happened, on the wall clock
    assert entry["last_activity"] == report["server"]["last_activity"]
    assert entry["last_activity"].startswith(iso(used_at)[:19])

    # idleness itself still counts: warned, then paused one threshold after the use
    clock.advance(THRESHOLD - 7 - 5)
    await watcher.check()
    assert [e.type for e in auto_events(manager)] == [EventType.AUTO_PAUSE_WARNED]
    clock.advance(5)
    await watcher.check()
    await settle(manager)
    assert session.state == State.PAUSED


async def test_keep_running_restarts_the_idle_clock_whatever_the_wall_clock_does(tmp_path):
    clock = FakeClock()
    manager = make_manager(tmp_path, clock=clock)
    session = await running(manager)
    watcher = watcher_for(manager, clock)
    clock.advance(THRESHOLD - 5)
    assert watcher.postpone(NB) == clock.wall  # shown on the wall clock
    clock.step(-2 * HOURS)
    clock.advance(THRESHOLD - 1)
    await watcher.check()
    assert session.state == State.RUNNING
    clock.advance(1)
    await watcher.check()
    await settle(manager)
    assert session.state == State.PAUSED


def test_a_cell_s_duration_is_measured_on_the_monotonic_clock():
    """The real activity monitor, fed the IOPub messages of one cell that ran
    for 3 s while the wall clock stepped 2 h forward."""
    clock = FakeClock()
    monitor = ActivityMonitor(kernel_manager=None, clock=clock)
    activity = monitor.kernels["k"] = KernelActivity(kernel_id="k", path=NB, clock=clock)
    heard = []
    monitor.listeners.append(lambda path, kernel_id, event, info: heard.append((event, info)))
    parent = {"msg_id": "cell-1", "msg_type": "execute_request"}

    monitor._on_message(
        activity, {"header": {"msg_type": "execute_input"}, "parent_header": parent}
    )
    clock.advance(1)
    clock.step(2 * HOURS)
    clock.advance(2)
    idle = {"header": {"msg_type": "status"}, "parent_header": parent}
    monitor._on_message(activity, {**idle, "content": {"execution_state": "idle"}})

    assert heard == [("cell-started", {}), ("cell-finished", {"duration": 3.0})]
    assert activity.last_cell_finished == clock.wall  # the ledger's time: the wall clock
    assert activity.last_user_activity.monotonic == clock.mono


def test_stamp_ages_read_the_wall_clock_once_then_the_monotonic_one():
    clock = FakeClock()
    ages = StampAges(clock)
    assert ages.age("a", clock.wall - 30) == 30  # first sight: the wall clock
    clock.step(2 * HOURS)
    assert ages.age("a", clock.wall - 2 * HOURS - 30) == 30
    clock.advance(10)
    assert ages.age("a", clock.wall - 2 * HOURS - 40) == 40
    assert ages.age("b", clock.wall + HOURS) == 0  # a stamp in the future is not old
    clock.advance(5)
    assert ages.age("b", clock.wall + HOURS - 5) == 5
    assert ages.age("a", clock.wall) == 0  # renewed


# ------------------------------------------------------------ schedules


async def paused(manager, clock, resume_at):
    await running(manager)
    op = await manager.pause(NB, resume_at=resume_at)
    await settle(manager)
    assert op.outcome == "succeeded", op.error
    return manager.store.sessions[NB]


async def armed(manager, scheduler):
    """Wake the scheduler's loop (as a schedule change does) and wait until it
    has run a round and sleeps again, armed with the clocks as they read now."""
    manager.schedules.changed.set()
    await wait_until(lambda: not scheduler._wake.is_set(), what="a round of the scheduler")


async def test_a_jump_forward_fires_what_fell_due_within_seconds(tmp_path):
    """The scheduler's real loop sleeps towards a resume 1 h ahead; the wall
    clock jumps 2 h: the resume starts at once, not an hour later."""
    clock = FakeClock()
    manager = make_manager(tmp_path, clock=clock)
    scheduler = scheduler_for(manager, clock, interval=3600)
    session = await paused(manager, clock, clock.wall + HOURS)
    scheduler.start()
    try:
        await armed(manager, scheduler)
        assert session.state == State.PAUSED
        clock.step(2 * HOURS)
        await wait_until(lambda: session.state == State.READY, timeout=30, what="the resume")
    finally:
        await scheduler.stop()
        await settle(manager)


async def test_a_jump_back_fires_nothing_early_and_the_resume_comes_at_its_wall_time(tmp_path):
    """Due in 10 s when the wall clock jumps 2 h back: 11 s later the resume is
    not due (it is 2 h away on the wall clock); it fires when the wall clock
    reaches it, without anyone waking the scheduler."""
    clock = FakeClock()
    manager = make_manager(tmp_path, clock=clock)
    scheduler = scheduler_for(manager, clock, interval=3600)
    due = clock.wall + 10
    session = await paused(manager, clock, due)
    scheduler.start()
    try:
        clock.step(-2 * HOURS)
        clock.advance(11)
        await armed(manager, scheduler)
        assert session.state == State.PAUSED and session.schedule["at"] == due

        clock.advance(due - clock.wall)  # its wall time, 2 h later
        await wait_until(lambda: session.state == State.READY, timeout=30, what="the resume")
    finally:
        await scheduler.stop()
        await settle(manager)
