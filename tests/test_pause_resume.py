"""Pause and resume a notebook end to end with a real server and real kernels."""

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from jupyter_pause.engine import store as checkpoint_store

from .helpers import (
    api,
    execute,
    operate,
    running_notebook,
    session_status,
    start_client,
    torch_gate,
    wait_for_state,
    wait_operation,
    wait_until,
)


def event_types(jp_serverapp, path):
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    return [e.type.value for e in ledger.events(path=path)]


async def test_pause_then_resume_brings_the_same_objects_back(
    jp_fetch, jp_serverapp, notebook_path
):
    kernel_id = await running_notebook(
        jp_fetch,
        jp_serverapp,
        notebook_path,
        "import numpy as np\nweights = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
        "notes = {'epoch': 7, 'loss': [0.5, 0.25]}",
    )

    op = await operate(jp_fetch, "pause", notebook_path)
    assert op["outcome"] == "succeeded", op

    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "paused"
    assert session["kernel_id"] is None
    assert kernel_id not in jp_serverapp.kernel_manager  # the process is gone
    assert session["last_checkpoint"]["bytes"] > 0

    op = await operate(jp_fetch, "resume", notebook_path)
    assert op["outcome"] == "succeeded", op

    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "ready"
    assert session["restored_from"] == "checkpoint"
    assert session["live_state"] == "fresh"  # a new process with restored state
    new_kernel = session["kernel_id"]
    assert new_kernel and new_kernel != kernel_id
    assert (
        await execute(jp_serverapp, new_kernel, "float(weights.sum()), notes['loss'][1]")
        == "(66.0, 0.25)"
    )

    await asyncio.sleep(0.3)  # the first cell's idle status reaches the monitor
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "running"
    types = event_types(jp_serverapp, notebook_path)
    for expected in (
        "pause-requested",
        "checkpoint-started",
        "checkpoint-finished",
        "kernel-stopped",
        "accelerator-released",
        "paused",
        "resume-requested",
        "kernel-started",
        "restore-finished",
        "first-cell-runnable",
    ):
        assert expected in types, (expected, types)
    cells = [
        e
        for e in jp_serverapp.web_app.settings["jupyter_pause_ledger"].events(path=notebook_path)
        if e.type.value == "cell-executed"
    ]
    assert cells[-1].data["first_after_resume"] is True
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    (released,) = ledger.events(path=notebook_path, types=["accelerator-released"])
    assert released.data["gpus"] is None  # no GPU in use: reports count one slot
    assert cells[-1].data["duration"] >= 0


async def test_a_resumed_kernel_is_ready_before_torch_is_imported(
    jp_fetch, jp_serverapp, notebook_path, tmp_path, monkeypatch
):
    """The resume reports ready, and a cell that does not use torch runs, while the new
    kernel is still importing torch; the model comes back once torch is in."""
    await running_notebook(
        jp_fetch,
        jp_serverapp,
        notebook_path,
        "import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 4)\nepochs = 5",
    )
    op = await operate(jp_fetch, "pause", notebook_path)
    assert op["outcome"] == "succeeded", op
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "sitecustomize.py").write_text(torch_gate(gate / "open"))
    monkeypatch.setenv("PYTHONPATH", str(gate))  # for the kernel the resume starts

    op = await operate(jp_fetch, "resume", notebook_path)
    assert op["outcome"] == "succeeded", op
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "ready"
    kernel_id = session["kernel_id"]
    assert await execute(jp_serverapp, kernel_id, "epochs + 1") == "6"
    held = "from jupyter_pause.engine import lazy; sorted(lazy.active().pending())"
    assert await execute(jp_serverapp, kernel_id, held) == "['model', 'torch']"

    (gate / "open").touch()
    import torch

    torch.manual_seed(0)
    expected = float(torch.nn.Linear(4, 4).weight.detach().sum())
    got = await execute(jp_serverapp, kernel_id, "float(model.weight.detach().sum())")
    # the cell may first show "loading model (80 B/80 B; importing torch)…", then clear it
    assert got.endswith(repr(expected)), got


