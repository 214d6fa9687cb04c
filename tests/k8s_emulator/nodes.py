"""GPU nodes, the scheduler's binding and the cluster autoscaler, for the emulator.

Modelled on what the real components do, as read in their sources:

* **Nodes** (core/v1, cluster-scoped): labels ``cloud.google.com/gke-nodepool``,
  ``cloud.google.com/gke-accelerator``, ``cloud.google.com/compute-class``;
  ``status.allocatable["nvidia.com/gpu"]``; ``spec.unschedulable`` (cordon) and
  ``spec.taints``.
* **The scheduler** binds a Pending pod to the first node (by name) whose labels
  match its ``nodeSelector``, that is Ready, not cordoned, without a
  ``NoSchedule`` taint, and with enough unallocated ``nvidia.com/gpu`` (the sum
  of the requests of the pods bound to it that have not ended): it sets
  ``spec.nodeName`` and ``PodScheduled=True`` and emits ``Scheduled``.
* **Scale-up**: no node fits and the pool is below ``max_nodes``:
  ``FailedScheduling`` + ``TriggeredScaleUp``; the node joins
  ``scale_up_seconds`` later on the cluster's clock.  At ``max_nodes``:
  ``NotTriggerScaleUp`` ("max node group size reached").
* **Scale-down** (cluster-autoscaler ``core/scaledown``; FAQ "What types of pods
  can prevent CA from removing a node?"): a node is *unneeded* when its
  utilization is under ``--scale-down-gpu-utilization-threshold`` (0.5: GPUs
  requested by pods other than DaemonSet and mirror pods over allocatable) and
  every such pod could move elsewhere (owned by a controller, not
  ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``, and another node
  has room for it) -- in particular when none is left.  While
  unneeded it carries the soft taint ``DeletionCandidateOfClusterAutoscaler=<unix
  time>:PreferNoSchedule``; after ``scale_down_unneeded_time`` (10 min, the
  autoscaler's default) it is tainted ``ToBeDeletedByClusterAutoscaler=<unix
  time>:NoSchedule`` (utils/taints ``MarkToBeDeleted``), gets the Event
  ``ScaleDown`` "marked the node as toBeDeleted/unschedulable", its movable
  pods are evicted ("deleting pod for node scale down"), and the node is
  deleted, with ``ScaleDown`` on ``kube-system/cluster-autoscaler-status``
  ("Scale-down: removing empty node X" / "Scale-down: node X removed with
  drain").  ``min_nodes`` and the node annotation
  ``cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`` keep nodes.

:class:`NodeBook` is the emulator's own bookkeeping, kept from the objects it
changes and independent of anything the code under test records: when each
node existed, and which pod held how many of its GPUs when.  Tests compare the
ledger's accounting with it.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

from . import server, volumes
from .server import ApiError, KubeEmulator

GPU = "nvidia.com/gpu"
POOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"
DELETION_CANDIDATE = "DeletionCandidateOfClusterAutoscaler"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
MIRROR = "kubernetes.io/config.mirror"


@dataclass
class NodePool:
    """A GPU node pool under the cluster autoscaler (GKE)."""

    name: str = "gpu-pool"
    accelerator: str = "nvidia-tesla-t4"
    compute_class: str = "gpu-t4"
    gpus_per_node: int = 1
    min_nodes: int = 0
    max_nodes: int = 4
    scale_up_seconds: float = 0.0  # on the cluster's clock
    scale_down_unneeded_time: float = 600.0  # --scale-down-unneeded-time
    scale_down_utilization_threshold: float = 0.5  # --scale-down-gpu-utilization-threshold
    #: the pool's node locations (a regional pool spans several); nodes added without
    #: a zone, and the autoscaler's, go to the first
    zones: tuple[str, ...] = ("us-central1-a",)


def pod_gpus(pod: dict) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU)
        total += int(value or 0)
    return total


def _controller(pod: dict) -> dict | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def is_daemon_or_mirror(pod: dict) -> bool:
    ref = _controller(pod) or {}
    return ref.get("kind") == "DaemonSet" or MIRROR in (pod["metadata"].get("annotations") or {})


def holds_resources(pod: dict) -> bool:
    """A pod counts on its node until it has ended (Succeeded/Failed) or is gone."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


@dataclass
class Allocation:
    namespace: str
    pod: str
    uid: str
    node: str
    gpus: int
    start: float
    end: float | None = None


@dataclass
class NodeLife:
    name: str
    gpus: int
    start: float
    end: float | None = None


