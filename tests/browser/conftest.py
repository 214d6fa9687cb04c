"""A real JupyterLab in a subprocess, driven by Debian's chromium via Playwright."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    def __init__(self, root: Path, home: Path, extra_args: list[str] = ()):
        self.root = root
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {
            **os.environ,
            "HOME": str(home),
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
            "JUPYTER_DATA_DIR": str(home / "data"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "IPYTHONDIR": str(home / ".ipython"),
        }
        self.log = open(home / "server.log", "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "jupyterlab", "--no-browser",
                f"--port={self.port}", "--ip=127.0.0.1",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.allow_unauthenticated_access=False", "--allow-root",
                "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                *extra_args,
            ],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {self.process.returncode}")
            try:
                self.api("GET", "api/status")
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("jupyter lab did not start")

    def api(self, method: str, path: str, body: dict | None = None):
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return json.loads(text) if text else None

    def lab_url(self, path: str = "") -> str:
        tree = f"/tree/{path}" if path else ""
        return f"{self.url}lab{tree}?token={self.token}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


# Playwright's sync API runs its own event loop on this thread; pytest-jupyter's
# autouse loop fixtures would try to close it.  These tests start their server
# in a subprocess and need neither.
@pytest.fixture(autouse=True)
def jp_asyncio_loop():
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup():
    yield


@pytest.fixture
def lab_factory(tmp_path):
    servers = []

    def start(extra_args: list[str] = ()) -> LabServer:
        root = tmp_path / "root"
        root.mkdir(exist_ok=True)
        server = LabServer(root, tmp_path, list(extra_args))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def lab(lab_factory):
    return lab_factory()


@pytest.fixture(scope="module")  # Playwright's loop must stop before other modules run
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is needed for the browser tests: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def write_notebook(root: Path, name: str, sources: list[str]) -> str:
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
             "outputs": [], "source": src}
            for i, src in enumerate(sources)
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                    "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    (root / name).write_text(json.dumps(nb))
    return name