async def test_a_failed_checkpoint_leaves_the_kernel_running(jp_fetch, jp_serverapp, notebook_path):
    kernel_id = await running_notebook(
        jp_fetch,
        jp_serverapp,
        notebook_path,
        "import threading, jupyter_pause as jp\nlock = jp.track(threading.Lock(), 'lock')\nkept = 5",
    )
    op = await operate(jp_fetch, "pause", notebook_path)

    assert op["outcome"] == "failed"
    assert "lock" in op["error"] and "keeps running" in op["error"]
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "running"
    assert "lock" in session["error"]
    assert session["kernel_id"] == kernel_id
    assert await execute(jp_serverapp, kernel_id, "kept") == "5"
    assert "checkpoint-failed" in event_types(jp_serverapp, notebook_path)
    assert "kernel-stopped" not in event_types(jp_serverapp, notebook_path)


async def test_resume_falls_back_from_a_corrupt_checkpoint_and_never_offers_it(
    jp_fetch, jp_serverapp, notebook_path
):
    await running_notebook(
        jp_fetch, jp_serverapp, notebook_path, "import numpy as np\nvalue = np.ones(1000)"
    )
    assert (await operate(jp_fetch, "checkpoint", notebook_path))["outcome"] == "succeeded"
    older = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]
    kernel_id = (await session_status(jp_fetch, notebook_path))["kernel_id"]
    await execute(jp_serverapp, kernel_id, "value = value * 2")
    assert (await operate(jp_fetch, "pause", notebook_path))["outcome"] == "succeeded"
    latest = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]
    assert latest != older

    # flip one byte in every data file the latest checkpoint owns
    manager = jp_serverapp.web_app.settings["jupyter_pause_manager"]
    info = next(
        c
        for c in checkpoint_store.list_checkpoints(
            manager.checkpointer.checkpoint_dir, notebook_path
        )
        if c.id == latest
    )
    corrupted = 0
    for file in Path(info.path).rglob("*"):
        if file.is_file() and file.name != "manifest.json" and file.stat().st_size > 0:
            data = bytearray(file.read_bytes())
            data[len(data) // 2] ^= 0xFF
            file.write_bytes(bytes(data))
            corrupted += 1
    assert corrupted

    # no id: the newest checkpoint that verifies, and the operation says which it passed over
    op = await operate(jp_fetch, "resume", notebook_path)
    assert op["outcome"] == "succeeded", op
    assert any(latest in m and "passed over" in m for m in op["messages"]), op["messages"]
    kernel_id = (await session_status(jp_fetch, notebook_path))["kernel_id"]
    assert await execute(jp_serverapp, kernel_id, "float(value.sum())") == "1000.0"

    # naming the damaged one fails, and the checkpoints offered instead never include it
    assert (await operate(jp_fetch, "pause", notebook_path))["outcome"] == "succeeded"
    newest = (await session_status(jp_fetch, notebook_path))["last_checkpoint"]["id"]
    code, body = await api(
        jp_fetch,
        "sessions",
        "resume",
        method="POST",
        body={"path": notebook_path, "checkpoint_id": latest},
    )
    op = await wait_operation(jp_fetch, body["operation"]["id"])
    assert op["outcome"] == "failed"
    offered = op["error"].split("resume from instead:")[1]
    assert latest not in offered and offered.strip().startswith(newest), op["error"]
    session = await session_status(jp_fetch, notebook_path)
    assert session["state"] == "failed"
    assert session["kernel_id"] is None
    listed = {
        c.id: c.status
        for c in checkpoint_store.list_checkpoints(
            manager.checkpointer.checkpoint_dir, notebook_path
        )
    }
    assert listed[latest] == "damaged" and listed[older] == "ok"


async def test_single_flight_under_concurrent_requests(jp_fetch, jp_serverapp, notebook_path):
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 1")

    async def pause():
        return await api(jp_fetch, "sessions", "pause", method="POST", body={"path": notebook_path})

    answers = await asyncio.gather(*(pause() for _ in range(20)))
    accepted = [body for code, body in answers if code == 202]
    refused = [body for code, body in answers if code == 409]
    assert len(accepted) == 1 and len(refused) == 19
    assert all(
        accepted[0]["operation"]["id"] in r["message"] or r.get("operation") for r in refused
    )
    await wait_operation(jp_fetch, accepted[0]["operation"]["id"])

    async def resume():
        return await api(
            jp_fetch, "sessions", "resume", method="POST", body={"path": notebook_path}
        )

    answers = await asyncio.gather(*(resume() for _ in range(20)))
    accepted = [body for code, body in answers if code == 202]
    assert len(accepted) == 1
    assert all(code == 409 for code, _ in answers if code != 202)
    op = await wait_operation(jp_fetch, accepted[0]["operation"]["id"])
    assert op["outcome"] == "succeeded"
    types = event_types(jp_serverapp, notebook_path)
    assert types.count("restore-started") == 1


@contextlib.asynccontextmanager
async def kernel_busy_with(jp_serverapp, kernel_id, code):
    """The kernel runs ``code`` as a cell (not awaited); the block starts once the server
    sees it busy."""
    client = start_client(jp_serverapp, kernel_id)
    try:
        # a send before the shell socket is connected can be lost
        await client.wait_for_ready(timeout=60)
        client.execute(code)
        await wait_for_state(jp_serverapp, kernel_id, "busy")
        yield
    finally:
        client.stop_channels()


async def test_a_busy_kernel_is_paused_only_with_force(jp_fetch, jp_serverapp, notebook_path):
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "y = 2")
    async with kernel_busy_with(
        jp_serverapp, kernel_id, "import time\nwhile True: time.sleep(0.1)"
    ):
        code, body = await api(
            jp_fetch, "sessions", "pause", method="POST", body={"path": notebook_path}
        )
        assert code == 409 and "busy" in body["message"]

        code, body = await api(
            jp_fetch,
            "sessions",
            "pause",
            method="POST",
            body={"path": notebook_path, "force": True},
        )
        assert code == 202
        op = await wait_operation(jp_fetch, body["operation"]["id"])
    assert op["outcome"] == "succeeded", op
    assert any("interrupted" in m for m in op["messages"])
    assert "kernel-interrupted" in event_types(jp_serverapp, notebook_path)


