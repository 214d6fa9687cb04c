"""Which users' servers the ``jupyter-pause-hub`` service pauses, culls or leaves.

Pure: the service feeds in what the Hub says about a server (its model from
``GET /hub/api/users``) and what the server's jupyter-pause says about its
notebooks (``GET jupyter-pause/api/activity``, the one definition of
idleness, :mod:`jupyter_pause.idle_policy`), and acts on the :class:`Decision`.

A server with jupyter-pause is paused (never culled) when, for the service's
``timeout``, no notebook did anything, and no notebook's workload class
objects: a busy kernel is always activity (a ``time.sleep`` cell keeps its
server), a class that never acts keeps it, and a class whose own threshold
has not passed yet keeps it until it has.  A server without jupyter-pause
follows ``fallback``: ``"leave"`` it to the usual culler, or ``"cull"`` it by
the culler's rule (the Hub's ``last_activity`` older than ``timeout``).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

FALLBACKS = ("leave", "cull")
LIVE_STATES = ("running", "ready")


@dataclass(frozen=True)
class Decision:
    action: str  # "pause" | "cull" | "keep"
    reason: str
    #: the live notebook whose pause takes the whole server (None: nothing to
    #: checkpoint, the Hub stops the server directly)
    path: str | None = None


def parse_time(text: str | None) -> float | None:
    """The Hub's ISO 8601 timestamps -> epoch seconds."""
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def hub_idle_seconds(server: dict[str, Any], now: float) -> float:
    last = parse_time(server.get("last_activity")) or parse_time(server.get("started")) or now
    return max(0.0, now - last)


def decide(
    server: dict[str, Any],
    activity: dict[str, Any] | None,
    *,
    has_pause: bool,
    now: float,
    timeout: float,
    fallback: str = "leave",
) -> Decision:
    """What to do with one running server now.

    ``activity`` is the server's ``GET activity`` answer (None when its
    auto-pause is off, then the Hub's ``last_activity`` decides idleness).
    """
    if server.get("pending") or not server.get("ready"):
        return Decision("keep", f"the server is {server.get('pending') or 'not ready'}")
    if not has_pause:
        idle = hub_idle_seconds(server, now)
        if fallback == "cull" and idle >= timeout:
            return Decision("cull", f"no jupyter-pause; inactive for {idle:.0f} s")
        return Decision("keep", f"no jupyter-pause; left to the culler (inactive {idle:.0f} s)")
    if activity is None:
        idle = hub_idle_seconds(server, now)
        if idle < timeout:
            return Decision("keep", f"active {idle:.0f} s ago (auto-pause is off on the server)")
        return Decision("pause", f"inactive for {idle:.0f} s (auto-pause is off on the server)")
    sessions = activity.get("sessions") or []
    for s in sessions:
        if s.get("busy"):
            reasons = "; ".join(s.get("reasons") or []) or "busy"
            return Decision("keep", f"{s['path']} is active: {reasons}")
    for s in sessions:
        if s.get("seconds_left") is None:
            return Decision(
                "keep", f"{s['path']}: class {s.get('workload_class')!r} never pauses on its own"
            )
        if s["seconds_left"] > 0:
            return Decision(
                "keep",
                f"{s['path']}: class {s.get('workload_class')!r} allows a pause in "
                f"{s['seconds_left']:.0f} s",
            )
    if sessions:
        idle = float((activity.get("server") or {}).get("idle_seconds") or 0.0)
    else:
        idle = hub_idle_seconds(server, now)
    if idle < timeout:
        return Decision("keep", f"idle for {idle:.0f} s, less than {timeout:.0f} s")
    live = [s["path"] for s in sessions if s.get("state") in LIVE_STATES]
    return Decision("pause", f"idle for {idle:.0f} s", path=live[0] if live else None)


# -- scheduled starts -----------------------------------------------------------

#: how far in the past a handed-over schedule may be (it is then due at once)
SCHEDULE_PAST = 86400.0


class Refused(Exception):
    """A request the service does not take (a scheduled start, a pause to record):
    ``status`` (HTTP) and why."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


def iso(epoch: float) -> str:
    """Epoch seconds as ISO 8601 UTC; what is no date (recorded before times were
    checked) as itself."""
    try:
        return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        return f"{epoch!r} (not a date)"


def schedule_problem(at: float, now: float, *, ahead: float) -> str | None:
    """Why ``at`` (epoch seconds) is no time to start a server, or None.

    Any time a user sends is stored and shown to every admin, so it must be a
    date: from a day ago (due at once) to ``ahead`` seconds from now.
    """
    earliest, latest = now - SCHEDULE_PAST, now + ahead
    if not (math.isfinite(at) and earliest <= at <= latest):
        return f"'at' must be epoch seconds between {iso(earliest)} and {iso(latest)}; got {at!r}"
    return None


def retry_delay(failures: int, first: float, most: float) -> float:
    """Seconds before the next try of a start that failed ``failures`` times in a row:
    ``first``, doubled after each failure, never more than ``most``."""
    return min(most, first * 2.0 ** min(max(failures - 1, 0), 62))
