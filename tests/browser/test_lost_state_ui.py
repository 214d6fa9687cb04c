"""The edges of a session's life, as a user meets them in a real browser: a kernel
killed (as the OOM killer does) or a server stopped under a live notebook never
leaves it silently in an empty kernel; a restart asked for does not nag; the tab
saves the notebook file for a pause it did not start (``%pause``); a notebook just
resumed gets the auto-pause warning with "Keep running"."""

import json
import os
import re
import signal

import pytest

from ..helpers import wait_for
from .conftest import current_cells, run_cell, wait_resumed, wait_status

pytestmark = pytest.mark.browser

BANNER = "[data-jp-pause='banner']"
STATE = "answer = 6 * 7\nimport os\nprint('pid', os.getpid())"


def open_with_state(lab, page, name):
    """Open ``name``, put ``answer`` in its kernel, checkpoint it; the kernel's pid."""
    lab.write_notebook(name, [STATE, "print(answer)"])
    page.goto(lab.lab_url(name))
    wait_status(page, "Pause: Live")
    output = run_cell(page, 0, "pid")
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": name})["operation"]
    assert lab.client.wait(op)["outcome"] == "succeeded"
    return int(output.split()[-1])


def restart_kernel_from_the_menu(page):
    page.get_by_role("menuitem", name="Kernel").click()
    page.get_by_role("menuitem", name="Restart Kernel…").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Confirm Kernel Restart").click()


def next_status(page):
    """Wait for the page's next ``GET status`` answer (its poll): what it shows after
    that is what it makes of the server's state now."""
    with page.expect_response(lambda r: "jupyter-pause/api/status" in r.url, timeout=60_000):
        pass


def test_a_killed_kernel_offers_the_saved_state_and_a_restart_asked_for_does_not(lab, page):
    pid = open_with_state(lab, page, "killed.ipynb")
    banner = page.locator(BANNER)

    # Kernel > Restart: the user chose an empty kernel, nothing is offered
    restart_kernel_from_the_menu(page)
    run_cell(page, 0, "pid")  # the new kernel runs (and holds the state again)
    session = lab.session_of("killed.ipynb")
    assert session["saved_state_unrestored"] is None and session["state"] == "running"
    next_status(page)
    assert not banner.is_visible()
    output = current_cells(page).nth(0).locator(".jp-OutputArea").inner_text()
    pid = int(output.split()[-1])
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": "killed.ipynb"})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
    saved = lab.session_of("killed.ipynb")["last_checkpoint"]
    kernel_id = lab.session_of("killed.ipynb")["kernel_id"]

    # SIGKILL, as the OOM killer sends it: Jupyter restarts the kernel empty
    os.kill(pid, signal.SIGKILL)
    page.locator(".jp-Dialog", has_text="appears to have died").get_by_role(
        "button", name=re.compile("^ok$", re.IGNORECASE)
    ).click(timeout=120_000)
    banner.get_by_text("Saved state from").wait_for(timeout=60_000)
    assert "the kernel died" in banner.inner_text()
    text = banner.inner_text()
    at = re.search(r"Saved state from ([^·]+) ·", text).group(1)
    assert f"work after {at} was lost" in text, text
    session = lab.session_of("killed.ipynb")
    assert session["state"] == "failed", session
    assert session["saved_state_unrestored"]["checkpoint"] == saved["id"]

    # dismissed, it stays away in this page; the notebook opened again offers it again
    banner.get_by_role("button", name="Dismiss").click()
    banner.wait_for(state="hidden")
    next_status(page)
    assert not banner.is_visible()
    page.goto(lab.lab_url("killed.ipynb"))
    banner.get_by_text("Saved state from").wait_for(timeout=60_000)

    banner.get_by_role("button", name="Resume from it").click()
    wait_status(page, "Pause: Resumed")  # "Live" before the resume began
    banner.wait_for(state="hidden")
    # restored into the kernel Jupyter restarted for the notebook, which the tab follows
    assert lab.session_of("killed.ipynb")["kernel_id"] == kernel_id
    assert "42" in run_cell(page, 1, "42")
    assert lab.jupyter_kernels_for("killed.ipynb") == [kernel_id]


def test_a_server_killed_under_a_live_notebook_offers_the_saved_state_after_its_restart(
    lab_factory, page
):
    lab = lab_factory()
    open_with_state(lab, page, "stopped.ipynb")
    lab.server.process.send_signal(signal.SIGKILL)  # nothing could be saved at the stop
    lab.server.process.wait(30)

    lab = lab_factory()  # the same root and state folder
    page.goto(lab.lab_url("stopped.ipynb"))
    banner = page.locator(BANNER)
    banner.get_by_text("Saved state from").wait_for(timeout=120_000)
    assert "the server stopped" in banner.inner_text()
    assert lab.jupyter_kernels_for("stopped.ipynb") == []  # never an empty kernel meanwhile
    banner.get_by_role("button", name="Resume from it").click()
    wait_status(page, "Pause: Resumed")
    banner.wait_for(state="hidden")
    # the state is back in the notebook's one kernel, and the tab runs in it
    kernel_id = lab.session_of("stopped.ipynb")["kernel_id"]
    assert lab.client.evaluate(kernel_id, "print(answer)") == 42
    assert "42" in run_cell(page, 1, "42")
    assert lab.jupyter_kernels_for("stopped.ipynb") == [kernel_id]