async def test_a_pause_asked_as_a_cell_ends_waits_for_the_kernel_to_report_idle(
    jp_fetch, jp_serverapp, notebook_path, tmp_path
):
    """A client that has seen its cell end may ask before the server's own view of the
    kernel has caught up (seen in CI): a kernel busy a moment longer is waited for, not
    refused."""
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "y = 2")
    release = tmp_path / "release"
    cell = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.02)"
    async with kernel_busy_with(jp_serverapp, kernel_id, cell):
        release.touch()  # the cell ends within moments; the server may still see it busy
        code, body = await api(
            jp_fetch, "sessions", "pause", method="POST", body={"path": notebook_path}
        )
    assert code == 202, body
    op = await wait_operation(jp_fetch, body["operation"]["id"])
    assert op["outcome"] == "succeeded", op
    assert "kernel-interrupted" not in event_types(jp_serverapp, notebook_path)


async def test_bad_requests_get_clear_errors(jp_fetch, notebook_path):
    cases = [
        ({}, 400, "path"),
        ({"path": 7}, 400, "path"),
        ({"path": "../outside.ipynb"}, 400, "outside"),
        ({"path": "/etc/passwd"}, 404, "no notebook"),
        ({"path": "missing.ipynb"}, 404, "no notebook"),
    ]
    for body, status, words in cases:
        code, answer = await api(jp_fetch, "sessions", "pause", method="POST", body=body)
        assert code == status, (body, code, answer)
        assert words in answer["message"]
    response = await jp_fetch(
        "jupyter-pause",
        "api",
        "sessions",
        "pause",
        method="POST",
        body="{not json",
        raise_error=False,
    )
    assert response.code == 400
    code, answer = await api(jp_fetch, "operations", "abc123")
    assert code == 404
    code, answer = await api(
        jp_fetch, "sessions", "resume", method="POST", body={"path": notebook_path}
    )
    assert code == 409 and "only a paused notebook resumes" in answer["message"]
    code, answer = await api(jp_fetch, "checkpoints", params={"path": "../../etc"})
    assert code == 400


