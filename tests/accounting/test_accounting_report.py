"""Reports computed from a constructed ledger with known answers."""

from __future__ import annotations

import csv
import io
import json

import pytest

from jupyter_pause.ledger import EventType as E
from jupyter_pause.ledger import Ledger, LedgerEvent
from jupyter_pause.report.build import build_report, merge_intervals, parse_time, quantile

H = 3600.0
DAY1 = 1736121600.0  # 2025-01-06 00:00 UTC, a Monday
DAY2 = DAY1 + 24 * H


def at(day: float, h: float, m: float = 0, s: float = 0) -> float:
    return day + h * H + m * 60 + s


def ev(t, type_, path, user="", wc="", **data):
    return LedgerEvent(type=type_, time=t, path=path, user=user, workload_class=wc, data=data)


def alice_events():
    """Notebook A: one GPU; an auto-pause at lunch undone after 5 min; a night pause."""
    p, u, wc = "a.ipynb", "alice", "gpu"
    return [
        ev(at(DAY1, 9), E.KERNEL_STARTED, p, u, wc, gpus=1),
        ev(at(DAY1, 10), E.CELL_EXECUTED, p, u, wc, duration=H),  # 9:00-10:00
        ev(at(DAY1, 12), E.CELL_EXECUTED, p, u, wc, duration=0.5 * H),  # 11:30-12:00
        ev(at(DAY1, 12, 30), E.PAUSE_REQUESTED, p, u, wc, auto=True, reason="idle"),
        ev(at(DAY1, 12, 30, 20), E.CHECKPOINT_FINISHED, p, u, wc, bytes=2_000_000_000),
        ev(at(DAY1, 12, 30, 30), E.KERNEL_STOPPED, p, u, wc),
        ev(at(DAY1, 12, 30, 30), E.ACCELERATOR_RELEASED, p, u, wc, gpus=1),
        ev(at(DAY1, 12, 30, 30), E.PAUSED, p, u, wc),
        ev(at(DAY1, 12, 35), E.RESUME_REQUESTED, p, u, wc),
        ev(at(DAY1, 12, 35, 10), E.KERNEL_STARTED, p, u, wc),
        ev(at(DAY1, 12, 35, 30), E.RESTORE_FINISHED, p, u, wc, restored_from="checkpoint"),
        ev(at(DAY1, 12, 35, 40), E.FIRST_CELL_RUNNABLE, p, u, wc),
        ev(at(DAY1, 14), E.CELL_EXECUTED, p, u, wc, duration=H),  # 13:00-14:00
        ev(at(DAY1, 17), E.PAUSE_REQUESTED, p, u, wc, auto=False),
        ev(at(DAY1, 17, 1), E.ACCELERATOR_RELEASED, p, u, wc, gpus=1),
        ev(at(DAY2, 9), E.RESUME_REQUESTED, p, u, wc),
        ev(at(DAY2, 9, 0, 10), E.WAITING_FOR_CAPACITY, p, u, wc, reason="no T4"),
        ev(at(DAY2, 9, 2, 10), E.CAPACITY_ACQUIRED, p, u, wc),
        ev(at(DAY2, 9, 2, 20), E.KERNEL_STARTED, p, u, wc),
        ev(at(DAY2, 9, 2, 40), E.RESTORE_FINISHED, p, u, wc, restored_from="snapshot"),
        ev(at(DAY2, 9, 3, 20), E.FIRST_CELL_RUNNABLE, p, u, wc),
    ]


def bob_events():
    """Notebook B: two GPUs; a snapshot; a failed resume, a retry; then a plain shutdown."""
    p, u, wc = "b.ipynb", "bob", "training"
    return [
        ev(at(DAY1, 10), E.KERNEL_STARTED, p, u, wc, gpus=2),
        ev(at(DAY1, 11), E.CELL_EXECUTED, p, u, wc, duration=600),
        ev(at(DAY1, 11), E.PAUSE_REQUESTED, p, u, wc, auto=True),
        ev(at(DAY1, 11, 1), E.SNAPSHOT_READY, p, u, wc, name="snap-1", bytes=5_000_000_000),
        ev(at(DAY1, 11, 2), E.ACCELERATOR_RELEASED, p, u, wc, gpus=2),
        ev(at(DAY1, 13), E.RESUME_REQUESTED, p, u, wc),
        ev(at(DAY1, 13, 0, 30), E.RESTORE_FAILED, p, u, wc, error="snapshot incompatible"),
        ev(at(DAY1, 13, 1), E.OPERATION_FAILED, p, u, wc, operation="resume", error="x"),
        ev(at(DAY1, 13, 5), E.RESUME_REQUESTED, p, u, wc),
        ev(at(DAY1, 13, 5, 20), E.KERNEL_STARTED, p, u, wc),
        ev(at(DAY1, 13, 5, 50), E.RESTORE_FINISHED, p, u, wc, restored_from="checkpoint"),
        ev(at(DAY1, 13, 6), E.FIRST_CELL_RUNNABLE, p, u, wc),
        ev(at(DAY1, 15), E.KERNEL_STOPPED, p, u, wc),
    ]


