"""Autosaves (checkpoints the server takes by itself, marked ``autosave: true``) are kept
in their own budget: they never push out a checkpoint or pause the user made, and an
autosave never replaces another kernel's newer autosave that this one did not restore."""

from __future__ import annotations

import numpy as np
import pytest

import jupyter_pause as jp
from jupyter_pause.engine import api, checks, errors

AUTOSAVE = {"autosave": True}


def save(ck, i, *, autosave=False, keep=2, ns=None):
    namespace = ns if ns is not None else {"a": np.full(1000, i)}
    return jp.checkpoint(
        namespace=namespace, keep=keep, metadata=AUTOSAVE if autosave else None, **ck
    ).id


def test_autosaves_never_push_out_the_users_checkpoints(ck, nbdir):
    mine = [save(ck, 0), save(ck, 1)]
    autosaves = [save(ck, 2 + i, autosave=True) for i in range(3)]
    # keep=2: both of the user's checkpoints stay, and the newest autosave beside them
    assert checks.checkpoint_ids(nbdir) == [*mine, autosaves[-1]]
    assert [checks.is_autosave(nbdir / cid) for cid in checks.checkpoint_ids(nbdir)] == [
        False,
        False,
        True,
    ]
    # the user's next checkpoint pushes out their oldest, never the newest autosave
    newer = save(ck, 9)
    assert checks.checkpoint_ids(nbdir) == [mine[1], autosaves[-1], newer]
    # the blobs of the autosaves that went were collected; what stays restores
    ns = {}
    jp.restore(autosaves[-1], namespace=ns, lazy=False, **ck)
    assert ns["a"][0] == 4


def test_an_autosave_never_replaces_another_kernels_newer_autosave(ck, nbdir):
    ns = {"a": np.full(1000, 1)}
    earlier = save(ck, 0, ns=ns)
    last_good = save(ck, 0, ns=ns, autosave=True)
    api._OWN.clear()  # a new kernel process: it neither wrote nor restored those

    fresh = {"a": np.zeros(3)}
    with pytest.raises(errors.AutosaveRefused) as refused:
        save(ck, 0, ns=fresh, autosave=True)
    assert last_good in str(refused.value)
    assert checks.checkpoint_ids(nbdir) == [earlier, last_good]  # nothing written

    # once it restored that state, it continues from it: autosaves go on
    restored = {}
    jp.restore(namespace=restored, lazy=False, **ck)
    assert restored["a"][0] == 1
    following = save(ck, 0, ns=restored, autosave=True)
    assert checks.checkpoint_ids(nbdir) == [earlier, following]

    # or the user saves this kernel by hand: kept beside the autosave, which then may go
    api._OWN.clear()
    mine = save(ck, 0, ns=fresh)
    assert checks.checkpoint_ids(nbdir) == [earlier, following, mine]
    later = save(ck, 0, ns=fresh, autosave=True)
    assert checks.checkpoint_ids(nbdir) == [earlier, mine, later]
