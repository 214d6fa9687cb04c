"""The fleet's rows: rolled up from a ledger, merged once, carried to now, kept by the
hub service durably and within bounds, handed over by the server (report/fleet.py,
hub/fleet.py, server/fleet.py)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from jupyter_pause.backends.base import BackendError, PauseBackend
from jupyter_pause.hub.fleet import FleetStore
from jupyter_pause.ledger import EventType as E
from jupyter_pause.ledger import Ledger
from jupyter_pause.report.build import build_report
from jupyter_pause.report.fleet import (
    CapacityOutcome,
    FleetRow,
    RowError,
    build_fleet,
    merge_rows,
    rows_from_report,
)
from jupyter_pause.server.fleet import FleetPublisher, ledger_rows

from .test_accounting_report import DAY2, H, alice_events, at
from .test_report_capacity import T0, span

NOW = at(DAY2, 12)


def ledger_of(events) -> Ledger:
    ledger = Ledger()
    for e in events:
        ledger.user = e.user
        ledger.record(e.type, path=e.path, workload_class=e.workload_class, time_=e.time, **e.data)
    return ledger


def row(**kw) -> FleetRow:
    values = dict(
        user="alice",
        server="",
        path="a.ipynb",
        workload_class="gpu",
        as_of=NOW,
        state="running",
        gpus=1,
        allocated_s=2 * H,
        active_s=H,
        released_s=0.0,
        pauses=0,
        resumes=0,
    )
    values.update(kw)
    return FleetRow(**values)


def test_rows_roll_up_the_report_per_notebook():
    events = alice_events()
    report = build_report(events, until=NOW, now=NOW)
    rows = rows_from_report(report, server="")
    data = report.to_json()
    assert len(rows) == len(data["by_notebook"])
    (r,) = rows
    (g,) = data["by_notebook"]
    assert r.allocated_s == pytest.approx(g["gpu_hours"]["allocated"] * H)
    assert r.active_s == pytest.approx(g["gpu_hours"]["active"] * H)
    assert r.released_s == pytest.approx(g["gpu_hours"]["released"] * H)
    assert r.pauses == g["pauses"]["count"] and r.resumes == g["pauses"]["resumes"]
    assert sorted(r.resume_latencies_s) == sorted(
        p["resume_latency_s"] for p in data["pauses"] if p["resume_latency_s"] is not None
    )
    assert r.storage_bytes == g["storage_bytes_now"]
    assert (r.user, r.path, r.workload_class, r.as_of) == ("alice", "a.ipynb", "gpu", NOW)
    # the same from a ledger file, as the server builds them
    assert ledger_rows(ledger_of(events), NOW) == rows


def test_a_row_sent_twice_counts_once_and_an_older_one_never_wins():
    kept: dict[str, FleetRow] = {}
    first = row(as_of=NOW - H, allocated_s=H)
    assert merge_rows(kept, [first]) == 1
    assert merge_rows(kept, [first]) == 0  # resent
    newer = row(allocated_s=2 * H)
    assert merge_rows(kept, [newer, first]) == 1  # overtaken by the older one: ignored
    fleet = build_fleet([first, newer, first], NOW)
    assert fleet.total.notebooks == 1
    assert fleet.total.allocated_s == 2 * H


def test_a_paused_notebook_stays_released_until_now_a_running_one_is_not_guessed():
    paused = row(path="p.ipynb", state="paused", gpus=2, as_of=NOW - H, released_s=60.0)
    running = row(path="r.ipynb", state="running", as_of=NOW - H)
    fleet = build_fleet([paused, running], NOW)
    by_path = {r.path: r for r in fleet.rows}
    assert by_path["p.ipynb"].released_s == 60.0 + 2 * H
    assert by_path["r.ipynb"].allocated_s == running.allocated_s
    assert by_path["r.ipynb"].as_of == NOW - H  # its age stays visible
    assert fleet.total.paused == 1


def test_groups_per_user_and_class_and_capacity_unknown_until_known():
    rows = [
        row(user="alice", path="a", workload_class="gpu", released_s=H, state="paused"),
        row(user="bob", path="b", workload_class="gpu", resume_latencies_s=(4.0, 6.0)),
        row(user="bob", path="c", workload_class="cpu", storage_bytes=10),
    ]
    fleet = build_fleet(rows, NOW)
    users = {g.key: g for g in fleet.by("user")}
    classes = {g.key: g for g in fleet.by("workload_class")}
    assert set(users) == {"alice", "bob"} and set(classes) == {"gpu", "cpu"}
    assert users["bob"].notebooks == 2 and users["bob"].storage_bytes == 10
    assert classes["gpu"].allocated_s == 4 * H
    assert users["bob"].resume_latency_s["median"] == 5.0
    texts = {g.key: g.capacity_text for g in fleet.by("user")}
    assert texts == {"alice": "node outcome unknown", "bob": "-"}  # bob released nothing
    known = replace(rows[0], capacity=(CapacityOutcome("scaled-down", 1800.0),))
    fleet = build_fleet([known, *rows[1:]], NOW)
    text = {g.key: g.capacity_text for g in fleet.by("user")}
    assert text["alice"] == "scaled-down 0.50 h, unknown 0.50 h"  # of its 1 h released
    assert "unknown" in fleet.to_text() and "capacity outcome" in fleet.to_text()
    assert "<td>alice</td>" in fleet.to_html()
    assert json.loads(json.dumps(fleet.to_json()))["totals"]["notebooks"] == 3


def test_rows_carry_the_reports_capacity_outcomes_and_the_rest_stays_unknown():
    """Two servers on Kubernetes nodes: alice's notebook was released 4 h (its node
    idle 10 min, then scaled down), bob's two notebooks shared one node, one GPU
    reused by a training job for 2 h; carol's backend could not see nodes."""
    ledger = Ledger(":memory:", user="alice")
    ledger.record(E.KERNEL_STARTED, path="a.ipynb", time_=T0, gpus=1)
    ledger.record(E.ACCELERATOR_RELEASED, path="a.ipynb", time_=T0 + H, gpus=1)
    ledger.record(E.CAPACITY_ACQUIRED, path="a.ipynb", time_=T0 + 5 * H)
    for data in (span("idle", T0 + H, T0 + H + 600), span("scaled-down", T0 + H + 600, T0 + 5 * H)):
        ledger.record(E.CAPACITY_OUTCOME, time_=data["start"], **data)
    ledger.user = "bob"
    for path in ("b1.ipynb", "b2.ipynb"):
        ledger.record(E.KERNEL_STARTED, path=path, time_=T0, gpus=1, workload_class="train")
        ledger.record(E.ACCELERATOR_RELEASED, path=path, time_=T0 + H, gpus=1)
    for data in (  # bob is still paused at the row's time: his last hour is not known yet
        span("reused", T0 + H, T0 + 3 * H, share=0.5, by_namespace="ml", by_class="training"),
        span("kept-up", T0 + H, T0 + 5 * H, share=0.5),
        span("kept-up", T0 + 3 * H, T0 + 5 * H, share=0.5),
    ):
        ledger.record(E.CAPACITY_OUTCOME, time_=data["start"], **data)
    ledger.user = "carol"
    ledger.record(E.KERNEL_STARTED, path="c.ipynb", time_=T0, gpus=2)
    ledger.record(E.ACCELERATOR_RELEASED, path="c.ipynb", time_=T0 + H, gpus=2)
    until = T0 + 6 * H
    report = build_report(ledger, until=until, now=until)
    rows = {r.path: r for r in rows_from_report(report, server="")}

    def outcomes(r: FleetRow) -> dict[str, float]:
        return {c.outcome: c.accelerator_seconds / H for c in r.capacity}

    assert outcomes(rows["a.ipynb"]) == pytest.approx({"idle": 600 / H, "scaled-down": 4 - 600 / H})
    assert rows["a.ipynb"].released_unknown_s == pytest.approx(0)
    assert outcomes(rows["b1.ipynb"]) == pytest.approx({"reused": 1, "kept-up": 3})
    assert rows["b1.ipynb"].released_s == pytest.approx(5 * H)
    assert rows["b1.ipynb"].released_unknown_s == pytest.approx(H)  # T0+5h..T0+6h
    assert rows["c.ipynb"].capacity == () and rows["c.ipynb"].released_s == 10 * H
    assert [FleetRow.from_json(r.to_json()) for r in rows.values()] == list(rows.values())

    # the fleet's groups are the report's own split, per user and per class
    fleet = build_fleet(rows.values(), until)
    data = report.to_json()
    for group in fleet.by("user"):
        cap = next(g["capacity"] for g in data["by_user"] if g["key"] == group.key)
        assert group.capacity.get("reused", 0) / H == pytest.approx(cap["reused"])
        assert group.capacity.get("scaled-down", 0) / H == pytest.approx(cap["scaled_down"])
        assert group.capacity.get("idle", 0) / H == pytest.approx(cap["idle"])
        assert group.capacity.get("kept-up", 0) / H == pytest.approx(cap["kept_up"])
        assert group.released_unknown_s / H == pytest.approx(cap["unknown"])
    users = {g.key: g.capacity_text for g in fleet.by("user")}
    assert users == {
        "alice": "scaled-down 3.83 h, idle 0.17 h",
        "bob": "reused 2.00 h, kept-up 6.00 h, unknown 2.00 h",
        "carol": "node outcome unknown",
    }
    classes = {g.key: g.capacity_text for g in fleet.by("workload_class")}
    assert classes["train"] == users["bob"]
    total = fleet.to_json()["totals"]["capacity_outcomes"]
    assert total["known"] and total["hours"]["reused"] == pytest.approx(2)
    assert total["unknown_hours"] == pytest.approx(2 + 10)  # bob's last hour x2, carol's 5 h x2
    # carried to now, a paused row's release grows, and so does what is unknown of it
    later = build_fleet(rows.values(), until + H)
    bob = next(g for g in later.by("user") if g.key == "bob")
    assert bob.released_unknown_s == pytest.approx(4 * H)
    assert "reused 2.00 h" in later.to_html_table() and "node outcome unknown" in later.to_text()
    # what is unknown is written from 0.01 h on
    alice = rows["a.ipynb"]
    assert (
        "unknown"
        not in build_fleet(
            [replace(alice, released_s=alice.released_s + 10)], until
        ).total.capacity_text
    )
    assert build_fleet(
        [replace(alice, released_s=alice.released_s + 36)], until
    ).total.capacity_text.endswith("unknown 0.01 h")


