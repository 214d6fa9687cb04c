"""Persistent volumes and zones, for the emulator's scheduler (nodes.py).

Modelled on what the real components do:

* **The StatefulSet controller** (``pkg/controller/statefulset/stateful_set_utils.go``)
  makes one PersistentVolumeClaim ``<template>-<statefulset>-<ordinal>`` per
  ``volumeClaimTemplates`` entry, if it does not exist, and gives the pod the volume
  ``{name: <template>, persistentVolumeClaim: {claimName: ...}}``.  Claims outlive the
  pod (``persistentVolumeClaimRetentionPolicy.whenScaled: Retain``, the default).
* **Binding** (``WaitForFirstConsumer``, GKE's ``standard-rwo``/``premium-rwo``): a claim
  stays unbound until a pod that uses it is scheduled; then the PD CSI driver
  (``pd.csi.storage.gke.io``) provisions a volume in the zone of the chosen node, with the
  PV's ``spec.nodeAffinity`` requiring ``topology.gke.io/zone`` In [that zone].  A
  StorageClass with ``parameters.replication-type: regional-pd`` provisions a regional
  disk: two zones of the region, the node's and the next one of the pool.
* **The scheduler's volume filters** (VolumeBinding, VolumeZone): a node whose labels do
  not satisfy the ``nodeAffinity`` of a bound PV of the pod is filtered out with
  "node(s) had volume node affinity conflict".
"""

from __future__ import annotations

from .server import KubeEmulator, now_iso

ZONE_LABEL = "topology.kubernetes.io/zone"
GKE_ZONE_LABEL = "topology.gke.io/zone"  # the key the PD CSI driver puts on its volumes
PD_CSI = "pd.csi.storage.gke.io"
CONFLICT = "node(s) had volume node affinity conflict"


def claim_volumes(emu: KubeEmulator, ns: str, sts: dict, pod_name: str) -> list[dict]:
    """The StatefulSet controller's claims for ``pod_name``: created if missing; returns
    the pod volumes that use them."""
    ordinal = pod_name.rsplit("-", 1)[-1]
    volumes = []
    for template in sts["spec"].get("volumeClaimTemplates") or []:
        name = template["metadata"]["name"]
        claim = f"{name}-{sts['metadata']['name']}-{ordinal}"
        if emu.find("PersistentVolumeClaim", ns, claim) is None:
            emu.create(
                "PersistentVolumeClaim",
                ns,
                {
                    "metadata": {
                        "name": claim,
                        "labels": dict(
                            (sts["spec"].get("selector") or {}).get("matchLabels") or {}
                        ),
                    },
                    "spec": dict(template.get("spec") or {}),
                    "status": {"phase": "Pending"},
                },
            )
        volumes.append({"name": name, "persistentVolumeClaim": {"claimName": claim}})
    return volumes


def _claims(emu: KubeEmulator, pod: dict) -> list[dict]:
    ns = pod["metadata"]["namespace"]
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        ref = v.get("persistentVolumeClaim")
        if ref:
            claim = emu.find("PersistentVolumeClaim", ns, ref["claimName"])
            if claim is not None:
                out.append(claim)
    return out


def _matches(term: dict, labels: dict) -> bool:
    for e in term.get("matchExpressions") or []:
        value, op, values = labels.get(e["key"]), e["operator"], e.get("values") or []
        if op == "In" and value not in values:
            return False
        if op == "NotIn" and value in values:
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
    return True


def fits_volumes(emu: KubeEmulator, pod: dict, node: dict) -> bool:
    """False when a PV bound to one of the pod's claims may not be used on ``node``
    (its ``nodeAffinity``: the terms OR-ed, each term's expressions AND-ed)."""
    labels = node["metadata"].get("labels") or {}
    for claim in _claims(emu, pod):
        volume = claim["spec"].get("volumeName")
        pv = emu.find("PersistentVolume", None, volume) if volume else None
        if pv is None:
            continue  # unbound: provisioned where the pod lands
        terms = ((pv["spec"].get("nodeAffinity") or {}).get("required") or {}).get(
            "nodeSelectorTerms"
        )
        if terms and not any(_matches(t, labels) for t in terms):
            return False
    return True


def provision(emu: KubeEmulator, pod: dict, node: dict, zones: tuple[str, ...]) -> None:
    """Bind the pod's unbound claims to new volumes in the zone(s) of ``node``."""
    zone = (node["metadata"].get("labels") or {}).get(ZONE_LABEL, "")
    ns = pod["metadata"]["namespace"]
    for claim in _claims(emu, pod):
        if claim["spec"].get("volumeName"):
            continue
        sc = emu.find("StorageClass", None, claim["spec"].get("storageClassName") or "")
        if sc is None or sc.get("provisioner") != PD_CSI:
            continue
        in_zones = [zone]
        if (sc.get("parameters") or {}).get("replication-type") == "regional-pd":
            others = [z for z in zones if z != zone]
            in_zones += others[:1]
        name = f"pvc-{claim['metadata']['uid']}"
        emu.create(
            "PersistentVolume",
            None,
            {
                "metadata": {"name": name},
                "spec": {
                    "capacity": (claim["spec"].get("resources") or {}).get("requests") or {},
                    "accessModes": claim["spec"].get("accessModes") or ["ReadWriteOnce"],
                    "storageClassName": sc["metadata"]["name"],
                    "claimRef": {
                        "namespace": ns,
                        "name": claim["metadata"]["name"],
                        "uid": claim["metadata"]["uid"],
                    },
                    "csi": {"driver": PD_CSI, "volumeHandle": f"projects/p/zones/{zone}/{name}"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": GKE_ZONE_LABEL,
                                            "operator": "In",
                                            "values": in_zones,
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                },
                "status": {"phase": "Bound"},
            },
        )

        def bind(c, name=name):
            c["spec"]["volumeName"] = name
            c["status"] = {"phase": "Bound", "lastPhaseTransitionTime": now_iso()}

        emu.mutate("PersistentVolumeClaim", ns, claim["metadata"]["name"], bind)


def storage_class(name: str, regional: bool = False) -> dict:
    """A GKE PD StorageClass: ``standard-rwo`` (zonal) or a regional one."""
    params = {"type": "pd-balanced"}
    if regional:
        params["replication-type"] = "regional-pd"
    return {
        "metadata": {"name": name},
        "provisioner": PD_CSI,
        "parameters": params,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }
