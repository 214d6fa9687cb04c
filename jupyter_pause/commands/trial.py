"""``jupyter pause trial NOTEBOOK``: the pause/resume trial, end to end.

Runs the notebook, pauses, checks what was released and what remains,
resumes, checks files and live state and runs the model cell, repeats the
restore from the checkpoint into a fresh kernel, then deletes what it
created.  Prints one table (time, sizes, PASS/FAIL per check) and, with
``--json FILE``, writes it as JSON there.  Without ``--url`` it starts its own Jupyter server (local backend)
on a copy of NOTEBOOK; with ``--url`` NOTEBOOK is a path on that server.
"""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser, name: str = "trial") -> None:
    parser.add_argument("notebook", help="notebook file (or server-relative path with --url)")
    parser.add_argument("--url", help="drive this running Jupyter server instead of starting one")
    parser.add_argument("--token", default=os.environ.get("JUPYTER_TOKEN", ""), help="its token")
    parser.add_argument("--backend", default="local", help="backend of the server started here")
    parser.add_argument(
        "--expect-live",
        choices=("auto", "restored", "fresh-with-checkpoint"),
        default="auto",
        help="expected live state after resume (auto: restored on snapshot backends)",
    )
    parser.add_argument(
        "--expect-capacity-wait",
        action="store_true",
        help="capacity is made unavailable: the resume must report waiting-for-capacity",
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra option for the server started here (repeatable),"
        " e.g. --server-arg=--PauseApp.backend_class=my.Backend",
    )
    parser.add_argument(
        "--json", dest="json_path", help="also write the result as JSON to this file"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per step")
    parser.add_argument("--keep", action="store_true", help="keep the temporary server folder")


def run(args: argparse.Namespace) -> int:
    from ..trial.run import run_trial, write_json

    result = run_trial(
        args.notebook,
        url=args.url,
        token=args.token,
        backend=args.backend,
        expect_live=args.expect_live,
        expect_capacity_wait=args.expect_capacity_wait,
        timeout=args.timeout,
        keep=args.keep,
        server_args=args.server_arg,
        log=lambda msg: print(msg, file=sys.stderr),
    )
    sys.stdout.write(result.to_text())
    if args.json_path:  # only where asked: never litter the current folder
        write_json(result, args.json_path)
        print(f"wrote {args.json_path}", file=sys.stderr)
    return 0 if result.passed else 1
