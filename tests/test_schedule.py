"""Scheduled and predicted resumes, with a fake clock and without a server:
parsing resume times, a schedule firing, surviving a restart, being cancelled
by a resume by hand, a predicted resume set after a pause, and an unused
predicted resume paused again."""

import asyncio
import logging
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from jupyter_pause.clock import SYSTEM
from jupyter_pause.idle_policy import WorkloadClass
from jupyter_pause.ledger import EventType
from jupyter_pause.lifecycle import OperationInProgress, SessionStore, State
from jupyter_pause.prediction import UNUSED_REASON
from jupyter_pause.report.ahead import resume_ahead
from jupyter_pause.schedule import ScheduleError, parse_resume_at
from jupyter_pause.server.errors import Conflict, PauseError
from jupyter_pause.server.kernels import KernelCallError
from jupyter_pause.server.ports import Policies

from .fakes import FakeClock, make_manager, scheduler_for
from .helpers import wait_until

NB = "nb.ipynb"
PARIS = ZoneInfo("Europe/Paris")


def at(text: str, tz=PARIS) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=tz).timestamp()


# ------------------------------------------------------------------ parsing

# Tuesday 2026-12-01 18:00 in Paris
NOW = at("2026-12-01T18:00:00")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("08:45", "2026-12-02T08:45:00"),  # already past today: tomorrow
        ("19:30", "2026-12-01T19:30:00"),  # still ahead today
        ("14:00:43", "2026-12-02T14:00:43"),  # with seconds
        ("19:30:05", "2026-12-01T19:30:05"),
        ("tomorrow 08:45:30", "2026-12-02T08:45:30"),
        ("tomorrow 08:45", "2026-12-02T08:45:00"),
        ("Monday 08:45", "2026-12-07T08:45:00"),
        ("tue 19:00", "2026-12-01T19:00:00"),  # today, still ahead
        ("tue 08:00", "2026-12-08T08:00:00"),  # today's is past: next week's
        ("2026-12-03T07:15", "2026-12-03T07:15:00"),  # no offset: the given zone
        ("in 2h", "2026-12-01T20:00:00"),
        ("+30m", "2026-12-01T18:30:00"),
    ],
)
def test_resume_times_as_people_write_them(text, expected):
    assert parse_resume_at(text, NOW, tz=PARIS) == at(expected)


def test_absolute_resume_times():
    assert parse_resume_at(NOW + 60, NOW) == NOW + 60
    assert parse_resume_at("2026-12-02T07:45:00Z", NOW) == at(
        "2026-12-02T07:45:00", ZoneInfo("UTC")
    )


def test_daylight_saving_keeps_the_wall_clock():
    before_change = at("2026-03-28T18:00:00")  # the clocks go forward that night
    assert parse_resume_at("08:45", before_change, tz=PARIS) == at("2026-03-29T08:45:00")
    assert parse_resume_at("08:45", before_change, tz=PARIS) - before_change == 13.75 * 3600


@pytest.mark.parametrize(
    "value, says",
    [
        ("noon", "cannot read"),
        ("25:00", "cannot read"),
        ("08:45:60", "cannot read"),
        ("08:45:7", "cannot read"),
        (True, "cannot read"),
        ([8, 45], "cannot read"),
        (float("nan"), "cannot read"),
        ("today 08:00", "not in the future"),
        (NOW - 1, "not in the future"),
        ("2027-03-01T08:00", "31 days"),
        (10**400, "out of range"),  # no float holds it
    ],
)
def test_resume_times_that_cannot_be_used_say_why(value, says):
    with pytest.raises(ScheduleError, match=says):
        parse_resume_at(value, NOW, tz=PARIS)


def test_a_date_this_machine_cannot_convert_is_out_of_range():
    """Without a zone, an ISO time is this machine's local time: year 1 may be
    beyond what it converts (``ValueError: year 0 is out of range``)."""
    with pytest.raises(ScheduleError, match="out of range|not in the future"):
        parse_resume_at("0001-01-01", NOW)


