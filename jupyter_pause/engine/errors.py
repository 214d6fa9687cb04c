"""Every error the checkpoint engine raises, in one place.

The server, the magics and user code all catch these, so each class keeps a
stable name and each message says what went wrong *and what to do next*: a
user who paused a notebook last night must be able to act on the text alone.
"""

from __future__ import annotations

from .paths import ENV_DIR


class CheckpointError(Exception):
    """Base class of all jupyter-pause engine errors."""


class CheckpointNotFound(CheckpointError):
    """The requested checkpoint (or any checkpoint at all) does not exist."""

    def __init__(self, checkpoint_id: str | None, folder: str):
        self.checkpoint_id = checkpoint_id
        self.folder = folder
        if checkpoint_id:
            msg = (
                f"no checkpoint {checkpoint_id!r} in {folder}. "
                "List the available ones with %checkpoint --list (or jupyter_pause.list_checkpoints())."
            )
        else:
            msg = (
                f"no checkpoint found in {folder}. Create one with %checkpoint first, "
                "or pass --dir / notebook= if it was saved elsewhere."
            )
        super().__init__(msg)


class CorruptCheckpoint(CheckpointError):
    """A file of a checkpoint does not match the hash recorded in its manifest."""

    def __init__(self, name: str, file: str, detail: str = ""):
        self.name = name
        self.file = file
        self.detail = detail
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"checkpoint data of {name!r} is corrupt: {file} does not match its recorded hash{extra}. "
            "Nothing was loaded. Restore an older checkpoint (%checkpoint --list), or restore the "
            "other names only."
        )


class UntrustedCheckpoint(CheckpointError):
    """The checkpoint is not provably this user's checkpoint of this notebook.

    ``kind`` says why, for code that acts on it: ``unsigned``, ``other-key`` (signed
    with another key, e.g. one regenerated since), ``no-key`` (this user has no key),
    ``other-notebook`` (copied from another notebook's folder: a replay),
    ``other-checkpoint`` (another checkpoint of this notebook copied over this one: a
    rollback), ``other-owner``, ``tampered`` (this key's signature, altered bytes)."""

    def __init__(self, path: str, reason: str, kind: str = "tampered", key_id: str = ""):
        self.path = path
        self.reason = reason
        self.kind = kind
        #: the fingerprint of the key it was signed with (``other-key``, ``no-key``)
        self.key_id = key_id
        if kind in ("other-key", "no-key"):
            advice = (
                "It is not damaged: only the key is missing here. A checkpoint contains "
                "pickled code, so only what verifies with this user's key is loaded."
            )
        else:
            advice = (
                "A checkpoint contains pickled code, so only checkpoints signed with this "
                "user's key are loaded. If you know where it came from (e.g. you copied it "
                "from another machine), pass trust=True (or %restore --trust)."
            )
        super().__init__(f"refusing to load {path}: {reason}. {advice}")

    @property
    def foreign(self) -> bool:
        """Signed with a key this server does not have: another node's or user's, not a
        damaged or altered checkpoint (it is never offered for deletion)."""
        return self.kind in ("other-key", "no-key")


class UnsafeFolder(CheckpointError):
    """A checkpoint folder another user could read or change (theirs, a symlink, open
    to others): nothing is written to it or read from it."""

    def __init__(self, problem: str):
        self.problem = problem
        super().__init__(
            f"refusing to use the checkpoint folder: {problem}. Another user could read or "
            "replace the checkpoints there. Remove it (or make it yours alone, mode 0700)."
        )


class ForeignCheckpoint(CheckpointError):
    """A checkpoint that is not provably this user's is never deleted (nor expired): on a
    checkpoint root several servers share, it is another's."""

    def __init__(self, path: str, reason: str, checkpoint_id: str, root: str, notebook: str):
        self.path = path
        self.reason = reason
        super().__init__(
            f"refusing to delete {path}: {reason}, so it is not this user's to delete (on a "
            "shared checkpoint root it may be another server's). It was not deleted. If you "
            "know it is no one's any more, remove it with: jupyter pause delete "
            f"{notebook!r} {checkpoint_id} --dir {root!r} --force-foreign"
        )


