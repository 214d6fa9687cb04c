"""Files and folders that survive a power cut.

A new folder, a new file or a rename is a change to its parent folder's entries, and
the operating system may keep that change in memory for a while after the call
returned; fsyncing the file itself does not write it. A power cut then loses a
checkpoint that was reported committed, or the signing key. So whatever must survive
is followed by an fsync of its parent folder before anything reports success:

- :func:`makedirs`: ``mkdir -p`` of private folders (0700 whatever the umask; folders
  that exist are left alone: a shared root is the administrator's to set up), each
  level it creates fsynced in its parent;
- :func:`write_file`: the atomic, durable way to put a whole file in place: a temp
  file beside it, written and fsynced, renamed over it (or, with ``replace=False``,
  linked to its name, which fails if the name exists), then the folder fsynced.

This module imports nothing of the package: the server's own files (sessions, the
ledger) use it too.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def fsync_dir(path: str | os.PathLike) -> None:
    """Write a folder's entries (new, renamed or removed names in it) to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs(path: str | os.PathLike, mode: int = 0o700) -> None:
    """``mkdir -p`` whose new folders are ``mode`` whatever the umask, and each in its
    parent's entries on disk before it returns."""
    path = Path(path)
    missing = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for p in reversed(missing):
        try:
            os.mkdir(p, mode)
            os.chmod(p, mode)  # a umask cannot add bits, but be explicit
        except FileExistsError:
            pass  # made by someone else just now: it may not be on disk yet either
        fsync_dir(p.parent)


def write_file(path: str | os.PathLike, data: bytes, *, replace: bool = True) -> None:
    """Put ``data`` at ``path`` (mode 0600) so that after a crash or power cut the path
    holds either its old content or all of ``data``, never part of it, and the new
    content stays once this returns. ``replace=False`` never overwrites: it raises
    FileExistsError when the name exists (a first writer wins, and its file is whole
    from the moment it has a name)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def private_dir(path: str | os.PathLike) -> None:
    """Make the folder of this user's private files (the ledger, the sessions, the
    signing key) exist and be 0700, also if an older version or the umask made it
    readable by others."""
    makedirs(path)
    os.chmod(path, 0o700)
