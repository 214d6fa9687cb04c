"""The objects a user asked to have always checkpointed: ``track``, ``untrack``, ``tracked``.

Kept apart from the engine's API so that both the checkpoint (which saves them) and the
lazy restore (which hands them back as they load) use one registry without importing
each other.
"""

from __future__ import annotations

import keyword
from typing import Any

_TRACKED: dict[str, Any] = {}


def track(obj: Any, name: str) -> Any:
    """Register ``obj`` under ``name``: it is always checkpointed, and a checkpoint fails
    (leaving the previous one intact) if it cannot be saved. Returns ``obj``."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"track() needs a valid Python identifier as name, got {name!r}")
    _TRACKED[name] = obj
    return obj


def untrack(name: str) -> None:
    """Forget a tracked object (no error if it was not tracked)."""
    _TRACKED.pop(name, None)


def tracked() -> dict[str, Any]:
    """A copy of the tracked objects, name -> object."""
    return dict(_TRACKED)