async def test_checkpoints_can_be_listed_and_deleted(jp_fetch, jp_serverapp, notebook_path):
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "z = list(range(10))")
    assert (await operate(jp_fetch, "checkpoint", notebook_path))["outcome"] == "succeeded"

    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert code == 200
    (checkpoint,) = listing["checkpoints"]
    assert "z" in checkpoint["objects"] and checkpoint["bytes"] > 0

    code, _ = await api(
        jp_fetch, "checkpoints", checkpoint["id"], method="DELETE", params={"path": notebook_path}
    )
    assert code == 204
    code, listing = await api(jp_fetch, "checkpoints", params={"path": notebook_path})
    assert listing["checkpoints"] == []
    code, answer = await api(
        jp_fetch,
        "checkpoints",
        "2020-01-01T00-00-00",
        method="DELETE",
        params={"path": notebook_path},
    )
    assert code == 404


async def test_the_report_counts_the_pause_and_renders_as_a_page(
    jp_fetch, jp_serverapp, notebook_path
):
    await running_notebook(
        jp_fetch, jp_serverapp, notebook_path, "import numpy as np\nm = np.ones(4096)"
    )
    assert (await operate(jp_fetch, "pause", notebook_path))["outcome"] == "succeeded"

    code, report = await api(jp_fetch, "report")
    assert code == 200
    assert report["totals"]["pauses"]["count"] == 1
    assert report["storage"]["bytes_now"] > 4096 * 8  # the checkpoint's files on disk
    (notebook,) = report["by_notebook"]
    assert notebook["key"] == notebook_path

    response = await jp_fetch("jupyter-pause", "api", "report.html")
    assert response.headers["Content-Type"].startswith("text/html")
    assert "script-src" not in response.headers["Content-Security-Policy"]
    page = response.body.decode()
    assert "<svg" in page and notebook_path in page
    code, answer = await api(jp_fetch, "report", params={"since": "yesterday"})
    assert code == 400


async def test_the_pause_magic_pauses_its_own_notebook_after_the_cell(
    jp_fetch, jp_serverapp, notebook_path
):
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "kept = 'yes'")
    assert "running since" in await execute(jp_serverapp, kernel_id, "%pause --status")

    output = await execute(jp_serverapp, kernel_id, "%pause\nprint('the cell finishes first')")
    assert "once this cell finishes" in output and "the cell finishes first" in output
    for _ in range(300):
        session = await session_status(jp_fetch, notebook_path)
        if session["state"] == "paused":
            break
        await asyncio.sleep(0.1)
    assert session["state"] == "paused"
    assert kernel_id not in jp_serverapp.kernel_manager

    code, body = await api(
        jp_fetch, "sessions", "resume", method="POST", body={"path": notebook_path}
    )
    await wait_operation(jp_fetch, body["operation"]["id"])
    kernel_id = (await session_status(jp_fetch, notebook_path))["kernel_id"]
    assert await execute(jp_serverapp, kernel_id, "kept") == "'yes'"


