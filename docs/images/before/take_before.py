"""The "before" screenshots of issue 12: the UI as it was at commit 313e15b.

Not a test (it drives the old code and asserts nothing); kept so the pictures
can be taken again.  From a checkout of 313e15b with its labextension built
(``cd labextension && jlpm build``) and this repository's venv::

    cp docs/images/before/take_before.py OLD/tests/browser/
    cd OLD && PYTHONPATH=$PWD /path/to/.venv/bin/python -m pytest -p no:cacheprovider \
        tests/browser/take_before.py -q --rootdir . -o python_files=take_before.py \
        --out /path/to/docs/images/before

The fixture puts the old labextension on ``JUPYTER_PATH``, ahead of the
installed one.
"""

import json
import os
import time
from pathlib import Path

import pytest

from .conftest import write_notebook

pytestmark = pytest.mark.browser
STATUS = "[data-jp-pause='status']"
OLD = Path(__file__).parents[2]
OUT = Path(os.environ.get("BEFORE_OUT", "before"))
POLICY = {"gpu-interactive": {"idle_threshold": 8, "min_running_time": 0, "warn_before": 7}}


@pytest.fixture
def old_lab(lab_factory, tmp_path, monkeypatch):
    labextensions = tmp_path / "old" / "labextensions"
    labextensions.mkdir(parents=True)
    (labextensions / "jupyter-pause").symlink_to(OLD / "jupyter_pause" / "labextension")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "old"))  # ahead of the installed one
    OUT.mkdir(parents=True, exist_ok=True)
    return lab_factory


def wait_status(page, text, timeout=90_000):
    page.wait_for_function(
        f'document.querySelector("{STATUS}")?.textContent.startsWith({text!r})', timeout=timeout
    )


def run_cell(page, index):
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    return cell


def open_and_run_first_cell(page, lab, name, cells):
    write_notebook(lab.root, name, cells)
    page.goto(lab.lab_url(name))
    wait_status(page, "Pause: Running")
    run_cell(page, 0).locator(".jp-InputPrompt", has_text="[1]").wait_for()


def shot(page, name):
    page.screenshot(path=str(OUT / f"{name}.png"))


def test_paused_notebook_opened_and_a_cell_run(old_lab, page):
    lab = old_lab()
    open_and_run_first_cell(page, lab, "model.ipynb", ["x = 42", "print(x + 1)"])
    page.goto("about:blank")  # the tab is closed; paused from elsewhere (the CLI)
    op = lab.api("POST", "jupyter-pause/api/sessions/pause", {"path": "model.ipynb"})["operation"]
    assert lab.client.wait(op)["outcome"] == "succeeded"

    page.goto(lab.lab_url("model.ipynb"))
    dialog = page.locator(".jp-Dialog", has_text="paused")
    dialog.wait_for()
    page.locator(".jp-Toolbar-kernelName").first.wait_for()
    time.sleep(2)  # let the kernel indicator settle for the picture
    shot(page, "paused-notebook-opened")
    dialog.get_by_role("button", name="Open without resuming").click()
    shot(page, "paused-notebook-opened-dismissed")

    cell = run_cell(page, 1)
    cell.locator(".jp-OutputArea-output", has_text="NameError").wait_for(timeout=120_000)
    wait_status(page, "Pause: Running")
    shot(page, "cell-run-while-paused")


def test_auto_pause_warning_and_after(old_lab, page):
    lab = old_lab(
        ["--PauseApp.idle_check_interval=0.25", f"--PauseApp.workload_classes={json.dumps(POLICY)}"]
    )
    write_notebook(lab.root, "idle.ipynb", ["1 + 1"])
    page.goto(lab.lab_url("idle.ipynb"))
    wait_status(page, "Pause: Running")
    page.locator(".Toastify__toast", has_text="will be paused").wait_for(timeout=30_000)
    time.sleep(1)
    shot(page, "auto-pause-warning")
    wait_status(page, "Pause: Paused", timeout=60_000)
    time.sleep(2)
    shot(page, "auto-pause-notice")


def test_failed_resume_and_the_kernel_menu(old_lab, page):
    from jupyter_pause.engine import store

    lab = old_lab()
    open_and_run_first_cell(page, lab, "two.ipynb", ["x = 'older'", "x = 'newer'"])
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": "two.ipynb"})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
    time.sleep(1.1)  # checkpoint ids had a one-second resolution
    run_cell(page, 1).locator(".jp-InputPrompt", has_text="[2]").wait_for()
    page.locator("jp-button[data-command='jupyter-pause:pause']").click()
    wait_status(page, "Pause: Paused")
    infos = sorted(
        store.list_checkpoints(lab.server.checkpoint_dir, "two.ipynb"), key=lambda c: c.id
    )
    pickle_file = Path(infos[-1].path) / "objects.pkl"
    data = bytearray(pickle_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    pickle_file.write_bytes(bytes(data))

    page.locator("jp-button[data-command='jupyter-pause:resume']").click()
    wait_status(page, "Pause: Failed")
    time.sleep(1)
    shot(page, "failed-resume")
    page.locator("jp-button[data-command='jupyter-pause:resume']").click()
    page.locator(".jp-Dialog").wait_for()
    shot(page, "failed-resume-picker")
    page.locator(".jp-Dialog").get_by_role("button", name="Cancel").click()

    # where a user looks for pause, resume and saved states: the Kernel menu
    page.get_by_role("menuitem", name="Kernel").click()
    time.sleep(0.5)
    shot(page, "kernel-menu-no-saved-state")
