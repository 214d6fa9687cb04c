"""The ``jupyter_pause_*`` Prometheus metrics, read from a constructed ledger and
session store, against the report over the same events; and the shipped Grafana
dashboard asks only for metrics the server exports."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_pause.hub.metrics import FleetMetrics
from jupyter_pause.ledger import Ledger
from jupyter_pause.lifecycle import SessionStore, State
from jupyter_pause.report.build import build_report
from jupyter_pause.report.fleet import CAPACITY_OUTCOMES, CapacityOutcome, FleetRow, build_fleet
from jupyter_pause.server.metrics import PauseMetrics

from ..fakes import FakeClock
from .test_accounting_report import DAY2, alice_events, at, bob_events

#: one notebook of the fleet, paused when its server handed it over (at 2.0)
FLEET_ROW = FleetRow(
    user="alice",
    server="",
    path="a.ipynb",
    workload_class="gpu",
    as_of=2.0,
    state="paused",
    gpus=2,
    allocated_s=100.0,
    active_s=40.0,
    released_s=10.0,
    pauses=1,
    resumes=1,
    resume_latencies_s=(3.0,),
    storage_bytes=5000,
)

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "jupyter-pause.json"
ACCOUNTING = Path(__file__).parents[2] / "docs" / "accounting.md"


def ledger_with(events) -> Ledger:
    ledger = Ledger(":memory:")
    for e in events:
        ledger.record(e.type, path=e.path, workload_class=e.workload_class, time_=e.time, **e.data)
    return ledger


def scrape(collector) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value}, as Prometheus would read the exposition."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def clock():
    return FakeClock(at(DAY2, 12))


def in_place(replay):
    """Run the ledger's replay in the scrape, so a test reads its figures at once."""
    replay()


