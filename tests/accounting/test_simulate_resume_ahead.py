"""The simulator's resume policies (scheduled, predicted) on cases with known answers.

The traces start on the synthetic Monday (2025-01-06, UTC): Monday 9:00 is
``9 * H``, Tuesday 9:00 is ``D + 9 * H``.
"""

from __future__ import annotations

import json

import pytest

from jupyter_pause.prediction import Return
from jupyter_pause.simulator.simulate import (
    Costs,
    ResumePolicy,
    parse_policies,
    returns_from_trace,
    simulate,
    simulate_threshold,
)
from jupyter_pause.simulator.traces import SYNTHETIC_START, Trace, TraceSession

H, M, D = 3600.0, 60.0, 86400.0
T0 = SYNTHETIC_START
RESTORE_2MIN = Costs(state_gb=0, pause_overhead_s=0, resume_overhead_s=2 * M)
SCHEDULED = ResumePolicy("scheduled", schedule_at=8.75 * H)
PREDICTED = ResumePolicy("predicted", min_confidence=0.7, margin_s=5 * M)


def two_days(tuesday_back: float = 9 * H, sid: str = "a") -> TraceSession:
    """Active Monday 9-17 and Tuesday from ``tuesday_back`` to 17; the session ends Tuesday 24:00."""
    return TraceSession(
        sid,
        sid,
        T0 + 9 * H,
        T0 + 2 * D,
        [(T0 + 9 * H, T0 + 17 * H), (T0 + D + tuesday_back, T0 + D + 17 * H)],
    )


def back_at_nine(sid: str = "a", paused: float = 17.5 * H) -> dict[str, list[Return]]:
    """The week before: four evenings paused at ``paused``, back at 9:00 the next day."""
    week = T0 - 7 * D
    return {sid: [Return(week + d * D + paused, week + (d + 1) * D + 9 * H) for d in range(4)]}


def run(trace_sessions, policy=None, prior=None, costs=RESTORE_2MIN, **kw):
    trace = Trace(trace_sessions, T0, T0 + 2 * D)
    return simulate_threshold(trace, 30 * M, costs=costs, policy=policy, prior=prior, **kw)


def test_no_policy_waits_for_the_restore():
    r = run([two_days()])
    # paused Monday 17:30, released until the user asks at 9:00; 17:30-24:00 Tuesday
    assert r.released_h == pytest.approx(15.5 + 6.5)
    assert r.wait_h == pytest.approx(2 / 60)
    assert (r.ahead_resumes, r.hits, r.extra_held_h, r.policy) == (0, 0, 0, "none")


def test_a_scheduled_resume_is_ready_when_the_user_comes():
    r = run([two_days()], SCHEDULED)
    # resumed at 8:45 (ready 8:47), the user comes at 9:00 and waits for nothing
    assert (r.ahead_resumes, r.hits, r.late, r.came_first, r.unused) == (1, 1, 0, 0, 0)
    assert r.wait_h == 0 and r.resumes == 1
    assert r.extra_held_h == pytest.approx(0.25)  # 8:45 -> 9:00
    assert r.released_h == pytest.approx(15.25 + 6.5)
    assert r.policy == "scheduled@08:45"


def test_a_lunch_break_is_not_scheduled():
    s = TraceSession("a", "a", 9 * H, 24 * H, [(9 * H, 12 * H), (13 * H, 17 * H)])
    r = simulate_threshold(Trace([s], 0, 24 * H), 30 * M, costs=RESTORE_2MIN, policy=SCHEDULED)
    assert r.ahead_resumes == 0 and r.wait_h == pytest.approx(2 / 60)


def test_a_confident_prediction_resumes_ahead_by_latency_and_margin():
    r = run([two_days()], PREDICTED, back_at_nine())
    # predicted 9:00 (4 samples, confidence 0.8): start 9:00 - 2 min - 5 min = 8:53
    assert (r.ahead_resumes, r.hits, r.no_prediction) == (1, 1, 0)
    assert r.wait_h == 0
    assert r.extra_held_h == pytest.approx(7 / 60)
    assert r.released_h == pytest.approx(15.5 - 7 / 60 + 6.5)
    # not confident enough: no resume ahead, the user waits
    r = run([two_days()], ResumePolicy("predicted", min_confidence=0.9), back_at_nine())
    assert (r.ahead_resumes, r.no_prediction) == (0, 1)
    assert r.wait_h == pytest.approx(2 / 60)
    # no history, no prediction
    r = run([two_days()], PREDICTED)
    assert (r.ahead_resumes, r.no_prediction) == (0, 1)


