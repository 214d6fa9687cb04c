"""IPython magics: ``%checkpoint``, ``%restore`` and ``%pause`` (``--hibernate`` too).

Loaded in every kernel (``%load_ext jupyter_pause`` or the kernel config), so this
module imports nothing heavy: the engine, and through it torch/numpy, are
imported when a magic runs. ``PauseMagics`` is a plain ``Magics`` subclass;
add a magic by adding a decorated method.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .engine.paths import ENV_DIR
from .protocol import NOTEBOOK_ENV, SERVER_TOKEN_ENV, SERVER_URL_ENV, user_skipped
from .schedule import ScheduleError, parse_resume_at


def _error(e: Exception):
    """An engine error as a UsageError: the cell fails (Run All stops) with one readable
    line instead of a traceback."""
    return UsageError(f"{type(e).__name__}: {e}")


def _parse(magic, line: str):
    """The magic's arguments, or None once ``--help`` has printed its help (IPython's
    magic parsers have no ``--help`` of their own: each magic declares one)."""
    args = parse_argstring(magic, line)
    if args.help:
        print(magic.parser.format_help())
        return None
    return args


_help = argument("-h", "--help", action="store_true", help="print this help and return")


@magics_class
class PauseMagics(Magics):
    """Checkpoint and restore the live state of this kernel."""

    @magic_arguments()
    @argument("names", nargs="*", help="objects to save (default: tracked + the whole namespace)")
    @argument("--list", "-l", action="store_true", help="list checkpoints instead of saving")
    @argument("--dir", default=None, help=f"checkpoint root (default: ${ENV_DIR})")
    @argument("--notebook", default=None, help="notebook key (default: this notebook's path)")
    @argument("--keep", type=int, default=None, help="keep the last N checkpoints (default 3)")
    @argument("--trust", action="store_true", help="build on unsigned older checkpoints")
    @argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    @_help
    @line_magic
    def checkpoint(self, line=""):
        """Save the kernel's state: ``%checkpoint``, ``%checkpoint model opt``, ``%checkpoint --list``."""
        args = _parse(self.checkpoint, line)
        if args is None:
            return None
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
        real = user_skipped(res.skipped)
        if real and not args.quiet:
            for name, reason in real.items():
                print(f"  skipped {name}: {reason}")
        self._tell_server(res.id, args)
        return None

    @staticmethod
    def _tell_server(checkpoint_id: str, args) -> None:
        """Have the server that started this kernel record the checkpoint (its
        ledger and report count it).  Only for this notebook's own folder and
        best effort: the checkpoint is saved whatever the server says."""
        if args.dir or args.notebook:
            return  # saved elsewhere than where the server looks
        try:
            server = ServerLink.from_environment()
        except ServerLinkError:
            return  # not a kernel of a server with jupyter-pause
        try:
            server.post(
                "sessions/checkpointed", {"path": server.notebook, "checkpoint_id": checkpoint_id}
            )
        except ServerLinkError as e:
            print(f"  (the server did not record it: {e})", file=sys.stderr)

    @staticmethod
    def _print_list(infos) -> None:
        from .formatting import format_bytes

        if not infos:
            print("no checkpoints yet (run %checkpoint)")
            return
        print(f"{'id':<24} {'time (UTC)':<20} {'size':>10}  objects")
        for i in infos:
            objs = ", ".join(i.objects)
            if len(objs) > 60:
                objs = objs[:57] + "..."
            flag = "" if i.status == "ok" else f"  [{i.status}: {i.problem}]"
            print(
                f"{i.id:<24} {i.time[:19].replace('T', ' '):<20} {format_bytes(i.bytes):>10}  {objs}{flag}"
            )

    @magic_arguments()
    @argument("args", nargs="*", help="[checkpoint id] [names...] (default: latest, everything)")
    @argument("--dir", default=None, help="checkpoint root")
    @argument("--notebook", default=None, help="notebook key")
    @argument("--device", default=None, help="'cpu', 'cuda:0', or 'cuda:1=cuda:0' mappings")
    @argument("--trust", action="store_true", help="load a checkpoint not signed by this user")
    @argument(
        "--partial",
        action="store_true",
        help="restore what is intact; name and skip objects whose data is damaged",
    )
    @argument(
        "--eager",
        action="store_true",
        help="read every tensor before returning (default: large ones in the background)",
    )
    @argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    @_help
    @line_magic
    def restore(self, line=""):
        """Restore state: ``%restore``, ``%restore 2026-11-30T18-02-11 model``, ``--device cpu``."""
        args = _parse(self.restore, line)
        if args is None:
            return None
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
                partial=args.partial,
                lazy=False if args.eager else None,
            )
        except (CheckpointError, ValueError) as e:
            raise _error(e) from None
        if res.loading:
            self._wait_for_rest_of_cell(res.loading)
        for name, reason in res.failed.items():
            print(f"  not restored {name}: {reason}", file=sys.stderr)
        for note in res.notes:
            print(f"  note: {note}")
        for cell in res.rerun:
            print(
                f"  re-run cell [{cell['cell']}] to recreate {', '.join(cell['names'])} "
                f"(jupyter_pause.rerun([{cell['cell']}]) runs it; nothing runs by itself)"
            )
        return None

    def _wait_for_rest_of_cell(self, loading: list[str]) -> None:
        """The hook that guards a lazy restore runs before a cell, so a cell that restores
        and then uses an object (``%restore`` / ``model(x)``) waits for it here."""
        from .engine import lazy
        from .engine.changes import names_used

        raw = self.shell.history_manager.input_hist_raw
        cell = raw[-1] if raw else ""
        rest = "\n".join(ln for ln in cell.splitlines() if not ln.lstrip().startswith(("%", "!")))
        names = names_used(rest, self.shell.user_ns)
        needed = None if names is None else [n for n in loading if n in names]
        if needed is None or needed:
            for name, why in lazy.wait(needed).items():
                print(f"  not restored {name}: {why}", file=sys.stderr)

    @magic_arguments()
    @argument("--force", action="store_true", help="interrupt a running cell instead of waiting")
    @argument(
        "--hibernate",
        action="store_true",
        help="keep the kernel and free only its GPU memory (to host memory), for a short "
        "break: the next cell brings it back in seconds",
    )
    @argument("--status", action="store_true", help="print this notebook's pause state and return")
    @argument(
        "--resume-at",
        nargs="+",
        metavar="TIME",
        help="resume by itself then: 08:45, tomorrow 08:45, monday 08:45, in 2h, or ISO 8601",
    )
    @_help
    @line_magic
    def pause(self, line=""):
        """Pause this notebook: once this cell returns, checkpoint, stop the kernel, free the GPU.

        ``%pause --hibernate`` keeps the kernel and moves only its GPU memory to host
        memory (seconds each way, nothing written to disk), for a short break.

        The server does the pause (the same one as the toolbar's Pause
        button), so the kernel must have been started by a Jupyter server
        with jupyter-pause enabled.
        """
        args = _parse(self.pause, line)
        if args is None:
            return None
        resume_at = None
        if args.resume_at:
            try:
                resume_at = parse_resume_at(" ".join(args.resume_at), time.time())
            except ScheduleError as e:
                raise UsageError(str(e)) from None
        try:
            server = ServerLink.from_environment()
            if args.status:
                session = server.session()
                if session is None:
                    print(f"{server.notebook}: not known to the server yet (running)")
                    return
                since = time.strftime("%H:%M:%S", time.localtime(session["since"]))
                error = f"; last error: {session['error']}" if session.get("error") else ""
                schedule = session.get("schedule")
                resumes = f"; resumes at {_when(schedule['at'])}" if schedule else ""
                print(f"{server.notebook}: {session['state']} since {since}{resumes}{error}")
                return
            if args.hibernate:
                if args.force or resume_at is not None:
                    raise UsageError("--hibernate takes neither --force nor --resume-at")
                body = {"path": server.notebook, "after_cell": True}
                op = server.post("sessions/hibernate", body)["operation"]
                print(
                    f"Hibernating {server.notebook} once this cell finishes (operation "
                    f"{op['id']}): the kernel keeps running and its GPU memory moves to host "
                    "memory; the next cell brings it back."
                )
                return
            body = {"path": server.notebook, "after_cell": True, "force": args.force}
            if resume_at is not None:
                body["resume_at"] = resume_at
            op = server.post("sessions/pause", body)["operation"]
        except ServerLinkError as e:
            raise UsageError(str(e)) from None
        resumes = f" It resumes by itself at {_when(resume_at)}." if resume_at else ""
        print(
            f"Pausing {server.notebook} once this cell finishes (operation {op['id']}): "
            "its state is checkpointed first, then the kernel stops and frees its accelerator."
            + resumes
        )


