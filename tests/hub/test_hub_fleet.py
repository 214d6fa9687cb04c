"""The fleet over a real hub: three users, two of whose servers are stopped (one
paused itself, one the Hub stopped), are all counted by ``jupyter pause report
--fleet``, the service's ``api/fleet``, its page (in chromium) and its metrics.
The stopped servers' figures are those they handed to the service as they stopped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ..helpers import wait_for
from .conftest import BIN, Hub

pytestmark = pytest.mark.slow

USERS = ("alice", "bob", "carol")
#: carol's server hands its rows over every second while it runs (default 300 s);
#: alice's and bob's only after a pause and as they stop
CONFIG = {user: {"PauseApp": {"fleet_interval": 1 if user == "carol" else 0}} for user in USERS}
#: where the test saves the fleet page as chromium shows it
SCREENSHOT = os.environ.get("JUPYTER_PAUSE_FLEET_SCREENSHOT", "")


def fleet_api(hub: Hub, token: str | None = None):
    return hub.request("GET", f"{hub.service_url}api/fleet", token=token)


def users_in(fleet: dict) -> dict[str, dict]:
    return {g["key"]: g for g in fleet["by_user"]}


@pytest.fixture(scope="module")
def fleet_hub(tmp_path_factory):
    """alice paused herself (her server stopped), the Hub stopped bob's server, and
    carol's runs; each ran a cell first."""
    hub = Hub(tmp_path_factory.mktemp("fleet"), service={"timeout": 3600, "check_interval": 1})
    for user in USERS:
        hub.configure_user(user, CONFIG[user])
        hub.add_notebook(user)
    try:
        hub.start()
        for user in USERS:
            client = hub.spawn(user)
            kernel = client.open_notebook("demo.ipynb")["kernel"]["id"]
            assert client.execute(kernel, "x = 41").ok
        hub.client("alice").pause("demo.ipynb")
        code, body = hub.api("DELETE", "users/bob/server")
        assert code in (202, 204), body
        hub.wait_stopped("alice")
        hub.wait_stopped("bob")
        yield hub
    finally:
        hub.stop()


def test_the_fleet_counts_all_three_users_also_the_two_stopped_servers(fleet_hub):
    hub = fleet_hub
    assert hub.server_model("alice") is None and hub.server_model("bob") is None
    assert hub.server_model("carol")["ready"]

    def all_three():
        code, fleet = fleet_api(hub)
        assert code == 200, fleet
        users = users_in(fleet)
        return set(users) == set(USERS) and users["carol"]["gpu_hours"]["allocated"] > 0 and fleet

    wait_for(all_three, 60, "the fleet to hold the rows of all three users")

    # the platform team's one command, as a separate process
    out = subprocess.run(
        [str(BIN / "jupyter-pause"), "report", "--fleet", "--hub", hub.service_url]
        + ["--token", hub.token, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    fleet = json.loads(out)
    users = users_in(fleet)
    assert set(users) == set(USERS)
    assert fleet["totals"]["notebooks"] == 3 and fleet["totals"]["servers"] == 3
    for user in USERS:
        assert users[user]["gpu_hours"]["allocated"] > 0, users[user]
    assert users["alice"]["paused"] == 1 and users["alice"]["pauses"] == 1
    assert users["bob"]["paused"] == 1  # the stop saved (paused) its notebook
    assert users["carol"]["paused"] == 0
    # LocalProcessSpawner: nobody can see nodes; carol released nothing
    assert users["alice"]["capacity_outcomes"]["text"] == "node outcome unknown"
    assert users["bob"]["capacity_outcomes"]["text"] == "node outcome unknown"
    assert users["carol"]["capacity_outcomes"]["text"] == "-"
    # a paused server's release counts until now: it grows while it stays stopped
    released = users["alice"]["gpu_hours"]["released"]
    assert released > 0
    wait_for(
        lambda: users_in(fleet_api(hub)[1])["alice"]["gpu_hours"]["released"] > released,
        30,
        "alice's released time to grow",
    )
    text = subprocess.run(
        [str(BIN / "jupyter-pause"), "report", "--fleet", "--hub", hub.service_url]
        + ["--token", hub.token],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert all(user in text for user in USERS) and "capacity outcome" in text, text

    # the metrics count the stopped servers' notebooks too
    code, metrics = hub.request("GET", f"{hub.service_url}metrics")
    assert code == 200
    for user in USERS:
        assert f'jupyter_pause_hub_fleet_accelerator_allocated_seconds_total{{user="{user}"' in (
            metrics
        ), metrics


def test_a_server_hands_over_only_its_own_rows_and_a_resend_counts_once(fleet_hub):
    hub = fleet_hub
    code, token = hub.api(
        "POST", "users/bob/tokens", {"scopes": ["access:services!service=jupyter-pause"]}
    )
    assert code == 201, token
    bob = token["token"]
    (row,) = [r for r in fleet_api(hub)[1]["rows"] if r["user"] == "bob"]
    row = {**row, "as_of": time.time()}
    url = f"{hub.service_url}api/fleet"
    assert hub.request("PUT", f"{url}/alice/", {"rows": [row]}, token=bob)[0] == 403
    assert fleet_api(hub, token=bob)[0] == 403  # the fleet is the admins'
    code, body = hub.request("PUT", f"{url}/bob/", {"rows": [row]}, token=bob)
    assert (code, body["taken"]) == (200, 1), body
    code, body = hub.request("PUT", f"{url}/bob/", {"rows": [row]}, token=bob)
    assert (code, body["taken"]) == (200, 0), body  # resent: nothing new
    code, body = hub.request("PUT", f"{url}/bob/", {"rows": [{**row, "gpus": -1}]}, token=bob)
    assert code == 400 and "gpus" in body["message"], body
    fleet = fleet_api(hub)[1]
    assert fleet["totals"]["notebooks"] == 3
    assert users_in(fleet)["bob"]["notebooks"] == 1


@pytest.mark.browser
def test_the_fleet_page_shows_every_user_to_an_admin(fleet_hub, tmp_path):
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.fail("Debian's chromium is needed for the browser tests: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    from ..browser.conftest import CHROMIUM_ARGS

    hub = fleet_hub
    wait_for(lambda: set(users_in(fleet_api(hub)[1])) == set(USERS), 60, "three users")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 700})
            page.set_default_timeout(60_000)
            page.goto(f"{hub.service_url}fleet")
            page.fill("input[name=username]", "admin")  # the dummy authenticator
            page.fill("input[name=password]", "any")
            page.click("input[type=submit], button[type=submit]")
            page.wait_for_selector("table.fleet")
            cells = page.locator("table.fleet td").all_inner_texts()
            for user in USERS:
                assert user in cells
            assert "unknown" in cells
            header = page.locator("table.fleet th").all_inner_texts()
            for column in ("allocated h", "active h", "released h", "capacity outcome"):
                assert column in header
            page.screenshot(
                path=str(Path(SCREENSHOT) if SCREENSHOT else tmp_path / "fleet.png"),
                full_page=True,
            )
        finally:
            browser.close()
