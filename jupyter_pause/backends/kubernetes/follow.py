"""Following the nodes that paused workspaces let go of (``jupyter pause follow-nodes``).

While a workspace is paused its pod is gone, so the node it ran on can only be
watched from outside.  The release writes what it left on the state object
(``jupyter-pause.io/node``: :class:`.nodes.ReleasedNode`); each round of
:func:`follow_round` looks at every such node through the API (the node, and
the pods bound to it with the field selector ``spec.nodeName``), and keeps the
capacity outcome built so far in ``jupyter-pause.io/node-follow``
(:class:`.nodes.NodeFollow`).  The server that comes back writes it into its
ledger (:meth:`.common.KubeBackend.came_back`) and removes both annotations.

It runs with the platform's identity, never the notebook's: reading nodes
and every namespace's pods needs a ClusterRole (``deploy/rbac/node-follower.yaml``:
``get nodes``, ``list pods``), which code in a notebook must not have.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .client import Conflict, Forbidden, KubeClient, KubeError, NotFound
from .common import (
    A_NODE,
    A_NODE_FOLLOW,
    A_STATE,
    PAUSED_STATES,
    annotations,
    json_annotation,
    parse_time,
    state_configmap,
)
from .nodes import NodeFollow, NodeLook, ReleasedNode, look_at

STATEFULSET_SELECTOR = "jupyter-pause.io/statefulset"


def look(client: KubeClient, node: str, now: float) -> NodeLook:
    """One look at ``node``: the object (gone: 404) and the pods bound to it."""
    try:
        obj = client.get_node(node)
    except NotFound:
        return NodeLook(time=now, exists=False)
    return look_at(obj, client.list_pods_on_node(node), now, parse_time)


@dataclass(frozen=True)
class Followed:
    """One workspace's node after a round."""

    workspace: str
    kind: str  # Workspace | StatefulSet
    node: str
    outcome: str  # what the released GPUs are doing now (the largest part)
    error: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _paused_states(client: KubeClient) -> list[tuple[str, str, dict]]:
    """``(kind, name, state object)`` of every workspace of the namespace with a released node."""
    found = []
    try:
        for ws in client.list_workspaces():
            found.append(("Workspace", ws["metadata"]["name"], ws))
    except (NotFound, Forbidden):
        pass  # no Kubeflow Workspaces here (or none for this caller)
    for cm in client.list_configmaps(STATEFULSET_SELECTOR):
        sts = (cm["metadata"].get("labels") or {}).get(STATEFULSET_SELECTOR)
        if sts and cm["metadata"]["name"] == state_configmap(sts):
            found.append(("StatefulSet", sts, cm))
    return [
        (kind, name, obj)
        for kind, name, obj in found
        if annotations(obj).get(A_NODE) and annotations(obj).get(A_STATE) in PAUSED_STATES
    ]


def follow_round(client: KubeClient, now: float, interval: float) -> list[Followed]:
    """Look once at the node of every paused workspace of the namespace and record it."""
    results = []
    looks: dict[str, NodeLook] = {}  # several workspaces may share a node
    for kind, name, obj in _paused_states(client):
        data = json_annotation(obj, A_NODE_FOLLOW)
        released = json_annotation(obj, A_NODE) or {}
        try:
            follow = (
                NodeFollow.from_json(data)
                if isinstance(data, dict)
                else NodeFollow(ReleasedNode.from_json(released), interval)
            )
        except (KeyError, TypeError, ValueError) as e:
            results.append(Followed(name, kind, str(released.get("node", "")), "", f"{e!r}"))
            continue
        node = follow.released.node
        try:
            if node not in looks:
                looks[node] = look(client, node, now)
            follow.observe(looks[node])
            patch = {
                "metadata": {
                    "resourceVersion": obj["metadata"]["resourceVersion"],
                    "annotations": {
                        A_NODE_FOLLOW: json.dumps(follow.to_json(), separators=(",", ":"))
                    },
                }
            }
            if kind == "Workspace":
                client.patch_workspace(name, patch)
            else:
                client.patch_configmap(state_configmap(name), patch)
        except Conflict:
            # the workspace changed meanwhile (it is coming back): the next round sees it
            results.append(Followed(name, kind, node, "", "changed meanwhile; next round"))
            continue
        except KubeError as e:
            results.append(Followed(name, kind, node, "", str(e)))
            continue
        biggest = max(follow.open, key=lambda s: s.gpus, default=None)
        results.append(Followed(name, kind, node, biggest.outcome if biggest else "unknown"))
    return results
