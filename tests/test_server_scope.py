"""Backends whose accelerator belongs to the whole server (a pod).

The Kubernetes backends are tested against the API emulator in
tests/kubernetes; here a small in-process backend stands in for "the platform"
so that the manager's side is tested with real kernels: every notebook is
checkpointed before anything is released, and a live snapshot restore is
recognised by the kernels' nonces.
"""

import time

import pytest

from jupyter_pause.backends.base import PauseBackend, ReleaseFacts

from .helpers import api, execute, session_status, start_session, wait_for_state, wait_operation


class SnapshotLikeBackend(PauseBackend):
    """Releases by "snapshotting": the processes stay, as after a restore."""

    name = "snapshot-like"
    scope = "server"
    released: list = []

    async def release(self, sessions, shutdown_kernel):
        SnapshotLikeBackend.released.append(sorted(s.path for s in sessions))
        return ReleaseFacts(restored_from="snapshot", details={"snapshot": "snap-1"})


@pytest.fixture
def jp_server_config(jp_server_config):
    return {
        **jp_server_config,
        "PauseApp": {"backend_class": SnapshotLikeBackend, "auto_pause": False},
    }


async def test_pausing_one_notebook_checkpoints_all_and_a_live_restore_is_recognised(
    jp_fetch, jp_serverapp, jp_root_dir, notebook_path
):
    (jp_root_dir / "work" / "other.ipynb").write_text((jp_root_dir / notebook_path).read_text())
    kernels = {}
    for path, code in ((notebook_path, "a = 1"), ("work/other.ipynb", "b = 2")):
        model = await start_session(jp_fetch, path)
        kernels[path] = model["kernel"]["id"]
        await wait_for_state(jp_serverapp, kernels[path], "idle")
        await execute(jp_serverapp, kernels[path], code)

    code, body = await api(
        jp_fetch, "sessions", "pause", method="POST", body={"path": notebook_path}
    )
    assert code == 202
    op = await wait_operation(jp_fetch, body["operation"]["id"])
    assert op["outcome"] == "succeeded", op

    assert SnapshotLikeBackend.released[-1] == sorted(kernels)
    for path, kernel_id in kernels.items():
        session = await session_status(jp_fetch, path)
        assert session["state"] == "ready"
        assert session["restored_from"] == "snapshot"
        assert session["live_state"] == "restored"  # the nonce planted at pause is still in memory
        assert session["kernel_id"] == kernel_id
        assert session["last_checkpoint"]["id"]  # the fallback exists for both
    assert await execute(jp_serverapp, kernels["work/other.ipynb"], "b") == "2"


@pytest.mark.parametrize("ahead, outcome", [(5, "scheduled"), (3600, "resumed by hand")])
async def test_a_pod_restored_for_its_schedule_counts_as_the_scheduled_resume(
    jp_fetch, jp_serverapp, notebook_path, ahead, outcome
):
    """The platform's scheduler brought the pod back at its time (within a
    minute): that was the scheduled resume.  Long before it: by hand."""
    model = await start_session(jp_fetch, notebook_path)
    await wait_for_state(jp_serverapp, model["kernel"]["id"], "idle")
    body = {"path": notebook_path, "resume_at": time.time() + ahead}
    code, answer = await api(jp_fetch, "sessions", "pause", method="POST", body=body)
    assert code == 202, answer
    op = await wait_operation(jp_fetch, answer["operation"]["id"])
    assert op["outcome"] == "succeeded", op

    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "ready" and session["schedule"] is None
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    types = [e.type.value for e in ledger.events(path=notebook_path)]
    if outcome == "scheduled":
        assert session["resumed_ahead"]["kind"] == "scheduled"
        assert "scheduled-resume-started" in types
    else:
        assert session["resumed_ahead"] is None
        (cancelled,) = ledger.events(path=notebook_path, types=["resume-schedule-cancelled"])
        assert cancelled.data["reason"] == "resumed by hand"
