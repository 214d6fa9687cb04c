"""Free re-pause: a restore registers every tensor's digest, so the first checkpoint after
a resume of an unchanged model neither hashes nor writes its tensors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

import jupyter_pause as jp
from jupyter_pause.engine import checks, tensors


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))  # 2 MiB


def _fresh_process(ck):
    """As after a resume: a new process with empty caches (no digests, no verified blobs)."""
    tensors._CACHE.clear()
    checks._VERIFIED.clear()


def _count_hashing(monkeypatch):
    calls = []
    real_storage, real_range = tensors.hash_storage, checks.hash_range
    monkeypatch.setattr(
        tensors, "hash_storage", lambda s: calls.append(s.nbytes) or real_storage(s)
    )
    monkeypatch.setattr(
        checks, "hash_range", lambda f, pos, n: calls.append(n) or real_range(f, pos, n)
    )
    return calls


def test_first_checkpoint_after_restore_hashes_and_writes_no_tensor(ck, monkeypatch):
    jp.checkpoint(namespace={"model": model(), "opt_lr": 0.1}, **ck)
    _fresh_process(ck)
    ns = {}
    jp.restore(namespace=ns, **ck)
    calls = _count_hashing(monkeypatch)
    res = jp.checkpoint(namespace=ns, **ck)
    assert not res.files_written
    assert res.bytes_written < 20_000  # the pickle of the graph only
    assert not [n for n in calls if n >= tensors.FAST_PATH_MIN]  # no big tensor re-hashed


def test_a_change_after_restore_is_still_saved(ck):
    jp.checkpoint(namespace={"model": model()}, **ck)
    _fresh_process(ck)
    ns = {}
    jp.restore(namespace=ns, **ck)
    with torch.no_grad():
        ns["model"][0].weight[3, 3] = 42.0  # bumps _version
    res = jp.checkpoint(namespace=ns, **ck)
    assert res.files_written
    out = {}
    jp.restore(namespace=out, **ck)
    assert out["model"][0].weight[3, 3].item() == 42.0


def test_write_through_a_tied_twin_is_seen(ck):
    """Tensors rebuilt on one storage have their own version counters: a write through
    the one that is not first must still invalidate the cached digest."""
    torch.manual_seed(0)
    w = torch.randn(512, 512)
    ns = {"a": w, "b": w.view(-1)}
    jp.checkpoint(namespace=ns, **ck)
    _fresh_process(ck)
    out = {}
    jp.restore(namespace=out, **ck)
    out["b"][0:1000] = 7.0  # through b, not a
    jp.checkpoint(namespace=out, **ck)
    back = {}
    jp.restore(namespace=back, **ck)
    assert torch.all(back["a"].view(-1)[0:1000] == 7.0)


def test_restore_in_a_fresh_process_then_checkpoint_writes_under_1_mb(ck, tmp_path):
    """End to end across real processes, the way a resume runs."""
    code = textwrap.dedent(
        f"""
        import json, torch, jupyter_pause as jp
        ck = {ck!r}
        if __import__("sys").argv[1] == "save":
            torch.manual_seed(0)
            m = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)])
            jp.checkpoint(namespace={{"model": m}}, progress=False, **ck)
        else:
            ns = {{}}
            jp.restore(namespace=ns, progress=False, **ck)
            r = jp.checkpoint(namespace=ns, progress=False, **ck)
            print(json.dumps([r.bytes_written, r.bytes_total, r.files_written]))
        """
    )
    script = tmp_path / "s.py"
    script.write_text(code)
    subprocess.run([sys.executable, str(script), "save"], check=True, timeout=300)
    out = subprocess.run(
        [sys.executable, str(script), "again"], check=True, timeout=300, capture_output=True
    )
    import json

    written, total, files = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert total > 16_000_000 and written < 1_000_000 and files == []
