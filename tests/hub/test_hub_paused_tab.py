"""On JupyterHub a pause stops the whole server, and the open tab loses its
connection: it says the server was paused (when, why) and offers to start it and
resume, never JupyterLab's "Server unavailable or unreachable"; the Hub's admin page
says paused, with the server's own reason and time (a real hub, a real chromium)."""

from __future__ import annotations

import time

import pytest

from ..browser.conftest import CHROMIUM, CHROMIUM_ARGS, STATUS_TEXT
from .conftest import ROOT
from .test_hub_service import service_row

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


def login(page, hub, user: str) -> None:
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", "x")
    page.locator("input[type=submit], button[type=submit]").first.click()


def test_the_tab_of_a_server_that_paused_itself_says_paused_and_offers_start(hub_factory, page):
    # the service's own idle policy never acts here: what it shows is the server's word
    hub = hub_factory(service={"timeout": 3600, "check_interval": 1})
    path = hub.add_notebook("alice")
    use_this_build(hub, "alice")
    hub.start()
    alice = hub.spawn("alice")

    login(page, hub, "alice")
    page.goto(f"{hub.url}/user/alice/lab/tree/{path}?reset")
    page.wait_for_function(
        f'document.querySelector("{STATUS_TEXT}")?.textContent.startsWith("Pause: Live")'
    )
    kernel_id = alice.session_status(path)["kernel_id"]
    assert alice.execute(kernel_id, "answer = 6 * 7").ok

    before = time.time()
    alice.pause(path)  # as the toolbar, %pause or its idle policy would
    hub.wait_stopped("alice")
    dialog = page.locator(".jp-Dialog", has_text="This server was paused at")
    dialog.wait_for()
    assert "(paused on request)" in dialog.inner_text()
    assert page.locator(".jp-Dialog", has_text="Server unavailable").count() == 0

    # the Hub's admin page says paused, with the server's own reason and time
    admin = page.context.browser.new_page()
    try:
        login(admin, hub, "admin")
        admin.goto(hub.service_url)
        row = admin.locator("tr", has_text="alice")
        row.locator("td.paused", has_text="paused").wait_for(timeout=60_000)
        note = row.locator("td").nth(5).inner_text()
        assert note.startswith("paused by its user at "), note
        assert before <= service_row(hub, "alice")["paused_at"] <= time.time()
    finally:
        admin.close()

    dialog.get_by_role("button", name="Start and resume").click()
    page.wait_for_url(f"{hub.url}/user/alice/**", timeout=180_000)
    page.locator(".jp-LabShell").wait_for(timeout=180_000)
    # the restarted page resumes the notebook the pause stopped, and its tab follows
    page.wait_for_function(
        f'document.querySelector("{STATUS_TEXT}")?.textContent === "Pause: Resumed"',
        timeout=180_000,
    )
    alice = hub.client("alice")
    kernel_id = alice.session_status(path)["kernel_id"]
    assert alice.evaluate(kernel_id, "print(answer)") == 42
    assert page.locator(".jp-Dialog", has_text="Server unavailable").count() == 0
    assert page.locator(".jp-Dialog", has_text="This server was paused").count() == 0
