"""The fleet over a real hub: three users, two of whose servers are stopped (one
paused itself, one the Hub stopped), are all counted by ``jupyter pause report
--fleet``, the service's ``api/fleet``, its page (in chromium) and its metrics.
The stopped servers' figures are those they handed to the service as they stopped.

Each user's ledger also holds an earlier day on a Kubernetes node, with what the
node follower recorded of it (``CAPACITY_OUTCOME`` spans, as
``tests/kubernetes/test_k8s_nodes.py`` has the real backends write them):
alice's node idled, then was scaled down; a training job reused bob's GPU, then
carol's pod kept the node up; nobody followed carol's.  The LocalProcessSpawner
here sees no nodes, so today's pauses stay "unknown"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_pause.capacity import CapacitySpan
from jupyter_pause.ledger import EventType, Ledger

from ..helpers import wait_for
from .conftest import BIN, Hub

pytestmark = pytest.mark.slow

USERS = ("alice", "bob", "carol")
#: carol's server hands its rows over every second while it runs (default 300 s);
#: alice's and bob's only after a pause and as they stop
#: this machine has no GPU: each kernel counts as holding one, as on a GPU machine
CONFIG = {
    user: {"PauseApp": {"fleet_interval": 1 if user == "carol" else 0, "kernel_accelerators": 1}}
    for user in USERS
}
#: where the test saves the fleet page as chromium shows it
SCREENSHOT = os.environ.get("JUPYTER_PAUSE_FLEET_SCREENSHOT", "")
H = 3600.0
#: the earlier day's node outcomes, from the release on: (outcome, from, to, reused by)
EARLIER = {
    "alice": [("idle", 0, 600, ""), ("scaled-down", 600, 4 * H, "")],
    "bob": [("reused", 0, 2 * H, "ml/training"), ("kept-up", 2 * H, 4 * H, "")],
    "carol": [],
}
#: and how long each user's resume took then (request to the next cell runnable)
RESUME_S = {"alice": 42.0, "bob": 95.0, "carol": 31.0}


def earlier_day(hub: Hub, user: str) -> None:
    """A day ago, ``demo.ipynb`` ran 2 h on a 1-GPU node, paused for 4 h and resumed."""
    folder = hub.data_dir(user) / "pause"
    folder.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(folder / "ledger.sqlite3", user=user)
    path, t0, node = "demo.ipynb", time.time() - 30 * H, f"gke-gpu-pool-{user}"
    released, back = t0 + 2 * H + 20, t0 + 6 * H + 20
    record = ledger.record
    record(EventType.KERNEL_STARTED, path=path, time_=t0, gpus=1)
    record(EventType.CELL_EXECUTED, path=path, time_=t0 + H, duration=H)
    record(EventType.PAUSE_REQUESTED, path=path, time_=t0 + 2 * H)
    record(EventType.ACCELERATOR_RELEASED, path=path, time_=released, gpus=1, node=node)
    record(EventType.PAUSED, path=path, time_=released)
    for outcome, start, end, by in EARLIER[user]:
        namespace, _, cls = by.partition("/")
        span = CapacitySpan(outcome, released + start, released + end, 1, 1.0, node,
                            "nvidia-l4", by_namespace=namespace, by_class=cls)  # fmt: skip
        record(EventType.CAPACITY_OUTCOME, time_=span.start, **span.to_json())
    record(EventType.RESUME_REQUESTED, path=path, time_=back)
    record(EventType.CAPACITY_ACQUIRED, path=path, time_=back)
    record(EventType.FIRST_CELL_RUNNABLE, path=path, time_=back + RESUME_S[user])
    record(EventType.KERNEL_STOPPED, path=path, time_=back + H)
    ledger.close()


def fleet_api(hub: Hub, token: str | None = None):
    return hub.request("GET", f"{hub.service_url}api/fleet", token=token)


def users_in(fleet: dict) -> dict[str, dict]:
    return {g["key"]: g for g in fleet["by_user"]}


def approx(value, abs=1e-3):
    return pytest.approx(value, abs=abs)


@pytest.fixture(scope="module")
def fleet_hub(tmp_path_factory):
    """alice paused herself (her server stopped), the Hub stopped bob's server, and
    carol's runs; each ran a cell first."""
    hub = Hub(tmp_path_factory.mktemp("fleet"), service={"timeout": 3600, "check_interval": 1})
    for user in USERS:
        hub.configure_user(user, CONFIG[user])
        hub.add_notebook(user)
        earlier_day(hub, user)
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
    assert users["alice"]["paused"] == 1 and users["alice"]["pauses"] == 2  # and yesterday
    assert users["bob"]["paused"] == 1  # the stop saved (paused) its notebook
    assert users["carol"]["paused"] == 0
    # the earlier day's node outcomes, handed over by each server; today's release
    # (LocalProcessSpawner: nobody sees the node) and all of carol's are unknown
    outcomes = {user: users[user]["capacity_outcomes"] for user in USERS}
    assert outcomes["alice"]["hours"] == approx({"idle": 600 / H, "scaled-down": 4 - 600 / H})
    assert outcomes["bob"]["hours"] == approx({"reused": 2.0, "kept-up": 2.0})
    assert outcomes["carol"]["hours"] == {}
    for user in ("alice", "bob"):
        today = users[user]["gpu_hours"]["released"] - 4  # released since today's stop
        assert outcomes[user]["unknown_hours"] == approx(today, abs=1e-6)
        assert 0 < today < 1
    assert outcomes["alice"]["text"].startswith("scaled-down 3.83 h, idle 0.17 h")
    assert outcomes["bob"]["text"].startswith("reused 2.00 h, kept-up 2.00 h")
    assert outcomes["carol"]["text"] == "node outcome unknown"
    assert outcomes["carol"]["unknown_hours"] == approx(4)
    for user in USERS:  # and the other columns, from the same ledgers
        assert users[user]["resume_latency_s"]["median"] == approx(RESUME_S[user])
        assert users[user]["gpu_hours"]["active"] >= 1  # the earlier day's hour of cells
        assert users[user]["gpu_hours"]["allocated"] > 2 + 5 / H
    for user in ("alice", "bob"):  # their checkpoints, measured as the servers stopped
        assert users[user]["storage_bytes"] > 0
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
    assert "reused 2.00 h, kept-up 2.00 h" in text and "node outcome unknown" in text, text

    # the metrics count the stopped servers' notebooks too
    code, metrics = hub.request("GET", f"{hub.service_url}metrics")
    assert code == 200
    for user in USERS:
        assert f'jupyter_pause_hub_fleet_accelerator_allocated_seconds_total{{user="{user}"' in (
            metrics
        ), metrics
    released = {
        (s.labels["user"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "jupyter_pause_hub_fleet_released_outcome_seconds"
    }
    assert released[("bob", "reused")] == approx(2 * H)
    assert released[("alice", "scaled-down")] == approx(4 * H - 600)
    assert released[("carol", "unknown")] == approx(4 * H)
    assert released[("carol", "reused")] == 0


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
            page = browser.new_page(viewport={"width": 1600, "height": 420})
            page.set_default_timeout(60_000)
            page.goto(f"{hub.service_url}fleet")
            page.fill("input[name=username]", "admin")  # the dummy authenticator
            page.fill("input[name=password]", "any")
            page.click("input[type=submit], button[type=submit]")
            page.wait_for_selector("table.fleet")
            cells = page.locator("table.fleet td").all_inner_texts()
            for user in USERS:
                assert user in cells
            assert "node outcome unknown" in cells  # carol
            assert any(c.startswith("reused 2.00 h, kept-up 2.00 h") for c in cells)
            header = page.locator("table.fleet th").all_inner_texts()
            for column in ("allocated h", "active h", "released h", "capacity outcome"):
                assert column in header
            page.screenshot(
                path=str(Path(SCREENSHOT) if SCREENSHOT else tmp_path / "fleet.png"),
                full_page=True,
            )
        finally:
            browser.close()
