"""``jupyter pause status | resume | abort | list | gc``: the Kubernetes side, from outside the pod.

For users and the platform team with a kubeconfig.  A WORKSPACE is a Kubeflow
``Workspace`` (``kubeflow.org/v1beta1``) or, on plain GKE, the StatefulSet
that runs the notebook server; ``--kind`` picks one when both exist.

This module only parses arguments and prints; what the commands do lives in
``jupyter_pause.backends.kubernetes`` (``status``, ``resume``, ``abort``, ``gc``), and
the expiry of checkpoints (``gc --checkpoints-dir``) in ``jupyter_pause.engine.store``.

Exit codes: 0 done; 1 error; 3 ``resume``: a resume is already in progress
(reported, not duplicated); 4 ``resume --wait``: it ended in ``failed`` or timed out.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from ..formatting import format_age, format_bytes

EXIT_IN_PROGRESS = 3
EXIT_NOT_READY = 4


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--poll-interval", type=float, default=2.0, help=argparse.SUPPRESS)
    if name in ("status", "resume", "abort", "schedule"):
        parser.add_argument(
            "--kind",
            choices=("auto", "workspace", "statefulset"),
            default="auto",
            help="what WORKSPACE names: a Kubeflow Workspace or a StatefulSet (default: try both)",
        )
    if name == "status":
        parser.add_argument(
            "workspace", nargs="?", metavar="WORKSPACE", help="one workspace (default: all)"
        )
    elif name == "resume":
        parser.add_argument("workspace", metavar="WORKSPACE")
        parser.add_argument(
            "--wait", action="store_true", help="follow the resume until the workspace is ready"
        )
        parser.add_argument(
            "--timeout", type=float, default=1800.0, help="with --wait: give up after SECONDS"
        )
        parser.add_argument(
            "--target",
            action="append",
            metavar="KEY=VALUE",
            help="what the resumed pod will have, for the compatibility check "
            "(e.g. gpu_driver=570.86.15, gpu_model='Tesla T4'); repeatable",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="take over a resume that is recorded as in progress (a stale lock)",
        )
    elif name == "schedule":
        parser.add_argument("workspace", metavar="WORKSPACE")
        parser.add_argument(
            "at",
            nargs="*",
            metavar="AT",
            help="when: 08:45, tomorrow 08:45, monday 08:45, in 2h, or ISO 8601",
        )
        parser.add_argument("--cancel", action="store_true", help="cancel the scheduled resume")
    elif name in ("scheduler", "follow-nodes"):
        parser.add_argument(
            "--once", action="store_true", help="one round, then exit (for a CronJob)"
        )
        parser.add_argument(
            "--interval", type=float, default=60.0, help="seconds between rounds (default 60)"
        )
    elif name == "abort":
        parser.add_argument("workspace", metavar="WORKSPACE")
        parser.add_argument(
            "--frozen-limit",
            type=float,
            default=120.0,
            metavar="SECONDS",
            help="after the snapshot is deleted, delete the pod if it is still not Ready "
            "(frozen) after SECONDS; its StatefulSet recreates it and the notebooks come back "
            "from their checkpoints",
        )
    elif name == "gc":
        parser.add_argument(
            "--older-than", required=True, metavar="AGE", help="e.g. 7d, 12h, 30min"
        )
        parser.add_argument(
            "--all",
            dest="all_snapshots",
            action="store_true",
            help="every PodSnapshot in the namespace, not only jupyter-pause's "
            "(other tools' too: prefer --policy)",
        )
        parser.add_argument(
            "--policy",
            metavar="POLICY",
            help="the PodSnapshots of this PodSnapshotPolicy (instead of jupyter-pause's)",
        )
        parser.add_argument(
            "--delete-policy",
            action="append",
            metavar="POLICY",
            help="then delete this PodSnapshotPolicy, but only once no snapshot uses it",
        )
        parser.add_argument("--dry-run", action="store_true", help="say what would be deleted")
        parser.add_argument(
            "--wait-timeout",
            type=float,
            default=300.0,
            help="seconds to wait for deletions to finish",
        )
        parser.add_argument(
            "--checkpoints-dir",
            nargs="?",
            const="",
            metavar="DIR",
            help="also delete application checkpoints older than AGE under DIR, a folder or "
            "s3://… / gs://… (keeps the newest of each notebook); without DIR: the server's "
            "checkpoint_dir, from the Jupyter config. Outside Kubernetes, only this",
        )


def kubernetes_configured() -> bool:
    """A cluster to talk to: in a pod, or a kubeconfig file."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    config = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return any(Path(p).is_file() for p in config.split(os.pathsep) if p)


