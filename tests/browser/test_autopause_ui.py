"""Auto-pause as a user meets it: a live, warning-coloured countdown, a confirmed
"Keep running", the notebook saved first, and a notice that stays; and the report page."""

import json

import pytest

from ..helpers import wait_for
from .conftest import STATUS, STATUS_TEXT, current_cells, wait_status

pytestmark = pytest.mark.browser

POLICY = {"gpu-interactive": {"idle_threshold": 8, "min_running_time": 0, "warn_before": 7}}


def test_auto_pause_is_visible_before_during_and_after(lab_factory, page, screenshot):
    lab = lab_factory(
        ["--PauseApp.idle_check_interval=0.25", f"--PauseApp.workload_classes={json.dumps(POLICY)}"]
    )
    lab.write_notebook("idle.ipynb", ["1 + 1"])
    page.goto(lab.lab_url("idle.ipynb"))
    wait_status(page, "Pause: Live")

    warning = page.locator(".Toastify__toast", has_text="will be paused")
    warning.wait_for(timeout=30_000)
    item = page.locator(STATUS)
    wait_status(page, "Pause: Live · auto-pause in")
    assert item.get_attribute("data-state") == "warning"
    # the countdown moves by itself, between polls
    before = page.locator(STATUS_TEXT).inner_text()
    page.wait_for_function(
        f'document.querySelector("{STATUS_TEXT}").textContent !== {before!r}', timeout=10_000
    )
    screenshot("auto-pause-warning")
    warning.get_by_role("button", name="Keep running").click()
    page.locator(".Toastify__toast", has_text="postponed until").wait_for()
    sessions = lab.api("GET", "jupyter-pause/api/status")["sessions"]
    assert [s["state"] for s in sessions if s["path"] == "idle.ipynb"] == ["running"], sessions

    # an edit that was never saved by hand is on disk before the kernel goes
    editor = current_cells(page).nth(0).locator(".jp-InputArea-editor")
    editor.click()
    page.keyboard.press("End")
    page.keyboard.type("  # typed, never saved")
    wait_status(page, "Pause: Paused", timeout=60_000)
    # (read whole: a save by JupyterLab's own autosave may be writing it in place)
    source = wait_for(lambda: lab.first_source_on_disk("idle.ipynb"), 30, "a whole file")
    assert "typed, never saved" in source

    # it says what happened, and why, and keeps saying it
    notice = page.locator(".Toastify__toast", has_text="was paused automatically")
    notice.wait_for()
    assert "after 8 s idle" in notice.inner_text()
    banner = page.locator("[data-jp-pause='banner']")
    banner.get_by_text("Paused automatically at").wait_for()
    assert "after 8 s idle" in banner.inner_text()
    page.locator(".jp-Toolbar-kernelName", has_text="No Kernel").wait_for()
    screenshot("auto-pause-notice")


def test_the_report_opens_from_the_command_palette(lab, page, screenshot):
    page.goto(lab.lab_url())
    page.locator(".jp-LauncherCard").first.wait_for()
    page.get_by_role("menuitem", name="View").click()
    page.get_by_role("menuitem", name="Activate Command Palette").click()
    page.locator(".lm-CommandPalette-input").fill("GPU-Time Report")
    page.keyboard.press("Enter")
    frame = page.frame_locator(".jp-PauseReport iframe")
    frame.locator("svg").first.wait_for()
    assert frame.locator("h1").first.inner_text()
    iframe = page.locator(".jp-PauseReport iframe")
    assert iframe.get_attribute("title") == "GPU-Time Report"
    first = iframe.get_attribute("src")
    page.locator(".jp-PauseReport .jp-Toolbar").get_by_text("Refresh").click()
    page.wait_for_function(
        f"document.querySelector('.jp-PauseReport iframe').src.split('/').pop() !== {first.split('/')[-1]!r}"
    )
    frame.locator("svg").first.wait_for()
