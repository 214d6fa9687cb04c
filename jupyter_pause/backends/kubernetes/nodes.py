"""What became of the node a pause let go of: the capacity outcome (pure).

A pause frees the accelerator(s) its pod held on one node.  What that did to
the bill depends on the node, not on the notebook:

``reused``
    another pod took the GPU (its namespace and workload class are kept): the
    capacity went to other work, the bill is unchanged;
``scaled-down``
    the node was deleted (the cluster autoscaler's ``ToBeDeletedByClusterAutoscaler``
    taint, or the node gone): the bill stopped;
``idle``
    the node stayed up with the GPU unallocated and nothing else on it but
    DaemonSet and mirror pods: nothing was saved;
``kept-up``
    the GPU was free, but other pods kept the node up: capacity was freed,
    the bill is unchanged.

The pod is gone while paused, so nothing in it can watch its node.  Looks are
taken from outside (:mod:`.follow`, ``jupyter pause follow-nodes``), each a
:class:`NodeLook`; :class:`NodeFollow` turns them into :class:`CapacitySpan` s,
kept on the workspace's state object between looks, and the server that
comes back writes the spans into its ledger (``CAPACITY_OUTCOME``).

What a look can know, and so what a span claims: the state a look sees holds
from that look until the next one (the first look's from the release); a
change is dated at the look that saw it, except a scale-down, dated at the
autoscaler's ``ToBeDeletedByClusterAutoscaler`` taint (its value is the time it
was set) when a look saw the taint.  So each boundary is late by at most one
look interval.  Time no look covered (no follower ran, or it stopped for more
than ``2 x interval``) has no span: the report calls it *node outcome unknown*.

Which GPUs count as reused (GPUs are interchangeable, so this is a
convention): the GPUs other pods held on the node at the first look after the
release are the *baseline*; whatever they hold beyond it took released GPUs, at
most as many as were released, newest pods first.  When several pauses free
GPUs on one node, each counts against its own baseline, so a newcomer counts
for the later pause first and nothing is counted twice; a newcomer that only
takes the place of other work that left is not counted as reuse, and one that
could have used a GPU already free before the pause is (on one-GPU nodes
neither can happen).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...capacity import IDLE, KEPT_UP, REUSED, SCALED_DOWN, CapacitySpan

GPU = "nvidia.com/gpu"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"
CLASS_LABEL = "jupyter-pause.io/workload-class"
MIRROR = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class ReleasedNode:
    """What the pause knew of the node it left (written by the release)."""

    node: str
    gpus: int  # the accelerators the pod released
    namespace: str  # the paused pod's, so it is never mistaken for another
    pod: str
    released_at: float
    accelerator: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReleasedNode:
        return cls(
            node=str(data["node"]),
            gpus=int(data.get("gpus") or 1),
            namespace=str(data.get("namespace") or ""),
            pod=str(data.get("pod") or ""),
            released_at=float(data["released_at"]),
            accelerator=str(data.get("accelerator") or ""),
        )


@dataclass(frozen=True)
class OtherPod:
    """A pod bound to the node that is not the paused one."""

    namespace: str
    name: str
    gpus: int
    workload_class: str
    created: float
    daemon: bool  # a DaemonSet's or a mirror pod: never keeps a node up


@dataclass(frozen=True)
class NodeLook:
    """One look at the node through the API."""

    time: float
    exists: bool
    allocatable_gpus: int = 0
    accelerator: str = ""
    unschedulable: bool = False
    to_be_deleted_at: float | None = None  # the autoscaler's taint, when set
    pods: tuple[OtherPod, ...] = ()


@dataclass(frozen=True)
class Part:
    """What ``gpus`` of the released accelerators were doing at one look."""

    outcome: str
    gpus: float
    namespace: str = ""  # reused: the other pod's
    workload_class: str = ""


def others(released: ReleasedNode, look: NodeLook) -> list[OtherPod]:
    """The pods on the node, but the paused one (which may still be leaving)."""
    return [
        p for p in look.pods if not (p.namespace == released.namespace and p.name == released.pod)
    ]


def other_gpus(released: ReleasedNode, look: NodeLook) -> int:
    return sum(p.gpus for p in others(released, look) if p.gpus > 0)


def classify(released: ReleasedNode, look: NodeLook, baseline: int) -> list[Part]:
    """What the released GPUs were doing when ``look`` was taken (``baseline``: the
    GPUs other pods held at the first look)."""
    g = released.gpus
    if not look.exists or look.to_be_deleted_at is not None:
        return [Part(SCALED_DOWN, g)]
    reused = max(0, min(g, other_gpus(released, look) - baseline))
    parts: list[Part] = []
    # the newest GPU pods took the released GPUs
    for p in sorted((p for p in others(released, look) if p.gpus > 0), key=lambda p: -p.created):
        if reused <= 0:
            break
        n = min(reused, p.gpus)
        parts.append(Part(REUSED, n, p.namespace, p.workload_class))
        reused -= n
    free = g - sum(part.gpus for part in parts)
    if free > 0:
        keepers = [p for p in others(released, look) if not p.daemon]
        parts.append(Part(KEPT_UP if keepers else IDLE, free))
    return _merge(parts)


def _merge(parts: list[Part]) -> list[Part]:
    out: dict[tuple[str, str, str], float] = {}
    for p in parts:
        key = (p.outcome, p.namespace, p.workload_class)
        out[key] = out.get(key, 0) + p.gpus
    return [Part(o, n, ns, c) for (o, ns, c), n in out.items()]


@dataclass
class NodeFollow:
    """The capacity outcome of one pause, built look by look (kept between looks as JSON)."""

    released: ReleasedNode
    interval: float  # how often the follower looks (to know when its looks stopped)
    spans: list[CapacitySpan] = field(default_factory=list)
    open: list[CapacitySpan] = field(default_factory=list)  # the state of the last look
    last_look: float | None = None
    accelerator: str = ""
    baseline: int | None = None  # GPUs other pods held at the first look

    def observe(self, look: NodeLook) -> None:
        """Take one look into account (looks come in time order)."""
        if self.last_look is not None and look.time <= self.last_look:
            return
        if self.open and self.open[0].outcome == SCALED_DOWN:
            self.last_look = look.time  # a deleted node does not come back
            self._extend(look.time)
            return
        if look.accelerator:
            self.accelerator = look.accelerator
        if self.baseline is None and look.exists:
            self.baseline = other_gpus(self.released, look)
        parts = classify(self.released, look, self.baseline or 0)
        floor = self.released.released_at if self.last_look is None else self.last_look
        if self.last_look is None:
            start = self.released.released_at
        elif self.last_look + 2 * self.interval < look.time:
            # the follower stopped meanwhile: nothing is known of the gap
            self._close(self.last_look + self.interval)
            floor = start = look.time
        else:
            start = look.time
        if parts[0].outcome == SCALED_DOWN:
            # dated by the autoscaler's taint when a look saw it, else by this look
            tainted = look.to_be_deleted_at
            start = look.time if tainted is None else min(max(floor, tainted), look.time)
        current = [(s.outcome, s.gpus, s.by_namespace, s.by_class) for s in self.open]
        wanted = [(p.outcome, p.gpus, p.namespace, p.workload_class) for p in parts]
        if current == wanted:
            self._extend(look.time)
        else:
            self._close(start)
            self.open = [
                CapacitySpan(
                    p.outcome,
                    start,
                    max(start, look.time),
                    p.gpus,
                    p.gpus / self.released.gpus,
                    self.released.node,
                    self.accelerator or self.released.accelerator,
                    p.namespace,
                    p.workload_class,
                )
                for p in parts
            ]
        self.last_look = look.time

    def _extend(self, t: float) -> None:
        for s in self.open:
            s.end = max(s.end, t)

    def _close(self, t: float) -> None:
        for s in self.open:
            s.end = max(s.start, t)
            if s.seconds > 0:
                self.spans.append(s)
        self.open = []

    def finish(self, until: float) -> list[CapacitySpan]:
        """The spans up to ``until`` (the accelerator was acquired again).

        The last look's state is carried at most one interval past it: beyond
        that nothing was seen.  A deleted node is the exception: it stays deleted.
        """
        if self.open and self.open[0].outcome == SCALED_DOWN:
            self._close(until)
        elif self.last_look is not None:
            self._close(min(until, self.last_look + self.interval))
        return [
            CapacitySpan(**{**s.to_json(), "end": min(s.end, until)})
            for s in self.spans
            if s.start < until
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "released": self.released.to_json(),
            "interval": self.interval,
            "spans": [s.to_json() for s in self.spans],
            "open": [s.to_json() for s in self.open],
            "last_look": self.last_look,
            "accelerator": self.accelerator,
            "baseline": self.baseline,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeFollow:
        return cls(
            released=ReleasedNode.from_json(data["released"]),
            interval=float(data.get("interval") or 60.0),
            spans=[CapacitySpan.from_json(s) for s in data.get("spans") or []],
            open=[CapacitySpan.from_json(s) for s in data.get("open") or []],
            last_look=data.get("last_look"),
            accelerator=str(data.get("accelerator") or ""),
            baseline=data.get("baseline"),
        )


# -- reading the API's objects --------------------------------------------------------


def pod_gpus(pod: dict) -> int:
    """The ``nvidia.com/gpu`` a pod requests (limits, else requests) over its containers."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU)
        try:
            total += int(value or 0)
        except (TypeError, ValueError):
            continue
    return total