def run(args: argparse.Namespace) -> int:
    from ..backends.base import BackendError

    if args.command == "gc" and args.checkpoints_dir is not None:
        named = args.kubeconfig or args.context or args.namespace
        if not named and not kubernetes_configured():
            return cmd_gc(None, args)  # a folder's or a bucket's expiry needs no cluster
    command = COMMANDS.get(args.command)
    if command is None:
        raise SystemExit(f"unknown command {args.command}")
    try:
        return command(_client(args), args)
    except (BackendError, ValueError) as e:
        print(f"jupyter pause {args.command}: {e}", file=sys.stderr)
        return 1


def _client(args):
    from ..backends.kubernetes.client import KubeClient

    return KubeClient(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        use_in_cluster=False if (args.kubeconfig or args.context) else None,
    )


def _emit(args, data: Any, text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=1, default=str))
    else:
        print(text)


def _table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows
    )


# -- status -----------------------------------------------------------------------


def _status_text(st) -> str:
    now = time.time()
    lines = [f"{st.name} ({st.kind}): {st.state}"]
    if st.reason:
        lines.append(f"  reason:  {st.reason}")
    if st.state == "waiting-for-capacity":
        scale = {
            "triggered": "the cluster autoscaler is adding a node",
            "failed": "the cluster autoscaler could not add a node",
            None: "no scale-up reported",
        }[st.scale_up]
        lines.append(
            f"  scale-up: {scale}"
            + (
                f" ({st.detail.get('scale_up_message')})"
                if st.detail.get("scale_up_message")
                else ""
            )
        )
    if st.since:
        lines.append(f"  since:   {format_age(now - st.since)} ago")
    if st.state == "snapshotting":
        if st.detail.get("trigger"):
            snap = st.detail.get("snapshot")
            ready = " (Ready)" if st.detail.get("snapshot_ready") else ""
            lines.append(
                f"  trigger: {st.detail['trigger']}" + (f", snapshot {snap}{ready}" if snap else "")
            )
        if st.detail.get("pod_ready") is False:
            lines.append(
                f"  the pod is not Ready (frozen by the checkpoint?); if this lasts, "
                f"`jupyter pause abort {st.name}` stops the snapshot"
            )
    if st.pod:
        lines.append(f"  pod:     {st.pod}")
    if st.restored_from:
        lines.append(f"  restored from: {st.restored_from}")
    if st.schedule:
        at = time.strftime("%a %d %b %H:%M", time.localtime(st.schedule["at"]))
        lines.append(f"  resumes at {at} ({st.schedule.get('kind', 'scheduled')})")
    if st.resume_operation:
        op = st.resume_operation
        lines.append(f"  resume:  {op.get('id')} by {op.get('by')} at {op.get('started')}")
    return "\n".join(lines)


