"""``jupyter pause list --dir DIR``: the saved state in a checkpoint root, read directly.

No server is asked: the checkpoint store is read as ``verify`` reads it (a bucket's
committed checkpoints are listed from the bucket), by default the one the server's
Jupyter config names (:mod:`.serversettings`).  Only manifests are read; nothing is
hashed or unpickled.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..engine import mirror, paths, store
from ..engine.errors import CheckpointError
from .serversettings import checkpoint_root


def run(args: argparse.Namespace) -> int:
    try:
        root = checkpoint_root(args.dir, "list")
        if args.workspace:
            folders = [paths.notebook_dir(root, args.workspace)]
        else:
            folders = mirror.notebook_folders(root)
        listing = {}
        for nbdir in folders:
            mirror.pull(root, nbdir)
            infos = store.list_folder(nbdir)
            notebook = next((i.notebook for i in infos if i.notebook), None)
            listing[notebook or args.workspace or nbdir.name] = infos
    except (CheckpointError, ValueError) as e:
        print(f"jupyter pause list: {e}", file=sys.stderr)
        return 1
    if args.json:
        shown = {
            path: [{"id": i.id, "bytes": i.bytes, "objects": i.objects, "status": i.status}
                   for i in reversed(infos)]
            for path, infos in listing.items()
        }  # fmt: skip
        print(json.dumps(shown, indent=1))
        return 0
    lines = []
    for path, infos in listing.items():
        lines.append(f"{path}:")
        lines += [
            f"  {i.id}  {i.bytes:>14,} B  {', '.join(i.objects)}"
            + ("" if i.status == "ok" else f"  ({i.status}: {i.problem})")
            for i in reversed(infos)
        ]
        if not infos:
            lines.append("  (no saved state)")
    print("\n".join(lines) or f"(no saved state under {paths.user_root(root)})")
    return 0
