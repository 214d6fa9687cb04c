"""Real Jupyter servers and kernels with their checkpoints in a bucket of a real
SeaweedFS: a pause ends only once the checkpoint is in the bucket (a store that is down
leaves the kernel running); a fresh server on another node, with another data directory
and an empty cache, restores the notebook from the bucket."""

import re
import shutil
from pathlib import Path

import psutil
import pytest

from jupyter_pause.cli import main
from jupyter_pause.client import ClientError, LocalServer
from jupyter_pause.engine import paths, remote
from tests.helpers import wait_for, write_notebooks
from tests.objectstores import FakeGCS, Gate, Seaweed

REPO = Path(__file__).resolve().parent.parent
NB = "demo.ipynb"
CODE = "import numpy as np\nbig = np.arange(600_000, dtype=np.float64)\nn = 7\n"
CHECK = "print([n, float(big.sum())])"
EXPECTED = [7, float(sum(range(600_000)))]


@pytest.fixture
def node(tmp_path, started):
    """``node(name, store, url)``: a server of a "node" with its own data directory (the
    key, the cache) and, unless ``state`` is given, its own state directory; the user's
    key is the first node's."""
    root = write_notebooks(tmp_path / "root", NB)

    def make(
        name: str, store: Seaweed | FakeGCS, url: str, state: Path | None = None
    ) -> LocalServer:
        data = tmp_path / name / "data"
        first = tmp_path / "a" / "data" / "pause" / "secret"
        if name != "a" and first.exists():  # the user's key came along, nothing else
            (data / "pause").mkdir(parents=True, mode=0o700)
            shutil.copy2(first, data / "pause" / "secret")
        env = {
            **store.env(),
            "JUPYTER_DATA_DIR": str(data),
            "JUPYTER_CONFIG_DIR": str(tmp_path / name / "config"),
            "PYTHONPATH": str(REPO),
        }
        server = LocalServer(root, state or tmp_path / name / "state", env=env, checkpoints=url)
        started.append(server)
        return server

    return make


def committed(store: Seaweed | FakeGCS, url: str, monkeypatch) -> list[str]:
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    b = paths.parse_bucket(url)
    listing = remote.Remote(b, "").listing()
    return sorted(n for n in listing if n.endswith("/" + remote.SIGNATURE))


def running_with_state(client) -> str:
    """The notebook opened and its state made; its kernel's id."""
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    assert client.execute(kernel_id, CODE).ok
    return kernel_id


def pause_with_state(client) -> str:
    kernel_id = running_with_state(client)
    op = client.wait(client.pause(NB))
    assert op["outcome"] == "succeeded", op
    return kernel_id


def resume_with_state(client) -> dict:
    """Resume the notebook: it succeeds and its kernel has the state back; the operation."""
    op = client.wait(client.resume(NB))
    assert op["outcome"] == "succeeded", op
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, CHECK) == EXPECTED
    return op


def resumes_from_the_bucket(client, url: str) -> None:
    """The paused notebook resumes with its state, downloaded from the bucket at ``url``
    (this node has no copy)."""
    assert client.session_status(NB)["state"] == "paused"
    op = resume_with_state(client)
    assert any("downloaded from " + url in m for m in op["messages"]), op["messages"]


def pause_fails_naming(client, kernel_id: str, url: str) -> dict:
    """A pause fails naming the store at ``url``, and the kernel runs on with its state
    (nothing was released); the operation."""
    op = client.wait(client.pause(NB))
    assert op["outcome"] == "failed"
    assert "checkpoint store " + url in op["error"], op
    session = client.session_status(NB)
    assert session["state"] == "running" and session["kernel_id"] == kernel_id
    assert client.evaluate(kernel_id, CHECK) == EXPECTED
    return op


