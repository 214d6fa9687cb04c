"""After a resume, the cells that made what could not be saved are offered for a re-run,
and run only when the user says so."""

import pytest

from .conftest import run_cell, wait_resumed, wait_status

pytestmark = pytest.mark.browser


def resume_and_get_offer(lab, page, name):
    lab.write_notebook(
        name,
        ["import threading\nlock = threading.Lock()\nx = 1", "print(type(lock).__name__, x)"],
    )
    page.goto(lab.lab_url(name))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    page.locator("jp-button[data-command='jupyter-pause:pause']:not([disabled])").click()
    # the lock cannot be saved: the pause says so first
    page.locator(".jp-Dialog").get_by_role("button", name="Pause anyway").click()
    wait_status(page, "Pause: Paused")
    page.locator("jp-button[data-command='jupyter-pause:resume']:not([disabled])").click()
    wait_resumed(page)
    dialog = page.locator(".jp-Dialog", has_text="Re-run cells to recreate")
    dialog.wait_for(timeout=60_000)
    text = dialog.inner_text()
    assert "Re-run cell [1] to recreate lock" in text and "threading.Lock()" in text
    return dialog


def test_rerun_recreates_the_skipped_names(lab, page):
    dialog = resume_and_get_offer(lab, page, "rerun.ipynb")
    dialog.get_by_role("button", name="Re-run").click()
    dialog.wait_for(state="detached")
    assert "lock 1" in run_cell(page, 1, "lock 1")


def test_skip_runs_nothing(lab, page):
    dialog = resume_and_get_offer(lab, page, "skip.ipynb")
    dialog.get_by_role("button", name="Skip").click()
    dialog.wait_for(state="detached")
    assert "NameError" in run_cell(page, 1, "NameError")