async def test_a_checkpoint_typed_in_a_cell_counts_in_the_ledger_and_the_report(
    jp_fetch, jp_serverapp, notebook_path
):
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "kept = 'yes'")
    await execute(jp_serverapp, kernel_id, "%checkpoint --quiet")
    session = await session_status(jp_fetch, notebook_path)
    checkpoint = session["last_checkpoint"]
    assert (
        checkpoint and checkpoint["bytes"] > 0
    )  # the kernel told the server before the cell ended
    (finished,) = [
        e
        for e in jp_serverapp.web_app.settings["jupyter_pause_ledger"].events(path=notebook_path)
        if e.type.value == "checkpoint-finished"
    ]
    assert finished.data["by"] == "kernel" and finished.data["checkpoint_id"] == checkpoint["id"]
    code, report = await api(jp_fetch, "report")
    assert report["totals"]["checkpoint_bytes"]["n"] == 1

    # told again (or told a checkpoint that does not exist): recorded once, or refused
    body = {"path": notebook_path, "checkpoint_id": checkpoint["id"]}
    code, _ = await api(jp_fetch, "sessions", "checkpointed", method="POST", body=body)
    assert (
        code == 200 and event_types(jp_serverapp, notebook_path).count("checkpoint-finished") == 1
    )
    body["checkpoint_id"] = "2020-01-01T00-00-00"
    code, answer = await api(jp_fetch, "sessions", "checkpointed", method="POST", body=body)
    assert code == 404 and "no checkpoint" in answer["message"]


async def test_the_pause_magic_schedules_the_resume(jp_fetch, jp_serverapp, notebook_path):
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "kept = 'yes'")
    with pytest.raises(AssertionError, match="cannot read 'noon tomorrow' as a resume time"):
        await execute(jp_serverapp, kernel_id, "%pause --resume-at noon tomorrow")
    output = await execute(jp_serverapp, kernel_id, "%pause --resume-at tomorrow 08:45")
    assert "resumes by itself at" in output and "08:45" in output

    async def paused():
        session = await session_status(jp_fetch, notebook_path)
        return session if session["state"] == "paused" else None

    session = await wait_until(paused, timeout=120, what="the %pause")
    expected = time.localtime(session["schedule"]["at"])
    assert (expected.tm_hour, expected.tm_min) == (8, 45)
    assert session["schedule"]["kind"] == "scheduled"
    assert 0 < session["schedule"]["at"] - time.time() <= 48 * 3600


def test_the_pause_magic_says_what_to_do_without_a_server(monkeypatch):
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.delenv("JUPYTER_PAUSE_SERVER_URL", raising=False)
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_pause")
    with pytest.raises(UsageError, match="use %checkpoint"):
        shell.run_line_magic("pause", "")


async def test_ledger_events_are_emitted_on_the_jupyter_event_bus(
    jp_fetch, jp_serverapp, notebook_path
):
    from jupyter_pause.server.app import EVENT_SCHEMA_ID

    received = []

    async def listener(logger, schema_id, data):
        received.append(data)

    jp_serverapp.event_logger.add_listener(schema_id=EVENT_SCHEMA_ID, listener=listener)
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "q = 1")
    code, body = await api(
        jp_fetch, "sessions", "checkpoint", method="POST", body={"path": notebook_path}
    )
    await wait_operation(jp_fetch, body["operation"]["id"])
    await asyncio.sleep(0.2)
    types = [e["type"] for e in received if e["path"] == notebook_path]
    assert "checkpoint-started" in types and "checkpoint-finished" in types
    finished = next(e for e in received if e["type"] == "checkpoint-finished")
    assert finished["data"]["bytes"] > 0 and finished["operation_id"] == body["operation"]["id"]


async def test_a_kernel_shut_down_by_the_user_is_forgotten(jp_fetch, jp_serverapp, notebook_path):
    kernel_id = await running_notebook(jp_fetch, jp_serverapp, notebook_path, "w = 1")
    assert (await session_status(jp_fetch, notebook_path))["state"] == "running"
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    _, status = await api(jp_fetch, "status")
    assert [s for s in status["sessions"] if s["path"] == notebook_path] == []
    stopped = [
        e
        for e in jp_serverapp.web_app.settings["jupyter_pause_ledger"].events(path=notebook_path)
        if e.type.value == "kernel-stopped"
    ]
    assert stopped and stopped[-1].data["stopped_by"] == "user"