def test_a_fresh_server_on_another_node_restores_the_notebook_from_the_bucket(
    node, seaweed, bucket, monkeypatch
):
    url = f"s3://{bucket}/ck"
    a = node("a", seaweed, url)
    pause_with_state(a.start())
    assert len(committed(seaweed, url, monkeypatch)) == 1  # durable before the release
    a.stop()

    b = node("b", seaweed, url)  # another data directory, another state directory
    client = b.start()
    assert not list((b.state_dir.parent / "data").glob("pause/checkpoint-cache/*/*/*"))
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    out = client.execute(kernel_id, "%restore")
    assert out.ok, out
    assert "downloaded from " + url in out.stdout, out
    assert client.evaluate(kernel_id, CHECK) == EXPECTED


def test_a_resume_on_a_node_without_the_data_volume_restores_from_the_bucket_and_says_so(
    node, seaweed, bucket, monkeypatch
):
    url = f"s3://{bucket}/ck"
    a = node("a", seaweed, url)
    pause_with_state(a.start())
    a.stop()
    # the sessions' state is on the regional disk with the notebooks; the data volume
    # (key aside, the cache) did not follow
    b = node("b", seaweed, url, state=a.state_dir)
    client = b.start()
    resumes_from_the_bucket(client, url)


def down_and_back(node, store: Seaweed | FakeGCS, url: str, monkeypatch) -> None:
    """While ``store`` is down, a pause fails and the kernel runs on, and the listing
    names the store (503, not 500); back up, a retry pauses, durable in the bucket, and
    the resume has the state."""
    client = node("a", store, url).start()
    kernel_id = running_with_state(client)

    store.kill()
    pause_fails_naming(client, kernel_id, url)
    with pytest.raises(ClientError) as listing:  # the store is named, not a 500
        client.checkpoints(NB)
    assert listing.value.status == 503 and url in str(listing.value)

    store.start()  # back, on its own data
    op = client.wait(client.pause(NB))
    assert op["outcome"] == "succeeded", op
    assert len(committed(store, url, monkeypatch)) == 1
    resume_with_state(client)


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_a_store_that_is_down_leaves_the_kernel_running_and_a_retry_pauses(
    node, tmp_path, monkeypatch, scheme
):
    """On SeaweedFS (s3) and on fake-gcs-server (gs)."""
    store = Seaweed(tmp_path / "weed") if scheme == "s3" else FakeGCS(tmp_path / "gcs")
    store.start()
    try:
        store.create_bucket("down")
        down_and_back(node, store, f"{scheme}://down/ck", monkeypatch)
    finally:
        store.close()


def test_a_bucket_out_of_quota_leaves_the_kernel_running_and_a_retry_pauses(
    node, seaweed, bucket, monkeypatch
):
    url = f"s3://{bucket}/ck"
    client = node("a", seaweed, url).start()
    kernel_id = running_with_state(client)

    seaweed.fill_quota(bucket)
    op = pause_fails_naming(client, kernel_id, url)
    assert "out of quota" in op["error"], op
    session = client.session_status(NB)
    # committed here, not in the bucket: what a resume would restore, and said so
    (kept,) = [c["id"] for c in client.checkpoints(NB)]
    assert session["last_checkpoint"]["id"] == kept
    assert any("is not in the bucket" in m for m in op["messages"]), op["messages"]
    assert committed(seaweed, url, monkeypatch) == []

    seaweed.lift_quota(bucket)
    op = client.wait(client.pause(NB))
    assert op["outcome"] == "succeeded", op
    assert len(committed(seaweed, url, monkeypatch)) == 2  # the one kept locally went up too
    resume_with_state(client)


class Through:
    """A store reached through a :class:`Gate`: its credentials, the gate's endpoint."""

    def __init__(self, store: Seaweed, gate: Gate):
        self.store, self.gate = store, gate

    def env(self) -> dict[str, str]:
        return {**self.store.env(), "AWS_ENDPOINT_URL": self.gate.endpoint}