@pytest.mark.parametrize(
    "change",
    [
        {"allocated_s": math.nan},
        {"allocated_s": -1.0},
        {"gpus": True},
        {"gpus": 1.5},
        {"state": "dancing"},
        {"user": ""},
        {"path": "x" * 5000},
        {"resume_latencies_s": [1.0] * 33},
        {"capacity": [{"outcome": "stolen", "accelerator_seconds": 1}]},
        {"as_of": "yesterday"},
    ],
)
def test_a_malformed_row_is_refused(change):
    data = {**row().to_json(), **change}
    with pytest.raises(RowError):
        FleetRow.from_json(data)


def test_a_row_round_trips_through_json():
    r = row(capacity=(CapacityOutcome("reused", 5.0),), resume_latencies_s=(1.0,))
    assert FleetRow.from_json(json.loads(json.dumps(r.to_json()))) == r


# --------------------------------------------------------------------------- the hub's store


def test_the_store_keeps_the_urls_user_and_server_durably(tmp_path):
    store = FleetStore(tmp_path / "fleet.json")
    # a server may not speak for another user: the URL's user and server win
    payload = {"rows": [row(user="mallory", server="x").to_json()]}
    assert store.put("alice", "gpu", payload) == 1
    assert store.put("alice", "gpu", payload) == 0  # resent: nothing new, not rewritten
    again = FleetStore(tmp_path / "fleet.json")
    (kept,) = again.rows.values()
    assert (kept.user, kept.server) == ("alice", "gpu")
    assert again.fleet(NOW).total.notebooks == 1


