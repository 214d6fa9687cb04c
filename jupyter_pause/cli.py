"""``jupyter pause``: the command line.

Jupyter finds ``jupyter-pause`` on PATH, so ``jupyter pause status`` works as
well as ``jupyter-pause status``.  Each sub-command lives in its own module,
listed in :data:`COMMANDS`; a module provides ``add_arguments(parser)`` and
``run(args) -> int``.  Modules import their heavy dependencies (kubernetes,
torch) inside ``run`` so that ``--help`` stays fast and works without extras.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "activity": ("jupyter_pause.commands.activity", "print kernel activity for idle probes"),
    "status": (
        "jupyter_pause.commands.where",
        "show the pause state of notebooks (local server) or a workspace (Kubernetes)",
    ),
    "pause": (
        "jupyter_pause.commands.where",
        "pause a notebook (local server): checkpoint it, then stop its kernel and free its GPU",
    ),
    "resume": (
        "jupyter_pause.commands.where",
        "resume a paused notebook (local server) or workspace (Kubernetes)",
    ),
    "schedule": (
        "jupyter_pause.commands.where",
        "resume a paused notebook (local server) or workspace (Kubernetes) at a set time",
    ),
    "scheduler": (
        "jupyter_pause.commands.kube",
        "resume the workspaces whose scheduled time has come (run it as a CronJob)",
    ),
    "follow-nodes": (
        "jupyter_pause.commands.kube",
        "follow the nodes paused workspaces let go of: reused, scaled down, idle or kept up "
        "(the platform's identity; docs/accounting.md)",
    ),
    "abort": ("jupyter_pause.commands.kube", "abort a hung pause snapshot from outside the pod"),
    "list": ("jupyter_pause.commands.where", "list saved state (checkpoints) and snapshots"),
    "gc": ("jupyter_pause.commands.kube", "delete expired snapshots and checkpoints"),
    "report": ("jupyter_pause.commands.report", "GPU-time accounting from the ledger"),
    "trial": ("jupyter_pause.commands.trial", "run the pause/resume trial on a notebook"),
    "probe": ("jupyter_pause.commands.probe", "release-check probe: plant and check live state"),
    "simulate": ("jupyter_pause.commands.simulate", "which idle threshold is worth it"),
    "config": (
        "jupyter_pause.commands.config",
        "list the server extension's settings (c.PauseApp...) with their help",
    ),
    "verify": ("jupyter_pause.commands.verify", "scrub checkpoints: which ones fully restore"),
    "export": (
        "jupyter_pause.commands.bundle",
        "write a checkpoint, its notebook and its environment into one file (a bundle)",
    ),
    "import": (
        "jupyter_pause.commands.bundle",
        "bring a bundle into this user's checkpoints (--trust: one signed with another key)",
    ),
    "delete": (
        "jupyter_pause.commands.delete",
        "delete checkpoints (--force-foreign: also ones not signed with this user's key)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyter pause", description="Pause and resume notebooks; account for GPU time."
    )
    from .version import __version__

    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command, name)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
