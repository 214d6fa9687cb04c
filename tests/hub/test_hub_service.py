"""The jupyter-pause-hub service against a real hub: pause idle servers, never busy
ones, cull servers without jupyter-pause when so configured, keep users apart,
and survive a hub restart."""

from __future__ import annotations

import http.cookiejar
import re
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from jupyter_pause.engine import checks
from jupyter_pause.engine import paths as checkpoint_paths
from jupyter_pause.engine.errors import UntrustedCheckpoint

from ..helpers import wait_for
from .conftest import as_user, process_exited
from .test_hub_pause import paused_sessions

pytestmark = pytest.mark.slow

#: the server pauses itself only through the service in these tests
QUICK = {
    "PauseApp": {
        "idle_check_interval": 3600,
        "workload_classes": {
            "gpu-interactive": {"idle_threshold": 2, "min_running_time": 0, "warn_before": 0}
        },
    }
}
NO_PAUSE = {"ServerApp": {"jpserver_extensions": {"jupyter_pause": False}}}


def service_row(hub, user):
    code, body = hub.request("GET", f"{hub.service_url}api/servers")
    assert code == 200, body
    return next(r for r in body["servers"] if r["user"] == user and r["server"] == "")


def checkpoint_folder(hub, user, path):
    with as_user(user):
        nbdir = checkpoint_paths.notebook_dir(hub.data_dir(user) / "pause" / "checkpoints", path)
    (checkpoint_id,) = checks.checkpoint_ids(nbdir)
    return nbdir, checkpoint_id


def test_the_service_pauses_idle_servers_never_busy_ones_and_culls_those_without_jupyter_pause(
    hub_factory,
):
    hub = hub_factory(service={"timeout": 30, "check_interval": 1, "fallback": "cull"})
    for user in ("alice", "carol"):
        hub.configure_user(user, QUICK)
        hub.add_notebook(user)
    hub.configure_user("bob", NO_PAUSE)
    hub.start()

    alice, carol = hub.spawn("alice"), hub.spawn("carol")
    busy = alice.open_notebook("demo.ipynb")["kernel"]["id"]
    assert alice.execute(busy, "x = 1").ok
    idle = carol.open_notebook("demo.ipynb")["kernel"]["id"]
    assert carol.execute(idle, "y = 2").ok
    alice_pid, carol_pid = hub.pid("alice"), hub.pid("carol")
    # a silent, long cell (what the idle culler mistakes for idleness): sent, not awaited
    busy_since = time.time()
    assert alice.execute(busy, "import time; time.sleep(900)", timeout=1).status == "timeout"
    wait_for(
        lambda: any(
            s["kernel_id"] == busy and s["execution_state"] == "busy"
            for s in alice.status()["sessions"]
        ),
        60,
        "alice's kernel to be busy",
    )
    bob = hub.spawn("bob")
    bob_pid = hub.pid("bob")
    assert bob.request("GET", "api/status")  # a plain server, no jupyter-pause

    hub.wait_stopped("carol", timeout=180)
    assert wait_for(lambda: service_row(hub, "carol")["state"] == "paused", 60, "carol paused")
    assert paused_sessions(hub, "carol") == {"demo.ipynb": "paused"}
    wait_for(lambda: process_exited(carol_pid), 60, "carol's server to exit")

    hub.wait_stopped("bob", timeout=120)  # culled: the configured fallback
    assert service_row(hub, "bob")["state"] == "culled"
    wait_for(lambda: process_exited(bob_pid), 60, "bob's server to exit")

    # alice's kernel was busy all along: checked after the timeout passed, she still runs
    checks = wait_for(
        lambda: (row := service_row(hub, "alice"))["checked"] > busy_since + 35 and row,
        120,
        "a check of alice's server after the timeout",
    )
    assert checks["state"] == "running"
    assert "busy" in checks["decision"], checks
    assert hub.server_model("alice")["ready"]
    assert not process_exited(alice_pid)
    assert alice.session_status("demo.ipynb")["state"] == "running"

    # the admin page shows both, with the right buttons
    code, page = hub.request("GET", hub.service_url)
    assert code == 200
    assert "carol" in page and "paused" in page and "Start" in page and "Pause" in page
    code, _ = hub.request("POST", f"{hub.service_url}api/servers/carol//start")
    assert code == 202
    carol = hub.client("carol")
    wait_for(lambda: (hub.server_model("carol") or {}).get("ready"), 180, "carol to start")
    op = carol.wait(carol.resume("demo.ipynb"), timeout=180)
    assert op["outcome"] == "succeeded", op
    kernel = carol.session_status("demo.ipynb")["kernel_id"]
    assert carol.evaluate(kernel, "print(y)") == 2


