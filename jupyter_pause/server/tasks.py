"""This process's operations under way: each runs as an asyncio task, under the owner
its leases name (server/recovery.py tells a live owner's operation from an abandoned
one by them)."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Coroutine
from typing import Any


class Tasks:
    def __init__(self, owner: str | None = None):
        #: the owner written into the lease of every operation this process runs
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: every task started here and not yet done (operations and their helpers)
        self.all: set[asyncio.Task] = set()
        self._running: dict[str, asyncio.Task] = {}  # operation id -> its task

    def spawn(self, coro: Coroutine[Any, Any, Any], operation_id: str | None = None) -> None:
        """Run ``coro`` as a task; as the task of operation ``operation_id``, if given."""
        task = asyncio.ensure_future(coro)
        self.all.add(task)
        task.add_done_callback(self.all.discard)
        if operation_id is not None:
            self._running[operation_id] = task
            task.add_done_callback(lambda _: self._running.pop(operation_id, None))

    def of(self, operation_id: str) -> asyncio.Task | None:
        """The task that runs the operation in this process, if it runs here."""
        return self._running.get(operation_id)

    def cancel(self) -> None:
        for task in list(self.all):
            task.cancel()
