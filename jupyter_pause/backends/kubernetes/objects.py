"""The Kubernetes objects the backends read fields of, as dataclasses.

:class:`.client.AsyncKubeClient` returns these, decoded once from the API's
JSON, so that the backends read ``pod.uid`` rather than
``pod["metadata"]["uid"]``.  A :class:`Pod` also keeps the whole object
(``obj``): the environment fingerprint (:mod:`.compat`), the GPUs it holds
and the status derivation read its spec and status as the API returns them.

Pure: no client, no server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Condition:
    """One entry of an object's ``status.conditions``."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str = ""
    message: str = ""

    @classmethod
    def find(cls, obj: dict[str, Any] | None, type_: str) -> Condition | None:
        for c in ((obj or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == type_:
                return cls(
                    type=type_,
                    status=str(c.get("status", "")),
                    reason=c.get("reason") or "",
                    message=c.get("message") or "",
                )
        return None

    @property
    def true(self) -> bool:
        return self.status == "True"


def owner_statefulset(pod: dict[str, Any]) -> str | None:
    """The StatefulSet that owns a pod (its ``ownerReferences``), if any."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "StatefulSet":
            return ref.get("name")
    return None


def snapshot_created(trigger: dict[str, Any]) -> str | None:
    """``status.snapshotCreated``: a string in the CRD reference, ``{name}`` in all known clients."""
    value = (trigger.get("status") or {}).get("snapshotCreated")
    if isinstance(value, dict):
        value = value.get("name")
    return value or None


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def json_value(raw: str | None) -> Any:
    """The value of a JSON annotation (``None`` when absent or unreadable)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


@dataclass(frozen=True)
class StateObject:
    """The object holding jupyter-pause's annotations (see :mod:`.common`): a
    Kubeflow Workspace, or on plain GKE the state ConfigMap of a StatefulSet."""

    name: str
    annotations: dict[str, str]
    #: the whole object (a Workspace's spec and status are read too)
    obj: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> StateObject:
        meta = _meta(obj)
        return cls(
            name=str(meta.get("name") or ""),
            annotations=dict(meta.get("annotations") or {}),
            obj=obj,
        )

    def json(self, key: str) -> Any:
        """A JSON annotation's value (``None`` when absent or unreadable)."""
        return json_value(self.annotations.get(key))


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    #: the node it is bound to (``spec.nodeName``), if any
    node_name: str | None
    #: ``metadata.deletionTimestamp`` is set: the pod is going away
    deleting: bool
    owner_statefulset: str | None
    #: the whole object, for what reads its spec and status as the API returns them
    obj: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> Pod:
        meta = _meta(obj)
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            node_name=(obj.get("spec") or {}).get("nodeName") or None,
            deleting=bool(meta.get("deletionTimestamp")),
            owner_statefulset=owner_statefulset(obj),
            obj=obj,
        )

    def condition(self, type_: str) -> Condition | None:
        return Condition.find(self.obj, type_)

    @property
    def ready(self) -> bool:
        c = self.condition("Ready")
        return c is not None and c.true


@dataclass(frozen=True)
class StatefulSet:
    name: str
    uid: str
    #: ``spec.replicas`` (``None`` when unset)
    replicas: int | None

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> StatefulSet:
        meta, spec = _meta(obj), obj.get("spec") or {}
        replicas = spec.get("replicas")
        return cls(
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            replicas=None if replicas is None else int(replicas),
        )


@dataclass(frozen=True)
class SnapshotTrigger:
    """A ``PodSnapshotManualTrigger`` (``podsnapshot.gke.io/v1``)."""

    name: str
    triggered: Condition | None
    #: the PodSnapshot it made, once it made one
    snapshot: str | None

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> SnapshotTrigger:
        return cls(
            name=str(_meta(obj).get("name") or ""),
            triggered=Condition.find(obj, "Triggered"),
            snapshot=snapshot_created(obj),
        )


@dataclass(frozen=True)
class PodSnapshot:
    """A ``PodSnapshot`` (``podsnapshot.gke.io/v1``)."""

    name: str
    ready: bool
    #: its ``Checkpoint`` condition (reason ``Failed`` when the checkpoint failed)
    checkpoint: Condition | None

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> PodSnapshot:
        ready = Condition.find(obj, "Ready")
        return cls(
            name=str(_meta(obj).get("name") or ""),
            ready=ready is not None and ready.true,
            checkpoint=Condition.find(obj, "Checkpoint"),
        )
