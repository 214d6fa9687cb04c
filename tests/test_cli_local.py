"""``jupyter pause status | list | pause | resume`` against a real Jupyter server on this
machine, found as ``jupyter server list`` finds it; and a fast, clear failure when
there is nothing to talk to."""

from __future__ import annotations

import json
import time

import pytest

from jupyter_pause.cli import main
from jupyter_pause.client import LocalServer


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No Jupyter server running, no Kubernetes configuration."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.mark.parametrize("command", [["status"], ["pause", "nb.ipynb"], ["resume", "nb.ipynb"]])
def test_nothing_to_talk_to_fails_fast_and_says_so(nowhere, capsys, command):
    started = time.monotonic()
    assert main(command) == 1
    err = capsys.readouterr().err
    assert "nothing to talk to" in err and "jupyter lab" in err
    assert time.monotonic() - started < 10


def test_list_with_nothing_to_talk_to_reads_the_checkpoint_store(nowhere, capsys, tmp_path):
    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    assert "no saved state under" in out and "the checkpoint store" in err


def test_a_named_server_that_does_not_answer_fails_fast(nowhere, capsys):
    assert main(["status", "--url", "http://127.0.0.1:9/"]) == 1
    assert "not answering" in capsys.readouterr().err


@pytest.fixture
def local_server(tmp_path, monkeypatch):
    (tmp_path / "root").mkdir()
    server = LocalServer(root_dir=tmp_path / "root", state_dir=tmp_path / "state")
    client = server.start()
    # the CLI finds it where `jupyter server list` looks
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(server.state_dir / "runtime"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    yield server, client
    server.stop()


def test_the_server_logs_the_policy_in_force_at_start_up(local_server):
    server, _ = local_server
    line = next(
        (line for line in server.log_tail(100_000).splitlines() if "auto-pause on" in line), ""
    )
    assert "gpu-interactive: pause after 30 min 00 s idle" in line and "(default)" in line
    assert "never: never acts" in line


def test_pause_is_refused_on_kubernetes_with_where_to_pause_instead(nowhere, capsys, tmp_path):
    assert main(["pause", "nb.ipynb", "--kubeconfig", str(tmp_path / "kubeconfig")]) == 1
    assert "paused by the notebook server inside it" in capsys.readouterr().err


def test_status_list_pause_and_resume_on_the_local_server(local_server, capsys):
    server, client = local_server
    nb = {
        "cells": [],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (server.root_dir / "nb.ipynb").write_text(json.dumps(nb))
    kernel_id = client.open_notebook("nb.ipynb")["kernel"]["id"]
    assert client.execute(kernel_id, "x = 41 + 1").ok

    assert main(["status", "--json"]) == 0
    (session,) = json.loads(capsys.readouterr().out)
    assert session["path"] == "nb.ipynb" and session["state"] == "running"

    assert main(["pause", "missing.ipynb"]) == 1
    assert "missing.ipynb" in capsys.readouterr().err
    assert main(["pause", "nb.ipynb", "--wait"]) == 0
    assert capsys.readouterr().out.strip() == "nb.ipynb: pause succeeded"
    assert main(["status", "nb.ipynb"]) == 0
    assert "paused" in capsys.readouterr().out
    # --verbose: how the pause went, step by step, from its request to its end
    assert main(["status", "nb.ipynb", "--verbose"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("  last pause (succeeded), seconds after its request:")
    timeline = [line for line in lines[start + 1 :] if line.startswith("    ")]
    steps = [line.split(maxsplit=3)[-1] for line in timeline]
    assert steps[0] == "request received" and steps[-1] == "paused"
    assert steps.index("pickled") < steps.index("committed") < steps.index("accelerator released")
    at = [float(line.split()[0]) for line in timeline]
    assert at == sorted(at)

    # a scheduled resume: set, shown by status, refused when unreadable, cancelled
    assert main(["schedule", "nb.ipynb", "tomorrow", "08:45"]) == 0
    assert "nb.ipynb: resumes at" in capsys.readouterr().out
    assert main(["status", "nb.ipynb"]) == 0
    assert "08:45 (scheduled)" in capsys.readouterr().out
    schedule = client.session_status("nb.ipynb")["schedule"]
    assert time.localtime(schedule["at"])[3:5] == (8, 45)
    assert main(["schedule", "nb.ipynb", "teatime"]) == 1
    assert "cannot read 'teatime'" in capsys.readouterr().err
    assert main(["schedule", "nb.ipynb", "--cancel"]) == 0
    assert client.session_status("nb.ipynb")["schedule"] is None
    capsys.readouterr()

    assert main(["list", "nb.ipynb", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert "x" in listing["nb.ipynb"][0]["objects"]

    assert main(["resume", "nb.ipynb", "--wait"]) == 0
    assert "resume succeeded" in capsys.readouterr().out
    assert client.session_status("nb.ipynb")["state"] == "ready"

    # an unknown notebook: a clear message, not a traceback
    assert main(["resume", "missing.ipynb"]) == 1
    assert "missing.ipynb" in capsys.readouterr().err

    # paused again, to resume by itself at a set time
    assert main(["pause", "nb.ipynb", "--wait", "--resume-at", "tomorrow", "08:45:30"]) == 0
    assert "pause succeeded; resumes at" in capsys.readouterr().out
    session = client.session_status("nb.ipynb")
    assert session["state"] == "paused"
    assert time.localtime(session["schedule"]["at"])[3:6] == (8, 45, 30)
