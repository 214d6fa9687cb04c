"""The staging lag in the status popover, read as a user sees it: with a bucket as the
checkpoint root (a real SeaweedFS), "In the bucket" says that the bucket holds nothing
yet, then that it is up to date once the background staging put the state there, then
how far behind the kernel it is after a cell."""

import json
import re

import pytest

from .conftest import STATUS_TEXT, run_cell, wait_status

pytestmark = pytest.mark.browser

#: staged after a second of use: a cell of two seconds asks for it
STAGE = {"gpu-interactive": {"stage_every": 1, "idle_threshold": 3600}}


def test_the_popover_says_how_far_behind_the_kernel_the_bucket_is(
    lab_factory, page, seaweed, bucket
):
    lab = lab_factory(
        [f"--PauseApp.workload_classes={json.dumps(STAGE)}"],
        env=seaweed.env(),
        checkpoints=f"s3://{bucket}/ck",
    )
    lab.write_notebook("nb.ipynb", ["import time\ntime.sleep(2)\nx = 1", "x += 1"])
    page.goto(lab.lab_url("nb.ipynb"))
    wait_status(page, "Pause: Live")
    popover(page).get_by_text("In the bucket").wait_for()
    popover(page).get_by_text("nothing yet").wait_for()

    run_cell(page, 0, None)  # past stage_every: staged in the background
    popover(page).get_by_text(re.compile(r"^up to date \(")).wait_for(timeout=120_000)

    run_cell(page, 1, None)  # a cell since: the bucket's state is behind the kernel's
    popover(page).get_by_text(re.compile(r" behind")).wait_for(timeout=60_000)


def popover(page):
    """The status popover, opened if a click elsewhere closed it (it follows the poll)."""
    shown = page.locator("[data-jp-pause='popover']")
    if not shown.is_visible():
        page.locator(STATUS_TEXT).click()
        shown.wait_for()
    return shown
