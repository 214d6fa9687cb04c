"""The report's scheduled and predicted resumes: outcomes, hours waiting for users, waiting saved."""

from __future__ import annotations

import pytest

from jupyter_pause.ledger import EventType, Ledger, LedgerEvent
from jupyter_pause.report.build import build_report
from jupyter_pause.report.html import render_html

E = EventType
SINCE, UNTIL = 1000.0, 20000.0


def ev(type_, t, path, user="ann", **data) -> LedgerEvent:
    return LedgerEvent(type_, t, path=path, user=user, data=data)


def started(path, t, kind="predicted", **kw) -> list[LedgerEvent]:
    return [
        ev(E.SCHEDULED_RESUME_STARTED, t, path, at=t, kind=kind, **kw),
        ev(E.RESUME_REQUESTED, t, path, scheduled=kind),
    ]


def paused(path, t, **kw) -> list[LedgerEvent]:
    return [
        ev(E.PAUSE_REQUESTED, t, path, auto=True, **kw),
        ev(E.ACCELERATOR_RELEASED, t + 5, path),
        ev(E.PAUSED, t + 6, path),
    ]


def ledger_events() -> list[LedgerEvent]:
    events = []
    # a.ipynb (2 GPUs): predicted, ready at 5040, the user's first cell starts 5390: a hit
    events += [ev(E.KERNEL_STARTED, 1100.0, "a.ipynb", gpus=2), *paused("a.ipynb", 1200.0)]
    events += [
        ev(E.RESUME_SCHEDULED, 1300.0, "a.ipynb", at=5000.0, kind="predicted", confidence=0.8),
        *started("a.ipynb", 5000.0),
        ev(E.WAITING_FOR_CAPACITY, 5000.0, "a.ipynb"),
        ev(E.CAPACITY_ACQUIRED, 5010.0, "a.ipynb"),
        ev(E.KERNEL_STARTED, 5010.0, "a.ipynb"),
        ev(E.FIRST_CELL_RUNNABLE, 5040.0, "a.ipynb"),
        ev(E.CELL_EXECUTED, 5400.0, "a.ipynb", duration=10.0, first_after_resume=True),
        ev(E.CELL_EXECUTED, 5500.0, "a.ipynb", duration=10.0),
    ]
    # b.ipynb: predicted, ready 5060, unused: paused again at 6860, released 6865
    events += [*paused("b.ipynb", 1200.0)]
    events += [
        ev(E.RESUME_SCHEDULED, 1300.0, "b.ipynb", at=5000.0, kind="predicted", confidence=0.75),
        *started("b.ipynb", 5000.0),
        ev(E.FIRST_CELL_RUNNABLE, 5060.0, "b.ipynb"),
        ev(E.PREDICTED_RESUME_UNUSED, 6860.0, "b.ipynb", held_seconds=1800),
        *paused("b.ipynb", 6860.0, reason="predicted-resume-unused"),
        # the user's later manual resume is an ordinary one
        ev(E.RESUME_REQUESTED, 9000.0, "b.ipynb"),
        ev(E.FIRST_CELL_RUNNABLE, 9030.0, "b.ipynb"),
        ev(E.CELL_EXECUTED, 9100.0, "b.ipynb", duration=1.0, first_after_resume=True),
    ]
    # c.ipynb: scheduled at 5000; the user asks at 5020 while it restores; ready 5050: late
    events += [*paused("c.ipynb", 1200.0)]
    events += [
        ev(E.RESUME_SCHEDULED, 1300.0, "c.ipynb", at=5000.0, kind="scheduled", by="magic"),
        *started("c.ipynb", 5000.0, kind="scheduled"),
        ev(E.RESUME_REQUESTED, 5020.0, "c.ipynb"),
        ev(E.FIRST_CELL_RUNNABLE, 5050.0, "c.ipynb"),
        ev(E.CELL_EXECUTED, 5060.0, "c.ipynb", duration=1.0, first_after_resume=True),
    ]
    # d.ipynb: the user resumed by hand before the schedule; then another was cancelled
    events += [*paused("d.ipynb", 1200.0)]
    events += [
        ev(E.RESUME_SCHEDULED, 1300.0, "d.ipynb", at=8000.0, kind="scheduled"),
        ev(
            E.RESUME_SCHEDULE_CANCELLED,
            3000.0,
            "d.ipynb",
            kind="scheduled",
            reason="resumed by hand",
        ),
        ev(E.RESUME_REQUESTED, 3000.0, "d.ipynb"),
        ev(E.FIRST_CELL_RUNNABLE, 3030.0, "d.ipynb"),
        *paused("d.ipynb", 3500.0),
        ev(E.RESUME_SCHEDULED, 3510.0, "d.ipynb", at=8000.0, kind="predicted"),
        ev(
            E.RESUME_SCHEDULE_CANCELLED,
            3600.0,
            "d.ipynb",
            kind="predicted",
            reason="the notebook runs again in a new kernel",
        ),
        ev(E.CELL_EXECUTED, 3601.0, "d.ipynb", duration=1.0),
        ev(E.RESUME_SCHEDULED, 4000.0, "d.ipynb", at=9000.0, kind="scheduled"),
        ev(E.RESUME_SCHEDULE_CANCELLED, 4100.0, "d.ipynb", kind="scheduled", reason="cancelled"),
    ]
    # e.ipynb: a predicted resume that failed
    events += [*paused("e.ipynb", 1200.0)]
    events += [
        *started("e.ipynb", 5000.0),
        ev(E.OPERATION_FAILED, 5010.0, "e.ipynb", operation="resume", error="no capacity"),
    ]
    # f.ipynb: ready at 19030, the user not back by the period's end (20000)
    events += [*paused("f.ipynb", 1200.0)]
    events += [*started("f.ipynb", 19000.0), ev(E.FIRST_CELL_RUNNABLE, 19030.0, "f.ipynb")]
    # g.ipynb: a hit before the period: not counted
    events += [
        *started("g.ipynb", 500.0),
        ev(E.FIRST_CELL_RUNNABLE, 530.0, "g.ipynb"),
        ev(E.CELL_EXECUTED, 600.0, "g.ipynb", duration=0.0),
    ]
    return events


