"""The ports through which the manager asks the policies that stand above it.

The idle watcher and the resume scheduler are built after the manager (they act
through it), so app.py hands the manager these callables at construction; the manager
never reaches for the policies, and nothing is patched onto it afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from ..idle_policy import WorkloadClass
from ..lifecycle import Session


@dataclasses.dataclass(frozen=True)
class Policies:
    """What the manager asks of the policies above it, handed in at construction by
    app.py (None where that policy is off); the manager never reaches for them."""

    #: ``async (session) -> (WorkloadClass, source)``: the policy a status row shows
    workload_class: Callable[[Session], Awaitable[tuple[WorkloadClass, str]]] | None = None
    #: ``async (session) -> dict | None``: the auto_pause field of a status row
    #: (the idle watcher's, when auto-pause is on)
    auto_pause_status: Callable[[Session], Awaitable[dict | None]] | None = None
    #: ``async (session)``, run when a notebook has just been paused (the predictor)
    after_pause: Callable[[Session], Awaitable[None]] | None = None
