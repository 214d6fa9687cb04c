"""``jupyter pause probe``: the release-check probe.

``plant`` (before an upgrade): put a value only the running kernel's memory
holds, plus a file it uses, into NOTEBOOK's kernel, and checkpoint it.
``check`` (after the upgrade and resume): report ``restored`` (same live
value), ``fresh-with-checkpoint`` (value gone, checkpoint restorable) or
``lost``, and whether the file is still there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser, name: str = "probe") -> None:
    parser.add_argument("action", choices=("plant", "check"))
    parser.add_argument("notebook", nargs="?", help="server-relative notebook path (plant)")
    parser.add_argument("--url", help="the Jupyter server (check: default from the state file)")
    parser.add_argument("--token", default=os.environ.get("JUPYTER_TOKEN", ""))
    parser.add_argument(
        "--state", default="jupyter-pause-probe.json", help="where plant records what check needs"
    )
    parser.add_argument("--no-checkpoint", action="store_true", help="plant: do not checkpoint")
    parser.add_argument(
        "--no-resume", action="store_true", help="check: do not resume a paused session"
    )
    parser.add_argument(
        "--verify", action="store_true", help="check: restore the checkpoint to prove it restorable"
    )
    parser.add_argument(
        "--expect",
        choices=("restored", "fresh-with-checkpoint", "not-lost"),
        default="not-lost",
        help="check: exit 1 unless the outcome is this (default: anything but lost)",
    )


def run(args: argparse.Namespace) -> int:
    from ..client import PauseClient
    from ..trial import probe

    if args.action == "plant":
        if not (args.notebook and args.url):
            print("probe plant needs NOTEBOOK and --url", file=sys.stderr)
            return 2
        planted = probe.plant(
            PauseClient(args.url, args.token), args.notebook, checkpoint=not args.no_checkpoint
        )
        probe.save(planted, args.state)
        print(json.dumps(planted.to_json(), indent=1))
        print(f"planted; state in {args.state}", file=sys.stderr)
        return 0
    planted = probe.load(args.state)
    client = PauseClient(args.url or planted.url, args.token)
    result = probe.check(client, planted, resume=not args.no_resume, verify=args.verify)
    print(json.dumps(result, indent=1))
    outcome = result["outcome"]
    ok = outcome != "lost" if args.expect == "not-lost" else outcome == args.expect
    print(f"{outcome}; file {result['file']}", file=sys.stderr)
    return 0 if ok else 1
