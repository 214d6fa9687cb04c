"""The status bar item, its popover, the Kernel menu and the "Saved state" panel,
read as a user sees them."""

import json
import re
import secrets

import pytest

from jupyter_pause.engine import signing

from .conftest import STATUS, STATUS_TEXT, current_cells, run_cell, wait_resumed, wait_status

pytestmark = pytest.mark.browser


def test_status_bar_uses_plain_words_and_says_when_the_server_is_unreachable(shared_lab, page):
    lab = shared_lab
    lab.write_notebook("hello.ipynb", ["x = 41 + 1\nx"])
    page.goto(lab.lab_url("hello.ipynb"))
    item = page.locator(STATUS)
    # "Live", not "Running", beside JupyterLab's "Idle"
    wait_status(page, "Pause: Live")
    assert item.get_attribute("data-state") == "running"
    assert lab.session_of("hello.ipynb")["state"] == "running"
    assert item.locator("[aria-live='polite']").inner_text() == "Live"

    # the poll fails: the item says so instead of showing a stale state
    page.route("**/jupyter-pause/api/status*", lambda route: route.abort())
    wait_status(page, "Pause: server unreachable")
    assert item.get_attribute("data-state") == "unreachable"
    page.unroute("**/jupyter-pause/api/status*")
    wait_status(page, "Pause: Live", timeout=120_000)  # the poll backs off, then recovers


def test_popover_shows_state_saved_state_policy_and_actions(shared_lab, page, screenshot):
    lab = shared_lab
    lab.write_notebook("pop.ipynb", ["y = 1"])
    page.goto(lab.lab_url("pop.ipynb"))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": "pop.ipynb"})[
        "operation"
    ]
    assert lab.client.wait(op)["outcome"] == "succeeded"

    page.locator(STATUS_TEXT).click()
    popover = page.locator("[data-jp-pause='popover']")
    # the popover follows the poll: the checkpoint taken from outside shows up
    popover.get_by_text("Live since").wait_for()
    popover.get_by_text(re.compile(r"\d [KMGT]?B at ")).wait_for()
    text = popover.inner_text()
    assert "gpu-interactive: pause after 30 min idle" in text
    # the last operation, step by step, asked of the server (GET status leaves it out)
    steps = timeline_in(popover, "Last checkpoint")
    assert steps[0] == "request received" and steps[-1] == "checkpoint returned"
    assert "pickled" in steps and "committed" in steps
    screenshot("status-popover")
    popover.get_by_role("button", name="Pause").click()
    wait_status(page, "Pause: Paused")
    assert lab.jupyter_kernels_for("pop.ipynb") == []
    page.locator(STATUS_TEXT).click()
    steps = timeline_in(page.locator("[data-jp-pause='popover']"), "Last pause")
    assert steps[0] == "request received" and steps[-1] == "paused"
    assert steps.index("committed") < steps.index("accelerator released")


def timeline_in(popover, label):
    """The steps of the popover's timeline row ``label``, in the order shown, each line
    ``<seconds> s <step>``, the seconds never going back."""
    popover.locator("dt", has_text=label).wait_for()
    dd = popover.locator("dt", has_text=label).locator("xpath=following-sibling::dd[1]")
    lines = [re.fullmatch(r"(\d+\.\d\d) s (.+)", line) for line in dd.inner_text().splitlines()]
    assert all(lines), dd.inner_text()
    at = [float(line[1]) for line in lines]
    assert at == sorted(at), dd.inner_text()
    return [line[2] for line in lines]


def test_kernel_menu_palette_and_saved_state_panel(shared_lab, page, screenshot):
    lab = shared_lab
    lab.write_notebook("snap.ipynb", ["z = list(range(10))"])
    page.goto(lab.lab_url("snap.ipynb"))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)

    page.get_by_role("menuitem", name="Kernel").click()
    menu = page.locator(".lm-Menu")
    for label in ("Pause", "Save State Now", "Show Saved State"):
        menu.get_by_text(label, exact=True).wait_for()
    menu.get_by_text("Save State Now", exact=True).click()
    page.locator(".Toastify__toast", has_text="done").first.wait_for()

    page.get_by_role("menuitem", name="View").click()
    page.get_by_role("menuitem", name="Activate Command Palette").click()
    page.locator(".lm-CommandPalette-input").fill("Show Saved State")
    page.keyboard.press("Enter")
    panel = page.locator("[data-jp-pause='snapshots']")
    entry = panel.locator("li[data-checkpoint]")
    entry.first.wait_for()
    assert entry.first.get_attribute("data-verified") == "true"
    assert "Verified" in entry.first.inner_text() and "1 object" in entry.first.inner_text()
    screenshot("saved-state-panel")

    # resume from a chosen saved state, from the panel
    op = lab.api("POST", "jupyter-pause/api/sessions/pause", {"path": "snap.ipynb"})["operation"]
    assert lab.client.wait(op)["outcome"] == "succeeded"
    # each button is labelled with the saved state it acts on
    entry.first.get_by_role("button", name="Resume from saved state").and_(
        page.locator(":enabled")
    ).click()
    wait_resumed(page)
    assert lab.session_of("snap.ipynb")["restored_from"] == "checkpoint"

    checkpoint_id = entry.first.get_attribute("data-checkpoint")
    entry.first.get_by_role("button", name="Delete").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Delete").click()
    panel.locator(f"li[data-checkpoint='{checkpoint_id}']").wait_for(state="detached")
    assert checkpoint_id not in [c["id"] for c in lab.client.checkpoints("snap.ipynb")]