def _all_workspaces(client) -> list[tuple[str, str]]:
    """``(kind, name)`` of every workspace in the namespace (``kind`` as ``--kind`` spells it)."""
    from ..backends.kubernetes import status as status_mod

    found, warnings = status_mod.managed(client)
    _warn(warnings)
    return [(m.kind.lower(), m.name) for m in found]


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def cmd_status(client, args) -> int:
    from ..backends.kubernetes import status as status_mod

    if args.workspace:
        st = status_mod.fetch(client, args.workspace, args.kind)
        _emit(args, st.to_json(), _status_text(st))
        return 0
    statuses = [status_mod.fetch(client, name, kind) for kind, name in _all_workspaces(client)]
    if args.json:
        _emit(args, [s.to_json() for s in statuses], "")
        return 0
    if not statuses:
        print(f"no paused or pausable workspaces in namespace {client.namespace}")
        return 0
    now = time.time()
    rows = [["NAME", "KIND", "STATE", "SINCE", "REASON"]]
    for s in statuses:
        rows.append(
            [s.name, s.kind, s.state, format_age(now - s.since) if s.since else "-", s.reason]
        )
    print(_table(rows))
    return 0


# -- resume -----------------------------------------------------------------------


def cmd_resume(client, args) -> int:
    from ..backends.kubernetes import compat, resume
    from ..backends.kubernetes import status as status_mod
    from ..backends.kubernetes.common import now_iso

    name = args.workspace
    op = {
        "id": uuid.uuid4().hex[:12],
        "started": now_iso(),
        "by": f"{_user()}@{socket.gethostname()}",
    }
    result: dict[str, Any] = {"workspace": name, "operation": op}
    started = resume.start_resume(
        client,
        name,
        op,
        kind=args.kind,
        targets=compat.parse_target(args.target),
        force=args.force,
    )
    kind = started.kind
    if started.outcome == "in-progress":
        current = started.operation
        st = status_mod.fetch(client, name, kind.lower())
        result.update(outcome="in-progress", operation=current, status=st.to_json())
        _emit(
            args,
            result,
            f"a resume of {name} is already in progress (operation {current.get('id')}, started "
            f"{current.get('started')} by {current.get('by')}); not starting another.\n"
            + _status_text(st),
        )
        return EXIT_IN_PROGRESS
    if started.outcome == "not-paused":
        st = status_mod.fetch(client, name, kind.lower())
        result.update(outcome="not-paused", status=st.to_json())
        _emit(args, result, f"{name} is not paused: nothing to resume.\n" + _status_text(st))
        return 0
    compat_report = started.compatibility
    result["compatibility"] = compat_report
    lines = [f"resuming {name} ({kind}), operation {op['id']}"]
    diffs = compat_report["differences"]
    if diffs:
        lines.append(
            "warning: the environment differs from the one at pause, so the pod snapshot will not be restored:"
        )
        lines += [f"  - {d['message']}" for d in diffs]
        lines.append(
            "  the session cold-starts and your notebooks come back from their application checkpoints."
        )
    if compat_report["unchecked"]:
        lines.append(
            "not checked before the pod runs: "
            + ", ".join(compat_report["unchecked"])
            + " (pass --target KEY=VALUE)"
        )
    result["outcome"] = "started"
    if not args.wait:
        _emit(args, result, "\n".join(lines))
        return 0
    if not args.json:
        print("\n".join(lines), flush=True)
    final = _follow(client, name, kind, args)
    result["status"] = final.to_json()
    if args.json:
        _emit(args, result, "")
    return 0 if final.state in ("ready", "running") else EXIT_NOT_READY


# -- scheduled resumes -------------------------------------------------------------


def resume_time(args) -> float:
    """The AT words of ``jupyter pause schedule`` as epoch seconds (ValueError if unreadable)."""
    from ..schedule import parse_resume_at

    if not args.at:
        raise ValueError("say when: AT (08:45, tomorrow 08:45, in 2h, …), or --cancel")
    return parse_resume_at(" ".join(args.at), time.time())


