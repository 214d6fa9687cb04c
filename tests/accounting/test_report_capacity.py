"""The report splits the accelerator-hours released by pausing by what became of the node.

Pure: ledgers written by hand (the Kubernetes tests write them through the
real backends, ``tests/kubernetes/test_k8s_nodes.py``).
"""

from __future__ import annotations

import csv
import io

import pytest

from jupyter_pause.capacity import CapacitySpan
from jupyter_pause.ledger import EventType, Ledger
from jupyter_pause.report.build import build_report
from jupyter_pause.report.html import render_html

H = 3600.0
T0 = 1_767_571_200.0  # Monday 00:00 UTC


def span(outcome, start, end, node="n1", share=1.0, **kw) -> dict:
    return CapacitySpan(outcome, start, end, share, share, node, "nvidia-tesla-t4", **kw).to_json()


def week(ledger: Ledger, path: str, spans_by_night) -> None:
    """A workstation used 8 h a day, Monday to Friday, paused the rest of the week."""
    for day in range(5):
        start = T0 + day * 24 * H + 9 * H
        ledger.record(EventType.KERNEL_STARTED if day == 0 else EventType.CAPACITY_ACQUIRED,
                      path=path, time_=start, gpus=1)  # fmt: skip
        ledger.record(EventType.CELL_EXECUTED, path=path, time_=start + 8 * H, duration=8 * H)
        ledger.record(EventType.ACCELERATOR_RELEASED, path=path, time_=start + 8 * H, gpus=1)
        for data in spans_by_night(start + 8 * H, start + 24 * H if day < 4 else T0 + 168 * H):
            ledger.record(EventType.CAPACITY_OUTCOME, time_=data["start"], **data)


def test_a_week_split_by_node_outcome_and_the_always_on_share():
    ledger = Ledger(":memory:", user="alice")

    def nights(released, back):
        # idle 10 min, then the autoscaler removed the node until the next morning
        return [span("idle", released, released + 600), span("scaled-down", released + 600, back)]

    week(ledger, "work.ipynb", nights)
    report = build_report(ledger, since=T0, until=T0 + 168 * H, now=T0 + 168 * H)
    t = report.to_json()["totals"]
    gh, cap, share = t["gpu_hours"], t["capacity"], t["always_on_share"]
    assert gh["always_on"] == pytest.approx(159)  # first seen Monday 09:00
    assert gh["allocated"] == pytest.approx(40)
    assert cap["released"] == pytest.approx(gh["released"]) == pytest.approx(119)
    assert cap["idle"] == pytest.approx(5 * 600 / H)
    assert cap["scaled_down"] == pytest.approx(119 - 5 * 600 / H)
    assert cap["reused"] == cap["kept_up"] == cap["unknown"] == 0
    assert cap["node_hours_removed"] == pytest.approx(cap["scaled_down"])
    assert cap["node_hours_up"] == pytest.approx(5 * 600 / H)
    assert share["allocated"] == pytest.approx(40 / 159)
    assert share["bill_reduced"] == pytest.approx(cap["scaled_down"] / 159)
    pauses = report.to_json()["pauses"]
    assert len(pauses) == 5 and pauses[0]["scaled_down_h"] == pytest.approx(16 - 600 / H)
    assert pauses[0]["nodes"] == "n1" and pauses[0]["reacquired"] == T0 + 33 * H
    text = report.to_text()
    assert "What pausing did to the bill" in text and "scaled down" in text
    page = render_html(report)
    assert "What pausing did to the bill" in page and "data-table='bill'" in page
    assert "scaled down 15.83 h, idle 0.17 h" in page  # the first night's pause row


def test_no_spans_is_node_outcome_unknown_never_a_guess():
    ledger = Ledger(":memory:", user="bob")
    week(ledger, "work.ipynb", lambda released, back: [])
    report = build_report(ledger, since=T0, until=T0 + 168 * H, now=T0 + 168 * H)
    cap = report.to_json()["totals"]["capacity"]
    assert cap["unknown"] == pytest.approx(cap["released"]) == pytest.approx(119)
    assert cap["reused"] == cap["scaled_down"] == cap["idle"] == cap["kept_up"] == 0
    assert "node outcome unknown: this backend cannot see nodes" in report.to_text()


def test_shares_reuse_and_node_hours_counted_once_for_two_notebooks_of_one_server():
    ledger = Ledger(":memory:", user="carol")
    for path in ("a.ipynb", "b.ipynb"):
        ledger.record(EventType.KERNEL_STARTED, path=path, time_=T0, gpus=1)
        ledger.record(EventType.ACCELERATOR_RELEASED, path=path, time_=T0 + H, gpus=1)
        ledger.record(EventType.CAPACITY_ACQUIRED, path=path, time_=T0 + 5 * H)
    # a two-GPU pod: one GPU taken by a training job for 2 h, the other kept up
    for data in (
        span("reused", T0 + H, T0 + 3 * H, share=0.5, by_namespace="ml", by_class="training"),
        span("kept-up", T0 + H, T0 + 5 * H, share=0.5),
        span("kept-up", T0 + 3 * H, T0 + 5 * H, share=0.5),
    ):
        ledger.record(EventType.CAPACITY_OUTCOME, time_=data["start"], **data)
    report = build_report(ledger, since=T0, until=T0 + 6 * H, now=T0 + 6 * H)
    data = report.to_json()
    cap = data["totals"]["capacity"]
    assert cap["released"] == pytest.approx(8)  # 2 notebooks x 4 h
    assert cap["reused"] == pytest.approx(2)  # 2 notebooks x 2 h x half
    assert cap["kept_up"] == pytest.approx(6)
    assert cap["node_hours_up"] == pytest.approx(4)  # one node, 4 h, not once per notebook
    assert data["pauses"][0]["reused_by"] == "ml/training"
    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert float(rows[0]["released_reused_h"]) == pytest.approx(2)
    assert float(rows[0]["node_hours_up"]) == pytest.approx(4)