def until_progress(client, phase: str, timeout: float = 60) -> tuple[dict, dict]:
    """The notebook's row of GET status, and its operation's progress, once that is in
    ``phase`` (polled, with a deadline)."""
    seen: dict = {}

    def reached():
        seen["row"] = row = client.session_status(NB)
        progress = (row["operation"] or {}).get("progress") or {}
        return (row, progress) if progress.get("phase") == phase else None

    return wait_for(reached, timeout, lambda: f"{phase!r} progress: {seen.get('row')}")


def test_a_pause_says_how_far_its_upload_is_until_the_checkpoint_is_in_the_bucket(
    node, seaweed, bucket, monkeypatch, capsys
):
    """With the uploads of the tensor files held at the store, GET status and the
    operation say "uploading", bytes done of the files' total, while the kernel keeps
    running and nothing is committed; let through, the pause ends, and the progress
    is gone (it was never written to the session file)."""
    url = f"s3://{bucket}/ck"
    gate = Gate(seaweed.endpoint, "/blobs/", method="PUT", hold_for=120)
    try:
        server = node("a", Through(seaweed, gate), url)
        client = server.start()
        kernel_id = client.open_notebook(NB)["kernel"]["id"]
        code = "import numpy as np\nbig = np.arange(3_000_000.0)\nmore = np.ones(1_000_000)\n"
        assert client.execute(kernel_id, code).ok
        op = client.pause(NB)
        assert gate.wait_held(), "no upload reached the store"
        row, progress = until_progress(client, "uploading")
        assert 0 <= progress["done"] < progress["total"], progress
        assert progress["total"] >= 32_000_000, progress  # both arrays' files, at least
        assert client.operation(op["id"])["progress"]["total"] == progress["total"]
        assert row["state"] == "checkpointing" and row["kernel_id"] == kernel_id
        assert committed(seaweed, url, monkeypatch) == []  # not durable: nothing released
        assert '"progress"' not in (server.state_dir / "sessions.json").read_text()
        assert main(["status", NB, "--url", client.base_url, "--token", client.token]) == 0
        said = capsys.readouterr().out
        assert re.search(r"\n  uploading \d+\.\d / \d+\.\d MB\n", said), said
    finally:
        gate.release()
    try:
        op = client.wait(op)
        assert op["outcome"] == "succeeded", op
        assert op["progress"] is None
        assert len(committed(seaweed, url, monkeypatch)) == 1
        listing = remote.Remote(paths.parse_bucket(url), "").listing()
        uploaded = sum(e.size for name, e in listing.items() if "/blobs/" in f"/{name}")
        assert progress["total"] == uploaded  # the files the checkpoint sent, all counted
        assert not gate.timed_out
    finally:
        gate.stop()


def test_a_resume_from_the_bucket_says_how_far_its_download_is(node, seaweed, bucket, monkeypatch):
    """A resume on a node without the checkpoint: with the tensor files' downloads held
    at the store, the operation says "downloading", bytes done of the files' total; let
    through, the notebook is back."""
    url = f"s3://{bucket}/ck"
    a = node("a", seaweed, url)
    client = a.start()
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    code = "import numpy as np\nbig = np.arange(1_500_000.0)\nmore = np.ones(1_000_000)\n"
    assert client.execute(kernel_id, code).ok  # each under 16 MiB: read before it returns
    assert client.wait(client.pause(NB))["outcome"] == "succeeded"
    a.stop()
    gate = Gate(seaweed.endpoint, "/blobs/", hold_for=120)
    try:
        client = node("b", Through(seaweed, gate), url, state=a.state_dir).start()
        op = client.resume(NB)
        assert gate.wait_held(), "no download reached the store"
        row, progress = until_progress(client, "downloading")
        assert 0 <= progress["done"] < progress["total"], progress
        assert progress["total"] >= 20_000_000, progress  # both arrays' files, at least
        assert row["state"] == "restoring", row
    finally:
        gate.release()
    try:
        op = client.wait(op)
        assert op["outcome"] == "succeeded", op
        assert op["progress"] is None and not gate.timed_out
        kernel_id = client.session_status(NB)["kernel_id"]
        assert client.evaluate(kernel_id, "print(float(big.sum() + more.sum()))") == float(
            sum(range(1_500_000)) + 1_000_000
        )
    finally:
        gate.stop()