def test_the_store_is_bounded_and_refuses_malformed_bodies(tmp_path):
    store = FleetStore(tmp_path / "fleet.json", max_rows=3)
    for i in range(5):
        store.put("u", "", {"rows": [row(path=f"n{i}", as_of=NOW + i).to_json()]})
    assert sorted(r.path for r in store.rows.values()) == ["n2", "n3", "n4"]
    with pytest.raises(RowError):
        store.put("u", "", {"rows": [row().to_json()] * 4})
    for body in (None, [], {"rows": "x"}, {"rows": [{"user": "u"}]}):
        with pytest.raises(RowError):
            store.put("u", "", body)
    for raw in (b"", b"{", b"[" * 100_000 + b"]" * 100_000, b'{"rows": NaN}'):
        with pytest.raises(RowError):
            store.put_body("u", "", raw)
    assert len(FleetStore(tmp_path / "fleet.json", max_rows=3).rows) == 3


def test_the_store_is_written_atomically_and_durably(tmp_path, monkeypatch):
    """The file's data and the folder's new entry reach the disk (fsync) before
    ``put`` returns; nothing else is left in the folder."""
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(stat.S_IFMT(os.fstat(fd).st_mode))
        real_fsync(fd)

    store = FleetStore(tmp_path / "fleet.json")
    monkeypatch.setattr(os, "fsync", fsync)
    store.put("alice", "", {"rows": [row().to_json()]})
    assert synced == [stat.S_IFREG, stat.S_IFDIR]
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.json"]