def test_the_poll_interval_setting_is_honoured_beyond_the_backoff_ceiling(lab, page):
    """Settings → Pause and Resume: status → 120 s is the interval in force, and the
    status is asked for at once, not a whole interval later (the poll's backoff
    ceiling, 60 s, used to refuse any longer interval)."""
    name = lab.write_notebook("poll.ipynb", ["x = 1"])
    settings = json.dumps({"pollInterval": 120})
    lab.api("PUT", "lab/api/settings/jupyter-pause:model", {"raw": settings})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(lab.lab_url(name))
    page.wait_for_function(
        "document.querySelector(\"[data-jp-pause='status']\")?.dataset.pollInterval === '120000'"
    )
    wait_status(page, "Pause: ")  # answered, although the next poll is two minutes away
    assert not [e for e in errors if "Poll interval" in e], errors


def test_a_notebook_whose_kernel_died_offers_what_the_server_allows(shared_lab, page):
    """Failed, with the fresh kernel Jupyter started in place of the one that died: the
    server would checkpoint it (and resume from the last checkpoint), and the popover
    offers exactly what the server says it allows (``can``), not a list of its own."""
    lab = shared_lab
    lab.write_notebook("died.ipynb", ["w = 1", "import os\nos._exit(1)"])
    page.goto(lab.lab_url("died.ipynb"))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": "died.ipynb"})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"

    current_cells(page).nth(1).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")  # the kernel dies; Jupyter starts another
    # what happened, not a red "Failed" for a pause nobody asked for
    wait_status(page, "Pause: Kernel died · saved state from ")
    assert page.locator(STATUS).get_attribute("data-state") == "unrestored"
    session = lab.session_of("died.ipynb")
    assert session["kernel_id"] and session["live_state"] == "fresh"
    assert session["can"] == {
        "pause": True,
        "resume": True,
        "checkpoint": True,
        "hibernate": False,  # no GPU here
        "wake": False,
    }
    restarting = page.locator(".jp-Dialog", has_text="Kernel Restarting")
    if restarting.count():
        restarting.get_by_role("button", name="Ok").click()

    page.locator(STATUS_TEXT).click()
    popover = page.locator("[data-jp-pause='popover']")
    popover.get_by_role("button", name="Save State Now").and_(page.locator(":enabled")).wait_for()
    popover.get_by_role("button", name="Resume").and_(page.locator(":enabled")).wait_for()


def test_the_saved_state_panel_names_the_key_a_foreign_checkpoint_needs(lab, page):
    """A node without the user's key (issue 37): its checkpoints are good, only signed with
    a key this server lacks. The panel says so and whose key it needs, never "Corrupt",
    and offers no Delete: other nodes need them."""
    lab.write_notebook("elsewhere.ipynb", ["v = 3"])
    page.goto(lab.lab_url("elsewhere.ipynb"))
    wait_status(page, "Pause: Live")
    run_cell(page, 0, None)
    op = lab.api("POST", "jupyter-pause/api/sessions/checkpoint", {"path": "elsewhere.ipynb"})
    assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
    key = lab.root.parent / "data" / "pause" / "secret"
    needed = signing.key_id(key.read_bytes().strip())
    key.write_bytes(secrets.token_hex(32).encode())  # this server now has another key

    page.get_by_role("menuitem", name="Kernel").click()
    page.locator(".lm-Menu").get_by_text("Show Saved State", exact=True).click()
    entry = page.locator("[data-jp-pause='snapshots'] li[data-checkpoint]").first
    entry.get_by_text("Signed with another key").wait_for()
    text = entry.inner_text()
    assert needed in text and "Corrupt" not in text, text
    assert entry.get_by_role("button", name="Delete").count() == 0