@dataclass
class NodeBook:
    """When each node lived and which pod held its GPUs when (the emulator's own view)."""

    nodes: dict[str, list[NodeLife]] = field(default_factory=dict)
    allocations: list[Allocation] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sync(self, now: float, nodes: dict[str, int], pods: dict[str, Allocation]) -> None:
        """The nodes (name -> GPUs) and GPU-holding pods (uid -> allocation) there are now."""
        with self.lock:
            for name, lives in self.nodes.items():
                if lives[-1].end is None and name not in nodes:
                    lives[-1].end = now
            for name, gpus in nodes.items():
                lives = self.nodes.setdefault(name, [])
                if not lives or lives[-1].end is not None:
                    lives.append(NodeLife(name, gpus, now))
            open_ = {a.uid: a for a in self.allocations if a.end is None}
            for uid, a in open_.items():
                if uid not in pods or pods[uid].node != a.node:
                    a.end = now
            for uid, a in pods.items():
                if uid not in open_ or open_[uid].node != a.node:
                    self.allocations.append(a)

    def node_up(self, node: str, start: float, end: float, now: float) -> float:
        """Seconds of ``[start, end)`` during which ``node`` existed."""
        with self.lock:
            return sum(
                max(
                    0.0,
                    min(end, life.end if life.end is not None else now) - max(start, life.start),
                )
                for life in self.nodes.get(node, [])
            )

    def gpu_seconds(
        self, node: str, start: float, end: float, now: float, exclude_uid: str = ""
    ) -> list[tuple[float, float, int, str]]:
        """The allocations on ``node`` that overlap ``[start, end)``: (from, until, gpus, namespace)."""
        out = []
        with self.lock:
            for a in self.allocations:
                if a.node != node or a.uid == exclude_uid:
                    continue
                a0, a1 = max(start, a.start), min(end, a.end if a.end is not None else now)
                if a1 > a0:
                    out.append((a0, a1, a.gpus, a.namespace))
        return out


