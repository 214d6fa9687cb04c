"""The service's decisions and bookkeeping, and the backend's selection (no hub needed)."""

from __future__ import annotations

import datetime as dt

import pytest

from jupyter_pause.backends import backend_class_for
from jupyter_pause.backends.jupyterhub import JupyterHubBackend, running_under_hub
from jupyter_pause.backends.local import LocalBackend
from jupyter_pause.hub.policy import decide
from jupyter_pause.hub.service import PauseService, week_start

NOW = 1_800_000_000.0


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()


def server(idle: float = 0.0, **extra):
    return {"ready": True, "pending": None, "last_activity": iso(NOW - idle), **extra}


def session(path="a.ipynb", *, busy=False, seconds_left=0.0, state="running", cls="x"):
    return {
        "path": path,
        "busy": busy,
        "seconds_left": seconds_left,
        "state": state,
        "workload_class": cls,
        "reasons": ["the kernel is busy running a cell"] if busy else [],
    }


def activity(*sessions, idle=0.0):
    return {"server": {"idle_seconds": idle}, "sessions": list(sessions)}


def test_an_idle_server_is_paused_through_one_of_its_live_notebooks():
    d = decide(
        server(idle=10),
        activity(session("p.ipynb", state="paused"), session("b.ipynb"), idle=700),
        has_pause=True,
        now=NOW,
        timeout=600,
    )
    assert (d.action, d.path) == ("pause", "b.ipynb")


@pytest.mark.parametrize(
    "sessions, idle, why",
    [
        ([session(busy=True)], 10_000, "busy"),  # busy is never idle, however quiet
        ([session(), session("b", seconds_left=None, cls="never")], 10_000, "never"),
        ([session(seconds_left=120, cls="long-running")], 10_000, "120 s"),
        ([session()], 599, "less than"),
    ],
)
def test_a_server_is_kept_while_a_notebook_or_its_class_says_so(sessions, idle, why):
    d = decide(
        server(idle=10_000), activity(*sessions, idle=idle), has_pause=True, now=NOW, timeout=600
    )
    assert d.action == "keep" and why in d.reason, d


def test_a_server_without_notebooks_is_judged_by_the_hubs_last_activity():
    assert (
        decide(server(idle=30), activity(), has_pause=True, now=NOW, timeout=600).action == "keep"
    )
    d = decide(server(idle=601), activity(), has_pause=True, now=NOW, timeout=600)
    assert (d.action, d.path) == ("pause", None)  # nothing to checkpoint: the Hub stops it
    # auto-pause off on the server: no activity endpoint, the Hub's clock decides
    d = decide(server(idle=601), None, has_pause=True, now=NOW, timeout=600)
    assert d.action == "pause"


def test_a_server_without_jupyter_pause_follows_the_fallback():
    idle = server(idle=601)
    assert decide(idle, None, has_pause=False, now=NOW, timeout=600).action == "keep"
    assert (
        decide(idle, None, has_pause=False, now=NOW, timeout=600, fallback="cull").action == "cull"
    )
    recent = server(idle=5)
    assert (
        decide(recent, None, has_pause=False, now=NOW, timeout=600, fallback="cull").action
        == "keep"
    )


def test_a_server_that_is_starting_or_stopping_is_left_alone():
    for model in (server(idle=10_000, pending="spawn"), server(idle=10_000, ready=False)):
        d = decide(model, activity(), has_pause=True, now=NOW, timeout=1, fallback="cull")
        assert d.action == "keep"


def test_released_hours_add_the_pause_going_on_to_the_servers_report():
    monday = week_start(NOW)
    assert dt.datetime.fromtimestamp(monday, dt.timezone.utc).weekday() == 0
    assert monday <= NOW < monday + 7 * 86400
    record = {"released_hours": 1.5, "stopped": NOW - 7200, "report_time": NOW - 7300, "gpus": 2}
    assert PauseService.released_hours(record, "paused", NOW) == pytest.approx(1.5 + 2 * 2)
    assert PauseService.released_hours(record, "running", NOW) == pytest.approx(1.5)


def test_the_backend_is_chosen_automatically_under_a_hub(monkeypatch):
    for name in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_USER"):
        monkeypatch.delenv(name, raising=False)
    assert not running_under_hub()
    assert backend_class_for("auto") is LocalBackend
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret")
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    assert backend_class_for("auto") is JupyterHubBackend
    assert backend_class_for("local") is LocalBackend  # an explicit choice wins


def test_the_example_hub_config_grants_the_roles_and_runs_the_service(monkeypatch):
    from .conftest import deploy_config

    config = deploy_config()
    roles = {r["name"]: r for r in config.JupyterHub.load_roles}
    assert "delete:servers!server" in roles["server"]["scopes"]
    assert {"users:activity!user", "access:servers!server"} <= set(roles["server"]["scopes"])
    (service,) = config.JupyterHub.services
    assert roles["jupyter-pause"]["services"] == [service["name"]]
    assert service["command"][0].endswith("jupyter-pause-hub")
    app = PauseService()
    app.parse_command_line(service["command"][1:])
    assert (app.timeout, app.fallback, app.proxy_url) == (1800, "leave", "http://127.0.0.1:8000")
