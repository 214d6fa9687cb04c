"""Where a workspace is in its pause lifecycle, as seen from the Kubernetes API.

Shared by ``jupyter pause status`` (outside the pod) and the backends.  The
inputs are the owner (a Kubeflow ``Workspace`` or the pod's ``StatefulSet``)
with the annotations the backends write, the pod (if any) and the events of
the pod and of the StatefulSet.  States:

``running``, ``checkpointing``, ``snapshotting``, ``paused``,
``waiting-for-capacity`` (the pod is Pending and unschedulable: the scheduler's
reason, and whether the cluster autoscaler triggered a scale-up or could not),
``restoring``, ``ready`` (resumed; ``restored_from`` says how), ``starting``
(a pod that was never paused is starting), ``failed``.

``snapshotting`` comes with ``since``, read from the objects (the trigger's
creation, the add-on's ``checkpoint-started-at``), not from the process in
the pod: that process is frozen while GKE checkpoints it, and a hung
checkpoint can only be seen, and aborted, from outside.  A Kubeflow
Workspace's own ``status.state``/``stateMessage`` is read too: its controller
reports quota refusals and unschedulable pods there.

What there is in a namespace is read here too: the workspaces jupyter-pause
manages (:func:`managed`), and for ``jupyter pause list`` their pod snapshots
and the application checkpoints their annotations record (:func:`listing`).
The CLI (:mod:`jupyter_pause.commands.kube`) only prints them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .client import Forbidden, KubeClient, KubeError, NotFound
from .common import (
    A_CHECKPOINTS,
    A_MESSAGE,
    A_PAUSED_AT,
    A_RESTORED_FROM,
    A_RESUME_AT,
    A_RESUME_OP,
    A_STATE,
    A_TRIGGER,
    ADDON_STARTED,
    ADDON_STATE,
    STATEFULSET_LABEL,
    TRIGGER_PREFIX,
    TRIGGERED_BY_LABEL,
    WORKSPACE_LABEL,
    addon_trigger_name,
    annotations,
    condition,
    condition_true,
    event_time,
    json_annotation,
    parse_time,
    pod_restored,
    state_configmap,
    trigger_name_for,
)
from .gc import snapshot_age
from .objects import snapshot_created

SCALE_UP_TRIGGERED = "TriggeredScaleUp"
SCALE_UP_FAILED = ("NotTriggerScaleUp", "FailedScaleUp")
BAD_WAITING = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerError")


@dataclass
class WorkspaceStatus:
    name: str
    kind: str  # "Workspace" | "StatefulSet"
    state: str
    reason: str = ""
    pod: str | None = None
    since: float | None = None
    scale_up: str | None = None  # "triggered" | "failed" | None
    restored_from: str | None = None
    resume_operation: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = None  # a scheduled resume (``A_RESUME_AT``)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _latest(events: list[dict], reasons) -> dict | None:
    chosen = [e for e in events if e.get("reason") in reasons]
    return max(chosen, key=lambda e: event_time(e) or 0) if chosen else None


def capacity_state(pod: dict, events: list[dict]) -> dict[str, Any] | None:
    """For a Pending pod that cannot be scheduled: reason, since, scale-up outcome."""
    sched = condition(pod, "PodScheduled")
    unschedulable = (
        bool(sched) and sched.get("status") == "False" and sched.get("reason") == "Unschedulable"
    )
    failed = _latest(events, ("FailedScheduling",))
    if not unschedulable and not failed:
        return None
    if sched and sched.get("status") == "True":
        return None
    reason = (failed or {}).get("message") or (sched or {}).get("message") or "unschedulable"
    firsts = [event_time(e, first=True) for e in events if e.get("reason") == "FailedScheduling"]
    since = (
        min([t for t in firsts if t] or [parse_time((sched or {}).get("lastTransitionTime")) or 0])
        or None
    )
    scale_up, scale_msg = None, ""
    latest_scale = _latest(events, (SCALE_UP_TRIGGERED, *SCALE_UP_FAILED))
    if latest_scale:
        scale_up = "triggered" if latest_scale["reason"] == SCALE_UP_TRIGGERED else "failed"
        scale_msg = latest_scale.get("message", "")
    return {"reason": reason, "since": since, "scale_up": scale_up, "scale_up_message": scale_msg}


def derive(
    name: str,
    kind: str,
    owner: dict,
    pod: dict | None,
    pod_events: list[dict] | None = None,
    owner_events: list[dict] | None = None,
    trigger: dict | None = None,
    snapshot: dict | None = None,
    state: dict | None = None,
) -> WorkspaceStatus:
    """The state of one workspace from its objects (pure; see the module doc).

    ``state`` holds jupyter-pause's annotations (default: the owner);
    ``trigger`` and ``snapshot`` are the snapshot trigger in progress (ours,
    or the add-on's) and its PodSnapshot, when there are any.
    """
    ann = annotations(owner if state is None else state)
    mine = ann.get(A_STATE, "")
    message = ann.get(A_MESSAGE, "")
    resume_op = json_annotation(owner if state is None else state, A_RESUME_OP)
    addon = annotations(owner).get(ADDON_STATE, "")
    paused = pause_intent(kind, owner)
    st = WorkspaceStatus(
        name=name,
        kind=kind,
        state="running",
        pod=(pod or {}).get("metadata", {}).get("name"),
        resume_operation=resume_op,
        restored_from=ann.get(A_RESTORED_FROM) if mine == "ready" else None,
    )
    st.detail["annotation_state"] = mine or None
    if resume_op:
        st.detail["resume_started"] = resume_op.get("started")
    pod_events = pod_events or []
    owner_events = owner_events or []

    def done(state: str, reason: str = "", since: float | None = None) -> WorkspaceStatus:
        st.state, st.reason, st.since = state, reason, since
        return st

    if pod is None:
        if paused:
            if mine == "failed":
                return done("failed", message)
            return done(
                "paused", message if mine == "paused" else "", parse_time(ann.get(A_PAUSED_AT))
            )
        ws_status = owner.get("status") or {}
        if kind == "Workspace" and ws_status.get("state") == "Error":
            return done("failed", ws_status.get("stateMessage") or "the Workspace is in Error")
        quota = _latest(owner_events, ("FailedCreate",))
        if quota:
            return done(
                "failed",
                f"the pod cannot be created: {quota.get('message', '')}",
                event_time(quota),
            )
        return done("restoring", "waiting for the pod to be created")

    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    if meta.get("deletionTimestamp"):
        if mine in ("snapshotting", "paused") or paused:
            return done("paused", "the pod is stopping")
        return done("restoring", "the pod is being replaced")
    if addon == "Checkpointing" or mine == "snapshotting":
        return _snapshotting(st, done, ann, pod, trigger, snapshot, message)
    if mine == "checkpointing":
        return done("checkpointing", message)
    if phase == "Failed":
        return done("failed", status.get("message") or status.get("reason") or "the pod failed")
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in BAD_WAITING:
            return done("failed", f"{waiting['reason']}: {waiting.get('message', '')}".strip(": "))
    resuming = bool(resume_op) or mine == "resuming" or addon == "Restoring"
    if phase == "Pending":
        cap = capacity_state(pod, pod_events)
        if cap:
            st.scale_up = cap["scale_up"]
            st.detail["scale_up_message"] = cap["scale_up_message"]
            return done("waiting-for-capacity", cap["reason"], cap["since"])
        return done("restoring" if resuming else "starting", "the pod is starting")
    ready = condition(pod, "Ready")
    if not (ready and ready.get("status") == "True"):
        return done("restoring" if resuming else "starting", "the pod is not ready yet")
    if paused:
        return done("paused", "stopping")
    if mine == "resuming" or (resume_op and mine != "ready"):
        st.detail["pod_restored"] = bool(pod_restored(pod))
        return done("restoring", "the server is starting its notebooks")
    if mine == "ready":
        return done("ready", message)
    if mine == "failed":
        st.detail["last_error"] = message
        return done("running", f"the last pause failed: {message}")
    return done("running")


def _snapshotting(st, done, ann, pod, trigger, snapshot, message) -> WorkspaceStatus:
    """``snapshotting since T``, with what the objects say about the checkpoint."""
    since = (
        parse_time(((trigger or {}).get("metadata") or {}).get("creationTimestamp"))
        or parse_time(ann.get(ADDON_STARTED))
        or parse_time(ann.get(A_PAUSED_AT))
    )
    if trigger:
        st.detail["trigger"] = trigger["metadata"]["name"]
        triggered = condition(trigger, "Triggered")
        if triggered and triggered.get("status") == "False":
            st.detail["trigger_failed"] = triggered.get("message") or triggered.get("reason")
    if snapshot:
        st.detail["snapshot"] = snapshot["metadata"]["name"]
        st.detail["snapshot_ready"] = condition_true(snapshot, "Ready")
    if not condition_true(pod, "Ready"):
        # probes fail while the processes are frozen by the checkpoint
        st.detail["pod_ready"] = False
    reason = message or "taking the pod snapshot"
    if st.detail.get("trigger_failed"):
        reason = f"the snapshot trigger failed: {st.detail['trigger_failed']}"
    return done("snapshotting", reason, since)


def find_owner(client: KubeClient, name: str, kind: str = "auto") -> tuple[str, dict]:
    """``("Workspace", ws)`` or ``("StatefulSet", sts)`` named ``name``.

    A 403 on Workspaces is treated like a 404: the API server authorizes
    before it routes, so a caller without access to Workspaces (plain GKE)
    is told "forbidden" whether or not the kind exists.
    """
    if kind in ("auto", "workspace"):
        try:
            return "Workspace", client.get_workspace(name)
        except (NotFound, Forbidden):
            if kind == "workspace":
                raise
    return "StatefulSet", client.get_statefulset(name)


def find_pod(client: KubeClient, kind: str, name: str, owner: dict) -> dict | None:
    if kind == "Workspace":
        pods = client.list_pods(f"{WORKSPACE_LABEL}={name}")
        pods.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
        return pods[-1] if pods else None
    try:
        return client.get_pod(f"{name}-0")
    except NotFound:
        return None


def state_of(client: KubeClient, kind: str, name: str, owner: dict) -> dict:
    """The object that holds jupyter-pause's annotations (see :mod:`.common`)."""
    if kind == "Workspace":
        return owner
    try:
        return client.get_configmap(state_configmap(name))
    except (NotFound, Forbidden):
        return {"metadata": {"name": state_configmap(name), "annotations": {}}}


def patch_state(client: KubeClient, kind: str, name: str, patch) -> dict:
    """Patch jupyter-pause's annotations (include ``metadata.resourceVersion`` to CAS)."""
    if kind == "Workspace":
        return client.patch_workspace(name, patch)
    return client.patch_configmap(state_configmap(name), patch)


def fetch(client: KubeClient, name: str, kind: str = "auto") -> WorkspaceStatus:
    """Read the objects and derive the status of one workspace."""
    kind, owner = find_owner(client, name, kind)
    state = state_of(client, kind, name, owner)
    pod = find_pod(client, kind, name, owner)
    pod_events = client.list_events(pod["metadata"]["name"], "Pod") if pod else []
    owner_events: list[dict] = []
    sts = statefulset_name(client, kind, name)
    if pod is None and not pause_intent(kind, owner) and sts:
        owner_events = client.list_events(sts, "StatefulSet")
    trigger = snapshot = None
    if pod is not None and (
        annotations(state).get(A_STATE) == "snapshotting"
        or annotations(owner).get(ADDON_STATE) == "Checkpointing"
    ):
        trigger, snapshot = _snapshot_objects(client, kind, name, state)
    st = derive(name, kind, owner, pod, pod_events, owner_events, trigger, snapshot, state)
    st.detail["statefulset"] = sts
    st.schedule = json_annotation(state, A_RESUME_AT)
    return st


def trigger_of(kind: str, name: str, owner: dict) -> str:
    """The snapshot trigger of a workspace: ours (plain GKE) or the add-on's."""
    if kind == "Workspace":
        return addon_trigger_name(name)
    return annotations(owner).get(A_TRIGGER) or trigger_name_for(name)


def _snapshot_objects(client: KubeClient, kind: str, name: str, owner: dict):
    """The trigger and its PodSnapshot, when the caller may read them (else ``None``)."""
    try:
        trigger = client.get_trigger(trigger_of(kind, name, owner))
    except (NotFound, Forbidden):
        return None, None
    snapshot = None
    created = snapshot_created(trigger)
    if created:
        try:
            snapshot = client.get_snapshot(created)
        except (NotFound, Forbidden):
            snapshot = None
    return trigger, snapshot


def pause_intent(kind: str, owner: dict) -> bool:
    """Whether the owner's spec says paused: a Workspace's ``paused``, a StatefulSet's
    zero replicas."""
    spec = owner.get("spec") or {}
    if kind == "Workspace":
        return bool(spec.get("paused"))
    return int(spec.get("replicas", 1) or 0) == 0


def statefulset_name(client: KubeClient, kind: str, name: str) -> str | None:
    """The StatefulSet that runs a workspace.

    A Workspace's is created with ``generateName`` (``ws-<name>-<random>``), so
    it is found by the controller's label, not by name.
    """
    if kind != "Workspace":
        return name
    found = client.list_statefulsets(f"{WORKSPACE_LABEL}={name}")
    return found[0]["metadata"]["name"] if found else None


# -- what there is in a namespace (``jupyter pause status | list | scheduler``) --------


@dataclass(frozen=True)
class Managed:
    """A workspace jupyter-pause can see: a Kubeflow Workspace, or a StatefulSet
    whose state ConfigMap holds jupyter-pause's annotations."""

    kind: str  # "Workspace" | "StatefulSet"
    name: str
    #: the object with jupyter-pause's annotations (the Workspace, the ConfigMap)
    state: dict[str, Any]


def managed(client: KubeClient) -> tuple[list[Managed], list[str]]:
    """Every workspace in the client's namespace, and warnings about what could not be listed."""
    found: list[Managed] = []
    warnings: list[str] = []
    try:
        for ws in client.list_workspaces():
            found.append(Managed("Workspace", ws["metadata"]["name"], ws))
    except (NotFound, Forbidden):
        pass  # no Kubeflow Workspaces on this cluster (or none for this caller)
    except KubeError as e:
        warnings.append(f"cannot list Workspaces: {e}")
    for cm in client.list_configmaps(STATEFULSET_LABEL):
        if A_STATE in annotations(cm):
            found.append(Managed("StatefulSet", cm["metadata"]["labels"][STATEFULSET_LABEL], cm))
    return found, warnings


@dataclass
class SnapshotRow:
    """One PodSnapshot, for ``jupyter pause list``."""

    name: str
    workspace: str  # "-" when no trigger of ours or of the add-on made it
    trigger: str | None
    policy: str | None
    state: str  # "Terminating", the Ready condition's reason or status, or "-"
    ready: bool
    created: str | None
    age_seconds: float
    idle_seconds: float
    last_access: str | None
    location: str | None
    #: the PodSnapshot API does not report a size; it is in the bucket
    bytes: int | None = None


@dataclass
class CheckpointRow:
    """One paused notebook's application checkpoint, as its workspace's annotation records it."""

    workspace: str
    kind: str
    state: str | None
    notebook: str | None
    id: str | None
    bytes: int | None
    age_seconds: float | None


@dataclass
class Listing:
    namespace: str
    snapshots: list[SnapshotRow]
    checkpoints: list[CheckpointRow]
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "snapshots": [asdict(s) for s in self.snapshots],
            "checkpoints": [asdict(c) for c in self.checkpoints],
        }