def test_counters_and_histograms_are_the_reports_figures(clock):
    events = alice_events() + bob_events()
    metrics = PauseMetrics(ledger_with(events), SessionStore(None), clock=clock, run=in_place)
    m = scrape(metrics)
    report = build_report(events, until=clock.time(), now=clock.time()).to_json()
    totals = report["totals"]

    # three pauses, all released; four resumes: bob's first failed, his retry worked
    assert m[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 3
    assert m[("jupyter_pause_pauses_total", (("outcome", "failed"),))] == 0
    assert m[("jupyter_pause_resumes_total", (("outcome", "succeeded"),))] == 3
    assert m[("jupyter_pause_resumes_total", (("outcome", "failed"),))] == 1
    assert totals["pauses"]["count"] == 3 and totals["pauses"]["resumes"] == 4
    for kind in ("snapshot", "checkpoint", "failed"):
        assert (
            m[("jupyter_pause_restores_total", (("restored_from", kind),))]
            == (totals["restores"][kind])
        )
    assert m[("jupyter_pause_checkpoints_total", (("outcome", "succeeded"),))] == 1

    gh = totals["gpu_hours"]
    for name in ("allocated", "active", "released"):
        value = m[(f"jupyter_pause_accelerator_{name}_seconds_total", ())]
        assert value == pytest.approx(gh[name] * 3600)
    assert gh["released"] > 0 and gh["active"] > 0

    # latencies: alice 30 s and 60 s, bob 120 s to pause; 40 s, 200 s and 60 s to resume
    pause = "jupyter_pause_pause_latency_seconds"
    assert m[(f"{pause}_count", ())] == 3 == totals["pause_latency_s"]["n"]
    assert m[(f"{pause}_sum", ())] == pytest.approx(210)
    assert m[(f"{pause}_bucket", (("le", "30.0"),))] == 1
    assert m[(f"{pause}_bucket", (("le", "60.0"),))] == 2
    assert m[(f"{pause}_bucket", (("le", "+Inf"),))] == 3
    resume = "jupyter_pause_resume_latency_seconds"
    assert m[(f"{resume}_count", ())] == 3 == totals["resume_latency_s"]["n"]
    assert m[(f"{resume}_sum", ())] == pytest.approx(300)
    assert m[(f"{resume}_bucket", (("le", "120.0"),))] == 2

    # no bytes_written recorded: the checkpoint's size; stored: alice's checkpoint and
    # bob's snapshot, the ledger's own figure when the store's is not given
    assert m[("jupyter_pause_checkpoint_written_bytes_total", ())] == 2_000_000_000
    assert m[("jupyter_pause_storage_bytes", ())] == report["storage"]["bytes_now"]
    assert report["storage"]["bytes_now"] == 7_000_000_000


def test_bytes_written_and_stored_and_a_failed_pause(clock):
    ledger = Ledger(":memory:")
    t = clock.time() - 60
    ledger.record("kernel-started", path="n.ipynb", time_=t)
    for n, written in enumerate((1000, 10)):  # the second, incremental, wrote its changes
        ledger.record(
            "checkpoint-finished", path="n.ipynb", time_=t + n, bytes=1000, bytes_written=written
        )
    # a pause whose checkpoint failed: the kernel kept running
    ledger.record("pause-requested", path="n.ipynb", time_=t + 4)
    ledger.record("checkpoint-failed", path="n.ipynb", time_=t + 5, error="disk full")
    ledger.record("operation-failed", path="n.ipynb", time_=t + 5, operation="pause")
    metrics = PauseMetrics(
        ledger, SessionStore(None), storage=lambda: {"n.ipynb": 1234}, clock=clock, run=in_place
    )
    m = scrape(metrics)
    assert m[("jupyter_pause_checkpoint_written_bytes_total", ())] == 1010
    assert m[("jupyter_pause_checkpoints_total", (("outcome", "succeeded"),))] == 2
    assert m[("jupyter_pause_checkpoints_total", (("outcome", "failed"),))] == 1
    assert m[("jupyter_pause_storage_bytes", ())] == 1234  # measured, as the report is given
    assert m[("jupyter_pause_pauses_total", (("outcome", "failed"),))] == 1
    assert m[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 0
    assert m[("jupyter_pause_pause_latency_seconds_count", ())] == 0  # nothing was released


def test_sessions_by_state_are_read_at_each_scrape_and_the_ledger_once_per_ttl(clock):
    ledger = ledger_with(alice_events())
    store = SessionStore(None)
    store.get("a.ipynb").state = State.PAUSED
    store.get("b.ipynb").state = State.PAUSED
    store.get("c.ipynb")
    metrics = PauseMetrics(ledger, store, ttl=5.0, clock=clock, run=in_place)

    def sessions(m):
        return {dict(k[1])["state"]: v for k, v in m.items() if k[0] == "jupyter_pause_sessions"}

    first = scrape(metrics)
    assert sessions(first) == {s.value: 0 for s in State} | {"paused": 2, "running": 1}
    assert first[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 2

    # a resume starts and a third pause is recorded within the ttl: the state is
    # news at once, the ledger's figures at the next reading
    store.sessions["a.ipynb"].state = State.RESUMING
    ledger.record("pause-requested", path="c.ipynb", time_=clock.time())
    ledger.record("accelerator-released", path="c.ipynb", time_=clock.time() + 1)
    clock.advance(2)
    second = scrape(metrics)
    assert sessions(second)["resuming"] == 1 and sessions(second)["paused"] == 1
    assert second[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 2
    clock.advance(5)
    third = scrape(metrics)
    assert third[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 3


def test_a_flood_of_scrapes_renders_the_ledgers_families_once_per_replay(clock):
    """Fifty scrapes within one replay's lifetime reuse what the first one rendered (the
    sessions by state and the staging lag excepted, read at each); the next replay
    renders anew."""
    ledger = ledger_with(alice_events())
    store = SessionStore(None)
    metrics = PauseMetrics(ledger, store, ttl=5.0, clock=clock, run=in_place)
    now = {
        "jupyter_pause_sessions",
        "jupyter_pause_staging_lag_seconds",
        "jupyter_pause_staging_lag_bytes",
    }

    def split(families):
        families = list(families)
        read_now = [m for m in families if m.name in now]
        replayed = [m for m in families if m.name not in now]
        return read_now, replayed

    first_now, first = split(metrics.collect())
    assert len(first_now) == len(now) and first
    for _ in range(50):
        again_now, again = split(metrics.collect())
        assert [m.name for m in again] == [m.name for m in first]
        assert all(a is b for a, b in zip(again, first, strict=True))
        assert not any(a is b for a, b in zip(again_now, first_now, strict=True))
    clock.advance(6)
    list(metrics.collect())  # stale: this scrape starts the replay
    _, after = split(metrics.collect())
    assert not any(a is b for a, b in zip(after, first, strict=True))
    assert scrape(metrics)[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 2


def test_a_scrape_never_waits_for_the_replay_of_the_ledger(clock):
    """A scrape runs on the server's event loop: it starts a replay and returns with
    the last figures (none before the first replay ended: the sessions only, no
    counter read as zero); one replay at a time, however often it is scraped."""
    ledger = ledger_with(alice_events())
    store = SessionStore(None)
    store.get("a.ipynb").state = State.PAUSED
    started = []
    metrics = PauseMetrics(ledger, store, ttl=5.0, clock=clock, run=started.append)

    first = scrape(metrics)
    assert first[("jupyter_pause_sessions", (("state", "paused"),))] == 1
    assert not [k for k in first if k[0] != "jupyter_pause_sessions"]
    assert len(started) == 1 and len(scrape(metrics)) == len(first)
    assert len(started) == 1  # the one replay under way, not a second

    started.pop()()  # the replay ends
    second = scrape(metrics)
    assert second[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 2
    assert not started

    ledger.record("pause-requested", path="c.ipynb", time_=clock.time())
    ledger.record("accelerator-released", path="c.ipynb", time_=clock.time() + 1)
    clock.advance(6)
    third = scrape(metrics)  # stale: the last figures, and the next replay started
    assert third[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 2
    assert len(started) == 1
    started.pop()()
    fourth = scrape(metrics)
    assert fourth[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 3


def test_a_replay_that_fails_keeps_the_last_figures(clock):
    ledger = ledger_with(alice_events())
    metrics = PauseMetrics(ledger, SessionStore(None), ttl=5.0, clock=clock, run=in_place)
    assert scrape(metrics)[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 2
    ledger.close()  # the server stops
    clock.advance(6)
    assert scrape(metrics)[("jupyter_pause_pauses_total", (("outcome", "succeeded"),))] == 2


# ---------------------------------------------------------------------- the dashboard

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
_KEYWORDS |= {"and", "or", "unless", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not its functions, labels,
    keywords, durations or strings)."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = re.findall(r"(?<![\w.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", expr)
    return {n for n in names if n.lower() not in _KEYWORDS}


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_metric_names_are_read_from_promql():
    expr = (
        'histogram_quantile(0.95, sum by (le) (rate(x_bucket{job="a b"}[5m]))) / 3600'
        " + on(instance) group_left y_total and z"
    )
    assert metric_names(expr) == {"x_bucket", "y_total", "z"}


def test_every_dashboard_panel_asks_only_for_exported_metrics(clock):
    metrics = PauseMetrics(
        ledger_with(alice_events()), SessionStore(None), clock=clock, run=in_place
    )
    row = {"user": "alice", "server": "", "state": "paused", "paused_at": 1.0}
    row |= {"resumes_at": 2.0, "released_hours_this_week": 0.5}
    fleet = build_fleet([FLEET_ROW], 3.0)
    exported = {name for name, _ in scrape(metrics)} | {
        name for name, _ in scrape(FleetMetrics([row], fleet))
    }
    exprs = dashboard_exprs()
    assert len(exprs) >= 8
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= exported, f"{expr}: {names - exported} not exported"
    # and every metric the server exports is on the dashboard
    asked = {re.sub(r"_(bucket|count|sum)$", "", n) for e in exprs for n in metric_names(e)}
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in exported}
    assert families <= asked, families - asked


def test_the_hub_serves_the_fleets_totals_per_user_and_class():
    other = FleetRow(**{**FLEET_ROW.__dict__, "path": "b.ipynb", "state": "running", "resumes": 0})
    fleet = build_fleet([FLEET_ROW, other], 3.0)  # the paused one released 2 GPUs x 1 s more
    values = scrape(FleetMetrics([], fleet))
    group = (("user", "alice"), ("workload_class", "gpu"))
    hub = "jupyter_pause_hub_fleet_"
    assert values[(hub + "accelerator_allocated_seconds_total", group)] == 200.0
    assert values[(hub + "accelerator_active_seconds_total", group)] == 80.0
    assert values[(hub + "accelerator_released_seconds_total", group)] == 22.0
    assert values[(hub + "resumes_total", group)] == 1
    assert values[(hub + "storage_bytes", group)] == 10000
    assert values[(hub + "notebooks", (("paused", "true"), *group))] == 1
    assert values[(hub + "notebooks", (("paused", "false"), *group))] == 1
    # the capacity outcomes: none known here (the rows carry none)
    outcome = hub + "released_outcome_seconds"
    assert values[(outcome, (("outcome", "unknown"), *group))] == 22.0
    assert values[(outcome, (("outcome", "reused"), *group))] == 0.0


def test_the_hub_serves_the_fleets_capacity_outcomes_and_what_is_unknown():
    known = replace(
        FLEET_ROW,
        capacity=(CapacityOutcome("reused", 4.0), CapacityOutcome("scaled-down", 5.0)),
    )
    values = scrape(FleetMetrics([], build_fleet([known], 3.0)))
    outcome = "jupyter_pause_hub_fleet_released_outcome_seconds"
    group = (("user", "alice"), ("workload_class", "gpu"))
    got = {o: values[(outcome, (("outcome", o), *group))] for o in (*CAPACITY_OUTCOMES, "unknown")}
    # released 10 s at its row's time, 2 GPUs x 1 s more since: 12 s, 9 of them known
    assert got == {"reused": 4.0, "scaled-down": 5.0, "idle": 0.0, "kept-up": 0.0, "unknown": 3.0}


def test_every_exported_metric_is_defined_in_accounting_md(clock):
    metrics = PauseMetrics(
        ledger_with(alice_events()), SessionStore(None), clock=clock, run=in_place
    )
    row = {"user": "alice", "server": "", "state": "paused", "paused_at": 1.0}
    row |= {"resumes_at": 2.0, "released_hours_this_week": 0.5}
    fleet = build_fleet([FLEET_ROW], 3.0)
    exported = {name for name, _ in scrape(metrics)} | {
        name for name, _ in scrape(FleetMetrics([row], fleet))
    }
    families = {re.sub(r"_(bucket|count|sum|created)$", "", n) for n in exported}
    doc = ACCOUNTING.read_text()
    missing = sorted(n for n in families if not re.search(rf"`{n}[`{{]", doc))
    assert not missing, f"not defined in docs/accounting.md: {missing}"
