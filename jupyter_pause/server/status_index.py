"""The rows of ``GET status``, kept between requests: no work per session on the request
path, so that it answers a thousand sessions as fast as ten (``make bench``).

A row changes when its session does, and every change of a session is saved
(``SessionStore.save``, which tells which sessions it changed: ``take_changed``); each
request builds again only the rows of those.  Three kinds of row depend on more than
the session, and are built at every request: a notebook with a kernel now (its
execution state, its last activity, the idle policy's countdown), one whose operation
is running (its step and progress change between saves), and one that offers a saved
state back (it follows the checkpoints that exist).  There are as many of those as
kernels and operations, not as notebooks.
"""

from __future__ import annotations

from typing import Any

from ..lifecycle import Session, SessionStore
from ..status_row import StatusRow
from .explain import status_row
from .ports import Policies


class StatusIndex:
    def __init__(self, store: SessionStore, policies: Policies, staging=None):
        self.store = store
        self.policies = policies
        #: with a bucket, the staging lag of a session's notebook (server/staging.py)
        self.staging = staging
        #: notebook path -> its row, for the sessions whose row only their session makes
        self._rows: dict[str, StatusRow] = {}
        self._can_hibernate: bool | None = None
        self._offering: set[str] | None = None  # the notebooks that offer a saved state

    def offering(self) -> list[str]:
        """The notebooks that offer a saved state back (whose rows need their checkpoints)."""
        self._take_changes()
        return sorted(self._offering)

    def _take_changes(self) -> None:
        sessions = self.store.sessions
        changed = self.store.take_changed()
        if self._offering is None:
            self._offering = {p for p, s in sessions.items() if _offers(s)}
        for path in changed:
            self._rows.pop(path, None)
            if path in sessions and _offers(sessions[path]):
                self._offering.add(path)
            else:
                self._offering.discard(path)

    async def rows(
        self,
        live: dict[str, dict],
        present: dict[str, list[str] | None],
        *,
        can_hibernate: bool,
    ) -> list[dict[str, Any]]:
        """The rows of ``GET status``, by path: every notebook with a lifecycle session or
        a kernel now (``live``: Jupyter's sessions by path); ``present``: the checkpoints
        of the notebooks that offer a saved state back."""
        self._take_changes()
        if can_hibernate != self._can_hibernate:  # every row's ``can`` says it
            self._rows.clear()
            self._can_hibernate = can_hibernate
        sessions = self.store.sessions
        paths = sorted(sessions.keys() | live.keys()) if live else sorted(sessions)
        rows = []
        for path in paths:
            row = self._rows.get(path)
            if row is None:
                session = sessions.get(path) or Session(path=path)
                kernel = (live[path].get("kernel") or {}) if path in live else None
                row = await status_row(
                    path,
                    session,
                    kernel,
                    self.policies,
                    present.get(path),
                    can_hibernate=can_hibernate,
                    staging=self.staging,
                )
                if path in sessions and not _volatile(session, kernel is not None):
                    self._rows[path] = row
            rows.append(row.to_json())
        return rows


def _volatile(session: Session, has_kernel: bool) -> bool:
    """Whether the row of ``session`` may change between two saves of it."""
    return has_kernel or session.kernel_id is not None or session.busy or _offers(session)


def _offers(session: Session) -> bool:
    """Whether the notebook offers the saved state its kernel lost back (explain.py)."""
    return bool(session.lost and session.lost.checkpoint)
