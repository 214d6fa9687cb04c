"""The idle-threshold simulator on cases with known answers."""

from __future__ import annotations

import io

import pytest

from jupyter_pause.ledger import EventType, LedgerEvent
from jupyter_pause.simulator.simulate import (
    Costs,
    format_threshold,
    parse_distribution,
    parse_thresholds,
    simulate,
    simulate_threshold,
)
from jupyter_pause.simulator.traces import (
    SYNTHETIC_START,
    Trace,
    TraceSession,
    from_ledger,
    read_csv,
    synthetic,
)

H, M = 3600.0, 60.0
FREE = Costs(state_gb=0, pause_overhead_s=0, resume_overhead_s=0)


def one_user(**kw) -> Trace:
    """Active 9-12 and 13-17; the session lasts 9:00-24:00."""
    s = TraceSession("a", "alice", 9 * H, 24 * H, [(9 * H, 12 * H), (13 * H, 17 * H)], **kw)
    return Trace([s], 0, 24 * H)


@pytest.mark.parametrize(
    "threshold, released, pauses, short",
    [
        (30 * M, 0.5 + 6.5, 2, 1),  # lunch (paused 12:30-13:00) and evening (17:30-24:00)
        (2 * H, 5.0, 1, 0),  # the 1 h lunch is shorter than the threshold
        (8 * H, 0.0, 0, 0),  # the 7 h evening is too
        (None, 0.0, 0, 0),
    ],
)
def test_single_user_fixed_pattern(threshold, released, pauses, short):
    r = simulate_threshold(one_user(), threshold, costs=FREE)
    assert r.released_h == pytest.approx(released)
    assert r.allocated_h == pytest.approx(15.0 - released)
    assert r.always_on_h == pytest.approx(15.0)
    assert r.active_h == pytest.approx(7.0)
    assert r.pauses == pauses
    assert r.short_breaks_paused == short
    assert r.wait_h == 0
    assert r.interruptions == 0


def test_single_user_costs_and_interruptions():
    costs = Costs(state_gb=0, pause_overhead_s=60, resume_overhead_s=120)
    r = simulate_threshold(one_user(), 30 * M, costs=costs)
    # lunch: pause 12:30, released 12:31, back 13:00, runnable 13:02; evening: released 17:31
    assert r.released_h == pytest.approx((29 + 6 * 60 + 29) / 60)
    assert r.resumes == 1
    assert r.wait_h == pytest.approx(2 / 60)
    assert r.wait_max_s == pytest.approx(120)
    # a 50 min threshold pauses lunch 10 minutes before the user returns: an interruption
    r = simulate_threshold(one_user(), 50 * M, costs=FREE)
    assert r.interruptions == 1 and r.short_breaks_paused == 1
    r = simulate_threshold(one_user(), 50 * M, costs=FREE, interruption_minutes=5)
    assert r.interruptions == 0


def test_gpus_scale_hours():
    r = simulate_threshold(one_user(gpus=4), 30 * M, costs=FREE)
    assert r.released_h == pytest.approx(4 * 7.0)
    assert r.always_on_h == pytest.approx(4 * 15.0)


def crowd(n: int = 4) -> Trace:
    """Two users work 0-1 h, two 2-3 h; all four come back at 10 h; the day ends at 12 h."""
    sessions = []
    for i in range(n):
        first = (0.0, 1 * H) if i < 2 else (2 * H, 3 * H)
        sessions.append(TraceSession(f"s{i}", f"u{i}", first[0], 12 * H, [first, (10 * H, 11 * H)]))
    return Trace(sessions, 0, 12 * H)


def test_pool_smaller_than_returning_crowd():
    costs = Costs(state_gb=0, pause_overhead_s=0, resume_overhead_s=10 * M)
    r = simulate_threshold(crowd(), 30 * M, pool=2, costs=costs)
    # u0, u1 get the pool at 10:00 (ready 10:10), pause at 11:30; u2, u3 wait until then
    # (ready 11:40): waits 10 + 10 + 100 + 100 minutes
    assert r.resumes == 4
    assert r.wait_h == pytest.approx(220 / 60)
    assert r.wait_max_s == pytest.approx(100 * M)
    assert r.queued_resumes == 2
    assert r.queue_wait_h == pytest.approx(2 * 1.5)
    assert r.max_queue == 2
    assert r.peak_in_use == 2
    assert r.start_wait_h == 0
    assert r.unserved == 0
    # an unlimited pool: everyone waits only for the restore
    r = simulate_threshold(crowd(), 30 * M, pool=None, costs=costs)
    assert r.wait_h == pytest.approx(40 / 60)
    assert r.queued_resumes == 0 and r.max_queue == 0
    assert r.peak_in_use == 4


