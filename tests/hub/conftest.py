"""A real JupyterHub with the real configurable-http-proxy, on 127.0.0.1.

Users' servers are spawned by ``SimpleLocalProcessSpawner`` (the hub's own
Unix user, one home directory per hub user, so each server has its own
Jupyter data directory and therefore its own checkpoint signing key) running
``jupyterhub-singleuser`` from this virtualenv, which loads jupyter-pause.
The tests talk to the Hub REST API and, through the proxy, to the users'
servers with an admin service token.  Nothing is mocked.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_pause.client import PauseClient, free_port

from ..helpers import wait_for, write_notebooks

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROXY = shutil.which("configurable-http-proxy") or str(
    ROOT / ".venv" / "hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
)


def deploy_config():
    """The example hub config (deploy/jupyterhub): the tests use its roles."""
    from traitlets.config.loader import PyFileConfigLoader

    folder = ROOT / "deploy" / "jupyterhub"
    return PyFileConfigLoader("jupyterhub_config.py", path=str(folder)).load_config()


ROLES = {role["name"]: role for role in deploy_config().JupyterHub.load_roles}


class PortTaken(AssertionError):
    """The hub or its proxy could not bind a port picked for it."""


class Hub:
    """``jupyterhub -f config`` in a subprocess, in its own directory.

    ``service`` adds the jupyter-pause-hub service (a dict of its command-line
    options); ``user_config`` maps a user to the Jupyter Server config written
    into their home before their server starts.
    """

    def __init__(
        self, base: Path, service: dict[str, Any] | None = None, servers_may_stop: bool = True
    ):
        if not Path(PROXY).exists():
            raise RuntimeError(
                "configurable-http-proxy is not installed: run `make hub-proxy` "
                "(npm install --prefix .venv/hub-proxy configurable-http-proxy)"
            )
        self.dir = base / "hub"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.homes = base / "home"
        self.homes.mkdir(exist_ok=True)
        self.pick_ports()
        self.started = False
        self.token = secrets.token_hex(16)
        self.service_token = secrets.token_hex(16)
        self.service = service
        self.servers_may_stop = servers_may_stop
        self.process: subprocess.Popen | None = None
        self.log_path = self.dir / "hub.log"
        #: started as a shell starts a background job (`jupyterhub &`): SIGINT
        #: ignored, and so in the services it starts
        self.in_background = False

    # -- set-up --------------------------------------------------------------

    def pick_ports(self) -> None:
        self.port = free_port()
        self.hub_port = free_port()
        self.proxy_api_port = free_port()
        self.service_port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def service_url(self) -> str:
        return f"{self.url}/services/jupyter-pause/"

    def home(self, user: str) -> Path:
        home = self.homes / user
        home.mkdir(exist_ok=True)
        return home

    def configure_user(self, user: str, config: dict[str, Any]) -> None:
        """Jupyter Server config for the user's next server (``~/.jupyter``)."""
        folder = self.home(user) / ".jupyter"
        folder.mkdir(exist_ok=True)
        (folder / "jupyter_server_config.json").write_text(json.dumps(config))

    def add_notebook(self, user: str, name: str = "demo.ipynb") -> str:
        write_notebooks(self.home(user), name)
        return name

    def data_dir(self, user: str) -> Path:
        """The user's Jupyter data directory: signing key, ledger, sessions, checkpoints."""
        return self.home(user) / ".local" / "share" / "jupyter"

    def write_config(self) -> Path:
        args = ["--allow-root"] if os.geteuid() == 0 else []
        services = [{"name": "test-admin", "api_token": self.token}]
        server_scopes = ROLES["server"]["scopes"]
        if not self.servers_may_stop:  # the Hub's default 'server' role
            server_scopes = [s for s in server_scopes if s != "delete:servers!server"]
        roles = [
            ROLES["user"],
            {"name": "server", "scopes": server_scopes},
            {
                "name": "test-admin",
                "scopes": [
                    "admin:users",
                    "admin:servers",
                    "access:servers",
                    "access:services",
                    "tokens",
                ],
                "services": ["test-admin"],
            },
        ]
        if self.service is not None:
            options = [f"--{k.replace('_', '-')}={v}" for k, v in self.service.items()]
            services.append(
                {
                    "name": "jupyter-pause",
                    "url": f"http://127.0.0.1:{self.service_port}",
                    "api_token": self.service_token,
                    "oauth_no_confirm": True,
                    "command": [
                        str(BIN / "jupyter-pause-hub"),
                        f"--proxy-url={self.url}",
                        f"--data-dir={self.dir / 'service'}",
                        *options,
                    ],
                }
            )
            roles.append(ROLES["jupyter-pause"])
        config = f"""
from jupyter_pause.client import free_port

c = get_config()  # noqa

def pick_port(spawner):
    # each server on a port no kernel can draw (the hub's own pick can be a kernel's)
    spawner.port = free_port()

c.Spawner.pre_spawn_hook = pick_port
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {self.port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {self.hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{PROXY!r}]
c.JupyterHub.db_url = "sqlite:///{self.dir / "jupyterhub.sqlite"}"
c.JupyterHub.cookie_secret_file = "{self.dir / "cookie_secret"}"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"admin"}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = "{self.homes}/{{username}}"
c.Spawner.cmd = [{str(BIN / "jupyterhub-singleuser")!r}]
c.Spawner.args = {args!r}
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.JupyterHub.services = {services!r}
c.Spawner.environment = {{"JUPYTER_PAUSE_HUB_URL": "http://127.0.0.1:{self.service_port}/services/jupyter-pause/"}}
c.JupyterHub.load_roles = {roles!r}
"""
        path = self.dir / "jupyterhub_config.py"
        path.write_text(config)
        return path

    def start(self, timeout: float = 120.0) -> Hub:
        """Start the hub (again, on the same ports: its users' servers know them).

        A port picked free may be bound by another process (every kernel binds five)
        before the hub or its proxy binds it; then the first start picks new ones."""
        for attempt in range(3):
            log_size = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                self._start(timeout, log_size)
                self.started = True
                return self
            except PortTaken:
                if self.started or attempt == 2:
                    raise
                self.stop()
                self.pick_ports()
        raise AssertionError("unreachable")

    def _start(self, timeout: float, log_size: int) -> None:
        config = self.write_config()
        env = dict(os.environ)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        for name in list(env):
            if name.startswith(("JUPYTER", "JPY_")):
                env.pop(name)  # the hub and its users get their own
        log = open(self.log_path, "a")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [str(BIN / "jupyterhub"), "-f", str(config)],
            cwd=self.dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=ignore_sigint if self.in_background else None,
        )

        def alive() -> None:
            """Fail fast where waiting cannot help: a port of ours was taken (the
            hub, its proxy, or the service it starts, which the Hub restarts in a
            loop), or the hub exited."""
            if "already in use" in self.log_path.read_text(errors="replace")[log_size:]:
                raise PortTaken(f"a port of the hub was taken:\n{self.log_tail()}")
            if self.process.poll() is not None:
                raise AssertionError(f"jupyterhub exited:\n{self.log_tail()}")

        def up():
            alive()
            try:
                return self.api("GET", "")[0] == 200
            except (OSError, http.client.HTTPException):  # not up, or not (yet) the hub
                return False

        def service_up():
            alive()
            return self.service_up()

        wait_for(up, timeout, lambda: f"the hub to answer:\n{self.log_tail()}")
        if self.service is not None:
            wait_for(
                service_up,
                timeout,
                lambda: f"the jupyter-pause service to answer:\n{self.log_tail()}",
            )

    def service_up(self) -> bool:
        try:
            return self.request("GET", f"{self.service_url}api/servers")[0] == 200
        except OSError:
            return False

    def stop(self, timeout: float = 60.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def log_tail(self, n: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    # -- HTTP ----------------------------------------------------------------

    def request(self, method: str, url: str, body: Any = None, token: str | None = None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"token {token or self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as response:
                return response.status, parsed(response.read())
        except urllib.error.HTTPError as e:
            return e.code, parsed(e.read())

    def api(self, method: str, path: str, body: Any = None):
        return self.request(method, f"{self.url}/hub/api/{path}", body)

    def server_model(self, user: str) -> dict[str, Any] | None:
        """The user's default server as the Hub reports it (None: not running)."""
        code, model = self.api("GET", f"users/{user}")
        assert code == 200, model
        return (model.get("servers") or {}).get("")

    def add_user(self, user: str) -> None:
        code, body = self.api("POST", f"users/{user}")
        assert code in (201, 409), (code, body)  # 409: already there

    def spawn(self, user: str, timeout: float = 180.0) -> PauseClient:
        self.add_user(user)
        for attempt in range(3):
            log_size = self.log_path.stat().st_size
            code, body = self.api("POST", f"users/{user}/server", {})
            if code in (201, 202):
                break
            # a server that failed at once (the hub answers 500): say why; a port taken
            # between its pick and its bind is the race of parallel runs, so pick again
            taken = "already in use" in self.log_path.read_text(errors="replace")[log_size:]
            if not taken or attempt == 2:
                raise AssertionError(
                    f"{user}'s server did not start: {code} {body}\n{self.log_tail()}"
                )
        wait_for(
            lambda: (self.server_model(user) or {}).get("ready"),
            timeout,
            f"{user}'s server to be ready:\n{self.log_tail()}",
        )
        return self.client(user)

    def client(self, user: str) -> PauseClient:
        """jupyter-pause's and Jupyter's API of the user's server, through the proxy."""
        return PauseClient(f"{self.url}/user/{user}/", self.token, timeout=120)

    def pid(self, user: str) -> int:
        return self.server_model(user)["state"]["pid"]

    def wait_stopped(self, user: str, timeout: float = 120.0) -> float:
        """Wait until the Hub reports no server for ``user``; returns when it noticed."""
        wait_for(
            lambda: self.server_model(user) is None,
            timeout,
            f"the hub to report {user}'s server stopped:\n{self.log_tail()}",
            interval=0.1,
        )
        return time.monotonic()


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def service_pid(hub: Hub) -> int:
    """The jupyter-pause-hub process the hub started."""
    [service] = [
        child
        for child in psutil.Process(hub.process.pid).children(recursive=True)
        if any("jupyter-pause-hub" in part for part in child.cmdline())
    ]
    return service.pid


def parsed(raw: bytes):
    """JSON, or the text of a page, or None for an empty body."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


@contextlib.contextmanager
def as_user(user: str):
    """Read checkpoints as ``user``'s server does: the engine keeps each Hub user's
    checkpoints in their own folder and binds them to that owner (``$JUPYTERHUB_USER``)."""
    before = os.environ.get("JUPYTERHUB_USER")
    os.environ["JUPYTERHUB_USER"] = user
    try:
        yield
    finally:
        if before is None:
            del os.environ["JUPYTERHUB_USER"]
        else:
            os.environ["JUPYTERHUB_USER"] = before


def process_exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie has exited too: its parent (the hub) has not reaped it yet
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


# These tests run real processes and a synchronous client; pytest-jupyter's
# autouse loop fixtures are not wanted here.
@pytest.fixture(autouse=True)
def jp_asyncio_loop():
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup():
    yield


@pytest.fixture
def hub_factory(tmp_path, started):
    def make(service: dict[str, Any] | None = None, servers_may_stop: bool = True) -> Hub:
        hub = Hub(tmp_path, service, servers_may_stop)
        started.append(hub)
        return hub

    return make