# ------------------------------------------------------------ the scheduler


async def settle(manager):
    while manager.tasks.all:
        await asyncio.gather(*list(manager.tasks.all), return_exceptions=True)


def with_kernel(manager, namespace=None):
    session = manager.store.get(NB)
    session.kernel_id = manager.kernel_manager.start(namespace or {"x": 41})
    manager.reconciler.session_manager.paths[NB] = session.kernel_id
    return session


def predicting(tmp_path, clock, policy: WorkloadClass):
    """A manager and its scheduler wired as app.py wires them: notebooks run under
    ``policy``, and the scheduler's predictor runs after each pause."""

    async def workload_class(session):
        return policy, "test"

    scheduler = None
    policies = Policies(workload_class=workload_class, after_pause=lambda s: scheduler.predict(s))
    manager = make_manager(tmp_path, policies=policies)
    scheduler = scheduler_for(manager, clock, workload_class=workload_class)
    return manager, scheduler


def types(manager):
    return [e.type for e in manager.ledger.events(path=NB)]


async def paused(manager, **options):
    with_kernel(manager)
    op = await manager.pause(NB, **options)
    await settle(manager)
    assert op.outcome == "succeeded", op.error
    assert manager.store.sessions[NB].state == State.PAUSED


async def test_a_schedule_fires_at_its_time_and_the_notebook_is_ready(tmp_path):
    manager = make_manager(tmp_path)
    clock = FakeClock()
    scheduler = scheduler_for(manager, clock)
    await paused(manager, resume_at=clock.wall + 3600)
    session = manager.store.sessions[NB]
    assert session.schedule["at"] == clock.wall + 3600

    clock.advance(3599)
    await scheduler.check()
    await settle(manager)
    assert session.state == State.PAUSED and session.schedule

    clock.advance(2)
    await scheduler.check()
    await settle(manager)
    assert session.state == State.READY
    assert session.schedule is None
    assert session.resumed_ahead["kind"] == "scheduled"
    kernel = manager.kernel_manager.get_kernel(session.kernel_id)
    assert kernel.namespace["x"] == 41
    events = manager.ledger.events(path=NB)
    started = [e for e in events if e.type == EventType.SCHEDULED_RESUME_STARTED]
    assert len(started) == 1 and started[0].data["kind"] == "scheduled"
    requested = [e for e in events if e.type == EventType.RESUME_REQUESTED]
    assert requested[-1].data["scheduled"] == "scheduled"

    # the user's first cell: a hit in the report
    manager.reconciler.on_activity(NB, session.kernel_id, "cell-finished", {"duration": 0.0})
    assert session.resumed_ahead is None
    report = resume_ahead(manager.ledger.events(), 0, time.time() + 10)
    assert report["kinds"]["scheduled"]["hits"] == 1


async def test_a_schedule_survives_a_server_restart_and_fires_at_start_up(tmp_path):
    manager = make_manager(tmp_path)
    clock = FakeClock()
    await paused(manager)
    manager.schedules.set(NB, clock.wall + 600)
    await manager.close()

    # a new server over the same session file, started after the time has come
    store = SessionStore(tmp_path / "sessions.json")
    assert store.sessions[NB].schedule["at"] == clock.wall + 600
    restarted = make_manager(tmp_path, store=store)
    clock.advance(3600)
    await scheduler_for(restarted, clock).check()
    await settle(restarted)
    assert restarted.store.sessions[NB].state == State.READY


async def test_the_scheduler_wakes_up_for_a_new_schedule(tmp_path):
    """The real loop: a schedule due in a moment fires without waiting for the interval."""
    manager = make_manager(tmp_path)
    scheduler = scheduler_for(manager, SYSTEM, interval=3600)  # the real clock
    await paused(manager)
    scheduler.start()
    try:
        manager.schedules.set(NB, time.time() + 0.5)
        session = manager.store.sessions[NB]
        await wait_until(lambda: session.state == State.READY, what="the scheduled resume")
    finally:
        await scheduler.stop()
        await settle(manager)


