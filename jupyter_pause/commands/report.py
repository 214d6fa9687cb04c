"""``jupyter pause report``: GPU-time accounting from the ledger.

Reads the ledger file the server writes (or a running server's
``GET jupyter-pause/api/events`` with ``--url``) and prints accelerator-hours
allocated / used / released, pause and resume latency, restore outcomes,
storage and interruptions, per notebook, user and workload class.
"""

from __future__ import annotations

import argparse
import os
import sys


def default_ledger() -> str:
    from jupyter_core.paths import jupyter_data_dir

    return os.path.join(jupyter_data_dir(), "pause", "ledger.sqlite3")


def add_arguments(parser: argparse.ArgumentParser, name: str = "report") -> None:
    parser.add_argument(
        "--ledger", help="ledger file (default: <jupyter data dir>/pause/ledger.sqlite3)"
    )
    parser.add_argument("--url", help="read the events from this running Jupyter server instead")
    parser.add_argument("--token", default=os.environ.get("JUPYTER_TOKEN", ""), help="its token")
    parser.add_argument(
        "--since", help="period start: ISO date/time (UTC), epoch seconds, or 7d/12h ago"
    )
    parser.add_argument("--until", help="period end (default: now)")
    parser.add_argument(
        "--format", choices=("table", "json", "csv", "html"), default="table", help="output format"
    )
    parser.add_argument(
        "--csv-table",
        choices=("groups", "pauses"),
        default="groups",
        help="CSV: one row per total/notebook/user/class, or one per pause",
    )
    parser.add_argument("-o", "--output", help="write here instead of stdout")
    parser.add_argument(
        "--interruption-minutes",
        type=float,
        default=10.0,
        help="an auto-pause resumed within this many minutes counts as an interruption",
    )


def load_events(args: argparse.Namespace):
    """The events to report on: from a server (``--url``) or a ledger file."""
    if args.url:
        from ..client import PauseClient

        return PauseClient(args.url, args.token).ledger_events()
    from ..ledger import Ledger

    path = args.ledger or default_ledger()
    if not os.path.exists(path):
        raise SystemExit(f"no ledger at {path}: pass --ledger PATH or --url of a running server")
    return Ledger(path)


def run(args: argparse.Namespace) -> int:
    import json
    import time

    from ..report.build import build_report, parse_time

    now = time.time()
    report = build_report(
        load_events(args),
        since=parse_time(args.since, now),
        until=parse_time(args.until, now),
        now=now,
        interruption_minutes=args.interruption_minutes,
    )
    if args.format == "json":
        text = json.dumps(report.to_json(), indent=1)
    elif args.format == "csv":
        text = report.to_csv(args.csv_table)
    elif args.format == "html":
        from ..report.html import render_html

        text = render_html(report)
    else:
        text = report.to_text()
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
