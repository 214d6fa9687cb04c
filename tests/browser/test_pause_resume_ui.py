"""Pause and resume the demo notebook the way a user does, in a real browser."""

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

DEMO = Path(__file__).parents[2] / "notebooks" / "resumable_demo.ipynb"
STATUS = "[data-jp-pause='status']"


def wait_status(page, text, timeout=90_000):
    page.wait_for_function(
        f'document.querySelector("{STATUS}")?.textContent.startsWith({text!r})', timeout=timeout
    )


def demo_session(lab):
    sessions = lab.api("GET", "jupyter-pause/api/status")["sessions"]
    matching = [s for s in sessions if s["path"] == DEMO.name]
    assert len(matching) == 1, sessions
    return matching[0]


def run_cell(page, index, expect):
    """Run the code cell at ``index`` (as a user: select it, Shift+Enter) and wait for ``expect``."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    cell.locator(".jp-OutputArea-output", has_text=expect).first.wait_for(timeout=120_000)
    return cell.locator(".jp-OutputArea").inner_text()


def test_pause_reload_resume_and_check(lab, page, tmp_path):
    shutil.copy(DEMO, lab.root / DEMO.name)
    page.goto(lab.lab_url(DEMO.name))
    wait_status(page, "Pause: Running")

    run_cell(page, 1, "parameters")
    run_cell(page, 2, "fingerprint")

    pause = page.locator("jp-button[data-command='jupyter-pause:pause']")
    pause.click()
    wait_status(page, "Pause: Paused")
    assert page.locator("jp-button[data-command='jupyter-pause:resume']").is_visible()
    page.screenshot(path=str(tmp_path / "paused.png"))
    # JupyterLab's own kernel indicator agrees: the kernel is gone
    page.locator(".jp-Toolbar-kernelName", has_text="No Kernel").wait_for()
    session = demo_session(lab)
    assert session["state"] == "paused" and session["last_checkpoint"]["bytes"] > 0

    page.reload()
    dialog = page.locator(".jp-Dialog", has_text="This notebook is paused")
    dialog.wait_for()
    page.screenshot(path=str(tmp_path / "resume-offer.png"))
    dialog.get_by_role("button", name="Resume").click()
    page.wait_for_function(
        f"['Pause: Ready', 'Pause: Running'].includes(document.querySelector(\"{STATUS}\")?.textContent)",
        timeout=120_000,
    )

    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    output = run_cell(page, 4, "ALL PASS")
    page.screenshot(path=str(tmp_path / "resumed.png"))
    assert "FAIL" not in output.replace("ALL PASS", "")
    assert "a fresh kernel with the checkpointed state" in output
    session = demo_session(lab)
    assert session["restored_from"] == "checkpoint" and session["state"] == "running"


def test_pause_and_resume_in_the_same_tab(lab, page):
    shutil.copy(DEMO, lab.root / DEMO.name)
    page.goto(lab.lab_url(DEMO.name))
    wait_status(page, "Pause: Running")
    run_cell(page, 1, "parameters")
    run_cell(page, 2, "fingerprint")

    page.locator("jp-button[data-command='jupyter-pause:pause']").click()
    wait_status(page, "Pause: Paused")
    # no resume offer for a notebook the user has just paused here
    assert page.locator(".jp-Dialog").count() == 0

    page.locator("jp-button[data-command='jupyter-pause:resume']").click()
    page.wait_for_function(
        f"['Pause: Ready', 'Pause: Running'].includes(document.querySelector(\"{STATUS}\")?.textContent)",
        timeout=120_000,
    )
    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    output = run_cell(page, 4, "ALL PASS")
    assert "a fresh kernel with the checkpointed state" in output
