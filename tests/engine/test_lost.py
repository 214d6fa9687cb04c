"""A checkpoint of a kernel that lost its state involuntarily never pushes out the last
checkpoint that held it: the manifest records what was lost and where it still is
(``metadata.lost``), and retention keeps that one (``store.expired``)."""

from __future__ import annotations

import numpy as np

import jupyter_pause as jp
from jupyter_pause.engine import store


def test_retention_keeps_the_newest_keep_and_what_they_lost():
    ids = ["a", "b", "c", "d", "e"]
    assert store.expired(ids, 3, {}) == ["a", "b"]
    # e lost objects that only b still holds: b stays, a goes
    assert store.expired(ids, 3, {"e": {"b"}}) == ["a"]
    # and what b lost in its turn (a chain of incomplete checkpoints)
    assert store.expired(ids, 3, {"e": {"b"}, "b": {"a"}}) == []
    # an expired checkpoint's losses protect nothing; unknown holders are ignored
    assert store.expired(ids, 2, {"b": {"a"}, "e": {"gone"}}) == ["a", "b", "c"]
    assert store.expired(ids, 0, {}) == ["a", "b", "c", "d"]  # at least one is kept


def test_three_fresh_kernels_after_crashes_never_push_out_the_good_checkpoint(ck):
    good = jp.checkpoint(namespace={"big": np.arange(1000.0), "n": 1}, keep=3, **ck)
    fresh = {}
    for _round in range(3):  # a fresh kernel after a crash, paused each time
        c = jp.checkpoint(namespace=fresh, keep=3, lost_from=good.id, **ck)
        assert c.lost == {"big": good.id, "n": good.id}
        assert c.removed == []
    ids = [i.id for i in jp.list_checkpoints(**ck)]
    assert good.id in ids and len(ids) == 4
    m = store.get_manifest(ck["dir"], ck["notebook"], ids[-1])
    assert store.lost_of(m.metadata) == {"big": good.id, "n": good.id}


def test_a_restored_checkpoint_passes_on_what_it_lost_until_the_user_makes_it_anew(ck):
    good = jp.checkpoint(namespace={"big": np.arange(10.0), "n": 1}, keep=3, **ck)
    empty = jp.checkpoint(namespace={"other": 2}, keep=3, lost_from=good.id, **ck)
    ns: dict = {}
    jp.restore(empty.id, namespace=ns, lazy=False, **ck)
    again = jp.checkpoint(namespace=ns, keep=3, **ck)
    assert again.lost == {"big": good.id, "n": good.id}
    ns["n"] = 5  # made anew: no longer lost
    third = jp.checkpoint(namespace=ns, keep=3, **ck)
    assert third.lost == {"big": good.id}
    later = jp.checkpoint(namespace=ns, keep=3, **ck)
    assert good.id in [i.id for i in jp.list_checkpoints(**ck)]
    assert later.removed and good.id not in later.removed


def test_a_del_by_the_user_is_not_a_loss(ck):
    ns = {"big": np.arange(10.0), "n": 1}
    jp.checkpoint(namespace=ns, keep=2, **ck)
    del ns["big"]
    c = jp.checkpoint(namespace=ns, keep=2, **ck)
    assert c.lost == {}
    first = jp.list_checkpoints(**ck)[0].id
    assert first in jp.checkpoint(namespace=ns, keep=2, **ck).removed
