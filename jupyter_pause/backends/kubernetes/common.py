"""What both Kubernetes backends share: annotations, conditions, the come-back path.

Pause state that the CLI must see from outside the pod is written as
annotations on a *state object*, because the pod itself goes away: the
Workspace (Kubeflow), or, on plain GKE, the ConfigMap ``jupyter-pause-<statefulset>``
(:func:`state_configmap`).  Not the StatefulSet: a Role that may patch it
lets code in the notebook rewrite its own pod template (image, service
account, volumes), so the server only gets the StatefulSet and patches its
``scale`` subresource.  The annotations:

``jupyter-pause.io/state``
    ``checkpointing | snapshotting | paused | resuming | ready | failed``
``jupyter-pause.io/message``
    what went wrong (with ``failed``) or what is happening
``jupyter-pause.io/paused-at``, ``jupyter-pause.io/backend``
``jupyter-pause.io/fingerprint``
    JSON: the environment at pause (:mod:`.compat`), compared before a resume
``jupyter-pause.io/checkpoints``
    JSON list: the application checkpoint of each paused notebook
``jupyter-pause.io/snapshot``, ``jupyter-pause.io/trigger``, ``jupyter-pause.io/replicas``
``jupyter-pause.io/resume-operation``
    JSON ``{id, started, by}``: the single-flight lock of a resume, taken with
    a compare-and-swap on ``metadata.resourceVersion`` (409 = somebody else won)
``jupyter-pause.io/restored-from``
    ``snapshot | checkpoint`` once the server is back
``jupyter-pause.io/pause-recorded``
    ``true`` once the pausing process itself recorded the end of its pause; a
    come-back without it records the end (the platform finished the pause
    while the process was frozen)
``jupyter-pause.io/node``
    JSON :class:`.nodes.ReleasedNode`: the node the pause let go of, its GPUs
``jupyter-pause.io/node-follow``
    JSON :class:`.nodes.NodeFollow`: what became of that node so far, written
    by ``jupyter pause follow-nodes`` (:mod:`.follow`); the come-back records
    it in the ledger (``CAPACITY_OUTCOME``) and removes both
``jupyter-pause.io/fleet``
    JSON ``{"rows": [...]}``: the server's ledger rolled up per notebook
    (``report/fleet.py``), rewritten periodically, after each pause and at the
    server's stop, so that ``jupyter pause report --fleet`` reads it from the
    API while the workspace is paused; at most :data:`MAX_FLEET_BYTES`
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import os
import time
from typing import Any

from traitlets import Bool, Float, Unicode

from ...ledger import EventType
from ..base import BackendError, PauseBackend, ReleaseFacts, StartupReport, schedule_summary
from . import compat
from .client import AsyncKubeClient, KubeClient, KubeError, NotFound, own_pod, retrying_until
from .nodes import NodeFollow, ReleasedNode, pod_gpus
from .notice import termination_notice
from .objects import Pod, StateObject, json_value

PREFIX = "jupyter-pause.io/"
A_STATE = PREFIX + "state"
A_MESSAGE = PREFIX + "message"
A_PAUSED_AT = PREFIX + "paused-at"
A_BACKEND = PREFIX + "backend"
A_FINGERPRINT = PREFIX + "fingerprint"
A_CHECKPOINTS = PREFIX + "checkpoints"
A_SNAPSHOT = PREFIX + "snapshot"
A_TRIGGER = PREFIX + "trigger"
A_REPLICAS = PREFIX + "replicas"
A_RESUME_OP = PREFIX + "resume-operation"
A_RESTORED_FROM = PREFIX + "restored-from"
A_RESUMED_AT = PREFIX + "resumed-at"
A_PAUSE_RECORDED = PREFIX + "pause-recorded"
A_RESUME_AT = PREFIX + "resume-at"  # a scheduled resume: {at, kind, by, set_at}
A_NODE = PREFIX + "node"
A_NODE_FOLLOW = PREFIX + "node-follow"
A_FLEET = PREFIX + "fleet"  # the ledger rolled up per notebook: {rows: [...]}
#: the fleet annotation's size at most (all of an object's annotations: 256 KiB)
MAX_FLEET_BYTES = 128 * 1024

MANAGED_BY = "app.kubernetes.io/managed-by"
#: on the state ConfigMap: the StatefulSet it describes
STATEFULSET_LABEL = PREFIX + "statefulset"
TRIGGER_PREFIX = "jupyter-pause-"
TRIGGERED_BY_LABEL = "gke-pod-snapshot-triggered-by"
WORKSPACE_LABEL = "notebooks.kubeflow.org/workspace-name"

# Session states written to the owner's annotation.
PAUSED_STATES = ("snapshotting", "paused", "resuming")

#: what the GKE Workspaces snapshot add-on writes on a Workspace (gke-labs/workspaces
#: providers/gke/internal/snapshot/snapshot.go)
ADDON = "podsnapshot.gke.kubeflow.org/"
ADDON_ENABLED = ADDON + "enabled"
ADDON_STATE = ADDON + "checkpoint-state"
ADDON_LAST = ADDON + "last-checkpoint-name"
ADDON_STARTED = ADDON + "checkpoint-started-at"
#: the readiness gate its pod webhook adds (False while checkpointing)
ADDON_GATE = ADDON + "active"
#: the ConfigMap volume its pod webhook adds (and overwrites: do not reuse the name)
ADDON_IPC_VOLUME = "jupyter-ipc-config"


#: GKE copies the trigger's name into the ``gke-pod-snapshot-triggered-by``
#: label of each PodSnapshot, and a label value has at most 63 characters.
MAX_TRIGGER_NAME = 63


def trigger_name_for(statefulset: str) -> str:
    """``jupyter-pause-<statefulset>``, shortened with a hash to fit a label value.

    A StatefulSet name may have 52 characters (its pods' ``controller-revision-hash``
    label must fit), so the plain name can reach 66.
    """
    name = TRIGGER_PREFIX + statefulset
    if len(name) <= MAX_TRIGGER_NAME:
        return name
    digest = hashlib.sha256(statefulset.encode()).hexdigest()[:8]
    head = name[: MAX_TRIGGER_NAME - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}"


def addon_trigger_name(workspace: str) -> str:
    """The GKE Workspaces add-on's PodSnapshotManualTrigger of a workspace (reconcile.go)."""
    return f"ws-{workspace}-trigger"