def test_never_pausing_with_a_small_pool_starves_starts():
    r = simulate_threshold(crowd(), None, pool=2, costs=FREE)
    # u0, u1 hold both accelerators all day; u2, u3 wait from 2 h to the end (12 h)
    assert r.start_wait_h == pytest.approx(2 * 10.0)
    assert r.unserved == 2
    assert r.allocated_h == pytest.approx(2 * 12.0)


def test_recommendation_under_waiting_budget():
    costs = Costs(state_gb=0, pause_overhead_s=60, resume_overhead_s=120)
    thresholds = parse_thresholds("30m,2h,never")
    # 30m waits 2 min in one user-day: over a 1 min budget; 2h never resumes (evening only)
    sim = simulate(one_user(), thresholds, costs=costs, wait_budget_min=1)
    assert sim.recommended.label == "2h"
    assert [r.within_budget for r in sim.results] == [False, True, True]
    sim = simulate(one_user(), thresholds, costs=costs, wait_budget_min=5)
    assert sim.recommended.label == "30min"
    data = sim.to_json()
    assert data["recommended"] == "30min"
    assert "Recommended idle threshold: 30min" in sim.to_text()
    svg = sim.to_svg()
    assert svg.count('data-chart="sim-') == 2
    assert "<table>" in sim.to_html()


def test_synthetic_trace_is_deterministic_and_workday_shaped():
    a, b = synthetic(users=6, seed=3), synthetic(users=6, seed=3)
    assert [s.active for s in a.sessions] == [s.active for s in b.sessions]
    assert [s.active for s in a.sessions] != [s.active for s in synthetic(users=6, seed=4).sessions]
    assert a.end - a.start == 7 * 24 * H
    for s in a.sessions:
        hours = s.active_seconds / H
        assert 20 < hours < 45  # five workdays of focus blocks
        for x, _y in s.active:
            day = int((x - SYNTHETIC_START) // (24 * H))
            assert day < 5  # nothing at the weekend
            clock = (x - SYNTHETIC_START) % (24 * H) / H
            assert 8 <= clock <= 18.5
    # the crowd: half of the users start work at 9:00 (+2 min) every workday
    for s in a.sessions[:3]:
        days = {}
        for x, _ in s.active:
            days.setdefault(int((x - SYNTHETIC_START) // (24 * H)), x)
        assert sorted(days) == [0, 1, 2, 3, 4]
        for d, first in days.items():
            assert 9 * H <= first - SYNTHETIC_START - d * 24 * H <= 9 * H + 2 * M


def test_csv_round_trip_and_ledger_trace():
    trace = synthetic(users=2, days=2)
    back = read_csv(io.StringIO(trace.to_csv()))
    assert len(back.sessions) == 2
    for x, y in zip(trace.sessions, back.sessions, strict=True):
        assert y.start == pytest.approx(x.start, abs=1e-3)
        assert [tuple(round(v, 3) for v in iv) for iv in y.active] == [
            tuple(round(v, 3) for v in iv) for iv in x.active
        ]
    plain = read_csv(io.StringIO("session,start,end\nn1,0,3600\nn1,7200,9000\nn2,100,200\n"))
    assert {s.id: (s.start, s.end) for s in plain.sessions} == {"n1": (0, 9000), "n2": (100, 9000)}
    with pytest.raises(ValueError):
        read_csv(io.StringIO("session,start\nx,1\n"))

    events = [
        LedgerEvent(EventType.KERNEL_STARTED, 0.0, path="n.ipynb", user="u", data={"gpus": 2}),
        LedgerEvent(
            EventType.CELL_EXECUTED, 600.0, path="n.ipynb", user="u", data={"duration": 600}
        ),
        LedgerEvent(
            EventType.CELL_EXECUTED, 4000.0, path="n.ipynb", user="u", data={"duration": 400}
        ),
    ]
    t = from_ledger(events, until=7200.0)
    (s,) = t.sessions
    assert (s.start, s.end, s.gpus, s.active) == (0.0, 7200.0, 2, [(0.0, 600.0), (3600.0, 4000.0)])


def test_parsers():
    assert parse_thresholds("10m, 1h,90s,never") == [600, 3600, 90, None]
    assert parse_distribution("0:0.8,60:0.2") == [(0, 0.8), (60, 0.2)]
    assert format_threshold(1800) == "30min" and format_threshold(None) == "never"
    with pytest.raises(ValueError):
        parse_thresholds("soon")
