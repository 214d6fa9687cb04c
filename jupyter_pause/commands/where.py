"""``jupyter pause status | list | resume | schedule``: on Kubernetes, or on this machine.

The same four questions make sense for a workspace on a cluster and for a
Jupyter server on this machine.  This picks where to ask:

- ``--url`` or ``--local``: the local server (:mod:`.local`);
- ``--kubeconfig``, ``--context`` or ``--namespace``: the cluster (:mod:`.kube`);
- neither: a local server if ``jupyter server list`` shows one, else the
  cluster if a Kubernetes configuration exists, else a clear error at once.

The positional argument is a WORKSPACE on Kubernetes and a NOTEBOOK path locally.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import kube, local


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    kube.add_arguments(parser, name)
    if name == "list":
        parser.add_argument(
            "workspace", nargs="?", metavar="NOTEBOOK", help="locally: one notebook (default: all)"
        )
    local.add_local_arguments(parser)
    parser.add_argument(
        "--local", action="store_true", help="ask the Jupyter server on this machine"
    )


def _kubernetes_configured() -> bool:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    config = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return any(Path(p).is_file() for p in config.split(os.pathsep) if p)


def run(args: argparse.Namespace) -> int:
    if args.url or args.local:
        return local.run(args)
    if args.kubeconfig or args.context or args.namespace:
        return kube.run(args)
    if local.running_servers():
        return local.run(args)
    if _kubernetes_configured():
        return kube.run(args)
    print(
        f"jupyter pause {args.command}: nothing to talk to: no Jupyter server is running here "
        "(`jupyter server list` shows none) and there is no Kubernetes configuration. "
        "Start one with `jupyter lab`, or pass --url, or --kubeconfig.",
        file=sys.stderr,
    )
    return 1
