"""A server restart does not forget a paused notebook (real server processes)."""

import time

from jupyter_pause.client import LocalServer

from .helpers import wait_for, write_notebooks


def notebook_and_env(tmp_path):
    root = write_notebooks(tmp_path / "root", "nb.ipynb")
    env = {
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
    }
    return root, env


def pause_the_answer(client):
    """nb.ipynb with ``answer = 42`` in its kernel, paused."""
    kernel_id = client.open_notebook("nb.ipynb")["kernel"]["id"]
    assert client.execute(kernel_id, "answer = 6 * 7").ok
    op = client.wait(client.pause("nb.ipynb"))
    assert op["outcome"] == "succeeded", op


def test_a_restarted_server_still_knows_the_paused_notebook_and_resumes_it(tmp_path):
    root, env = notebook_and_env(tmp_path)
    with LocalServer(root, tmp_path / "state", env=env) as server:
        pause_the_answer(server.start())

    with LocalServer(root, tmp_path / "state", env=env) as server:
        client = server.start()
        session = client.session_status("nb.ipynb")
        assert session["state"] == "paused"
        assert session["last_checkpoint"]["id"]
        op = client.wait(client.resume("nb.ipynb"))
        assert op["outcome"] == "succeeded", op
        kernel_id = client.session_status("nb.ipynb")["kernel_id"]
        assert client.evaluate(kernel_id, "print(answer)") == 42


def test_a_scheduled_resume_survives_a_restart_and_the_notebook_is_ready(tmp_path):
    """Paused at night with a resume scheduled; the server is restarted before
    the time; at the time the notebook comes back by itself, state restored."""
    root, env = notebook_and_env(tmp_path)
    with LocalServer(root, tmp_path / "state", env=env) as server:
        client = server.start()
        pause_the_answer(client)
        schedule = client.schedule("nb.ipynb", time.time() + 20)
        assert client.session_status("nb.ipynb")["schedule"] == schedule

    with LocalServer(root, tmp_path / "state", env=env) as server:
        client = server.start()

        def ready():
            session = client.session_status("nb.ipynb")
            assert session["state"] not in ("failed", "running"), session
            return session if session["state"] == "ready" else None

        session = wait_for(ready, timeout=180, what="the scheduled resume")
        assert session["schedule"] is None
        assert session["resumed_ahead"]["kind"] == "scheduled"
        assert client.evaluate(session["kernel_id"], "print(answer)") == 42
        kinds = [e["type"] for e in client.events()]
        assert "scheduled-resume-started" in kinds and "resume-scheduled" in kinds