def test_two_users_checkpoints_never_mix_and_a_hub_restart_loses_nothing(hub_factory):
    hub = hub_factory(service={"timeout": 3600, "check_interval": 1})
    for user in ("alice", "carol"):
        hub.add_notebook(user)
    hub.start()
    values = {"alice": 41, "carol": 7}
    for user, value in values.items():
        client = hub.spawn(user)
        kernel = client.open_notebook("demo.ipynb")["kernel"]["id"]
        assert client.execute(kernel, f"x = {value}").ok
        code, _ = hub.request("POST", f"{hub.service_url}api/servers/{user}//pause")
        assert code == 202
        hub.wait_stopped(user)
        wait_for(lambda u=user: service_row(hub, u)["state"] == "paused", 60, "paused")

    # each checkpoint is in its owner's data directory and signed with its owner's key
    keys = {u: (hub.data_dir(u) / "pause" / "secret").read_bytes() for u in values}
    assert keys["alice"] != keys["carol"]
    for user, other in (("alice", "carol"), ("carol", "alice")):
        nbdir, checkpoint_id = checkpoint_folder(hub, user, "demo.ipynb")
        assert str(hub.home(user)) in str(nbdir)
        with as_user(user):
            checks.read_manifest(nbdir, checkpoint_id, key=keys[user])
            with pytest.raises(UntrustedCheckpoint):
                checks.read_manifest(nbdir, checkpoint_id, key=keys[other])

    hub.stop()
    hub.start()
    assert hub.server_model("alice") is None
    assert service_row(hub, "alice")["state"] == "paused"  # the service remembers
    alice = hub.spawn("alice")
    assert alice.session_status("demo.ipynb")["state"] == "paused"
    op = alice.wait(alice.resume("demo.ipynb"), timeout=180)
    assert op["outcome"] == "succeeded", op
    kernel = alice.session_status("demo.ipynb")["kernel_id"]
    assert alice.evaluate(kernel, "print(x + 1)") == 42


class Browser:
    """Cookies and redirects, as a browser: logs in to the Hub, then OAuth to the service."""

    def __init__(self, hub):
        self.hub = hub
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def open(self, url, form=None):
        data = None if form is None else urllib.parse.urlencode(form).encode()
        try:
            with self.opener.open(urllib.request.Request(url, data=data), timeout=60) as r:
                return r.status, r.geturl(), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, url, e.read().decode(errors="replace")

    def login(self, user):
        _, _, page = self.open(f"{self.hub.url}/hub/login")
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)
        code, _, _ = self.open(
            f"{self.hub.url}/hub/login", {"username": user, "password": "x", "_xsrf": xsrf}
        )
        assert code == 200


def test_the_admin_page_needs_an_admin_and_its_buttons_the_xsrf_token(hub_factory):
    hub = hub_factory(service={"timeout": 3600, "check_interval": 60})
    hub.add_notebook("alice")
    hub.start()
    hub.add_user("alice")

    someone = Browser(hub)
    someone.login("mallory")
    code, _, _ = someone.open(hub.service_url)
    assert code == 403  # not an admin

    admin = Browser(hub)
    admin.login("admin")
    code, url, page = admin.open(hub.service_url)
    assert code == 200 and url.startswith(hub.service_url), (code, url)
    assert "alice" in page and "Start" in page
    action = re.search(r"action='(api/servers/alice//start)'", page).group(1)
    xsrf = re.search(r"name='_xsrf' value='([^']+)'", page).group(1)

    code, _, _ = admin.open(hub.service_url + action, {})  # a forged form: no token
    assert code == 403
    assert hub.server_model("alice") is None

    code, url, _ = admin.open(hub.service_url + action, {"_xsrf": xsrf})
    assert code == 200 and url.rstrip("/") == hub.service_url.rstrip("/")  # back to the page
    wait_for(lambda: (hub.server_model("alice") or {}).get("ready"), 180, "alice to start")

    # no notebook runs: nothing to checkpoint, the service has the Hub stop the server
    code, _ = hub.request("POST", f"{hub.service_url}api/servers/alice//pause")
    assert code == 202
    hub.wait_stopped("alice")
    wait_for(lambda: service_row(hub, "alice")["state"] == "paused", 60, "alice paused")
    code, body = hub.request("POST", f"{hub.service_url}api/servers/alice//pause")
    assert code == 409 and "not running" in body["message"]
