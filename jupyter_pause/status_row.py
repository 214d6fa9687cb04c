"""One row of ``GET status``: a notebook's lifecycle session, with what a person wants
to know of it now (server/explain.py builds it; server/status_index.py keeps it until its
session changes).

The JSON is the session's own (less its pause nonce and its operation's timeline), then
the fields below in this order: the REST API's clients (the frontend, the OpenAPI
description, the browser tests) read it as it always was.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StatusRow:
    #: the notebook's lifecycle session as JSON, less what no client is told
    session: dict[str, Any]
    #: its kernel now (Jupyter's), else the session's
    kernel_id: str | None
    #: Jupyter's ``execution_state`` and ``last_activity`` of that kernel, if it runs
    execution_state: str | None
    last_activity: Any
    #: when its state was last saved (a pause, a checkpoint, an autosave)
    last_saved: float | None
    #: who paused it, which policy applies, what it offers back (``explain``)
    explained: dict[str, Any]
    #: with a bucket: what the bucket lacks of its state (server/staging.py)
    staging: dict[str, Any] | None
    #: the operations allowed now: {pause, resume, checkpoint, hibernate, wake}
    can: dict[str, bool]
    #: the idle policy's countdown, where auto-pause is on (else not in the JSON)
    auto_pause: dict[str, Any] | None = None
    auto_pause_on: bool = field(default=False)

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        row = dict(self.session)
        row["kernel_id"] = self.kernel_id
        row["execution_state"] = self.execution_state
        row["last_activity"] = self.last_activity
        row["last_saved"] = self.last_saved
        row.update(self.explained)
        row["staging"] = self.staging
        row["can"] = self.can
        if self.auto_pause_on:
            row["auto_pause"] = self.auto_pause
        return row

    def to_json(self) -> dict[str, Any]:
        """The row as ``GET status`` answers it (built once: a kept row costs a request
        nothing)."""
        return self._json
