"""GET status at many sessions reads nothing per session from the disk, not
even the first after a start: a real server over a store of paused notebooks,
its file reads watched by an audit hook (``sys.addaudithook``); and what it
shows stays true when a checkpoint is added or deleted.  No timing is asserted
(``make bench`` measures it)."""

import json
import os
from pathlib import Path

import pytest

from jupyter_pause.client import LocalServer
from jupyter_pause.engine import api as engine
from jupyter_pause.lifecycle import Operation, SessionStore, State

REPO = Path(__file__).resolve().parent.parent
N = 60

pytestmark = pytest.mark.slow

#: loaded by the server as its configuration: every file opened or folder listed
#: under the watched folders is written to the log (by file descriptor: os.write
#: opens nothing, so the hook never sees itself)
AUDIT = """
import os, sys
_watched = tuple(os.environ["AUDIT_WATCH"].split(os.pathsep))
_log = os.open(os.environ["AUDIT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

def _hook(event, args):
    if event in ("open", "os.scandir", "os.listdir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(args[0]))
        if path.startswith(_watched):
            os.write(_log, f"{event} {path}\\n".encode())

sys.addaudithook(_hook)
"""


def paused_store(root: Path, state: Path, n: int) -> list[str]:
    """``n`` notebooks paused with a small checkpoint each, as a server leaves them."""
    nb = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    store = SessionStore(state / "sessions.json")
    paths = []
    for i in range(n):
        path = f"nb{i:03d}.ipynb"
        (root / path).write_text(json.dumps(nb))
        result = engine.checkpoint(
            dir=state / "checkpoints", notebook=path, namespace={"x": i}, progress=False
        )
        session = store.get(path)
        session.state = State.PAUSED
        session.kernel_name = "python3"
        session.workload_class = "gpu-interactive"  # as the idle watcher recorded it
        session.operation = Operation(kind="pause", path=path, outcome="succeeded")
        session.last_checkpoint = {"id": result.id, "time": 0.0, "bytes": result.bytes_total}
        paths.append(path)
    store.save()
    return paths


@pytest.fixture
def server(tmp_path, monkeypatch):
    root, state, config = tmp_path / "root", tmp_path / "state", tmp_path / "config"
    for folder in (root, state, config):
        folder.mkdir()
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))  # the signing key
    (config / "jupyter_server_config.py").write_text(AUDIT)
    log = tmp_path / "audit.log"
    env = {
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(config),
        "PYTHONPATH": str(REPO),
        "AUDIT_WATCH": os.pathsep.join([str(root), str(state / "checkpoints")]),
        "AUDIT_LOG": str(log),
    }
    server = LocalServer(root, state, env=env)
    server.paths = paused_store(root, state, N)
    server.audit_log = log
    yield server
    server.stop()


def reads_during(server, action) -> tuple[list[str], object]:
    before = server.audit_log.stat().st_size if server.audit_log.exists() else 0
    result = action()
    if not server.audit_log.exists():
        return [], result
    with open(server.audit_log) as f:
        f.seek(before)
        return f.read().splitlines(), result


def test_status_reads_no_notebook_or_checkpoint_and_stays_true(server, tmp_path):
    # the first status after a start reads no notebook (the start-up clean-up
    # lists the checkpoint folders, once)
    reads, client = reads_during(server, server.start)
    assert not [line for line in reads if line.split(" ", 1)[1].startswith(str(server.root_dir))]

    reads, statuses = reads_during(server, lambda: [client.status() for _ in range(3)])

    assert reads == []
    for status in statuses:
        rows = {s["path"]: s for s in status["sessions"]}
        assert set(rows) == set(server.paths)
        assert {s["state"] for s in rows.values()} == {"paused"}
        assert {s["policy"]["workload_class"] for s in rows.values()} == {"gpu-interactive"}

    # a checkpoint added (%checkpoint in a kernel tells the server) shows at once ...
    path = server.paths[7]
    first = client.session_status(path)["last_checkpoint"]["id"]
    added = engine.checkpoint(
        dir=server.checkpoint_dir, notebook=path, namespace={"x": "new"}, progress=False
    )
    client.api("POST", "sessions/checkpointed", {"path": path, "checkpoint_id": added.id})
    assert client.session_status(path)["last_checkpoint"]["id"] == added.id

    # ... and one deleted is no longer shown as the saved state
    client.delete_checkpoint(path, added.id)
    assert client.session_status(path)["last_checkpoint"]["id"] == first
    client.delete_checkpoint(path, first)
    assert client.session_status(path)["last_checkpoint"] is None