async def test_a_resume_by_hand_cancels_the_schedule(tmp_path):
    manager = make_manager(tmp_path)
    clock = FakeClock()
    scheduler = scheduler_for(manager, clock)
    await paused(manager, resume_at=clock.wall + 3600)
    await manager.resume(NB)
    await settle(manager)
    session = manager.store.sessions[NB]
    assert session.state == State.READY and session.schedule is None
    assert session.resumed_ahead is None
    cancelled = manager.ledger.events(path=NB, types=[EventType.RESUME_SCHEDULE_CANCELLED])
    assert cancelled[0].data["reason"] == "resumed by hand"

    clock.advance(7200)
    await scheduler.check()  # nothing left to fire: no second restore
    assert types(manager).count(EventType.RESTORE_STARTED) == 1
    report = resume_ahead(manager.ledger.events(), 0, time.time() + 10)
    assert report["kinds"]["scheduled"]["came_first"] == 1


async def test_only_a_paused_notebook_can_be_scheduled(tmp_path):
    manager = make_manager(tmp_path)
    with_kernel(manager)
    await manager.sync()
    with pytest.raises(PauseError) as refused:
        manager.schedules.set(NB, time.time() + 60)
    assert isinstance(refused.value, Conflict) and "running" in str(refused.value)
    assert manager.store.sessions[NB].schedule is None


async def test_a_pause_that_fails_drops_its_schedule_and_the_kernel_keeps_running(tmp_path):
    manager = make_manager(tmp_path)
    with_kernel(manager)

    async def failing_call(kernel, function, timeout=60, **kw):
        raise KernelCallError("OSError: [Errno 28] No space left on device")

    manager.checkpointer.call = failing_call
    op = await manager.pause(NB, resume_at=time.time() + 3600)
    await settle(manager)
    session = manager.store.sessions[NB]
    assert op.outcome == "failed"
    assert session.state == State.RUNNING and session.schedule is None
    cancelled = manager.ledger.events(path=NB, types=[EventType.RESUME_SCHEDULE_CANCELLED])
    assert cancelled[0].data["reason"] == "the pause did not finish"


async def test_a_schedule_that_cannot_start_is_cancelled_with_the_reason(tmp_path):
    manager = make_manager(tmp_path)
    clock = FakeClock()
    await paused(manager)
    manager.schedules.set(NB, clock.wall + 60)
    manager.contents_manager.files.discard(NB)  # the notebook was deleted meanwhile
    clock.advance(120)
    await scheduler_for(manager, clock).check()
    session = manager.store.sessions[NB]
    assert session.state == State.PAUSED and session.schedule is None
    (cancelled,) = manager.ledger.events(path=NB, types=[EventType.RESUME_SCHEDULE_CANCELLED])
    assert "deleted" in cancelled.data["reason"]


# ------------------------------------------------------------- predictions


def seed_history(manager, now: float, weeks=(1, 2, 3), back_after=15 * 3600):
    """Past pauses at this time of day on this weekday, each followed by a
    return ``back_after`` seconds later (the user's first cell)."""
    for w in weeks:
        paused_at = now - w * 7 * 86400
        manager.ledger.record(EventType.PAUSED, path=NB, time_=paused_at)
        manager.ledger.record(
            EventType.CELL_EXECUTED, path=NB, time_=paused_at + back_after, duration=0.0
        )


PREDICTING = WorkloadClass(name="predicting", predict_resume=True, predict_unused_after=1800)


