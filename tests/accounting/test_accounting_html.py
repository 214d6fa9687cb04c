"""The HTML report opened in headless chromium and checked for its plots."""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from jupyter_pause.report.build import build_report
from jupyter_pause.report.html import render_html
from jupyter_pause.simulator.simulate import parse_thresholds, simulate
from jupyter_pause.simulator.traces import synthetic

from .test_accounting_report import DAY1, DAY2, alice_events, at, bob_events

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def test_html_is_self_contained():
    report = build_report(alice_events() + bob_events(), since=DAY1, until=at(DAY2, 12))
    page = render_html(report)
    assert page == render_html(report.to_json())  # the server can render the JSON it has
    for needle in ("<script", "http://", "https://", "src=", "@import", "url("):
        assert needle not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for chart in ("timeline", "hours", "latency"):
        assert f'data-chart="{chart}"' in page
    assert "<script>" not in render_html(
        build_report([ev for ev in alice_events() if ev.path == "a.ipynb"], now=DAY2)
    )


def in_chromium(check):
    """Run ``check(browser)`` in a thread of its own: playwright's sync API runs an
    event loop, which must not be the one pytest-jupyter's fixtures manage."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM}")

    def job():
        with sync_api.sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                return check(b)
            finally:
                b.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(job).result(timeout=120)


@pytest.mark.browser
def test_report_page_in_chromium(tmp_path):
    in_chromium(lambda browser: _check_report_page(browser, tmp_path))


def _check_report_page(browser, tmp_path):
    report = build_report(alice_events() + bob_events(), since=DAY1, until=at(DAY2, 12))
    data = report.to_json()
    path = tmp_path / "report.html"
    path.write_text(render_html(report))
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    assert page.title() == "jupyter-pause: GPU-time report"
    assert requests == [path.as_uri()]  # nothing fetched besides the page itself
    assert errors == []

    charts = page.locator("svg[data-chart]")
    assert charts.count() == 3
    for i in range(3):
        box = charts.nth(i).bounding_box()
        assert box["width"] > 300 and box["height"] > 50

    timeline = page.locator('svg[data-chart="timeline"]')
    n_segments = sum(len(s["timeline"]) for s in data["sessions"])
    assert timeline.locator("rect.seg").count() == n_segments
    states = set(timeline.locator("rect.seg").evaluate_all("els => els.map(e => e.dataset.state)"))
    assert {"running", "paused", "waiting-for-capacity", "stopped"} <= states
    assert timeline.locator("rect.active").count() == sum(
        len(s["active"]) for s in data["sessions"]
    )

    hours = page.locator('svg[data-chart="hours"] rect.bar')
    assert hours.count() == 4 * len(data["by_notebook"])
    widths = hours.evaluate_all("els => els.map(e => e.getBBox().width)")
    assert all(w >= 0 for w in widths) and max(widths) > 100
    # bars are proportional: alice's always-on (27 h) is 27/2.5 times her active bar
    alice = widths[:4]
    assert alice[3] / alice[1] == pytest.approx(27 / 2.5, rel=0.02)

    latency = page.locator('svg[data-chart="latency"]')
    assert latency.locator("circle.dot").count() == 3 + 3 + 1
    assert latency.locator("line.median").count() == 3
    assert latency.locator("line.p95").count() == 3
    text = page.locator("body").inner_text()
    # the tiles are rounded as the table is, and say it in the same unit
    assert "16.79 h" in text  # allocated card
    allocated = f"{data['totals']['gpu_hours']['allocated']:.2f}"
    assert allocated == "16.79"
    assert page.locator("table.groups td", has_text=allocated).count() >= 1
    assert "2 sessions" in text
    # definitions in words, not ledger event names
    definitions = page.locator("#definitions + dl").inner_text()
    assert not re.search(r"\b[A-Z]+_[A-Z_]+\b", definitions), definitions
    assert "1 from snapshot, 2 from checkpoint (fallback), 1 failed" in text
    page.close()


@pytest.mark.browser
def test_simulation_page_in_chromium(tmp_path):
    in_chromium(lambda browser: _check_simulation_page(browser, tmp_path))


def _check_simulation_page(browser, tmp_path):
    sim = simulate(synthetic(users=4, days=2), parse_thresholds("30m,2h,never"), wait_budget_min=5)
    path = tmp_path / "sim.html"
    path.write_text(sim.to_html())
    page = browser.new_page()
    page.goto(path.as_uri())
    assert page.locator('svg[data-chart="sim-hours"] rect.bar').count() == 2 * 3
    assert page.locator('svg[data-chart="sim-wait"] line.limit').count() == 1
    assert page.locator("tr.best").count() == 1
    page.close()


def test_counts_have_plural_forms():
    from jupyter_pause.report.html import _n

    assert _n(1, "session") == "1 session"
    assert _n(2, "session") == "2 sessions"
    assert _n(0, "automatic pause") == "0 automatic pauses"
