"""The ledger: an append-only, typed record of what happened when.

Every lifecycle step of every notebook session is written here as one row, so
that accounting (``jupyter pause report``) can answer questions nobody thought
of at pause time: when did work end, when was the accelerator released, how
long did the returning user wait.  SQLite is used because it is in the standard
library, survives server restarts, and tolerates a second reader (the CLI)
while the server writes.

The event types are a closed set (:class:`EventType`); a typo in a type name is
an error at the call site, not a silently unreportable row.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from .clock import SYSTEM, Clock
from .engine import durable


class EventType(str, Enum):
    """What a ledger row records.  Values are stable: reports depend on them."""

    # work and its end
    CELL_EXECUTED = "cell-executed"  # a cell finished; ``data.first_after_resume`` marks the first
    ACTIVITY_ENDED = "activity-ended"  # the last cell before a pause finished (time = that moment)
    # pause
    PAUSE_REQUESTED = "pause-requested"  # data: auto (bool), force (bool), reason
    CHECKPOINT_STARTED = "checkpoint-started"
    CHECKPOINT_FINISHED = (
        "checkpoint-finished"  # data: checkpoint_id, bytes, bytes_written, seconds
    )
    CHECKPOINT_FAILED = "checkpoint-failed"  # data: error
    CHECKPOINT_DELETED = "checkpoint-deleted"  # data: checkpoint_id, bytes
    KERNEL_INTERRUPTED = "kernel-interrupted"  # a forced pause interrupted a busy kernel
    KERNEL_STOPPED = "kernel-stopped"
    SNAPSHOT_REQUESTED = "snapshot-requested"  # Kubernetes backends; data: name
    SNAPSHOT_READY = "snapshot-ready"  # data: name, bytes
    SNAPSHOT_FAILED = "snapshot-failed"  # data: error
    SNAPSHOT_DELETED = "snapshot-deleted"  # data: name, bytes
    WORKSPACE_STOPPED = "workspace-stopped"  # the pod / workspace is gone
    ACCELERATOR_RELEASED = "accelerator-released"  # data: gpus, gpu_model; Kubernetes: node
    # what became of the released node (server-wide, Kubernetes); time = the span's start;
    # data: backends/kubernetes/nodes.py CapacitySpan (outcome reused|scaled-down|idle|kept-up,
    # start, end, gpus, share, node, accelerator, by_namespace, by_class)
    CAPACITY_OUTCOME = "capacity-outcome"
    PAUSED = "paused"
    # resume
    RESUME_REQUESTED = "resume-requested"
    WAITING_FOR_CAPACITY = "waiting-for-capacity"  # data: reason
    CAPACITY_ACQUIRED = "capacity-acquired"
    KERNEL_STARTED = "kernel-started"
    RESTORE_STARTED = "restore-started"
    RESTORE_FINISHED = (
        "restore-finished"  # data: restored_from (checkpoint|snapshot), bytes, seconds
    )
    RESTORE_FAILED = "restore-failed"  # data: error
    FIRST_CELL_RUNNABLE = "first-cell-runnable"  # the session is ready
    # scheduled and predicted resume
    RESUME_SCHEDULED = "resume-scheduled"  # data: at, kind (scheduled|predicted), confidence, by
    RESUME_SCHEDULE_CANCELLED = "resume-schedule-cancelled"  # data: at, kind, reason
    SCHEDULED_RESUME_STARTED = "scheduled-resume-started"  # data: at, kind; a resume follows
    PREDICTED_RESUME_UNUSED = "predicted-resume-unused"  # data: held_seconds; a pause follows
    # hibernate in place (server/hibernate.py): the kernel's process stays, its GPU memory
    # goes to host memory and back
    # data: gpu_bytes (held, per NVML), bytes_freed (held less what NVML counts after),
    # seconds (lock + checkpoint), gpus ({GPU index: bytes}), auto (bool)
    GPU_HIBERNATED = "gpu-hibernated"
    # data: seconds (restore + unlock), waited (from the wake's request, a cell's execute
    # request when a cell woke it, until a cell could run), gpu_bytes, by (cell|user|pause|
    # checkpoint)
    GPU_WOKEN = "gpu-woken"
    # idle policy
    AUTO_PAUSE_WARNED = "auto-pause-warned"  # data: seconds_left, workload_class
    AUTO_PAUSE_POSTPONED = "auto-pause-postponed"  # data: until
    # anything else that went wrong
    OPERATION_FAILED = "operation-failed"  # data: operation, error
    NOT_SAVED = "not-saved"  # the server stopped before it was saved; data: why, error
    STATE_CHANGED = "state-changed"  # data: from, to


@dataclass(frozen=True)
class LedgerEvent:
    """One row of the ledger."""

    type: EventType
    time: float  # seconds since the epoch (UTC)
    path: str = ""  # the notebook's server-relative path ("" for server-wide events)
    kernel_id: str = ""
    operation_id: str = ""
    workload_class: str = ""
    user: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type.value,
            "time": self.time,
            "path": self.path,
            "kernel_id": self.kernel_id,
            "operation_id": self.operation_id,
            "workload_class": self.workload_class,
            "user": self.user,
            "data": self.data,
        }


_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    type TEXT NOT NULL,
    path TEXT NOT NULL DEFAULT '',
    kernel_id TEXT NOT NULL DEFAULT '',
    operation_id TEXT NOT NULL DEFAULT '',
    workload_class TEXT NOT NULL DEFAULT '',
    user TEXT NOT NULL DEFAULT '',
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_time ON events (time);
CREATE INDEX IF NOT EXISTS events_path ON events (path, time);
"""


