"""Pause and resume the demo notebook the way a user does, in a real browser."""

import re
import shutil
import time
from pathlib import Path

import pytest

from .conftest import write_notebook

pytestmark = pytest.mark.browser

DEMO = Path(__file__).parents[2] / "notebooks" / "resumable_demo.ipynb"
STATUS = "[data-jp-pause='status']"


def wait_status(page, text, timeout=90_000):
    page.wait_for_function(
        f'document.querySelector("{STATUS}")?.textContent.startsWith({text!r})', timeout=timeout
    )


def demo_session(lab):
    sessions = lab.api("GET", "jupyter-pause/api/status")["sessions"]
    matching = [s for s in sessions if s["path"] == DEMO.name]
    assert len(matching) == 1, sessions
    return matching[0]


def run_cell(page, index, expect):
    """Run the code cell at ``index`` (as a user: select it, Shift+Enter) and wait for
    ``expect`` in its output (or, when None, for its execution count)."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    if expect is None:
        cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(timeout=120_000)
        return ""
    cell.locator(".jp-OutputArea-output", has_text=expect).first.wait_for(timeout=120_000)
    return cell.locator(".jp-OutputArea").inner_text()


def test_pause_reload_resume_and_check(lab, page, tmp_path):
    shutil.copy(DEMO, lab.root / DEMO.name)
    page.goto(lab.lab_url(DEMO.name))
    wait_status(page, "Pause: Running")

    run_cell(page, 1, "parameters")
    run_cell(page, 2, "fingerprint")

    pause = page.locator("jp-button[data-command='jupyter-pause:pause']")
    pause.click()
    wait_status(page, "Pause: Paused")
    assert page.locator("jp-button[data-command='jupyter-pause:resume']").is_visible()
    page.screenshot(path=str(tmp_path / "paused.png"))
    # JupyterLab's own kernel indicator agrees: the kernel is gone
    page.locator(".jp-Toolbar-kernelName", has_text="No Kernel").wait_for()
    session = demo_session(lab)
    assert session["state"] == "paused" and session["last_checkpoint"]["bytes"] > 0

    page.reload()
    dialog = page.locator(".jp-Dialog", has_text="This notebook is paused")
    dialog.wait_for()
    page.screenshot(path=str(tmp_path / "resume-offer.png"))
    dialog.get_by_role("button", name="Resume").click()
    page.wait_for_function(
        f"['Pause: Ready', 'Pause: Running'].includes(document.querySelector(\"{STATUS}\")?.textContent)",
        timeout=120_000,
    )

    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    output = run_cell(page, 4, "ALL PASS")
    page.screenshot(path=str(tmp_path / "resumed.png"))
    assert "FAIL" not in output.replace("ALL PASS", "")
    assert "a fresh kernel with the checkpointed state" in output
    session = demo_session(lab)
    assert session["restored_from"] == "checkpoint" and session["state"] == "running"


def test_pause_and_resume_in_the_same_tab(lab, page):
    shutil.copy(DEMO, lab.root / DEMO.name)
    page.goto(lab.lab_url(DEMO.name))
    wait_status(page, "Pause: Running")
    run_cell(page, 1, "parameters")
    run_cell(page, 2, "fingerprint")

    page.locator("jp-button[data-command='jupyter-pause:pause']").click()
    wait_status(page, "Pause: Paused")
    # no resume offer for a notebook the user has just paused here
    assert page.locator(".jp-Dialog").count() == 0

    page.locator("jp-button[data-command='jupyter-pause:resume']").click()
    page.wait_for_function(
        f"['Pause: Ready', 'Pause: Running'].includes(document.querySelector(\"{STATUS}\")?.textContent)",
        timeout=120_000,
    )
    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    output = run_cell(page, 4, "ALL PASS")
    assert "a fresh kernel with the checkpointed state" in output


def test_a_resume_falls_back_from_a_damaged_checkpoint(lab, page):
    """The newest checkpoint is damaged: Resume restores the newest one that verifies
    (no dialog, no failure) and the operation says which one it passed over."""
    from jupyter_pause.engine import store

    write_notebook(lab.root, "two.ipynb", ["x = 'older'", "x = 'newer'", "print(x)"])
    page.goto(lab.lab_url("two.ipynb"))
    wait_status(page, "Pause: Running")
    run_cell(page, 0, None)
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": "two.ipynb"})[
        "operation"
    ]
    assert lab.client.wait(op)["outcome"] == "succeeded"
    time.sleep(1.1)  # checkpoint ids have a one-second resolution
    run_cell(page, 1, None)
    page.locator("jp-button[data-command='jupyter-pause:pause']").click()
    wait_status(page, "Pause: Paused")

    infos = sorted(
        store.list_checkpoints(lab.server.checkpoint_dir, "two.ipynb"), key=lambda c: c.id
    )
    newer = infos[-1].id
    pickle_file = Path(infos[-1].path) / "objects.pkl"
    data = bytearray(pickle_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    pickle_file.write_bytes(bytes(data))

    page.locator("jp-button[data-command='jupyter-pause:resume']").click()
    page.wait_for_function(
        f"['Pause: Ready', 'Pause: Running'].includes(document.querySelector(\"{STATUS}\")?.textContent)",
        timeout=120_000,
    )
    page.locator(".jp-Toolbar-kernelName", has_text="Python 3").wait_for()
    assert "older" in run_cell(page, 2, "older")
    events = lab.api("GET", "jupyter-pause/api/status")["sessions"]
    (session,) = [s for s in events if s["path"] == "two.ipynb"]
    assert any(newer in m for m in session["operation"]["messages"]), session["operation"]