def cmd_schedule(client, args) -> int:
    from ..backends.kubernetes import schedule

    name = args.workspace
    if args.cancel:
        had = schedule.cancel_schedule(client, name, args.kind)
        _emit(args, {"workspace": name, "cancelled": had},
              f"{name}: scheduled resume cancelled" if had else f"{name}: nothing was scheduled")  # fmt: skip
        return 0
    at = resume_time(args)
    plan = {"at": at, "kind": "scheduled", "by": f"{_user()}@{socket.gethostname()}",
            "set_at": time.time()}  # fmt: skip
    kind = schedule.set_schedule(client, name, plan, args.kind)
    when = time.strftime("%a %d %b %H:%M", time.localtime(at))
    _emit(args, {"workspace": name, "kind": kind, "schedule": plan},
          f"{name} ({kind}) resumes at {when}; `jupyter pause scheduler` starts it then")  # fmt: skip
    return 0


def cmd_scheduler(client, args) -> int:
    from ..backends.kubernetes import schedule

    while True:
        for result in schedule.fire_due(client, _all_workspaces(client)):
            if result["outcome"] != "waiting":
                print(json.dumps(result) if args.json else
                      f"{result['workspace']}: scheduled resume {result['outcome']}", flush=True)  # fmt: skip
        if args.once:
            return 0
        time.sleep(args.interval)


def cmd_follow_nodes(client, args) -> int:
    from ..backends.kubernetes.follow import follow_round

    while True:
        for result in follow_round(client, time.time(), args.interval):
            print(json.dumps(result.to_json()) if args.json else
                  f"{result.workspace}: node {result.node} "
                  f"{result.outcome or 'not followed: ' + result.error}", flush=True)  # fmt: skip
        if args.once:
            return 0
        time.sleep(args.interval)


# -- abort ------------------------------------------------------------------------


def cmd_abort(client, args) -> int:
    from ..backends.kubernetes.abort import abort

    report = abort(
        client,
        args.workspace,
        kind=args.kind,
        by=f"{_user()}@{socket.gethostname()}",
        frozen_limit=args.frozen_limit,
        poll_interval=args.poll_interval,
    )
    lines = [f"aborted the pause of {report.workspace} ({report.kind})"]
    if report.cleared_addon_state:
        lines.append(
            "  the snapshot add-on's checkpoint state is cleared (its readiness gate opens)"
        )
    deleted = ", ".join(report.deleted_snapshots) or "none"
    lines.append(f"  deleted trigger {report.trigger} and its snapshots: {deleted}")
    if report.snapshots_left:
        lines.append("  still terminating (GKE's finalizer): " + ", ".join(report.snapshots_left))
    lines.append(
        {
            "thawed": f"  pod {report.pod} is Ready again and keeps running",
            "pod-deleted": f"  pod {report.pod} stayed frozen for {args.frozen_limit:g} s and was "
            "deleted: it restarts and the notebooks come back from their checkpoints",
            "no-pod": "  there is no pod",
        }[report.outcome]
    )
    _emit(args, report.to_json(), "\n".join(lines))
    return 1 if report.snapshots_left else 0


def _follow(client, name: str, kind: str, args):
    from ..backends.kubernetes import status as status_mod

    deadline = time.monotonic() + args.timeout
    last = None
    while True:
        st = status_mod.fetch(client, name, kind.lower())
        key = (st.state, st.reason, st.scale_up)
        if key != last and not args.json:
            print(_status_text(st), flush=True)
            last = key
        if st.state in ("ready", "running", "failed") or time.monotonic() > deadline:
            return st
        time.sleep(args.poll_interval)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return os.environ.get("USER", "unknown")


# -- list ----------------------------------------------------------------------------


