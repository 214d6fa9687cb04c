"""A real JupyterLab in a subprocess, driven by Debian's chromium via Playwright."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from jupyter_pause.client import LocalServer

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


class Lab:
    """JupyterLab with jupyter-pause in a subprocess, isolated in ``home``."""

    def __init__(
        self,
        home: Path,
        extra_args: list[str] = (),
        env: dict[str, str] | None = None,
        checkpoints: str | None = None,
    ):
        self.root = home / "root"
        self.root.mkdir(exist_ok=True)
        env = {
            "HOME": str(home),
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
            "JUPYTER_DATA_DIR": str(home / "data"),
            "IPYTHONDIR": str(home / ".ipython"),
            **(env or {}),
        }
        args = [
            "--ServerApp.allow_unauthenticated_access=False",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            *extra_args,
        ]
        self.server = LocalServer(
            self.root,
            home / "state",
            app="jupyterlab",
            env=env,
            extra_args=args,
            checkpoints=checkpoints,
        )
        self.client = self.server.start()

    def api(self, method: str, path: str, body: dict | None = None):
        return self.client.request(method, path, body)

    def session_of(self, path):
        """The notebook's row of jupyter-pause's status."""
        sessions = self.api("GET", "jupyter-pause/api/status")["sessions"]
        matching = [s for s in sessions if s["path"] == path]
        assert len(matching) == 1, sessions
        return matching[0]

    def jupyter_kernels_for(self, path):
        """The kernels Jupyter itself runs for a notebook (its sessions API)."""
        return [s["kernel"]["id"] for s in self.api("GET", "api/sessions") if s["path"] == path]

    def write_notebook(self, name: str, sources: list[str]) -> str:
        """A notebook of code cells ``sources`` in the server's root; its name."""
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
        (self.root / name).write_text(json.dumps(nb))
        return name

    def first_source_on_disk(self, name: str) -> str | None:
        """The source of the notebook's first cell as saved on disk, or None while a save
        is under way: Jupyter writes a notebook in place (its "atomic" writing keeps a copy
        for a crash, not the file whole for readers), so a read meanwhile gets an empty or
        partial file."""
        try:
            return "".join(json.loads((self.root / name).read_text())["cells"][0]["source"])
        except json.JSONDecodeError:
            return None

    def lab_url(self, path: str = "") -> str:
        # ?reset: a fresh workspace, so notebooks of earlier tests do not reopen
        tree = f"/tree/{path}" if path else ""
        return f"{self.server.url}lab{tree}?reset&token={self.server.token}"

    def stop(self) -> None:
        self.server.stop()


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
def lab_factory(tmp_path, started):
    def start(extra_args: list[str] = (), **kwargs) -> Lab:
        server = Lab(tmp_path, list(extra_args), **kwargs)
        started.append(server)
        return server

    return start


@pytest.fixture
def lab(lab_factory):
    return lab_factory()


@pytest.fixture(scope="module")
def shared_lab(tmp_path_factory):
    """One JupyterLab for a whole module (tests use notebooks of their own)."""
    server = Lab(tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()


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


STATUS = "[data-jp-pause='status']"
#: the visible text (the item also holds a live region for screen readers)
STATUS_TEXT = "[data-jp-pause='status'] > span:first-child"


def wait_status(page, text, timeout=90_000):
    """Wait until the status bar item's text starts with ``text``."""
    page.wait_for_function(
        f'document.querySelector("{STATUS_TEXT}")?.textContent.startsWith({text!r})',
        timeout=timeout,
    )


def wait_resumed(page, timeout=120_000):
    page.wait_for_function(
        f"['Pause: Resumed', 'Pause: Live'].includes(document.querySelector(\"{STATUS_TEXT}\")?.textContent)",
        timeout=timeout,
    )


def current_cells(page):
    """The cells of the notebook in the visible tab."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")


def run_cell(page, index, expect):
    """Run the code cell at ``index`` (as a user: select it, Shift+Enter) and wait for
    ``expect`` in its output (or, when None, for its execution count)."""
    cell = current_cells(page).nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    if expect is None:
        cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(timeout=120_000)
        return ""
    cell.locator(".jp-OutputArea-output", has_text=expect).first.wait_for(timeout=120_000)
    return cell.locator(".jp-OutputArea").inner_text()


@pytest.fixture
def screenshot(page, tmp_path):
    """Save a screenshot: under ``$JUPYTER_PAUSE_SCREENSHOTS`` when set (that is how
    ``docs/images/`` is refreshed), else in the test's temporary folder."""
    folder = Path(os.environ.get("JUPYTER_PAUSE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path))
        return path

    return take
