"""The auto-pause warning as a user meets it, and the report page."""

import json

import pytest

from .conftest import write_notebook

pytestmark = pytest.mark.browser

POLICY = {"gpu-interactive": {"idle_threshold": 8, "min_running_time": 0, "warn_before": 7}}


def test_the_warning_offers_keep_running(lab_factory, page, tmp_path):
    lab = lab_factory(
        ["--PauseApp.idle_check_interval=0.25", f"--PauseApp.workload_classes={json.dumps(POLICY)}"]
    )
    write_notebook(lab.root, "idle.ipynb", ["1 + 1"])
    page.goto(lab.lab_url("idle.ipynb"))
    page.wait_for_function(
        "document.querySelector(\"[data-jp-pause='status']\")?.textContent.startsWith('Pause: Running')"
    )

    warning = page.locator(".Toastify__toast", has_text="will be paused")
    warning.wait_for(timeout=30_000)
    status_text = page.locator("[data-jp-pause='status']").inner_text()
    assert "auto-pause in" in status_text
    page.screenshot(path=str(tmp_path / "warning.png"))
    warning.get_by_role("button", name="Keep running").click()

    page.wait_for_function(
        "async () => { const r = await fetch('/jupyter-pause/api/events'); "
        "return (await r.json()).events.some(e => e.type === 'auto-pause-postponed'); }"
    )
    sessions = lab.api("GET", "jupyter-pause/api/status")["sessions"]
    assert [s["state"] for s in sessions if s["path"] == "idle.ipynb"] == ["running"], sessions


def test_the_report_opens_from_the_command_palette(lab, page, tmp_path):
    page.goto(lab.lab_url())
    page.locator(".jp-LauncherCard").first.wait_for()
    page.get_by_role("menuitem", name="View").click()
    page.get_by_role("menuitem", name="Activate Command Palette").click()
    page.locator(".lm-CommandPalette-input").fill("GPU-Time Report")
    page.keyboard.press("Enter")
    frame = page.frame_locator(".jp-PauseReport iframe")
    frame.locator("svg").first.wait_for()
    assert frame.locator("h1").first.inner_text()
    page.screenshot(path=str(tmp_path / "report.png"))
