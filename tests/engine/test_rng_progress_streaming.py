"""RNG continuity, the progress bar, and bounded memory while streaming."""

from __future__ import annotations

import random
import threading
import tracemalloc

import numpy as np
import torch

import jupyter_pause as jp
from jupyter_pause.engine import progress


def test_random_state_continues(ck):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    jp.checkpoint(namespace={"x": 1}, **ck)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    jp.restore(namespace={}, **ck)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_rng_not_touched_when_restoring_names(ck):
    jp.checkpoint(namespace={"x": 1}, **ck)
    random.seed(5)
    expected = random.random()
    random.seed(5)
    jp.restore(None, "x", namespace={}, **ck)
    assert random.random() == expected


def test_progress_bar_and_summary(ck, monkeypatch, capsys):
    monkeypatch.setenv(progress.ENV_AFTER, "0")
    jp.checkpoint(namespace={"a": np.ones(200_000)}, dir=ck["dir"], notebook=ck["notebook"])
    err = capsys.readouterr().err
    assert "checkpoint [" in err and "ETA" in err and "MB/s" in err  # the bar
    assert err.rstrip().splitlines()[-1].lstrip("\r").startswith("checkpoint 20")  # the summary
    jp.restore(namespace={}, dir=ck["dir"], notebook=ck["notebook"])
    assert "restored 20" in capsys.readouterr().err


def test_no_bar_for_fast_operations(ck, capsys):
    jp.checkpoint(namespace={"a": 1}, dir=ck["dir"], notebook=ck["notebook"])
    err = capsys.readouterr().err
    assert "[" not in err and err.startswith("checkpoint 20")
    jp.checkpoint(namespace={"a": 1}, progress=False, **ck)
    assert capsys.readouterr().err == ""


def test_progress_format():
    p = progress.Progress("x", 2_000_000_000, enabled=False)
    p.done = 1_000_000_000
    text = p.bar(p.start + 2.0)
    assert (
        "50.0%" in text and "1.0 GB/2.0 GB" in text and "500.0 MB/s" in text and "ETA 2.0 s" in text
    )


def test_bars_made_while_reported_to_a_listener_tell_it_from_any_thread():
    heard = []
    with progress.reported_to(lambda *said: heard.append(said)):
        bar = progress.Progress("checkpoint", 0, enabled=False)
    outside = progress.Progress("uploading", 10, enabled=False)
    bar.add_total(300)  # told before the first byte: what it waits for
    worker = threading.Thread(target=lambda: [bar.update(1) for _ in range(300)])
    worker.start()
    worker.join()
    outside.update(10)
    assert heard[0] == ("writing", 0, 300)  # the phase, not the bar's label
    assert heard[-1] == ("writing", 300, 300)  # and its end
    assert len(heard) <= 301 and all(phase == "writing" for phase, _, _ in heard)


def test_streaming_memory_stays_near_one_tensor(ck):
    """Extra memory during a checkpoint ~ one chunk, not the checkpoint size (numpy
    allocations are visible to tracemalloc)."""
    arrays = {f"a{i}": np.random.rand(1_000_000) for i in range(8)}  # 8 x 8 MB = 64 MB
    jp.checkpoint(namespace=arrays, **ck)  # warm-up: imports, caches
    for a in arrays.values():
        a += 1  # force new data so everything is written again
    tracemalloc.start()
    try:
        res = jp.checkpoint(namespace=arrays, **ck)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.bytes_written > 60_000_000
    assert peak < 8_000_000  # well under one array, let alone the 64 MB total


def test_restore_memory_is_the_restored_data_only(ck):
    arrays = {f"a{i}": np.random.rand(500_000) for i in range(4)}  # 16 MB
    jp.checkpoint(namespace=arrays, **ck)
    out = {}
    tracemalloc.start()
    try:
        jp.restore(namespace=out, **ck)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16_000_000 * 1.25  # the arrays themselves + small change, no second copy
