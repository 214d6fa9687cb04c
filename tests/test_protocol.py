"""The kernel's replies and the one rule for what a person is told was not saved."""

from __future__ import annotations

import json

from jupyter_pause.engine import namespace
from jupyter_pause.protocol import CheckpointReply, RestoreReply, user_skipped


def test_only_the_users_own_variables_are_news():
    import threading

    ns = {"lock": threading.Lock(), "json": json, "In": [], "_i1": "x = 1", "x": 1}
    _, skipped, _ = namespace.select(ns, {})
    assert set(skipped) == {"lock", "json", namespace.HISTORY_KEY}
    assert list(user_skipped(skipped)) == ["lock"]


def test_a_reply_survives_json_and_a_kernel_may_leave_fields_out():
    reply = CheckpointReply(id="c1", bytes=10, seconds=0.5, skipped={"g": "a generator"})
    assert CheckpointReply.from_json(json.loads(json.dumps(reply.to_json()))) == reply
    short = RestoreReply.from_json({"id": "c1", "bytes": 10, "seconds": 0.5, "later": True})
    assert short.metadata == {} and short.notes == [] and short.gpus is None
