"""A small synchronous client for a Jupyter server running jupyter-pause.

Used by ``jupyter pause trial``, ``jupyter pause probe`` and ``report --url``.
REST calls use ``urllib`` with token auth; cells run over the kernel's
websocket (``websocket-client``, a dependency of jupyter_server).  The
server can be one the caller points at (``PauseClient(url, token)``) or one
started here (:class:`LocalServer`).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .engine import paths as checkpoint_paths

API = "jupyter-pause/api/"


class ClientError(Exception):
    def __init__(self, status: int, message: str, body: Any = None):
        self.status = status
        self.body = body
        super().__init__(f"HTTP {status}: {message}")


@dataclass
class ExecResult:
    status: str  # "ok" | "error" | "timeout"
    stdout: str = ""
    stderr: str = ""
    result: str = ""  # text/plain of the execute_result, if any
    error: str = ""  # "Name: value" of an exception
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class PauseClient:
    def __init__(self, base_url: str, token: str = "", timeout: float = 60.0):
        self.base_url = base_url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout

    # ------------------------------------------------------------------ REST
    def request(self, method: str, url_path: str, body: Any = None, /, **query: Any) -> Any:
        url = self.base_url + url_path.lstrip("/")
        q = {k: v for k, v in query.items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(q)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"token {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw.decode(errors="replace")
            message = payload.get("message", "") if isinstance(payload, dict) else str(payload)
            raise ClientError(e.code, message or e.reason, payload) from None

    def api(self, method: str, url_path: str, body: Any = None, /, **query: Any) -> Any:
        return self.request(method, API + url_path, body, **query)

    # jupyter-pause
    def status(self) -> dict[str, Any]:
        return self.api("GET", "status")

    def session_status(self, path: str) -> dict[str, Any] | None:
        return next((s for s in self.status().get("sessions", []) if s.get("path") == path), None)

    def pause(
        self, path: str, force: bool = False, resume_at: float | str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"path": path, "force": force}
        if resume_at is not None:
            body["resume_at"] = resume_at
        return self.api("POST", "sessions/pause", body)["operation"]

    def schedule(self, path: str, resume_at: float | str) -> dict[str, Any]:
        """Resume a paused notebook by itself at ``resume_at``; returns the schedule."""
        return self.api("PUT", "sessions/schedule", {"path": path, "resume_at": resume_at})[
            "schedule"
        ]

    def cancel_schedule(self, path: str) -> None:
        self.api("DELETE", "sessions/schedule", path=path)

    def resume(self, path: str, checkpoint_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"path": path}
        if checkpoint_id:
            body["checkpoint_id"] = checkpoint_id
        return self.api("POST", "sessions/resume", body)["operation"]

    def checkpoint(self, path: str) -> dict[str, Any]:
        return self.api("POST", "sessions/checkpoint", {"path": path})["operation"]

    def hibernate(self, path: str) -> dict[str, Any]:
        """Move the kernel's GPU memory to host memory, the kernel kept."""
        return self.api("POST", "sessions/hibernate", {"path": path})["operation"]

    def wake(self, path: str) -> dict[str, Any]:
        return self.api("POST", "sessions/wake", {"path": path})["operation"]

    def operation(self, op_id: str) -> dict[str, Any]:
        return self.api("GET", f"operations/{op_id}")

    def wait(self, op: dict[str, Any], timeout: float = 600.0, poll: float = 0.2) -> dict[str, Any]:
        """Poll an operation until it is no longer running."""
        deadline = time.monotonic() + timeout
        while op.get("outcome") == "running":
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{op.get('kind')} {op.get('id')} still running after {timeout:.0f} s"
                )
            time.sleep(poll)
            op = self.operation(op["id"])
        return op

    def checkpoints(self, path: str) -> list[dict[str, Any]]:
        return self.api("GET", "checkpoints", path=path).get("checkpoints", [])

    def delete_checkpoint(self, path: str, checkpoint_id: str) -> None:
        self.api("DELETE", f"checkpoints/{urllib.parse.quote(checkpoint_id)}", path=path)

    def events(self, since: float | None = None) -> list[dict[str, Any]]:
        return self.api("GET", "events", since=since).get("events", [])

    def ledger_events(self, since: float | None = None):
        from .ledger import EventType, LedgerEvent

        out = []
        for e in self.events(since):
            try:
                type_ = EventType(e["type"])
            except ValueError:
                continue
            out.append(
                LedgerEvent(
                    type=type_,
                    time=float(e["time"]),
                    path=e.get("path", ""),
                    kernel_id=e.get("kernel_id", ""),
                    operation_id=e.get("operation_id", ""),
                    workload_class=e.get("workload_class", ""),
                    user=e.get("user", ""),
                    data=e.get("data") or {},
                    id=e.get("id"),
                )
            )
        return out

    # Jupyter's own API
    def sessions(self) -> list[dict[str, Any]]:
        return self.request("GET", "api/sessions")

    def session_for(self, path: str) -> dict[str, Any] | None:
        return next((s for s in self.sessions() if s.get("path") == path), None)

    def open_notebook(self, path: str, kernel_name: str = "python3") -> dict[str, Any]:
        """Create (or get) the notebook's Jupyter session, as JupyterLab does on open."""
        return self.request(
            "POST",
            "api/sessions",
            {"path": path, "name": path, "type": "notebook", "kernel": {"name": kernel_name}},
        )

    def close_notebook(self, path: str) -> None:
        s = self.session_for(path)
        if s:
            self.request("DELETE", f"api/sessions/{s['id']}")

    def kernel_exists(self, kernel_id: str) -> bool:
        try:
            self.request("GET", f"api/kernels/{kernel_id}")
            return True
        except ClientError as e:
            if e.status == 404:
                return False
            raise

    def restart_kernel(self, kernel_id: str) -> None:
        self.request("POST", f"api/kernels/{kernel_id}/restart")

    def contents(self, path: str = "") -> dict[str, Any]:
        return self.request("GET", f"api/contents/{urllib.parse.quote(path)}", content=0)

    def delete_file(self, path: str) -> None:
        self.request("DELETE", f"api/contents/{urllib.parse.quote(path)}")

    # ------------------------------------------------------------------ kernels
    def execute(self, kernel_id: str, code: str, timeout: float = 600.0) -> ExecResult:
        """Run ``code`` as a cell in the kernel (counts as user activity) and collect output."""
        import websocket

        base = urllib.parse.urlparse(self.base_url)
        scheme = "wss" if base.scheme == "https" else "ws"
        url = f"{scheme}://{base.netloc}{base.path}api/kernels/{kernel_id}/channels"
        url += "?" + urllib.parse.urlencode({"session_id": uuid.uuid4().hex})
        headers = [f"Authorization: token {self.token}"] if self.token else []
        t0 = time.monotonic()
        ws = websocket.create_connection(url, header=headers, timeout=timeout)
        try:
            msg_id = uuid.uuid4().hex
            ws.send(
                json.dumps(
                    {
                        "header": {
                            "msg_id": msg_id,
                            "username": "jupyter-pause-trial",
                            "session": uuid.uuid4().hex,
                            "msg_type": "execute_request",
                            "version": "5.3",
                            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        },
                        "parent_header": {},
                        "metadata": {},
                        "content": {
                            "code": code,
                            "silent": False,
                            "store_history": True,
                            "user_expressions": {},
                            "allow_stdin": False,
                            "stop_on_error": True,
                        },
                        "channel": "shell",
                        "buffers": [],
                    }
                )
            )
            res = ExecResult(status="timeout")
            replied = idle = False
            while not (replied and idle):
                left = timeout - (time.monotonic() - t0)
                if left <= 0:
                    res.status = "timeout"
                    break
                ws.settimeout(left)
                try:
                    raw = ws.recv()
                except websocket.WebSocketTimeoutException:
                    res.status = "timeout"
                    break
                if isinstance(raw, bytes):
                    continue  # binary-protocol frames are not requested
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = (
                    msg.get("msg_type") or msg["header"]["msg_type"],
                    msg.get("content", {}),
                )
                if kind == "stream":
                    if content.get("name") == "stderr":
                        res.stderr += content.get("text", "")
                    else:
                        res.stdout += content.get("text", "")
                elif kind == "execute_result":
                    res.result = content.get("data", {}).get("text/plain", "")
                elif kind == "error":
                    res.error = f"{content.get('ename')}: {content.get('evalue')}"
                elif kind == "execute_reply":
                    replied = True
                    res.status = content.get("status", "error")
                    if res.status == "error" and not res.error:
                        res.error = f"{content.get('ename')}: {content.get('evalue')}"
                elif kind == "status" and content.get("execution_state") == "idle":
                    idle = True
            res.seconds = time.monotonic() - t0
            return res
        finally:
            ws.close()

    def evaluate(self, kernel_id: str, code: str, timeout: float = 600.0) -> Any:
        """Run ``code`` whose last line prints one JSON document; return it parsed."""
        res = self.execute(kernel_id, code, timeout)
        if not res.ok:
            raise RuntimeError(f"kernel code failed: {res.error or res.status}\n{res.stderr}")
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        if not lines:
            raise RuntimeError(f"kernel code printed nothing: {res.stderr}")
        return json.loads(lines[-1])


