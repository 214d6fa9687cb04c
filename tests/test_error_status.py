"""The one translator answers each error of the API with the HTTP status of its type."""

from __future__ import annotations

import pytest

from jupyter_pause.engine.errors import (
    CheckpointError,
    CheckpointNotFound,
    ForeignCheckpoint,
    RemoteStoreError,
    StoreBusy,
)
from jupyter_pause.lifecycle import Operation, OperationInProgress
from jupyter_pause.server.errors import Conflict, NotFound, PauseError, Unavailable
from jupyter_pause.server.handlers import translate_errors


class Answering:
    """A handler's stand-in: what ``send_failure`` was asked to answer."""

    def __init__(self, error: Exception):
        self.error = error
        self.answers: list[tuple[int, str, dict]] = []

    def send_failure(self, status: int, message: str, **extra) -> None:
        self.answers.append((status, message, extra))

    @translate_errors
    async def get(self):
        raise self.error


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (PauseError("'path' must be a non-empty string"), 400),
        (NotFound("no notebook at 'a.ipynb'"), 404),
        (Conflict("'a.ipynb' is paused; only a running notebook pauses"), 409),
        (Unavailable("could not record the schedule"), 503),
        (CheckpointNotFound("2026-11-30T18-02-11", "/nb"), 404),
        (StoreBusy("/nb/.lock", 2.0), 409),
        (ForeignCheckpoint("/c", "another's", "2026-11-30T18-02-11", "/r", "a.ipynb"), 403),
        (RemoteStoreError("s3://b", "read", "no answer"), 503),
        (CheckpointError("corrupt"), 400),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
async def test_each_error_is_answered_with_the_status_of_its_type(error, status):
    handler = Answering(error)
    await handler.get()
    assert handler.answers == [(status, str(error), {})]


async def test_an_operation_in_progress_is_a_conflict_that_names_the_operation():
    op = Operation(kind="pause", path="a.ipynb")
    handler = Answering(OperationInProgress("a.ipynb", op))
    await handler.get()
    ((status, message, extra),) = handler.answers
    assert status == 409 and op.id in message
    assert extra == {"operation": op.to_json()}


async def test_an_error_of_no_known_type_is_not_translated():
    handler = Answering(KeyError("x"))
    with pytest.raises(KeyError):
        await handler.get()
