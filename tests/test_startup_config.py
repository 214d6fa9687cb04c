"""An admin is never misled at start-up: a bad setting stops the server, named, with no
secret in the log; a checkpoint store that cannot be used is said at once, not at the
first pause; the log says what is in force (real server processes, settings in a
``jupyter_server_config.py`` on the config path)."""

from __future__ import annotations

import json

import pytest

from jupyter_pause.client import LocalServer
from jupyter_pause.engine import paths

from .helpers import wait_for

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY"
NB = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
      "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}  # fmt: skip


def server(
    tmp_path, config: str = "", checkpoints: str | None = None, env=None, backend="local"
) -> LocalServer:
    """A server whose settings come from ``config``, a jupyter_server_config.py (its
    checkpoint root and backend from the command line, as LocalServer passes them)."""
    (tmp_path / "root").mkdir(exist_ok=True)
    (tmp_path / "root" / "nb.ipynb").write_text(json.dumps(NB))
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "jupyter_server_config.py").write_text(f"c = get_config()\n{config}")
    environment = {
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        **(env or {}),
    }
    return LocalServer(
        tmp_path / "root", tmp_path / "state", backend=backend, env=environment,
        checkpoints=checkpoints,
    )  # fmt: skip


@pytest.mark.parametrize(
    "config, checkpoints, named",
    [
        ("", "s3://ab/checkpoints", "c.PauseApp.checkpoint_dir"),  # one character short
        ("", f"s3://AKIAEXAMPLE:{SECRET}@team-bucket/p", "c.PauseApp.checkpoint_dir"),
        ("", "s3://team_bucket/p", "c.PauseApp.checkpoint_dir"),  # S3 refuses "_"
        ("c.PauseApp.prediction_time_zone = 'Mars/Olympus_Mons'", None,
         "c.PauseApp.prediction_time_zone"),
        ("c.PauseApp.workload_classes = {'gpu-interactive': {'idle_treshold': 60}}", None,
         "c.PauseApp.workload_classes"),
        ("c.PauseApp.default_workload_class = 'gpu-interative'", None,
         "c.PauseApp.default_workload_class"),
        ("", None, "c.PauseApp.backend"),  # "kubeflow", below
    ],
    ids=["short-bucket", "credentials", "underscore", "time-zone", "class-setting",
         "default-class", "backend"],
)  # fmt: skip
def test_a_bad_setting_stops_the_server_naming_it_and_no_secret(
    tmp_path, config, checkpoints, named
):
    bad = server(
        tmp_path, config, checkpoints, backend="kubeflow" if "backend" in named else "local"
    )
    with pytest.raises(RuntimeError, match="jupyter server exited") as stopped:
        bad.start(timeout=120)
    log = bad.log_tail(100_000)
    assert bad.process.returncode != 0
    assert named in log and "does not start with these settings" in log, log
    assert "extension failed loading" not in log
    assert SECRET not in log and SECRET not in str(stopped.value)
    if "AKIA" in (checkpoints or ""):
        assert "s3://***@team-bucket/p" in log and "do not belong in the URL" in log


def test_an_unusable_key_file_stops_the_server_naming_it(tmp_path):
    """c.PauseApp.key_file names a file that exists but holds no key (a Secret mounted
    empty): never replaced by a new key, which would make every checkpoint foreign."""
    key = tmp_path / "secret" / "key"
    key.parent.mkdir()
    key.write_text("")
    bad = server(tmp_path, f"c.PauseApp.key_file = {str(key)!r}\n", None)
    with pytest.raises(RuntimeError, match="jupyter server exited"):
        bad.start(timeout=120)
    log = bad.log_tail(100_000)
    assert "c.PauseApp.key_file" in log and "it is empty" in log, log
    assert key.read_text() == ""


def test_bucket_names_follow_each_stores_rule():
    with pytest.raises(ValueError, match="3-63 of a-z 0-9 . -\\)"):
        paths.parse_bucket("s3://team_bucket/p")
    assert paths.parse_bucket("gs://team_bucket/p").bucket == "team_bucket"  # GCS allows it
    assert paths.parse_bucket("s3://team.bucket-1/p").bucket == "team.bucket-1"
    assert paths.redact(f"s3://KEY:{SECRET}@b/p") == "s3://***@b/p"
    assert paths.redact("/home/me/a@b") == "/home/me/a@b"


AUTOSAVE = {"gpu-interactive": {"autosave_every": 300}}


def test_the_start_up_says_what_is_in_force_and_that_the_bucket_is_missing(
    tmp_path, seaweed, monkeypatch
):
    url = "s3://no-such-bucket-here/checkpoints"
    config = f"c.PauseApp.workload_classes = {AUTOSAVE!r}\nc.PauseApp.shutdown_grace = 40\n"
    lab = server(tmp_path, config, url, env=seaweed.env())
    client = lab.start()
    try:

        def said(text):
            return text in lab.log_tail(1_000_000)

        wait_for(lambda: said("checkpoint store cannot be used"), 60, "the store's warning")
        log = lab.log_tail(1_000_000)
        warning = next(line for line in log.splitlines() if "cannot be used" in line)
        assert "the bucket does not exist" in warning and url in warning, warning
        assert "[W " in warning
        in_force = next(line for line in log.splitlines() if "jupyter-pause 0" in line)
        assert f"checkpoints in {url}" in in_force, in_force
        assert "within 40.0 s" in in_force, in_force
        policy = next(line for line in log.splitlines() if "auto-pause on" in line)
        assert "gpu-interactive: pause after 30 min 00 s idle" in policy
        assert "autosaved after 5 min 00 s of use" in policy, policy

        client.open_notebook("nb.ipynb")
        session = client.session_status("nb.ipynb")
        assert session["policy"]["autosave_every"] == 300
    finally:
        lab.stop()
