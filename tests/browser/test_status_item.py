"""The status bar item, read as a user sees it."""

import pytest

from .conftest import write_notebook

pytestmark = pytest.mark.browser


def test_status_bar_shows_the_notebook_pause_state(lab, page):
    write_notebook(lab.root, "hello.ipynb", ["x = 41 + 1\nx"])
    page.goto(lab.lab_url("hello.ipynb"))
    item = page.locator("[data-jp-pause='status']")
    item.wait_for(state="visible")
    # the kernel starts with the notebook; the item follows the server's word
    page.wait_for_function(
        "document.querySelector(\"[data-jp-pause='status']\").textContent === 'Pause: Running'"
    )
    assert item.get_attribute("data-state") == "running"
    status = lab.api("GET", "jupyter-pause/api/status")
    assert [s["state"] for s in status["sessions"] if s["path"] == "hello.ipynb"] == ["running"]
