"""``jupyter pause status | list | pause | resume | schedule``: on Kubernetes, or on this machine.

The same four questions make sense for a workspace on a cluster and for a
Jupyter server on this machine.  This picks where to ask:

- ``--url`` or ``--local``: the local server (:mod:`.local`);
- ``--kubeconfig``, ``--context`` or ``--namespace``: the cluster (:mod:`.kube`);
- neither: a local server if ``jupyter server list`` shows one, else the
  cluster if a Kubernetes configuration exists, else a clear error at once
  (``list``: the saved state in the checkpoint store the server's config names).

``list --dir DIR`` reads a checkpoint root itself (:mod:`.saved`), with no server.

The positional argument is a WORKSPACE on Kubernetes and a NOTEBOOK path locally.
``pause`` is local only: on Kubernetes the notebook server inside the workspace
pauses it (its Pause button, ``%pause``, or auto-pause), and nothing outside the
pod can checkpoint its kernels.
"""

from __future__ import annotations

import argparse
import sys

from . import kube, local, saved


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    kube.add_arguments(parser, name)
    if name == "list":
        parser.add_argument(
            "workspace", nargs="?", metavar="NOTEBOOK", help="locally: one notebook (default: all)"
        )
        parser.add_argument(
            "--dir",
            help="list the saved state in this checkpoint root (a folder, s3://BUCKET/PREFIX "
            "or gs://BUCKET/PREFIX) instead of asking a server; with no server and no "
            "Kubernetes, the server's checkpoint_dir from the Jupyter config",
        )
    if name == "status":
        parser.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            help="locally: under each notebook, the timeline of its last operation (each "
            "step of its pause or resume, and when it came)",
        )
    if name == "pause":
        parser.add_argument("workspace", metavar="NOTEBOOK", help="its path on the server")
        parser.add_argument(
            "--force", action="store_true", help="interrupt a running cell instead of refusing"
        )
        parser.add_argument(
            "--resume-at",
            nargs="+",
            metavar="TIME",
            help="resume by itself then: 08:45, tomorrow 08:45, monday 08:45, in 2h, or ISO 8601",
        )
        parser.add_argument("--wait", action="store_true", help="follow the pause until it ends")
        parser.add_argument(
            "--timeout", type=float, default=1800.0, help="with --wait: give up after SECONDS"
        )
    local.add_local_arguments(parser)
    parser.add_argument(
        "--local", action="store_true", help="ask the Jupyter server on this machine"
    )


def _kube(args: argparse.Namespace) -> int:
    if args.command == "pause":
        print(
            "jupyter pause pause: on Kubernetes, a workspace is paused by the notebook server "
            "inside it: its Pause button, %pause in the notebook, or auto-pause. To pause a "
            "notebook of a server you can reach, pass its --url.",
            file=sys.stderr,
        )
        return 1
    return kube.run(args)


def run(args: argparse.Namespace) -> int:
    if args.command == "list" and args.dir:
        return saved.run(args)
    if args.url or args.local:
        return local.run(args)
    if args.kubeconfig or args.context or args.namespace:
        return _kube(args)
    if local.running_servers():
        return local.run(args)
    if kube.kubernetes_configured():
        return _kube(args)
    if args.command == "list":  # the saved state is on this machine, where the server keeps it
        return saved.run(args)
    print(
        f"jupyter pause {args.command}: nothing to talk to: no Jupyter server is running here "
        "(`jupyter server list` shows none) and there is no Kubernetes configuration. "
        "Start one with `jupyter lab`, or pass --url, or --kubeconfig.",
        file=sys.stderr,
    )
    return 1
