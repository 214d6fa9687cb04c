"""Surviving a spot preemption (issue 38), with real servers and kernels and a real
SeaweedFS behind a throttled link (tests/objectstores.py ``Throttle``): a notebook's state
is staged to the bucket in the background (with auto-pause off too); a stopping server
uploads only what the bucket lacks, if it fits the grace; each notebook ends saved to its
last cell, to an older staged state, or not saved, and says so in the log, the ledger and
the bucket's record; the node that resumes it says what was lost.

Nodes share nothing but the bucket and the key file (as in tests/test_state_travels.py).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from jupyter_pause.client import LocalServer
from jupyter_pause.engine import paths, remote, session_record
from tests.helpers import empty_notebook, wait_for
from tests.objectstores import Throttle

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
NB = "work/train.ipynb"
#: seconds of use between two stagings (a class's stage_every)
EVERY = 1.0
#: a cell that ends after more than one interval of use
PAST = f"time.sleep({EVERY + 0.3})"
LOAD = (
    "import time\nimport numpy as np\n"
    "data = np.random.default_rng(0).random(1_500_000)\n"  # 12 MB, changed once
    "step = 0\n"
)
STEP = "step += 1\nw = np.full(1_000_000, float(step))\n"  # 8 MB changed every cell


@pytest.fixture
def link(seaweed, bucket):
    """The store behind a link this test can slow down: ``(throttle, url)``."""
    throttle = Throttle(seaweed.endpoint)
    yield throttle, f"s3://{bucket}/ck"
    throttle.stop()


@pytest.fixture
def nodes(tmp_path, seaweed):
    """``nodes(name, url, endpoint, *args)``: a server of its own node (notebook folder,
    data, state and cache of its own), the store reached at ``endpoint``."""
    made = []
    key = tmp_path / "secret" / "key"

    def make(name, url, endpoint, *args, auto_pause=False, grace=10.0):
        root = tmp_path / name / "root"
        (root / "work").mkdir(parents=True, exist_ok=True)
        if name == "a":
            (root / NB).write_text(json.dumps(empty_notebook()))
        env = {
            **seaweed.env(),
            "AWS_ENDPOINT_URL": endpoint,
            "JUPYTER_DATA_DIR": str(tmp_path / name / "data"),
            "JUPYTER_CONFIG_DIR": str(tmp_path / name / "config"),
            "PYTHONPATH": str(REPO),
        }
        classes = {"gpu-interactive": {"stage_every": EVERY}}
        server = LocalServer(
            root,
            tmp_path / name / "state",
            env=env,
            checkpoints=url,
            extra_args=[
                "--PauseApp.bucket_sync_interval=1",
                f"--PauseApp.key_file={key}",
                f"--PauseApp.auto_pause={auto_pause}",
                f"--PauseApp.shutdown_grace={grace}",
                f"--PauseApp.workload_classes={json.dumps(classes)}",
                *args,
            ],
        )
        server.key_file = key
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


def staged(client, since: str | None = None):
    """The notebook's staging once the bucket holds a checkpoint newer than ``since``
    and lacks nothing of what was written here."""
    lag = (client.session_status(NB) or {}).get("staging") or {}
    held = (lag.get("checkpoint") or {}).get("id")
    if held and held != since and lag["bytes"] == 0 and not lag["uploading"]:
        return lag
    return None


def record_of(url: str, key: Path) -> session_record.SessionRecord:
    """The bucket's record of the notebook, read as another node would."""
    import asyncio

    records = session_record.Records(paths.parse_bucket(url, str(key.parent / "cache")))
    signing_key = key.read_bytes().strip()  # as signing.load_key reads it
    stored = asyncio.run(records.read(NB, signing_key))
    assert stored.record is not None, stored.problem
    return stored.record


