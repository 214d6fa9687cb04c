"""Where checkpoints live on disk.

One root (``JUPYTER_PAUSE_CHECKPOINT_DIR`` or ``<jupyter_data_dir>/pause/checkpoints``)
holds one folder per user (the root may be a volume several users share: two
servers must never map the same notebook path to the same folder), and that one
folder per notebook. The folder name is derived from the notebook key (its
server-relative path), but the key comes from users and from the server, so it
must never be able to escape the root (``../../etc``) or collide: the name is a
sanitised, shortened copy of the key plus a short hash of the exact key.

Pickled namespaces hold secrets (API keys, tokens), so everything below the root
is created private, folders 0700 and files 0600, whatever the umask.

On a shared root another user may have made this user's folder first (their own
folder, a symlink to one, or a folder anyone may write): using it would show
them the notebooks' names, let them hold the locks, and rename the checkpoints
away.  Such a folder is refused (never followed, never written), and this user's
checkpoints go to a private folder in their own Jupyter data directory instead,
``<jupyter_data_dir>/pause/checkpoints-private/<root>/<user>``; once there, they
stay there (see :func:`user_folder`).

The root may also be a bucket, ``s3://bucket/prefix`` or ``gs://bucket/prefix``
(:class:`Bucket`): the checkpoints are then written into a local cache with the very
same layout (``JUPYTER_PAUSE_CHECKPOINT_CACHE``, else a private folder in the Jupyter
data directory) and mirrored to the bucket under the same relative keys
(engine/remote.py).  Anything that looks like a URL but is not one of these is refused,
never taken as a folder named ``s3:``.
"""

from __future__ import annotations

import getpass
import os
import pwd
import re
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import xxhash

from ..protocol import NOTEBOOK_ENV

ENV_DIR = "JUPYTER_PAUSE_CHECKPOINT_DIR"
ENV_CACHE = "JUPYTER_PAUSE_CHECKPOINT_CACHE"
ENV_KEEP = "JUPYTER_PAUSE_KEEP"
#: the user's signing key (``c.PauseApp.key_file``; default <jupyter data dir>/pause/secret)
ENV_KEY_FILE = "JUPYTER_PAUSE_KEY_FILE"
DEFAULT_KEEP = 3
DEFAULT_NOTEBOOK = "default"

# 2026-11-30T18-02-11 (UTC), with "-2", "-3", ... when two land in the same second
ID_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:-(\d+))?$")


def jupyter_data_dir() -> Path:
    """Jupyter's per-user data dir (honours JUPYTER_DATA_DIR), without importing much."""
    from jupyter_core.paths import jupyter_data_dir as _jdd

    return Path(_jdd())


def pause_data_dir() -> Path:
    return jupyter_data_dir() / "pause"