def snapshot_workspace(snap: dict) -> str:
    """The workspace a PodSnapshot is of, from the trigger that made it (``-``: unknown)."""
    trig = ((snap.get("metadata") or {}).get("labels") or {}).get(TRIGGERED_BY_LABEL, "")
    if trig.startswith(TRIGGER_PREFIX):
        return trig[len(TRIGGER_PREFIX) :]
    if trig.startswith("ws-") and trig.endswith("-trigger"):
        return trig[3 : -len("-trigger")]
    return "-"


def snapshot_row(snap: dict, now: float) -> SnapshotRow:
    meta, st = snap["metadata"], snap.get("status") or {}
    ready = condition(snap, "Ready") or {}
    state = (
        "Terminating"
        if meta.get("deletionTimestamp")
        else (ready.get("reason") or ready.get("status") or "-")
    )
    return SnapshotRow(
        name=meta["name"],
        workspace=snapshot_workspace(snap),
        trigger=(meta.get("labels") or {}).get(TRIGGERED_BY_LABEL),
        policy=(snap.get("spec") or {}).get("policyName"),
        state=state,
        ready=ready.get("status") == "True",
        created=meta.get("creationTimestamp"),
        age_seconds=now - (parse_time(meta.get("creationTimestamp")) or now),
        idle_seconds=snapshot_age(snap, now),
        last_access=st.get("lastAccessTime"),
        location=((st.get("storageStatus") or {}).get("gcs") or {}).get("observedGCSPath"),
    )


def checkpoint_rows(owner: Managed, now: float) -> list[CheckpointRow]:
    rows = []
    for ck in json_annotation(owner.state, A_CHECKPOINTS) or []:
        t = ck.get("time")
        t = parse_time(t) if isinstance(t, str) else t
        rows.append(
            CheckpointRow(
                workspace=owner.name,
                kind=owner.kind,
                state=annotations(owner.state).get(A_STATE),
                notebook=ck.get("path"),
                id=ck.get("id"),
                bytes=ck.get("bytes"),
                age_seconds=(now - t) if t else None,
            )
        )
    return rows


def listing(client: KubeClient, now: float) -> Listing:
    """The pod snapshots and the paused notebooks' checkpoints in the client's namespace."""
    try:
        items = client.list_snapshots()
    except NotFound:
        items = []  # Pod Snapshots not enabled
    owners, warnings = managed(client)
    return Listing(
        namespace=client.namespace,
        snapshots=[snapshot_row(snap, now) for snap in items],
        checkpoints=[row for owner in owners for row in checkpoint_rows(owner, now)],
        warnings=warnings,
    )
