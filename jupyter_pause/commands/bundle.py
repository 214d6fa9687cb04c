"""``jupyter pause export | import``: move a session to another person or environment.

``export NOTEBOOK [ID] -o FILE`` writes one file (engine/bundle.py): one of this user's
checkpoints of the notebook (the newest that verifies), its signature, the notebook file
(``NOTEBOOK``, relative to the current folder, the server's root) and the environment the
checkpoint was made in. ``import FILE [--to NOTEBOOK]`` brings it into this user's
checkpoint store and writes the notebook file; a bundle signed with another key is
refused until ``--trust``, and nothing in it is unpickled by the import. The import then
says how this environment (the Python running it) differs from the checkpoint's, and
which differences matter.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import os
import platform
import sys

from ..engine import bundle
from ..engine.errors import CheckpointError
from ..engine.manifest import Manifest
from ..formatting import format_bytes
from .serversettings import checkpoint_root


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "export":
        parser.add_argument("notebook", help="the notebook's path, as the server names it")
        parser.add_argument(
            "id", nargs="?", metavar="ID", help="the checkpoint (default: the newest that verifies)"
        )
        parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle")
    else:
        parser.add_argument("file", metavar="FILE", help="a bundle written by jupyter pause export")
        parser.add_argument(
            "--to", metavar="NOTEBOOK", help="import as this notebook (default: its own path)"
        )
        parser.add_argument(
            "--trust",
            action="store_true",
            help="accept a bundle signed with another key (its fingerprint and origin are "
            "shown) and re-sign it with yours: its pickles run code when restored",
        )
    parser.add_argument(
        "--dir",
        help="checkpoint root: a folder, s3://BUCKET/PREFIX or gs://BUCKET/PREFIX (default: "
        "the server's checkpoint_dir, from the Jupyter config)",
    )


def run(args) -> int:
    try:
        args.dir = checkpoint_root(args.dir, args.command)
        if args.command == "export":
            return _export(args)
        return _import(args)
    except (CheckpointError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _export(args) -> int:
    if not os.path.isfile(args.notebook):
        print(
            f"error: there is no notebook {args.notebook!r} in {os.getcwd()}: name it as the "
            "server does, relative to its root, and run this from that folder",
            file=sys.stderr,
        )
        return 1
    done = bundle.export(args.output, args.notebook, args.dir, args.notebook, args.id)
    print(
        f"exported checkpoint {done.checkpoint} of {args.notebook} to {done.path} "
        f"({format_bytes(done.bytes)})\n"
        f"signed with key {done.key_id}; bundle digest sha256:{done.digest}\n"
        "(give the receiver both over a channel you trust: importing it takes --trust)"
    )
    return 0


def _import(args) -> int:
    done = bundle.import_bundle(args.file, args.dir, to=args.to, trust=args.trust)
    o = done.origin
    print(
        f"imported checkpoint {done.exported} ({o}) as checkpoint {done.checkpoint} "
        f"of {done.notebook}"
    )
    if done.trusted:
        print(
            f"trusted with --trust: signer's key {o.key_id}, bundle digest "
            f"sha256:{done.digest}; re-signed with your key"
        )
    print(
        f"wrote {done.notebook_file}"
        if done.notebook_written
        else f"{done.notebook_file} already holds this notebook"
    )
    notes = bundle.environment_notes(done.manifest, here(done.manifest))
    print(f"environment, against this Python ({sys.executable}):")
    if not notes:
        print("  the same as the checkpoint's in all that a restore depends on")
    for n in sorted(notes, key=lambda n: not n.matters):
        print(f"  {'matters' if n.matters else 'does not matter'}: {n}")
    print(f"open {done.notebook} and run %restore to bring its state back")
    return 0


def here(m: Manifest) -> bundle.Environment:
    """This environment: the Python that runs the command, torch and CUDA from package
    metadata, the GPU from ``nvidia-smi`` (``compat.ENV_FINGERPRINT`` overrides, as
    for snapshots: compat.py), and each package the checkpoint needs. Nothing is imported."""
    from ..backends.kubernetes import compat

    found = compat.collect()
    torch = found.get("torch")
    return bundle.Environment(
        python=platform.python_version(),
        platform=platform.platform(),
        torch=torch,
        cuda=found.get("cuda"),
        gpu_model=found.get("gpu_model"),
        packages={
            top: torch if top == "torch" else _installed(top) for top in bundle.needed_packages(m)
        },
    )


def _installed(top: str) -> str | None:
    """The version of the distribution that provides the top-level package ``top`` (""
    when unknown), None when it cannot be imported here."""
    try:
        if importlib.util.find_spec(top) is None:
            return None
    except (ImportError, ValueError):
        return None
    for dist in _distributions().get(top, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()