def state_configmap(statefulset: str) -> str:
    """The ConfigMap holding the pause state of a notebook StatefulSet (plain GKE)."""
    return f"jupyter-pause-{statefulset}"


def fleet_annotation(rows: list[dict[str, Any]]) -> str:
    return json.dumps({"rows": rows}, separators=(",", ":"))


def now_iso(t: float | None = None) -> str:
    t = time.time() if t is None else t
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> float | None:
    """RFC 3339 (Kubernetes timestamps, with or without fractions) -> epoch seconds."""
    if not text:
        return None
    text = text.strip().replace("Z", "+00:00")
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def condition(obj: dict | None, type_: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def condition_true(obj: dict | None, type_: str) -> bool:
    c = condition(obj, type_)
    return bool(c) and str(c.get("status")) == "True"


def annotations(obj: dict | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def json_annotation(obj: dict | None, key: str) -> Any:
    return json_value(annotations(obj).get(key))


def pod_restored(pod: dict | None) -> dict | None:
    """The ``PodRestored`` condition of a pod restored from a snapshot (None on a cold start)."""
    c = condition(pod, "PodRestored")
    if c and str(c.get("status", "True")) != "False":
        return c
    return None


def checkpoint_summary(sessions) -> list[dict[str, Any]]:
    """What each paused notebook's application checkpoint is (for ``jupyter pause list``)."""
    out = []
    for s in sessions:
        ck = s.last_checkpoint or {}
        out.append(
            {
                "path": s.path,
                "id": ck.get("id"),
                "time": ck.get("time"),
                "bytes": ck.get("bytes"),
                "kernel": s.kernel_name,
            }
        )
    return out


def event_time(event: dict, first: bool = False) -> float | None:
    """When an event happened, in either shape: core/v1 (``first/lastTimestamp``) or
    events.k8s.io/v1 seen through core/v1 (timestamps null, ``eventTime``/``series``)."""
    keys = (
        ("firstTimestamp", "eventTime", "lastTimestamp")
        if first
        else ("lastTimestamp", "eventTime", "firstTimestamp")
    )
    if not first:
        t = parse_time((event.get("series") or {}).get("lastObservedTime"))
        if t is not None:
            return t
    for key in keys:
        t = parse_time(event.get(key))
        if t is not None:
            return t
    return parse_time((event.get("metadata") or {}).get("creationTimestamp"))


def capacity_events(pod: dict, events: list[dict]) -> dict[str, Any] | None:
    """When a resumed pod waited for a node: first FailedScheduling, and when it was scheduled."""
    failed = [e for e in events if e.get("reason") == "FailedScheduling"]
    if not failed:
        return None
    failed.sort(key=lambda e: event_time(e, first=True) or 0)
    first = failed[0]
    scheduled = condition(pod, "PodScheduled")
    scheduled_at = None
    if scheduled and str(scheduled.get("status")) == "True":
        scheduled_at = parse_time(scheduled.get("lastTransitionTime"))
    scale_up = None
    for e in sorted(events, key=lambda e: event_time(e) or 0):
        if e.get("reason") == "TriggeredScaleUp":
            scale_up = "triggered"
        elif e.get("reason") in ("NotTriggerScaleUp", "FailedScaleUp"):
            scale_up = "failed"
    return {
        "since": event_time(first, first=True),
        "reason": failed[-1].get("message", ""),
        "scale_up": scale_up,
        "scheduled_at": scheduled_at,
    }


def released_node(pod: Pod, fingerprint: dict[str, Any], at: float) -> ReleasedNode | None:
    """What a pause leaves behind on its node (None: the pod was bound to none)."""
    if not pod.node_name:
        return None
    selector = (pod.obj.get("spec") or {}).get("nodeSelector") or {}
    return ReleasedNode(
        node=pod.node_name,
        gpus=pod_gpus(pod.obj) or int(fingerprint.get("gpu_count") or 1),
        namespace=pod.namespace,
        pod=pod.name,
        released_at=at,
        accelerator=str(
            fingerprint.get("accelerator")
            or selector.get("cloud.google.com/gke-accelerator")
            or fingerprint.get("gpu_model")
            or ""
        ),
    )


class Restored(Exception):
    """Raised inside a wait loop: this process is the copy restored from the snapshot."""

    def __init__(self, pod: Pod):
        self.pod = pod
        super().__init__("restored from a pod snapshot")


class KubeBackend(PauseBackend):
    """Shared plumbing: client, identity, ledger, annotations, the come-back path."""

    scope = "server"

    kubeconfig = Unicode(
        "", help="kubeconfig file (outside a pod); empty: in-cluster config or KUBECONFIG"
    ).tag(config=True)
    kube_context = Unicode("", help="kubeconfig context to use; empty: the current one").tag(
        config=True
    )
    namespace = Unicode(
        "", help="namespace; empty: POD_NAMESPACE, the service account's, or the kubeconfig's"
    ).tag(config=True)
    pod_name = Unicode("", help="this server's pod; empty: POD_NAME or HOSTNAME").tag(config=True)
    poll_interval = Float(2.0, help="seconds between polls of the Kubernetes API").tag(config=True)
    request_timeout = Float(30.0, help="timeout of one Kubernetes API request, seconds").tag(
        config=True
    )
    settle_seconds = Float(
        3.0,
        help="quiesce: seconds to wait after the checkpoints and before the snapshot, so "
        "that sockets settle (GKE Workspaces waits 3 s)",
    ).tag(config=True)
    retry_backoff = Float(
        0.5,
        help="first wait before retrying a transient Kubernetes API failure (5xx, 429, a cut "
        "connection); it doubles up to 10 s, and requests are retried until the deadline of "
        "the operation in progress, not a fixed number of times",
    ).tag(config=True)
    settle_timeout = Float(
        600.0,
        help="seconds to wait, after the server comes back, for the pod to be Ready (and, "
        "when restored, PodRestored) before the snapshots it came from are deleted; also the "
        "deadline for retrying that clean-up",
    ).tag(config=True)
    resume_from_checkpoint_on_cold_start = Bool(
        False,
        help="after a cold start, restore every paused notebook from its checkpoint "
        "without waiting for the user (reported in StartupReport.auto_resume)",
    ).tag(config=True)

    def __init__(self, ledger=None, client: KubeClient | None = None, **kwargs):
        super().__init__(ledger=ledger, **kwargs)
        self._client = client
        self._kube: AsyncKubeClient | None = None
        self._node_name: str | None = None  # this pod's node, once known

    # -- plumbing ----------------------------------------------------------

    @property
    def client(self) -> KubeClient:
        if self._client is None:
            self._client = KubeClient(
                kubeconfig=self.kubeconfig or None,
                context=self.kube_context or None,
                namespace=self.namespace or None,
                request_timeout=self.request_timeout,
                retry_backoff=self.retry_backoff,
            )
        return self._client

    @property
    def kube(self) -> AsyncKubeClient:
        """The client's requests, awaitable and typed."""
        if self._kube is None or self._kube.client is not self.client:
            self._kube = AsyncKubeClient(self.client)
        return self._kube

    async def termination_notice(self):
        """Whether this pod's node is about to be terminated (:mod:`.notice`): its name
        from ``NODE_NAME`` (the downward API's ``spec.nodeName``), else from this pod."""
        if self._node_name is None:
            self._node_name = os.environ.get("NODE_NAME") or (
                (await self.kube.get_pod(self.own_pod_name())).node_name or ""
            )
        if not self._node_name:
            return None
        return termination_notice(await self.kube.get_node(self._node_name))

    def own_pod_name(self) -> str:
        name = self.pod_name or own_pod()[1]
        if not name:
            raise BackendError(
                f"{self.name}: this server's pod is unknown; set POD_NAME from the downward API "
                "(env: valueFrom.fieldRef.fieldPath: metadata.name)"
            )
        return name

    def record(self, type_: EventType, *, time_: float | None = None, **data) -> None:
        """A server-wide row, at ``time_`` (default: now, on the backend's clock)."""
        if self.ledger is None:
            return
        try:
            self.ledger.record(type_, time_=self.clock.time() if time_ is None else time_, **data)
        except Exception:  # the ledger must never break a pause
            self.log.warning(
                "jupyter-pause: could not write %s to the ledger", type_, exc_info=True
            )

    async def is_restored_copy(self, start_uid: str, pod_name: str) -> Pod | None:
        """If this process now runs in a different pod than at ``start_uid``, that pod.

        Memory that survives into a pod with a new UID can only come from a
        snapshot restore (the pod is recreated with the same name).
        """
        try:
            pod = await self.kube.get_pod(pod_name)
        except NotFound:
            return None
        if pod.uid and pod.uid != start_uid:
            return pod
        return None

    # -- owner (Workspace or StatefulSet) -----------------------------------

    async def get_owner(self) -> StateObject:
        raise NotImplementedError

    async def patch_owner(self, patch: dict) -> None:
        raise NotImplementedError

    async def annotate(self, **values: Any) -> None:
        """Set (or with ``None`` remove) jupyter-pause annotations on the owner."""
        ann = {}
        for key, value in values.items():
            full = PREFIX + key.replace("_", "-")
            if value is None:
                ann[full] = None
            elif isinstance(value, str):
                ann[full] = value
            else:
                ann[full] = json.dumps(value, separators=(",", ":"), default=str)
        await self.patch_owner({"metadata": {"annotations": ann}})

    async def annotate_release(self, sessions, fingerprint: dict[str, Any], **values: Any) -> None:
        """The annotations a release begins with: which backend pauses, when, on what, the
        checkpoints and the scheduled resume it leaves, and nothing of the last resume
        (``values`` add to them: the state, the trigger, the node)."""
        await self.annotate(
            backend=self.name,
            paused_at=now_iso(self.clock.time()),
            fingerprint=fingerprint,
            checkpoints=checkpoint_summary(sessions),
            resume_at=schedule_summary(sessions),
            snapshot=None,
            restored_from=None,
            resume_operation=None,
            pause_recorded=None,
            **values,
        )

    async def publish_fleet(self, rows) -> str | None:
        """The rows as the ``fleet`` annotation of the state object, where the CLI
        reads them without starting the workspace.  The largest rows (by
        accelerator-hours) come first; what does not fit is left out, and logged."""
        ordered = sorted(rows, key=lambda r: -(r.allocated_s + r.released_s))
        kept: list[dict[str, Any]] = []
        size = len(fleet_annotation([]))
        for row in ordered:
            data = row.to_json()
            size += len(json.dumps(data, separators=(",", ":"))) + 1  # and a comma
            if size > MAX_FLEET_BYTES:
                break
            kept.append(data)
        if len(kept) < len(rows):
            self.log.warning(
                "jupyter-pause: %d of %d notebooks' fleet rows do not fit the annotation",
                len(rows) - len(kept),
                len(rows),
            )
        await self.patch_owner({"metadata": {"annotations": {A_FLEET: fleet_annotation(kept)}}})
        return A_FLEET

    async def fingerprint(self, pod: Pod) -> dict[str, Any]:
        return await asyncio.to_thread(compat.collect, pod.obj)

    async def mark_failed(self, message: str) -> None:
        try:
            await self.annotate(state="failed", message=message)
        except Exception:
            self.log.warning("jupyter-pause: could not record the failure", exc_info=True)

    # -- coming back ---------------------------------------------------------

    async def _restored(self, pod: Pod) -> ReleaseFacts:
        """This process is the copy restored from the snapshot: stop nothing, settle the
        bookkeeping, and say so as what the release came to."""
        self.client.reset()  # connections were cut by the snapshot
        info = await self.came_back(pod, restored=True)
        await self.after_came_back(info, pod, restored=True)
        return ReleaseFacts(
            restored_from="snapshot",
            came_back=info,
            details={"backend": self.name, "pod": pod.name, "snapshot": info.get("snapshot")},
        )

    async def came_back(self, pod: Pod, *, restored: bool) -> dict[str, Any]:
        """The server runs again after a pause; settle the bookkeeping.

        Records what the paused process could not see itself (a pause that
        the platform finished while it was frozen, the capacity wait, which
        path was taken) and clears the resume lock.  Returns facts for the
        report.
        """
        with retrying_until(time.monotonic() + self.settle_timeout):
            return await self._came_back(pod, restored=restored)

    async def _came_back(self, pod: Pod, *, restored: bool) -> dict[str, Any]:
        owner = await self.get_owner()
        ann = owner.annotations
        state = ann.get(A_STATE)
        was_paused = state in PAUSED_STATES
        resume_op = owner.json(A_RESUME_OP)
        info: dict[str, Any] = {
            "backend": self.name,
            "pod": pod.name,
            "was_paused": was_paused,
            "pod_restored": bool(pod_restored(pod.obj)),
            "snapshot": ann.get(A_SNAPSHOT),
            "checkpoints": owner.json(A_CHECKPOINTS) or [],
            "resume_operation": resume_op,
        }
        if restored and not was_paused:
            # A snapshot of a pause that never finished was restored: the
            # session is back at that moment.  Say so; the clean-up after
            # this makes sure it cannot happen again.
            info["stale_snapshot"] = True
            self.log.warning(
                "jupyter-pause: this pod was restored from a snapshot of a pause that did not "
                "finish (state %r); deleting it so that no later pod start rolls back again",
                state,
            )
        if not was_paused and not resume_op:
            return info
        if was_paused and not ann.get(A_PAUSE_RECORDED):
            # The platform finished the pause while this process was frozen
            # (GKE Workspaces: postCheckpoint stop), so nobody recorded it.
            await self.record_unseen_pause(owner, pod, info)
        pod_name = pod.name
        try:
            events = await self.kube.list_events(pod_name, "Pod")
        except KubeError:
            events = []
        waited = capacity_events(pod.obj, events)
        if waited:
            info["capacity"] = waited
            self.record(
                EventType.WAITING_FOR_CAPACITY,
                time_=waited["since"],
                reason=waited["reason"],
                scale_up=waited["scale_up"],
                pod=pod_name,
            )
        scheduled = condition(pod.obj, "PodScheduled")
        acquired = parse_time((scheduled or {}).get("lastTransitionTime")) or None
        self.record(EventType.CAPACITY_ACQUIRED, time_=acquired, pod=pod_name, node=pod.node_name)
        self.record_capacity_outcome(owner, acquired or self.clock.time(), info)
        path = "snapshot" if restored else "checkpoint"
        if not restored:
            info["cold_start_reason"] = self.cold_start_reason(owner, pod)
        recorded = owner.json(A_FINGERPRINT)
        if recorded:
            current = await self.fingerprint(pod)
            info["differences"] = [d.to_json() for d in compat.compare(recorded, current)]
        self.record(
            EventType.STATE_CHANGED,
            **{"from": "paused", "to": "restoring"},
            restored_from=path,
            reason=info.get("cold_start_reason", ""),
            backend=self.name,
        )
        await self.annotate(
            state="ready",
            message=None if restored else info["cold_start_reason"],
            restored_from=path,
            resumed_at=now_iso(self.clock.time()),
            resume_operation=None,
            pause_recorded=None,
            node=None,
            node_follow=None,
        )
        return info

    def record_capacity_outcome(
        self, owner: StateObject, acquired: float, info: dict[str, Any]
    ) -> None:
        """Write what became of the released node into the ledger, up to ``acquired``.

        The looks were taken from outside while the pod was gone (:mod:`.follow`);
        time they did not cover stays out of the ledger: the report counts it
        as "node outcome unknown".
        """
        released = owner.json(A_NODE)
        data = owner.json(A_NODE_FOLLOW)
        if not isinstance(released, dict):
            return
        if not isinstance(data, dict):
            info["capacity_outcome"] = []
            self.log.info(
                "jupyter-pause: nobody followed node %s while paused (run `jupyter pause "
                "follow-nodes`): its outcome is unknown",
                released.get("node"),
            )
            return
        try:
            spans = NodeFollow.from_json(data).finish(acquired)
        except (KeyError, TypeError, ValueError):
            self.log.warning("jupyter-pause: unreadable %s; outcome unknown", A_NODE_FOLLOW)
            return
        for span in spans:
            self.record(EventType.CAPACITY_OUTCOME, time_=span.start, **span.to_json())
        info["capacity_outcome"] = [s.to_json() for s in spans]

    async def record_unseen_pause(self, owner: StateObject, pod: Pod, info: dict[str, Any]) -> None:
        """Record the end of a pause this process did not live to see (backend-specific)."""

    def cold_start_reason(self, owner: StateObject, pod: Pod) -> str:
        recorded = owner.json(A_FINGERPRINT) or {}
        target = compat.from_pod(pod.obj)
        diffs = compat.compare(recorded, target)
        if diffs:
            return "cold start: " + "; ".join(d.message for d in diffs)
        if owner.annotations.get(A_SNAPSHOT):
            return (
                "cold start: the pod was not restored from its snapshot (it expired, was "
                "deleted, or the restore failed); notebooks come back from their checkpoints"
            )
        return "cold start: the pause took no snapshot; notebooks come back from their checkpoints"

    async def startup(self) -> StartupReport:
        """A new server process in a pod: restored (PodRestored) or cold start?"""
        try:
            pod_name = self.own_pod_name()
            with retrying_until(time.monotonic() + self.settle_timeout):
                pod = await self.kube.get_pod(pod_name)
            restored = bool(pod_restored(pod.obj))
            info = await self.came_back(pod, restored=restored)
            await self.after_came_back(info, pod, restored=restored)
        except BackendError as e:
            self.log.warning("jupyter-pause: %s startup check failed: %s", self.name, e)
            return StartupReport(detail=f"could not check how the pod came back: {e}")
        if restored:
            c = pod_restored(pod.obj) or {}
            return StartupReport(
                restored_from="snapshot",
                detail=f"restored from snapshot ({c.get('message') or info.get('snapshot') or ''})",
                info=info,
            )
        detail = info.get("cold_start_reason", "cold start") if info.get("was_paused") else ""
        return StartupReport(
            detail=detail, auto_resume=self.resume_from_checkpoint_on_cold_start, info=info
        )

    async def after_came_back(self, info: dict[str, Any], pod: Pod, *, restored: bool) -> None:
        """Backend-specific clean-up once the server runs again."""

    async def wait_until_settled(self, pod: Pod, *, restored: bool) -> Pod:
        """Wait until this pod is Ready (and, if restored, ``PodRestored=True``).

        GKE loads a restored pod's memory lazily and may report PodRestored
        after Ready; deleting the snapshot before then could pull the memory
        out from under the restore.  Bounded by ``settle_timeout``.
        """
        deadline = time.monotonic() + self.settle_timeout
        with retrying_until(deadline):
            while True:
                if pod.ready and (not restored or pod_restored(pod.obj)):
                    return pod
                if time.monotonic() > deadline:
                    self.log.warning(
                        "jupyter-pause: pod %s is not %s after %g s; cleaning up anyway",
                        pod.name,
                        "Ready and PodRestored" if restored else "Ready",
                        self.settle_timeout,
                    )
                    return pod
                await asyncio.sleep(self.poll_interval)
                pod = await self.kube.get_pod(pod.name)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scope": self.scope,
            "namespace": self._client.namespace if self._client else (self.namespace or None),
            "pod": self.pod_name or own_pod()[1],
        }
