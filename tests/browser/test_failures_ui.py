"""A failure stays visible in the browser until something succeeds or the user dismisses
it: a pause, an autosave into a bucket that does not exist (a real SeaweedFS) says why
in a notice that stays, in the notification centre, in the status bar and its popover;
once the bucket exists and the state is saved, they go."""

import json

import pytest

from .conftest import STATUS_TEXT, run_cell, wait_status

pytestmark = pytest.mark.browser

BUCKET = "made-later"
URL = f"s3://{BUCKET}/checkpoints"
#: what a notice has room for: the store and the cause
CAUSE = f"RemoteStoreError: the checkpoint store {URL}: the bucket does not exist"
#: autosave after a second of use: a cell of two seconds asks for one
AUTOSAVE = {"gpu-interactive": {"autosave_every": 1, "idle_threshold": 3600}}


def polls(page, n=3):
    """Wait for the page's next ``n`` status answers: what it shows after them is what
    it makes of the server's state, not what it had shown before."""
    for _ in range(n):
        with page.expect_response(lambda r: "jupyter-pause/api/status" in r.url, timeout=60_000):
            pass


def test_a_failed_autosave_and_pause_stay_until_a_save_succeeds(lab_factory, page, seaweed):
    lab = lab_factory(
        [f"--PauseApp.workload_classes={json.dumps(AUTOSAVE)}"],
        env=seaweed.env(),
        checkpoints=URL,
    )
    lab.write_notebook("nb.ipynb", ["import time\ntime.sleep(2)\nx = 1"])
    page.goto(lab.lab_url("nb.ipynb"))
    wait_status(page, "Pause: Live")
    toasts = page.locator(".Toastify__toast")

    # an autosave this page did not start is saved here, and its upload to the bucket
    # (staging) fails: said, and it stays
    run_cell(page, 0, None)
    wait_status(page, "Pause: Live · upload failed", timeout=120_000)
    autosave = toasts.filter(has_text=f"nb.ipynb: {CAUSE}")
    autosave.wait_for()
    assert page.locator("[data-jp-pause='status']").get_attribute("data-state") == "problem"

    # a pause from the toolbar fails: its notice says why and stays too
    page.locator("jp-button[data-command='jupyter-pause:pause']:not([disabled])").click()
    pause = toasts.filter(has_text=f"Pausing nb.ipynb failed: {CAUSE}")
    pause.wait_for(timeout=120_000)
    wait_status(page, "Pause: Live · pause failed")
    polls(page)
    assert pause.is_visible() and autosave.is_visible()
    assert page.locator(STATUS_TEXT).inner_text() == "Pause: Live · pause failed"
    assert lab.session_of("nb.ipynb")["state"] == "running"  # nothing was lost

    # the status popover says what failed and why
    page.locator(STATUS_TEXT).click()
    popover = page.locator("[data-jp-pause='popover']")
    popover.get_by_text(f"pause failed: {CAUSE}").wait_for()
    page.locator(STATUS_TEXT).click()  # closed again
    # and so does the notification centre
    page.locator(".jp-Notification-Status").click()
    centre = page.locator(".jp-Notification-List-Item")
    centre.filter(has_text="Pausing nb.ipynb failed").wait_for()
    centre.filter(has_text="autosave").or_(
        centre.filter(has_text="nb.ipynb: RemoteStore")
    ).first.wait_for()
    page.locator(".jp-Notification-Status").click()

    # a page load tells the failure again: nobody dismissed it, and it is not over
    page.reload()
    wait_status(page, "Pause: Live · pause failed")
    told = toasts.filter(has_text="nb.ipynb: RemoteStoreError")
    told.wait_for()
    # dismissed in the notification centre, it is not told again after the next load
    page.locator(".jp-Notification-Status").click()
    listed = centre.filter(has_text="nb.ipynb: RemoteStoreError")
    listed.first.get_by_title("Dismiss notification").click()
    listed.first.wait_for(state="detached")
    page.reload()
    wait_status(page, "Pause: Live · pause failed")
    polls(page)
    assert toasts.filter(has_text="nb.ipynb: RemoteStoreError").count() == 0
    autosave = pause = told  # what is left to go once the store is fixed

    # the store is fixed and the state saved: the failures are over, and their notices go
    seaweed.create_bucket(BUCKET)
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": "nb.ipynb"})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
    wait_status(page, "Pause: Live")
    page.wait_for_function(
        f'document.querySelector("{STATUS_TEXT}")?.textContent === "Pause: Live"'
    )
    pause.wait_for(state="detached")
    autosave.wait_for(state="detached")