def test_an_unused_predicted_resume_is_paused_again():
    r = run([two_days(tuesday_back=10 * H)], PREDICTED, back_at_nine())
    # ready 8:55; nobody by 9:25 (the 30 min window): paused again; the user comes at
    # 10:00 and waits for a normal resume
    assert (r.ahead_resumes, r.hits, r.unused) == (1, 0, 1)
    assert r.extra_held_h == pytest.approx(32 / 60)  # 8:53 -> 9:25
    assert r.wait_h == pytest.approx(2 / 60)
    assert r.released_h == pytest.approx((15.5 - 7 / 60) + 35 / 60 + 6.5)


def test_the_window_never_exceeds_the_idle_threshold():
    policy = ResumePolicy("predicted", unused_after_s=2 * H, margin_s=5 * M)
    assert policy.unused_window(30 * M) == 30 * M
    assert policy.unused_window(None) == 2 * H
    assert ResumePolicy("scheduled").unused_window(30 * M) == 30 * M


def test_the_user_who_comes_first_cancels_it():
    r = run([two_days(tuesday_back=8 * H)], PREDICTED, back_at_nine())
    assert (r.ahead_resumes, r.came_first, r.hits) == (0, 1, 0)
    assert r.wait_h == pytest.approx(2 / 60) and r.extra_held_h == 0


def test_the_user_who_comes_while_it_restores_waits_less():
    costs = Costs(state_gb=0, pause_overhead_s=0, resume_overhead_s=10 * M)
    policy = ResumePolicy("predicted", margin_s=0)
    r = run([two_days(tuesday_back=8 * H + 55 * M)], policy, back_at_nine(), costs=costs)
    # started 8:50 (9:00 - 10 min), the user comes 8:55, ready 9:00: 5 of 10 minutes waited
    assert (r.ahead_resumes, r.late, r.hits) == (1, 1, 0)
    assert r.wait_h == pytest.approx(5 / 60)
    assert r.extra_held_h == pytest.approx(5 / 60)


def crowded_morning() -> list[TraceSession]:
    """A pool of one; both users come back Tuesday 9:00 for 20 minutes.

    b works Monday 8-9 (paused 9:30) and a 10-11 (paused 11:30), so b's return is
    queued first when both come back at once.
    """
    a = TraceSession(
        "a",
        "a",
        T0 + 10 * H,
        T0 + D + 12 * H,
        [(T0 + 10 * H, T0 + 11 * H), (T0 + D + 9 * H, T0 + D + 9 * H + 20 * M)],
    )
    b = TraceSession(
        "b",
        "b",
        T0 + 8 * H,
        T0 + D + 12 * H,
        [(T0 + 8 * H, T0 + 9 * H), (T0 + D + 9 * H, T0 + D + 9 * H + 20 * M)],
    )
    return [a, b]


def test_a_predicted_resume_that_starts_earlier_gets_capacity_first():
    costs = Costs(state_gb=0, pause_overhead_s=0, resume_overhead_s=10 * M)
    none = run(crowded_morning(), costs=costs, pool=1)
    # b first: ready 9:10, idle from 9:20, paused 9:50; a gets it then, ready 10:00
    assert none.wait_h == pytest.approx((10 + 60) / 60)
    assert none.queued_resumes == 1
    prior = back_at_nine("a", paused=11.5 * H)
    ahead = run(crowded_morning(), PREDICTED, prior, costs=costs, pool=1)
    # a resumes at 8:45 (9:00 - 10 min - 5 min), ready 8:55; b waits for a's pause at 9:50
    assert (ahead.ahead_resumes, ahead.hits) == (1, 1)
    assert ahead.wait_h == pytest.approx(60 / 60)
    assert ahead.extra_held_h == pytest.approx(15 / 60)


