"""A checkpoint root shared with another Unix user, B, who made this user's folder
first: B's own folder, a symlink to one, or one holding a lock B keeps.  Each is refused (never followed, nothing written into
it), the checkpoints go to this user's private folder, and stay there.

B is a real other uid: the folders are B's (``chown``, so these tests need root)
and B's lock is held by a process running as B.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

import jupyter_pause as jp
from jupyter_pause.engine import checks, durable, paths
from jupyter_pause.engine.errors import UnsafeFolder

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making B's folders needs root")


def unused_uid() -> int:
    """A uid no account has: B."""
    uid = 42420
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


B = unused_uid()


def chown_tree(path: Path, uid: int) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, uid, follow_symlinks=False)


class HeldLock:
    """``flock`` on a file, held by a process running as B until closed."""

    def __init__(self, path: Path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        os.fchown(fd, B, B)
        self.process = subprocess.Popen(
            ["sh", "-c", f"flock -x {fd} && echo held && exec cat"],
            pass_fds=(fd,),
            preexec_fn=lambda: (os.setgid(B), os.setuid(B)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd="/",
        )
        os.close(fd)
        assert self.process.stdout.readline() == b"held\n"

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


def plant(case: str, shared: Path, elsewhere: Path, notebook: str) -> Path:
    """B's doing; returns the folder B controls (which must stay as B left it)."""
    if case == "symlink":
        elsewhere.mkdir(parents=True)
        chown_tree(elsewhere, B)
        shared.parent.mkdir(parents=True, exist_ok=True)
        shared.symlink_to(elsewhere)
        os.chown(shared, B, B, follow_symlinks=False)
        return elsewhere
    shared.mkdir(parents=True)
    if case == "lock":
        (shared / paths.folder_name(notebook)).mkdir()
    chown_tree(shared, B)
    return shared


CASES = {
    "directory": "belongs to uid",
    "symlink": "is a symbolic link",
    "lock": "belongs to uid",
}


@needs_root
@pytest.mark.parametrize("case", CASES)
def test_a_user_folder_made_by_another_user_is_refused_and_the_private_one_used(case, ck, tmp_path):
    root = Path(ck["dir"])
    shared = root / paths.folder_name(paths.owner())
    theirs = plant(case, shared, tmp_path / "b-home" / "ck", ck["notebook"])
    lock = (
        HeldLock(shared / paths.folder_name(ck["notebook"]) / ".lock") if case == "lock" else None
    )
    before = sorted(p.name for p in theirs.rglob("*"))
    try:
        folder = paths.user_folder(ck["dir"])
        private = paths.pause_data_dir() / "checkpoints-private"
        assert folder.path.is_relative_to(private) and folder.path.name == shared.name
        assert CASES[case] in folder.refused and str(folder.path) in folder.refused

        info = jp.checkpoint(namespace={"x": 41}, **ck)  # B's lock: not waited for
        assert Path(info.path).is_relative_to(folder.path)
    finally:
        if lock:
            lock.close()
    assert sorted(p.name for p in theirs.rglob("*")) == before  # nothing of ours in B's
    assert stat_mode(folder.path) == 0o700
    got: dict = {}
    jp.restore(namespace=got, progress=False, **ck)
    assert got["x"] == 41


@needs_root
def test_once_fallen_back_the_checkpoints_stay_private_when_bs_folder_goes(ck):
    shared = Path(ck["dir"]) / paths.folder_name(paths.owner())
    plant("directory", shared, Path("/nonexistent"), ck["notebook"])
    info = jp.checkpoint(namespace={"x": 7}, **ck)
    shutil.rmtree(shared)  # B removes their folder (or an admin does)
    folder = paths.user_folder(ck["dir"])
    assert Path(info.path).is_relative_to(folder.path)
    assert "since" in folder.refused and str(shared) in folder.refused
    got: dict = {}
    jp.restore(namespace=got, progress=False, **ck)
    assert got["x"] == 7
    assert not shared.exists()


def test_a_folder_of_this_users_own_or_none_yet_is_used(ck):
    shared = Path(ck["dir"]) / paths.folder_name(paths.owner())
    assert paths.user_folder(ck["dir"]) == paths.UserFolder(shared)
    info = jp.checkpoint(namespace={"x": 1}, **ck)
    assert Path(info.path).is_relative_to(shared)
    assert paths.user_folder(ck["dir"]) == paths.UserFolder(shared)


def test_the_lock_is_never_a_symlink(ck, nbdir, tmp_path):
    durable.makedirs(nbdir)
    target = tmp_path / "elsewhere"
    target.write_text("")
    (nbdir / ".lock").symlink_to(target)
    with pytest.raises(UnsafeFolder, match="is a symbolic link"):
        jp.checkpoint(namespace={"x": 1}, **ck)


@pytest.mark.parametrize("mode", [0o777, 0o2770, 0o755])
def test_this_users_own_folder_opened_to_others_is_closed_and_kept(ck, mode):
    """A umask, a chmod or a volume's fsGroup (group bits added at every mount) opened
    it: its checkpoints stay where they are, and the folder is private again."""
    shared = Path(ck["dir"]) / paths.folder_name(paths.owner())
    info = jp.checkpoint(namespace={"x": 3}, **ck)
    os.chmod(shared, mode)
    assert paths.user_folder(ck["dir"]) == paths.UserFolder(shared)
    assert stat_mode(shared) == 0o700
    got: dict = {}
    jp.restore(namespace=got, progress=False, **ck)
    assert got["x"] == 3 and Path(info.path).is_relative_to(shared)


@needs_root
@pytest.mark.parametrize("what", ["folder", "lock"])
def test_a_notebook_folder_or_lock_of_another_user_is_refused(ck, nbdir, what):
    """Inside this user's own folder, should one be there (made while it was open)."""
    durable.makedirs(nbdir)
    (nbdir / ".lock").touch()
    os.chown(nbdir / ".lock" if what == "lock" else nbdir, B, B)
    with pytest.raises(UnsafeFolder, match="belongs to uid"), checks.locked(nbdir, timeout=0):
        pass


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777