# ------------------------------------------------------------------ GCS (fake-gcs-server)
def test_gs_a_fresh_server_on_another_node_restores_the_notebook_from_the_bucket(
    node, fake_gcs, monkeypatch
):
    fake_gcs.create_bucket("gs-nodes")
    url = "gs://gs-nodes/ck"
    a = node("a", fake_gcs, url)
    pause_with_state(a.start())
    assert len(committed(fake_gcs, url, monkeypatch)) == 1  # durable before the release
    a.stop()

    b = node("b", fake_gcs, url, state=a.state_dir)  # the data volume did not follow
    client = b.start()
    resumes_from_the_bucket(client, url)


def test_the_status_names_the_checkpoint_a_resume_restores_after_a_failed_upload(node, tmp_path):
    """The store, then the server (and its kernel) die while a pause uploads: its
    checkpoint is committed on this machine only. The next server starts while the store
    is still down; its status must name the checkpoint its resume will restore (that
    newest one, not the last one in the bucket), and say nothing was lost."""
    store = Seaweed(tmp_path / "weed")
    store.start()
    # the upload of the pickle: after the checkpoint was committed here, before the bucket
    gate = Gate(store.endpoint, "/objects.pkl", min_bytes=1, method="PUT", hold_for=120)
    gate.release()  # the first checkpoint goes through
    try:
        store.create_bucket("later")
        url = "s3://later/ck"
        a = node("a", Through(store, gate), url)
        client = a.start()
        kernel_id = running_with_state(client)
        assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"  # in the bucket
        assert client.execute(kernel_id, "n = 8").ok
        gate.hold()
        client.pause(NB)
        assert gate.wait_held(), "the pause's upload never reached the store"
        store.kill()
        server = psutil.Process(a.process.pid)
        dying = [server, *server.children(recursive=True)]
        for process in dying:
            process.kill()
        psutil.wait_procs(dying, timeout=30)
        gate.release()

        client = a.start()  # the store is still down
        session = client.session_status(NB)
        shown = session["last_checkpoint"]["id"]
        assert session["state"] == "paused", (session["error"], session["last_checkpoint"])
        store.start()
        op = client.wait(client.resume(NB))
        assert op["outcome"] == "succeeded", op
        session = client.session_status(NB)
        assert session["state_checkpoint"] == shown, (shown, op["messages"])
        assert client.evaluate(session["kernel_id"], "print(n)") == 8
    finally:
        gate.stop()
        store.stop()


def test_a_resume_lists_the_bucket_once(node, seaweed, bucket):
    """The server lists the notebook's folder in the bucket once per resume; what reads
    ahead, what it hands the kernel and the kernel's restore all use that listing."""
    url = f"s3://{bucket}/ck"
    gate = Gate(seaweed.endpoint, "nothing is held", method="PUT")
    try:
        server = node("a", Through(seaweed, gate), url)
        client = server.start()
        pause_with_state(client)
        gate.requests.clear()
        resume_with_state(client)
        folder = paths.folder_name(NB)
        lists = [
            path
            for method, path in gate.requests
            if method == "GET" and "list-type=2" in path and f"{folder}%2F" in path
        ]
        assert len(lists) == 1, lists
    finally:
        gate.stop()


def test_a_resume_the_bucket_refuses_answers_503_and_names_the_store(
    node, seaweed, bucket, monkeypatch
):
    url = f"s3://{bucket}/ck"
    a = node("a", seaweed, url)
    pause_with_state(a.start())
    a.stop()
    a.env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"  # the store answers "access denied"
    client = a.start()
    with pytest.raises(ClientError) as refused:
        client.resume(NB)
    assert refused.value.status == 503, refused.value
    assert refused.value.body["reason"] == "Service Unavailable", refused.value.body
    assert "access denied" in str(refused.value) and url in str(refused.value)
    assert client.session_status(NB)["state"] == "paused"  # nothing was started