def test_a_damaged_store_is_kept_aside_and_said(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_text('{"rows": [{"user": ')
    store = FleetStore(path)
    assert store.rows == {} and "damaged" in store.problem
    assert list(tmp_path.glob("fleet.json.damaged-*"))
    assert store.fleet(NOW).problems == (store.problem,)


# --------------------------------------------------------------------------- the server's side


class Collecting(PauseBackend):
    """A backend that keeps what it is handed (a real one PUTs or patches)."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.handed: list[list[FleetRow]] = []
        self.fail = fail

    async def publish_fleet(self, rows):
        if self.fail:
            raise BackendError("the service is down")
        self.handed.append(rows)
        return "collected"


class FixedClock:
    def __init__(self, t: float):
        self.t = t

    def time(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t


def test_the_server_hands_over_at_start_after_a_pause_and_at_its_stop():
    async def scenario():
        ledger = ledger_of(alice_events())
        backend = Collecting()
        publisher = FleetPublisher(
            ledger=ledger,
            backend=backend,
            storage=lambda: {"a.ipynb": 123},
            interval=3600,
            clock=FixedClock(NOW),
        )
        publisher.start()
        deadline = asyncio.get_running_loop().time() + 10
        while not backend.handed and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert len(backend.handed) == 1  # at start
        ledger.record(E.PAUSED, path="a.ipynb", time_=NOW - 1)
        while len(backend.handed) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert len(backend.handed) == 2  # after the pause, before the next interval
        await publisher.close()
        assert len(backend.handed) == 3  # at the stop
        (r,) = backend.handed[-1]
        assert r.storage_bytes == 123 and r.state == "paused"

    asyncio.run(scenario())


def test_a_pause_recorded_in_another_thread_is_handed_over_too():
    async def scenario():
        ledger = ledger_of(alice_events())
        backend = Collecting()
        publisher = FleetPublisher(ledger=ledger, backend=backend, interval=0)
        publisher.start()
        await asyncio.to_thread(ledger.record, E.PAUSED, path="a.ipynb")  # never raises
        deadline = asyncio.get_running_loop().time() + 10
        while not backend.handed and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert len(backend.handed) == 1
        await publisher.close()

    asyncio.run(scenario())


def test_a_failed_hand_over_is_logged_and_never_raises(caplog):
    async def scenario():
        publisher = FleetPublisher(
            ledger=ledger_of(alice_events()), backend=Collecting(fail=True), interval=0
        )
        assert await publisher.publish() is None
        await publisher.close()

    asyncio.run(scenario())
    assert "not handed over: the service is down" in caplog.text


def test_a_backend_without_a_fleet_is_handed_nothing_and_nothing_is_measured():
    """No rows are made for nowhere: making them measures every checkpoint folder on
    disk (seen in CI: a start-up hand-over of the local backend listing checkpoints'
    blobs while the status, which reads none, was audited)."""
    measured = []

    async def scenario():
        publisher = FleetPublisher(
            ledger=ledger_of(alice_events()),
            backend=PauseBackend(),
            storage=lambda: measured.append(1) or {},
            interval=0,
        )
        assert await publisher.publish() is None
        await publisher.close()
        assert publisher.published == 0

    asyncio.run(scenario())
    assert not measured


def test_every_figure_of_the_fleet_and_of_the_bill_is_defined_in_accounting_md():
    """The fleet's JSON keys and the report's capacity figures are named in the docs."""
    doc = (Path(__file__).parents[2] / "docs" / "accounting.md").read_text()
    fleet = build_fleet([row(capacity=(CapacityOutcome("reused", 1.0),))], NOW).to_json()
    group = fleet["totals"]
    keys = set(fleet) - {"version"}
    keys |= set(group) - {"key"}
    keys |= set(group["gpu_hours"]) | set(group["capacity_outcomes"])
    keys |= {"capacity", "outcome", "accelerator_seconds"}  # a row's outcomes
    report = build_report(alice_events(), until=NOW, now=NOW).to_json()
    keys |= set(report["totals"]["capacity"]) | set(report["totals"]["always_on_share"])
    keys |= {k for k in report["pauses"][0] if k.endswith("_h") or k.startswith("node")}
    keys.add("reused_by")
    missing = sorted(k for k in keys if f"`{k}`" not in doc and f"`{k}," not in doc)
    assert not missing, f"not defined in docs/accounting.md: {missing}"
