"""A kernel that goes without a pause (SIGKILL as the OOM killer sends it, or the
server stopped under it) leaves a notebook whose saved state no kernel holds: the
notebook is ``failed`` (or ``paused`` again, after a resume), ``GET status`` offers
that state back (``saved_state_unrestored``), resume brings it back into the kernel
the notebook has, and a restart someone asked for offers nothing (real server
processes and kernels)."""

import os
import signal

import pytest

from jupyter_pause.client import ClientError

from .helpers import wait_for
from .test_recovery import NB, kill_server, server_factory, start_notebook  # noqa: F401

pytestmark = pytest.mark.slow


def checkpointed(client, code="answer = 6 * 7"):
    """NB with ``answer`` in its kernel, checkpointed; the kernel's id and pid."""
    kernel_id, pid = start_notebook(client, code)
    op = client.wait(client.checkpoint(NB))
    assert op["outcome"] == "succeeded", op
    return kernel_id, pid


def answers(client, kernel_id) -> bool:
    """The kernel runs code (again, after a restart)."""
    try:
        return client.evaluate(kernel_id, "print(1)", timeout=10) == 1
    except Exception:  # the kernel is still restarting
        return False


def has_answer(client, kernel_id) -> bool:
    return client.evaluate(kernel_id, "print(int('answer' in globals()))") == 1


def unrestored(client):
    return (client.session_status(NB) or {}).get("saved_state_unrestored")


def test_a_killed_kernel_offers_its_saved_state_back_and_resume_restores_it(
    server_factory,  # noqa: F811
):
    client = server_factory().start()
    kernel_id, pid = checkpointed(client)
    saved = client.session_status(NB)["last_checkpoint"]
    assert unrestored(client) is None

    os.kill(pid, signal.SIGKILL)  # what the OOM killer does
    offer = wait_for(lambda: unrestored(client), 60, what="the offer of the saved state")
    assert offer["checkpoint"] == saved["id"]
    assert offer["at"] == saved["time"]
    assert offer["lost"].startswith("the kernel died")
    assert client.session_status(NB)["state"] == "failed"
    # Jupyter restarted the kernel empty, under the same id
    wait_for(lambda: answers(client, kernel_id), 60, what="the restarted kernel")
    assert not has_answer(client, kernel_id)

    op = client.wait(client.resume(NB, saved["id"]))
    assert op["outcome"] == "succeeded", op
    session = client.session_status(NB)
    assert session["kernel_id"] == kernel_id  # restored into the kernel the tab holds
    assert client.evaluate(kernel_id, "print(answer)") == 42
    assert session["saved_state_unrestored"] is None


def test_a_restart_asked_for_offers_nothing(server_factory):  # noqa: F811
    client = server_factory().start()
    kernel_id, _ = checkpointed(client)
    client.restart_kernel(kernel_id)
    wait_for(lambda: answers(client, kernel_id), 60, what="the restarted kernel")
    assert not has_answer(client, kernel_id)
    session = client.session_status(NB)
    assert session["saved_state_unrestored"] is None
    assert session["state"] == "running" and session["lost"] is None
    # and a running notebook is not resumed over its live kernel
    with pytest.raises(ClientError) as refused:
        client.resume(NB)
    assert refused.value.status == 409


def test_a_server_stopped_under_a_live_kernel_offers_the_saved_state_after_its_restart(
    server_factory,  # noqa: F811
):
    server = server_factory()
    client = server.start()
    _, pid = checkpointed(client)
    saved = client.session_status(NB)["last_checkpoint"]
    kill_server(server, pid)

    client = server.start()
    session = client.session_status(NB)
    assert session["state"] == "failed" and session["kernel_id"] is None, session
    offer = session["saved_state_unrestored"]
    assert offer["checkpoint"] == saved["id"] and offer["at"] == saved["time"]
    assert offer["lost"] == "the server stopped under the kernel, without a pause"

    op = client.wait(client.resume(NB, offer["checkpoint"]))
    assert op["outcome"] == "succeeded", op
    session = client.session_status(NB)
    assert client.evaluate(session["kernel_id"], "print(answer)") == 42
    assert session["saved_state_unrestored"] is None


def test_a_resumed_notebook_whose_server_stopped_under_it_offers_the_state_it_came_from(
    server_factory,  # noqa: F811
):
    server = server_factory()
    client = server.start()
    start_notebook(client, "answer = 6 * 7")
    assert client.wait(client.pause(NB))["outcome"] == "succeeded"
    holder = client.session_status(NB)["last_checkpoint"]["id"]
    assert client.wait(client.resume(NB))["outcome"] == "succeeded"
    kernel_id = client.session_status(NB)["kernel_id"]
    pid = client.evaluate(kernel_id, "import os; print(os.getpid())")
    kill_server(server, pid)

    client = server.start()
    session = client.session_status(NB)
    assert session["state"] == "paused", session  # paused again on its checkpoint
    assert session["saved_state_unrestored"]["checkpoint"] == holder
    op = client.wait(client.resume(NB, holder))
    assert op["outcome"] == "succeeded", op
    session = client.session_status(NB)
    assert client.evaluate(session["kernel_id"], "print(answer)") == 42
    assert session["saved_state_unrestored"] is None