@pytest.fixture
def events():
    return alice_events() + bob_events()


def group(data, scope, key):
    return next(g for g in data[scope] if g["key"] == key)


def test_hours_known_answers(events):
    data = build_report(events, since=DAY1, until=at(DAY2, 12)).to_json()
    a = group(data, "by_notebook", "a.ipynb")["gpu_hours"]
    alloc_a = (
        (3.5 * H + 30)
        + (at(DAY1, 17, 1) - at(DAY1, 12, 35, 10))
        + (at(DAY2, 12) - at(DAY2, 9, 2, 10))
    )
    rel_a = (at(DAY1, 12, 35, 10) - at(DAY1, 12, 30, 30)) + (at(DAY2, 9, 2, 10) - at(DAY1, 17, 1))
    assert a["allocated"] == pytest.approx(alloc_a / H)
    assert a["released"] == pytest.approx(rel_a / H)
    assert a["active"] == pytest.approx(2.5)
    assert a["idle_allocated"] == pytest.approx(alloc_a / H - 2.5)
    assert a["always_on"] == pytest.approx(27.0)  # 9:00 day 1 -> 12:00 day 2
    assert a["allocated"] + a["released"] == pytest.approx(a["always_on"])

    b = group(data, "by_notebook", "b.ipynb")["gpu_hours"]
    alloc_b = 2 * ((at(DAY1, 11, 2) - at(DAY1, 10)) + (at(DAY1, 15) - at(DAY1, 13, 5, 20)))
    assert b["allocated"] == pytest.approx(alloc_b / H)
    assert b["released"] == pytest.approx(2 * (at(DAY1, 13, 5, 20) - at(DAY1, 11, 2)) / H)
    assert b["stopped"] == pytest.approx(2 * 21.0)  # plain shutdown is not "released"
    assert b["active"] == pytest.approx(2 * 600 / H)
    assert b["always_on"] == pytest.approx(2 * 26.0)

    tot = data["totals"]["gpu_hours"]
    assert tot["allocated"] == pytest.approx((alloc_a + alloc_b) / H)
    assert group(data, "by_user", "alice")["gpu_hours"]["allocated"] == pytest.approx(alloc_a / H)
    assert group(data, "by_class", "training")["sessions"] == 1


def test_latency_restores_interruptions(events):
    t = build_report(events, since=DAY1, until=at(DAY2, 12)).to_json()["totals"]
    assert t["pauses"] == {
        "count": 3,
        "auto": 2,
        "manual": 1,
        "failed": 0,
        "interruptions": 1,  # alice's lunch pause, undone after 5 minutes
        "resumes": 4,
    }
    pl = t["pause_latency_s"]  # 30, 60 (alice), 120 (bob)
    assert (pl["n"], pl["median"], pl["max"]) == (3, 60.0, 120.0)
    assert pl["p95"] == pytest.approx(114.0)
    rl = t["resume_latency_s"]  # 40, 200 (alice), 60 (bob's retry); the failed one has none
    assert (rl["n"], rl["median"], rl["max"]) == (3, 60.0, 200.0)
    assert rl["p95"] == pytest.approx(186.0)
    cw = t["capacity_wait_s"]
    assert cw["total"] == pytest.approx(120.0)
    assert cw["share_of_resume"] == pytest.approx(120.0 / 300.0)
    assert t["restores"]["snapshot"] == 1
    assert t["restores"]["checkpoint"] == 2
    assert t["restores"]["failed"] == 1
    assert t["restores"]["total"] == 4
    assert t["restores"]["snapshot_rate"] == pytest.approx(0.25)
    assert t["checkpoint_bytes"]["max"] == 2_000_000_000
    assert t["snapshot_bytes"]["max"] == 5_000_000_000
    assert t["storage_bytes_now"] == 7_000_000_000


def test_interruption_window_is_configurable(events):
    data = build_report(events, since=DAY1, until=at(DAY2, 12), interruption_minutes=1).to_json()
    assert data["totals"]["pauses"]["interruptions"] == 0
    data = build_report(events, since=DAY1, until=at(DAY2, 12), interruption_minutes=180).to_json()
    assert data["totals"]["pauses"]["interruptions"] == 2  # bob's 2 h pause now counts too


def test_period_clipping(events):
    data = build_report(events, since=at(DAY1, 12), until=at(DAY1, 18)).to_json()
    a = group(data, "by_notebook", "a.ipynb")
    alloc = (at(DAY1, 12, 30, 30) - at(DAY1, 12)) + (at(DAY1, 17, 1) - at(DAY1, 12, 35, 10))
    assert a["gpu_hours"]["allocated"] == pytest.approx(alloc / H)
    assert a["gpu_hours"]["always_on"] == pytest.approx(6.0)
    assert a["gpu_hours"]["active"] == pytest.approx(1.0)  # only 13:00-14:00 inside
    # the night pause started inside the period; its resume lies after it
    night = [p for p in data["pauses"] if p["path"] == "a.ipynb" and not p["auto"]][0]
    assert night["pause_latency_s"] == pytest.approx(60)
    assert night["resume_latency_s"] is None
    # bob is paused at 12:00 already (paused before the period started)
    b = group(data, "by_notebook", "b.ipynb")["gpu_hours"]
    assert b["released"] == pytest.approx(2 * (at(DAY1, 13, 5, 20) - at(DAY1, 12)) / H)


