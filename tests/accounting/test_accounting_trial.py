"""The trial end to end on the local backend (small model), and the probe."""

from __future__ import annotations

import json

import pytest

from jupyter_pause.trial import probe
from jupyter_pause.trial.run import run_trial, write_json

from .conftest import notebook_json


def test_trial_end_to_end_local(small_model_notebook, tmp_path):
    result = run_trial(str(small_model_notebook), timeout=180)
    text = result.to_text()
    assert result.passed, text
    names = [s.name for s in result.steps]
    assert names == ["run", "pause", "resume", "checkpoint-restore", "cleanup"]
    checks = {(s.name, c.name): c.ok for s in result.steps for c in s.checks}
    for key in [
        ("pause", "kernel is gone"),
        ("pause", "kernel process exited"),
        ("pause", "accelerator free"),
        ("resume", "no competing restore"),
        ("resume", "model cell runs"),
        ("resume", "live state restored"),
        ("resume", "live state as expected"),
        ("checkpoint-restore", "checkpoint restored"),
        ("cleanup", "checkpoints deleted"),
        ("cleanup", "no checkpoint data on disk"),
    ]:
        assert checks[key], key
    data = result.to_json()
    assert data["passed"] is True
    assert set(data["timings"]) == {
        "run_s",
        "pause_s",
        "resume_to_usable_s",
        "checkpoint_restore_to_usable_s",
    }
    assert all(v is not None and v >= 0 for v in data["timings"].values())
    probe_result = next(s for s in result.steps if s.name == "resume").info["probe"]
    assert probe_result["outcome"] == "fresh-with-checkpoint"
    out = tmp_path / "trial.json"
    write_json(result, str(out))
    assert json.loads(out.read_text())["steps"][1]["checks"][0]["result"] == "PASS"
    assert "PASS" in text and "FAIL" not in text.replace("FAIL:", "")


def test_trial_reports_a_failing_notebook(tmp_path):
    nb = tmp_path / "broken.ipynb"
    nb.write_text(json.dumps(notebook_json(["x = 1", "raise ValueError('boom')"])))
    result = run_trial(str(nb), timeout=60)
    assert not result.passed
    run = result.steps[0]
    assert run.name == "run" and not run.checks[0].ok
    assert "boom" in run.checks[0].detail
    assert "FAIL" in result.to_text()


def test_probe_classify():
    assert probe.classify("n", {"value": "n"}, False) == "restored"
    assert probe.classify("n", {"value": None, "marker": "n"}, False) == "fresh-with-checkpoint"
    assert probe.classify("n", {"value": None, "marker": None}, True) == "fresh-with-checkpoint"
    assert probe.classify("n", {"value": "other", "marker": None}, False) == "lost"
    assert probe.file_state("n", {"file_exists": True, "file_content": "n"}) == "present"
    assert probe.file_state("n", {"file_exists": True, "file_content": "x"}) == "changed"
    assert probe.file_state("n", {"file_exists": False}) == "missing"


@pytest.fixture
def notebook(pause_server, request):
    server, client = pause_server
    name = f"work/{request.node.name[:40]}.ipynb"
    (server.root_dir / name).write_text(json.dumps(notebook_json(["x = 41 + 1"])))
    kernel_id = client.open_notebook(name)["kernel"]["id"]
    client.status()  # the server watches a kernel's cells once it has seen it
    assert client.execute(kernel_id, "x = 41 + 1").ok
    yield client, name, kernel_id
    client.close_notebook(name)
    for cp in client.checkpoints(name):
        client.delete_checkpoint(name, cp["id"])


def test_probe_restored(notebook):
    client, path, _ = notebook
    planted = probe.plant(client, path, checkpoint=False)
    result = probe.check(client, planted)  # same live process: nothing happened
    assert result["outcome"] == "restored"
    assert result["file"] == "present"
    assert result["pid_after"] == planted.pid


def test_probe_fresh_with_checkpoint_after_pause_and_resume(notebook):
    client, path, _ = notebook
    planted = probe.plant(client, path)  # with a checkpoint
    assert planted.checkpoint_id
    op = client.wait(client.pause(path), 120)
    assert op["outcome"] == "succeeded", op
    result = probe.check(client, planted)  # resumes the paused session
    assert result["resumed"] == "succeeded"
    assert result["outcome"] == "fresh-with-checkpoint"
    assert result["marker_in_namespace"] is True
    assert result["file"] == "present"
    assert result["pid_after"] != planted.pid


def test_probe_fresh_with_checkpoint_verified_in_a_new_kernel(notebook):
    client, path, kernel_id = notebook
    planted = probe.plant(client, path)
    client.restart_kernel(kernel_id)  # "the upgrade": a new process, nothing restored
    result = probe.check(client, planted, verify=True)
    assert result["outcome"] == "fresh-with-checkpoint"
    assert result["verified_restore"] is True


def test_probe_lost(notebook):
    client, path, kernel_id = notebook
    planted = probe.plant(client, path, checkpoint=False)
    client.restart_kernel(kernel_id)
    client.delete_file(path.rsplit("/", 1)[0] + "/" + planted.file.rsplit("/", 1)[1])
    result = probe.check(client, planted)
    assert result["outcome"] == "lost"
    assert result["file"] == "missing"
    assert result["checkpoints"] == 0


NO_CAPACITY_BACKEND = '''
import asyncio
from jupyter_pause.backends.local import LocalBackend


class NoCapacityBackend(LocalBackend):
    """Compatible capacity is unavailable for a while on every resume."""

    name = "local-no-capacity"

    async def acquire(self, session, report_waiting):
        report_waiting("no compatible accelerator (test)")
        await asyncio.sleep(3)
'''


def test_trial_waiting_for_capacity_without_competing_restores(small_model_notebook, tmp_path):
    (tmp_path / "no_capacity_backend.py").write_text(NO_CAPACITY_BACKEND)
    result = run_trial(
        str(small_model_notebook),
        timeout=180,
        expect_capacity_wait=True,
        server_args=["--PauseApp.backend_class=no_capacity_backend.NoCapacityBackend"],
        server_env={"PYTHONPATH": str(tmp_path)},
    )
    assert result.passed, result.to_text()
    resume = {c.name: c for c in next(s for s in result.steps if s.name == "resume").checks}
    assert resume["reports waiting-for-capacity"].ok
    assert resume["no competing restore"].ok


def test_report_from_a_real_servers_events(notebook):
    """The server's ledger carries what the report needs (field names included)."""
    from jupyter_pause.report.build import build_report

    client, path, kernel_id = notebook
    assert client.execute(kernel_id, "import time; time.sleep(0.2)").ok
    assert client.wait(client.pause(path), 120)["outcome"] == "succeeded"
    assert client.wait(client.resume(path), 120)["outcome"] == "succeeded"
    data = build_report(client.ledger_events()).to_json()
    nb = next(g for g in data["by_notebook"] if g["key"] == path)
    assert nb["pauses"]["count"] >= 1
    assert nb["pause_latency_s"]["n"] >= 1
    assert nb["resume_latency_s"]["n"] >= 1
    assert nb["restores"]["checkpoint"] >= 1
    assert nb["checkpoint_bytes"]["n"] >= 1
    assert nb["gpu_hours"]["allocated"] > 0 and nb["gpu_hours"]["released"] > 0
    assert nb["gpu_hours"]["active"] > 0  # CELL_EXECUTED carries data.duration
