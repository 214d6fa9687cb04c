"""The kernel's replies and the one rule for what a person is told was not saved."""

from __future__ import annotations

import json

from jupyter_pause.engine import namespace
from jupyter_pause.protocol import CallProgress, CheckpointReply, RestoreReply, user_skipped


def test_only_the_users_own_variables_are_news():
    import threading

    ns = {"lock": threading.Lock(), "json": json, "In": [], "_i1": "x = 1", "x": 1}
    _, skipped, _ = namespace.select(ns, {})
    assert set(skipped) == {"lock", "json", namespace.HISTORY_KEY}
    assert list(user_skipped(skipped)) == ["lock"]


def test_a_module_that_cannot_be_imported_again_is_news():
    import types

    made = types.ModuleType("made_in_a_cell")  # no file, not in sys.modules
    ns = {"made": made, "json": json}
    _, skipped, _ = namespace.select(ns, {})
    assert set(skipped) == {"made", "json"}
    assert list(user_skipped(skipped)) == ["made"]
    assert "cannot be imported again" in user_skipped(skipped)["made"]


def test_a_reply_survives_json_and_a_kernel_may_leave_fields_out():
    reply = CheckpointReply(id="c1", bytes=10, seconds=0.5, skipped={"g": "a generator"})
    assert CheckpointReply.from_json(json.loads(json.dumps(reply.to_json()))) == reply
    short = RestoreReply.from_json({"id": "c1", "bytes": 10, "seconds": 0.5, "later": True})
    assert short.metadata == {} and short.notes == [] and short.gpus is None


def test_a_call_s_progress_reads_as_bytes_of_its_total_in_the_total_s_unit():
    assert CallProgress("uploading", 3_100_000_000, 8_000_000_000).text() == (
        "uploading 3.1 / 8.0 GB"
    )
    assert CallProgress("writing", 0, 250_000_000).text() == "writing 0.0 / 250.0 MB"
    assert CallProgress("downloading", 2_500_000, 1_200_000_000).text() == (
        "downloading 0.0 / 1.2 GB"
    )
    assert CallProgress("reading", 512, 900).text() == "reading 512 / 900 B"
    sent = CallProgress("uploading", 1, 2)
    assert CallProgress.from_json(json.loads(json.dumps(sent.to_json()))) == sent
