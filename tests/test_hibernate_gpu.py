"""Hibernate in place on a real GPU, through the real driver (skipped without CUDA; the
device check, benchmarks/gpu_check.sh, runs them): a real server, real kernels, the
CUDA driver's process checkpoint API and NVML, with what it must refuse."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

GiB = 1 << 30
ON_GPU = (
    "import os, json, torch\n"
    "x = torch.arange(1 << 28, device='cuda', dtype=torch.int32)\n"  # 1 GiB
    "print(json.dumps(os.getpid()))"
)
CHECK = "print(int(x.sum(dtype=torch.int64)) == (1 << 28) * ((1 << 28) - 1) // 2)"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from jupyter_pause.client import LocalServer

    base = tmp_path_factory.mktemp("hibernate-gpu")
    (base / "root").mkdir()
    local = LocalServer(root_dir=base / "root", state_dir=base / "state")
    client = local.start()
    from .helpers import wait_for

    status = wait_for(
        lambda: (
            (s := client.status())["hibernate"]["why_not"]
            != ("the hibernate helper has not started yet")
            and s
        ),
        what="the hibernate helper to start",
    )
    assert status["hibernate"]["available"], status["hibernate"]["why_not"]
    yield local, client
    local.stop()


def kernel_on_gpu(server, name: str, code: str = ON_GPU):
    local, client = server
    (local.root_dir / name).write_text(
        '{"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "P",'
        ' "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}'
    )
    kernel_id = client.open_notebook(name)["kernel"]["id"]
    pid = client.evaluate(kernel_id, code)
    return name, kernel_id, pid


def held_by(pid: int) -> int:
    from jupyter_pause import nvml

    return sum(used for p, _, used in nvml.processes() or [] if p == pid)


def test_a_kernel_on_the_gpu_hibernates_and_a_cell_wakes_it_with_its_tensors(server):
    local, client = server
    path, kernel_id, pid = kernel_on_gpu(server, "real.ipynb")
    assert held_by(pid) >= GiB

    op = client.wait(client.hibernate(path), timeout=300)

    assert op["outcome"] == "succeeded", op
    session = client.session_status(path)
    assert session["state"] == "hibernated" and session["hibernation"]["bytes"] >= GiB
    assert held_by(pid) <= 300 << 20  # NVML: the GPU memory is free
    out = client.execute(kernel_id, CHECK)
    assert out.ok and out.stdout.strip() == "True", out
    assert client.session_status(path)["state"] == "running"
    assert held_by(pid) >= GiB
    client.close_notebook(path)  # locked and checkpointed first, then stopped


def test_nccl_is_refused_by_name(server):
    local, client = server
    path, kernel_id, pid = kernel_on_gpu(server, "nccl.ipynb")
    setup = client.execute(
        kernel_id,
        "import torch.distributed as dist\n"
        "dist.init_process_group('nccl', store=dist.HashStore(), rank=0, world_size=1)\n"
        "y = torch.ones(1, device='cuda'); dist.all_reduce(y)",
    )
    assert setup.ok, setup
    op = client.wait(client.hibernate(path), timeout=300)
    assert op["outcome"] == "failed" and "NCCL" in op["error"], op
    assert client.session_status(path)["state"] == "running"
    client.execute(kernel_id, "dist.destroy_process_group()")
    client.close_notebook(path)


def test_a_child_with_a_cuda_context_is_refused(server):
    local, client = server
    path, kernel_id, pid = kernel_on_gpu(server, "child.ipynb")
    child = client.evaluate(
        kernel_id,
        "import subprocess, sys, time\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import torch, sys; "
        'torch.zeros(1, device="cuda"); print(1, flush=True); sys.stdin.read()\'], '
        "stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "worker.stdout.readline()\nprint(json.dumps(worker.pid))",
    )
    op = client.wait(client.hibernate(path), timeout=300)
    assert op["outcome"] == "failed", op
    assert "child process holds a CUDA context" in op["error"] and f"pid {child}" in op["error"]
    client.execute(kernel_id, "worker.stdin.close(); worker.wait()")
    client.close_notebook(path)


def test_managed_memory_is_refused_and_the_kernel_keeps_running(server):
    """Managed (unified) memory the checkpoint cannot carry: named when a library the
    kernel uses says so, else the driver refuses it and the kernel is unlocked again."""
    local, client = server
    path, kernel_id, pid = kernel_on_gpu(server, "managed.ipynb")
    setup = client.execute(
        kernel_id,
        "from cuda.bindings import driver as cu\n"
        "err, managed = cu.cuMemAllocManaged(1 << 20, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)\n"
        "assert int(err) == 0, err",
    )
    assert setup.ok, setup
    op = client.wait(client.hibernate(path), timeout=300)
    assert op["outcome"] == "failed", op
    assert client.session_status(path)["state"] == "running"
    out = client.execute(kernel_id, CHECK)  # the GPU still answers
    assert out.ok and out.stdout.strip() == "True", out
    client.close_notebook(path)