class NodePoolController:
    """Scheduler binding, scale-up and scale-down for one :class:`NodePool`."""

    def __init__(self, emu: KubeEmulator, pool: NodePool, event):
        self.emu = emu
        self.pool = pool
        self.event = event  # Controllers.event(ns, obj, reason, message, type, component)
        self.book = NodeBook()
        self.provisioning: list[float] = []  # when each node being added joins
        self.unneeded_since: dict[str, float] = {}
        self.draining: set[str] = set()
        self.count = 0

    @property
    def now(self) -> float:
        return server.CLOCK.time()

    # -- nodes
    def add_node(
        self, gpus: int | None = None, labels: dict | None = None, zone: str | None = None
    ) -> dict:
        self.count += 1
        name = f"gke-{self.pool.name}-{self.count:04x}"
        gpus = self.pool.gpus_per_node if gpus is None else gpus
        zone = zone or self.pool.zones[0]
        node = self.emu.create(
            "Node",
            None,
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        POOL_LABEL: self.pool.name,
                        ACCELERATOR_LABEL: self.pool.accelerator,
                        COMPUTE_CLASS_LABEL: self.pool.compute_class,
                        "kubernetes.io/hostname": name,
                        "node.kubernetes.io/instance-type": "n1-standard-8",
                        volumes.ZONE_LABEL: zone,
                        volumes.GKE_ZONE_LABEL: zone,
                        **(labels or {}),
                    },
                },
                "spec": {},
                "status": {
                    "allocatable": {GPU: str(gpus), "cpu": "7910m", "memory": "26Gi"},
                    "capacity": {GPU: str(gpus), "cpu": "8", "memory": "30Gi"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            },
        )
        self._sync_book()
        return node

    def nodes(self) -> list[dict]:
        return [
            n
            for n in self.emu.list("Node")
            if (n["metadata"].get("labels") or {}).get(POOL_LABEL) == self.pool.name
        ]

    def pods_on(self, node: str) -> list[dict]:
        return [
            p
            for p in self.emu.list("Pod")
            if (p.get("spec") or {}).get("nodeName") == node and holds_resources(p)
        ]

    def free_gpus(self, node: dict) -> int:
        allocatable = int((node.get("status") or {}).get("allocatable", {}).get(GPU, 0))
        return allocatable - sum(pod_gpus(p) for p in self.pods_on(node["metadata"]["name"]))

    def _schedulable(self, node: dict, pod: dict) -> bool:
        if node["metadata"].get("deletionTimestamp") or (node.get("spec") or {}).get(
            "unschedulable"
        ):
            return False
        taints = (node.get("spec") or {}).get("taints") or []
        if any(t.get("effect") == "NoSchedule" for t in taints) and not is_daemon_or_mirror(pod):
            return False
        labels = node["metadata"].get("labels") or {}
        wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
        return all(labels.get(k) == v for k, v in wanted.items())

    def fits(self, pod: dict, exclude: str = "") -> dict | None:
        for node in sorted(self.nodes(), key=lambda n: n["metadata"]["name"]):
            if node["metadata"]["name"] == exclude or not self._schedulable(node, pod):
                continue
            if not volumes.fits_volumes(self.emu, pod, node):
                continue
            if self.free_gpus(node) >= pod_gpus(pod):
                return node
        return None

    # -- the scheduler (called by Controllers.pods for a Pending, unscheduled pod)
    def schedule(self, pod: dict) -> str | None:
        """Bind ``pod`` to a node; None while it must wait (the events say why)."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        node = self.fits(pod)
        if node is None:
            self._scale_up(pod)
            return None
        node_name = node["metadata"]["name"]

        def bind(p):
            p["spec"]["nodeName"] = node_name
            conds = p.setdefault("status", {}).setdefault("conditions", [])
            conds[:] = [c for c in conds if c.get("type") != "PodScheduled"]
            conds.append(
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": server.now_iso()}
            )

        self.emu.mutate("Pod", ns, name, bind)
        volumes.provision(self.emu, pod, node, self.pool.zones)
        self.event(
            ns,
            pod,
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {node_name}",
            "Normal",
            "default-scheduler",
        )
        self._sync_book()
        return node_name

    def _scale_up(self, pod: dict) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        nodes = self.nodes()
        msg = (
            f"0/{len(nodes)} nodes are available: Insufficient {GPU}. preemption: "
            "0/0 nodes are available: No preemption victims found for incoming pod."
        )
        # the scheduler's FitError: per node, the first filter that failed (NodeResourcesFit
        # runs before VolumeBinding), each reason with its count, sorted
        why: dict[str, int] = {}
        claims = [v for v in pod["spec"].get("volumes") or [] if v.get("persistentVolumeClaim")]
        for n in nodes if claims else ():
            if not self._schedulable(n, pod):
                reason = "node(s) didn't match Pod's node affinity/selector"
            elif self.free_gpus(n) < pod_gpus(pod):
                reason = f"Insufficient {GPU}"
            elif not volumes.fits_volumes(self.emu, pod, n):
                reason = volumes.CONFLICT
            else:
                continue
            why[reason] = why.get(reason, 0) + 1
        if volumes.CONFLICT in why:
            reasons = ", ".join(sorted(f"{count} {reason}" for reason, count in why.items()))
            msg = (
                f"0/{len(nodes)} nodes are available: {reasons}. preemption: 0/{len(nodes)} "
                f"nodes are available: {len(nodes)} No preemption victims found for incoming pod."
            )

        def unschedulable(p):
            conds = p.setdefault("status", {}).setdefault("conditions", [])
            if any(c.get("reason") == "Unschedulable" for c in conds):
                return
            conds[:] = [c for c in conds if c.get("type") != "PodScheduled"]
            conds.append(
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": msg,
                    "lastTransitionTime": server.now_iso(),
                }
            )

        self.emu.mutate("Pod", ns, name, unschedulable)
        if self.provisioning:
            return  # a node is on its way
        self.event(ns, pod, "FailedScheduling", msg, "Warning", "default-scheduler")
        if len(self.nodes()) >= self.pool.max_nodes:
            self.event(
                ns,
                pod,
                "NotTriggerScaleUp",
                "pod didn't trigger scale-up: 1 max node group size reached",
                "Normal",
                "cluster-autoscaler",
            )
            return
        size = len(self.nodes())
        self.event(
            ns,
            pod,
            "TriggeredScaleUp",
            "pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/p/zones/"
            f"us-central1-a/instanceGroups/gke-{self.pool.name} {size}->{size + 1} "
            f"(max: {self.pool.max_nodes})}}]",
            "Normal",
            "cluster-autoscaler",
        )
        self.provisioning.append(self.now + self.pool.scale_up_seconds)

    def next_deadline(self) -> float | None:
        """The next moment the autoscaler acts on its own (a node joins, or has been
        unneeded long enough), so that a test moving the clock stops there."""
        due = [*self.provisioning]
        due += [t + self.pool.scale_down_unneeded_time for t in self.unneeded_since.values()]
        later = [t for t in due if t > self.now]
        return min(later) if later else None

    # -- every tick
    def reconcile(self) -> None:
        now = self.now
        joined = [t for t in self.provisioning if t <= now]
        self.provisioning = [t for t in self.provisioning if t > now]
        for _ in joined:
            self.add_node()
        for node in self.nodes():
            self._scale_down(node, now)
        self._sync_book()

    def _movable(self, pod: dict, node: str) -> bool:
        ann = pod["metadata"].get("annotations") or {}
        if _controller(pod) is None or ann.get(SAFE_TO_EVICT) == "false":
            return False
        return self.fits(pod, exclude=node) is not None

    def _set_taint(self, node: str, key: str, effect: str | None, value: str = "") -> None:
        def taint(n):
            taints = [t for t in (n["spec"].get("taints") or []) if t.get("key") != key]
            if effect:
                taints.append({"key": key, "value": value, "effect": effect})
            if taints:
                n["spec"]["taints"] = taints
            else:
                n["spec"].pop("taints", None)

        self.emu.mutate("Node", None, node, taint)

    def _scale_down(self, node: dict, now: float) -> None:
        name = node["metadata"]["name"]
        taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
        pods = [p for p in self.pods_on(name) if not is_daemon_or_mirror(p)]
        if TO_BE_DELETED in taints:
            self._finish_scale_down(node, pods)
            return
        disabled = (node["metadata"].get("annotations") or {}).get(SCALE_DOWN_DISABLED) == "true"
        allocatable = int((node.get("status") or {}).get("allocatable", {}).get(GPU, 0))
        used = sum(pod_gpus(p) for p in pods)
        utilization = used / allocatable if allocatable else 0.0
        unneeded = (
            not disabled
            and len(self.nodes()) > self.pool.min_nodes
            and utilization < self.pool.scale_down_utilization_threshold
            and all(self._movable(p, name) for p in pods)
        )
        if not unneeded:
            if self.unneeded_since.pop(name, None) is not None:
                self._set_taint(name, DELETION_CANDIDATE, None)
            return
        since = self.unneeded_since.setdefault(name, now)
        if DELETION_CANDIDATE not in taints:
            self._set_taint(name, DELETION_CANDIDATE, "PreferNoSchedule", str(int(since)))
        if now - since < self.pool.scale_down_unneeded_time:
            return
        self._set_taint(name, TO_BE_DELETED, "NoSchedule", str(int(now)))
        self.event(
            "default",
            node,
            "ScaleDown",
            "marked the node as toBeDeleted/unschedulable",
            "Normal",
            "cluster-autoscaler",
        )
        for pod in pods:
            self.event(
                pod["metadata"]["namespace"],
                pod,
                "ScaleDown",
                "deleting pod for node scale down",
                "Normal",
                "cluster-autoscaler",
            )
            with contextlib.suppress(ApiError):
                self.emu.store.delete(
                    self.emu.resource("Pod"),
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    graceful=True,
                )
        if pods:
            self.draining.add(name)
        self._finish_scale_down(node, pods)

    def _finish_scale_down(self, node: dict, pods: list[dict]) -> None:
        name = node["metadata"]["name"]
        if pods:
            return  # still draining: the evicted pods have not gone yet
        drained = name in self.draining
        self.draining.discard(name)
        for pod in self.pods_on(name):  # DaemonSet and mirror pods go with the node
            with contextlib.suppress(ApiError):
                self.emu.store.remove(
                    self.emu.resource("Pod"), pod["metadata"]["namespace"], pod["metadata"]["name"]
                )
        with contextlib.suppress(ApiError):
            self.emu.store.delete(self.emu.resource("Node"), None, name)
        self.unneeded_since.pop(name, None)
        status_cm = {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {
                "name": "cluster-autoscaler-status",
                "namespace": "kube-system",
                "uid": "cluster-autoscaler-status",
            },
        }
        self.event(
            "kube-system",
            status_cm,
            "ScaleDown",
            f"Scale-down: node {name} removed with drain"
            if drained
            else f"Scale-down: removing empty node {name}",
            "Normal",
            "cluster-autoscaler",
        )
        self._sync_book()

    def _sync_book(self) -> None:
        nodes = {
            n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU, 0)) for n in self.nodes()
        }
        pods = {}
        for p in self.emu.list("Pod"):
            node = (p.get("spec") or {}).get("nodeName")
            gpus = pod_gpus(p)
            if node in nodes and gpus and holds_resources(p):
                pods[p["metadata"]["uid"]] = Allocation(
                    p["metadata"]["namespace"],
                    p["metadata"]["name"],
                    p["metadata"]["uid"],
                    node,
                    gpus,
                    self.now,
                )
        self.book.sync(self.now, nodes, pods)
