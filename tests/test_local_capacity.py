"""On a shared GPU machine a resume waits for free GPU memory, and says so."""

from types import SimpleNamespace

import pytest

from jupyter_pause.backends.local import LocalBackend, cuda_bytes_needed

from .helpers import execute, operate, session_status, start_session, wait_for_state

GB = 10**9


class BusyGpuBackend(LocalBackend):
    """The checkpoint needs 4 GB on cuda:0; someone else holds the GPU for a while.

    Only NVML's answer and the checkpoint's CUDA bytes are stood in for (there
    is no GPU here); the waiting, reporting and timing out are the real code.
    """

    free_answers: list = []

    def bytes_needed(self, session):
        return {0: 4 * GB}

    def free_memory(self):
        answers = BusyGpuBackend.free_answers
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def jp_server_config(jp_server_config):
    return {
        **jp_server_config,
        "PauseApp": {"backend_class": BusyGpuBackend, "auto_pause": False},
        "BusyGpuBackend": {"capacity_poll_interval": 0.1, "capacity_timeout": 5},
    }


async def paused_notebook(jp_fetch, jp_serverapp, path):
    kernel_id = (await start_session(jp_fetch, path))["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await execute(jp_serverapp, kernel_id, "kept = 1")
    assert (await operate(jp_fetch, "pause", path))["outcome"] == "succeeded"


def ledger_types(jp_serverapp, path):
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    return [e.type.value for e in ledger.events(path=path)]


async def test_resume_waits_for_capacity_then_restores(jp_fetch, jp_serverapp, notebook_path):
    await paused_notebook(jp_fetch, jp_serverapp, notebook_path)
    BusyGpuBackend.free_answers = [{0: 1 * GB}] * 10 + [{0: 40 * GB}]

    op = await operate(jp_fetch, "resume", notebook_path)

    assert op["outcome"] == "succeeded", op
    types = ledger_types(jp_serverapp, notebook_path)
    assert types.count("waiting-for-capacity") == 1  # reported once, not at every look
    assert (
        types.index("waiting-for-capacity")
        < types.index("capacity-acquired")
        < types.index("restore-finished")
    )
    assert (await session_status(jp_fetch, notebook_path))["state"] == "ready"


async def test_resume_gives_up_clearly_when_the_gpu_stays_full(
    jp_fetch, jp_serverapp, notebook_path
):
    await paused_notebook(jp_fetch, jp_serverapp, notebook_path)
    BusyGpuBackend.free_answers = [{0: 1 * GB}]

    op = await operate(jp_fetch, "resume", notebook_path)

    assert op["outcome"] == "failed"
    assert "cuda:0 needs 4.0 GB, 1.0 GB free" in op["error"] and "--device" in op["error"]
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "failed" and session["kernel_id"] is None
    assert "restore-started" not in ledger_types(
        jp_serverapp, notebook_path
    )  # no competing restore


def test_cuda_bytes_are_counted_per_device():
    storage = lambda device, n: SimpleNamespace(device=device, nbytes=n)  # noqa: E731
    manifest = SimpleNamespace(
        storages=[storage("cuda:0", 5), storage("cpu", 7), storage("cuda:1", 3), storage("cuda", 1)]
    )
    assert cuda_bytes_needed(manifest) == {0: 6, 1: 3}