def test_simulate_compares_policies_against_none():
    trace = Trace([two_days()], T0, T0 + 2 * D)
    prior_trace = Trace(
        [
            TraceSession(
                "a",
                "a",
                T0 - 7 * D,
                T0,
                [(T0 - 7 * D + d * D + 9 * H, T0 - 7 * D + d * D + 17 * H) for d in range(5)],
            )
        ],
        T0 - 7 * D,
        T0,
        source="last week",
    )
    assert len(returns_from_trace(prior_trace, 30 * M)["a"]) == 4
    assert returns_from_trace(prior_trace, None) == {}
    sim = simulate(
        trace,
        [30 * M, None],
        costs=RESTORE_2MIN,
        policies=parse_policies("none,scheduled,predicted"),
        prior=prior_trace,
    )
    rows = {(r.label, r.policy): r for r in sim.policy_results}
    assert set(rows) == {
        (t, p) for t in ("30min", "never") for p in ("none", "scheduled@08:45", "predicted:0.7")
    }
    assert rows["30min", "scheduled@08:45"].wait_avoided_min == pytest.approx(2)
    assert rows["30min", "predicted:0.7"].wait_avoided_min == pytest.approx(2)
    assert rows["never", "predicted:0.7"].wait_avoided_min == 0
    assert [r.policy for r in sim.results] == ["none", "none"]  # the recommendation's rows
    data = sim.to_json()
    assert data["resume_policies"]["prior_history"] == "last week"
    assert len(data["resume_policies"]["results"]) == 6
    text = sim.to_text()
    assert "Resuming ahead of the user" in text and "predicted:0.7" in text
    assert "data-table='resume-policies'" in sim.to_html()
    assert sim.to_csv().count("\n") == 7
    # without policies nothing changes
    plain = simulate(trace, [30 * M], costs=RESTORE_2MIN)
    assert plain.policy_results == [] and "resume_policies" not in plain.to_json()
    assert "Resuming ahead" not in plain.to_text()


def test_parse_policies():
    ps = parse_policies("none, scheduled@07:30, predicted, predicted:0.5", margin_s=60)
    assert [p.label for p in ps] == ["none", "scheduled@07:30", "predicted:0.7", "predicted:0.5"]
    assert ps[1].schedule_at == 7.5 * H and ps[2].margin_s == 60
    for bad in ("sometimes", "predicted:2", "scheduled@25:00", "scheduled@soon"):
        with pytest.raises(ValueError):
            parse_policies(bad)


def test_simulate_command_with_resume_policies(capsys):
    from .test_accounting_commands import run as run_command

    argv = ["--users", "4", "--thresholds", "30m", "--resume-policy", "none,scheduled,predicted"]
    rc, out = run_command("simulate", [*argv, "--format", "json"], capsys)
    assert rc == 0
    block = json.loads(out)["resume_policies"]
    assert block["prior_history"].startswith("synthetic(users=4, days=21")
    rows = {r["policy"]: r for r in block["results"]}
    assert set(rows) == {"none", "scheduled@08:45", "predicted:0.7"}
    # the crowd comes back at 9:00 sharp every day: the predictor resumes ahead of it
    assert rows["predicted:0.7"]["hits"] > 0
    assert rows["predicted:0.7"]["wait_avoided_min"] > 0
    assert rows["scheduled@08:45"]["ahead_resumes"] > 0
    rc, out = run_command("simulate", [*argv, "--tz", "Europe/Paris"], capsys)
    assert rc == 0 and "time zone Europe/Paris" in out
    rc, _ = run_command("simulate", [*argv, "--tz", "Mars/Olympus"], capsys)
    assert rc == 2
    rc, _ = run_command("simulate", ["--resume-policy", "psychic"], capsys)
    assert rc == 2


def test_simulate_command_learns_from_the_ledger_before_the_period(tmp_path, capsys):
    from jupyter_pause.ledger import EventType, Ledger

    from .test_accounting_commands import run as run_command

    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path, user="ann")
    for day in range(26):  # four weeks of workdays, 9:00-12:00 and 13:00-17:00
        if day % 7 >= 5:
            continue
        for start, end in ((9, 12), (13, 17)):
            t = T0 + day * D + end * H
            ledger.record(
                EventType.CELL_EXECUTED, path="n.ipynb", time_=t, duration=(end - start) * H
            )
    ledger.close()
    since = str(T0 + 21 * D)  # the fourth week; the first three are the predictor's history
    argv = ["--ledger", str(path), "--since", since, "--until", str(T0 + 26 * D)]
    argv += ["--thresholds", "30m", "--resume-policy", "none,predicted", "--format", "json"]
    rc, out = run_command("simulate", argv, capsys)
    assert rc == 0
    block = json.loads(out)["resume_policies"]
    assert block["prior_history"] == "ledger"
    rows = {r["policy"]: r for r in block["results"]}
    predicted = rows["predicted:0.7"]
    # five lunches and four evenings (Monday to Thursday): back at 13:00 and 9:00 sharp
    assert predicted["hits"] == predicted["ahead_resumes"] == 9
    assert predicted["wait_avoided_min"] > 0
    assert predicted["came_first"] == predicted["unused"] == 0
