"""Pause and resume the demo notebook the way a user does, in a real browser."""

import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from .conftest import run_cell, wait_resumed, wait_status

pytestmark = pytest.mark.browser

DEMO = Path(__file__).parents[2] / "notebooks" / "resumable_demo.ipynb"
BANNER = "[data-jp-pause='banner']"


def test_pause_reload_resume_and_check(lab, page, screenshot):
    shutil.copy(DEMO, lab.root / DEMO.name)
    page.goto(lab.lab_url(DEMO.name))
    wait_status(page, "Pause: Live")

    run_cell(page, 1, "parameters")
    run_cell(page, 2, "fingerprint")

    pause = page.locator("jp-button[data-command='jupyter-pause:pause']:not([disabled])")
    pause.click()
    wait_status(page, "Pause: Paused")
    assert page.locator(
        "jp-button[data-command='jupyter-pause:resume']:not([disabled])"
    ).is_visible()
    # JupyterLab's own kernel indicator agrees: the kernel is gone
    page.locator(".jp-Toolbar-kernelName", has_text="No Kernel").wait_for()
    session = lab.session_of(DEMO.name)
    assert session["state"] == "paused" and session["last_checkpoint"]["bytes"] > 0

    page.reload()
    banner = page.locator(BANNER)
    banner.get_by_text("Paused at").wait_for()
    banner.get_by_role("button", name="Resume").click()
    wait_resumed(page)

    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    output = run_cell(page, 4, "ALL PASS")
    assert "FAIL" not in output.replace("ALL PASS", "")
    assert "a fresh kernel with the checkpointed state" in output
    session = lab.session_of(DEMO.name)
    assert session["restored_from"] == "checkpoint" and session["state"] == "running"


def test_pause_and_resume_in_the_same_tab(lab, page):
    shutil.copy(DEMO, lab.root / DEMO.name)
    page.goto(lab.lab_url(DEMO.name))
    wait_status(page, "Pause: Live")
    run_cell(page, 1, "parameters")
    run_cell(page, 2, "fingerprint")

    page.locator("jp-button[data-command='jupyter-pause:pause']:not([disabled])").click()
    wait_status(page, "Pause: Paused")
    # no modal for a notebook the user has just paused here; the banner says it
    assert page.locator(".jp-Dialog").count() == 0
    page.locator(BANNER).get_by_text("Paused at").wait_for()

    page.locator("jp-button[data-command='jupyter-pause:resume']:not([disabled])").click()
    wait_resumed(page)
    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    output = run_cell(page, 4, "ALL PASS")
    assert "a fresh kernel with the checkpointed state" in output


