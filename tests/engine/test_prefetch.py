"""Reading a checkpoint ahead into the page cache (store.prefetch), as the server does
while a resume's kernel starts. Page-cache state is read with ``mincore``."""

from __future__ import annotations

import threading

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import store

from ..helpers import cached_bytes, drop_cached

MB = 1 << 20


@pytest.fixture
def blobs(ck, nbdir):
    """A checkpoint's tensor files, smallest first (small tensors, then an 8 MB and a 64 MB
    file), none of them in the page cache."""
    jp.checkpoint(namespace={"small": torch.ones(2 * MB), "big": torch.ones(16 * MB)}, **ck)
    files = sorted((nbdir / "blobs").iterdir(), key=lambda p: p.stat().st_size)
    assert [f.stat().st_size // MB for f in files[-2:]] == [8, 64]
    if not all(drop_cached(f) for f in files):
        pytest.skip("this file system keeps its pages in memory (tmpfs)")
    return files


def test_the_newest_checkpoint_is_read_into_the_cache(ck, blobs):
    done = store.prefetch(**ck)
    assert done == sum(f.stat().st_size for f in blobs)
    assert all(cached_bytes(f) >= f.stat().st_size - 4096 for f in blobs)
    out = {}
    jp.restore(namespace=out, **ck)  # and it restores as ever
    assert torch.equal(out["big"], torch.ones(16 * MB))


def test_a_budget_reads_the_smallest_files_first_and_stops(ck, blobs):
    *smaller, big = blobs
    first = sum(f.stat().st_size for f in smaller)
    assert store.prefetch(**ck, budget=first + 4 * MB) == first + 4 * MB
    assert all(cached_bytes(f) >= f.stat().st_size - 4096 for f in smaller)
    assert cached_bytes(big) < 40 * MB  # 4 MB asked (the OS reads ahead a little further)


def test_a_stop_reads_nothing_more(ck, blobs):
    stop = threading.Event()
    stop.set()
    assert store.prefetch(**ck, stop=stop) == 0
    assert sum(cached_bytes(f) for f in blobs) < 4 * MB


def test_a_checkpoint_signed_with_another_key_is_not_read(ck, blobs, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "someone-else"))
    assert store.prefetch(**ck) == 0
    assert sum(cached_bytes(f) for f in blobs) < 4 * MB


def test_nothing_to_read(ck):
    assert store.prefetch(**ck) == 0  # no checkpoint yet
    assert store.prefetch(**ck, checkpoint_id="../../etc") == 0
