"""What a node says of its own end, before the pods on it get SIGTERM: read from the Node
object as the real controllers write it (pure; the backends ask for their node).

* **GKE.**  The maintenance handler GKE runs on GPU nodes (a ``kube-system`` DaemonSet)
  taints a node that is about to be terminated
  ``cloud.google.com/impending-node-termination:NoSchedule``; the same key was used by
  GoogleCloudPlatform/k8s-node-termination-handler for preemptions.  Whether GKE's own
  path for a Spot VM's preemption sets it before kubelet's graceful node shutdown begins
  is UNVERIFIED here (docs/kubernetes.md, "Spot and preemptible GPUs").
* **kubelet's graceful node shutdown** (GKE's default for Spot and preemptible VMs): once
  it sees the shutdown, the node's ``Ready`` condition turns False with the message "node
  is shutting down" (pkg/kubelet/nodeshutdown, ``ShutdownStatus``), as it begins to
  terminate the pods: at best a moment before this pod's own SIGTERM.
* **AWS node termination handler** (aws/aws-node-termination-handler ``pkg/node``): on a
  spot interruption notice (2 minutes), the taint ``aws-node-termination-handler/spot-itn``
  (its value the event id, its effect ``--taint-effect``, NoSchedule by default); on a
  rebalance recommendation, ``aws-node-termination-handler/rebalance-recommendation``
  (best effort, earlier, and not always followed by an interruption); on scheduled
  maintenance and ASG lifecycle terminations, ``…/scheduled-maintenance`` and
  ``…/asg-lifecycle-termination``; and, as it drains, the label
  ``aws-node-termination-handler/event-id`` and a cordon.  Taints need
  ``--taint-node=true``.
"""

from __future__ import annotations

from typing import Any

from ..base import TerminationNotice

GKE_TERMINATION = "cloud.google.com/impending-node-termination"
NTH = "aws-node-termination-handler/"
NTH_SPOT = NTH + "spot-itn"
NTH_REBALANCE = NTH + "rebalance-recommendation"
NTH_MAINTENANCE = NTH + "scheduled-maintenance"
NTH_ASG = NTH + "asg-lifecycle-termination"
NTH_EVENT = NTH + "event-id"
#: kubelet's message on a node whose graceful shutdown has begun
SHUTTING_DOWN = "node is shutting down"

#: NTH's taints: key -> (kind, certain)
NTH_TAINTS = {
    NTH_SPOT: ("spot-interruption", True),
    NTH_MAINTENANCE: ("scheduled-maintenance", True),
    NTH_ASG: ("asg-lifecycle-termination", True),
    NTH_REBALANCE: ("rebalance-recommendation", False),
}


def termination_notice(node: dict[str, Any]) -> TerminationNotice | None:
    """The notice the Node object ``node`` carries, the most certain first; None."""
    name = str((node.get("metadata") or {}).get("name") or "")
    taints = {t.get("key"): t for t in (node.get("spec") or {}).get("taints") or []}
    labels = (node.get("metadata") or {}).get("labels") or {}
    found: list[TerminationNotice] = []
    if GKE_TERMINATION in taints:
        found.append(TerminationNotice("gke", "termination", _taint(taints[GKE_TERMINATION]), name))
    for key, (kind, certain) in NTH_TAINTS.items():
        if key in taints:
            found.append(
                TerminationNotice(
                    "aws-node-termination-handler", kind, _taint(taints[key]), name, certain
                )
            )
    if NTH_EVENT in labels:
        found.append(
            TerminationNotice(
                "aws-node-termination-handler",
                "drain",
                f"label {NTH_EVENT}={labels[NTH_EVENT]}",
                name,
            )
        )
    for c in (node.get("status") or {}).get("conditions") or []:
        ready = c.get("type") == "Ready" and str(c.get("status")) != "True"
        if ready and SHUTTING_DOWN in str(c.get("message") or ""):
            detail = f"condition Ready=False: {c.get('message')}"
            found.append(TerminationNotice("kubelet", "shutdown", detail, name))
    found.sort(key=lambda n: not n.certain)
    return found[0] if found else None


def _taint(taint: dict[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"taint {taint.get('key')}{value}:{taint.get('effect', '')}"
