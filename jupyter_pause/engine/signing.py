"""HMAC signing of manifests and pickles.

A checkpoint contains pickles, and unpickling runs code. A checkpoint folder is
just files, so anyone who can write there (another user on a shared volume, a
copied archive) could plant one. We therefore sign the manifest (which records
an HMAC of every pickle and an xxh3 hash of every tensor file) with a per-user
secret key and refuse to unpickle anything whose signature does not verify,
unless the user explicitly says ``trust=True``.

The key lives at ``<jupyter_data_dir()>/pause/secret`` with mode 0600 and is
created on first use (``O_EXCL``, so two kernels starting together agree on one).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from . import paths

KEY_BYTES = 32


def key_path() -> Path:
    return paths.pause_data_dir() / "secret"


def load_key(create: bool = True) -> bytes | None:
    """Read the signing key, creating it (0600) if missing and ``create``."""
    path = key_path()
    try:
        return _read(path)
    except FileNotFoundError:
        if not create:
            return None
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_hex(KEY_BYTES).encode("ascii")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its key
        return _read(path)
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def _read(path: Path) -> bytes:
    data = path.read_bytes().strip()
    if not data:
        raise FileNotFoundError(path)
    return data


def sign(data: bytes, key: bytes | None = None) -> str:
    """Hex HMAC-SHA256 of ``data``."""
    key = key if key is not None else load_key()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def verify(data: bytes, signature: str | None, key: bytes | None = None) -> bool:
    if not signature:
        return False
    key = key if key is not None else load_key(create=False)
    if key is None:
        return False
    return hmac.compare_digest(sign(data, key), signature.strip())


class FileSigner:
    """Incremental HMAC for a file being written (pickles are streamed, not held in memory)."""

    def __init__(self, key: bytes | None = None):
        self._mac = hmac.new(key if key is not None else load_key(), digestmod=hashlib.sha256)

    def update(self, data) -> None:
        self._mac.update(data)

    def hexdigest(self) -> str:
        return self._mac.hexdigest()


def sign_file(path: Path, key: bytes | None = None, chunk: int = 1 << 22) -> str:
    signer = FileSigner(key)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            signer.update(block)
    return signer.hexdigest()
