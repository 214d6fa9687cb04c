"""Tiny inline-SVG chart helpers (no plotting library is a dependency).

Each function returns one ``<svg>`` element as a string, with a ``<title>``
and a ``data-chart`` attribute so that tests (and screen readers) can find
it.  Colours come from CSS classes where possible so a page can restyle them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from html import escape

from ..lifecycle import State
from .build import STOPPED

#: the replay's states (report/build.py), by their plain values: the legend shows them
STATE_COLORS = {
    State.RUNNING.value: "#2e7d32",
    State.PAUSING.value: "#f9a825",
    State.RESTORING.value: "#7cb342",
    State.PAUSED.value: "#b0bec5",
    State.RESUMING.value: "#64b5f6",
    State.WAITING_FOR_CAPACITY.value: "#e53935",
    STOPPED: "#eceff1",
}
SERIES_COLORS = ["#1565c0", "#2e7d32", "#9e9e9e", "#f9a825", "#6a1b9a", "#e53935"]
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def esc(s: object) -> str:
    return escape(str(s), quote=True)


def _svg(kind: str, width: float, height: float, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" data-chart="{esc(kind)}" role="img"'
        f' viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" {FONT}>'
        f"<title>{esc(title)}</title>" + "".join(body) + "</svg>"
    )


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while True:
        ticks.append(round(t, 10))
        if t >= hi - step * 1e-9:
            return ticks
        t += step


_TIME_STEPS = [60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400]


def time_ticks(t0: float, t1: float, n: int = 8) -> tuple[list[float], str]:
    """Tick times (aligned to UTC) and a strftime format for their labels."""
    span = max(t1 - t0, 1.0)
    step = next((s for s in _TIME_STEPS if span / s <= n), _TIME_STEPS[-1])
    first = math.ceil(t0 / step) * step
    ticks = []
    t = first
    while t <= t1:
        ticks.append(t)
        t += step
    fmt = (
        "%H:%M" if step < 86400 and span <= 86400 else "%a %d %H:%M" if step < 86400 else "%a %d %b"
    )
    return ticks, fmt


def _utc(t: float, fmt: str) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime(fmt)


def legend(items: Sequence[tuple[str, str]], x: float, y: float) -> list[str]:
    out, cx = [], x
    for label, color in items:
        out.append(
            f'<rect x="{cx:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{color}"'
            f' stroke="#607d8b" stroke-width="0.5"/>'
            f'<text x="{cx + 14:.1f}" y="{y:.1f}">{esc(label)}</text>'
        )
        cx += 14 + 6.5 * len(label) + 14
    return out


def timeline(
    rows: Sequence[dict],
    since: float,
    until: float,
    *,
    width: int = 900,
    title: str = "Session states over time",
) -> str:
    """One row per session: state segments, with cell activity as a dark band.

    ``rows``: ``[{"label", "timeline": [{"start","end","state"}], "active": [[a,b]]}]``.
    """
    label_w, row_h, top = 170, 22, 28
    plot_w = width - label_w - 40
    height = top + row_h * max(len(rows), 1) + 40
    span = max(until - since, 1.0)

    def x(t: float) -> float:
        return label_w + (min(max(t, since), until) - since) / span * plot_w

    body = legend(
        [(s, c) for s, c in STATE_COLORS.items()] + [("cell activity", "#212121")], label_w, 14
    )
    ticks, fmt = time_ticks(since, until, max(2, plot_w // 110))
    axis_y = top + row_h * max(len(rows), 1)
    for t in ticks:
        body.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{axis_y + 4}" stroke="#cfd8dc"/>'
            f'<text x="{x(t):.1f}" y="{axis_y + 16}" text-anchor="middle">{esc(_utc(t, fmt))}</text>'
        )
    for i, row in enumerate(rows):
        y = top + i * row_h
        body.append(
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{esc(_short(row["label"], 26))}</text>'
        )
        for seg in row.get("timeline", []):
            x0, x1 = x(seg["start"]), x(seg["end"])
            color = STATE_COLORS.get(seg["state"], "#999")
            body.append(
                f'<rect class="seg" data-state="{esc(seg["state"])}" x="{x0:.2f}" y="{y + 3}"'
                f' width="{max(x1 - x0, 0.5):.2f}" height="{row_h - 8}" fill="{color}">'
                f"<title>{esc(seg['state'])}: {esc(_utc(seg['start'], '%a %H:%M'))}"
                f" - {esc(_utc(seg['end'], '%a %H:%M'))}</title></rect>"
            )
        for a, b in row.get("active", []):
            x0, x1 = x(a), x(b)
            body.append(
                f'<rect class="active" x="{x0:.2f}" y="{y + row_h - 8}" width="{max(x1 - x0, 0.8):.2f}"'
                f' height="3" fill="#212121"/>'
            )
    body.append(
        f'<text x="{label_w + plot_w}" y="{axis_y + 32}" text-anchor="end" fill="#607d8b">time (UTC)</text>'
    )
    return _svg("timeline", width, height, title, body)


def hbars(
    rows: Sequence[tuple[str, Sequence[float]]],
    series: Sequence[str],
    *,
    unit: str = "h",
    width: int = 900,
    title: str = "",
    kind: str = "hbars",
) -> str:
    """Grouped horizontal bars: one group per row, one bar per series."""
    label_w, bar_h, gap, top = 170, 9, 10, 28
    plot_w = width - label_w - 60
    group_h = bar_h * len(series) + gap
    height = top + group_h * max(len(rows), 1) + 30
    vmax = max([v for _, vals in rows for v in vals if v is not None] + [1e-9])
    ticks = nice_ticks(0, vmax, 5)
    vmax = ticks[-1]

    def x(v: float) -> float:
        return label_w + v / vmax * plot_w

    body = legend(list(zip(series, SERIES_COLORS, strict=False)), label_w, 14)
    axis_y = top + group_h * max(len(rows), 1)
    for t in ticks:
        body.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{axis_y}" stroke="#eceff1"/>'
            f'<text x="{x(t):.1f}" y="{axis_y + 14}" text-anchor="middle">{_num(t)}</text>'
        )
    for i, (label, vals) in enumerate(rows):
        y0 = top + i * group_h
        body.append(
            f'<text x="{label_w - 6}" y="{y0 + group_h / 2}" text-anchor="end">{esc(_short(label, 26))}</text>'
        )
        for j, v in enumerate(vals):
            v = v or 0.0
            y = y0 + j * bar_h
            body.append(
                f'<rect class="bar" data-series="{esc(series[j])}" x="{label_w}" y="{y:.1f}"'
                f' width="{max(x(v) - label_w, 0):.2f}" height="{bar_h - 1}" fill="{SERIES_COLORS[j % 6]}">'
                f"<title>{esc(label)} {esc(series[j])}: {v:.2f} {esc(unit)}</title></rect>"
                f'<text x="{x(v) + 3:.1f}" y="{y + bar_h - 1.5:.1f}" font-size="9">{_num(v)}</text>'
            )
    body.append(
        f'<text x="{label_w + plot_w}" y="{axis_y + 28}" text-anchor="end" fill="#607d8b">{esc(unit)}</text>'
    )
    return _svg(kind, width, height, title, body)


def strips(
    rows: Sequence[tuple[str, Sequence[float]]],
    *,
    unit: str = "s",
    width: int = 900,
    title: str = "",
    kind: str = "latency",
) -> str:
    """A distribution per row: every value as a dot, with median and p95 marks."""
    from .build import quantile

    label_w, row_h, top = 210, 34, 24
    plot_w = width - label_w - 30
    height = top + row_h * max(len(rows), 1) + 30
    vmax = max([v for _, vals in rows for v in vals] + [1e-9])
    ticks = nice_ticks(0, vmax, 6)
    vmax = ticks[-1]

    def x(v: float) -> float:
        return label_w + v / vmax * plot_w

    body = [
        f'<text x="{label_w}" y="14" fill="#37474f">dots: one per pause/resume;'
        " | median, ¦ p95</text>"
    ]
    axis_y = top + row_h * max(len(rows), 1)
    for t in ticks:
        body.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{axis_y}" stroke="#eceff1"/>'
            f'<text x="{x(t):.1f}" y="{axis_y + 14}" text-anchor="middle">{_num(t)}</text>'
        )
    for i, (label, vals) in enumerate(rows):
        y = top + i * row_h + row_h / 2
        body.append(
            f'<text x="{label_w - 6}" y="{y + 4}" text-anchor="end">{esc(label)} (n={len(vals)})</text>'
        )
        for k, v in enumerate(vals):
            jitter = ((k * 7919) % 13 - 6) * 1.1  # deterministic spread
            body.append(
                f'<circle class="dot" cx="{x(v):.2f}" cy="{y + jitter:.2f}" r="2.6"'
                f' fill="{SERIES_COLORS[i % 6]}" fill-opacity="0.6"><title>{v:.1f} {esc(unit)}</title></circle>'
            )
        if vals:
            med, p95 = quantile(vals, 0.5), quantile(vals, 0.95)
            body.append(
                f'<line class="median" x1="{x(med):.1f}" x2="{x(med):.1f}" y1="{y - 12}" y2="{y + 12}"'
                f' stroke="#212121" stroke-width="2"><title>median {med:.1f} {esc(unit)}</title></line>'
                f'<line class="p95" x1="{x(p95):.1f}" x2="{x(p95):.1f}" y1="{y - 12}" y2="{y + 12}"'
                f' stroke="#212121" stroke-dasharray="3,2"><title>p95 {p95:.1f} {esc(unit)}</title></line>'
            )
    body.append(
        f'<text x="{label_w + plot_w}" y="{axis_y + 28}" text-anchor="end" fill="#607d8b">{esc(unit)}</text>'
    )
    return _svg(kind, width, height, title, body)


def vbars(
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    unit: str = "",
    width: int = 440,
    height: int = 240,
    title: str = "",
    kind: str = "vbars",
    limit: float | None = None,
    limit_label: str = "",
    highlight: int | None = None,
) -> str:
    """Vertical grouped bars per category, optional horizontal limit line."""
    left, right, top, bottom = 48, 10, 30, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    vals = [v for _, vs in series for v in vs] + ([limit] if limit is not None else [])
    ticks = nice_ticks(0, max(vals + [1e-9]), 4)
    vmax = ticks[-1]
    n = max(len(categories), 1)
    group_w = plot_w / n
    bar_w = group_w * 0.75 / max(len(series), 1)

    def y(v: float) -> float:
        return top + plot_h - v / vmax * plot_h

    body = [f'<text x="{left}" y="14" font-weight="600">{esc(title)}</text>']
    for t in ticks:
        body.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#eceff1"/>'
            f'<text x="{left - 4}" y="{y(t) + 4:.1f}" text-anchor="end">{_num(t)}</text>'
        )
    for i, cat in enumerate(categories):
        gx = left + i * group_w
        if highlight == i:
            body.append(
                f'<rect x="{gx:.1f}" y="{top}" width="{group_w:.1f}" height="{plot_h}" fill="#fff8e1"/>'
            )
        for j, (name, vs) in enumerate(series):
            v = vs[i] or 0.0
            bx = gx + group_w * 0.125 + j * bar_w
            body.append(
                f'<rect class="bar" data-series="{esc(name)}" x="{bx:.1f}" y="{y(v):.1f}"'
                f' width="{bar_w - 1:.1f}" height="{max(y(0) - y(v), 0):.1f}"'
                f' fill="{SERIES_COLORS[j % 6]}"><title>{esc(cat)} {esc(name)}: {v:.2f} {esc(unit)}</title></rect>'
            )
        body.append(
            f'<text x="{gx + group_w / 2:.1f}" y="{top + plot_h + 14}" text-anchor="middle">{esc(cat)}</text>'
        )
    if limit is not None:
        body.append(
            f'<line class="limit" x1="{left}" x2="{left + plot_w}" y1="{y(limit):.1f}" y2="{y(limit):.1f}"'
            f' stroke="#e53935" stroke-dasharray="4,3"/>'
            f'<text x="{left + plot_w}" y="{y(limit) - 3:.1f}" text-anchor="end" fill="#e53935">'
            f"{esc(limit_label)}</text>"
        )
    body.append(
        f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end" fill="#607d8b">{esc(unit)}</text>'
    )
    if len(series) > 1:
        body += legend(
            [(name, SERIES_COLORS[j % 6]) for j, (name, _) in enumerate(series)], left, height - 6
        )
    return _svg(kind, width, height, title, body)


def _num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else "…" + s[-(n - 1) :]
