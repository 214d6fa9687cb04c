"""Delete expired pod snapshots (before their policy) and expired checkpoints.

Order matters, and is enforced here:

1. expired ``PodSnapshot`` objects are deleted.  Deleting one deletes its files
   in Cloud Storage, through GKE's finalizer, which finds the bucket through
   ``spec.policyName`` -> ``PodSnapshotPolicy`` -> ``PodSnapshotStorageConfig``;
2. we wait until they are really gone (the finalizer ran), bounded by
   ``wait_timeout``;
3. only then the triggers that produced them, and, if asked
   (``--delete-policy``), a policy that no snapshot refers to any more.  A
   policy deleted first makes the finalizer release its snapshots *without*
   deleting the files: they stay in the bucket, billed, and unreachable.

Age is measured from the later of ``creationTimestamp`` and
``status.lastAccessTime`` (a restore refreshes it).  By default only
snapshots made by jupyter-pause triggers are considered (label
``gke-pod-snapshot-triggered-by=jupyter-pause-*``); ``policy`` selects the
snapshots of one PodSnapshotPolicy instead; ``all_snapshots`` widens that to
every snapshot in the namespace (including other tools', e.g. the GKE
Workspaces add-on's ``ws-*`` snapshots of paused workspaces: never suggested).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .client import KubeClient, KubeError, NotFound
from .common import MANAGED_BY, TRIGGER_PREFIX, TRIGGERED_BY_LABEL, parse_time


def snapshot_age(snap: dict, now: float) -> float:
    created = parse_time((snap.get("metadata") or {}).get("creationTimestamp")) or now
    accessed = parse_time((snap.get("status") or {}).get("lastAccessTime")) or 0
    return now - max(created, accessed)


def is_ours(snap: dict) -> bool:
    labels = (snap.get("metadata") or {}).get("labels") or {}
    return labels.get(TRIGGERED_BY_LABEL, "").startswith(TRIGGER_PREFIX)


def delete_trigger_snapshots(
    client: KubeClient, trigger: str, timeout: float, poll_interval: float
) -> tuple[list[str], list[str]]:
    """Delete a trigger and every PodSnapshot it made, until they are gone.

    Returns ``(deleted, still there after timeout)``.  Used after a pause that
    did not finish, on every come-back, and by ``jupyter pause abort``: GKE
    restores every new pod from the most recent matching snapshot, so none
    may be left behind.  Transient API errors are retried as the caller's
    :func:`.client.retrying_until` says.
    """
    deleted: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        snaps = client.list_snapshots(f"{TRIGGERED_BY_LABEL}={trigger}")
        for snap in snaps:
            name = snap["metadata"]["name"]
            if not snap["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(NotFound):
                    client.delete_snapshot(name)
                deleted.append(name)
        with contextlib.suppress(NotFound):
            client.delete_trigger(trigger)
        if not snaps or time.monotonic() > deadline:
            return sorted(set(deleted)), [s["metadata"]["name"] for s in snaps]
        time.sleep(poll_interval)


@dataclass
class GcReport:
    deleted_snapshots: list[str] = field(default_factory=list)
    kept_snapshots: list[str] = field(default_factory=list)
    deleted_triggers: list[str] = field(default_factory=list)
    deleted_policies: list[str] = field(default_factory=list)
    refused_policies: dict[str, str] = field(default_factory=dict)
    still_terminating: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def collect_garbage(
    client: KubeClient,
    older_than: float,
    *,
    all_snapshots: bool = False,
    policy: str | None = None,
    delete_policies: list[str] | None = None,
    dry_run: bool = False,
    wait_timeout: float = 300.0,
    poll_interval: float = 2.0,
    now: float | None = None,
) -> GcReport:
    """Delete expired snapshots, then their triggers, then (if asked) policies."""
    now = time.time() if now is None else now
    report = GcReport(dry_run=dry_run)
    snaps = client.list_snapshots()
    expired = []
    for snap in snaps:
        name = snap["metadata"]["name"]
        if policy is not None:
            if (snap.get("spec") or {}).get("policyName") != policy:
                continue
        elif not (all_snapshots or is_ours(snap)):
            continue
        if snap["metadata"].get("deletionTimestamp"):
            continue
        if snapshot_age(snap, now) >= older_than:
            expired.append(snap)
        else:
            report.kept_snapshots.append(name)
    triggers_of_expired = set()
    for snap in expired:
        name = snap["metadata"]["name"]
        trig = ((snap["metadata"].get("labels") or {}).get(TRIGGERED_BY_LABEL)) or ""
        if trig.startswith(TRIGGER_PREFIX):
            triggers_of_expired.add(trig)
        if dry_run:
            report.deleted_snapshots.append(name)
            continue
        try:
            client.delete_snapshot(name)
            report.deleted_snapshots.append(name)
        except NotFound:
            report.deleted_snapshots.append(name)
        except KubeError as e:
            report.errors.append(f"PodSnapshot {name}: {e}")

    # 2. wait for the finalizer to remove the files and the objects.
    pending = set(report.deleted_snapshots) if not dry_run else set()
    deadline = time.monotonic() + wait_timeout
    while pending:
        remaining = {s["metadata"]["name"] for s in client.list_snapshots()}
        pending &= remaining
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(poll_interval)
    report.still_terminating = sorted(pending)

    # 3a. triggers whose snapshots are all gone (ours only).
    if not dry_run:
        remaining = client.list_snapshots()
        busy_triggers = {
            (s["metadata"].get("labels") or {}).get(TRIGGERED_BY_LABEL) for s in remaining
        }
        for trig in client.list_triggers(f"{MANAGED_BY}=jupyter-pause"):
            tname = trig["metadata"]["name"]
            if tname in triggers_of_expired and tname not in busy_triggers:
                try:
                    client.delete_trigger(tname)
                    report.deleted_triggers.append(tname)
                except NotFound:
                    pass
                except KubeError as e:
                    report.errors.append(f"PodSnapshotManualTrigger {tname}: {e}")

    # 3b. policies last, and only when no snapshot (even a terminating one) uses them.
    for name in delete_policies or []:
        users = [
            s["metadata"]["name"]
            for s in client.list_snapshots()
            if (s.get("spec") or {}).get("policyName") == name
        ]
        if users:
            # Select by this policy, never "every snapshot in the namespace":
            # that would delete other tools' snapshots too.
            report.refused_policies[name] = (
                f"{len(users)} snapshot(s) still use it ({', '.join(sorted(users)[:5])}); deleting "
                "the policy now would leave their files in the bucket. Delete them first "
                f"(jupyter pause gc --policy {name} --older-than 0s), wait until they are gone, "
                "then retry."
            )
            continue
        if dry_run:
            report.deleted_policies.append(name)
            continue
        try:
            client.delete_policy(name)
            report.deleted_policies.append(name)
        except NotFound:
            report.refused_policies[name] = "no such policy"
        except KubeError as e:
            report.errors.append(f"PodSnapshotPolicy {name}: {e}")
    return report
