"""On JupyterHub a pause stops the whole server, and the open tab loses its
connection: it says the server was paused (when, why) and offers to start it,
never JupyterLab's "Server unavailable or unreachable" (a real hub, a real
chromium)."""

from __future__ import annotations

import pytest

from ..browser.conftest import CHROMIUM, CHROMIUM_ARGS, STATUS_TEXT
from .conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(120_000)
        yield page
        browser.close()


def use_this_build(hub, user: str) -> None:
    """The user's server loads this checkout's JupyterLab extension, before any
    the virtualenv has (another checkout's)."""
    folder = hub.home(user) / "labextensions"
    folder.mkdir(exist_ok=True)
    (folder / "jupyter-pause").symlink_to(ROOT / "jupyter_pause" / "labextension")
    hub.configure_user(user, {"LabApp": {"extra_labextensions_path": [str(folder)]}})


def test_the_tab_of_a_server_that_paused_itself_says_paused_and_offers_start(hub_factory, page):
    hub = hub_factory()
    path = hub.add_notebook("alice")
    use_this_build(hub, "alice")
    hub.start()
    alice = hub.spawn("alice")

    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "x")
    page.locator("input[type=submit], button[type=submit]").first.click()
    page.goto(f"{hub.url}/user/alice/lab/tree/{path}?reset")
    page.wait_for_function(
        f'document.querySelector("{STATUS_TEXT}")?.textContent.startsWith("Pause: Live")'
    )

    alice.pause(path)  # as the toolbar, %pause or its idle policy would
    hub.wait_stopped("alice")
    dialog = page.locator(".jp-Dialog", has_text="This server was paused at")
    try:
        dialog.wait_for()
    except Exception:
        page.screenshot(path="/tmp/i26-banner-hub.png")
        raise
    assert "paused on request" in dialog.inner_text()
    assert page.locator(".jp-Dialog", has_text="Server unavailable").count() == 0

    dialog.get_by_role("button", name="Start and resume").click()
    page.wait_for_url(f"{hub.url}/user/alice/**", timeout=180_000)
    page.locator(".jp-LabShell").wait_for(timeout=180_000)
    assert page.locator(".jp-Dialog", has_text="Server unavailable").count() == 0
    assert page.locator(".jp-Dialog", has_text="This server was paused").count() == 0
