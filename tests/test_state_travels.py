"""State that travels by itself (issue 37): servers that share nothing but a bucket of a
real SeaweedFS (or fake-gcs-server) and the user's key file, each with its own notebook
folder, data directory, state directory and cache, as the next pod on another node has.

Another node lists, resumes and schedules a notebook it never saw; it writes the
notebook file it lacks and never overwrites one it has; a node without the key names the
key it needs; of two nodes racing to resume one notebook exactly one wins, and the other
says which server has it.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import psutil
import pytest

from jupyter_pause.cli import main
from jupyter_pause.client import ClientError, LocalServer
from jupyter_pause.engine import paths, remote, signing
from tests.helpers import wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
NB = "work/demo.ipynb"
CODE = "import numpy as np\nbig = np.arange(300_000, dtype=np.float64)\nn = 7\n"
CHECK = "print([n, float(big.sum())])"
EXPECTED = [7, float(sum(range(300_000)))]


def notebook(*sources: str) -> dict:
    return {
        "cells": [
            {"cell_type": "code", "source": s, "metadata": {}, "outputs": [], "execution_count": None}
            for s in sources
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 4,
    }  # fmt: skip


@pytest.fixture
def nodes(tmp_path):
    """``nodes(name, store, url, key=...)``: a server of its own node: its notebook folder
    (empty unless ``files``), data directory, state directory and cache. ``key`` is the
    key file it is configured with (``c.PauseApp.key_file``): the user's by default."""
    made = []
    user_key = tmp_path / "secret" / "key"  # a mounted Secret, say

    def make(name, store, url, *, key: Path | None = user_key, files: dict | None = None):
        root = tmp_path / name / "root"
        (root / "work").mkdir(parents=True)
        for rel, content in (files or {}).items():
            (root / rel).write_text(json.dumps(content))
        env = {
            **store.env(),
            "JUPYTER_DATA_DIR": str(tmp_path / name / "data"),
            "JUPYTER_CONFIG_DIR": str(tmp_path / name / "config"),
            "PYTHONPATH": str(REPO),
        }
        args = ["--PauseApp.bucket_sync_interval=1", f"--PauseApp.key_file={key}"]
        server = LocalServer(
            root, tmp_path / name / "state", env=env, checkpoints=url, extra_args=args
        )
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


@pytest.fixture(params=["s3", "gs"])
def store_url(request, tmp_path):
    """A fresh bucket of a real SeaweedFS or fake-gcs-server, and its URL."""
    if request.param == "s3":
        seaweed = request.getfixturevalue("seaweed")
        bucket = request.getfixturevalue("bucket")
        return seaweed, f"s3://{bucket}/ck"
    fake_gcs = request.getfixturevalue("fake_gcs")
    name = f"travel-{time.monotonic_ns()}"
    fake_gcs.create_bucket(name)
    return fake_gcs, f"gs://{name}/ck"


def pause_with_state(client, **options) -> None:
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    assert client.execute(kernel_id, CODE).ok
    op = client.wait(client.pause(NB, **options))
    assert op["outcome"] == "succeeded", op


def learned(server, client, state: str = "paused"):
    """Wait until the server lists the notebook in ``state`` (its next look at the bucket)."""
    return wait_for(
        lambda: (s := client.session_status(NB)) and s["state"] == state and s,
        60,
        lambda: f"{NB} to be listed {state}: {client.session_status(NB)}\n{server.log_tail()}",
    )


def test_another_node_lists_and_resumes_a_notebook_it_never_saw(nodes, store_url, capsys):
    store, url = store_url
    a = nodes("a", store, url, files={NB: notebook("n = 7", "big.sum()")})
    pause_with_state(a.start())
    a.stop()

    b = nodes("b", store, url)  # no notebook, no state, no cache: the bucket and the key
    client = b.start()
    session = learned(b, client)
    assert session["origin"] and session["last_checkpoint"]["id"]
    assert session["can"]["resume"] and session["paused_by"] == "user"
    assert main(["status", NB, "--url", client.base_url, "--token", client.token]) == 0
    assert "paused" in capsys.readouterr().out.lower()

    op = client.wait(client.resume(NB))
    assert op["outcome"] == "succeeded", op
    written = b.root_dir / NB
    assert nbformat.read(written, as_version=4).cells[0].source == "n = 7"
    assert any("written from the copy kept at its pause" in m for m in op["messages"]), op
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, CHECK) == EXPECTED


