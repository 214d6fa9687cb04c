"""HMAC signing of manifests and pickles.

A checkpoint contains pickles, and unpickling runs code. A checkpoint folder is
just files, so anyone who can write there (another user on a shared volume, a
copied archive) could plant one. We therefore sign the manifest (which records
an HMAC of every pickle and an xxh3 hash of every tensor file) with a per-user
secret key and refuse to unpickle anything whose signature does not verify,
unless the user explicitly says ``trust=True``.

The key lives at ``<jupyter_data_dir()>/pause/secret`` with mode 0600, or wherever
``paths.ENV_KEY_FILE`` says (``c.PauseApp.key_file``: a mounted Kubernetes Secret, a
file on the user's home volume; the server hands it to its kernels), and is created on
first use (linked into place, never replacing one: two kernels starting together agree on
one, and neither reads it half written).  The same key on every node is what lets any of
them resume what another paused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import xxhash

from . import durable, paths
from .errors import KeyProblem

KEY_BYTES = 32
SIG_FORMAT = "jupyter-pause-sig/2"
_HEX = re.compile(r"[0-9a-f]{64}")


def key_path() -> Path:
    configured = os.environ.get(paths.ENV_KEY_FILE)
    if configured:
        return Path(configured).expanduser()
    return paths.pause_data_dir() / "secret"


def load_key(create: bool = True) -> bytes | None:
    """Read the signing key, creating it (0600) if missing and ``create``.

    A key file that exists but is empty or unreadable is never replaced silently
    (every checkpoint signed with the old key would become foreign): it raises
    :class:`KeyProblem`, which says what to do."""
    path = key_path()
    try:
        return _read(path)
    except FileNotFoundError:
        if not create:
            return None
    durable.makedirs(path.parent)
    key = secrets.token_hex(KEY_BYTES).encode("ascii")
    try:  # whole from the moment it has a name, and that name on disk before it signs
        durable.write_file(path, key, replace=False)
    except FileExistsError:  # another process won the race: use its key
        return _read(path)
    return key


def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes().strip()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise KeyProblem(path, f"it cannot be read ({e.strerror or e})") from None
    if not data:
        raise KeyProblem(path, "it is empty")
    return data


def key_id(key: bytes) -> str:
    """A public name for a key (not the key, not an HMAC anyone could reuse): lets a
    listing say "signed with a different key" instead of "tampered"."""
    return hashlib.sha256(b"jupyter-pause key id\0" + key).hexdigest()[:16]


def where_to_put(needed: str) -> str:
    """Where the key with the fingerprint ``needed`` must go for this process to use it."""
    return (
        f"copy the key with fingerprint {needed or '(unknown)'} to {key_path()} "
        "(c.PauseApp.key_file; on Kubernetes, mount the user's key Secret there)"
    )


def missing_key_reason(needed: str) -> str:
    """Why nothing signed with the key ``needed`` verifies where there is no key at all."""
    return (
        f"it was signed with the key whose fingerprint is {needed or '(unknown)'}, and this "
        f"server has no key ({key_path()} does not exist); to resume it here, "
        + where_to_put(needed)
    )


def other_key_reason(needed: str, key: bytes) -> str:
    """Why something signed with the key ``needed`` does not verify with ``key``."""
    created = key_created() or "an unknown time"
    return (
        f"it was signed with the key whose fingerprint is {needed}, not with this server's "
        f"key {key_path()} (fingerprint {key_id(key)}, created at {created}): another "
        "server's or user's key, or this key was replaced since; to resume it here, "
        + where_to_put(needed)
    )


def key_created() -> str | None:
    """When this user's key file was written (UTC, ISO 8601), or None if there is none."""
    try:
        mtime = key_path().stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(mtime, timezone.utc).isoformat(timespec="seconds")


@dataclass
class Signature:
    """The contents of ``manifest.sig``.

    ``hmac`` is what makes a checkpoint trusted. ``manifest_xxh3`` (not secret) tells
    a manifest damaged on disk (its checksum no longer matches) from one signed by
    someone else; ``key_id`` tells a checkpoint signed with another or an older key of
    this user from a forged one. A signature written before these fields existed is
    just the hex HMAC."""

    hmac: str
    key_id: str = ""
    manifest_xxh3: str = ""

    def to_bytes(self) -> bytes:
        return json.dumps({"format": SIG_FORMAT, **asdict(self)}).encode("ascii")

    @classmethod
    def from_bytes(cls, raw: bytes) -> Signature:
        """Parse; raises ValueError for anything malformed (never UnicodeDecodeError)."""
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise ValueError("manifest.sig holds non-ASCII bytes") from None
        if text.startswith("{"):
            try:
                d = json.loads(text)
            except ValueError:
                raise ValueError("manifest.sig is not valid JSON") from None
            if not isinstance(d, dict) or d.get("format") != SIG_FORMAT:
                raise ValueError("manifest.sig has an unknown format")
            fields = ("hmac", "key_id", "manifest_xxh3")
            if set(d) != {"format", *fields} or not all(isinstance(d[k], str) for k in fields):
                raise ValueError("manifest.sig has malformed fields")
            sig = cls(*(d[k] for k in fields))
        else:
            sig = cls(text)
        if not _HEX.fullmatch(sig.hmac):
            raise ValueError("manifest.sig does not hold an HMAC")
        return sig


def sign_manifest(data: bytes, key: bytes) -> Signature:
    return Signature(
        hmac=sign(data, key), key_id=key_id(key), manifest_xxh3=xxhash.xxh3_128_hexdigest(data)
    )


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