def paused_with_a_damaged_newest_checkpoint(lab, page, name):
    """``name`` paused with two checkpoints (x = 'older', then 'newer'), the newer one's
    pickle damaged on disk; returns their ids."""
    from jupyter_pause.engine import store

    lab.write_notebook(name, ["x = 'older'", "x = 'newer'", "print(x)"])
    page.goto(lab.lab_url(name))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": name})["operation"]
    assert lab.client.wait(op)["outcome"] == "succeeded"
    run_cell(page, 1, None)
    # enabled once the page has seen the checkpoint above end
    page.locator("jp-button[data-command='jupyter-pause:pause']:not([disabled])").click()
    wait_status(page, "Pause: Paused")

    infos = sorted(store.list_checkpoints(lab.server.checkpoint_dir, name), key=lambda c: c.id)
    older, newer = infos[0].id, infos[-1].id
    assert older != newer
    pickle_file = Path(infos[-1].path) / "objects.pkl"
    data = bytearray(pickle_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    pickle_file.write_bytes(bytes(data))
    return older, newer


def test_a_failed_resume_says_why_and_offers_the_checkpoints_that_verify(lab, page, screenshot):
    older, newer = paused_with_a_damaged_newest_checkpoint(lab, page, "two.ipynb")

    # resume from the damaged one by name (another tab, the CLI): a named checkpoint
    # never falls back, so this resume fails and the page must say so
    lab.api(
        "POST", "jupyter-pause/api/sessions/resume", {"path": "two.ipynb", "checkpoint_id": newer}
    )
    wait_status(page, "Pause: Failed")
    # the progress notice became the error: no spinner is left behind
    page.locator(".Toastify__toast", has_text="Resuming two.ipynb: restoring").wait_for(
        state="detached"
    )
    # a short reason, the whole story one click away
    banner = page.locator(BANNER)
    banner.get_by_text("Resume failed:").wait_for()
    toast = page.locator(".Toastify__toast", has_text="failed")
    toast.first.wait_for()
    assert len(banner.inner_text().splitlines()[0]) < 200
    screenshot("failed-resume")
    banner.get_by_role("button", name="Show details").click()
    details = page.locator(".jp-Dialog .jp-PauseDetails")
    details.wait_for()
    assert older in details.inner_text()  # the server names what to resume from instead
    page.locator(".jp-Dialog").get_by_role("button", name="Close").click()

    banner.get_by_role("button", name="Resume from a saved state…").click()
    dialog = page.locator(".jp-Dialog", has_text="Resume from which saved state?")
    dialog.wait_for()
    picker = dialog.get_by_label("Saved state to resume from")
    corrupt = picker.locator(f"option[value='{newer}']")
    assert "corrupt" in corrupt.inner_text() and corrupt.is_disabled()
    assert picker.input_value() == older  # the newest that verifies is preselected
    assert dialog.get_by_role("button", name="Start with an empty kernel").is_visible()
    screenshot("failed-resume-picker")
    dialog.get_by_role("button", name="Resume").click()
    wait_resumed(page)
    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    # the stale error notices went away with the failure
    page.locator(".Toastify__toast", has_text="failed").wait_for(state="detached")
    assert "older" in run_cell(page, 2, "older")


def test_a_resume_falls_back_from_a_damaged_checkpoint(lab, page):
    """The newest checkpoint is damaged: Resume restores the newest one that verifies
    (no dialog, no failure) and the operation says which one it passed over."""
    _, newer = paused_with_a_damaged_newest_checkpoint(lab, page, "three.ipynb")

    page.locator("jp-button[data-command='jupyter-pause:resume']:not([disabled])").click()
    wait_resumed(page)
    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    assert "older" in run_cell(page, 2, "older")
    sessions = lab.api("GET", "jupyter-pause/api/status")["sessions"]
    (session,) = [s for s in sessions if s["path"] == "three.ipynb"]
    assert any(newer in m for m in session["operation"]["messages"]), session["operation"]


def test_pause_until_a_time_shows_when_it_resumes_and_can_be_cancelled(lab, page, screenshot):
    name = lab.write_notebook("until.ipynb", ["x = 41"])
    page.goto(lab.lab_url(name))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)

    page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").click()
    page.locator(".lm-Menu-itemLabel", has_text="Pause Until…").click()
    dialog = page.locator(".jp-Dialog")
    field = dialog.locator("[data-jp-pause='resume-at']")
    tomorrow = datetime.now() + timedelta(days=1)
    assert field.input_value() == tomorrow.strftime("%Y-%m-%dT08:45")  # the default
    dialog.get_by_role("button", name="Pause").click()

    wait_status(page, "Pause: Paused · resumes at")
    banner = page.locator(BANNER)
    banner.get_by_text("resumes at").wait_for()
    screenshot("paused-until")
    schedule = lab.session_of(name)["schedule"]
    expected = tomorrow.replace(hour=8, minute=45, second=0, microsecond=0).timestamp()
    assert schedule["kind"] == "scheduled" and schedule["at"] == expected

    banner.get_by_role("button", name="Cancel scheduled resume").click()
    page.wait_for_function(
        "!document.querySelector(\"[data-jp-pause='status'] > span:first-child\")"
        "?.textContent.includes('resumes at')"
    )
    assert lab.session_of(name)["schedule"] is None
    assert lab.session_of(name)["state"] == "paused"
