"""The fleet from the Kubernetes API, without starting any workspace.

Each notebook server writes its ledger, rolled up per notebook, into the
``jupyter-pause.io/fleet`` annotation of its state object
(:meth:`.common.KubeBackend.publish_fleet`): the Workspace (Kubeflow) or the
ConfigMap ``jupyter-pause-<statefulset>`` (plain GKE).  :func:`read_fleet`
lists both kinds in a namespace and reads the rows; it only lists (the
``jupyter-pause-fleet`` Role in deploy/rbac/cli.yaml), so a paused workspace
stays paused.
"""

from __future__ import annotations

import json
from dataclasses import replace

from ...report.fleet import FleetRow, RowError
from .client import Forbidden, KubeClient, KubeError, NotFound
from .common import A_FLEET, A_PAUSED_AT, A_STATE, STATEFULSET_LABEL, annotations, parse_time

#: the workspace states in which its accelerator is released (the pod is gone)
RELEASED = ("paused", "resuming")


def rows_of(obj: dict, server: str) -> list[FleetRow]:
    """The rows in ``obj``'s fleet annotation, as the rows of ``server``.

    A workspace paused since ``paused-at`` (its own state annotation) whose rows
    were handed over before that (a snapshot freezes the process inside its
    pause: it hands nothing over until it is restored) counts them paused from
    then on (:meth:`FleetRow.paused_from`)."""
    ann = annotations(obj)
    raw = ann.get(A_FLEET)
    if not raw:
        return []
    try:
        rows = [replace(FleetRow.from_json(r), server=server) for r in json.loads(raw)["rows"]]
    except (ValueError, KeyError, TypeError) as e:
        raise RowError(f"{server}: its {A_FLEET} annotation is malformed ({e})") from None
    paused_at = parse_time(ann.get(A_PAUSED_AT)) if ann.get(A_STATE) in RELEASED else None
    return [r.paused_from(paused_at) for r in rows] if paused_at else rows


def read_fleet(client: KubeClient) -> tuple[list[FleetRow], list[str]]:
    """Every workspace's rows in the client's namespace, and what could not be read."""
    ns = client.namespace
    owners: list[tuple[str, dict]] = []
    problems: list[str] = []
    try:
        owners += [(f"{ns}/{w['metadata']['name']}", w) for w in client.list_workspaces()]
    except (NotFound, Forbidden):
        pass  # no Kubeflow Workspaces here (or none for this caller)
    except KubeError as e:
        problems.append(f"{ns}: cannot list Workspaces: {e}")
    try:
        owners += [
            (f"{ns}/{cm['metadata']['labels'][STATEFULSET_LABEL]}", cm)
            for cm in client.list_configmaps(STATEFULSET_LABEL)
        ]
    except KubeError as e:
        problems.append(f"{ns}: cannot list the state ConfigMaps: {e}")
    rows: list[FleetRow] = []
    for server, obj in owners:
        try:
            rows += rows_of(obj, server)
        except RowError as e:
            problems.append(str(e))
    return rows, problems