def test_timeline_states(events):
    data = build_report(events, since=DAY1, until=at(DAY2, 12)).to_json()
    a = next(s for s in data["sessions"] if s["path"] == "a.ipynb")
    states = [seg["state"] for seg in a["timeline"]]
    assert states[:6] == ["running", "pausing", "paused", "resuming", "restoring", "running"]
    assert "waiting-for-capacity" in states
    # segments are contiguous from first seen to the period end
    for x, y in zip(a["timeline"], a["timeline"][1:], strict=False):
        assert x["end"] == y["start"]
    assert a["timeline"][-1]["end"] == at(DAY2, 12)


def test_always_on_week():
    """The problem statement's example: 40 h of work in a 168 h week."""
    evs = [ev(DAY1, E.KERNEL_STARTED, "w.ipynb")]
    for d in range(5):
        day = DAY1 + d * 24 * H
        evs.append(ev(at(day, 17), E.CELL_EXECUTED, "w.ipynb", duration=8 * H))
        evs.append(ev(at(day, 17), E.PAUSE_REQUESTED, "w.ipynb", auto=True))
        evs.append(ev(at(day, 17), E.ACCELERATOR_RELEASED, "w.ipynb"))
        if d < 4:
            evs.append(ev(at(day + 24 * H, 9), E.RESUME_REQUESTED, "w.ipynb"))
            evs.append(ev(at(day + 24 * H, 9), E.KERNEL_STARTED, "w.ipynb"))
            evs.append(ev(at(day + 24 * H, 9), E.FIRST_CELL_RUNNABLE, "w.ipynb"))
    t = build_report(evs, since=DAY1, until=DAY1 + 168 * H).to_json()["totals"]["gpu_hours"]
    assert t["always_on"] == pytest.approx(168)
    assert t["active"] == pytest.approx(40)
    # allocated: Monday 0:00-17:00, then 9-17 Tue..Fri
    assert t["allocated"] == pytest.approx(17 + 4 * 8)
    assert t["released"] == pytest.approx(168 - 49)


def test_sqlite_ledger_and_outputs(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite", user="alice")
    for e in alice_events():
        ledger.record(e.type, path=e.path, workload_class=e.workload_class, time_=e.time, **e.data)
    report = build_report(ledger, since=DAY1, until=at(DAY2, 12), now=at(DAY2, 12))
    data = report.to_json()
    json.dumps(data)  # serialisable
    assert data["by_notebook"][0]["user"] == "alice"
    assert data["totals"]["gpu_hours"]["always_on"] == pytest.approx(27.0)

    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert rows[0]["scope"] == "total"
    assert float(rows[0]["active_h"]) == pytest.approx(2.5)
    pauses = list(csv.DictReader(io.StringIO(report.to_csv("pauses"))))
    assert len(pauses) == 2
    text = report.to_text()
    assert "Accelerator-hours" in text and "a.ipynb" in text and "p95" in text
    ledger.close()


def test_empty_ledger():
    report = build_report([], now=DAY1)
    data = report.to_json()
    assert data["totals"]["gpu_hours"]["allocated"] == 0
    assert data["totals"]["pause_latency_s"]["median"] is None
    assert "GPU-time report" in report.to_text()


def test_helpers():
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([], 0.5) is None
    assert merge_intervals([(3, 4), (0, 2), (1, 3)]) == [(0, 4)]
    assert parse_time("2025-01-06") == DAY1
    assert parse_time("2d", now=DAY2) == DAY2 - 2 * 24 * H
    assert parse_time(str(DAY1)) == DAY1


def test_failed_restore_that_stopped_its_kernel_stays_released():
    """The server's order on a failed resume: the kernel it started is stopped again."""
    p = "c.ipynb"
    evs = [
        ev(at(DAY1, 9), E.KERNEL_STARTED, p),
        ev(at(DAY1, 10), E.PAUSE_REQUESTED, p),
        ev(at(DAY1, 10), E.ACCELERATOR_RELEASED, p),
        ev(at(DAY1, 11), E.RESUME_REQUESTED, p),
        ev(at(DAY1, 11, 0, 10), E.KERNEL_STARTED, p),
        ev(at(DAY1, 11, 0, 20), E.RESTORE_FAILED, p, error="corrupt"),
        ev(at(DAY1, 11, 0, 30), E.KERNEL_STOPPED, p),
        ev(at(DAY1, 11, 0, 30), E.OPERATION_FAILED, p, operation="resume", error="corrupt"),
    ]
    data = build_report(evs, since=DAY1, until=at(DAY1, 12)).to_json()
    gh = data["totals"]["gpu_hours"]
    assert gh["allocated"] == pytest.approx((H + 20) / H)  # 9-10 and the 20 s restore attempt
    assert gh["released"] == pytest.approx((2 * H - 20) / H)
    assert gh["stopped"] == 0
    assert data["totals"]["restores"]["failed"] == 1
