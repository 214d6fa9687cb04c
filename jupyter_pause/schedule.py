"""Scheduled resumes: when a paused notebook should come back by itself.

A user who pauses at 18:00 and knows they start at 9:00 can ask for the
notebook to be resumed at 08:45 (``%pause --resume-at 08:45``, the Pause
dialog, ``jupyter pause schedule``), so that it is ``ready`` when they sit
down and nobody queues for a GPU at 9:00.  The predictor
(:mod:`jupyter_pause.prediction`) sets the same kind of schedule, marked
``predicted``.

This module is pure: it parses the times people write and describes a
schedule.  The server keeps one on each paused session
(:attr:`jupyter_pause.lifecycle.Session.schedule`) and fires it
(:mod:`jupyter_pause.server.scheduler`); on Kubernetes and JupyterHub a
schedule is also kept outside the paused server, by whatever starts it again.
"""

from __future__ import annotations

import math
import re
import reprlib
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

#: how far ahead a schedule may be set: further than this is almost surely a typo
MAX_AHEAD = 31 * 86400.0
KINDS = ("scheduled", "predicted")

_CLOCK = re.compile(
    r"^(?:(today|tomorrow|mon|tue|wed|thu|fri|sat|sun)[a-z]*\s+)?(\d{1,2}):(\d{2})(?::(\d{2}))?$"
)
_RELATIVE = re.compile(r"^(?:in\s+|\+)(\d+(?:\.\d+)?)\s*(s|m|min|h)$")
_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class ScheduleError(ValueError):
    """A resume time that cannot be used; the message says what is accepted."""


@dataclass(frozen=True)
class ResumeSchedule:
    """One paused notebook's planned resume.

    ``at``: epoch seconds; ``kind``: ``scheduled`` (a person asked) or
    ``predicted`` (the predictor set it); ``by``: who set it; ``set_at``:
    when; ``confidence``: the prediction's, for ``predicted``.
    """

    at: float
    kind: str = "scheduled"
    by: str = "user"
    set_at: float = 0.0
    confidence: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ResumeSchedule | None:
        if not data:
            return None
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})

    def due(self, now: float) -> bool:
        return self.at <= now


def parse_resume_at(value: Any, now: float, tz: tzinfo | None = None) -> float:
    """Epoch seconds for a resume time as people write it.

    Accepted: epoch seconds (a number); an ISO 8601 date and time (without an
    offset it is local time in ``tz``); ``08:45`` or ``08:45:30`` (the next
    such time from ``now``); ``tomorrow 08:45``; a weekday and a time (``monday 08:45``, the
    next such day, today included if still ahead); ``in 2h`` / ``+30m``.
    The time must be in the future and at most 31 days ahead; anything else,
    a date this machine's clock cannot convert (``0001-01-01``) or a number
    no float holds (``10**400``) included, is a :class:`ScheduleError` that
    says so.
    """
    if isinstance(value, bool) or value is None:
        raise ScheduleError(_usage(value))
    try:
        if isinstance(value, (int, float)):
            at = float(value)
        elif isinstance(value, str):
            at = _parse_text(value.strip().lower(), now, tz)
        else:
            raise ScheduleError(_usage(value))
    except ScheduleError:
        raise
    except (OverflowError, ValueError, OSError):  # beyond what a float or a calendar holds
        raise ScheduleError(
            f"the resume time {reprlib.repr(value)} is out of range: "
            "it must be within the next 31 days"
        ) from None
    if not math.isfinite(at):
        raise ScheduleError(_usage(value))
    if at <= now:
        raise ScheduleError(f"the resume time {value!r} is not in the future")
    if at - now > MAX_AHEAD:
        raise ScheduleError(f"the resume time {value!r} is more than 31 days ahead")
    return at


def _parse_text(text: str, now: float, tz: tzinfo | None) -> float:
    local_now = datetime.fromtimestamp(now, tz)  # naive local time when tz is None
    if m := _RELATIVE.match(text):
        amount, unit = float(m[1]), m[2]
        return now + amount * {"s": 1, "m": 60, "min": 60, "h": 3600}[unit]
    if m := _CLOCK.match(text):
        day_word, hour, minute, second = m[1], int(m[2]), int(m[3]), int(m[4] or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise ScheduleError(_usage(text))
        today = local_now.date()
        if day_word == "today":
            candidates = [today]
        elif day_word == "tomorrow":
            candidates = [today + timedelta(days=1)]
        elif day_word:
            ahead = (_WEEKDAYS.index(day_word) - today.weekday()) % 7
            candidates = [today + timedelta(days=ahead), today + timedelta(days=ahead + 7)]
        else:
            candidates = [today, today + timedelta(days=1)]
        for day in candidates:
            at = _wall_clock(day, hour, minute, second, tz)
            if at > now or day_word in ("today", "tomorrow"):
                return at
        return at
    try:
        parsed = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:
        raise ScheduleError(_usage(text)) from None
    if parsed.tzinfo is None and tz is not None:
        parsed = parsed.replace(tzinfo=tz)
    return parsed.timestamp()  # a naive time is this machine's local time


def _wall_clock(day: date, hour: int, minute: int, second: int, tz: tzinfo | None) -> float:
    """The wall-clock time on that day in ``tz`` (this machine's zone when None),
    daylight saving included."""
    return datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=tz).timestamp()


def _usage(value: Any) -> str:
    return (
        f"cannot read {value!r} as a resume time; write 08:45 (or 08:45:30), tomorrow 08:45, "
        "monday 08:45, in 2h, an ISO date and time (2026-12-02T08:45), or epoch seconds"
    )