def cmd_list(client, args) -> int:
    from ..backends.kubernetes import status as status_mod

    found = status_mod.listing(client, time.time())
    _warn(found.warnings)
    if args.json:
        _emit(args, found.to_json(), "")
        return 0
    out = [f"Pod snapshots in {found.namespace}:"]
    if found.snapshots:
        rows = [["NAME", "WORKSPACE", "STATE", "AGE", "IDLE", "SIZE", "POLICY"]]
        for s in found.snapshots:
            rows.append(
                [
                    s.name,
                    s.workspace,
                    s.state,
                    format_age(s.age_seconds),
                    format_age(s.idle_seconds),
                    format_bytes(s.bytes),
                    s.policy or "-",
                ]
            )
        out.append(_table(rows))
        out.append("(sizes are not reported by the PodSnapshot API: see the bucket)")
    else:
        out.append("  none")
    out.append("")
    out.append("Application checkpoints of paused notebooks:")
    if found.checkpoints:
        rows = [["WORKSPACE", "NOTEBOOK", "CHECKPOINT", "SIZE", "AGE"]]
        for c in found.checkpoints:
            rows.append(
                [
                    c.workspace,
                    c.notebook or "-",
                    c.id or "-",
                    format_bytes(c.bytes),
                    format_age(c.age_seconds),
                ]
            )
        out.append(_table(rows))
    else:
        out.append("  none")
    print("\n".join(out))
    return 0


# -- gc ---------------------------------------------------------------------------------


def cmd_gc(client, args) -> int:
    """Expire pod snapshots (with a ``client``) and, with ``--checkpoints-dir``, the
    checkpoints of a folder or a bucket (without a client: only those)."""
    from ..formatting import parse_duration

    older = parse_duration(args.older_than)
    verb = "would delete" if args.dry_run else "deleted"
    data, lines, failed = {}, [], False
    if client is not None:
        failed = _gc_snapshots(client, args, older, verb, data, lines)
    if args.checkpoints_dir is not None:
        from ..engine import store
        from .serversettings import checkpoint_root

        root = checkpoint_root(args.checkpoints_dir, "gc")
        expiry = store.expire(root, older, dry_run=args.dry_run)
        data["checkpoints"] = expiry.to_json()
        lines.append(
            f"{verb} {len(expiry.deleted)} checkpoint(s) older than {args.older_than} under {root}"
        )
        lines += [f"  {p}" for p in expiry.deleted]
        if expiry.foreign:
            lines.append("kept, not signed with this user's key: " + ", ".join(expiry.foreign))
        lines += [f"  error: {e}" for e in expiry.errors]
        failed |= bool(expiry.errors)
    _emit(args, data, "\n".join(lines))
    return 1 if failed else 0


def _gc_snapshots(client, args, older: float, verb: str, data: dict, lines: list) -> bool:
    """The pod snapshots' part of ``gc``; True when something failed."""
    from ..backends.kubernetes.gc import collect_garbage

    report = collect_garbage(
        client,
        older,
        all_snapshots=args.all_snapshots,
        policy=args.policy,
        delete_policies=args.delete_policy,
        dry_run=args.dry_run,
        wait_timeout=args.wait_timeout,
        poll_interval=args.poll_interval,
    )
    data.update(report.to_json())
    lines.append(
        f"{verb} {len(report.deleted_snapshots)} pod snapshot(s) older than {args.older_than}"
    )
    lines += [f"  {n}" for n in report.deleted_snapshots]
    if report.still_terminating:
        lines.append(
            "still terminating (GKE's finalizer has not removed the files yet): "
            + ", ".join(report.still_terminating)
        )
    if report.deleted_triggers:
        lines.append(f"{verb} trigger(s): " + ", ".join(report.deleted_triggers))
    for policy in report.deleted_policies:
        lines.append(f"{verb} policy {policy} (after its snapshots)")
    for policy, why in report.refused_policies.items():
        lines.append(f"kept policy {policy}: {why}")
    lines += [f"error: {e}" for e in report.errors]
    return bool(report.errors or report.refused_policies)


#: each sub-command's function, by its name
COMMANDS = {
    "status": cmd_status,
    "resume": cmd_resume,
    "abort": cmd_abort,
    "list": cmd_list,
    "gc": cmd_gc,
    "schedule": cmd_schedule,
    "scheduler": cmd_scheduler,
    "follow-nodes": cmd_follow_nodes,
}
