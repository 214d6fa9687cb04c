"""Stops on a real hub: a user's server stopped by the Hub (not by a pause) saves its
notebooks through the ordinary pause path and never asks the Hub to stop it again;
the jupyter-pause-hub service ends promptly on SIGTERM or SIGINT, also when the hub
was started in the background (SIGINT ignored)."""

from __future__ import annotations

import signal

import psutil
import pytest

from ..helpers import wait_for
from .conftest import process_exited, service_pid
from .test_hub_pause import paused_sessions

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_service_stops_promptly_on_a_signal_when_the_hub_runs_in_the_background(
    hub_factory, signum
):
    hub = hub_factory(service={})
    hub.in_background = True
    hub.start()
    pid = service_pid(hub)
    assert psutil.Process(pid).is_running()

    psutil.Process(pid).send_signal(signum)

    # before the fix: SIGINT ignored, SIGTERM turned into that ignored SIGINT; the
    # Hub's timeouts ended it after 61 s
    wait_for(lambda: process_exited(pid), 15, "the service to exit after the signal")


def test_a_server_the_hub_stops_pauses_its_notebooks_and_resumes_after_its_next_start(
    hub_factory,
):
    hub = hub_factory()
    path = hub.add_notebook("alice")
    hub.start()
    alice = hub.spawn("alice")
    pid = hub.pid("alice")
    kernel = alice.open_notebook(path)["kernel"]["id"]
    assert alice.execute(kernel, "x = 41\nwords = {'a': [1, 2]}").ok

    code, body = hub.api("DELETE", "users/alice/server")  # "Stop My Server", an admin
    assert code in (202, 204), body
    hub.wait_stopped("alice")
    wait_for(lambda: process_exited(pid), 60, "alice's server process to exit")
    assert paused_sessions(hub, "alice") == {path: "paused"}

    alice = hub.spawn("alice")
    session = alice.session_status(path)
    assert session["state"] == "paused" and session["paused_by"] == "server-shutdown"
    kinds = [e["type"] for e in alice.events()]
    assert "not-saved" not in kinds and "workspace-stopped" not in kinds
    assert alice.wait(alice.resume(path))["outcome"] == "succeeded"
    kernel = alice.session_status(path)["kernel_id"]
    assert alice.evaluate(kernel, "print([x + 1, words['a'][1]])") == [42, 2]
