"""Signatures and hashes: nothing is unpickled unless the signature verifies (or trust=True),
and corrupt data is refused before anything reaches the namespace."""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest
import torch
import xxhash

import jupyter_pause as jp
from jupyter_pause.engine import checks, errors, signing, store


def flip(path, pos=-1):
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture
def saved(ck, nbdir):
    res = jp.checkpoint(namespace={"w": torch.arange(100.0), "cfg": {"a": 1}}, **ck)
    return nbdir / res.id


def test_key_created_private_once(saved):
    p = signing.key_path()
    assert p.is_file() and stat.S_IMODE(p.stat().st_mode) == 0o600
    assert signing.load_key() == signing.load_key()


def test_tampered_manifest_refused_unless_trusted(ck, saved):
    m = json.loads((saved / "manifest.json").read_text())
    m["metadata"]["evil"] = True
    edited = json.dumps(m).encode()
    (saved / "manifest.json").write_bytes(edited)
    ns = {"w": "old"}
    # edited without updating the (unkeyed) checksum in manifest.sig: reads as damaged
    with pytest.raises(errors.CorruptCheckpoint, match="damaged on disk"):
        jp.restore(saved.name, namespace=ns, **ck)
    # the checksum forged too: only the HMAC is left to catch it, and it does
    sig = json.loads((saved / "manifest.sig").read_text())
    sig["manifest_xxh3"] = xxhash.xxh3_128_hexdigest(edited)
    (saved / "manifest.sig").write_text(json.dumps(sig))
    with pytest.raises(errors.UntrustedCheckpoint, match="altered after signing.*trust=True"):
        jp.restore(saved.name, namespace=ns, **ck)
    assert ns == {"w": "old"}
    res = jp.restore(namespace=ns, trust=True, **ck)
    assert res.metadata["evil"] is True and torch.equal(ns["w"], torch.arange(100.0))
    assert jp.list_checkpoints(ck["dir"], ck["notebook"])[0].trusted is False


def test_unsigned_refused(ck, saved):
    (saved / "manifest.sig").unlink()
    with pytest.raises(errors.UntrustedCheckpoint, match="no signature"):
        jp.restore(namespace={}, **ck)
    jp.restore(namespace={}, trust=True, **ck)


def test_foreign_key_refused(ck, saved):
    signing.key_path().unlink()  # as if the checkpoint came from another user/machine
    with pytest.raises(errors.UntrustedCheckpoint):
        jp.restore(namespace={}, **ck)


def test_tampered_pickle_never_unpickled(ck, saved, monkeypatch):
    from jupyter_pause.engine import pickling

    called = []
    monkeypatch.setattr(pickling, "load_records", lambda *a, **k: called.append(1))
    flip(saved / "objects.pkl", 10)
    with pytest.raises(errors.CorruptCheckpoint):
        jp.restore(namespace={}, **ck)
    # even with a matching xxh3 in a re-signed-by-someone-else manifest, the HMAC catches it
    m = checks.read_manifest(saved.parent, saved.name, trust=True)
    import xxhash

    m.pickle.xxh3 = xxhash.xxh3_128_hexdigest((saved / "objects.pkl").read_bytes())
    (saved / "manifest.json").write_bytes(m.to_bytes())
    (saved / "manifest.sig").write_text(signing.sign(m.to_bytes()))  # (valid signature)
    with pytest.raises(errors.UntrustedCheckpoint, match="HMAC"):
        jp.restore(namespace={}, **ck)
    assert called == []


def test_flipped_tensor_byte_names_object(ck, nbdir):
    ns = {"model": torch.nn.Linear(8, 8), "arr": np.arange(50.0)}
    jp.checkpoint(namespace=ns, **ck)
    m = store.get_manifest(ck["dir"], ck["notebook"])
    s = next(s for s in m.storages if s.owner == "arr")
    start, _, header = checks.read_safetensors_header(nbdir / s.file)
    flip(nbdir / s.file, start + header[s.key]["data_offsets"][0] + 3)
    target = {"arr": "untouched"}
    with pytest.raises(errors.CorruptCheckpoint, match="'arr'") as ei:
        jp.restore(namespace=target, **ck)
    assert ei.value.name == "arr"
    assert target == {"arr": "untouched"}
    # corrupt data is refused even with trust=True (trust is about origin, not integrity)
    with pytest.raises(errors.CorruptCheckpoint):
        jp.restore(namespace=target, trust=True, **ck)