def metrics(client) -> str:
    """The server's /metrics, as Prometheus scrapes it."""
    import urllib.request

    request = urllib.request.Request(client.base_url + "metrics")
    request.add_header("Authorization", f"token {client.token}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read().decode()


def run_steps(client, kernel_id: str, count: int) -> None:
    for _ in range(count):
        assert client.execute(kernel_id, f"{STEP}{PAST}").ok


def training(server: LocalServer):
    """The notebook's state loaded and one step run, until the bucket holds it: the
    server's client, the kernel, and the staging as the status shows it then."""
    client = server.start()
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    assert client.execute(kernel_id, LOAD).ok
    run_steps(client, kernel_id, 1)
    lag = wait_for(lambda: staged(client), 120, lambda: f"staging\n{server.log_tail()}")
    return client, kernel_id, lag


def test_staging_keeps_the_bucket_near_the_kernel_with_auto_pause_off(nodes, link):
    throttle, url = link
    a = nodes("a", url, throttle.endpoint)
    # autosave and staging run with auto-pause off: the state reaches the bucket by itself
    client, kernel_id, first = training(a)
    record = wait_for(
        lambda: (
            (r := record_of(url, a.key_file))
            and (r.checkpoint or {}).get("id") == first["checkpoint"]["id"]
            and r
        ),
        60,
        "the record to name the staged checkpoint",
    )
    assert record.state == "running"
    saves = [e for e in client.events() if e["type"] == "checkpoint-finished"]
    assert saves and all(e["data"].get("autosave") for e in saves)

    # a cell run since: the bucket lags, by the age of its newest state
    assert client.execute(kernel_id, STEP).ok
    lag = client.session_status(NB)["staging"]
    assert lag["seconds"] > 0 and lag["checkpoint"]["id"] == first["checkpoint"]["id"]

    # and /metrics says the same
    text = metrics(client)
    assert f'jupyter_pause_staging_lag_seconds{{notebook="{NB}"}}' in text
    assert f'jupyter_pause_staging_lag_bytes{{notebook="{NB}"}}' in text

    # the next interval stages again: only what changed goes up (the 12 MB array does not)
    sent = throttle.sent
    run_steps(client, kernel_id, 1)
    wait_for(lambda: staged(client, first["checkpoint"]["id"]), 120, "the next staging")
    assert throttle.sent - sent < 12_000_000


def test_a_flush_that_fits_saves_the_last_cell_and_another_node_resumes_it(nodes, link):
    throttle, url = link
    a = nodes("a", url, throttle.endpoint)
    client, kernel_id, _ = training(a)
    assert client.execute(kernel_id, "step = 41\nw[:] = 41.0").ok  # the delta: one array

    a.process.send_signal(signal.SIGTERM)
    a.process.wait(60)
    assert "saved in the bucket to its last cell" in a.log_tail(20000)
    record = record_of(url, a.key_file)
    assert record.state == "paused" and record.final_save["outcome"] == "newest"
    assert record.checkpoint["id"] == record.final_save["checkpoint"]

    b = nodes("b", url, throttle.endpoint)
    other = b.start()
    wait_for(lambda: (s := other.session_status(NB)) and s["state"] == "paused", 60, "learned")
    op = other.wait(other.resume(NB))
    assert op["outcome"] == "succeeded", op
    assert not [m for m in op["messages"] if "were lost" in m], op["messages"]
    kernel_id = other.session_status(NB)["kernel_id"]
    assert other.evaluate(kernel_id, "print([step, float(w[0])])") == [41, 41.0]


def test_a_delta_too_large_for_the_grace_keeps_the_staged_state_and_says_what_was_lost(nodes, link):
    throttle, url = link
    a = nodes("a", url, throttle.endpoint, grace=4.0)
    client, kernel_id, held = training(a)
    assert client.evaluate(kernel_id, "print(step)") == 1

    # a slow link now, and more changed than the grace can carry over it
    throttle.limit(total=500_000)
    assert client.execute(kernel_id, "step = 99\ndata = data + 1.0").ok  # 12 MB changed

    a.process.send_signal(signal.SIGTERM)
    a.process.wait(60)
    log = a.log_tail(20000)
    assert f"the bucket holds an older state, checkpoint {held['checkpoint']['id']}" in log
    record = record_of(url, a.key_file)
    final = record.final_save
    assert final["outcome"] == "older" and final["checkpoint"] == held["checkpoint"]["id"]
    assert record.checkpoint["id"] == held["checkpoint"]["id"]
    assert "shutdown grace" in final["why"]

    throttle.limit()  # the next node's link is fine
    b = nodes("b", url, throttle.endpoint)
    other = b.start()
    session = wait_for(  # failed, when the grace ended with the pause's checkpoint under way
        lambda: (s := other.session_status(NB)) and s["state"] in ("paused", "failed") and s,
        60,
        "learned",
    )
    assert session["final_save"]["outcome"] == "older"
    op = other.wait(other.resume(NB))
    assert op["outcome"] == "succeeded", op
    [told] = [m for m in op["messages"] if "were lost when its node stopped" in m]
    assert f"checkpoint {held['checkpoint']['id']}" in told
    kernel_id = other.session_status(NB)["kernel_id"]
    assert other.evaluate(kernel_id, "print(step)") == 1  # the staged state: step 99 was lost


def test_a_notebook_the_bucket_never_held_is_not_saved_and_says_why(nodes, link):
    throttle, url = link
    a = nodes("a", url, throttle.endpoint, grace=3.0)
    client = a.start()
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    throttle.limit(total=200_000)  # nothing staged yet, and a link too slow for the state
    assert client.execute(kernel_id, LOAD).ok

    a.process.send_signal(signal.SIGTERM)
    a.process.wait(60)
    assert "NOT saved in the bucket, which holds no state of it" in a.log_tail(20000)
    [event] = [e for e in _ledger(a) if e["type"] == "paused"]
    assert event["data"]["final_save"]["outcome"] == "none"
    record = record_of(url, a.key_file)
    assert record.final_save["outcome"] == "none" and record.checkpoint is None


def _ledger(server: LocalServer) -> list[dict]:
    """The ledger of a stopped server, read from its database."""
    from jupyter_pause.ledger import Ledger

    ledger = Ledger(server.state_dir / "ledger.sqlite3")
    try:
        return [{"type": e.type.value, "data": e.data} for e in ledger.events()]
    finally:
        ledger.close()


def test_a_slow_link_is_never_failed_by_a_timeout_fixed_for_a_fast_one(
    seaweed, bucket, tmp_path, monkeypatch
):
    """Parts and timeouts follow the link measured: a link slower than the first guess
    fails a try, and the next, with smaller parts and longer timeouts, goes through."""
    monkeypatch.setattr(remote, "MIN_TIMEOUT", 1.0)
    # the first guess, 6 MiB in one request of at most 12 s, is too hopeful for this link
    throttle = Throttle(seaweed.endpoint, per_connection=300_000)
    monkeypatch.setenv("AWS_ENDPOINT_URL", throttle.endpoint)
    try:
        link = remote.Link()
        mirror = remote.Remote(paths.parse_bucket(f"s3://{bucket}/ck", str(tmp_path)), "u/n", link)
        blob = tmp_path / "blob"
        blob.write_bytes(bytes(6 << 20))
        mirror.upload([("blobs/x", blob)])
        assert mirror.listing()["blobs/x"].size == 6 << 20
        assert link.part_size() < 6 << 20  # it went up in smaller parts
    finally:
        throttle.stop()


def test_background_staging_sends_one_part_at_a_time_and_leaves_the_link_in_proportion(
    seaweed, bucket, tmp_path, monkeypatch
):
    """A background pace (stage_share) keeps one part in flight, measures each part's time
    on the link, and rests after it for that time scaled by (1 - share) / share; a pause's
    upload (full speed) keeps several in flight and never rests."""
    import obstore

    widths, rests = [], []
    put = obstore.put

    def note(store, key, data, **kwargs):
        widths.append(kwargs.get("max_concurrency"))
        return put(store, key, data, **kwargs)

    monkeypatch.setattr(obstore, "put", note)
    monkeypatch.setattr(remote.Pace, "rest", lambda self, busy: rests.append((self.share, busy)))
    throttle = Throttle(seaweed.endpoint, per_connection=4_000_000)
    monkeypatch.setenv("AWS_ENDPOINT_URL", throttle.endpoint)
    try:
        link = remote.Link()
        link.observe(4 << 20, 1.0)  # 4 MiB/s measured: 16 MiB parts
        mirror = remote.Remote(paths.parse_bucket(f"s3://{bucket}/ck", str(tmp_path)), "u/n", link)
        blob = tmp_path / "blob"
        blob.write_bytes(bytes(3 * (16 << 20) + 1000))  # four parts
        mirror.upload([("blobs/a", blob)], pace=remote.Pace(0.25))
        assert widths == [1]
        # a rest after each of the four parts at least: when each part went through is
        # read from obstore's pulls, and a loaded machine may show a wait more
        assert len(rests) >= 4 and all(share == 0.25 and busy > 0 for share, busy in rests)
        widths.clear()
        rests.clear()
        mirror.upload([("blobs/b", blob)])
        assert widths == [remote.PARALLEL // 2] and rests == []
    finally:
        throttle.stop()


def test_a_flush_expects_of_several_connections_only_what_was_measured_of_them():
    """Background staging measures one connection at a time; a flush on several may not
    expect that rate times their number (a link is usually limited in all): it expects
    what one carried until several were measured together."""
    link = remote.Link()
    assert link.rate(8) is None  # nothing measured: nothing promised
    link.observe(20 << 20, 1.0)  # one part at a time: 20 MiB/s
    assert link.rate(8) == pytest.approx(20 << 20)
    link.observe(240 << 20, 2.0, connections=8)  # eight together: 120 MiB/s
    assert link.rate(8) == pytest.approx(120 << 20)