def test_another_node_fires_a_schedule_it_never_saw(nodes, seaweed, bucket):
    url = f"s3://{bucket}/ck"
    a = nodes("a", seaweed, url, files={NB: notebook("n = 7")})
    at = time.time() + 60  # b must start and list it before then, on a loaded machine too
    pause_with_state(a.start(), resume_at=at)
    a.stop()

    b = nodes("b", seaweed, url)
    client = b.start()
    assert learned(b, client)["schedule"]["at"] == pytest.approx(at)
    session = wait_for(
        lambda: (s := client.session_status(NB)) and s["state"] == "ready" and s,
        180,
        lambda: f"the scheduled resume: {client.session_status(NB)}\n{b.log_tail()}",
    )
    assert time.time() >= at and session["resumed_ahead"]["kind"] == "scheduled"
    assert client.evaluate(session["kernel_id"], CHECK) == EXPECTED


def test_a_notebook_file_here_is_never_overwritten_and_the_paused_one_is_kept_beside(
    nodes, seaweed, bucket
):
    url = f"s3://{bucket}/ck"
    a = nodes("a", seaweed, url, files={NB: notebook("n = 7", "# as paused")})
    pause_with_state(a.start())
    a.stop()

    edited = notebook("n = 7", "# edited on b meanwhile")
    b = nodes("b", seaweed, url, files={NB: edited})
    client = b.start()
    learned(b, client)
    op = client.wait(client.resume(NB))
    assert op["outcome"] == "succeeded", op
    assert json.loads((b.root_dir / NB).read_text()) == edited  # untouched
    (beside,) = (b.root_dir / "work").glob("demo (as paused, *).ipynb")
    assert nbformat.read(beside, as_version=4).cells[1].source == "# as paused"
    assert any("differs from the notebook as it was paused" in m for m in op["messages"]), op


def test_two_nodes_racing_to_resume_exactly_one_wins_and_the_other_names_it(nodes, seaweed, bucket):
    url = f"s3://{bucket}/ck"
    a = nodes("a", seaweed, url, files={NB: notebook("n = 7")})
    pause_with_state(a.start())
    a.stop()
    servers = {name: nodes(name, seaweed, url) for name in ("b", "c")}
    clients = {name: server.start() for name, server in servers.items()}
    for name, client in clients.items():
        learned(servers[name], client)

    def resume(name):
        try:
            return name, clients[name].wait(clients[name].resume(NB))
        except ClientError as e:
            return name, e

    with ThreadPoolExecutor(2) as pool:
        answers = dict(pool.map(resume, servers))
    won = [n for n, a in answers.items() if isinstance(a, dict) and a["outcome"] == "succeeded"]
    lost = [n for n, a in answers.items() if isinstance(a, ClientError)]
    assert len(won) == 1 and len(lost) == 1, answers
    (winner,), (loser,) = won, lost
    refusal = answers[loser]
    winner_id = (servers[winner].state_dir / "server-id").read_text().strip()
    assert refusal.status == 409 and f"(server {winner_id})" in str(refusal), refusal
    assert "on another server" in str(refusal)
    kernel_id = clients[winner].session_status(NB)["kernel_id"]
    assert clients[winner].evaluate(kernel_id, CHECK) == EXPECTED
    # the loser no longer shows it paused: the bucket says where it is
    wait_for(
        lambda: (clients[loser].session_status(NB) or {}).get("state") != "paused",
        60,
        "the losing node to stop listing the notebook as paused",
    )