# ---------------------------------------------------------------------- a server of our own


def _ephemeral_ports() -> range | None:
    """The range the system draws a port 0 bind from (Linux), or None where unknown."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return None
    return range(low, high + 1)


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server started next.

    Picked below the system's ephemeral range where there is room: every kernel binds
    five ports by asking for port 0, so a port drawn from that range may be a kernel's
    by the time the server binds it.  Outside it, only another pick can take it."""
    ephemeral = _ephemeral_ports()
    if ephemeral is not None and ephemeral.start > 12_000:
        rng = random.SystemRandom()
        for _ in range(50):
            port = rng.randrange(10_000, ephemeral.start)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalServer:
    """``jupyter server`` with jupyter-pause in a subprocess, in its own directories.

    ``app="jupyterlab"`` serves JupyterLab too (the browser tests use it).
    """

    root_dir: Path
    state_dir: Path
    backend: str = "local"
    app: str = "jupyter_server"
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: a command the server runs under, its pid the server's (e.g. ``strace -D``)
    wrapper: list[str] = field(default_factory=list)
    #: the checkpoint root, if not ``<state_dir>/checkpoints`` (servers may share one)
    checkpoints: Path | str | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    port: int = 0
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def checkpoint_dir(self) -> Path | str:
        return self.checkpoints or self.state_dir / "checkpoints"

    def start(self, timeout: float = 90.0) -> PauseClient:
        """Start the server and wait until jupyter-pause answers.

        The port is the server's own choice (``port=0``) the first time, read back from
        the server's info file (``jpserver-<pid>.json``), and kept for a restart. A port
        picked here and handed over would race with every other process binding ports
        meanwhile (kernels bind five each), and a client sent to it might talk to someone
        else's socket."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        runtime_dir = self.state_dir / "runtime"
        env = dict(os.environ)
        env[checkpoint_paths.ENV_DIR] = str(self.checkpoint_dir)
        env["JUPYTER_RUNTIME_DIR"] = str(runtime_dir)
        env.pop("JUPYTER_TOKEN", None)
        env.update(self.env)
        cmd = [
            *self.wrapper,
            sys.executable,
            "-m",
            self.app,
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            "--ServerApp.jpserver_extensions={'jupyter_pause': True}",
            f"--ServerApp.root_dir={self.root_dir}",
            f"--PauseApp.state_dir={self.state_dir}",
            f"--PauseApp.checkpoint_dir={self.checkpoint_dir}",
            f"--PauseApp.backend={self.backend}",
            *self.extra_args,
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # containers and CI often run as root
        self.log_path = self.state_dir / "server.log"
        log = open(self.log_path, "w")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(  # no terminal: SIGINT stops it as it would a service
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.root_dir,
        )
        info_file = runtime_dir / f"jpserver-{self.process.pid}.json"
        deadline = time.monotonic() + timeout
        client = None
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"jupyter server exited ({self.process.returncode}):\n{self.log_tail()}"
                )
            try:
                if client is None:  # written once the server listens
                    self.port = json.loads(info_file.read_text())["port"]
                    client = PauseClient(self.url, self.token)
                client.status()
                return client
            except (OSError, ValueError, KeyError, ClientError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"jupyter server did not answer in {timeout:.0f} s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.2)

    def log_tail(self, n: int = 4000) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-n:]
        return ""

    def stop(self, timeout: float = 20.0) -> None:
        p = self.process
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
