"""The CLI reads what the server reads: ``jupyter pause report | export | list | verify
| gc``, run as a user runs them (``jupyter pause …`` in a subprocess), find the ledger
and the checkpoint store where the ``jupyter_server_config.py`` on the config path puts
them (here a state folder of its own and a SeaweedFS bucket), say which one they read,
and fail with a sentence, never a traceback: a token they can find themselves, a
mistyped notebook, a missing bucket, no Kubernetes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_pause.client import LocalServer

NB = "nb.ipynb"
NOTEBOOK = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
            "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
JUPYTER = Path(sys.executable).parent / "jupyter"


class User:
    """A user's machine: a home, a Jupyter config naming the server's state folder and a
    bucket, the server once it ran."""

    def __init__(self, home: Path, url: str, store_env: dict[str, str]):
        self.home = home
        self.url = url
        self.root = home / "work"
        self.state = home / "srv-state"
        self.config = home / ".jupyter" / "jupyter_server_config.py"
        self.root.mkdir(parents=True)
        (self.root / NB).write_text(json.dumps(NOTEBOOK))
        self.config.parent.mkdir()
        self.config.write_text(
            f"c = get_config()\nc.PauseApp.state_dir = {str(self.state)!r}\n"
            f"c.PauseApp.checkpoint_dir = {url!r}\n"
        )
        self.env = {
            "PATH": f"{JUPYTER.parent}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(home),  # no ~/.kube/config: no Kubernetes
            "JUPYTER_CONFIG_DIR": str(self.config.parent),
            "JUPYTER_DATA_DIR": str(home / "data"),
            **store_env,
        }
        self.server: LocalServer | None = None

    def start_server(self):
        # LocalServer names the state folder and the checkpoint root on the command line
        # too: the same ones as the config file
        self.server = LocalServer(self.root, self.state, checkpoints=self.url, env=dict(self.env))
        return self.server.start()

    def jupyter_pause(self, *args: str, cwd: Path | None = None):
        done = subprocess.run(
            [str(JUPYTER), "pause", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd or self.home,
            timeout=300,
            check=False,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done


@pytest.fixture(scope="module")
def user(tmp_path_factory, seaweed):
    """One notebook paused by a server configured from a jupyter_server_config.py, its
    checkpoint in a bucket; the server still runs (``user.server``)."""
    bucket = "cli-config"
    seaweed.create_bucket(bucket)
    me = User(tmp_path_factory.mktemp("home"), f"s3://{bucket}/ck", seaweed.env())
    client = me.start_server()
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    assert client.execute(kernel_id, "answer = 42").ok
    assert client.wait(client.pause(NB))["outcome"] == "succeeded"
    # the server's runtime file is where `jupyter server list` (and the CLI) looks
    runtime = me.state / "runtime"
    me.env["JUPYTER_RUNTIME_DIR"] = str(runtime)
    yield me
    me.server.stop()


def test_report_reads_the_ledger_the_config_names_and_says_so(user):
    done = user.jupyter_pause("report", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [p["path"] for p in report["pauses"]] == [NB]
    ledger = user.state / "ledger.sqlite3"
    assert f"the ledger {ledger}" in done.stderr
    assert f"c.PauseApp.state_dir in {user.config}" in done.stderr


def test_report_of_a_url_finds_the_running_servers_token(user):
    done = user.jupyter_pause("report", "--url", user.server.url, "--format", "json")
    assert done.returncode == 0, done.stderr
    assert [p["path"] for p in json.loads(done.stdout)["pauses"]] == [NB]
    refused = user.jupyter_pause("report", "--url", user.server.url, "--token", "wrong")
    assert refused.returncode != 0 and "HTTP 403" in refused.stderr


def test_export_takes_the_checkpoint_from_the_configured_bucket(user, tmp_path):
    shutil.rmtree(user.home / "data" / "pause" / "checkpoint-cache")  # only the bucket has it
    out = tmp_path / "nb.bundle"
    done = user.jupyter_pause("export", NB, "-o", str(out), cwd=user.root)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0 and "exported checkpoint" in done.stdout
    assert f"the checkpoint store {user.url} (c.PauseApp.checkpoint_dir in" in done.stderr


def test_export_of_a_mistyped_notebook_or_a_missing_bucket_says_which(user, tmp_path):
    out = str(tmp_path / "x.bundle")
    typo = user.jupyter_pause("export", "nb.ipnyb", "-o", out, cwd=user.root)
    assert typo.returncode == 1
    assert "there is no notebook 'nb.ipnyb'" in typo.stderr and "Errno" not in typo.stderr
    missing = "s3://no-such-bucket-here/ck"
    gone = user.jupyter_pause("export", NB, "--dir", missing, "-o", out, cwd=user.root)
    assert gone.returncode == 1
    assert "the bucket does not exist" in gone.stderr and missing in gone.stderr, gone.stderr


def test_list_reads_the_store_with_dir_and_without_a_server(user):
    listed = user.jupyter_pause("list", "--dir", user.url, "--json")
    assert listed.returncode == 0, listed.stderr
    [checkpoint] = json.loads(listed.stdout)[NB]
    assert "answer" in checkpoint["objects"]
    # no server running here, no Kubernetes: the store the config names
    env = dict(user.env, JUPYTER_RUNTIME_DIR=str(user.home / "no-runtime"))
    done = subprocess.run(
        [str(JUPYTER), "pause", "list"], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert f"{NB}:" in done.stdout and checkpoint["id"] in done.stdout
    assert f"the checkpoint store {user.url}" in done.stderr


def test_verify_and_gc_use_the_configured_bucket_without_kubernetes(user):
    verified = user.jupyter_pause("verify", "--json")
    assert verified.returncode == 0, verified.stderr
    [notebook] = json.loads(verified.stdout)["notebooks"]
    assert notebook["notebook"] == NB and len(notebook["restorable"]) == 1
    for args in (["--checkpoints-dir"], ["--checkpoints-dir", user.url]):
        gc = user.jupyter_pause("gc", "--older-than", "7d", *args, "--json")
        assert gc.returncode == 0, gc.stderr
        assert "kubeconfig" not in gc.stderr
        kept = json.loads(gc.stdout)["checkpoints"]
        assert kept["deleted"] == [] and len(kept["kept"]) == 1
