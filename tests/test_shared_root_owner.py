"""A real server whose checkpoint root another Unix user got into first: the pause
goes to the user's private folder and says so, B's folder stays as B left it,
and the resume comes from the private folder."""

from __future__ import annotations

import pytest

from jupyter_pause.client import LocalServer
from jupyter_pause.engine import paths

from .engine.test_shared_root import CASES, HeldLock, needs_root, plant
from .helpers import write_notebooks

pytestmark = pytest.mark.slow


@needs_root
@pytest.mark.parametrize("case", CASES)
def test_a_pause_refuses_a_user_folder_another_user_made_and_resumes_from_its_own(case, tmp_path):
    root = write_notebooks(tmp_path / "root", "nb.ipynb")
    env = {
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTERHUB_USER": "alice",
    }
    server = LocalServer(root, tmp_path / "state", env=env)
    shared = server.checkpoint_dir / paths.folder_name("alice")
    theirs = plant(case, shared, tmp_path / "b-home" / "ck", "nb.ipynb")
    lock = HeldLock(shared / paths.folder_name("nb.ipynb") / ".lock") if case == "lock" else None
    before = sorted(p.name for p in theirs.rglob("*"))
    with server:
        client = server.start()
        kernel = client.open_notebook("nb.ipynb")["kernel"]["id"]
        assert client.execute(kernel, "answer = 6 * 7").ok
        try:
            op = client.wait(client.pause("nb.ipynb"), timeout=300)
        finally:
            if lock:
                lock.close()
        assert op["outcome"] == "succeeded", op
        (message,) = [m for m in op["messages"] if "shared checkpoint folder" in m]
        assert CASES[case] in message and str(shared) in message, message
        assert CASES[case] in server.log_tail()
        assert sorted(p.name for p in theirs.rglob("*")) == before  # nothing of alice's

        private = tmp_path / "data" / "pause" / "checkpoints-private"
        checkpoint = client.session_status("nb.ipynb")["last_checkpoint"]["id"]
        (written,) = private.rglob(checkpoint)
        assert written.parent.parent.name == shared.name

        op = client.wait(client.resume("nb.ipynb"), timeout=300)
        assert op["outcome"] == "succeeded", op
        kernel = client.session_status("nb.ipynb")["kernel_id"]
        assert client.evaluate(kernel, "print(answer)") == 42
