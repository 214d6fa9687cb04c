"""The server's own files hold who used which notebook when: private whatever the umask."""

from __future__ import annotations

import os
import stat

import pytest

from jupyter_pause.engine import durable
from jupyter_pause.ledger import EventType, Ledger
from jupyter_pause.lifecycle import SessionStore


def test_ledger_and_sessions_are_private_under_a_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        ledger = Ledger(tmp_path / "ledger.sqlite")
        ledger.record(EventType.STATE_CHANGED, path="nb.ipynb")
        store = SessionStore(tmp_path / "sessions.json")
        store.get("nb.ipynb")
        store.save()
    finally:
        os.umask(old)
    files = [p for p in tmp_path.iterdir() if p.is_file()]
    assert {p.name for p in files} >= {"ledger.sqlite", "sessions.json"}
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


def test_their_folders_are_made_private_under_a_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        Ledger(tmp_path / "ledger" / "ledger.sqlite")
        store = SessionStore(tmp_path / "sessions" / "sessions.json")
        store.get("nb.ipynb")
        store.save()
    finally:
        os.umask(old)
    for folder in ("ledger", "sessions"):
        assert stat.S_IMODE((tmp_path / folder).stat().st_mode) == 0o700, folder


def test_a_file_put_in_place_without_replacing_keeps_the_first_whole(tmp_path):
    """How the signing key is created: two processes racing agree on the first key, and
    nobody ever reads a half-written one (it has no name until it is whole)."""
    key = tmp_path / "secret"
    durable.write_file(key, b"first", replace=False)
    with pytest.raises(FileExistsError):
        durable.write_file(key, b"second", replace=False)
    assert key.read_bytes() == b"first" and os.listdir(tmp_path) == ["secret"]
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
