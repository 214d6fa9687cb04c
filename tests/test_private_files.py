"""The server's own files hold who used which notebook when: private whatever the umask."""

from __future__ import annotations

import os
import stat

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