class KeyProblem(CheckpointError):
    """The signing key file exists but cannot be used (empty, unreadable)."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(
            f"the checkpoint signing key {self.path} is unusable: {problem}. Nothing was "
            "written or loaded. Restore that file from a backup (or fix its permissions: it "
            "must be readable by you, mode 0600); only if it is lost for good, delete it: a new "
            "key is then created, and older checkpoints load only with trust=True."
        )


class UnsavableObject(CheckpointError):
    """An object that must be saved (a tracked one, or one named explicitly) cannot be saved."""

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason
        super().__init__(
            f"cannot save {name!r}: {reason}. The previous checkpoint is unchanged. Untrack it "
            f"(jupyter_pause.untrack({name!r})), leave it out of the names, or turn it into "
            "something picklable (e.g. save its state_dict)."
        )


class UnknownName(CheckpointError):
    """A name given to checkpoint/restore is neither in the namespace nor in the checkpoint."""

    def __init__(self, names, where: str, available=()):
        self.names = list(names)
        avail = ", ".join(sorted(available)[:20]) or "nothing"
        super().__init__(
            f"unknown name(s) {', '.join(map(repr, self.names))} in {where}. Available: {avail}."
        )


class RestoreFailed(CheckpointError):
    """Objects were found and verified but could not be rebuilt (e.g. their class is gone)."""

    def __init__(self, failures: dict[str, str]):
        self.failures = dict(failures)
        lines = "; ".join(f"{k}: {v}" for k, v in self.failures.items())
        super().__init__(
            f"could not restore {lines}. Nothing was changed in the namespace. Define or install "
            "what is missing and restore again, or restore the other names only."
        )


class DeviceUnavailable(CheckpointError):
    """A tensor was saved on a device this machine does not have."""

    def __init__(self, name: str, device: str, detail: str = ""):
        self.name = name
        self.device = device
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"{name!r} was saved on {device}, which is not available here{extra}. Map it with "
            f"device='cpu' or device='{device}=cuda:0' (%restore --device cpu)."
        )


class DiskError(CheckpointError):
    """Writing the checkpoint failed (full disk, no permission, ...); nothing was committed."""

    def __init__(self, path: str, error: OSError):
        self.path = path
        self.error = error
        import errno

        if error.errno == errno.ENOSPC:
            hint = (
                "the disk is full: free space there, keep fewer checkpoints (keep=1), or point "
                f"{ENV_DIR} / --dir at a bigger disk"
            )
        elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR):
            hint = f"the directory is not writable: choose another one with --dir or {ENV_DIR}"
        else:
            hint = "check the disk and the directory, then try again"
        super().__init__(
            f"could not write checkpoint at {path}: {error.strerror or error}; {hint}. "
            "The previous checkpoint is intact."
        )


class StoreBusy(CheckpointError):
    """Another process holds the notebook's checkpoint lock (a checkpoint being written).

    The server waits only briefly for the lock and then says so, rather than
    queueing a request behind a write that may take minutes.
    """

    def __init__(self, lock: str, waited: float):
        self.lock = lock
        super().__init__(
            f"another process has held {lock} for {waited:.0f} s: a checkpoint of this "
            "notebook is being written (by %checkpoint in its kernel?). Try again when it "
            "finishes, or stop that kernel."
        )


class AutosaveRefused(CheckpointError):
    """An autosave would push out the notebook's newest saved state, an autosave that
    another kernel process wrote (one that died or stopped) and this one never restored.
    Nothing was written."""

    def __init__(self, newest: str):
        self.newest = newest
        super().__init__(
            f"autosave skipped: the notebook's newest saved state, autosave {newest}, comes "
            "from another kernel (one that stopped or died) and this kernel has not restored "
            "it, so saving this kernel would replace it. Restore it (%restore), or checkpoint "
            "this kernel by hand (a checkpoint you ask for is kept beside it); autosave goes "
            "on after either. Nothing was written."
        )


class NotEnoughMemory(CheckpointError):
    """A checkpoint may need more memory than this process may still use (its memory
    cgroup, rlimits or the machine): refused before anything was written."""

    def __init__(self, needed: int, free: int, limit: str):
        self.needed = needed
        self.free = free
        self.limit = limit
        mib = 1 << 20
        super().__init__(
            f"not enough memory to checkpoint: needs ~{needed / mib:.0f} MiB more, "
            f"{free / mib:.0f} MiB free under {limit}; free memory (del large variables you "
            "no longer need) or raise the limit. Nothing was written; the kernel and its "
            "variables are as they were."
        )


class BundleRefused(CheckpointError):
    """``jupyter pause import`` will not bring this bundle in; nothing was written.

    ``kind`` says why: ``not-a-bundle``, ``unsafe-entry`` (a name that is absolute, has
    ``..`` or is not one a bundle holds), ``damaged`` (a file does not match its hash),
    ``tampered`` (signed with this user's key, altered since), ``other-key`` (signed with
    another key: ``--trust`` accepts it), ``notebook-exists``."""

    def __init__(self, path: str, reason: str, kind: str):
        self.path = path
        self.reason = reason
        self.kind = kind
        super().__init__(f"refusing to import {path}: {reason}. Nothing was imported.")


class RemoteStoreError(CheckpointError):
    """The bucket behind the checkpoint folder could not be reached, read or written
    (engine/remote.py): credentials, a missing bucket, the store down, its quota."""

    def __init__(self, url: str, action: str, detail: str):
        self.url = url
        self.action = action
        self.detail = detail
        # the store and the cause first: a notice has room for one line
        super().__init__(
            f"the checkpoint store {url}: {detail} (could not {action}). A checkpoint "
            "that is not in the bucket is kept in the local cache; try again once the "
            "store answers."
        )
