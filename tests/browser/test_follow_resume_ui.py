"""An open tab follows every resume to the kernel with the restored state, whoever
started it (a schedule, another client, the tab itself), and the notebook keeps one
Jupyter session (issue #26, item 1)."""

import time

import pytest

from .conftest import current_cells, run_cell, wait_resumed, wait_status

pytestmark = pytest.mark.browser

KERNEL_NAME = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Toolbar-kernelName"


def wait_for(condition, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.1)
    return value


def opened_and_paused(lab, page, name, **pause):
    """``name`` open in the tab, ``x = 41`` run in it, then paused from outside the tab."""
    lab.write_notebook(name, ["x = 41", "print('x + 1 =', x + 1)"])
    page.goto(lab.lab_url(name))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    op = lab.api("POST", "jupyter-pause/api/sessions/pause", {"path": name, **pause})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
    wait_status(page, "Pause: Paused")
    page.locator(KERNEL_NAME, has_text="No Kernel").wait_for()


def the_tab_has_the_state(lab, page, name):
    """The tab shows a kernel, its cell prints the restored value, and Jupyter has one
    session for the notebook: the one with the restored kernel."""
    wait_resumed(page)
    page.locator(KERNEL_NAME, has_text="Python 3").wait_for(timeout=60_000)
    output = run_cell(page, 1, "x + 1 = 42")
    assert "NameError" not in output
    kernels = lab.jupyter_kernels_for(name)
    assert kernels == [lab.session_of(name)["kernel_id"]], lab.api("GET", "api/sessions")


def test_a_scheduled_resume_is_followed_by_the_open_tab(shared_lab, page):
    lab, name = shared_lab, "scheduled.ipynb"
    # due only once the tab has seen the pause: a resume that fell due during a slow
    # pause left the tab no moment to show "Paused" (seen under load: a 90 s timeout)
    opened_and_paused(lab, page, name, resume_at=time.time() + 3600)
    assert lab.session_of(name)["schedule"]["kind"] == "scheduled"
    body = {"path": name, "resume_at": time.time() + 2}
    answer = lab.api("PUT", "jupyter-pause/api/sessions/schedule", body)  # replaces it
    assert answer["schedule"]["kind"] == "scheduled"

    wait_for(lambda: lab.session_of(name)["state"] in ("ready", "running"), "the resume")
    ready_at = time.monotonic()
    # the tab joins the resumed kernel by itself, nobody touching it
    page.locator(KERNEL_NAME, has_text="Python 3").wait_for(timeout=60_000)
    print(f"the tab followed the resume {time.monotonic() - ready_at:.1f} s after ready")
    assert len(lab.jupyter_kernels_for(name)) == 1
    the_tab_has_the_state(lab, page, name)


def test_a_cell_run_right_after_a_resume_elsewhere_runs_in_the_restored_kernel(shared_lab, page):
    lab, name = shared_lab, "elsewhere.ipynb"
    opened_and_paused(lab, page, name)
    op = lab.api("POST", "jupyter-pause/api/sessions/resume", {"path": name})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
    # run at once, before the tab may have seen the resume: it joins, never starts one
    cell = current_cells(page).nth(1)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    cell.locator(".jp-OutputArea-output", has_text="x + 1 = 42").wait_for(timeout=120_000)
    assert page.locator(".jp-Dialog").count() == 0  # nothing to ask: it was resumed
    the_tab_has_the_state(lab, page, name)


def test_the_tabs_own_resume_keeps_one_session(shared_lab, page):
    lab, name = shared_lab, "own.ipynb"
    opened_and_paused(lab, page, name)
    page.locator("jp-button[data-command='jupyter-pause:resume']:not([disabled])").click()
    the_tab_has_the_state(lab, page, name)
    # and the pause that follows saves that state and leaves no kernel behind
    page.locator("jp-button[data-command='jupyter-pause:pause']:not([disabled])").click()
    wait_status(page, "Pause: Paused")
    assert lab.jupyter_kernels_for(name) == []
    checkpoint = lab.session_of(name)["last_checkpoint"]
    listing = lab.api("GET", f"jupyter-pause/api/checkpoints?path={name}")["checkpoints"]
    assert listing[0]["id"] == checkpoint["id"] and "x" in listing[0]["objects"]
