"""A spot or preemptible node's end, announced as the real controllers announce it, for the
emulator (the Node objects only: the pods' SIGTERM that follows is the test's to send).

* **GKE** (``gke_termination``): GKE's maintenance handler, a ``kube-system`` DaemonSet
  on GPU nodes started with ``--taint=cloud.google.com/impending-node-termination::
  NoSchedule``, taints the node (no value, effect NoSchedule).  Then kubelet's graceful
  node shutdown begins (``kubelet_shutdown``): the node's ``Ready`` condition turns False,
  reason ``KubeletNotReady``, message "node is shutting down" (pkg/kubelet/nodeshutdown,
  ``ShutdownStatus``, through the Ready condition setter), and the pods are terminated.
  Whether GKE's Spot preemption path sets the taint before the kubelet's shutdown is
  UNVERIFIED (docs/kubernetes.md).
* **AWS node termination handler** (aws/aws-node-termination-handler ``pkg/node/node.go``,
  ``cmd/node-termination-handler.go``), with ``--taint-node=true``: a spot interruption
  notice's pre-drain task adds ``aws-node-termination-handler/spot-itn=<event id>``
  (value cut to 63 characters, effect NoSchedule by default), then the node is cordoned
  (``spec.unschedulable``) and drained (``nth_spot_interruption``).  A rebalance
  recommendation adds ``…/rebalance-recommendation=<event id>`` and cordons, without a
  drain unless ``--enable-rebalance-draining`` (``nth_rebalance``).  Scheduled maintenance
  first labels the node ``…/event-id=<event id>`` (``MarkWithEventID``) and taints it
  ``…/scheduled-maintenance`` (``nth_scheduled_maintenance``).  Taints are added by an
  Update of the node (a conflict is retried for 5 s).
"""

from __future__ import annotations

GKE_TAINT = "cloud.google.com/impending-node-termination"
NTH = "aws-node-termination-handler/"


def _taint(emu, node: str, key: str, value: str = "", effect: str = "NoSchedule") -> None:
    def add(n):
        taints = [t for t in (n["spec"].get("taints") or []) if t.get("key") != key]
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value[:63]
        n["spec"]["taints"] = [*taints, taint]

    emu.mutate("Node", None, node, add)


def _cordon(emu, node: str) -> None:
    emu.mutate("Node", None, node, lambda n: n["spec"].__setitem__("unschedulable", True))


def _label(emu, node: str, key: str, value: str) -> None:
    emu.mutate(
        "Node",
        None,
        node,
        lambda n: n["metadata"].setdefault("labels", {}).__setitem__(key, value),
    )


def gke_termination(emu, node: str) -> None:
    """GKE's maintenance handler: the node is about to be terminated."""
    _taint(emu, node, GKE_TAINT)


def kubelet_shutdown(emu, node: str) -> None:
    """kubelet's graceful node shutdown has begun: the node is NotReady, shutting down."""

    def not_ready(n):
        conditions = [c for c in (n["status"].get("conditions") or []) if c["type"] != "Ready"]
        conditions.append(
            {
                "type": "Ready",
                "status": "False",
                "reason": "KubeletNotReady",
                "message": "node is shutting down",
            }
        )
        n["status"]["conditions"] = conditions

    emu.mutate("Node", None, node, not_ready)


def nth_spot_interruption(emu, node: str, event_id: str) -> None:
    """The node termination handler hears a spot interruption notice: taint, cordon (the
    drain that follows deletes the pods)."""
    _taint(emu, node, NTH + "spot-itn", event_id)
    _cordon(emu, node)


def nth_rebalance(emu, node: str, event_id: str) -> None:
    """A rebalance recommendation: taint and cordon; no drain by default."""
    _taint(emu, node, NTH + "rebalance-recommendation", event_id)
    _cordon(emu, node)


def nth_scheduled_maintenance(emu, node: str, event_id: str) -> None:
    """Scheduled maintenance: the event id as a label, then the taint and the cordon."""
    _label(emu, node, NTH + "event-id", event_id)
    _taint(emu, node, NTH + "scheduled-maintenance", event_id)
    _cordon(emu, node)
