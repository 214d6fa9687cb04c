"""A server that pauses itself (its own idle policy, on the jupyterhub backend) tells
the jupyter-pause-hub service, so the admin page says ``paused``, with its own
reason and time, never ``stopped`` with a reason left from before (a real hub)."""

from __future__ import annotations

import json
import time

import pytest

from ..helpers import wait_for
from .test_hub_service import Browser, service_row

pytestmark = pytest.mark.slow

#: the server's own idle policy pauses it; the service's idle timeout never acts
SELF_PAUSING = {
    "PauseApp": {
        "idle_check_interval": 0.5,
        "workload_classes": {
            "gpu-interactive": {"idle_threshold": 3, "min_running_time": 0, "warn_before": 0}
        },
    }
}


def test_a_server_that_paused_itself_is_paused_on_the_admin_page_with_its_reason_and_time(
    hub_factory,
):
    hub = hub_factory(service={"timeout": 3600, "check_interval": 1})
    hub.configure_user("alice", SELF_PAUSING)
    path = hub.add_notebook("alice")
    hub.start()
    alice = hub.spawn("alice")
    kernel = alice.open_notebook(path)["kernel"]["id"]
    assert alice.execute(kernel, "x = 1").ok
    # the service has seen it running, and has its own (idle) decision about it
    wait_for(lambda: service_row(hub, "alice")["state"] == "running", 60, "the service's look")
    before = time.time()

    hub.wait_stopped("alice", timeout=180)  # its idle policy paused it
    row = wait_for(
        lambda: (r := service_row(hub, "alice"))["state"] != "running" and r, 60, "the page"
    )
    assert row["state"] == "paused", row
    assert row["reason"] == "paused automatically: idle", row
    assert before <= row["paused_at"] <= time.time(), row

    admin = Browser(hub)
    admin.login("admin")
    code, _, page = admin.open(hub.service_url)
    assert code == 200
    assert "<td class='paused'>paused</td>" in page
    assert "paused automatically: idle at " in page


def test_a_pause_is_reported_by_its_owner_for_a_server_the_hub_knows_with_a_date(
    hub_factory,
):
    """Only for a server the Hub knows, so that a user's own token cannot fill every
    admin's page (and the metrics) with servers that do not exist; and a server the Hub
    no longer lists is forgotten at the next walk."""
    hub = hub_factory(service={"timeout": 3600, "check_interval": 1})
    hub.start()
    for user in ("alice", "bob", "carol"):
        hub.add_user(user)
    code, token = hub.api(
        "POST", "users/alice/tokens", {"scopes": ["access:services!service=jupyter-pause"]}
    )
    assert code == 201, token
    report = {"at": time.time(), "reason": "paused by its user"}
    url = f"{hub.service_url}api/pauses"
    code, body = hub.request("PUT", f"{url}/bob/", report, token=token["token"])
    assert code == 403, body  # alice may not say bob's server paused
    assert body["message"] == "only bob or an admin may report the pause of bob's server"
    for at in (float("nan"), 1e300, time.time() + 3600):
        code, body = hub.request("PUT", f"{url}/alice/", {"at": at}, token=token["token"])
        assert code == 400 and "'at' must be epoch seconds between" in body["message"], body
    code, body = hub.request("PUT", f"{url}/alice/", {"reason": "x"}, token=token["token"])
    assert code == 400, body
    for n in range(5):
        code, body = hub.request("PUT", f"{url}/alice/ghost{n}", report, token=token["token"])
        assert code == 404 and f"alice has no server named 'ghost{n}'" in body["message"], body
    code, body = hub.request("PUT", f"{url}/nobody/", report)  # an admin's, for no user
    assert code == 404 and "the Hub has no user 'nobody'" in body["message"], body
    code, _ = hub.request("PUT", f"{url}/alice/", report, token=token["token"])
    assert code == 204
    row = service_row(hub, "alice")
    assert row["state"] == "paused" and row["reason"] == "paused by its user", row
    code, _ = hub.request("PUT", f"{url}/carol/", report)
    assert code == 204

    def rows():
        code, body = hub.request("GET", f"{hub.service_url}api/servers")
        assert code == 200, body
        return {(r["user"], r["server"]): r["state"] for r in body["servers"]}

    def records():
        return sorted(json.loads((hub.dir / "service" / "pauses.json").read_text())["servers"])

    assert {k: v for k, v in rows().items() if k[0] in ("alice", "carol")} == {
        ("alice", ""): "paused",
        ("carol", ""): "paused",
    }
    assert records() == ["alice/", "carol/"]
    # carol is deleted from the Hub: her record goes at the service's next walk
    assert hub.api("DELETE", "users/carol")[0] == 204
    wait_for(lambda: ("carol", "") not in rows(), 60, "carol's record to go")
    assert ("alice", "") in rows() and records() == ["alice/"]
