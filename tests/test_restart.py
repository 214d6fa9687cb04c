"""A server restart does not forget a paused notebook (real server processes)."""

import json

from jupyter_pause.client import LocalServer


def test_a_restarted_server_still_knows_the_paused_notebook_and_resumes_it(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    nb = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    (root / "nb.ipynb").write_text(json.dumps(nb))
    env = {
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
    }

    with LocalServer(root, tmp_path / "state", env=env) as server:
        client = server.start()
        kernel_id = client.open_notebook("nb.ipynb")["kernel"]["id"]
        assert client.execute(kernel_id, "answer = 6 * 7").ok
        op = client.wait(client.pause("nb.ipynb"))
        assert op["outcome"] == "succeeded", op

    with LocalServer(root, tmp_path / "state", env=env) as server:
        client = server.start()
        session = client.session_status("nb.ipynb")
        assert session["state"] == "paused"
        assert session["last_checkpoint"]["id"]
        op = client.wait(client.resume("nb.ipynb"))
        assert op["outcome"] == "succeeded", op
        kernel_id = client.session_status("nb.ipynb")["kernel_id"]
        assert client.evaluate(kernel_id, "print(answer)") == 42
