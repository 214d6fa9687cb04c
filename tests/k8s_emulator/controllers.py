# ruff: noqa: B023  (the mutate callbacks run at once, inside their loop iteration)
"""Scripted controller behaviour for the emulator: what GKE and Kubeflow would do.

One background thread reconciles every ``tick`` seconds:

* **StatefulSet controller**: ``<sts>-0`` exists iff ``spec.replicas >= 1``;
  with ``quota_refuses`` it cannot create the pod (``FailedCreate ... exceeded
  quota``) -- the ResourceQuota case.
* **scheduler + cluster autoscaler + kubelet**: a Pending pod is scheduled
  unless ``capacity == "unavailable"`` (then ``PodScheduled=False
  Unschedulable``, ``FailedScheduling``, and ``TriggeredScaleUp`` or
  ``NotTriggerScaleUp``/``FailedScaleUp``), until ``capacity_after`` seconds;
  then Running and Ready; graceful deletion completes.  With
  ``Scenario.node_pool`` pods are bound to Node objects instead, and the
  autoscaler scales the pool up and down (``nodes.py``), on the cluster's clock.
* **GKE pod snapshots**: a ``PodSnapshotManualTrigger`` for a pod selected by
  a manual ``PodSnapshotPolicy`` produces a ``PodSnapshot`` (UUID name,
  ``gke-pod-snapshot-triggered-by`` label) ``AwaitingCheckpoint`` then
  ``Ready`` (``trigger_outcome``: ``complete | fail | never_ready |
  checkpoint_failed``); ``status.snapshotCreated`` as ``{name}`` or a string.
  A new pod matching a Ready snapshot is restored (``PodRestored``), or not
  (``restore == "cold"``: a silent cold start).  The snapshot finalizer
  deletes the bucket files through the policy, or orphans them when the policy
  is already gone.  Writes to ``PodSnapshot`` by anyone else are rejected (the
  GKE ValidatingAdmissionPolicy).
* **the frozen pod**: from the moment GKE starts a checkpoint until the
  snapshot is Ready, the target pod's processes are frozen: requests made
  with a token bound to it are held (``KubeEmulator.freeze``) and its
  readiness probe fails (``Ready=False``).  ``trigger_outcome == "hung"``
  never finishes and never thaws (the accelerated-platforms guide's hung GPU
  snapshots).  With the policy's ``postCheckpoint: stop`` the pod completes
  after the checkpoint (``Succeeded``): its process never runs again.
* **Kubeflow Workspace controller** (notebooks-v2 ``workspace_controller.go``):
  ``spec.paused`` drives a StatefulSet created with ``generateName:
  ws-<name>-`` and labelled ``notebooks.kubeflow.org/workspace-name``; each
  Workspace runs as its own ServiceAccount ``ws-<name>``, bound through one
  RoleBinding per WorkspaceKind ``spec.podTemplate.serviceAccount.clusterRoles``
  entry; ``status.state``/``stateMessage`` report ``Error`` for a StatefulSet
  warning event or an unschedulable pod.
* **the GKE Workspaces snapshot add-on** (gke-labs/workspaces
  ``providers/gke/internal/snapshot``): enabled by the annotation on the
  Workspace or its WorkspaceKind (case-insensitive; an explicit ``false`` on
  the Workspace wins; TPU pods never); its webhook mutates the pod (gVisor,
  readiness gate ``podsnapshot.gke.kubeflow.org/active``, the
  ``jupyter-ipc-config`` volume); a pause becomes a checkpoint with
  ``postCheckpoint: stop``; the gate is False while checkpointing and stays
  False after a failed trigger until ``checkpoint-state`` is removed.
* **garbage collector**: objects whose ``ownerReferences`` point at a deleted
  owner are deleted.
* ``restore_in_place``: when a snapshot becomes Ready, pretend that the
  pause, the node release and the resume all happened while the process was
  frozen: the pod is replaced (new UID, ``PodRestored``) -- the view of the
  copy of the process restored from that snapshot.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from . import server, volumes
from .nodes import NodePool, NodePoolController
from .server import ApiError, KubeEmulator, match_selector_obj, now_iso

#: kinds whose ownerReferences the garbage collector follows
OWNED_KINDS = (
    "StatefulSet",
    "Pod",
    "PodSnapshotManualTrigger",
    "ServiceAccount",
    "RoleBinding",
    "ConfigMap",
)

SNAP_FINALIZER = "podsnapshot.gke.io/podsnapshot-finalizer"
TRIGGERED_BY = "gke-pod-snapshot-triggered-by"
WS_LABEL = "notebooks.kubeflow.org/workspace-name"
ADDON = "podsnapshot.gke.kubeflow.org/"
ADDON_GATE = ADDON + "active"
IPC_VOLUME = "jupyter-ipc-config"


@dataclass
class Scenario:
    trigger_outcome: str = "complete"  # complete | fail | never_ready | checkpoint_failed | hung
    snapshot_created_shape: str = "object"  # object | string
    trigger_delay: float = 0.05
    ready_delay: float = 0.1
    restore: str = "restore"  # restore | cold
    capacity: str = "available"  # available | unavailable
    capacity_after: float | None = None  # seconds after the pod was created
    scale_up: str = "triggered"  # triggered | not_triggered | failed
    quota_refuses: bool = False
    pod_start_delay: float = 0.05
    pod_termination_delay: float = 0.05
    finalizer_delay: float = 0.1
    workspace_addon: bool = False
    restore_in_place: bool = False
    restored_condition_delay: float = 0.0  # PodRestored comes this long after Ready (lazy restore)
    #: GPU nodes under the cluster autoscaler (nodes.py); None: every pod lands on
    #: ``gke-gpu-pool-node-1``, a node without an object
    node_pool: NodePool | None = None


def _hash_spec(spec: dict) -> str:
    """The "distilled pod spec" a snapshot must match (containers, images, volumes, runtime)."""
    keep = {
        "containers": [
            {k: c.get(k) for k in ("name", "image", "command", "args")}
            for c in spec.get("containers") or []
        ],
        "runtimeClassName": spec.get("runtimeClassName"),
        "volumes": spec.get("volumes"),
    }
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def _set_condition(obj: dict, type_: str, status: str, reason: str = "", message: str = "") -> None:
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    for c in conds:
        if c.get("type") == type_:
            if (c.get("status"), c.get("reason"), c.get("message")) != (status, reason, message):
                c.update(
                    status=status, reason=reason, message=message, lastTransitionTime=now_iso()
                )
            return
    conds.append(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_iso(),
        }
    )


def _cond(obj: dict, type_: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


class Controllers:
    CONTROLLER = "system:controller"

    def __init__(self, emu: KubeEmulator, scenario: Scenario | None = None, tick: float = 0.01):
        self.emu = emu
        self.scenario = scenario or Scenario()
        self.tick = tick
        self.bucket: dict[str, str] = {}  # snapshot name -> gcs path ("files in the bucket")
        self.orphaned: list[str] = []  # files left in the bucket by a policy deleted first
        self.snapshot_meta: dict[str, dict[str, Any]] = {}  # name -> {hash, labels, pod, at}
        self.pod_born: dict[str, float] = {}  # pod uid -> creation time (monotonic)
        self.pod_restore: dict[str, str | None] = {}  # pod uid -> snapshot to restore from
        self.deleting: dict[str, float] = {}  # uid -> deletion seen
        self.trigger_seen: dict[str, float] = {}
        self.snap_created_at: dict[str, float] = {}
        self.restored_pods: list[str] = []
        self.errors: list[str] = []
        self.node_pool = (
            NodePoolController(emu, self.scenario.node_pool, self.event)
            if self.scenario.node_pool is not None
            else None
        )
        self.passes = 0  # reconcile passes completed (settle() waits on it)
        self._passes = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="k8s-controllers", daemon=True)
        emu.admission.append(self._admission)

    def start(self) -> Controllers:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as e:  # keep going; tests look at .errors
                self.errors.append(repr(e))
            with self._passes:
                self.passes += 1
                self._passes.notify_all()
            time.sleep(self.tick)

    def settle(self, passes: int = 3, timeout: float = 30.0) -> None:
        """Wait until ``passes`` more reconcile passes have run (after the clock moved)."""
        with self._passes:
            target = self.passes + passes
            if not self._passes.wait_for(lambda: self.passes >= target, timeout=timeout):
                raise AssertionError("the emulated controllers did not reconcile in time")

    # -- helpers --
    def event(
        self,
        ns: str,
        obj: dict,
        reason: str,
        message: str,
        type_: str = "Normal",
        component: str = "",
    ) -> None:
        meta = obj["metadata"]
        name = f"{meta['name']}.{hashlib.sha1((reason + message).encode()).hexdigest()[:10]}"
        # The scheduler writes through events.k8s.io/v1: in the core view the
        # first/lastTimestamp are null and eventTime (+ series) carry the time.
        new_api = component == "default-scheduler"
        existing = self.emu.find("Event", ns, name)
        if existing:

            def again(e):
                if new_api:
                    series = e.get("series") or {"count": 1}
                    e["series"] = {"count": series["count"] + 1, "lastObservedTime": now_iso()}
                else:
                    e.update(count=e.get("count", 1) + 1, lastTimestamp=now_iso())

            self.emu.mutate("Event", ns, name, again)
            return
        if new_api:
            self.emu.create(
                "Event",
                ns,
                {
                    "metadata": {"name": name},
                    "involvedObject": {
                        "kind": obj.get("kind"),
                        "name": meta["name"],
                        "namespace": ns,
                        "uid": meta.get("uid"),
                        "apiVersion": obj.get("apiVersion"),
                    },
                    "reason": reason,
                    "message": message,
                    "type": type_,
                    "eventTime": now_iso() + "",
                    "firstTimestamp": None,
                    "lastTimestamp": None,
                    "reportingComponent": component,
                    "action": "Scheduling",
                    "source": {},
                },
            )
            return
        self.emu.create(
            "Event",
            ns,
            {
                "metadata": {"name": name},
                "involvedObject": {
                    "kind": obj.get("kind"),
                    "name": meta["name"],
                    "namespace": ns,
                    "uid": meta.get("uid"),
                    "apiVersion": obj.get("apiVersion"),
                },
                "reason": reason,
                "message": message,
                "type": type_,
                "count": 1,
                "firstTimestamp": now_iso(),
                "lastTimestamp": now_iso(),
                "source": {"component": component or "emulator"},
            },
        )

    def _admission(self, verb, res, old, new, principal):
        if (
            res.kind == "PodSnapshot"
            and principal not in self.emu.controller_principals
            and verb in ("create", "update", "patch")
        ):
            raise ApiError(
                422,
                "Invalid",
                f'podsnapshots.podsnapshot.gke.io "{new.get("metadata", {}).get("name")}" is invalid: : '
                "ValidatingAdmissionPolicy 'gke-pod-snapshot-validating-admission-policy' denied request: "
                "only the GKE pod snapshot controller may write PodSnapshot objects",
            )
        if res.kind == "Workspace" and old is not None and self.addon_enabled(old):
            # the add-on's webhook: a pause of a running workspace becomes a checkpoint
            ann = (new.get("metadata") or {}).get("annotations") or {}
            was, now = bool(old["spec"].get("paused")), bool(new["spec"].get("paused"))
            if not was and now and ann.get(ADDON + "checkpoint-state") != "Ready":
                pods = self.emu.list(
                    "Pod", old["metadata"]["namespace"], f"{WS_LABEL}={old['metadata']['name']}"
                )
                if pods:
                    new["spec"]["paused"] = False
                    ann[ADDON + "checkpoint-state"] = "Checkpointing"
                    ann[ADDON + "checkpoint-started-at"] = now_iso()
                    new["metadata"]["annotations"] = ann
            if was and not now:
                ann[ADDON + "checkpoint-state"] = (
                    "Restoring"
                    if ann.get(ADDON + "last-checkpoint-name")
                    else ann.get(ADDON + "checkpoint-state", "")
                )
                new["metadata"]["annotations"] = ann
        return new

    # -- reconcile --
    def reconcile(self) -> None:
        self.workspaces()
        self.statefulsets()
        self.pods()
        if self.node_pool is not None:
            self.node_pool.reconcile()
        self.triggers()
        self.snapshots()
        self.garbage_collect()

    def workspace_kind(self, ws: dict) -> dict:
        return self.emu.find("WorkspaceKind", None, (ws.get("spec") or {}).get("kind", "")) or {}

    def addon_enabled(self, ws: dict) -> bool:
        """cache.go ``snapshotEnabled``: Workspace "false" > TPU > Workspace > WorkspaceKind."""
        if not self.scenario.workspace_addon:
            return False

        def flag(obj):
            ann = (obj.get("metadata") or {}).get("annotations") or {}
            for key in (ADDON + "enabled", "pod-migration.gke.io/enabled"):
                if key in ann:
                    return ann[key].strip().lower()
            return None

        mine = flag(ws)
        if mine == "false":
            return False
        options = ((ws.get("spec") or {}).get("podTemplate") or {}).get("options") or {}
        if "tpu" in str(options.get("podConfig", "")).lower():
            return False
        return mine == "true" or flag(self.workspace_kind(ws)) == "true"

    def _workspace_identity(self, ws: dict) -> str:
        """ServiceAccount ``ws-<name>`` and one RoleBinding per kind ``clusterRoles`` entry."""
        ns, name = ws["metadata"]["namespace"], ws["metadata"]["name"]
        sa = f"ws-{name}"
        owner = [
            {
                "apiVersion": "kubeflow.org/v1beta1",
                "kind": "Workspace",
                "name": name,
                "uid": ws["metadata"]["uid"],
                "controller": True,
            }
        ]
        if not self.emu.find("ServiceAccount", ns, sa):
            self.emu.create(
                "ServiceAccount",
                ns,
                {"metadata": {"name": sa, "labels": {WS_LABEL: name}, "ownerReferences": owner}},
            )
        kind = self.workspace_kind(ws)
        wanted = [
            r["name"]
            for r in ((kind.get("spec") or {}).get("podTemplate") or {})
            .get("serviceAccount", {})
            .get("clusterRoles", [])
        ]
        for role in wanted:
            rb = f"ws-{name}-{hashlib.sha1(role.encode()).hexdigest()[:8]}"
            if not self.emu.find("RoleBinding", ns, rb):
                self.emu.create(
                    "RoleBinding",
                    ns,
                    {
                        "metadata": {
                            "name": rb,
                            "labels": {WS_LABEL: name},
                            "ownerReferences": owner,
                        },
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "ClusterRole",
                            "name": role,
                        },
                        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
                    },
                )
        return sa

    def workspaces(self) -> None:
        for ws in self.emu.list("Workspace"):
            ns, name = ws["metadata"]["namespace"], ws["metadata"]["name"]
            paused = bool(ws["spec"].get("paused"))
            ann = ws["metadata"].get("annotations") or {}
            sa = self._workspace_identity(ws)
            found = self.emu.list("StatefulSet", ns, f"{WS_LABEL}={name}")
            sts = found[0] if found else None
            options = (ws["spec"].get("podTemplate") or {}).get("options") or {}
            image = f"ghcr.io/kubeflow/jupyterlab:{options.get('imageConfig', 'latest')}"
            gpu = {"nvidia.com/gpu": "1"}
            if "tpu" in str(options.get("podConfig", "")).lower():
                gpu = {"google.com/tpu": "4"}
            template = {
                "metadata": {"labels": {WS_LABEL: name}},
                "spec": {
                    "serviceAccountName": sa,
                    "nodeSelector": {"cloud.google.com/compute-class": "gpu-t4"},
                    "containers": [{"name": "main", "image": image, "resources": {"limits": gpu}}],
                },
            }
            if self.addon_enabled(ws):
                # what the add-on's pod webhook adds (webhook.go)
                template["spec"].update(
                    runtimeClassName="gvisor",
                    readinessGates=[{"conditionType": ADDON_GATE}],
                    volumes=[{"name": IPC_VOLUME, "configMap": {"name": IPC_VOLUME}}],
                )
            if ann.get(ADDON + "checkpoint-state") == "Restoring" and ann.get(
                ADDON + "last-checkpoint-name"
            ):
                template["metadata"]["annotations"] = {
                    "podsnapshot.gke.io/ps-name": ann.get(ADDON + "last-checkpoint-name")
                }
            replicas = 0 if paused else 1
            if sts is None:
                sts = self.emu.create(
                    "StatefulSet",
                    ns,
                    {
                        "metadata": {
                            "generateName": f"ws-{name}-",
                            "labels": {WS_LABEL: name},
                            "ownerReferences": [
                                {
                                    "apiVersion": "kubeflow.org/v1beta1",
                                    "kind": "Workspace",
                                    "name": name,
                                    "uid": ws["metadata"]["uid"],
                                    "controller": True,
                                }
                            ],
                        },
                        "spec": {
                            "replicas": replicas,
                            "selector": {"matchLabels": {WS_LABEL: name}},
                            "template": template,
                            "persistentVolumeClaimRetentionPolicy": {
                                "whenDeleted": "Retain",
                                "whenScaled": "Retain",
                            },
                        },
                    },
                )
            elif sts["spec"].get("replicas") != replicas or sts["spec"].get("template") != template:
                self.emu.mutate(
                    "StatefulSet",
                    ns,
                    sts["metadata"]["name"],
                    lambda s: s["spec"].update(replicas=replicas, template=template),
                )
            pods = self.emu.list("Pod", ns, f"{WS_LABEL}={name}")
            pod = pods[0] if pods else None
            state, message = self._workspace_state(ns, sts, pod, paused)
            status = {
                "state": state,
                "stateMessage": message,
                "podTemplatePod": (
                    {"name": pod["metadata"]["name"], "serviceAccountName": sa} if pod else {}
                ),
                "pauseTime": int(server.CLOCK.time()) if state == "Paused" else 0,
            }
            current = ws.get("status") or {}
            if any(
                current.get(k) != status[k] for k in ("state", "stateMessage", "podTemplatePod")
            ):
                self.emu.mutate(
                    "Workspace",
                    ns,
                    name,
                    lambda w: w.__setitem__("status", {**(w.get("status") or {}), **status}),
                )
            if self.addon_enabled(ws):
                self._addon(ws, pod)

    def _workspace_state(self, ns, sts, pod, paused) -> tuple[str, str]:
        """workspace_controller.go ``generateWorkspaceState`` (the parts we model)."""
        warnings = [
            e
            for e in self.emu.list("Event", ns)
            if e["involvedObject"].get("uid") == sts["metadata"]["uid"] and e["type"] == "Warning"
        ]
        if warnings and pod is None and not paused:
            return "Error", f"Workspace StatefulSet has warning event: {warnings[-1]['message']}"
        if pod is None:
            return ("Paused", "Workspace is paused") if paused else ("Pending", "")
        if pod["metadata"].get("deletionTimestamp"):
            return "Terminating", "Workspace Pod is terminating"
        scheduled = _cond(pod, "PodScheduled") or {}
        if scheduled.get("reason") == "Unschedulable":
            return "Error", f"Workspace Pod is unschedulable: {scheduled.get('message', '')}"
        if (_cond(pod, "Ready") or {}).get("status") == "True":
            return "Running", "Workspace is running"
        return "Pending", "Workspace Pod is not ready"

    def _set_gate(self, pod: dict | None, status: str, reason: str) -> None:
        if pod is None or (_cond(pod, ADDON_GATE) or {}).get("status") == status:
            return
        self.emu.mutate(
            "Pod",
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            lambda p: _set_condition(p, ADDON_GATE, status, reason),
        )

    def _addon(self, ws: dict, pod: dict | None) -> None:
        ns, name = ws["metadata"]["namespace"], ws["metadata"]["name"]
        ann = ws["metadata"].get("annotations") or {}
        state = ann.get(ADDON + "checkpoint-state")
        trigger = f"ws-{name}-trigger"
        if state == "Checkpointing" and pod is not None:
            self._set_gate(pod, "False", "CheckpointingInProgress")
            policy = f"ws-{name}-policy"
            if not self.emu.find("PodSnapshotPolicy", ns, policy):
                self.emu.create(
                    "PodSnapshotPolicy",
                    ns,
                    {
                        "metadata": {"name": policy},
                        "spec": {
                            "selector": {"matchLabels": {WS_LABEL: name}},
                            "storageConfigName": "kubeflow-pod-snapshot-storage-config",
                            "triggerConfig": {"type": "manual", "postCheckpoint": "stop"},
                            "retentionConfig": {"lastAccessTimeout": "7d"},
                        },
                    },
                )
            trig = self.emu.find("PodSnapshotManualTrigger", ns, trigger)
            if trig is None:
                self.emu.create(
                    "PodSnapshotManualTrigger",
                    ns,
                    {"metadata": {"name": trigger}, "spec": {"targetPod": pod["metadata"]["name"]}},
                )
                return
            # no branch for a failed trigger: reconcileCheckpointing never recovers
            created = (trig.get("status") or {}).get("snapshotCreated")
            snap_name = created.get("name") if isinstance(created, dict) else created
            snap = self.emu.find("PodSnapshot", ns, snap_name) if snap_name else None
            if snap and (_cond(snap, "Ready") or {}).get("status") == "True":

                def finish(w):
                    w["metadata"]["annotations"][ADDON + "last-checkpoint-name"] = snap_name
                    w["metadata"]["annotations"][ADDON + "checkpoint-state"] = "Ready"
                    w["spec"]["paused"] = True

                self.emu.mutate("Workspace", ns, name, finish)
        elif (
            state == "Restoring"
            and pod is not None
            and (_cond(pod, "Ready") or {}).get("status") != "True"
        ):
            if (_cond(pod, "ContainersReady") or {}).get("status") == "True":
                self._set_gate(pod, "True", "Restored")
        elif state == "Restoring" and pod is not None:
            for snap in self.emu.list("PodSnapshot", ns, f"{TRIGGERED_BY}={trigger}"):
                self._delete_snapshot(ns, snap["metadata"]["name"])
            trig = self.emu.find("PodSnapshotManualTrigger", ns, trigger)
            if trig:
                self.emu.store.delete(self.emu.resource("PodSnapshotManualTrigger"), ns, trigger)

            def clear(w):
                for k in ("checkpoint-state", "last-checkpoint-name", "checkpoint-started-at"):
                    w["metadata"]["annotations"].pop(ADDON + k, None)

            self.emu.mutate("Workspace", ns, name, clear)
        elif not state and pod is not None and not pod["metadata"].get("deletionTimestamp"):
            # reconcileActive: no checkpoint in progress, the gate opens
            self._set_gate(pod, "True", "Active")

    def garbage_collect(self) -> None:
        uids = set()
        objects = []
        for kind in ("Workspace", *OWNED_KINDS):
            for obj in self.emu.list(kind):
                uids.add(obj["metadata"]["uid"])
                objects.append((kind, obj))
        for kind, obj in objects:
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(r.get("uid") in uids for r in refs):
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                with contextlib.suppress(ApiError):
                    self.emu.store.delete(
                        self.emu.resource(kind),
                        obj["metadata"].get("namespace"),
                        obj["metadata"]["name"],
                        graceful=(kind == "Pod"),
                    )

    def _delete_snapshot(self, ns: str, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.emu.store.delete(self.emu.resource("PodSnapshot"), ns, name)

    def statefulsets(self) -> None:
        sc = self.scenario
        for sts in self.emu.list("StatefulSet"):
            ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
            want = int(sts["spec"].get("replicas", 1))
            pod_name = f"{name}-0"
            pod = self.emu.find("Pod", ns, pod_name)
            if want >= 1 and pod is None:
                if sc.quota_refuses:
                    self.event(
                        ns,
                        sts,
                        "FailedCreate",
                        f'create Pod {pod_name} in StatefulSet {name} failed error: pods "{pod_name}" is forbidden: '
                        "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, "
                        "limited: requests.nvidia.com/gpu=4",
                        "Warning",
                        "statefulset-controller",
                    )
                    continue
                self._create_pod(ns, sts, pod_name)
            elif want == 0 and pod is not None and not pod["metadata"].get("deletionTimestamp"):
                self.emu.store.delete(self.emu.resource("Pod"), ns, pod_name, graceful=True)
            ready = 1 if pod and (_cond(pod, "Ready") or {}).get("status") == "True" else 0
            replicas = 1 if pod else 0
            status = sts.get("status") or {}
            if status.get("replicas") != replicas or status.get("readyReplicas") != ready:
                self.emu.mutate(
                    "StatefulSet",
                    ns,
                    name,
                    lambda s: s.__setitem__(
                        "status", {"replicas": replicas, "readyReplicas": ready}
                    ),
                )

    def _create_pod(
        self, ns: str, sts: dict, pod_name: str, restored_from: str | None = None
    ) -> dict:
        template = sts["spec"].get("template") or {}
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels["statefulset.kubernetes.io/pod-name"] = pod_name
        spec = json.loads(json.dumps(template.get("spec") or {}))
        spec = {k: v for k, v in spec.items() if v is not None}
        claims = volumes.claim_volumes(self.emu, ns, sts, pod_name)
        if claims:
            spec["volumes"] = [*(spec.get("volumes") or []), *claims]
        pod = self.emu.create(
            "Pod",
            ns,
            {
                "metadata": {
                    "name": pod_name,
                    "labels": labels,
                    "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "StatefulSet",
                            "name": sts["metadata"]["name"],
                            "uid": sts["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": spec,
                "status": {"phase": "Pending", "conditions": []},
            },
        )
        uid = pod["metadata"]["uid"]
        self.pod_born[uid] = time.monotonic()
        self.pod_restore[uid] = restored_from or self._matching_snapshot(ns, pod)
        return pod

    def _matching_snapshot(self, ns: str, pod: dict) -> str | None:
        explicit = (pod["metadata"].get("annotations") or {}).get("podsnapshot.gke.io/ps-name")
        candidates = []
        for snap in self.emu.list("PodSnapshot", ns):
            meta = self.snapshot_meta.get(snap["metadata"]["name"])
            if meta is None or snap["metadata"].get("deletionTimestamp"):
                continue
            if (_cond(snap, "Ready") or {}).get("status") != "True":
                continue
            if explicit and snap["metadata"]["name"] != explicit:
                continue
            policy = self.emu.find("PodSnapshotPolicy", ns, snap["spec"].get("policyName", ""))
            if policy is None or not match_selector_obj(
                policy["spec"].get("selector"), pod["metadata"].get("labels") or {}
            ):
                continue
            if meta["hash"] != _hash_spec(pod.get("spec") or {}):
                continue
            candidates.append((meta["at"], snap["metadata"]["name"]))
        return max(candidates)[1] if candidates else None

    def pods(self) -> None:
        sc = self.scenario
        for pod in self.emu.list("Pod"):
            ns, name, uid = (
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                pod["metadata"]["uid"],
            )
            born = self.pod_born.setdefault(uid, time.monotonic())
            if pod["metadata"].get("deletionTimestamp"):
                seen = self.deleting.setdefault(uid, time.monotonic())
                if time.monotonic() - seen >= sc.pod_termination_delay:
                    self.emu.store.remove(self.emu.resource("Pod"), ns, name)
                continue
            phase = pod["status"].get("phase")
            scheduled = _cond(pod, "PodScheduled")
            if phase == "Pending" and not (scheduled and scheduled.get("status") == "True"):
                waited = time.monotonic() - born
                blocked = sc.capacity == "unavailable" and (
                    sc.capacity_after is None or waited < sc.capacity_after
                )
                if not blocked and self.node_pool is not None:
                    if self.node_pool.schedule(pod):
                        self.pod_born[uid] = time.monotonic()
                    continue
                if blocked:
                    msg = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
                    if not scheduled or scheduled.get("reason") != "Unschedulable":
                        self.emu.mutate(
                            "Pod",
                            ns,
                            name,
                            lambda p: _set_condition(
                                p, "PodScheduled", "False", "Unschedulable", msg
                            ),
                        )
                        self.event(ns, pod, "FailedScheduling", msg, "Warning", "default-scheduler")
                        if sc.scale_up == "triggered":
                            self.event(
                                ns,
                                pod,
                                "TriggeredScaleUp",
                                "pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroups/gke-gpu-pool 0->1 (max: 4)}]",
                                "Normal",
                                "cluster-autoscaler",
                            )
                        elif sc.scale_up == "not_triggered":
                            self.event(
                                ns,
                                pod,
                                "NotTriggerScaleUp",
                                "pod didn't trigger scale-up: 1 max node group size reached",
                                "Normal",
                                "cluster-autoscaler",
                            )
                        elif sc.scale_up == "failed":
                            self.event(
                                ns,
                                pod,
                                "FailedScaleUp",
                                "Node scale up in zones us-central1-a associated with this pod failed: GCE quota exceeded. Pod is at risk of not being scheduled.",
                                "Warning",
                                "cluster-autoscaler",
                            )
                    continue

                def schedule(p):
                    _set_condition(p, "PodScheduled", "True")
                    p["spec"]["nodeName"] = "gke-gpu-pool-node-1"

                self.emu.mutate("Pod", ns, name, schedule)
                self.event(
                    ns,
                    pod,
                    "Scheduled",
                    f"Successfully assigned {ns}/{name} to gke-gpu-pool-node-1",
                    "Normal",
                    "default-scheduler",
                )
                self.pod_born[uid] = time.monotonic()
                continue
            if phase == "Running":
                self._readiness(pod)
                continue
            if phase == "Pending" and time.monotonic() - born >= sc.pod_start_delay:
                snap = self.pod_restore.get(uid) if sc.restore == "restore" else None

                def run(p, snap=snap):
                    p["status"]["phase"] = "Running"
                    _set_condition(p, "Initialized", "True")
                    _set_condition(p, "ContainersReady", "True")
                    _set_condition(p, "Ready", "True" if self._gates_open(p) else "False")
                    p["status"]["containerStatuses"] = [
                        {
                            "name": c["name"],
                            "image": c.get("image"),
                            "imageID": f"{c.get('image')}@sha256:{'0' * 64}",
                            "ready": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": now_iso()}},
                        }
                        for c in p["spec"].get("containers") or []
                    ]
                    if snap:
                        self._mark_restored(p, snap)

                self.emu.mutate("Pod", ns, name, run)
                if snap:
                    self.restored_pods.append(name)
                    self.emu.store.mutate(
                        self.emu.resource("PodSnapshot"),
                        ns,
                        snap,
                        lambda s: s["status"].__setitem__("lastAccessTime", now_iso()),
                    )

    @staticmethod
    def _gates_open(pod: dict) -> bool:
        gates = (pod.get("spec") or {}).get("readinessGates") or []
        return all((_cond(pod, g["conditionType"]) or {}).get("status") == "True" for g in gates)

    def _readiness(self, pod: dict) -> None:
        """The kubelet's Ready: probes pass (not frozen) and every readiness gate is True."""
        ready = pod["metadata"]["uid"] not in self.emu.frozen and self._gates_open(pod)
        want = "True" if ready else "False"
        if (_cond(pod, "Ready") or {}).get("status") != want:
            self.emu.mutate(
                "Pod",
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                lambda p: _set_condition(p, "Ready", want, "" if ready else "ReadinessProbeFailed"),
            )

    def _mark_restored(self, pod: dict, snap: str) -> None:
        """Set PodRestored now, or later (lazy restore: after Ready)."""
        ns = pod["metadata"]["namespace"]
        snap_obj = self.emu.find("PodSnapshot", ns, snap)
        snap_uid = snap_obj["metadata"]["uid"] if snap_obj else snap
        message = f"Pod restored from snapshot {snap_uid}"
        delay = self.scenario.restored_condition_delay
        if delay <= 0:
            _set_condition(pod, "PodRestored", "True", "Restored", message)
            return
        name = pod["metadata"]["name"]

        def later():
            if not self._stop.wait(delay):
                self.emu.mutate(
                    "Pod",
                    ns,
                    name,
                    lambda p: _set_condition(p, "PodRestored", "True", "Restored", message),
                )

        threading.Thread(target=later, daemon=True).start()

    def triggers(self) -> None:
        sc = self.scenario
        for trig in self.emu.list("PodSnapshotManualTrigger"):
            ns, name = trig["metadata"]["namespace"], trig["metadata"]["name"]
            if trig.get("status"):
                continue
            seen = self.trigger_seen.setdefault(trig["metadata"]["uid"], time.monotonic())
            if time.monotonic() - seen < sc.trigger_delay:
                continue
            target = trig["spec"]["targetPod"]
            pod = self.emu.find("Pod", ns, target)
            policy = None
            if pod is not None:
                for p in self.emu.list("PodSnapshotPolicy", ns):
                    if p["spec"].get("triggerConfig", {}).get(
                        "type"
                    ) == "manual" and match_selector_obj(
                        p["spec"].get("selector"), pod["metadata"].get("labels") or {}
                    ):
                        policy = p
                        break
            if pod is None or policy is None or sc.trigger_outcome == "fail":
                if pod is None:
                    msg = f"pod {target} not found"
                elif policy is None:
                    msg = f"no PodSnapshotPolicy with a manual trigger selects pod {target}"
                else:
                    msg = "checkpoint failed: runsc error: exit status 128"

                def failed(t, msg=msg):
                    t["status"] = {"observedGeneration": 1}
                    _set_condition(t, "Triggered", "False", "Failed", msg)

                self.emu.mutate("PodSnapshotManualTrigger", ns, name, failed)
                continue
            snap_name = str(uuid.uuid4())
            res = self.emu.resource("PodSnapshot")
            try:
                self._create_snapshot_object(res, ns, snap_name, name, policy)
            except ApiError as e:  # e.g. a trigger name that is not a valid label value

                def refused(t, msg=e.message):
                    t["status"] = {"observedGeneration": 1}
                    _set_condition(t, "Triggered", "False", "Error", msg)

                self.emu.mutate("PodSnapshotManualTrigger", ns, name, refused)
                continue
            # the checkpoint starts: the pod's processes are frozen
            self.emu.freeze(pod["metadata"]["uid"])
            self.snapshot_meta[snap_name] = {
                "hash": _hash_spec(pod.get("spec") or {}),
                "pod": target,
                "pod_uid": pod["metadata"]["uid"],
                "at": time.monotonic(),
                "sts": self._owner(pod),
                "policy": policy["metadata"]["name"],
            }
            self.snap_created_at[snap_name] = time.monotonic()
            created: Any = (
                {"name": snap_name} if sc.snapshot_created_shape == "object" else snap_name
            )

            def complete(t, created=created):
                t["status"] = {"observedGeneration": 1, "snapshotCreated": created}
                _set_condition(t, "Triggered", "True", "Complete", "")

            self.emu.mutate("PodSnapshotManualTrigger", ns, name, complete)

    def _create_snapshot_object(self, res, ns, snap_name, trigger, policy) -> None:
        self.emu.store.create(
            res,
            ns,
            {
                "metadata": {
                    "name": snap_name,
                    "labels": {TRIGGERED_BY: trigger},
                    "finalizers": [SNAP_FINALIZER],
                },
                "spec": {"policyName": policy["metadata"]["name"]},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "AwaitingCheckpoint",
                            "message": "",
                            "lastTransitionTime": now_iso(),
                        },
                        {
                            "type": "Checkpoint",
                            "status": "False",
                            "reason": "AwaitingCheckpoint",
                            "message": "",
                            "lastTransitionTime": now_iso(),
                        },
                    ]
                },
            },
        )

    @staticmethod
    def _owner(pod: dict) -> str | None:
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "StatefulSet":
                return ref["name"]
        return None

    def snapshots(self) -> None:
        sc = self.scenario
        res = self.emu.resource("PodSnapshot")
        for snap in self.emu.list("PodSnapshot"):
            ns, name = snap["metadata"]["namespace"], snap["metadata"]["name"]
            if snap["metadata"].get("deletionTimestamp"):
                seen = self.deleting.setdefault(snap["metadata"]["uid"], time.monotonic())
                if time.monotonic() - seen < sc.finalizer_delay:
                    continue
                # The finalizer finds the bucket through spec.policyName -> policy -> storage config.
                policy = self.emu.find("PodSnapshotPolicy", ns, snap["spec"].get("policyName", ""))
                path = self.bucket.pop(name, None)
                if policy is None and path:
                    self.orphaned.append(path)
                self.emu.store.mutate(
                    res, ns, name, lambda s: s["metadata"].__setitem__("finalizers", [])
                )
                continue
            ready = _cond(snap, "Ready") or {}
            if ready.get("status") == "True":
                continue
            born = self.snap_created_at.setdefault(name, time.monotonic())
            if time.monotonic() - born < sc.ready_delay:
                continue
            meta = self.snapshot_meta.get(name) or {}
            if sc.trigger_outcome == "hung":
                continue  # frozen for good: neither the snapshot nor the pod moves again
            if sc.trigger_outcome == "never_ready":
                # the checkpoint ended (the pod runs again) but the upload never completes
                self.emu.thaw(meta.get("pod_uid", ""))
                continue
            if sc.trigger_outcome == "checkpoint_failed":
                self.emu.thaw(meta.get("pod_uid", ""))
                if (_cond(snap, "Checkpoint") or {}).get("reason") != "Failed":
                    self.emu.store.mutate(
                        res,
                        ns,
                        name,
                        lambda s: _set_condition(
                            s, "Checkpoint", "False", "Failed", "runsc error: exit status 128"
                        ),
                    )
                continue

            def ready_now(s):
                _set_condition(s, "Ready", "True", "AllSnapshotsAvailable", "")
                _set_condition(s, "Checkpoint", "True", "Succeeded", "")
                s["status"]["storageStatus"] = {
                    "gcs": {"observedGCSPath": f"gs://snapshots/{ns}/{name}/"}
                }

            self.emu.store.mutate(res, ns, name, ready_now)
            self.bucket[name] = f"gs://snapshots/{ns}/{name}/"
            policy = self.emu.find("PodSnapshotPolicy", ns, meta.get("policy", "")) or {}
            post = ((policy.get("spec") or {}).get("triggerConfig") or {}).get("postCheckpoint")
            if post == "stop":
                self._complete_pod(ns, meta)
            elif sc.restore_in_place:
                self._restore_in_place(ns, name)
            else:
                self.emu.thaw(meta.get("pod_uid", ""))

    def _complete_pod(self, ns: str, meta: dict) -> None:
        """``postCheckpoint: stop``: the pod turns to Completed; its process never runs again."""

        def completed(p):
            if p["metadata"]["uid"] != meta.get("pod_uid"):
                return
            p["status"]["phase"] = "Succeeded"
            _set_condition(p, "Ready", "False", "PodCompleted")
            for cs in p["status"].get("containerStatuses") or []:
                cs["ready"] = False
                cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}

        self.emu.mutate("Pod", ns, meta.get("pod", ""), completed)
        self.emu.thaw(meta.get("pod_uid", ""))  # held requests now meet a dead pod (401)

    def _restore_in_place(self, ns: str, snap_name: str) -> None:
        meta = self.snapshot_meta.get(snap_name) or {}
        pod_name, sts_name = meta.get("pod"), meta.get("sts")
        if not pod_name or not sts_name:
            return
        sts = self.emu.find("StatefulSet", ns, sts_name)
        if sts is None:
            return
        self.emu.store.remove(self.emu.resource("Pod"), ns, pod_name)
        pod = self._create_pod(ns, sts, pod_name, restored_from=snap_name)
        self.emu.thaw(meta.get("pod_uid", ""))
        self.emu.rebind(meta.get("pod_uid", ""), pod["metadata"]["uid"])

        def running(p):
            _set_condition(p, "PodScheduled", "True")
            p["spec"]["nodeName"] = "gke-gpu-pool-node-2"
            p["status"]["phase"] = "Running"
            _set_condition(p, "Ready", "True")
            self._mark_restored(p, snap_name)

        self.emu.mutate("Pod", ns, pod["metadata"]["name"], running)
        self.restored_pods.append(pod_name)
