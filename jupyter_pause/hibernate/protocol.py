"""What the server and its hibernate helper say to each other: one JSON object a line,
the server's :class:`Request` on the helper's stdin, the helper's :class:`Reply` (and
first its :class:`Hello`) on its stdout. Both sides build and read these classes only.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

Call = Literal["processes", "free_memory", "state", "lock", "checkpoint", "restore", "unlock"]
CALLS: tuple[str, ...] = Call.__args__


@dataclasses.dataclass(frozen=True)
class Request:
    id: int
    call: Call
    pid: int | None = None
    timeout_ms: int = 0  # lock only

    def line(self) -> bytes:
        return (json.dumps(dataclasses.asdict(self)) + "\n").encode()

    @classmethod
    def parse(cls, line: bytes | str) -> Request:
        data = json.loads(line)
        if data.get("call") not in CALLS:
            raise ValueError(f"unknown call {data.get('call')!r}")
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Reply:
    id: int
    result: Any = None
    #: the driver's name for why the call failed (``CUDA_ERROR_NOT_SUPPORTED``), or
    #: what went wrong in the helper; empty when it succeeded
    error: str = ""

    def line(self) -> bytes:
        return (json.dumps(dataclasses.asdict(self)) + "\n").encode()

    @classmethod
    def parse(cls, line: bytes | str) -> Reply:
        return cls(**json.loads(line))


@dataclasses.dataclass(frozen=True)
class Hello:
    """The helper's first line, once its driver is initialised: None, or why this
    driver cannot hibernate anything."""

    missing: str | None

    def line(self) -> bytes:
        return (json.dumps({"hello": dataclasses.asdict(self)}) + "\n").encode()

    @classmethod
    def parse(cls, line: bytes | str) -> Hello:
        return cls(**json.loads(line)["hello"])
