"""Hibernate GPU as a user sees it: the toolbar button where the server can, the status
bar's "GPU hibernated", "GPU hibernated · waking" while a cell wakes the kernel, and the
cell's own error when the GPU's memory was taken meanwhile. The server's driver is the
fake of tests/fake_gpu_driver.py (no GPU here)."""

import os
from pathlib import Path

import pytest

from ..fake_gpu_driver import ENV, new_world, world
from .conftest import STATUS, Lab, current_cells, run_cell, wait_status

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    path = new_world(tmp_path / "gpu.json", gpus={0: 80 * GiB})
    monkeypatch.setenv(ENV, str(path))  # world() reads it here too
    return path


def test_hibernate_from_the_toolbar_and_a_cell_that_wakes_it(page, tmp_path, gpu):
    (tmp_path / "home").mkdir()
    lab = Lab(
        tmp_path / "home",
        ["--PauseApp.hibernate_driver=tests.fake_gpu_driver.FakeDriver"],
        env={ENV: str(gpu), "PYTHONPATH": str(ROOT)},
    )
    try:
        lab.write_notebook("nap.ipynb", ["import os\nx = 41\nprint('pid', os.getpid())", "x + 1"])
        page.goto(lab.lab_url("nap.ipynb"))
        wait_status(page, "Pause: Live")
        pid = int(run_cell(page, 0, "pid").split()[-1])
        with world() as w:
            w["processes"][str(pid)] = {"gpu": 0, "bytes": 8 * GiB}

        button = page.locator("[data-command='jupyter-pause:hibernate']")
        button.wait_for()
        button.click()
        wait_status(page, "Pause: GPU hibernated · 8.6 GB in host memory")
        assert page.locator(STATUS).get_attribute("data-state") == "hibernated"

        gate = tmp_path / "restore-may-finish"
        with world() as w:  # the driver's copy back lasts until the test has looked
            w["hold"]["restore"] = str(gate)
        cell = current_cells(page).nth(1)
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        wait_status(page, "Pause: GPU hibernated · waking")
        gate.touch()
        cell.locator(".jp-OutputArea-output", has_text="42").wait_for(timeout=120_000)
        wait_status(page, "Pause: Live")

        # hibernated again, and the GPU taken meanwhile: the cell says why, nothing runs
        op = lab.api("POST", "jupyter-pause/api/sessions/hibernate", {"path": "nap.ipynb"})
        assert lab.client.wait(op["operation"])["outcome"] == "succeeded"
        with world() as w:
            w["processes"][str(os.getpid())] = {"gpu": 0, "bytes": 78 * GiB}
        text = run_cell(page, 1, "GPUHibernated")
        assert "not enough GPU memory" in text
        assert lab.session_of("nap.ipynb")["state"] == "hibernated"
    finally:
        lab.stop()
