"""Which checkpoint a resume restores (plan.choose_for_resume, decided once by the
server), and reading it ahead into the page cache (plan.prefetch), as the server does
while a resume's kernel starts. Page-cache state is read with ``mincore``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import plan
from jupyter_pause.engine.errors import CorruptCheckpoint

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
    done = plan.prefetch(plan.choose_for_resume(**ck))
    assert done == sum(f.stat().st_size for f in blobs)
    assert all(cached_bytes(f) >= f.stat().st_size - 4096 for f in blobs)
    out = {}
    jp.restore(namespace=out, **ck)  # and it restores as ever
    assert torch.equal(out["big"], torch.ones(16 * MB))


def test_a_budget_reads_the_smallest_files_first_and_stops(ck, blobs):
    *smaller, big = blobs
    first = sum(f.stat().st_size for f in smaller)
    assert plan.prefetch(plan.choose_for_resume(**ck), budget=first + 4 * MB) == first + 4 * MB
    assert all(cached_bytes(f) >= f.stat().st_size - 4096 for f in smaller)
    assert cached_bytes(big) < 40 * MB  # 4 MB asked (the OS reads ahead a little further)


def test_a_stop_reads_nothing_more(ck, blobs):
    stop = threading.Event()
    stop.set()
    assert plan.prefetch(plan.choose_for_resume(**ck), stop=stop) == 0
    assert sum(cached_bytes(f) for f in blobs) < 4 * MB


def test_a_checkpoint_signed_with_another_key_is_not_read(ck, blobs, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "someone-else"))
    assert plan.choose_for_resume(**ck) is None
    assert sum(cached_bytes(f) for f in blobs) < 4 * MB


def test_nothing_to_read(ck):
    assert plan.choose_for_resume(**ck) is None  # no checkpoint yet
    assert plan.choose_for_resume(**ck, checkpoint_id="../../etc") is None


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["pickle", "blob header", "manifest"])
def test_a_damaged_newest_checkpoint_is_passed_over_once_for_all(ck, nbdir, damage):
    """What the restore would pass over without hashing a tensor, the choice passes over:
    read-ahead, the handoff's fill and the kernel's restore then all get the older one."""
    older = jp.checkpoint(namespace={"w": torch.ones(MB), "n": 1}, **ck).id
    newer = jp.checkpoint(namespace={"w": torch.ones(MB), "v": torch.zeros(MB)}, **ck)
    own = [f for f in newer.files_written if f.startswith("blobs/")]
    assert len(own) == 1  # v's file, which the older one does not have
    if damage == "pickle":
        flip(nbdir / newer.id / "objects.pkl", -3)
    elif damage == "blob header":
        flip(nbdir / own[0], 20)
    else:
        flip(nbdir / newer.id / "manifest.json", 30)
    chosen = plan.choose_for_resume(**ck)
    assert chosen.id == older and list(chosen.passed_over) == [newer.id]
    assert chosen.notes(older) == [
        f"checkpoint {newer.id} was passed over: {chosen.passed_over[newer.id]}",
        f"restored {older} instead, the newest checkpoint that verifies",
    ]
    assert {rel for rel, _path in chosen.files} == set(chosen.manifest.files)
    # the kernel restores it as it is told, and agrees
    out = {}
    assert jp.restore(chosen.id, namespace=out, or_older=True, **ck).id == older
    assert out["n"] == 1
    assert plan.choose_for_resume(**ck, checkpoint_id=newer.id) is None


def test_damage_in_tensor_bytes_is_the_restores_to_find(ck, nbdir):
    """Only the restore hashes tensor bytes: the choice keeps a checkpoint whose bytes are
    damaged, and the restore told to use it falls back to the older one and says so."""
    older = jp.checkpoint(namespace={"n": 1}, **ck).id
    newer = jp.checkpoint(namespace={"n": 2, "v": torch.zeros(MB)}, **ck)
    flip(nbdir / next(f for f in newer.files_written if f.startswith("blobs/")), -5)
    chosen = plan.choose_for_resume(**ck)
    assert chosen.id == newer.id and not chosen.passed_over
    out = {}
    result = jp.restore(chosen.id, namespace=out, or_older=True, lazy=False, **ck)
    assert result.id == older and out["n"] == 1 and list(result.passed_over) == [newer.id]
    with pytest.raises(CorruptCheckpoint):  # named without or_older: no other
        jp.restore(chosen.id, namespace={}, lazy=False, **ck)
