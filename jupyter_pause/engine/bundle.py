"""Bundles: one checkpoint, its notebook and the environment it was made in, in one file,
to move a session to another person or another environment (``jupyter pause export``,
``jupyter pause import``).

A bundle is a zip file, stored rather than compressed (tensors do not compress)::

    bundle.json                the header: the notebook's key, the checkpoint's id, the
                               origin (user, host, time, the signer's key id), the
                               environment (the manifest's ``versions``), and the sha256 of
                               the notebook and of each file under checkpoint/
    bundle.sig                 the header's HMAC under the exporter's key (manifest.sig's format)
    notebook.ipynb             the notebook file
    checkpoint/manifest.json   the checkpoint as the store keeps it, signature included
    checkpoint/manifest.sig
    checkpoint/objects.pkl
    blobs/<xxh3>.safetensors   its tensor files

An import unpickles nothing, and reads no entry but these names (a ``../`` or an absolute
name refuses the whole bundle). It checks every hash before anything reaches the store: the
header's sha256 of the small files, the manifest's checksum in its signature, the pickle's
hash, every tensor of every blob. A bundle signed with this user's key must verify with it
(else it was altered); one signed with another key is refused unless the importer trusts it
(``trust=True``, ``--trust``). An HMAC key is secret, so no one else can check a signature
made with it: the key id only names the signer's key, and the bundle's **digest** (the sha256
of ``bundle.json``, which holds the sha256 of the pickle, the manifest and the notebook,
the manifest in turn every tensor's hash) is what the sender can read out to the receiver.
Once trusted, the checkpoint is re-signed with the importer's key, bound to the notebook it
is imported as and to the importer: from then on it is theirs, restored like any other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import zipfile
import zlib
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

import xxhash

from . import checks, mirror, paths, signing, store
from .durable import fsync_dir, makedirs, write_file
from .errors import BundleRefused, CheckpointError, CheckpointNotFound, RemoteStoreError
from .manifest import MANIFEST, PICKLE, SIGNATURE, Manifest

FORMAT = "jupyter-pause-bundle/1"
HEADER = "bundle.json"
HEADER_SIG = "bundle.sig"
NOTEBOOK = "notebook.ipynb"
CHECKPOINT_FILES = tuple(f"checkpoint/{name}" for name in (MANIFEST, SIGNATURE, PICKLE))
HASHED = (NOTEBOOK, *CHECKPOINT_FILES)  # the files whose sha256 the header holds
_BLOB = re.compile(r"blobs/[0-9a-f]{16,64}\.safetensors")
MAX_HEADER = 16 << 20  # bytes of bundle.json, bundle.sig, manifest.*: read whole, so bounded
COPY_CHUNK = 8 << 20
IMPORTED = "imported"  # the manifest metadata that says where an imported checkpoint came from


@dataclass(frozen=True)
class Origin:
    """Who exported a bundle, as the bundle says: only a bundle signed with this user's
    own key proves it."""

    user: str
    host: str
    time: str  # ISO 8601 UTC, when it was exported
    key_id: str  # the signer's key fingerprint (signing.key_id)

    def __str__(self) -> str:
        return f"exported by {self.user} on {self.host} at {self.time}, key {self.key_id}"


@dataclass
class Header:
    notebook: str  # the notebook's key where it was exported
    checkpoint: str  # the checkpoint's id there
    origin: Origin
    environment: dict[str, Any]  # what the checkpoint was made in (the manifest's versions)
    sha256: dict[str, str]  # each of HASHED -> its sha256
    format: str = FORMAT

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Header:
        """Parse and check the shape; anything malformed raises ValueError."""
        try:
            raw = json.loads(data.decode("utf-8"))
            if raw.get("format") != FORMAT:
                raise ValueError(f"unknown bundle format {raw.get('format')!r}")
            header = cls(
                notebook=raw["notebook"],
                checkpoint=raw["checkpoint"],
                origin=Origin(**raw["origin"]),
                environment=raw["environment"],
                sha256=raw["sha256"],
            )
        except ValueError:
            raise
        except (AttributeError, KeyError, TypeError) as e:
            raise ValueError(f"malformed bundle header ({type(e).__name__}: {e})") from None
        texts = [header.notebook, header.checkpoint, *asdict(header.origin).values()]
        if not all(isinstance(t, str) for t in texts) or not isinstance(header.environment, dict):
            raise ValueError("malformed bundle header")
        if not isinstance(header.sha256, dict) or sorted(header.sha256) != sorted(HASHED):
            raise ValueError("the bundle header does not hash the files a bundle holds")
        return header


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- export
@dataclass(frozen=True)
class Exported:
    path: Path
    checkpoint: str
    digest: str  # sha256 of bundle.json: what the receiver compares
    key_id: str
    bytes: int


def export(
    out, notebook_file, dir=None, notebook: str | None = None, checkpoint_id: str | None = None
) -> Exported:
    """Write a bundle of one of this user's checkpoints of ``notebook`` (the newest that
    verifies, without ``checkpoint_id``) and the file ``notebook_file`` to ``out``
    (atomically, mode 0600: a namespace holds secrets). Every hash of the checkpoint is
    checked first: a damaged or untrusted one raises, nothing is written."""
    out, notebook_file = Path(out), Path(notebook_file)
    key = signing.load_key(create=False)
    nbdir = paths.notebook_dir(dir, notebook)
    notebook_bytes = notebook_file.read_bytes()
    _download(dir, nbdir, checkpoint_id)
    with checks.locked(nbdir, shared=True):
        if checkpoint_id is None:
            newest = store.latest_checkpoint(dir, notebook, verify=True)
            if newest is None:
                raise CheckpointNotFound(None, str(nbdir))
            checkpoint_id = newest.id
            m = checks.read_manifest(nbdir, checkpoint_id, key=key)
        else:
            m = checks.read_manifest(nbdir, checkpoint_id, key=key)
            checks.verify_manifest(nbdir, m)
        folder = nbdir / checkpoint_id
        small = {name: (folder / name.split("/")[1]).read_bytes() for name in CHECKPOINT_FILES}
        small[NOTEBOOK] = notebook_bytes
        origin = Origin(
            user=paths.owner(),
            host=socket.gethostname(),
            time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            key_id=signing.key_id(key),
        )
        header = Header(
            notebook=m.notebook,
            checkpoint=m.id,
            origin=origin,
            environment=dict(m.versions),
            sha256={name: _sha256(data) for name, data in small.items()},
        ).to_bytes()
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w+b") as f:
                with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
                    z.writestr(HEADER, header)
                    z.writestr(HEADER_SIG, signing.sign_manifest(header, key).to_bytes())
                    for name, data in small.items():
                        z.writestr(name, data)
                    for rel in sorted(m.files):
                        z.write(nbdir / rel, rel)
                f.flush()
                os.fsync(f.fileno())
                size = f.tell()
            os.replace(tmp, out)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    fsync_dir(out.parent)
    return Exported(out, checkpoint_id, _sha256(header), origin.key_id, size)


def _download(dir, nbdir: Path, checkpoint_id: str | None) -> None:
    """With a bucket behind the root: the checkpoint to export into the local cache (the
    newest that downloads whole, without ``checkpoint_id``), as a resume brings it.
    Nothing for a folder; :class:`RemoteStoreError` when the bucket cannot be read."""
    if paths.bucket_of(dir) is None:
        return
    mirror.pull(dir, nbdir)
    ids = checks.checkpoint_ids(nbdir)
    if checkpoint_id is not None:
        ids = [checkpoint_id] if checkpoint_id in ids else []  # a missing one: said below
    for cid in reversed(ids):
        try:
            mirror.fetch(dir, nbdir, cid)
            return
        except RemoteStoreError:
            raise
        except CheckpointError:  # unsigned or damaged: an older one may do
            continue


# ---------------------------------------------------------------- reading one
@dataclass
class Bundle:
    """A bundle whose structure and hashes were checked (nothing unpickled)."""

    path: Path
    header: Header
    digest: str
    manifest: Manifest
    mine: bool  # signed with this user's key, and verified with it
    notebook: bytes
    pickle: bytes

    def refusal(self) -> BundleRefused:
        """Why a bundle signed with another key is not imported without ``--trust``."""
        o = self.header.origin
        return BundleRefused(
            str(self.path),
            f"it is signed with another key than yours: fingerprint {o.key_id}, exported by "
            f"{o.user} on {o.host} at {o.time}, bundle digest sha256:{self.digest}. Its "
            "checkpoint holds pickled code, which runs in your kernel when you restore it. "
            "Only if you trust its sender (compare the fingerprint and digest with what "
            "their `jupyter pause export` printed), import it with --trust: it is then "
            "re-signed with your key",
            "other-key",
        )


def _refuse(path, reason: str, kind: str = "damaged") -> BundleRefused:
    return BundleRefused(str(path), reason, kind)


def _small(z: zipfile.ZipFile, path, name: str) -> bytes:
    info = z.getinfo(name)
    if info.file_size > MAX_HEADER and name in (HEADER, HEADER_SIG, *CHECKPOINT_FILES[:2]):
        raise _refuse(path, f"its {name} is implausibly large ({info.file_size} bytes)")
    return z.read(name)


def read(z: zipfile.ZipFile, path, key: bytes | None) -> Bundle:
    """Check a bundle's names, header, hashes and signer; raise :class:`BundleRefused`
    (before anything is written or unpickled) for anything wrong. Blobs are checked as
    they are copied (:func:`import_bundle`)."""
    names = [i.filename for i in z.infolist()]
    for name in names:
        if name not in (HEADER, HEADER_SIG, *HASHED) and not _BLOB.fullmatch(name):
            raise _refuse(
                path,
                f"it holds an entry named {name!r}, which no bundle holds (an absolute path, "
                "'..' or a name of its own); nothing of it was extracted",
                "unsafe-entry",
            )
    if len(set(names)) != len(names):
        raise _refuse(path, "it holds an entry twice", "unsafe-entry")
    for info in z.infolist():  # stored, so that no entry reads larger than the file
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            why = f"its {info.filename} is compressed or encrypted, which no bundle is"
            raise _refuse(path, why, "unsafe-entry")
    missing = [n for n in (HEADER, HEADER_SIG, *HASHED) if n not in names]
    if missing:
        raise _refuse(
            path, f"it is not a checkpoint bundle (no {', '.join(missing)})", "not-a-bundle"
        )
    try:
        raw_header = _small(z, path, HEADER)
        header = Header.from_bytes(raw_header)
        header_sig = signing.Signature.from_bytes(_small(z, path, HEADER_SIG))
        files = {name: _small(z, path, name) for name in HASHED}
    except ValueError as e:
        raise _refuse(path, str(e)) from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise _refuse(path, f"its zip structure is damaged ({e})") from None
    for name, data in files.items():
        if _sha256(data) != header.sha256[name]:
            raise _refuse(path, f"its {name} does not match the hash the bundle records")
    manifest_data = files[CHECKPOINT_FILES[0]]
    try:
        sig = signing.Signature.from_bytes(files[CHECKPOINT_FILES[1]])
        if xxhash.xxh3_128_hexdigest(manifest_data) != sig.manifest_xxh3:
            raise ValueError("the checkpoint's manifest does not match its checksum")
        m = Manifest.from_bytes(manifest_data)
    except ValueError as e:
        raise _refuse(path, str(e)) from None
    pickle = files[CHECKPOINT_FILES[2]]
    if m.id != header.checkpoint or m.pickle.file != PICKLE:
        raise _refuse(path, "its header and its checkpoint's manifest disagree")
    if xxhash.xxh3_128_hexdigest(pickle) != m.pickle.xxh3 or len(pickle) != m.pickle.bytes:
        raise _refuse(path, "its checkpoint's objects.pkl does not match the manifest's hash")
    for rel, entry in m.files.items():
        if not _BLOB.fullmatch(rel) or rel not in names or z.getinfo(rel).file_size != entry.bytes:
            raise _refuse(path, f"its checkpoint needs {rel}, which the bundle lacks or truncated")
    mine = key is not None and sig.key_id == signing.key_id(key)
    signers = {sig.key_id, header_sig.key_id, header.origin.key_id}
    if mine and not (
        len(signers) == 1
        and signing.verify(manifest_data, sig.hmac, key)
        and signing.verify(raw_header, header_sig.hmac, key)
        and signing.verify(pickle, m.pickle.hmac, key)
    ):
        why = "it names your key but does not verify with it: it was altered after it was signed"
        raise _refuse(path, why, "tampered")
    return Bundle(Path(path), header, _sha256(raw_header), m, mine, files[NOTEBOOK], pickle)


# ---------------------------------------------------------------- import
@dataclass(frozen=True)
class Imported:
    checkpoint: str  # its id in this user's store
    exported: str  # its id where it was exported
    notebook: str  # the notebook it was imported as (its key, a path below the root)
    notebook_file: Path
    notebook_written: bool  # False: an identical file was there already
    origin: Origin
    digest: str
    trusted: bool  # signed with another key and accepted with --trust
    manifest: Manifest  # as it is now in the store
    environment: dict[str, Any]  # what the checkpoint was made in


def notebook_target(root, notebook: str, path) -> Path:
    """Where the notebook file goes: ``notebook`` below ``root``, refused unless it is a
    relative ``.ipynb`` path that stays there, through folders of their own (a symbolic
    link on the way could lead anywhere: it is never followed)."""
    p = PurePosixPath(notebook)
    if p.is_absolute() or ".." in p.parts or not p.parts or "\\" in notebook:
        raise _refuse(
            path,
            f"its notebook path {notebook!r} does not lie inside this folder; name the "
            "notebook to import it as with --to NOTEBOOK",
            "unsafe-entry",
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in notebook):
        raise _refuse(
            path, f"the notebook path {notebook!r} holds a control character", "unsafe-entry"
        )
    if notebook.endswith("/") or p.suffix != ".ipynb":
        raise _refuse(
            path,
            f"{notebook!r} is not a notebook's name: name the notebook to import it as with "
            "--to FOLDER/NAME.ipynb",
            "unsafe-entry",
        )
    base = Path(root).absolute()
    target = base / p
    for step in [*reversed(p.parents[:-1]), p]:  # a, a/b, a/b/c.ipynb
        at = base / step
        try:
            st = os.lstat(at)
        except FileNotFoundError:
            break  # made by the import, below a folder of this one
        if stat.S_ISLNK(st.st_mode) or (at != target and not stat.S_ISDIR(st.st_mode)):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
            raise _refuse(
                path,
                f"{at} is {what}: the notebook is only written into folders of this one",
                "unsafe-entry",
            )
    return target


def import_bundle(
    path, dir=None, *, to: str | None = None, root=".", trust: bool = False
) -> Imported:
    """Bring a bundle into this user's checkpoint store as the newest checkpoint of
    notebook ``to`` (default: the notebook's path where it was exported), and write the
    notebook file below ``root`` unless an identical one is there. Raises
    :class:`BundleRefused` before anything is committed: a damaged or altered bundle, an
    entry outside the bundle's names, a different notebook file in the way, or one
    signed with another key without ``trust``. Nothing is unpickled."""
    key = signing.load_key(create=False)
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise _refuse(path, f"it is not a bundle ({e})", "not-a-bundle") from None
    with z:
        b = read(z, path, key)
        if not b.mine and not trust:
            raise b.refusal()
        key = key or signing.load_key()  # a new user's: the import is signed with it
        notebook = str(PurePosixPath(to or b.header.notebook))
        target = notebook_target(root, notebook, path)
        present = target.is_file() and target.read_bytes() == b.notebook
        if target.exists() and not present:
            raise _refuse(
                path,
                f"{target} exists and differs from the bundle's notebook; import it under "
                "another name with --to NOTEBOOK",
                "notebook-exists",
            )
        # the notebook first, whose writing can fail (a name too long, a full disk):
        # then nothing is committed; a checkpoint that is refused takes it away again
        made = [] if present else _missing_folders(target.parent)
        if not present:
            makedirs(target.parent, mode=0o755)
            write_file(target, b.notebook, replace=False)
        try:
            m = _import_checkpoint(z, b, dir, notebook, key)
        except BaseException:
            if not present:
                target.unlink(missing_ok=True)
                for folder in made:  # deepest first
                    with contextlib.suppress(OSError):
                        folder.rmdir()
            raise
    return Imported(
        checkpoint=m.id,
        exported=b.header.checkpoint,
        notebook=notebook,
        notebook_file=target,
        notebook_written=not present,
        origin=b.header.origin,
        digest=b.digest,
        trusted=not b.mine,
        manifest=m,
        environment=b.header.environment,
    )


def _missing_folders(folder: Path) -> list[Path]:
    """The folders ``makedirs(folder)`` would make, deepest first."""
    missing = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing


def _import_checkpoint(z: zipfile.ZipFile, b: Bundle, dir, notebook: str, key: bytes) -> Manifest:
    """Copy the checkpoint in as a new one of ``notebook``, each blob checked as it
    lands, re-signed with this user's key for this notebook and this user."""
    nbdir = paths.notebook_dir(dir, notebook)
    with checks.locked(nbdir):
        txn = store.Transaction(nbdir)
        try:
            checks.write_file_synced(txn.tmp / PICKLE, b.pickle)
            for rel in sorted(b.manifest.files):
                name = rel.split("/", 1)[1]
                part = txn.staging_path(name + ".part")
                with z.open(rel) as src, paths.private_open(part, buffering=COPY_CHUNK) as dst:
                    shutil.copyfileobj(src, dst, COPY_CHUNK)
                    dst.flush()
                    os.fsync(dst.fileno())
                why = checks.check_blob(part, b.manifest.files[rel], full=True)
                if why is not None:
                    raise _refuse(
                        b.path, f"its {rel} does not match the checkpoint's manifest ({why})"
                    )
                txn.stage_blob(part.name, name)
            m = dataclasses.replace(
                b.manifest,
                id=txn.id,
                notebook=paths.notebook_key(notebook),
                owner=paths.owner(),
                metadata=_metadata(b),
                pickle=dataclasses.replace(b.manifest.pickle, hmac=signing.sign(b.pickle, key)),
                groups=_resigned(b, txn, key),
            )
            txn.commit(m)
        except (zipfile.BadZipFile, zlib.error, EOFError) as e:
            txn.abort()
            raise _refuse(b.path, f"a tensor file in it is damaged ({e})") from None
        except BaseException:
            txn.abort()
            raise
    return m


def _resigned(b: Bundle, txn, key: bytes) -> list:
    """The checkpoint's groups with the HMAC of the records each keeps apart (format 3)
    made with this user's key; a bundle signed with that key must verify with it first."""
    m, out = b.manifest, []
    for g in m.groups:
        if g.records is None:
            out.append(g)
            continue
        s = m.storages[g.records]
        try:
            data = checks.read_records(
                txn.staging_path(s.file.split("/", 1)[1]), m.files[s.file], s
            )
        except CheckpointError as e:
            raise _refuse(
                b.path, f"its {s.file} does not match the checkpoint's manifest ({e})"
            ) from None
        if b.mine and not signing.verify(data, g.hmac, key):
            why = (
                "it names your key but does not verify with it: it was altered after it was signed"
            )
            raise _refuse(b.path, why, "tampered")
        out.append(dataclasses.replace(g, hmac=signing.sign(data, key)))
    return out


def _metadata(b: Bundle) -> dict[str, Any]:
    """The imported checkpoint's metadata: the exporter's, less what only meant something
    in their store (which checkpoints held what it lost, its autosave budget), plus where
    it came from."""
    kept = {k: v for k, v in b.manifest.metadata.items() if k not in (store.LOST, checks.AUTOSAVE)}
    origin = asdict(b.header.origin)
    return {
        **kept,
        IMPORTED: {
            **origin,
            "notebook": b.header.notebook,
            "checkpoint": b.header.checkpoint,
            "bundle": f"sha256:{b.digest}",
            "trust": "--trust" if not b.mine else "own key",
        },
    }


# ---------------------------------------------------------------- environments
@dataclass(frozen=True)
class EnvNote:
    """One way the importing environment differs from the checkpoint's."""

    what: str  # "python", "torch", "cuda", "gpu", "package numpy", "platform"
    then: str
    now: str
    matters: bool
    why: str

    def __str__(self) -> str:
        return f"{self.what}: {self.then} -> {self.now}: {self.why}"


def needed_packages(m: Manifest) -> list[str]:
    """The top-level packages a restore of ``m`` imports: its module aliases, its objects'
    types and what the checkpoint recorded (``versions.packages``), torch and numpy for
    its tensors."""
    names = {*m.modules.values(), *(o.type for o in m.objects.values())}
    names.update(p for p in m.versions.get("packages") or {} if isinstance(p, str))
    names.update(s.kind for s in m.storages)
    tops = {n.partition(":")[0].partition(".")[0] for n in names}
    ours = {"builtins", "__main__", *sys.stdlib_module_names}
    return sorted(t for t in tops if t.isidentifier() and t not in ours)


def _minor(version: Any) -> tuple[str, ...]:
    return tuple(str(version).split("+")[0].split(".")[:2])


@dataclass(frozen=True)
class Environment:
    """Where a bundle is imported: what :func:`environment_notes` compares."""

    python: str
    platform: str = ""
    torch: str | None = None
    cuda: str | None = None
    gpu_model: str | None = None  # None: no GPU
    #: each of :func:`needed_packages` -> its version ("" when unknown), None when missing
    packages: dict[str, str | None] = dataclasses.field(default_factory=dict)


PYTHON_MINOR = "functions and classes defined in cells are saved as bytecode, which "
PYTHON_MINOR += "another Python minor version cannot run"


def environment_notes(m: Manifest, here: Environment) -> list[EnvNote]:
    """How ``here`` differs from the environment ``m`` was made in, and whether each
    difference matters for restoring it (pure)."""
    env = m.versions
    out: list[EnvNote] = []
    on_gpu = sum(s.nbytes for s in m.storages if s.device.startswith("cuda"))

    def note(what, then, now, matters, why):
        out.append(EnvNote(what, str(then), str(now), matters, why))

    python = env.get("python")
    if python and python != here.python:
        if _minor(python) != _minor(here.python):
            note("python", python, here.python, True, PYTHON_MINOR)
        else:
            note("python", python, here.python, False, "only the patch release differs")
    gpus = [g for g in env.get("gpu") or [] if isinstance(g, str)]
    if on_gpu and not here.gpu_model:
        why = f"it holds {on_gpu} bytes of CUDA tensors: restore with %restore --device cpu"
        note("gpu", ", ".join(gpus) or "a GPU", "none", True, why)
    elif gpus and here.gpu_model and here.gpu_model not in gpus:
        if on_gpu:
            why = "another GPU model: its memory and the dtypes it runs fast differ"
        else:
            why = "its tensors are all on the CPU"
        note("gpu", ", ".join(gpus), here.gpu_model, bool(on_gpu), why)
    cuda = env.get("cuda")
    if cuda and here.cuda and cuda != here.cuda:
        if on_gpu and here.gpu_model:
            note("cuda", cuda, here.cuda, True, "the numerics of its GPU tensors may differ")
        else:
            note("cuda", cuda, here.cuda, False, "none of its tensors goes to a GPU here")
    recorded = {**(env.get("packages") or {}), "torch": env.get("torch")}
    for top in needed_packages(m):
        if top not in here.packages:
            continue
        then, now = recorded.get(top) or env.get(top), here.packages[top]
        if now is None:
            why = "its objects need it: install it, or they are not restored"
            note(f"package {top}", then or "installed", "missing", True, why)
        elif then and now and then != now:
            if _minor(then) != _minor(now):
                why = "another minor version: its objects may not load, or behave differently"
                note(f"package {top}", then, now, True, why)
            else:
                note(f"package {top}", then, now, False, "only the patch release differs")
    platform = env.get("platform")
    if platform and here.platform and platform != here.platform:
        why = "the checkpoint's format does not depend on it"
        note("platform", platform, here.platform, False, why)
    return out
