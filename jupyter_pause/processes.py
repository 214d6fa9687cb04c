"""Whether a process is alive, by its id: the one test the store's locks, the GPU
helper and the trial share."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (someone else's counts; a
    zombie, which has ended and waits for its parent to reap it, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except OSError:
        return True
