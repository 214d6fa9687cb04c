"""Predicting a user's return after a pause (pure: no server, times passed in)."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyter_pause.ledger import EventType, LedgerEvent
from jupyter_pause.prediction import (
    Prediction,
    Return,
    measured_resume_latency,
    predict_return,
    resume_ahead_time,
    returns_by_user,
    returns_from_events,
)

UTC = timezone.utc
H, M = 3600.0, 60.0


def at(day: str, hhmm: str, tz=UTC) -> float:
    """``at("2026-11-02", "09:00")``: epoch seconds of that wall-clock time in ``tz``."""
    return datetime.fromisoformat(f"{day}T{hhmm}").replace(tzinfo=tz).timestamp()


# Monday 2026-11-02 .. Friday 2026-11-27: four weeks of workdays
WORKDAYS = [f"2026-11-{d:02d}" for d in range(2, 28) if datetime(2026, 11, d).weekday() < 5]


def evenings(days, pause="18:30", back="09:00", tz=UTC, jitter=0.0, seed=0) -> list[Return]:
    """Paused at ``pause`` on each day, back at ``back`` (+- jitter s) on the next workday."""
    rng = random.Random(seed)
    out = []
    for i, day in enumerate(days[:-1]):
        nxt = days[i + 1]
        out.append(Return(at(day, pause, tz), at(nxt, back, tz) + rng.uniform(-jitter, jitter)))
    return out


def test_regular_weekday_returns_are_predicted_with_high_confidence():
    history = evenings(WORKDAYS[:10])  # two weeks: 9 evenings, back 9:00 sharp
    p = predict_return(history, at("2026-11-17", "18:40"))  # Tuesday evening
    assert p is not None
    assert p.at == at("2026-11-18", "09:00")  # Wednesday 9:00
    assert p.samples == 9
    assert p.confidence == pytest.approx(9 / 10)
    assert p.spread == 0
    assert resume_ahead_time(p, resume_latency=40, margin=300) == at("2026-11-18", "08:54:20")


def test_erratic_returns_give_low_confidence():
    history = evenings(WORKDAYS[:15], back="09:00", jitter=2 * H, seed=1)  # 7:00 .. 11:00
    p = predict_return(history, at("2026-11-24", "18:30"))
    assert p is not None
    assert p.confidence < 0.5
    assert p.spread > 30 * M
    # the same history made regular is trusted, the more the more samples it has
    regular = predict_return(evenings(WORKDAYS[:15]), at("2026-11-24", "18:30"))
    assert regular.samples == 14 and regular.confidence == pytest.approx(14 / 15)
    few = predict_return(evenings(WORKDAYS[:4]), at("2026-11-05", "18:30"))
    assert few.samples == 3 and few.confidence == pytest.approx(3 / 4)


def test_too_few_samples_is_no_prediction():
    history = evenings(WORKDAYS[:3])  # two evenings
    assert predict_return(history, at("2026-11-05", "18:30")) is None
    assert predict_return(history, at("2026-11-05", "18:30"), min_samples=2) is not None
    assert predict_return([], at("2026-11-05", "18:30")) is None
    # returns that lie in the future of the pause, or are too old, are no basis
    assert predict_return(evenings(WORKDAYS[10:]), at("2026-11-05", "18:30")) is None
    # a return not yet known at the pause (a merged history of two notebooks) is no basis
    pending = [Return(at(d, "18:00"), at("2026-11-20", "09:00")) for d in WORKDAYS[:5]]
    assert predict_return(pending, at("2026-11-10", "18:30")) is None
    old = evenings(WORKDAYS[:10])
    assert predict_return(old, at("2027-02-02", "18:30")) is None
    with pytest.raises(ValueError):
        predict_return(old, at("2026-11-17", "18:30"), min_samples=0)


def test_friday_evening_predicts_monday_not_saturday():
    history = evenings(WORKDAYS[:15])  # includes Friday -> Monday returns
    p = predict_return(history, at("2026-11-27", "18:30"))  # Friday
    assert p is not None
    assert p.at == at("2026-11-30", "09:00")  # Monday
    assert datetime.fromtimestamp(p.at, UTC).weekday() == 0


def test_same_weekday_habits_win_when_there_are_enough():
    # back at 9:00 on most days, but at 11:00 on Wednesdays (a standing meeting)
    history = []
    for i, day in enumerate(WORKDAYS[:-1]):
        nxt = WORKDAYS[i + 1]
        back = "11:00" if datetime.fromisoformat(nxt).weekday() == 2 else "09:00"
        history.append(Return(at(day, "18:30"), at(nxt, back)))
    tuesday = predict_return(history, at("2026-11-24", "18:30"))
    assert tuesday.at == at("2026-11-25", "11:00")
    monday = predict_return(history, at("2026-11-23", "18:30"))
    assert monday.at == at("2026-11-24", "09:00")


def test_weekend_pauses_need_weekend_history():
    history = evenings(WORKDAYS[:10])
    assert predict_return(history, at("2026-11-21", "18:30")) is None  # a Saturday
    # someone who works Saturday afternoons: paused 17:00, back Sunday 14:00
    weekends = [
        Return(at(sat, "17:00"), at(sun, "14:00"))
        for sat, sun in (
            ("2026-11-07", "2026-11-08"),
            ("2026-11-14", "2026-11-15"),
            ("2026-11-21", "2026-11-22"),
        )
    ]
    p = predict_return(history + weekends, at("2026-11-28", "17:10"))
    assert p is not None and p.at == at("2026-11-29", "14:00")


def test_lunch_and_evening_pauses_are_told_apart():
    history = evenings(WORKDAYS[:10]) + [
        Return(at(day, "12:15"), at(day, "13:05")) for day in WORKDAYS[:10]
    ]
    lunch = predict_return(history, at("2026-11-17", "12:20"))
    assert lunch.at == at("2026-11-17", "13:05")  # the same day
    evening = predict_return(history, at("2026-11-17", "18:35"))
    assert evening.at == at("2026-11-18", "09:00")


def test_time_zones_keep_the_local_hour_across_daylight_saving():
    ny = ZoneInfo("America/New_York")  # DST ends on Sunday 2026-11-01
    october = [f"2026-10-{d:02d}" for d in range(12, 31) if datetime(2026, 10, d).weekday() < 5]
    history = evenings(october, tz=ny)  # back at 9:00 New York time (EDT, UTC-4)
    p = predict_return(history, at("2026-11-02", "18:30", ny), tz=ny)  # a Monday, now EST
    assert p is not None
    assert p.at == at("2026-11-03", "09:00", ny)
    assert datetime.fromtimestamp(p.at, UTC).hour == 14  # 9:00 EST is 14:00 UTC
    # read in UTC, the same history says 13:00 UTC (9:00 EDT)
    p_utc = predict_return(history, at("2026-11-02", "23:30"), tz=UTC)
    assert datetime.fromtimestamp(p_utc.at, UTC).hour == 13
    # the day boundary is the user's: 22:00 in Los Angeles is 06:00 UTC the next day
    la = ZoneInfo("America/Los_Angeles")
    late = evenings(WORKDAYS[:10], pause="22:00", back="08:00", tz=la)
    p = predict_return(late, at("2026-11-17", "22:10", la), tz=la)
    assert p.at == at("2026-11-18", "08:00", la)


def ev(type_, t, path="a.ipynb", user="ann", **data) -> LedgerEvent:
    return LedgerEvent(EventType(type_), t, path=path, user=user, data=data)


def test_returns_from_ledger_events():
    e = EventType
    events = [
        ev(e.PAUSE_REQUESTED, 100.0, auto=True),
        ev(e.ACCELERATOR_RELEASED, 110.0),
        ev(e.PAUSED, 111.0),
        # a predicted resume starts; it is not the user's return
        ev(e.SCHEDULED_RESUME_STARTED, 1000.0, kind="predicted"),
        ev(e.RESUME_REQUESTED, 1000.0, scheduled="predicted"),
        ev(e.FIRST_CELL_RUNNABLE, 1040.0),
        # unused: paused again; the original pause stays open
        ev(e.PREDICTED_RESUME_UNUSED, 2800.0, held_seconds=1800),
        ev(e.PAUSE_REQUESTED, 2800.0, reason="predicted-resume-unused"),
        ev(e.ACCELERATOR_RELEASED, 2810.0),
        ev(e.PAUSED, 2811.0),
        # the user runs a cell in a fresh kernel (started 3000, finished 3005)
        ev(e.CELL_EXECUTED, 3005.0, duration=5.0),
        # second pause, manual resume
        ev(e.PAUSE_REQUESTED, 4000.0),
        ev(e.PAUSED, 4010.0),
        ev(e.RESUME_REQUESTED, 5000.0),
        ev(e.FIRST_CELL_RUNNABLE, 5030.0),
        ev(e.CELL_EXECUTED, 5100.0, duration=1.0, first_after_resume=True),
        # another notebook of another user
        ev(e.PAUSED, 200.0, path="b.ipynb", user="bob"),
        ev(e.CELL_EXECUTED, 900.0, path="b.ipynb", user="bob", duration=0),
        # a pause never returned from is no sample
        ev(e.PAUSED, 6000.0),
    ]
    assert returns_from_events(events) == {
        "a.ipynb": [Return(110.0, 3000.0), Return(4010.0, 5000.0)],
        "b.ipynb": [Return(200.0, 900.0)],
    }
    assert returns_by_user(reversed(events)) == {
        "ann": [Return(110.0, 3000.0), Return(4010.0, 5000.0)],
        "bob": [Return(200.0, 900.0)],
    }
    # latency: 40 (predicted) and 30 (manual); a failed resume is not a latency
    failed = [
        ev(e.RESUME_REQUESTED, 7000.0),
        ev(e.OPERATION_FAILED, 7010.0, operation="resume"),
        ev(e.RESUME_REQUESTED, 7100.0),
        ev(e.FIRST_CELL_RUNNABLE, 7150.0),
    ]
    assert measured_resume_latency(events) == pytest.approx(35.0)
    assert measured_resume_latency(events + failed) == pytest.approx(40.0)
    assert measured_resume_latency([]) is None


def test_prediction_from_a_replayed_ledger():
    events = []
    for i, day in enumerate(WORKDAYS[:6]):
        events += [
            ev(EventType.PAUSE_REQUESTED, at(day, "18:00"), auto=True),
            ev(EventType.PAUSED, at(day, "18:01")),
            ev(EventType.RESUME_REQUESTED, at(WORKDAYS[i + 1], "08:58")),
            ev(EventType.FIRST_CELL_RUNNABLE, at(WORKDAYS[i + 1], "08:59")),
        ]
    history = returns_from_events(events)["a.ipynb"]
    assert len(history) == 6
    p = predict_return(history, at("2026-11-10", "18:05"))
    assert isinstance(p, Prediction)
    assert p.at == at("2026-11-11", "08:58")
    assert measured_resume_latency(events) == pytest.approx(60.0)


def test_without_a_time_zone_the_machine_local_time_is_used(monkeypatch):
    import time

    ny = ZoneInfo("America/New_York")
    october = [f"2026-10-{d:02d}" for d in range(12, 31) if datetime(2026, 10, d).weekday() < 5]
    history = evenings(october, tz=ny)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        p = predict_return(history, at("2026-11-02", "18:30", ny))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert p is not None and p.at == at("2026-11-03", "09:00", ny)  # 9:00 EST, after the change