def test_percent_pause_saves_the_notebook_file(lab, page):
    lab.write_notebook("magic.ipynb", ["x = 1", "%pause"])
    page.goto(lab.lab_url("magic.ipynb"))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    editor = current_cells(page).nth(0).locator(".jp-InputArea-editor")
    editor.click()
    page.keyboard.press("End")
    page.keyboard.type("  # typed, never saved")
    cell = current_cells(page).nth(1)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    wait_status(page, "Pause: Paused", timeout=120_000)
    assert lab.session_of("magic.ipynb")["paused_by"] == "magic"

    def saved():
        return "typed, never saved" in (lab.first_source_on_disk("magic.ipynb") or "")

    wait_for(saved, 30, what="the edit saved to disk")


POLICY = {"gpu-interactive": {"idle_threshold": 8, "min_running_time": 0, "warn_before": 7}}


def test_a_resumed_notebook_is_warned_with_keep_running(lab_factory, page):
    lab = lab_factory(
        ["--PauseApp.idle_check_interval=0.25", f"--PauseApp.workload_classes={json.dumps(POLICY)}"]
    )
    lab.write_notebook("resumed.ipynb", ["x = 1"])
    page.goto(lab.lab_url("resumed.ipynb"))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    op = lab.api("POST", "jupyter-pause/api/sessions/pause", {"path": "resumed.ipynb"})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
    page.locator(BANNER).get_by_role("button", name="Resume").click()
    wait_resumed(page)
    assert lab.session_of("resumed.ipynb")["state"] == "ready"

    warning = page.locator(".Toastify__toast", has_text="will be paused")
    warning.get_by_role("button", name="Keep running").click(timeout=30_000)
    page.locator(".Toastify__toast", has_text="postponed until").wait_for()
    assert lab.session_of("resumed.ipynb")["state"] == "ready"


def test_the_offer_follows_the_checkpoints_that_exist(lab, page):
    """The saved state offered after a kernel died is deleted (the Saved state panel, the
    API): the banner offers the newest one left, which resumes, and nothing once none is."""
    open_with_state(lab, page, "offer.ipynb")  # the first checkpoint: answer == 42
    older = lab.session_of("offer.ipynb")["last_checkpoint"]["id"]
    kernel_id = lab.session_of("offer.ipynb")["kernel_id"]
    lab.client.execute(kernel_id, "answer = 43")
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": "offer.ipynb"})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
    newer = lab.session_of("offer.ipynb")["last_checkpoint"]["id"]
    assert newer != older

    pid = lab.client.evaluate(kernel_id, "import os\nprint(os.getpid())")
    os.kill(pid, signal.SIGKILL)
    banner = page.locator(BANNER)
    banner.get_by_text("Saved state from").wait_for(timeout=120_000)
    assert lab.session_of("offer.ipynb")["saved_state_unrestored"]["checkpoint"] == newer

    lab.api("DELETE", f"jupyter-pause/api/checkpoints/{newer}?path=offer.ipynb")
    offered = lab.session_of("offer.ipynb")["saved_state_unrestored"]
    assert offered["checkpoint"] == older, offered
    next_status(page)
    dialog = page.locator(".jp-Dialog", has_text="appears to have died")
    if dialog.count():
        dialog.get_by_role("button", name=re.compile("^ok$", re.IGNORECASE)).click()
    banner.get_by_role("button", name="Resume from it").click()
    wait_status(page, "Pause: Resumed")
    assert lab.client.evaluate(lab.session_of("offer.ipynb")["kernel_id"], "print(answer)") == 42


def test_no_offer_is_left_once_its_checkpoints_are_deleted(lab, page):
    open_with_state(lab, page, "gone.ipynb")
    saved = lab.session_of("gone.ipynb")["last_checkpoint"]["id"]
    kernel_id = lab.session_of("gone.ipynb")["kernel_id"]
    pid = lab.client.evaluate(kernel_id, "import os\nprint(os.getpid())")
    os.kill(pid, signal.SIGKILL)
    banner = page.locator(BANNER)
    banner.get_by_text("Saved state from").wait_for(timeout=120_000)
    lab.api("DELETE", f"jupyter-pause/api/checkpoints/{saved}?path=gone.ipynb")
    assert lab.session_of("gone.ipynb")["saved_state_unrestored"] is None
    banner.get_by_text("Saved state from").wait_for(state="hidden", timeout=60_000)