def workload_class(pod: dict) -> str:
    """What kind of work a pod is: its ``jupyter-pause.io/workload-class`` label, else
    its priority class, else its controller's kind (``StatefulSet``, ``Job`` …), else ``Pod``."""
    meta = pod.get("metadata") or {}
    label = (meta.get("labels") or {}).get(CLASS_LABEL)
    if label:
        return label
    priority = (pod.get("spec") or {}).get("priorityClassName")
    if priority:
        return priority
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind") or "Pod")
    return "Pod"


def _is_daemon(pod: dict) -> bool:
    meta = pod.get("metadata") or {}
    if MIRROR in (meta.get("annotations") or {}):
        return True
    return any(
        ref.get("controller") and ref.get("kind") == "DaemonSet"
        for ref in meta.get("ownerReferences") or []
    )


def look_at(node: dict | None, pods: list[dict], now: float, parse_time) -> NodeLook:
    """A :class:`NodeLook` from the node object (None: gone) and the pods bound to it."""
    if node is None or (node.get("metadata") or {}).get("deletionTimestamp"):
        return NodeLook(time=now, exists=False)
    spec, status = node.get("spec") or {}, node.get("status") or {}
    tainted = None
    for taint in spec.get("taints") or []:
        if taint.get("key") == TO_BE_DELETED:
            try:
                tainted = float(taint.get("value"))
            except (TypeError, ValueError):
                tainted = now
    try:
        allocatable = int((status.get("allocatable") or {}).get(GPU) or 0)
    except (TypeError, ValueError):
        allocatable = 0
    others = []
    for p in pods:
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # ended pods hold nothing
        meta = p.get("metadata") or {}
        created = parse_time(meta.get("creationTimestamp"))
        others.append(
            OtherPod(
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name") or ""),
                gpus=pod_gpus(p),
                workload_class=workload_class(p),
                created=created if created is not None else now,
                daemon=_is_daemon(p),
            )
        )
    return NodeLook(
        time=now,
        exists=True,
        allocatable_gpus=allocatable,
        accelerator=str(
            ((node.get("metadata") or {}).get("labels") or {}).get(ACCELERATOR_LABEL) or ""
        ),
        unschedulable=bool(spec.get("unschedulable")),
        to_be_deleted_at=None if tainted is None else min(tainted, now),
        pods=tuple(others),
    )
