"""IPython magics: ``%checkpoint`` and ``%restore`` (``%pause`` is added by the lead).

Loaded in every kernel (``%load_ext jupyter_pause`` or the kernel config), so this
module imports nothing heavy: the engine, and through it torch/numpy, are
imported when a magic runs. ``PauseMagics`` is a plain ``Magics`` subclass;
add a magic by adding a decorated method.
"""

from __future__ import annotations

import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring


def _error(e: Exception):
    """An engine error as a UsageError: the cell fails (Run All stops) with one readable
    line instead of a traceback."""
    return UsageError(f"{type(e).__name__}: {e}")


@magics_class
class PauseMagics(Magics):
    """Checkpoint and restore the live state of this kernel."""

    @magic_arguments()
    @argument("names", nargs="*", help="objects to save (default: tracked + the whole namespace)")
    @argument("--list", "-l", action="store_true", help="list checkpoints instead of saving")
    @argument(
        "--dir", default=None, help="checkpoint root (default: $JUPYTER_PAUSE_CHECKPOINT_DIR)"
    )
    @argument("--notebook", default=None, help="notebook key (default: $JPY_SESSION_NAME)")
    @argument("--keep", type=int, default=None, help="keep the last N checkpoints (default 3)")
    @argument("--trust", action="store_true", help="build on unsigned older checkpoints")
    @argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    @line_magic
    def checkpoint(self, line=""):
        """Save the kernel's state: ``%checkpoint``, ``%checkpoint model opt``, ``%checkpoint --list``."""
        args = parse_argstring(self.checkpoint, line)
        from .engine import api
        from .engine.errors import CheckpointError

        try:
            if args.list:
                self._print_list(api.list_checkpoints(dir=args.dir, notebook=args.notebook))
                return None
            res = api.checkpoint(
                *args.names,
                dir=args.dir,
                notebook=args.notebook,
                keep=args.keep,
                trust=args.trust,
                progress=not args.quiet,
                namespace=self.shell.user_ns,
            )
        except (CheckpointError, ValueError) as e:
            raise _error(e) from None
        real = {k: v for k, v in res.skipped.items() if not v.startswith(("module", "IPython"))}
        if real and not args.quiet:
            for name, reason in real.items():
                print(f"  skipped {name}: {reason}")
        return None

    @staticmethod
    def _print_list(infos) -> None:
        from .engine.progress import fmt_bytes

        if not infos:
            print("no checkpoints yet (run %checkpoint)")
            return
        print(f"{'id':<24} {'time (UTC)':<20} {'size':>10}  objects")
        for i in infos:
            objs = ", ".join(i.objects)
            if len(objs) > 60:
                objs = objs[:57] + "..."
            flag = "" if i.trusted else "  [unsigned]"
            print(
                f"{i.id:<24} {i.time[:19].replace('T', ' '):<20} {fmt_bytes(i.bytes):>10}  {objs}{flag}"
            )

    @magic_arguments()
    @argument("args", nargs="*", help="[checkpoint id] [names...] (default: latest, everything)")
    @argument("--dir", default=None, help="checkpoint root")
    @argument("--notebook", default=None, help="notebook key")
    @argument("--device", default=None, help="'cpu', 'cuda:0', or 'cuda:1=cuda:0' mappings")
    @argument("--trust", action="store_true", help="load a checkpoint not signed by this user")
    @argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    @line_magic
    def restore(self, line=""):
        """Restore state: ``%restore``, ``%restore 2026-11-30T18-02-11 model``, ``--device cpu``."""
        args = parse_argstring(self.restore, line)
        from .engine import api
        from .engine.errors import CheckpointError

        rest = list(args.args)
        cid = rest.pop(0) if rest and api.paths.is_checkpoint_id(rest[0]) else None
        try:
            res = api.restore(
                cid,
                *rest,
                dir=args.dir,
                notebook=args.notebook,
                device=args.device,
                trust=args.trust,
                namespace=self.shell.user_ns,
                progress=not args.quiet,
            )
        except (CheckpointError, ValueError) as e:
            raise _error(e) from None
        for name, reason in res.failed.items():
            print(f"  not restored {name}: {reason}", file=sys.stderr)
        for note in res.notes:
            print(f"  note: {note}")
        return None


def load_ipython_extension(ipython) -> None:
    """Register the magics; safe to call again (``%reload_ext``, config + manual load)."""
    registry = ipython.magics_manager.registry
    if isinstance(registry.get("PauseMagics"), PauseMagics):
        return
    ipython.register_magics(PauseMagics)


def unload_ipython_extension(ipython) -> None:  # nothing to undo that IPython allows
    pass
