"""``jupyter pause report``: GPU-time accounting from the ledger.

Reads the ledger file the server writes (or a running server's
``GET jupyter-pause/api/events`` with ``--url``) and prints accelerator-hours
allocated / used / released, pause and resume latency, restore outcomes,
storage and interruptions, per notebook, user and workload class.

With ``--fleet`` it reports every user's notebooks instead, per user and
workload class, also those whose servers are stopped: from the
``jupyter-pause-hub`` service (``--hub``, under JupyterHub) or from the
Kubernetes API (``--kubernetes``), where each server handed its ledger over,
rolled up (``report/fleet.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..hub_api import ENV_HUB_URL, HubError, fetch_json


def add_arguments(parser: argparse.ArgumentParser, name: str = "report") -> None:
    parser.add_argument(
        "--ledger",
        help="ledger file (default: the server's, <c.PauseApp.state_dir>/ledger.sqlite3 as "
        "the Jupyter config sets it)",
    )
    parser.add_argument("--url", help="read the events from this running Jupyter server instead")
    parser.add_argument(
        "--token",
        default=os.environ.get("JUPYTER_TOKEN", ""),
        help="its token (default: $JUPYTER_TOKEN, else the runtime file of that server "
        "when it runs here)",
    )
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
    fleet = parser.add_argument_group("the fleet: every user's notebooks (--fleet)")
    fleet.add_argument(
        "--fleet",
        action="store_true",
        help="every user's notebooks, per user and workload class, also while their servers "
        "are stopped: from the hub service (--hub) or Kubernetes (--kubernetes)",
    )
    fleet.add_argument(
        "--hub",
        nargs="?",
        const=os.environ.get(ENV_HUB_URL, ""),
        metavar="SERVICE_URL",
        help=f"the jupyter-pause-hub service (default: ${ENV_HUB_URL}); the token "
        "(--token, default $JUPYTERHUB_API_TOKEN) must be a Hub admin's or a service's",
    )
    fleet.add_argument(
        "--kubernetes",
        action="store_true",
        help="read the workspaces' state objects in each --namespace (nothing is started)",
    )
    fleet.add_argument(
        "-n",
        "--namespace",
        action="append",
        help="with --kubernetes: a namespace (repeatable; default: the kubeconfig context's)",
    )
    fleet.add_argument("--kubeconfig", help="with --kubernetes: the kubeconfig file")
    fleet.add_argument("--context", help="with --kubernetes: the kubeconfig context")
    parser.add_argument(
        "--interruption-minutes",
        type=float,
        default=10.0,
        help="an auto-pause resumed within this many minutes counts as an interruption",
    )


def load_events(args: argparse.Namespace):
    """The events to report on: from a server (``--url``) or a ledger file: by default
    the server's, found as the server finds it (its Jupyter config)."""
    if args.url:
        from ..client import ClientError, PauseClient
        from .local import token_for

        token = args.token or token_for(args.url)
        try:
            return PauseClient(args.url, token).ledger_events()
        except ClientError as e:
            hint = "" if token else " (no token: pass --token, or set $JUPYTER_TOKEN)"
            raise SystemExit(f"jupyter pause report: {args.url}: {e}{hint}") from None
        except OSError as e:
            raise SystemExit(f"jupyter pause report: {args.url} does not answer: {e}") from None
    from ..ledger import Ledger
    from .serversettings import load, tell

    path, why = args.ledger, "--ledger"
    if not path:
        settings = load()
        path, why = settings.ledger, settings.origin("state_dir")
    if not os.path.exists(path):
        raise SystemExit(
            f"jupyter pause report: no ledger at {path} ({why}): pass --ledger PATH or "
            "--url of a running server"
        )
    tell("report", f"the ledger {path} ({why})")
    return Ledger(path)


def load_fleet(args: argparse.Namespace, now: float):
    """The fleet, from the hub service or the Kubernetes API."""
    from ..report.fleet import FleetRow, build_fleet

    if args.kubernetes:
        from ..backends.base import BackendError
        from ..backends.kubernetes.client import KubeClient
        from ..backends.kubernetes.fleet import read_fleet

        rows, problems, sources = [], [], []
        for namespace in args.namespace or [None]:
            client = KubeClient(
                kubeconfig=args.kubeconfig,
                context=args.context,
                namespace=namespace,
                use_in_cluster=False if (args.kubeconfig or args.context) else None,
            )
            try:
                found, trouble = read_fleet(client)
            except BackendError as e:  # no cluster, no credentials
                raise SystemExit(f"jupyter pause report --fleet: {e}") from None
            rows += found
            problems += trouble
            sources.append(f"namespace {client.namespace}")
        return build_fleet(rows, now, sources, problems)
    if not args.hub:
        raise SystemExit(
            "jupyter pause report --fleet: say where the fleet is: --hub SERVICE_URL "
            f"(or ${ENV_HUB_URL}) or --kubernetes"
        )
    import asyncio

    url = args.hub.rstrip("/") + "/api/fleet"
    token = args.token or os.environ.get("JUPYTERHUB_API_TOKEN", "")
    try:
        _, data = asyncio.run(fetch_json(url, token))
    except HubError as e:
        raise SystemExit(f"jupyter pause report --fleet: {url}: {e}") from None
    rows = [FleetRow.from_json(r) for r in data["rows"]]
    return build_fleet(rows, data["now"], [url], data.get("problems") or [])


def run(args: argparse.Namespace) -> int:
    import json
    import time

    from ..report.build import build_report, parse_time

    now = time.time()
    if args.fleet:
        fleet = load_fleet(args, now)
        if args.format == "json":
            text = json.dumps(fleet.to_json(), indent=1)
        elif args.format == "html":
            text = fleet.to_html()
        elif args.format == "csv":
            raise SystemExit("jupyter pause report --fleet: --format table, json or html")
        else:
            text = fleet.to_text()
        return write(args, text)
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
    return write(args, text)


def write(args: argparse.Namespace, text: str) -> int:
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
