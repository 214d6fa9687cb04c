"""The restore read path: positioned reads in chunks (small ones eagerly, large ones in a
lazy restore's background reader) into buffers allocated once (with their final size, on
small pages) and mapped by a helper thread ahead of the reader (madvise, or one write per
page where the kernel cannot), hashes checked chunk by chunk. Every mode must give the
same bytes."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.engine import checks, errors, lazy, store, tensors


@pytest.fixture
def small_steps(monkeypatch):
    """Chunks and pieces of a few KiB, so a small checkpoint exercises every boundary."""
    monkeypatch.setattr(tensors, "READ_CHUNK", 12_288)
    monkeypatch.setattr(tensors, "BACKGROUND_READ_CHUNK", 16_384)
    monkeypatch.setattr(tensors, "PREFAULT_MIN", 0)
    monkeypatch.setattr(tensors, "PREFAULT_AHEAD", 20_480)
    monkeypatch.setattr(tensors, "CPU_CHUNK", 10_000)


def namespace():
    g = torch.Generator().manual_seed(3)
    model = torch.nn.Linear(300, 200)  # weight 240 kB, bias 800 B
    return {
        "model": model,
        "big": torch.randint(0, 255, (123_457,), dtype=torch.uint8, generator=g),
        "arr": np.random.default_rng(4).random(33_333),  # numpy, odd size
        "empty": torch.empty(0),
        "view": model.weight[10:20],
    }


def check(out, ns):
    assert torch.equal(out["model"].weight, ns["model"].weight)
    assert torch.equal(out["model"].bias, ns["model"].bias)
    assert isinstance(out["model"].weight, torch.nn.Parameter)
    assert torch.equal(out["big"], ns["big"])
    assert np.array_equal(out["arr"], ns["arr"])
    assert out["empty"].numel() == 0
    w = out["model"].weight
    assert out["view"].untyped_storage().data_ptr() == w.untyped_storage().data_ptr()


@pytest.mark.parametrize("lazily", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("mode", ["madvise", "touch", "none"])
def test_every_prefault_mode_restores_the_same_bytes(ck, small_steps, monkeypatch, mode, lazily):
    ns = namespace()
    jp.checkpoint(namespace=ns, **ck)
    if mode == "touch":  # kernel without MADV_POPULATE_WRITE
        monkeypatch.setattr(tensors, "_populate", lambda ptr, n: False)
    elif mode == "none":  # too little to be worth a helper thread
        monkeypatch.setattr(tensors, "PREFAULT_MIN", 1 << 40)
    monkeypatch.setattr(lazy, "EAGER_BELOW", 0)  # the lazy reader reads everything
    out = {}
    res = jp.restore(namespace=out, lazy=lazily, **ck)
    assert bool(res.loading) == lazily
    assert not lazy.wait()
    check(out, ns)


def test_madvise_failing_half_way_is_harmless(ck, small_steps, monkeypatch):
    ns = namespace()
    jp.checkpoint(namespace=ns, **ck)
    calls = {"n": 0}
    real = tensors._populate

    def flaky(ptr, n):  # works at first, then fails (old kernel, ENOMEM): pages get written
        calls["n"] += 1
        return calls["n"] < 4 and real(ptr, n)

    monkeypatch.setattr(tensors, "_populate", flaky)
    out = {}
    jp.restore(namespace=out, **ck)
    check(out, ns)


def test_populate_keeps_contents():
    t = torch.arange(3 << 20, dtype=torch.int32).view(torch.uint8)
    before = t.clone()
    tensors._populate(t.data_ptr(), t.numel())
    assert torch.equal(t, before)


def vm_flags(addr: int) -> set[str]:
    """The ``VmFlags`` of the mapping of this process that holds ``addr``."""
    inside = False
    for line in open("/proc/self/smaps"):  # noqa: SIM115
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "VmFlags:":
            return set(line.split()[1:])
    raise LookupError(hex(addr))


@pytest.mark.skipif(
    not Path("/proc/self/smaps").exists() or not np._core.multiarray._get_madvise_hugepage(),
    reason="needs Linux and a numpy that advises huge pages",
)
def test_restored_arrays_are_not_on_huge_pages(ck):
    """numpy advises huge pages for every large allocation; filling fresh huge pages from a
    file took 2-3x longer on the dev VM, so restore buffers take the advice back."""
    plain = np.empty(16 << 20, np.uint8)  # numpy's own allocation: advised huge pages
    if "hg" not in vm_flags(plain.ctypes.data + (8 << 20)):
        pytest.skip("this kernel takes no huge-page advice (no transparent huge pages)")
    ns = {"arr": np.ones(3 << 20), "t": torch.ones(3 << 20)}  # 24 MB each
    jp.checkpoint(namespace=ns, **ck)
    for lazily in (False, True):
        out = {}
        jp.restore(namespace=out, lazy=lazily, **ck)
        assert not lazy.wait()
        for name, middle in (("arr", out["arr"].ctypes.data), ("t", out["t"].data_ptr())):
            flags = vm_flags(middle + (12 << 20))
            assert "hg" not in flags, (name, lazily, flags)
        assert np.array_equal(out["arr"], ns["arr"]) and torch.equal(out["t"], ns["t"])


def test_corruption_in_a_later_chunk_is_caught(ck, nbdir, small_steps):
    ns = namespace()
    res = jp.checkpoint(namespace=ns, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"], res.id)
    s = next(s for s in m.storages if s.owner == "big")
    start, _raw, header = checks.read_safetensors_header(nbdir / s.file)
    b, _e = header[s.key]["data_offsets"]
    with open(nbdir / s.file, "r+b") as f:  # flip one byte deep inside the tensor
        f.seek(start + b + 100_000)
        byte = f.read(1)
        f.seek(start + b + 100_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    out = {}
    with pytest.raises(errors.CorruptCheckpoint, match="big"):
        jp.restore(namespace=out, **ck)
    assert out == {}


def test_small_write_chunks_keep_files_plain_safetensors(ck, nbdir, small_steps):
    from safetensors.torch import load_file

    ns = namespace()
    res = jp.checkpoint(namespace=ns, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"], res.id)
    w = next(s for s in m.storages if s.owner == "model" and s.shape == [200, 300])
    sd = load_file(nbdir / w.file)
    assert torch.equal(sd[w.key], ns["model"].weight.detach())
    big = next(s for s in m.storages if s.owner == "big")
    assert torch.equal(load_file(nbdir / big.file)[big.key], ns["big"])
    store.verify_checkpoint(ck["dir"], ck["notebook"], res.id)


def test_helper_error_falls_back_to_the_reader(ck, small_steps, monkeypatch):
    ns = namespace()
    jp.checkpoint(namespace=ns, **ck)

    def boom(buf):
        raise MemoryError

    monkeypatch.setattr(tensors, "_map_pages", boom)
    out = {}
    jp.restore(namespace=out, **ck)
    check(out, ns)


def test_gpu_targets_do_not_wait_for_the_helper():
    pre = tensors.Prefaulter([(0, "torch", 4 << 20)])
    with pre:
        assert pre.get(7) is None  # not a CPU buffer: returns at once
        buf = pre.get(0)
        assert buf is not None and buf.numel() == 4 << 20
        pre.release(0)


def test_the_background_reader_takes_the_gil_back_rarely(ck, monkeypatch):
    """A lazy restore's reader shares the GIL with the kernel's main thread (cells, and an
    ``import torch`` that holds it through long C calls): it reads a storage in calls of
    BACKGROUND_READ_CHUNK, each one trip for the GIL, not in the eager read's 8 MiB."""
    jp.checkpoint(namespace={"big": torch.ones(10 << 20)}, **ck)  # 40 MiB
    monkeypatch.setattr(lazy, "EAGER_BELOW", 0)
    reads = []
    real = tensors._pread_exact

    def counted(fd, pos, view):
        reads.append((threading.current_thread().name, len(view)))
        real(fd, pos, view)

    monkeypatch.setattr(tensors, "_pread_exact", counted)
    out = {}
    jp.restore(namespace=out, lazy=True, **ck)
    assert not lazy.wait()
    assert torch.equal(out["big"], torch.ones(10 << 20))
    assert [n for who, n in reads if who == "jp-lazy-restore" and n > 1 << 20] == [40 << 20]
