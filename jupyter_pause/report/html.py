"""The report as one self-contained HTML page (inline CSS and SVG, no scripts).

``render_html(report)`` accepts a :class:`~jupyter_pause.report.build.Report`
or its JSON (``Report.to_json()``), so the server can render what it already
computed.  Plots: the timeline of states per session, accelerator-hours
allocated / used / released per notebook, and the latency distributions.
"""

from __future__ import annotations

from typing import Any

from ..formatting import format_bytes, format_time
from . import svg
from .ahead import KINDS, any_ahead
from .build import NO_ACCELERATOR, Report, scoped_groups
from .svg import esc

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:960px;color:#263238;padding:0 12px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #eceff1}
.muted{color:#607d8b}.cards{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #cfd8dc;border-radius:6px;padding:8px 14px;min-width:130px}
.card b{display:block;font-size:20px}table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
th,td{padding:3px 8px;border-bottom:1px solid #eceff1;text-align:right}
th:first-child,td:first-child,th:nth-child(2),td:nth-child(2){text-align:left}
th{background:#f5f7f8}svg{max-width:100%;height:auto;display:block;margin:6px 0}
td.lost{color:#b71c1c;font-weight:600}dl{font-size:12.5px}dt{font-weight:600;margin-top:6px}dd{margin-left:16px}
"""

DEFINITIONS = [
    (
        "allocated",
        "From the moment a kernel starts (or is found running) until its accelerator is "
        "released by a pause; again from the moment a resume gets its accelerator back. "
        "Hours times GPUs.",
    ),
    ("actively used", "Time spent running cells, within the allocated time."),
    ("released", "From a pause releasing the accelerator until a resume takes one again."),
    (
        "always-on",
        "What the notebooks would have held had they never paused: GPUs times the hours "
        "from when each was first seen to the end of the period.",
    ),
    ("pause latency", "From the pause request until the accelerator is free."),
    (
        "resume latency",
        "From the resume request until a cell can run; the capacity wait is the part spent "
        "waiting for an accelerator to become free.",
    ),
    ("interruption", "An automatic pause that the user resumed soon after (within the window)."),
    (
        "restore outcome",
        "Whether the state came back from a platform snapshot, from a checkpoint (fallback), "
        "or not at all (failed).",
    ),
    (
        "resume ahead of the user",
        "A resume that a schedule or the prediction of the user's return started. Hit: ready "
        "before the user's first cell; late: the user came while it was under way; unused: "
        "paused again before the user came; came first: the user resumed before the schedule. "
        "Hours waiting for users run from ready until the user's first cell (or the pause "
        "again); waiting saved is the resume time the user did not wait.",
    ),
    (
        "what pausing did to the bill",
        "Released accelerator-hours split by what became of the node the pause let go of: "
        "reused (another pod took the GPU: capacity to other work, the bill unchanged), "
        "scaled down (the node was deleted: the bill stopped), idle (the node stayed up with "
        "the GPU free: nothing saved), kept up (other pods kept the node up while the GPU was "
        "free), unknown (the platform cannot see nodes, or nobody followed the node: never "
        "guessed). Node-hours count each node once: up after the release, or removed.",
    ),
    (
        "not restored",
        "Variables the pause's checkpoint could not save: a resume brings the rest back "
        "without them.",
    ),
]


def render_html(
    report: Report | dict[str, Any], title: str = "jupyter-pause: GPU-time report"
) -> str:
    data = report.to_json() if isinstance(report, Report) else report
    p, t = data["period"], data["totals"]
    gh = t["gpu_hours"]
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f"<div class='muted'>{esc(format_time(p['since']))} – {esc(format_time(p['until']))}"
        f" ({p['hours']:.1f} h), {_n(len(data['sessions']), 'session')}</div>",
        "<div class='cards'>",
    ]
    if data.get("no_accelerator"):
        parts.insert(-1, f"<p class='muted'>{esc(NO_ACCELERATOR)}</p>")
    for label, value in (
        ("allocated", f"{_h(gh['allocated'])} h"),
        ("actively used", f"{_h(gh['active'])} h"),
        ("released by pausing", f"{_h(gh['released'])} h"),
        ("always-on would hold", f"{_h(gh['always_on'])} h"),
        ("pauses / interruptions", f"{t['pauses']['count']} / {t['pauses']['interruptions']}"),
        ("storage held now", format_bytes(data["storage"]["bytes_now"])),
    ):
        parts.append(
            f"<div class='card'><span class='muted'>{esc(label)}</span><b>{esc(value)}</b></div>"
        )
    parts.append("</div>")

    parts.append("<h2 id='timeline'>Timeline of states per session</h2>")
    rows = [
        {"label": s["key"], "timeline": s["timeline"], "active": s["active"]}
        for s in data["sessions"]
    ]
    parts.append(svg.timeline(rows, p["since"], p["until"]))

    parts.append("<h2 id='hours'>Accelerator-hours per notebook</h2>")
    hrows = [
        (
            g["key"] if not g.get("user") else f"{g['user']}:{g['key']}",
            [
                g["gpu_hours"]["allocated"],
                g["gpu_hours"]["active"],
                g["gpu_hours"]["released"],
                g["gpu_hours"]["always_on"],
            ],
        )
        for g in data["by_notebook"]
    ]
    parts.append(
        svg.hbars(
            hrows,
            ["allocated", "actively used", "released by pausing", "always-on"],
            unit="accelerator-hours",
            title="Accelerator-hours allocated vs used vs released",
            kind="hours",
        )
    )

    parts.append("<h2 id='latency'>Latency distributions</h2>")
    pauses = data["pauses"]
    lrows = [
        (
            "pause: request → released",
            [x["pause_latency_s"] for x in pauses if x["pause_latency_s"] is not None],
        ),
        (
            "resume: request → runnable",
            [x["resume_latency_s"] for x in pauses if x["resume_latency_s"] is not None],
        ),
        ("waiting for capacity", [x["capacity_wait_s"] for x in pauses if x["capacity_wait_s"]]),
    ]
    parts.append(
        svg.strips(lrows, unit="seconds", title="Pause and resume latency", kind="latency")
    )
    parts.append(_latency_table(t))

    parts.append("<h2 id='groups'>Per notebook, user and workload class</h2>")
    parts.append(_groups_table(data))

    parts.append("<h2 id='bill'>What pausing did to the bill</h2>")
    parts.append(_bill_table(data))

    r = t["restores"]
    cb, sb = t["checkpoint_bytes"], t["snapshot_bytes"]
    parts.append("<h2 id='restores'>Restores and storage</h2><ul>")
    parts.append(
        f"<li>Restores: {r['snapshot']} from snapshot, {r['checkpoint']} from checkpoint (fallback),"
        f" {r['failed']} failed, of {r['total']}.</li>"
        f"<li>Checkpoints: {cb['n']}, median {esc(format_bytes(cb['median']))},"
        f" max {esc(format_bytes(cb['max']))}, {esc(format_bytes(cb['total_written']))} in total.</li>"
        f"<li>Snapshots: {sb['n']}, median {esc(format_bytes(sb['median']))}, max {esc(format_bytes(sb['max']))}.</li>"
        f"<li>Storage held now: {esc(format_bytes(data['storage']['bytes_now']))}"
        f" (source: {esc(data['storage']['source'])}).</li>"
        f"<li>Interruptions: {t['pauses']['interruptions']} of"
        f" {_n(t['pauses']['auto'], 'automatic pause')} resumed within {data['options']['interruption_minutes']:g} minutes.</li></ul>"
    )

    parts.append("<h2 id='pauses'>Pause intervals</h2>")
    parts.append(_pauses_table(pauses))

    if any_ahead(data.get("resume_ahead")):
        parts.append("<h2 id='resume-ahead'>Resumes ahead of the user</h2>")
        parts.append(_ahead_table(data["resume_ahead"]))

    parts.append("<h2 id='definitions'>Definitions</h2><dl>")
    for k, v in DEFINITIONS:
        parts.append(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>")
    parts.append(
        "</dl><p class='muted'>Times in UTC. Generated by jupyter-pause.</p></body></html>"
    )
    return "".join(parts)


def _f(v: float | None, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def _h(hours: float) -> str:
    """Accelerator-hours, rounded the same way in the tiles and the tables."""
    return f"{hours:.2f}"


def _n(count: int, one: str, many: str | None = None) -> str:
    """ "1 session", "3 sessions"."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _latency_table(t: dict[str, Any]) -> str:
    rows = []
    for label, key in (
        ("pause", "pause_latency_s"),
        ("resume", "resume_latency_s"),
        ("capacity wait", "capacity_wait_s"),
    ):
        s = t[key]
        rows.append(
            f"<tr><td>{label}</td><td></td><td>{s['n']}</td><td>{_f(s['median'])}</td>"
            f"<td>{_f(s['p95'])}</td><td>{_f(s['max'])}</td></tr>"
        )
    return (
        "<table class='latency'><tr><th>latency (s)</th><th></th><th>n</th><th>median</th>"
        "<th>p95</th><th>max</th></tr>" + "".join(rows) + "</table>"
    )


def _groups_table(data: dict[str, Any]) -> str:
    head = (
        "<tr><th>scope</th><th>key</th><th>allocated h</th><th>active h</th><th>idle h</th>"
        "<th>released h</th><th>always-on h</th><th>pauses</th><th>interruptions</th>"
        "<th>resume p50 s</th><th>resume p95 s</th></tr>"
    )
    rows = []
    for scope, g in scoped_groups(data):
        gh = g["gpu_hours"]
        rows.append(
            f"<tr><td>{scope}</td><td>{esc(g['key'])}</td><td>{_h(gh['allocated'])}</td>"
            f"<td>{_h(gh['active'])}</td><td>{_h(gh['idle_allocated'])}</td>"
            f"<td>{_h(gh['released'])}</td><td>{_h(gh['always_on'])}</td>"
            f"<td>{g['pauses']['count']}</td><td>{g['pauses']['interruptions']}</td>"
            f"<td>{_f(g['resume_latency_s']['median'])}</td><td>{_f(g['resume_latency_s']['p95'])}</td></tr>"
        )
    return "<table class='groups'>" + head + "".join(rows) + "</table>"


BILL_COLUMNS = (
    ("released", "released h"),
    ("reused", "reused by others h"),
    ("scaled_down", "scaled down h (bill reduced)"),
    ("idle", "idle h (no saving)"),
    ("kept_up", "kept up h"),
    ("unknown", "node outcome unknown h"),
    ("node_hours_up", "node-h up"),
    ("node_hours_removed", "node-h removed"),
)


def _bill_table(data: dict[str, Any]) -> str:
    head = "<tr><th>scope</th><th>key</th>" + "".join(f"<th>{t}</th>" for _, t in BILL_COLUMNS)
    rows = []
    for scope, g in scoped_groups(data):
        if scope not in ("total", "user"):
            continue
        cap = g["capacity"]
        cells = "".join(f"<td>{_h(cap[k])}</td>" for k, _ in BILL_COLUMNS)
        rows.append(f"<tr><td>{scope}</td><td>{esc(g['key'])}</td>{cells}</tr>")
    share = data["totals"]["always_on_share"]
    line = ""
    if share["allocated"] is not None:
        pct = {k: "–" if v is None else f"{v:.0%}" for k, v in share.items()}
        line = (
            f"<p>Of the always-on hours ({_h(data['totals']['gpu_hours']['always_on'])}): "
            f"allocated {pct['allocated']}, released {pct['released']}; the bill was reduced "
            f"for {pct['bill_reduced']}, other work reused {pct['reused']}, no saving on "
            f"{pct['no_saving']}, node outcome unknown for {pct['unknown']}.</p>"
        )
    return "<table data-table='bill'>" + head + "".join(rows) + "</table>" + line


def _outcome(x: dict[str, Any]) -> str:
    """A pause's node outcome in words: the outcomes it had, largest first."""
    parts = [
        (x.get(f"{key}_h") or 0.0, label)
        for key, label in (
            ("reused", "reused"),
            ("scaled_down", "scaled down"),
            ("idle", "idle"),
            ("kept_up", "kept up"),
            ("unknown", "unknown"),
        )
    ]
    shown = [f"{label} {_h(h)} h" for h, label in sorted(parts, reverse=True) if h > 0]
    return ", ".join(shown) or "–"


def _pauses_table(pauses: list[dict[str, Any]]) -> str:
    if not pauses:
        return "<p class='muted'>No pauses in this period.</p>"
    head = (
        "<tr><th>notebook</th><th>requested</th><th>auto</th><th>pause s</th><th>resume s</th>"
        "<th>capacity wait s</th><th>restored from</th><th>checkpoint</th><th>not restored</th>"
        "<th>interrupted</th><th>node outcome</th></tr>"
    )
    rows = []
    for x in pauses:
        when = x["requested"] if x["requested"] is not None else x["released"]
        # a resume that lost state: it failed, or came back without some variables
        lost = "everything" if x["restore_outcome"] == "failed" else ", ".join(x.get("lost", []))
        rows.append(
            f"<tr><td>{esc(x['path'])}</td><td>{esc(format_time(when)) if when else '–'}</td>"
            f"<td>{'yes' if x['auto'] else 'no'}</td><td>{_f(x['pause_latency_s'])}</td>"
            f"<td>{_f(x['resume_latency_s'])}</td><td>{_f(x['capacity_wait_s'])}</td>"
            f"<td>{esc(x['restore_outcome'] or '–')}</td><td>{esc(format_bytes(x['checkpoint_bytes']))}</td>"
            f"<td class='{'lost' if lost else ''}'>{esc(lost)}</td>"
            f"<td>{'yes' if x['interrupted'] else ''}</td><td>{esc(_outcome(x))}</td></tr>"
        )
    return "<table class='pauses'>" + head + "".join(rows) + "</table>"


def _ahead_table(data: dict[str, Any]) -> str:
    """Scheduled and predicted resumes: counts, outcomes and what they cost and saved."""
    cols = (
        ("scheduled", "set"),
        ("started", "started"),
        ("hits", "hits"),
        ("late", "late"),
        ("unused", "unused"),
        ("came_first", "user came first"),
        ("cancelled", "cancelled"),
        ("failed", "failed"),
    )
    head = "".join(f"<th>{esc(label)}</th>" for _, label in cols)
    rows = []
    for kind in (*KINDS, "total"):
        k = data["total"] if kind == "total" else data["kinds"][kind]
        cells = "".join(f"<td>{k[c]}</td>" for c, _ in cols)
        rows.append(
            f"<tr><td>{esc(kind)}</td>{cells}<td>{k['waiting_for_users_h']:.2f}</td>"
            f"<td>{k['user_waiting_saved_min']:.1f}</td></tr>"
        )
    return (
        "<table data-table='resume-ahead'><tr><th>kind</th>"
        + head
        + "<th>accelerator-hours waiting for users</th><th>user waiting saved (min)</th></tr>"
        + "".join(rows)
        + "</table>"
    )
