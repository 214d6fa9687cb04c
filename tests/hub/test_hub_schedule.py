"""A scheduled resume on a real JupyterHub: the server hands the time over to the
jupyter-pause-hub service before it stops; at that time the service starts it,
and the server restores the notebook by itself (no resume_on_start, no click)."""

from __future__ import annotations

import time

import pytest

from ..helpers import wait_for

pytestmark = pytest.mark.slow


def test_a_scheduled_resume_starts_the_server_and_the_notebook_is_ready(hub_factory):
    hub = hub_factory(service={"timeout": 3600, "check_interval": 1})
    path = hub.add_notebook("alice")
    hub.start()
    alice = hub.spawn("alice")
    kernel = alice.open_notebook(path)["kernel"]["id"]
    assert alice.execute(kernel, "x = 41").ok

    at = time.time() + 30
    op = alice.pause(path, resume_at=at)
    assert op["outcome"] == "running"
    hub.wait_stopped("alice")

    code, body = hub.request("GET", f"{hub.service_url}api/servers")
    assert code == 200, body
    (row,) = [s for s in body["servers"] if s["user"] == "alice"]
    assert row["state"] == "paused" and row["resumes_at"] == pytest.approx(at)

    # nobody starts it: the service does, at the time, and the notebook comes back
    wait_for(lambda: (hub.server_model("alice") or {}).get("ready"), 180,
             f"the service to start alice's server:\n{hub.log_tail()}")  # fmt: skip
    alice = hub.client("alice")
    session = wait_for(
        lambda: (s := alice.session_status(path)) and s["state"] == "ready" and s,
        180,
        "the scheduled resume of the notebook",
    )
    assert session["resumed_ahead"]["kind"] == "scheduled"
    assert alice.evaluate(session["kernel_id"], "print(x + 1)") == 42
    assert time.time() >= at
    types = [e["type"] for e in alice.events()]
    assert "resume-scheduled" in types and "scheduled-resume-started" in types
    code, body = hub.request("GET", f"{hub.service_url}api/servers")
    (row,) = [s for s in body["servers"] if s["user"] == "alice"]
    assert row["resumes_at"] is None


def test_a_user_may_schedule_only_their_own_server(hub_factory):
    hub = hub_factory(service={"timeout": 3600, "check_interval": 60})
    hub.start()
    hub.add_user("alice")
    hub.add_user("bob")
    code, token = hub.api(
        "POST", "users/bob/tokens", {"scopes": ["access:services!service=jupyter-pause"]}
    )
    assert code == 201, token
    url = f"{hub.service_url}api/schedules/alice/"
    code, body = hub.request("PUT", url, {"at": time.time() + 60}, token=token["token"])
    assert code == 403, body
    code, body = hub.request(
        "PUT", url.replace("alice", "bob"), {"at": "soon"}, token=token["token"]
    )
    assert code == 400, body
    code, body = hub.request("PUT", url.replace("alice", "bob"), {"at": time.time() + 60},
                             token=token["token"])  # fmt: skip
    assert code == 200 and body["schedule"]["kind"] == "scheduled", body
