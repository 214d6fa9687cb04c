"""How sizes, times and durations are written and read back, once for the project.

Sizes are decimal (kB, MB, GB: powers of 1000), as disks and cloud bills count
them, so that a report's tiles, its tables, the CLI and the kernel's progress
line all print the same number for the same bytes.  Durations are read with
one grammar (``90s``, ``10min``, ``1.5h``, ``1h30m``, ``7d``) by every command
that takes one; only the unit of a bare number differs, and the caller says it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timezone

_SIZE_UNITS = ("B", "kB", "MB", "GB", "TB")


def format_bytes(n: float | None) -> str:
    """``1234567`` -> ``"1.2 MB"``; ``None`` (unknown) -> ``"-"``."""
    if n is None:
        return "-"
    for unit in _SIZE_UNITS:
        if abs(n) < 1000 or unit == _SIZE_UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")  # pragma: no cover


def format_bytes_of(done: float, total: float) -> str:
    """How far a transfer is, in the unit of its total: ``"3.1 / 8.0 GB"``."""
    scale = 1
    for unit in _SIZE_UNITS:
        if abs(total) < 1000 * scale or unit == _SIZE_UNITS[-1]:
            break
        scale *= 1000
    if unit == "B":
        return f"{done:.0f} / {total:.0f} B"
    return f"{done / scale:.1f} / {total / scale:.1f} {unit}"


def format_seconds(s: float) -> str:
    """A duration for people: ``"4.2 s"``, ``"3 min 05 s"``, ``"2 h 05 min"``."""
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    return f"{m} min {s:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def format_age(seconds: float | None) -> str:
    """A compact age for table columns: ``"42s"``, ``"5m30s"``, ``"1d2h"``."""
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    for major_unit, major, minor_unit, minor in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "m", 60),
        ("m", 60, "s", 1),
    ):
        if seconds >= major:
            whole, rest = divmod(seconds, major)
            part = rest // minor
            return f"{whole}{major_unit}{part}{minor_unit}" if part else f"{whole}{major_unit}"
    return f"{seconds}s"


def format_time(t: float) -> str:
    """An epoch time as ``2026-12-01 08:45 UTC`` (reports are read across time zones)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


_DURATION_UNITS = {
    "s": 1,
    "sec": 1,
    "m": 60,
    "min": 60,
    "h": 3600,
    "hr": 3600,
    "d": 86400,
    "w": 7 * 86400,
    "mo": 30 * 86400,
    "y": 365 * 86400,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(mo|min|sec|hr|[smhdwy])")


def parse_duration(text: str, bare_unit: str = "s") -> float:
    """``"90s"``, ``"10min"``/``"10m"``, ``"1.5h"``, ``"1h30m"``, ``"2w"`` -> seconds.

    A bare number is in ``bare_unit`` (seconds unless the caller's users think
    in another unit, as the simulator's thresholds do in minutes).  Anything
    else is a ``ValueError`` that shows an example.
    """
    t = (text or "").strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        return float(t) * _DURATION_UNITS[bare_unit]
    parts = _DURATION_PART.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t.replace(" ", ""):
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 10min, 2h, 1h30m, 7d)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def text_table(head: list[str], rows: list[list[str]], right: Iterable[int] = ()) -> list[str]:
    """A plain aligned text table, as lines (no box drawing: it must survive any terminal).

    ``right`` lists the columns to right-align (numbers).
    """
    right = set(right)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            (str(c).rjust(w) if i in right else str(c).ljust(w))
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]
