"""``jupyter pause delete NOTEBOOK ID...``: delete checkpoints on this machine.

Like the server's ``DELETE``, it removes only this user's checkpoints: those whose
signature verifies with this user's key. ``--force-foreign`` is the administrator's
clean-up of a shared checkpoint root: it also removes checkpoints that are not
provably this user's (another server's key, unsigned), and prints each folder it
removes with the reason it was not this user's. ``jupyter pause verify`` lists them.
"""

from __future__ import annotations

import argparse
import sys

from ..engine import paths, store
from ..engine.errors import CheckpointError
from .serversettings import checkpoint_root


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("notebook", help="the notebook's path, as the server names it")
    parser.add_argument("ids", nargs="+", metavar="ID", help="checkpoint ids (2026-11-30T18-02-11)")
    parser.add_argument(
        "--dir",
        help="checkpoint root: a folder, s3://BUCKET/PREFIX or gs://BUCKET/PREFIX "
        "(default: the server's checkpoint_dir, from the Jupyter config)",
    )
    parser.add_argument(
        "--force-foreign",
        action="store_true",
        help="also remove checkpoints not signed with this user's key (another server's "
        "on a shared root, unsigned ones): each is named with the reason",
    )


def run(args) -> int:
    try:
        args.dir = checkpoint_root(args.dir, "delete")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    nbdir = paths.notebook_dir(args.dir, args.notebook)
    failed = False
    for cid in args.ids:
        try:
            foreign = store.delete_checkpoint(
                args.dir, args.notebook, cid, force_foreign=args.force_foreign
            )
        except (CheckpointError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            failed = True
            continue
        print(f"removed {nbdir / cid}" + (f" (not this user's: {foreign})" if foreign else ""))
    return 1 if failed else 0