def _when(t: float) -> str:
    """A local time as people read it: today's as 08:45, another day's as Wed 08:45."""
    local = time.localtime(t)
    same_day = time.localtime()[:3] == local[:3]
    return time.strftime("%H:%M" if same_day else "%a %d %b %H:%M", local)


class ServerLinkError(Exception):
    pass


class ServerLink:
    """This kernel's way back to the Jupyter server that started it."""

    def __init__(self, url: str, token: str, notebook: str):
        self.url, self.token, self.notebook = url, token, notebook

    @classmethod
    def from_environment(cls) -> ServerLink:
        url = os.environ.get(SERVER_URL_ENV)
        notebook = os.environ.get(NOTEBOOK_ENV)
        if not url or not notebook:
            raise ServerLinkError(
                "%pause needs a notebook kernel started by a Jupyter server with jupyter-pause "
                "enabled; here, use %checkpoint to save the state"
            )
        return cls(url, os.environ.get(SERVER_TOKEN_ENV, ""), notebook)

    def _request(self, method: str, endpoint: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.url.rstrip('/')}/jupyter-pause/api/{endpoint}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("message", e.reason)
            except ValueError:
                message = e.reason
            raise ServerLinkError(f"the server refused: {message}") from None
        except OSError as e:
            raise ServerLinkError(f"cannot reach the Jupyter server at {self.url}: {e}") from None

    def post(self, endpoint: str, body: dict) -> dict:
        return self._request("POST", endpoint, body)

    def session(self) -> dict | None:
        status = self._request("GET", "status?no_track_activity=1")
        return next((s for s in status["sessions"] if s["path"] == self.notebook), None)


def load_ipython_extension(ipython) -> None:
    """Register the magics; safe to call again (``%reload_ext``, config + manual load)."""
    registry = ipython.magics_manager.registry
    if isinstance(registry.get("PauseMagics"), PauseMagics):
        return
    ipython.register_magics(PauseMagics)


def unload_ipython_extension(ipython) -> None:  # nothing to undo that IPython allows
    pass