async def test_a_confident_prediction_schedules_a_resume_ahead_of_the_user(tmp_path):
    clock = FakeClock()
    manager, _ = predicting(tmp_path, clock, PREDICTING)
    seed_history(manager, clock.wall)
    await paused(manager)
    schedule = manager.store.sessions[NB].schedule
    assert schedule["kind"] == "predicted" and schedule["by"] == "prediction"
    assert schedule["confidence"] == pytest.approx(0.75)
    # ready a margin (5 min) plus the resume latency (60 s, none measured yet) before 15 h later,
    # give or take a daylight-saving hour between the sampled weeks
    expected = clock.wall + 15 * 3600 - 300 - 60
    assert abs(schedule["at"] - expected) <= 3600


async def test_no_prediction_without_opting_in_or_without_history(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="test")
    clock = FakeClock()
    manager, _ = predicting(tmp_path, clock, WorkloadClass(name="plain"))
    seed_history(manager, clock.wall)
    await paused(manager)
    assert manager.store.sessions[NB].schedule is None

    other, _ = predicting(tmp_path / "other", clock, PREDICTING)
    seed_history(other, clock.wall, weeks=(1, 2))  # two returns are too few
    await paused(other)
    assert other.store.sessions[NB].schedule is None

    empty, _ = predicting(tmp_path / "empty", clock, PREDICTING)  # no history at all
    await paused(empty)
    assert empty.store.sessions[NB].schedule is None
    said = [r.getMessage() for r in caplog.records if "no predicted resume" in r.getMessage()]
    assert len(said) == 2 and all("not enough history yet" in m for m in said), said
    assert "2 past return(s) recorded" in said[0] and "0 past return(s)" in said[1]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]


async def test_an_unused_predicted_resume_is_paused_again(tmp_path):
    clock = FakeClock()
    manager, scheduler = predicting(tmp_path, clock, PREDICTING)
    seed_history(manager, clock.wall)
    await paused(manager)
    session = manager.store.sessions[NB]
    clock.advance(session.schedule["at"] + 1 - clock.wall)
    await scheduler.check()
    await settle(manager)
    assert session.state == State.READY
    ready_at = session.resumed_ahead["at"]

    clock.advance(ready_at + 1799 - clock.wall)
    await scheduler.check()
    await settle(manager)
    assert session.state == State.READY  # still inside the window

    clock.advance(ready_at + 1801 - clock.wall)
    await scheduler.check()
    await settle(manager)
    assert session.state == State.PAUSED
    (unused,) = manager.ledger.events(path=NB, types=[EventType.PREDICTED_RESUME_UNUSED])
    assert unused.data["held_seconds"] >= 1800
    repause = manager.ledger.events(path=NB, types=[EventType.PAUSE_REQUESTED])[-1]
    assert repause.data["reason"] == UNUSED_REASON and repause.data["auto"] is True
    # the re-pause predicts nothing new: the user has still not come back
    assert session.schedule is None
    report = resume_ahead(manager.ledger.events(), 0, time.time() + 4 * 86400)
    assert report["kinds"]["predicted"]["unused"] == 1


async def test_a_scheduled_resume_waits_for_capacity_like_a_manual_one_and_never_competes(
    tmp_path,
):
    manager = make_manager(tmp_path)
    capacity = asyncio.Event()

    async def acquire(session, report_waiting):
        report_waiting("no GPU free on this machine")
        await capacity.wait()

    manager.backend.acquire = acquire
    clock = FakeClock()
    scheduler = scheduler_for(manager, clock)
    await paused(manager, resume_at=clock.wall + 60)
    clock.advance(61)
    await scheduler.check()
    session = manager.store.sessions[NB]
    await wait_until(lambda: session.state == State.WAITING_FOR_CAPACITY, what="the wait")
    assert session.operation.options["scheduled"] == "scheduled"

    # the user arrives and clicks Resume: the restore under way is not doubled
    with pytest.raises(OperationInProgress):
        await manager.resume(NB)
    await scheduler.check()
    capacity.set()
    await settle(manager)
    assert session.state == State.READY
    assert types(manager).count(EventType.RESTORE_STARTED) == 1
    assert EventType.WAITING_FOR_CAPACITY in types(manager)
