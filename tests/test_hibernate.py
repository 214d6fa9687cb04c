"""Hibernate in place, on a CPU: a real server, real kernels and the real helper process,
with a fake of the NVIDIA driver at the helper's boundary (tests/fake_gpu_driver.py).
The real driver's path runs in the device check (benchmarks/gpu_check.sh) and in
tests/test_hibernate_gpu.py."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jupyter_pause.client import ClientError, LocalServer
from jupyter_pause.hibernate.driver import CudaDriver

from .fake_gpu_driver import ENV, new_world, world
from .helpers import api, start_session, wait_for, wait_for_state

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
NAP = "nap"  # a workload class that hibernates after 1 s idle


def notebook(root: Path, name: str, workload_class: str | None = None) -> str:
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    if workload_class:
        metadata["jupyter_pause"] = {"workload_class": workload_class}
    (root / name).write_text(
        json.dumps({"cells": [], "metadata": metadata, "nbformat": 4, "nbformat_minor": 5})
    )
    return name


@pytest.fixture(scope="module")
def gpu_world(tmp_path_factory):
    return new_world(tmp_path_factory.mktemp("gpu") / "world.json", gpus={0: 80 * GiB})


@pytest.fixture(scope="module")
def server(tmp_path_factory, gpu_world):
    base = tmp_path_factory.mktemp("hibernate")
    (base / "root").mkdir()
    classes = {NAP: {"hibernate_after": 1, "idle_threshold": 3600, "action": "pause"}}
    local = LocalServer(
        root_dir=base / "root",
        state_dir=base / "state",
        extra_args=[
            "--PauseApp.hibernate_driver=tests.fake_gpu_driver.FakeDriver",
            "--PauseApp.idle_check_interval=0.5",
            f"--PauseApp.workload_classes={json.dumps(classes)}",
        ],
        env={ENV: str(gpu_world), "PYTHONPATH": str(ROOT)},
    )
    client = local.start()
    wait_for(
        lambda: client.api("GET", "status") is not None and can_hibernate(client),
        what="the hibernate helper to start",
    )
    yield local, client
    local.stop()


def can_hibernate(client) -> bool:
    """Whether the server says it can hibernate (a notebook with a kernel shows it)."""
    return bool(client.status().get("hibernate", {}).get("available"))


def open_kernel(server, name: str, gpu_bytes: int | None = GiB // 2, workload_class=None):
    """A notebook with a kernel that ran a cell; its process holds ``gpu_bytes`` on GPU 0
    as the fake driver tells it. Returns (path, kernel id, pid)."""
    local, client = server
    path = notebook(local.root_dir, name, workload_class)
    kernel_id = client.open_notebook(path)["kernel"]["id"]
    pid = client.evaluate(kernel_id, "import os, json\nx = 41\nprint(json.dumps(os.getpid()))")
    if gpu_bytes:
        with world() as w:
            w["processes"][str(pid)] = {"gpu": 0, "bytes": gpu_bytes}
    return path, kernel_id, pid


def calls_for(pid: int) -> list[str]:
    with world() as w:
        return [call for call, p in w["calls"] if p == pid]


def hibernate(client, path: str) -> dict:
    return client.wait(client.hibernate(path), timeout=120)


@pytest.fixture(autouse=True)
def world_env(gpu_world, monkeypatch):
    monkeypatch.setenv(ENV, str(gpu_world))


def test_hibernate_frees_the_gpu_keeps_the_process_and_a_cell_wakes_it(server):
    local, client = server
    path, kernel_id, pid = open_kernel(server, "plain.ipynb")

    op = hibernate(client, path)

    assert op["outcome"] == "succeeded", op
    session = client.session_status(path)
    assert session["state"] == "hibernated" and session["kernel_id"] == kernel_id
    assert session["hibernation"]["bytes"] == GiB // 2
    assert session["hibernation"]["pid"] == pid
    assert session["can"]["wake"] and not session["can"]["hibernate"]
    assert calls_for(pid) == ["lock", "checkpoint"]
    with world() as w:
        assert w["states"][str(pid)] == "checkpointed"  # NVML no longer counts it

    # a cell sent as JupyterLab sends it wakes the same process first, its objects intact
    result = client.execute(kernel_id, "x + 1")
    assert result.ok and result.result == "42", result
    assert client.session_status(path)["state"] == "running"
    assert calls_for(pid) == ["lock", "checkpoint", "restore", "unlock"]

    events = {e.type: e.data for e in client.ledger_events() if e.path == path}
    assert events["gpu-hibernated"]["gpu_bytes"] == GiB // 2
    assert events["gpu-hibernated"]["bytes_freed"] == GiB // 2
    assert events["gpu-woken"]["by"] == "cell"
    assert events["gpu-woken"]["waited"] >= events["gpu-woken"]["seconds"] >= 0


def test_a_wake_that_does_not_fit_is_never_tried(server):
    """NVML is asked first: a restore that fails for memory leaves the process stuck for
    good, so with the GPU taken meanwhile the cell is answered with why, and nothing is
    tried until the memory is free again."""
    local, client = server
    path, kernel_id, pid = open_kernel(server, "crowded.ipynb")
    assert hibernate(client, path)["outcome"] == "succeeded"
    with world() as w:  # someone else takes the GPU meanwhile
        w["processes"][str(os.getpid())] = {"gpu": 0, "bytes": 80 * GiB - GiB // 4}
    try:
        result = client.execute(kernel_id, "x + 1")
        assert not result.ok and "GPUHibernated" in result.error, result
        assert "not enough GPU memory" in result.error
        session = client.session_status(path)
        assert session["state"] == "hibernated"
        assert "GPU 0 has" in session["error"]
        assert "restore" not in calls_for(pid)
    finally:
        with world() as w:
            del w["processes"][str(os.getpid())]
    result = client.execute(kernel_id, "x + 1")
    assert result.ok and result.result == "42", result
    assert client.session_status(path)["state"] == "running"


def test_a_busy_kernel_is_refused_at_once(server):
    local, client = server
    path, kernel_id, pid = open_kernel(server, "busy.ipynb")
    gate = local.root_dir / "busy.gate"
    cell = threading.Thread(
        target=client.execute,
        args=(
            kernel_id,
            f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)",
        ),
    )
    cell.start()
    try:
        wait_for(
            lambda: client.session_status(path)["execution_state"] == "busy",
            what="the cell to run",
        )
        with pytest.raises(ClientError) as refused:
            client.hibernate(path)
        assert refused.value.status == 409 and "busy" in str(refused.value)
    finally:
        gate.touch()
        cell.join(120)
    assert calls_for(pid) == []


def test_each_refusal_names_why_and_leaves_the_kernel_running(server):
    local, client = server
    # nothing on the GPU: nothing to free
    path, kernel_id, pid = open_kernel(server, "cpu-only.ipynb", gpu_bytes=None)
    op = hibernate(client, path)
    assert op["outcome"] == "failed" and "holds no GPU memory" in op["error"]
    assert client.session_status(path)["state"] == "running"

    # a child process with a CUDA context of its own (a DataLoader worker)
    path, kernel_id, pid = open_kernel(server, "workers.ipynb")
    child = client.evaluate(
        kernel_id,
        "import subprocess, sys, json\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],"
        " stdin=subprocess.PIPE)\nprint(json.dumps(worker.pid))",
    )
    with world() as w:
        w["processes"][str(child)] = {"gpu": 0, "bytes": GiB}
    op = hibernate(client, path)
    assert op["outcome"] == "failed", op
    assert "child process holds a CUDA context" in op["error"] and f"pid {child}" in op["error"]
    session = client.session_status(path)
    assert session["state"] == "running" and "child process" in session["error"]
    client.execute(kernel_id, "worker.stdin.close(); worker.wait()")

    # more GPU memory than the host could hold
    path, kernel_id, pid = open_kernel(server, "huge.ipynb", gpu_bytes=1 << 50)
    with world() as w:
        w["gpus"]["0"] = 2 << 50
    try:
        op = hibernate(client, path)
    finally:
        with world() as w:
            w["gpus"]["0"] = 80 * GiB
            del w["processes"][str(pid)]
    assert op["outcome"] == "failed" and "not enough free host memory" in op["error"], op

    # none of them was locked
    for name in ("cpu-only.ipynb", "workers.ipynb", "huge.ipynb"):
        assert client.session_status(name)["state"] == "running"
    assert calls_for(pid) == [] and calls_for(child) == []


def test_a_checkpoint_the_driver_refuses_is_undone(server):
    local, client = server
    path, kernel_id, pid = open_kernel(server, "refused.ipynb")
    with world() as w:  # the driver refuses (managed memory, say) and leaves it locked
        w["fail"]["checkpoint"] = ["CUDA_ERROR_NOT_SUPPORTED", "locked"]
    op = hibernate(client, path)
    assert op["outcome"] == "failed", op
    assert "CUDA_ERROR_NOT_SUPPORTED" in op["error"] and "unlocked" in op["error"]
    assert calls_for(pid) == ["lock", "checkpoint", "unlock"]
    assert client.session_status(path)["state"] == "running"
    assert client.execute(kernel_id, "x").result == "41"
    # never checkpointed: stopped as any kernel is, its GPU memory not moved first
    client.close_notebook(path)
    wait_for(lambda: not client.kernel_exists(kernel_id), what="the kernel to stop")
    assert calls_for(pid) == ["lock", "checkpoint", "unlock"]


def test_a_failed_restore_is_told_and_the_kernel_marked_failed(server):
    local, client = server
    path, kernel_id, pid = open_kernel(server, "stuck.ipynb")
    assert hibernate(client, path)["outcome"] == "succeeded"
    with world() as w:
        w["fail"]["restore"] = ["CUDA_ERROR_UNKNOWN", "failed"]
    op = client.wait(client.wake(path), timeout=120)
    assert op["outcome"] == "failed" and "CUDA_ERROR_UNKNOWN" in op["error"], op
    session = client.session_status(path)
    assert session["state"] == "failed" and "Shut the kernel down" in session["error"]
    client.close_notebook(path)


def test_a_kernel_once_hibernated_is_checkpointed_again_before_it_stops(server):
    """Killing a live restored CUDA process has hung hosts: lock and checkpoint first."""
    local, client = server
    path, kernel_id, pid = open_kernel(server, "stopped.ipynb")
    assert hibernate(client, path)["outcome"] == "succeeded"
    assert client.execute(kernel_id, "x").result == "41"  # woken: a restored process

    client.close_notebook(path)  # JupyterLab's shutdown: the session and its kernel
    wait_for(lambda: not client.kernel_exists(kernel_id), what="the kernel to stop")

    assert calls_for(pid) == ["lock", "checkpoint", "restore", "unlock", "lock", "checkpoint"]


def test_a_pause_of_a_hibernated_kernel_wakes_it_and_saves_its_state(server):
    local, client = server
    path, kernel_id, pid = open_kernel(server, "nap-then-pause.ipynb")
    assert hibernate(client, path)["outcome"] == "succeeded"

    op = client.wait(client.pause(path), timeout=300)

    assert op["outcome"] == "succeeded", op
    assert client.session_status(path)["state"] == "paused"
    assert calls_for(pid)[:4] == ["lock", "checkpoint", "restore", "unlock"]
    types = [e.type for e in client.ledger_events() if e.path == path]
    assert types.index("gpu-woken") < types.index("checkpoint-finished")


def test_the_magic_hibernates_once_its_cell_ends(server):
    local, client = server
    path, kernel_id, pid = open_kernel(server, "magic.ipynb")

    out = client.execute(kernel_id, "%pause --hibernate")

    assert out.ok and "Hibernating" in out.stdout, out
    wait_for(lambda: client.session_status(path)["state"] == "hibernated", what="hibernated")
    assert client.session_status(path)["hibernation"]["bytes"] == GiB // 2


def test_a_class_that_chooses_it_hibernates_first_when_idle(server):
    local, client = server
    path, kernel_id, pid = open_kernel(server, "idle.ipynb", workload_class=NAP)

    wait_for(
        lambda: client.session_status(path)["state"] == "hibernated",
        timeout=120,
        what="the idle notebook to hibernate",
    )

    events = [e for e in client.ledger_events() if e.path == path]
    hibernated = next(e for e in events if e.type == "gpu-hibernated")
    assert hibernated.data["auto"] is True and hibernated.workload_class == NAP
    assert client.session_status(path)["auto_pause"]["action"] == "pause"


def test_the_status_and_a_refusal_say_why_a_server_cannot(tmp_path, monkeypatch):
    """Here, without a GPU, the real driver says why, and GET status and the CLI agree."""
    assert "NVML" in (CudaDriver.present() or "")
    missing = new_world(tmp_path / "world.json", gpus={0: GiB}, missing="driver 535 lacks it")
    monkeypatch.setenv(ENV, str(missing))
    (tmp_path / "root").mkdir()
    local = LocalServer(
        root_dir=tmp_path / "root",
        state_dir=tmp_path / "state",
        extra_args=["--PauseApp.hibernate_driver=tests.fake_gpu_driver.FakeDriver"],
        env={ENV: str(missing), "PYTHONPATH": str(ROOT)},
    )
    client = local.start()
    try:
        path, kernel_id, pid = open_kernel((local, client), "off.ipynb")
        wait_for(
            lambda: "driver 535" in client.status()["hibernate"]["why_not"],
            what="the helper's answer",
        )
        session = client.session_status(path)
        assert session["can"]["hibernate"] is False
        with pytest.raises(ClientError) as refused:
            client.hibernate(path)
        assert refused.value.status == 409 and "driver 535 lacks it" in str(refused.value)
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter_pause.cli",
                "status",
                "--url",
                local.url,
                "--token",
                local.token,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "driver 535 lacks it" in cli.stdout + cli.stderr, cli
    finally:
        local.stop()


async def test_a_server_without_a_gpu_says_so(jp_fetch, jp_serverapp, notebook_path):
    model = await start_session(jp_fetch, notebook_path)
    await wait_for_state(jp_serverapp, model["kernel"]["id"], "idle")
    code, status = await api(jp_fetch, "status")
    assert status["hibernate"] == {"available": False, "why_not": CudaDriver.present()}
    code, answer = await api(
        jp_fetch, "sessions", "hibernate", method="POST", body={"path": notebook_path}
    )
    assert code == 409 and "NVML" in answer["message"]
