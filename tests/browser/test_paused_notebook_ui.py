"""A paused notebook never lies and never traps, as a user meets it in a real browser:
no kernel when opened, a banner with Resume, a question before a cell runs."""

import pytest

from .conftest import current_cells, run_cell, wait_resumed, wait_status

pytestmark = pytest.mark.browser

KERNEL_NAME = ".jp-Toolbar-kernelName"
BANNER = "[data-jp-pause='banner']"


def open_and_pause_from_outside(lab, page, name, sources):
    """Open ``name``, run its first cell, then pause it as the CLI does (not from this tab)."""
    lab.write_notebook(name, sources)
    page.goto(lab.lab_url(name))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    op = lab.api("POST", "jupyter-pause/api/sessions/pause", {"path": name})["operation"]
    assert lab.client.wait(op)["outcome"] == "succeeded"


def test_paused_from_elsewhere_the_view_says_no_kernel_and_offers_resume(
    shared_lab, page, screenshot
):
    lab = shared_lab
    open_and_pause_from_outside(
        lab, page, "elsewhere.ipynb", ["import threading\nx = 42\nlock = threading.Lock()", "x"]
    )
    # the open view follows: no stale "Idle", the pause state, a banner with Resume
    page.locator(KERNEL_NAME, has_text="No Kernel").wait_for()
    wait_status(page, "Pause: Paused")
    banner = page.locator(BANNER)
    banner.get_by_text("Paused at").wait_for()
    assert "saved state" in banner.inner_text()

    # reopened: JupyterLab starts no kernel for it, and the banner is there again
    page.reload()
    banner.get_by_text("Paused at").wait_for()
    page.locator(KERNEL_NAME, has_text="No Kernel").wait_for()
    wait_status(page, "Pause: Paused")
    screenshot("paused-notebook-opened")
    assert lab.jupyter_kernels_for("elsewhere.ipynb") == []
    assert lab.session_of("elsewhere.ipynb")["state"] == "paused"

    banner.get_by_role("button", name="Resume").click()
    wait_resumed(page)
    banner.wait_for(state="hidden")
    page.locator(KERNEL_NAME, has_text="Python 3").wait_for()
    # what could not be saved is said after the resume, by name
    reminder = page.locator(".Toastify__toast", has_text="did not come back")
    reminder.wait_for()
    assert "lock" in reminder.inner_text()
    # ... and the cell that made it is offered for a re-run (a modal dialog: it must be
    # answered before the notebook takes clicks again; it can come before or after the
    # reminder)
    offer = page.locator(".jp-Dialog", has_text="Re-run cells to recreate")
    offer.get_by_role("button", name="Skip").click(timeout=60_000)
    offer.wait_for(state="detached")
    assert "42" in run_cell(page, 1, "42")


def test_running_a_cell_while_paused_asks_first(shared_lab, page, screenshot):
    lab = shared_lab
    open_and_pause_from_outside(lab, page, "ask.ipynb", ["x = 'kept'", "print(x)"])
    page.locator(KERNEL_NAME, has_text="No Kernel").wait_for()

    dialog = page.locator(".jp-Dialog", has_text="This notebook is paused")
    cell = current_cells(page).nth(1)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    dialog.wait_for()
    screenshot("cell-run-while-paused")
    for label in ("Resume, then run", "Run in an empty kernel", "Cancel"):
        assert dialog.get_by_role("button", name=label).is_visible()

    # Cancel: nothing ran, nothing started, still paused
    dialog.get_by_role("button", name="Cancel").click()
    dialog.wait_for(state="hidden")
    assert lab.jupyter_kernels_for("ask.ipynb") == []
    assert lab.session_of("ask.ipynb")["state"] == "paused"
    wait_status(page, "Pause: Paused")

    # Resume, then run: the cell runs once the state is back
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    dialog.get_by_role("button", name="Resume, then run").click()
    cell.locator(".jp-OutputArea-output", has_text="kept").wait_for(timeout=120_000)
    assert lab.session_of("ask.ipynb")["restored_from"] == "checkpoint"


def test_run_in_an_empty_kernel_is_a_choice_not_an_accident(shared_lab, page):
    lab = shared_lab
    open_and_pause_from_outside(lab, page, "empty.ipynb", ["x = 1", "print('fresh')"])
    page.locator(KERNEL_NAME, has_text="No Kernel").wait_for()
    cell = current_cells(page).nth(1)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    dialog = page.locator(".jp-Dialog", has_text="This notebook is paused")
    dialog.get_by_role("button", name="Run in an empty kernel").click()
    cell.locator(".jp-OutputArea-output", has_text="fresh").wait_for(timeout=120_000)
    page.locator(KERNEL_NAME, has_text="Python 3").wait_for()
    # the saved state stays, for %restore
    assert lab.client.checkpoints("empty.ipynb")


def test_a_pause_lists_what_cannot_be_saved_first(shared_lab, page, screenshot):
    lab = shared_lab
    lab.write_notebook(
        "unsaveable.ipynb",
        ["import threading\nlock = threading.Lock()\ngen = (i for i in range(3))\nkept = 1"],
    )
    page.goto(lab.lab_url("unsaveable.ipynb"))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)

    pause = page.locator("jp-button[data-command='jupyter-pause:pause']:not([disabled])")
    pause.click()
    dialog = page.locator(".jp-Dialog", has_text="Not everything can be saved")
    dialog.wait_for()
    items = dialog.locator("li").all_inner_texts()
    assert [i.split(":")[0] for i in items] == ["gen", "lock"]
    screenshot("pause-unsaveable")
    dialog.get_by_role("button", name="Cancel").click()
    dialog.wait_for(state="hidden")
    assert lab.session_of("unsaveable.ipynb")["state"] == "running"

    pause.click()
    dialog.get_by_role("button", name="Pause anyway").click()
    wait_status(page, "Pause: Paused")
    assert lab.jupyter_kernels_for("unsaveable.ipynb") == []
