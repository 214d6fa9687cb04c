"""A power cut never loses what was reported saved: a real server and its kernel run
under ``strace``, and every folder, file and rename under the server's data folder
(the checkpoint root, the signing key, ``sessions.json``, the ledger) must be
followed by an fsync of its parent folder before the operation that made it reports
success. The folder itself is 0700 whatever the umask."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from jupyter_pause.client import LocalServer
from jupyter_pause.engine import paths

from .helpers import wait_for

REPO = Path(__file__).resolve().parent.parent
NB = "nb.ipynb"
MARKER = "step-"  # files the server is made to open once a step reported success
SYSCALLS = "mkdir,mkdirat,rename,renameat,renameat2,link,linkat,open,openat,creat,fsync,fdatasync"

pytestmark = pytest.mark.slow


# ------------------------------------------------------------ reading the trace
@dataclass
class Call:
    seq: int  # the line's place in the trace: the order strace saw the calls in
    name: str  # "create" (mkdir, O_CREAT open), "move" (rename, link) or "fsync"
    path: str
    line: str


_LINE = re.compile(r"^(\d+) +(\w+)\((.*)\) +=\s+(\d+)(?:<(.*)>)?$")
_ARG = re.compile(r'(?:\w+<(?P<dir>[^>]*)>|AT_FDCWD<(?P<cwd>[^>]*)>|"(?P<path>[^"]*)")')


def parse(trace: str) -> tuple[list[Call], dict[str, int]]:
    """The calls that put a name into a folder, and the fsyncs (``strace -y``: each fd
    comes with its path, ``-e status=successful``: only calls that did it), in the
    order strace saw them; and where in it the server first opened each marker file
    (:func:`mark`).

    Places in the trace, not its timestamps, say what came first: a step of the wall
    clock (a fresh machine's first NTP sync) would reorder timestamps, never the
    trace (a process stopped at a call cannot cause another's next call before
    strace has written the first)."""
    calls, markers = [], {}
    for seq, line in enumerate(trace.splitlines()):
        m = _LINE.match(line)
        if not m:
            continue
        _, name, args, _, fd_path = m.groups()
        if name in ("fsync", "fdatasync"):
            fd = re.match(r"\d+<(.*)>$", args)
            if fd:
                calls.append(Call(seq, "fsync", os.path.normpath(fd[1]), line))
            continue
        base, path = "", None
        for a in _ARG.finditer(args):  # the last (folder, name) pair is the new name
            if a["path"] is not None:
                path = os.path.join(base, a["path"])
            else:
                base = a["dir"] if a["dir"] is not None else a["cwd"]
        if name in ("open", "openat", "creat"):
            if path and os.path.basename(path).startswith(MARKER):
                markers.setdefault(os.path.basename(path)[len(MARKER) :], seq)
            if name != "creat" and "O_CREAT" not in args:
                continue
            path = fd_path or path
            kind = "create"
        elif name in ("mkdir", "mkdirat"):
            kind = "create"
        else:
            kind = "move"
        if path:
            calls.append(Call(seq, kind, os.path.normpath(path), line))
    return calls, markers


def violations(calls: list[Call], present: set[str], until: int) -> list[str]:
    """What was made up to ``until`` and is among the names ``present`` then, but whose
    parent was not fsynced after it was made and before ``until``; and every rename or
    link to one of them not followed by an fsync of its parent before the same name was
    replaced again (or ``until``)."""
    fsyncs: dict[str, list[int]] = {}
    for c in calls:
        if c.name == "fsync" and c.seq <= until:
            fsyncs.setdefault(c.path, []).append(c.seq)

    def synced(path: str, after: int, before: int) -> bool:
        return any(after < t <= before for t in fsyncs.get(os.path.dirname(path), ()))

    out = []
    made: dict[str, Call] = {}  # the call that made each name, as it is now
    moves = [c for c in calls if c.name == "move" and c.seq <= until and c.path in present]
    for c in calls:
        if c.seq > until or c.path not in present or c.name == "fsync":
            continue
        if c.name == "move" or c.path not in made:  # a second O_CREAT open creates nothing
            made[c.path] = c
    for i, c in enumerate(moves):
        again = next((n.seq for n in moves[i + 1 :] if n.path == c.path), until)
        if not synced(c.path, c.seq, again):
            out.append(f"not fsynced in its folder: {c.line}")
    for path, c in sorted(made.items()):
        if c.name == "create" and not synced(path, c.seq, until):
            out.append(f"not fsynced in its folder: {c.line}")
    return out


def mark(server: LocalServer, client, step: str) -> None:
    """Put a mark in the trace: the server opens ``step-<step>`` (a contents GET)."""
    (server.root_dir / f"{MARKER}{step}").write_text(step)
    client.request("GET", f"api/contents/{MARKER}{step}", content=1)


def listing(folder: Path, skip=()) -> set[str]:
    """``folder`` and everything in it but the names ``skip`` (and what is in them)."""
    out = {os.path.normpath(folder)}
    for d, dirs, files in os.walk(folder):
        dirs[:] = [n for n in dirs if n not in skip]
        out |= {os.path.join(d, n) for n in dirs + files if n not in skip}
    return out


# ------------------------------------------------------------ a server under strace
def empty_notebook(folder: Path) -> None:
    nb = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / NB).write_text(json.dumps(nb))


def server_in(tmp_path: Path, wrapper=()) -> LocalServer:
    """A server whose state folder is ``<data>/pause``, as by default (its checkpoint root
    ``<data>/pause/checkpoints`` does not exist yet), and its own signing key."""
    empty_notebook(tmp_path / "root")
    data = tmp_path / "data"
    return LocalServer(
        tmp_path / "root",
        data / "pause",
        env={
            "JUPYTER_DATA_DIR": str(data),
            "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
            "PYTHONPATH": str(REPO),
        },
        wrapper=list(wrapper),
    )


@pytest.mark.skipif(not shutil.which("strace"), reason="needs strace (apt-get install strace)")
def test_a_checkpoint_the_key_and_the_sessions_are_on_disk_before_success(tmp_path):
    trace = tmp_path / "trace"
    strace = ["strace", "-D", "-f", "-q", "-y", "-e", "signal=none"]
    strace += ["-e", "status=successful", "-e", f"trace={SYSCALLS}", "-o", str(trace)]
    server = server_in(tmp_path, strace)
    state = server.state_dir
    own = ("runtime", "server.log")  # the test's and Jupyter's, not jupyter-pause's
    seen = {}  # once each step reported success: what was there then
    try:
        client = server.start()
        mark(server, client, "start")
        seen["start"] = listing(state, own)
        kernel_id = client.open_notebook(NB)["kernel"]["id"]
        client.evaluate(kernel_id, "import numpy as np\nx = np.arange(1000.0)\nprint(1)")
        assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"
        mark(server, client, "checkpoint")
        seen["checkpoint"] = listing(state, own)
        assert client.wait(client.pause(NB))["outcome"] == "succeeded"
        mark(server, client, "pause")
        seen["pause"] = listing(state, own)
    finally:
        pid = server.process.pid
        server.stop()
    done = re.compile(rf"^{pid} .*\+\+\+ exited with", re.M)
    wait_for(lambda: done.search(trace.read_text()), 60, what="the end of the trace")
    calls, markers = parse(trace.read_text())
    assert set(markers) == set(seen), markers

    # a checkpoint into an empty root makes the root, the user's folder, the notebook's,
    # blobs/, the checkpoint, and the key; the pause rewrites sessions.json
    there = seen["checkpoint"]
    nbdir = paths.notebook_dir(server.checkpoint_dir, NB)
    made = {c.path for c in calls if c.seq <= markers["checkpoint"]}
    for path in (server.checkpoint_dir, nbdir.parent, nbdir, nbdir / "blobs", state / "secret"):
        assert str(path) in made and str(path) in there, path
    sessions = str(state / "sessions.json")
    assert [c for c in calls if c.name == "move" and c.path == sessions]

    found = {step: violations(calls, there, markers[step]) for step, there in seen.items()}
    assert found == {step: [] for step in seen}, json.dumps(found, indent=1)


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_data_folder_is_private_whatever_the_umask(tmp_path, umask):
    """``<data>/pause`` holds the key, the ledger and the sessions: 0700, also where it
    was made 0755 before (here by the test, as an older version did)."""
    server = server_in(tmp_path)
    old = os.umask(umask)
    try:
        server.state_dir.mkdir(parents=True)  # 0755 or 0777: as the umask says
        client = server.start()
        kernel_id = client.open_notebook(NB)["kernel"]["id"]
        client.evaluate(kernel_id, "x = 1\nprint(1)")
        assert client.wait(client.checkpoint(NB))["outcome"] == "succeeded"
    finally:
        os.umask(old)
        server.stop()
    assert stat.S_IMODE(server.state_dir.stat().st_mode) == 0o700
    for name in ("secret", "sessions.json", "ledger.sqlite3"):
        assert stat.S_IMODE((server.state_dir / name).stat().st_mode) == 0o600, name
    for folder in (server.checkpoint_dir, paths.notebook_dir(server.checkpoint_dir, NB)):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