def test_outcomes_waiting_and_savings():
    data = build_report(ledger_events(), since=SINCE, until=UNTIL).to_json()["resume_ahead"]
    by_path = {r["path"]: r for r in data["resumes"]}
    assert {p: r["outcome"] for p, r in by_path.items()} == {
        "a.ipynb": "hit",
        "b.ipynb": "unused",
        "c.ipynb": "late",
        "e.ipynb": "failed",
        "f.ipynb": "waiting",
    }
    a, b, c, f = (by_path[p] for p in ("a.ipynb", "b.ipynb", "c.ipynb", "f.ipynb"))
    assert (a["latency_s"], a["user_came"], a["waiting_for_user_s"], a["saved_s"]) == (
        40.0,
        5390.0,
        350.0,
        40.0,
    )
    assert a["gpus"] == 2
    assert (b["waiting_for_user_s"], b["saved_s"], b["paused_again"]) == (1805.0, 0.0, 6860.0)
    assert (c["waiting_for_user_s"], c["saved_s"]) == (0.0, 20.0)
    assert f["waiting_for_user_s"] == pytest.approx(UNTIL - 19030.0)

    pred, sched, total = data["kinds"]["predicted"], data["kinds"]["scheduled"], data["total"]
    counted = ("scheduled", "started", "hits", "unused", "failed", "pending", "came_first")
    assert {k: pred[k] for k in counted} == {
        "came_first": 1,  # d.ipynb: the user ran a cell in a new kernel first
        "scheduled": 3,
        "started": 4,
        "hits": 1,
        "unused": 1,
        "failed": 1,
        "pending": 1,
    }
    # a: 350 s x 2 GPUs; b: 1805 s; f: 970 s
    assert pred["waiting_for_users_h"] == pytest.approx((700 + 1805 + 970) / 3600)
    assert pred["user_waiting_saved_min"] == pytest.approx(40 / 60)
    assert {k: sched[k] for k in ("scheduled", "started", "late", "came_first", "cancelled")} == {
        "scheduled": 3,
        "started": 1,
        "late": 1,
        "came_first": 1,
        "cancelled": 1,
    }
    assert sched["user_waiting_saved_min"] == pytest.approx(20 / 60)
    assert total["started"] == 5 and total["user_waiting_saved_min"] == pytest.approx(1.0)


def test_a_resume_ahead_does_not_change_the_ordinary_numbers():
    report = build_report(ledger_events(), since=SINCE, until=UNTIL).to_json()
    a = next(g for g in report["by_notebook"] if g["key"] == "a.ipynb")
    assert a["pauses"]["resumes"] == 1
    assert a["resume_latency_s"]["median"] == pytest.approx(40.0)


def test_text_and_page_show_the_section_only_when_there_is_something(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite3", user="ann")
    for e in ledger_events():
        ledger.record(e.type, path=e.path, time_=e.time, **e.data)
    report = build_report(ledger, since=SINCE, until=UNTIL)
    text = report.to_text()
    assert "Resumes ahead of the user" in text
    assert "predicted  unused" in text
    page = render_html(report)
    assert "data-table='resume-ahead'" in page and "id='resume-ahead'" in page
    plain = build_report([ev(E.KERNEL_STARTED, 1100.0, "x.ipynb")], since=SINCE, until=UNTIL)
    assert "Resumes ahead" not in plain.to_text()
    assert "resume-ahead" not in render_html(plain)
    assert plain.to_json()["resume_ahead"]["total"]["started"] == 0