class Ledger:
    """Append-only event store backed by one SQLite file (or ``:memory:``).

    ``listeners`` are called with each recorded event; the server uses one to
    mirror events onto Jupyter's event bus.
    """

    def __init__(self, path: str | Path = ":memory:", user: str = "", *, clock: Clock = SYSTEM):
        self.path = str(path)
        self.clock = clock
        if self.path != ":memory:":
            durable.makedirs(Path(self.path).parent)
            # who used which notebook when is private: 0600 whatever the umask (SQLite
            # gives its -wal and -shm files the database file's mode)
            try:
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass
            else:  # a new database: its name on disk before anything is recorded in it
                durable.fsync_dir(Path(self.path).parent)
        self.user = user
        self.listeners: list[Any] = []
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def record(
        self,
        type: EventType | str,
        *,
        path: str = "",
        kernel_id: str = "",
        operation_id: str = "",
        workload_class: str = "",
        time_: float | None = None,
        **data: Any,
    ) -> LedgerEvent:
        """Append one event and return it (with its row id)."""
        event = LedgerEvent(
            type=EventType(type),
            time=self.clock.time() if time_ is None else time_,
            path=path,
            kernel_id=kernel_id or "",
            operation_id=operation_id,
            workload_class=workload_class,
            user=self.user,
            data=data,
        )
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO events (time, type, path, kernel_id, operation_id, workload_class,"
                " user, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    event.time,
                    event.type.value,
                    event.path,
                    event.kernel_id,
                    event.operation_id,
                    event.workload_class,
                    event.user,
                    json.dumps(data, default=str),
                ),
            )
        event = LedgerEvent(**{**event.__dict__, "id": cursor.lastrowid})
        for listener in self.listeners:
            listener(event)
        return event

    def events(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        path: str | None = None,
        types: Iterable[EventType | str] | None = None,
        after_id: int | None = None,
    ) -> list[LedgerEvent]:
        """Events in time order, filtered."""
        return list(
            self._query(since=since, until=until, path=path, types=types, after_id=after_id)
        )

    def _query(self, *, since, until, path, types, after_id) -> Iterator[LedgerEvent]:
        clauses, params = [], []
        asked = (
            ("time >= ?", since),
            ("time < ?", until),
            ("path = ?", path),
            ("id > ?", after_id),
        )
        for clause, value in asked:
            if value is not None:
                clauses.append(clause)
                params.append(value)
        if types is not None:
            names = [EventType(t).value for t in types]
            clauses.append(f"type IN ({','.join('?' * len(names))})")
            params.extend(names)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, time, type, path, kernel_id, operation_id, workload_class, user, data"
                f" FROM events {where} ORDER BY time, id",
                params,
            ).fetchall()
        for row in rows:
            yield LedgerEvent(
                id=row[0],
                time=row[1],
                type=EventType(row[2]),
                path=row[3],
                kernel_id=row[4],
                operation_id=row[5],
                workload_class=row[6],
                user=row[7],
                data=json.loads(row[8]),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()
