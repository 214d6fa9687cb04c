"""The errors of the server's operations, shared by the manager, its collaborators and
the handlers (whose one translator, ``handlers.translate_errors``, answers each with
the HTTP status of its type).

A request that cannot be honoured raises :class:`PauseError` (a malformed request,
``400``) or one of its kinds: :class:`NotFound` (``404``, nothing there),
:class:`Conflict` (``409``, not now: the notebook's state or an operation under way
does not allow it), :class:`Unavailable` (``503``, a store or platform that could not
be written or reached).  A second operation on a busy notebook raises
:class:`~jupyter_pause.lifecycle.OperationInProgress` (``409``, naming it).
"""

from __future__ import annotations


class PauseError(Exception):
    """A request that cannot be honoured as it is."""


class NotFound(PauseError):
    """No notebook, checkpoint, operation or schedule by that name."""


class Conflict(PauseError):
    """Not now: the notebook's state, or an operation under way, does not allow it."""


class Unavailable(PauseError):
    """A store or platform that could not be written or reached: not the request's fault."""
