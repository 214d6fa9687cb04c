"""``jupyter pause status | list | pause | resume | schedule`` against a Jupyter server on this machine.

The server is found as ``jupyter server list`` finds it (its runtime files),
or named with ``--url``; only servers with jupyter-pause answer.  NOTEBOOK is
a path relative to the server's root.

Exit codes: 0 done; 1 error (nothing to talk to, unknown notebook, a failed
pause or resume).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..client import ClientError, PauseClient
from ..formatting import format_age, format_bytes
from ..protocol import CallProgress


class NoServer(Exception):
    """Nothing to talk to: say so at once, with what to do."""


def add_local_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("a Jupyter server on this machine")
    group.add_argument(
        "--url", help="the server's URL (default: the one `jupyter server list` shows)"
    )
    group.add_argument("--token", default=None, help="its token (default: from its runtime file)")


def running_servers() -> list[dict[str, Any]]:
    """The servers ``jupyter server list`` would show (alive ones only)."""
    from jupyter_server.serverapp import list_running_servers

    return list(list_running_servers())


def _same_server(a: str, b: str) -> bool:
    """Two URLs of one server (``localhost`` and ``127.0.0.1`` alike, a trailing ``/`` or not)."""
    from urllib.parse import urlsplit

    def key(url: str):
        u = urlsplit(url)
        host = u.hostname or ""
        host = "localhost" if host in ("127.0.0.1", "::1", "localhost") else host
        return u.scheme.lower(), host, u.port, u.path.rstrip("/")

    return key(a) == key(b)


def token_for(url: str) -> str:
    """The token of the server at ``url`` when it runs on this machine as this user (its
    runtime file, as ``jupyter server list`` reads it); "" otherwise."""
    for server in running_servers():
        if _same_server(server["url"], url):
            return server.get("token", "")
    return ""


def find_server(url: str | None = None, token: str | None = None) -> PauseClient:
    """A client for the server to talk to, checked to run jupyter-pause."""
    candidates = (
        [{"url": url, "token": token or token_for(url)}]
        if url
        else [{"url": s["url"], "token": token or s.get("token", "")} for s in running_servers()]
    )
    if not candidates:
        raise NoServer(
            "no running Jupyter server found (`jupyter server list` shows none); "
            "start one with `jupyter lab`, or name one with --url"
        )
    problems = []
    for candidate in candidates:
        client = PauseClient(candidate["url"], candidate["token"], timeout=5)
        try:
            client.status()
        except ClientError as e:
            problems.append(f"{candidate['url']}: {e}")
            continue
        except OSError as e:  # refused, unreachable, timed out
            problems.append(f"{candidate['url']}: not answering ({e})")
            continue
        client.timeout = 60
        return client
    raise NoServer("no Jupyter server with jupyter-pause answered: " + "; ".join(problems))


def _when(t: float) -> str:
    return time.strftime("%a %d %b %H:%M", time.localtime(t))


def _emit(args, data: Any, text: str) -> None:
    print(json.dumps(data, indent=1, default=str) if args.json else text)


def cmd_status(client: PauseClient, args) -> int:
    status = client.status()
    sessions = status["sessions"]
    if args.workspace:
        sessions = [s for s in sessions if s["path"] == args.workspace]
        if not sessions:
            print(f"jupyter pause status: no notebook {args.workspace!r} on {client.base_url}",
                  file=sys.stderr)  # fmt: skip
            return 1
    if getattr(args, "verbose", False):  # the timelines are in each operation's own answer
        for s in sessions:
            if s.get("operation"):
                s["operation"] = client.operation(s["operation"]["id"])
    now = time.time()
    lines = [f"{'NOTEBOOK':32} {'STATE':22} {'SINCE':>8}  SAVED STATE"]
    for s in sessions:
        saved = s.get("last_checkpoint") or {}
        saved_text = f"{saved['id']} ({saved['bytes']:,} B)" if saved else "-"
        schedule = s.get("schedule")
        progress = (s.get("operation") or {}).get("progress")
        lines.append(
            f"{s['path']:32} {s['state']:22} {format_age(now - s['since']):>8}  {saved_text}"
            + (f"\n  {CallProgress.from_json(progress).text()}" if progress else "")
            + (f"\n  resumes at: {_when(schedule['at'])} ({schedule['kind']})" if schedule else "")
            + _hibernation(s)
            + (f"\n  error: {s['error']}" if s.get("error") else "")
            + (_timeline(s.get("operation")) if getattr(args, "verbose", False) else "")
        )
    if not sessions:
        lines.append("(no notebooks)")
    hibernate = status.get("hibernate") or {}
    if not hibernate.get("available", True):
        lines.append(f"hibernate in place: unavailable here: {hibernate.get('why_not')}")
    _emit(args, sessions, "\n".join(lines))
    return 0


def _timeline(op: dict[str, Any] | None) -> str:
    """The lines under a notebook with ``--verbose``: its last operation, step by step."""
    if not op or not op.get("timeline"):
        return ""
    steps = op["timeline"]
    lines = [f"\n  last {op['kind']} ({op['outcome']}), seconds after its request:"]
    previous = 0.0
    for step in steps:
        note = f" ({step['note']})" if step.get("note") else ""
        lines.append(
            f"\n    {step['at']:8.3f} s  +{step['at'] - previous:.3f}  {step['step']}{note}"
        )
        previous = step["at"]
    return "".join(lines)


def _hibernation(session: dict[str, Any]) -> str:
    """The line under a hibernated kernel: how much GPU memory waits in host memory."""
    held = session.get("hibernation")
    if not held:
        return ""
    return (
        f"\n  GPU memory in host memory: {format_bytes(held['bytes'])} since "
        f"{_when(held['since'])}; the kernel runs, and its next cell wakes it"
    )


def cmd_list(client: PauseClient, args) -> int:
    paths = [args.workspace] if args.workspace else [s["path"] for s in client.status()["sessions"]]
    listing = {}
    lines = []
    for path in paths:
        try:
            checkpoints = client.checkpoints(path)
        except ClientError as e:
            print(f"jupyter pause list: {e}", file=sys.stderr)
            return 1
        listing[path] = checkpoints
        lines.append(f"{path}:")
        lines += [
            f"  {c['id']}  {c['bytes']:>14,} B  {', '.join(c['objects'])}" for c in checkpoints
        ]
        if not checkpoints:
            lines.append("  (no saved state)")
    _emit(args, listing, "\n".join(lines) or "(no notebooks)")
    return 0


def cmd_pause(client: PauseClient, args) -> int:
    """The same pause as the toolbar's: checkpoint, then stop the kernel; a running cell
    is waited for briefly, and interrupted only with ``--force``."""
    from ..schedule import parse_resume_at

    try:
        resume_at = (
            parse_resume_at(" ".join(args.resume_at), time.time()) if args.resume_at else None
        )
        op = client.pause(args.workspace, force=args.force, resume_at=resume_at)
        if args.wait:
            op = client.wait(op, timeout=args.timeout)
    except (ClientError, ValueError, TimeoutError) as e:
        print(f"jupyter pause pause: {e}", file=sys.stderr)
        return 1
    text = f"{args.workspace}: pause {op['outcome']}" + (
        f": {op['error']}" if op.get("error") else ""
    )
    if resume_at is not None and op["outcome"] != "failed":
        text += f"; resumes at {_when(resume_at)}"
    _emit(args, op, text)
    return 1 if op["outcome"] == "failed" else 0


def cmd_resume(client: PauseClient, args) -> int:
    try:
        op = client.resume(args.workspace)
        if args.wait:
            op = client.wait(op, timeout=args.timeout)
    except (ClientError, TimeoutError) as e:
        print(f"jupyter pause resume: {e}", file=sys.stderr)
        return 1
    text = f"{args.workspace}: resume {op['outcome']}" + (
        f": {op['error']}" if op.get("error") else ""
    )
    _emit(args, op, text)
    return 1 if op["outcome"] == "failed" else 0


def cmd_schedule(client: PauseClient, args) -> int:
    from .kube import resume_time

    try:
        if args.cancel:
            client.cancel_schedule(args.workspace)
            _emit(args, {"path": args.workspace, "cancelled": True},
                  f"{args.workspace}: scheduled resume cancelled")  # fmt: skip
            return 0
        schedule = client.schedule(args.workspace, resume_time(args))
    except (ClientError, ValueError) as e:
        print(f"jupyter pause schedule: {e}", file=sys.stderr)
        return 1
    _emit(args, schedule, f"{args.workspace}: resumes at {_when(schedule['at'])}")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        client = find_server(args.url, args.token)
    except NoServer as e:
        print(f"jupyter pause {args.command}: {e}", file=sys.stderr)
        return 1
    commands = {"status": cmd_status, "list": cmd_list, "pause": cmd_pause, "resume": cmd_resume}
    return {**commands, "schedule": cmd_schedule}[args.command](client, args)