# "s3://…", "gs:/…", "https:…": a scheme, then a colon and a slash (not "C:\\" nor "./a:b")
URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")
SCHEMES = ("s3", "gs")
# the rules for bucket names: S3's 3-63 of [a-z0-9.-], GCS's also "_" (names with dots,
# up to 222 characters, are left to GCS to judge)
BUCKET_RULES = {
    "s3": (re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"), "3-63 of a-z 0-9 . -"),
    "gs": (re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$"), "3-63 of a-z 0-9 . - _"),
}
# "scheme://user:password@" — what must never reach a log
_USERINFO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/+)[^/]*@")


def redact(text: str) -> str:
    """``text`` with the credentials of a URL (``s3://KEY:SECRET@bucket``) masked, as
    it may be shown or logged."""
    return _USERINFO_RE.sub(r"\1***@", text)


@dataclass(frozen=True)
class Bucket:
    """A checkpoint root in object storage, and the local folder that caches it."""

    scheme: str  # "s3" or "gs"
    bucket: str
    prefix: str  # "" or "a/b", no leading or trailing slash
    cache: Path

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")

    def __str__(self) -> str:
        return self.url


def parse_bucket(text: str, cache: str | os.PathLike | None = None) -> Bucket | None:
    """``text`` as a bucket URL, or None if it is a local path.  Raises ValueError for a
    URL that is not ``s3://BUCKET[/PREFIX]`` or ``gs://BUCKET[/PREFIX]``."""
    m = URL_RE.match(text)
    if not m:
        return None
    shown = redact(text)  # error messages end up in logs
    scheme = m.group(1).lower()
    if scheme not in SCHEMES or not text[len(scheme) + 1 :].startswith("//"):
        raise ValueError(
            f"checkpoint directory {shown!r} is a URL, but only s3://BUCKET/PREFIX and "
            "gs://BUCKET/PREFIX are checkpoint stores (a local folder is a plain path)"
        )
    bucket, _, prefix = text[len(scheme) + 3 :].partition("/")
    if "@" in bucket:
        raise ValueError(
            f"{shown!r} holds credentials: they do not belong in the URL (they would be "
            "logged); give them as the standard variables (AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS) or credential files"
        )
    pattern, rule = BUCKET_RULES[scheme]
    if not pattern.match(bucket):
        raise ValueError(f"{shown!r}: {bucket!r} is not a bucket name ({rule})")
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ValueError(f"{shown!r}: the prefix may not contain '.' or '..'")
    prefix = "/".join(parts)
    if cache is None:
        cache = os.environ.get(ENV_CACHE)
    if not cache:
        name = folder_name(f"{scheme}://{bucket}/{prefix}")
        cache = pause_data_dir() / "checkpoint-cache" / name
    return Bucket(scheme, bucket, prefix, Path(cache).expanduser())


@dataclass(frozen=True)
class CheckpointRoot:
    """The checkpoint root, resolved once (:func:`root_of`) and handed down: its local
    folder (the root itself, or the cache of a bucket) and the bucket it mirrors (None
    for a plain folder).  Every function here that takes ``dir`` takes one as it is."""

    folder: Path
    bucket: Bucket | None = None

    def user_root(self) -> Path:
        return user_root(self)

    def notebook_dir(self, notebook: str | None = None) -> Path:
        return notebook_dir(self, notebook)


def root_of(dir=None) -> CheckpointRoot:
    """``dir`` (see :func:`location`) resolved once; a :class:`CheckpointRoot` as it is."""
    if isinstance(dir, CheckpointRoot):
        return dir
    loc = location(dir)
    return CheckpointRoot(loc.cache, loc) if isinstance(loc, Bucket) else CheckpointRoot(loc)


def location(dir=None) -> Path | Bucket:
    """The checkpoint root: explicit ``dir`` (a path, a URL, a :class:`Bucket` or a
    :class:`CheckpointRoot`), else ``$JUPYTER_PAUSE_CHECKPOINT_DIR``, else the Jupyter
    data dir."""
    if isinstance(dir, Bucket):
        return dir
    if isinstance(dir, CheckpointRoot):
        return dir.bucket or dir.folder
    text = os.fspath(dir) if dir is not None else os.environ.get(ENV_DIR)
    if not text:
        return pause_data_dir() / "checkpoints"
    return parse_bucket(text) or Path(text).expanduser()


def bucket_of(dir=None) -> Bucket | None:
    """The bucket the checkpoints are mirrored to, or None when the root is a folder."""
    loc = location(dir)
    return loc if isinstance(loc, Bucket) else None


def checkpoint_root(dir=None) -> Path:
    """The local checkpoint root: the folder itself, or the cache of a bucket."""
    loc = location(dir)
    return loc.cache if isinstance(loc, Bucket) else loc


def kernel_env(dir=None) -> dict[str, str]:
    """What a kernel needs in its environment to use the same checkpoint root."""
    loc = location(dir)
    if isinstance(loc, Bucket):
        return {ENV_DIR: loc.url, ENV_CACHE: str(loc.cache)}
    return {ENV_DIR: str(loc)}


def notebook_key(notebook: str | None = None) -> str:
    """The notebook's key: explicit, else its server-relative path
    (``protocol.NOTEBOOK_ENV``, set by jupyter-pause's kernel manager, so the
    magics and the server agree), else ``JPY_SESSION_NAME`` (set by Jupyter
    Server; may be absolute), else 'default'."""
    if notebook:
        return str(notebook)
    return os.environ.get(NOTEBOOK_ENV) or os.environ.get("JPY_SESSION_NAME") or DEFAULT_NOTEBOOK


def owner() -> str:
    """Who owns the checkpoints this process writes: the JupyterHub user when there is one
    (every single-user container may run as the same Unix user), else the login name."""
    name = os.environ.get("JUPYTERHUB_USER")
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (an arbitrary container uid)
        return f"uid{os.getuid()}"


@dataclass(frozen=True)
class UserFolder:
    """Where this user's checkpoints are: ``path``; ``refused`` says why that is not
    their folder in the checkpoint root (empty when it is)."""

    path: Path
    refused: str = ""


def user_root(dir=None, user: str | None = None) -> Path:
    """This user's part of the checkpoint root: ``<root>/<user folder>``, or the private
    folder that replaces it (:func:`user_folder`).  Another ``user``'s part is only a path."""
    if user is not None and user != owner():
        return checkpoint_root(dir) / folder_name(user)
    return user_folder(dir).path


def user_folder(dir=None) -> UserFolder:
    """This user's folder in the checkpoint root, unless it is not theirs alone:
    then the private folder in their Jupyter data directory.

    The same answer every time: a private folder, once made (by the first
    checkpoint written there), is used from then on even if the folder in the
    root is fixed or removed, so that a resume finds what the pause wrote.
    """
    root = checkpoint_root(dir)
    name = folder_name(owner())
    shared = root / name
    private = pause_data_dir() / "checkpoints-private" / folder_name(str(root.absolute())) / name
    problem = folder_problem(shared)
    if problem:
        return UserFolder(private, f"{problem}; this user's checkpoints go to {private} instead")
    if folder_problem(private) is None and private.is_dir():
        return UserFolder(
            private, f"this user's checkpoints are in {private}, since {shared} was refused"
        )
    return UserFolder(shared)


def folder_problem(path: Path, *, private: bool = True) -> str | None:
    """Why ``path`` is not a folder this process may keep private files in (a symlink,
    another user's), or None: it is, or it does not exist yet.  Symlinks are never
    followed.  Unless ``private`` is False (a folder inside a private one), this user's
    own folder that others may read or write is made 0700 first."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # making it will say what is wrong
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link (to {os.readlink(path)}), not a folder of its own"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to {user_name(st.st_uid)}, not to {user_name(os.geteuid())}"
    if private and st.st_mode & 0o077:
        # this user's own folder, opened by a umask, a chmod or a volume's fsGroup
        # (kubelet adds group bits at every mount): its owner makes it private again
        try:
            os.chmod(path, 0o700, follow_symlinks=False)
        except OSError as e:
            mode = stat.S_IMODE(st.st_mode)
            return f"{path} is open to other users (mode {mode:04o}) and could not be closed: {e}"
    return None


def user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def private_open(path, buffering: int = 0):
    """A new file (it must not exist) opened for binary writing, mode 0600 whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(fd, "wb", buffering=buffering)


def folder_name(key: str) -> str:
    """A safe, unique, human-readable folder name for a notebook key.

    Only ``[A-Za-z0-9._-]`` survive, path separators become ``__``, leading dots are
    dropped (no ``..`` or hidden names) and a hash of the full key keeps two keys
    that sanitise alike apart.
    """
    readable = key.replace("\\", "/").strip("/").replace("/", "__")
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", readable)
    readable = re.sub(r"\.{2,}", ".", readable).lstrip(".-_")[:80] or "notebook"
    digest = xxhash.xxh3_64_hexdigest(key.encode("utf-8"))[:10]
    return f"{readable}-{digest}"


def notebook_dir(dir=None, notebook: str | None = None) -> Path:
    """The folder holding all checkpoints of one notebook of this user (may not exist yet)."""
    root = user_root(dir)
    path = root / folder_name(notebook_key(notebook))
    # belt and braces: the name cannot contain a separator, but check anyway
    if path.resolve().parent != root.resolve():
        raise ValueError(f"notebook key {notebook!r} escapes the checkpoint root")
    return path


def is_checkpoint_id(text: str) -> bool:
    return bool(ID_RE.match(text or ""))


def id_sort_key(checkpoint_id: str) -> tuple[str, int]:
    """Sort ids by time, then by same-second suffix (so "-10" sorts after "-2")."""
    m = ID_RE.match(checkpoint_id)
    if not m:
        return (checkpoint_id, 0)
    base = checkpoint_id[:19]
    return (base, int(m.group(1) or 1))


def id_time(checkpoint_id: str) -> float:
    """When a checkpoint was taken, from its id (UTC to the second), in epoch seconds."""
    taken = datetime.strptime(checkpoint_id[:19], "%Y-%m-%dT%H-%M-%S")
    return taken.replace(tzinfo=timezone.utc).timestamp()


def check_id(checkpoint_id: str) -> str:
    """Reject anything that is not a well-formed id before it touches a path."""
    if not is_checkpoint_id(checkpoint_id):
        raise ValueError(
            f"{checkpoint_id!r} is not a checkpoint id (they look like 2026-11-30T18-02-11)"
        )
    return checkpoint_id