def test_a_node_without_the_key_names_the_key_it_needs_and_never_says_corrupt(
    nodes, seaweed, bucket, tmp_path
):
    url = f"s3://{bucket}/ck"
    a = nodes("a", seaweed, url, files={NB: notebook("n = 7")})
    pause_with_state(a.start())
    a.stop()
    needed = signing.key_id((tmp_path / "secret" / "key").read_bytes().strip())

    other_key = tmp_path / "b-secret" / "key"
    b = nodes("b", seaweed, url, key=other_key)
    client = b.start()
    session = learned(b, client, "failed")
    assert needed in session["error"] and str(other_key) in session["error"], session
    assert "corrupt" not in session["error"].lower()

    with pytest.raises(ClientError) as refused:
        client.resume(NB)
    assert refused.value.status == 409
    assert f"copy the key with fingerprint {needed} to {other_key}" in str(refused.value)

    listed = client.api("GET", "checkpoints", path=NB, verify="1")["checkpoints"]
    assert listed and all(c["status"] == "untrusted" and c["foreign"] for c in listed), listed
    assert all(needed in c["problem"] and "corrupt" not in c["problem"].lower() for c in listed)


def test_a_notebook_whose_server_vanished_is_resumed_elsewhere_from_its_last_checkpoint(
    nodes, seaweed, bucket
):
    """A lost node (a spot preemption larger than its grace, a power cut): its server
    never paused the notebook, and its hold in the bucket goes unrenewed. Another node
    lists the notebook as failed, saying why, and resumes its last checkpoint."""
    url = f"s3://{bucket}/ck"
    hold = ["--PauseApp.bucket_hold_timeout=8"]
    a = nodes("a", seaweed, url, files={NB: notebook("n = 7")})
    a.extra_args += hold
    client = a.start()
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    assert client.execute(kernel_id, CODE).ok
    assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"
    assert client.execute(kernel_id, "n = 8").ok  # after the checkpoint: lost with the node
    lost = psutil.Process(a.process.pid)
    processes = [lost, *lost.children(recursive=True)]
    for process in processes:
        process.kill()
    psutil.wait_procs(processes, timeout=30)

    b = nodes("b", seaweed, url)
    b.extra_args += hold
    client = b.start()
    session = learned(b, client, "failed")
    assert "stopped answering" in session["error"] and a.process.pid != b.process.pid
    op = client.wait(client.resume(NB))
    assert op["outcome"] == "succeeded", op
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, CHECK) == EXPECTED  # n = 7: the last checkpoint's


def test_a_resume_that_finds_only_an_older_checkpoint_than_the_record_names_says_so(
    nodes, seaweed, bucket
):
    url = f"s3://{bucket}/ck"
    a = nodes("a", seaweed, url, files={NB: notebook("n = 7")})
    client = a.start()
    pause_with_state(client)
    first = client.session_status(NB)["last_checkpoint"]["id"]
    assert client.wait(client.resume(NB))["outcome"] == "succeeded"
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.execute(kernel_id, "n = 8").ok
    assert client.wait(client.pause(NB))["outcome"] == "succeeded"
    newest = client.session_status(NB)["last_checkpoint"]["id"]
    a.stop()
    # the newest checkpoint vanishes from the bucket (a rollback by deletion)
    mirror = remote.Remote(paths.parse_bucket(url), "")
    mirror.delete([n for n in mirror.listing() if f"/{newest}/" in n])

    b = nodes("b", seaweed, url)
    client = b.start()
    assert learned(b, client)["last_checkpoint"]["id"] == newest
    op = client.wait(client.resume(NB))
    assert op["outcome"] == "succeeded", op
    assert client.session_status(NB)["state_checkpoint"] == first
    said = " ".join(op["messages"])
    assert f"newest checkpoint, {newest}, is gone" in said and f"older {first}" in said, said
    assert client.evaluate(client.session_status(NB)["kernel_id"], "print(n)") == 7
