"""A scheduled resume on a real JupyterHub: the server hands the time over to the
jupyter-pause-hub service before it stops; at that time the service starts it,
and the server restores the notebook by itself (no resume_on_start, no click)."""

from __future__ import annotations

import html
import json
import re
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


def test_a_plain_user_cannot_break_the_service_with_schedules(hub_factory):
    """Times that are no dates are refused (and an old one on record does not break the
    page), a server the Hub does not know cannot be scheduled, a start the Hub refuses
    is given up after start_tries, and a pauses.json emptied by a power loss is said."""
    hub = hub_factory(
        service={"timeout": 3600, "check_interval": 1, "start_tries": 3, "start_retry_delay": 1}
    )
    records = hub.dir / "service" / "pauses.json"
    records.parent.mkdir(parents=True)
    due = {"at": time.time() - 60, "kind": "scheduled"}
    records.write_text(
        json.dumps(
            {
                "version": 1,
                "servers": {  # written before times were checked
                    "olduser/": {"state": "paused", "schedule": {"at": 1e300, "kind": "scheduled"}},
                    # the Hub has this user from its start, but named servers are not
                    # enabled: the Hub answers 400
                    "admin/gpu": {"state": "paused", "schedule": due},
                },
            }
        )
    )
    hub.start()
    for user in ("alice", "bob"):
        hub.add_user(user)
    code, token = hub.api(
        "POST", "users/alice/tokens", {"scopes": ["access:services!service=jupyter-pause"]}
    )
    assert code == 201, token
    url = f"{hub.service_url}api/schedules/alice/"
    for at in (1e300, -1e300, 253_402_300_800.0):  # the last: year 10000
        code, body = hub.request("PUT", url, {"at": at}, token=token["token"])
        assert code == 400 and "'at' must be epoch seconds between" in body["message"], body
    code, body = hub.request("GET", hub.service_url)
    assert code == 200 and "olduser" in body and "not a date" in body, body

    code, body = hub.request("PUT", f"{hub.service_url}api/schedules/nobody/", {"at": time.time()})
    assert code == 404 and "no user 'nobody'" in body["message"], body
    code, body = hub.request("PUT", f"{url}gpu", {"at": time.time()}, token=token["token"])
    assert code == 404 and "alice has no server named 'gpu'" in body["message"], body

    row = wait_for(
        lambda: (
            ((r := service_row(hub, "admin", "gpu"))["error"] or "").startswith("gave up") and r
        ),
        120,
        f"the service to give up starting admin/gpu:\n{hub.log_tail()}",
    )
    assert "after 3 tries" in row["error"] and "HTTP 400" in row["error"], row
    assert row["resumes_at"] is None
    starts = re.findall(
        r"\d+ POST /hub/api/users/admin/servers/gpu \(jupyter-pause@", hub.log_path.read_text()
    )
    assert len(starts) == 3

    # bob's server is scheduled, then bob is deleted: the Hub's 404 is final
    code, body = hub.request(
        "PUT", f"{hub.service_url}api/schedules/bob/", {"at": time.time() + 10}
    )
    assert code == 200, body
    assert hub.api("DELETE", "users/bob")[0] == 204
    row = wait_for(
        lambda: ((r := service_row(hub, "bob"))["error"] or "").startswith("gave up") and r,
        120,
        "the service to give up starting bob's server",
    )
    assert "after 1 try" in row["error"] and "HTTP 404" in row["error"], row

    # alice's server is scheduled; a power loss leaves pauses.json empty
    code, body = hub.request("PUT", url, {"at": time.time() + 3600}, token=token["token"])
    assert code == 200, body
    hub.stop()
    records.write_bytes(b"")
    hub.start()
    code, body = hub.request("GET", f"{hub.service_url}api/servers")
    assert code == 200, body
    (problem,) = body["problems"]
    (aside,) = records.parent.glob("pauses.json.damaged-*")
    assert f"{records} was damaged (it is empty) and is kept as {aside}" in problem
    code, page = hub.request("GET", hub.service_url)
    assert code == 200 and html.escape(problem) in page
    assert "pauses.json was damaged" in hub.log_tail(20000)


def service_row(hub, user, server=""):
    code, body = hub.request("GET", f"{hub.service_url}api/servers")
    assert code == 200, body
    return next(r for r in body["servers"] if r["user"] == user and r["server"] == server)
