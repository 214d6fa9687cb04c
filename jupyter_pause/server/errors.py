"""The errors of the server's operations, shared by the manager, its collaborators and
the handlers (which turn them into HTTP answers).

A request that cannot be honoured raises :class:`PauseError` with the HTTP status that
says why: ``400`` a malformed request, ``404`` nothing there, ``409`` not now (the
notebook's state or an operation under way does not allow it), ``503`` a store or
platform that could not be written or reached.  A second operation on a busy notebook
raises :class:`~jupyter_pause.lifecycle.OperationInProgress` (``409``, naming it).
"""

from __future__ import annotations


class PauseError(Exception):
    """A request that cannot be honoured; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status
