"""``jupyter pause verify [NOTEBOOK]``: scrub the checkpoint store, say what restores.

Checkpoints share content-addressed tensor files, so one damaged file can make
several checkpoints unrestorable. This hashes every file of every checkpoint
(each shared file once) and reports, per checkpoint, whether it is fully
restorable, damaged (which object, which file) or untrusted (why). It reads
only: nothing is unpickled, moved or deleted. The exit status is 0 when every
notebook has at least one restorable checkpoint and nothing is damaged, 1
otherwise, so it can run from cron or a CI job. With ``--dir s3://…`` (or ``gs://``)
it first downloads what the local cache lacks, as the bucket holds it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys

from ..engine import checks, mirror, paths, store
from ..engine.errors import CheckpointError, RemoteStoreError
from .serversettings import checkpoint_root


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "notebook", nargs="?", help="notebook path (default: every notebook of this user)"
    )
    parser.add_argument(
        "--dir",
        help="checkpoint root: a folder, s3://BUCKET/PREFIX or gs://BUCKET/PREFIX "
        "(default: the server's checkpoint_dir, from the Jupyter config)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _folders(args) -> list:
    if args.notebook:
        return [paths.notebook_dir(args.dir, args.notebook)]
    return mirror.notebook_folders(args.dir)


def _download(dir, nbdir) -> None:
    """With a bucket: every checkpoint into the local cache, as stored (the scrub then
    hashes what the bucket holds)."""
    mirror.pull(dir, nbdir)
    for cid in checks.checkpoint_ids(nbdir):
        with contextlib.suppress(CheckpointError):  # unsigned, damaged: the scrub says
            mirror.fetch(dir, nbdir, cid, repair=False)


def run(args) -> int:
    report = []
    try:
        args.dir = checkpoint_root(args.dir, "verify")
        folders = _folders(args)
        for nbdir in folders:
            _download(args.dir, nbdir)
    except (RemoteStoreError, ValueError) as e:
        print(f"jupyter pause verify: {e}", file=sys.stderr)
        return 1
    for nbdir in folders:
        infos = store.scrub(nbdir)
        notebook = next((i.notebook for i in infos if i.notebook), args.notebook or nbdir.name)
        report.append(
            {
                "notebook": notebook,
                "folder": str(nbdir),
                "restorable": [i.id for i in infos if i.status == "ok"],
                "checkpoints": [
                    {k: v for k, v in dataclasses.asdict(i).items() if k != "metadata"}
                    for i in infos
                ],
                "quarantined": checks.quarantined(nbdir),
            }
        )
    healthy = all(
        nb["restorable"] and all(c["status"] != "damaged" for c in nb["checkpoints"])
        for nb in report
    )
    if args.json:
        print(json.dumps({"notebooks": report, "healthy": healthy}, indent=1))
        return 0 if healthy else 1
    if not report:
        print(f"no checkpoints under {paths.user_root(args.dir)}")
        return 0
    for nb in report:
        print(f"{nb['notebook']}  ({nb['folder']})")
        for c in reversed(nb["checkpoints"]):
            line = f"  {c['id']:<24} {c['status']:<10}"
            print(line + (f" {c['problem']}" if c["problem"] else ""))
        if nb["restorable"]:
            newest = nb["restorable"][-1]
            print(f"  -> resume and %restore use {newest}, the newest fully restorable checkpoint")
        else:
            print(
                "  -> no checkpoint is fully restorable; %restore --partial brings back "
                "the objects whose data is intact"
            )
        if nb["quarantined"]:
            print(f"  quarantined (damaged, kept aside): {', '.join(nb['quarantined'])}")
    return 0 if healthy else 1
