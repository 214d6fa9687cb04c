"""The RBAC manifests in deploy/rbac/ grant exactly the verbs the code uses.

The emulator enforces the Roles in every test (a missing verb is a 403 that
fails the test that needed it).  Here a tour runs every code path of each
principal -- the two backends in a pod, the user's CLI, the platform's gc --
and the (verb, API group, resource) tuples the emulator received are compared
with the Roles: nothing missing, nothing unused.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import NAMESPACE, SESSION_REQUESTS, WORKSPACE, cli, pod_backend, ws_backend
from k8s_emulator import PRINCIPALS, role_rules

from jupyter_pause.backends.base import BackendError


def granted(principal: str) -> set[tuple[str, str, str]]:
    out = set()
    for rule in role_rules(principal):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), (
                        f"{principal}: wildcards are not least privilege"
                    )
                    out.add((verb, group, resource))
    return out


def used(requests, principal: str) -> set[tuple[str, str, str]]:
    return {(r.verb, r.group, r.resource) for r in requests if r.principal == principal}


def tour(cluster, sessions, shutdown_kernel, capsys):
    # -- gke-pod-snapshot: pause, resume, restore, a failed pause, clean-up
    cluster.add_gke_notebook()
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")
    assert cli(cluster, "status", capsys=capsys)[0] == 0
    assert cli(cluster, "list", capsys=capsys)[0] == 0
    assert cli(cluster, "resume", "nb", capsys=capsys)[0] == 0
    cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")
    assert cli(cluster, "status", "nb", capsys=capsys)[0] == 0  # a pod: its events too
    asyncio.run(pod_backend(cluster).startup())
    cluster.scenario.trigger_outcome = "fail"
    with pytest.raises(BackendError):
        asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.scenario.trigger_outcome = "complete"
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    # -- gc by the platform team: snapshots, then triggers, then the policy
    rc, out = cli(
        cluster,
        "gc",
        "--older-than",
        "0s",
        "--delete-policy",
        "notebooks",
        context="gc",
        capsys=capsys,
    )
    assert rc == 0, out
    # -- kubeflow-workspace: pause, status, resume, startup
    cluster.add_workspace()
    asyncio.run(ws_backend(cluster).release(sessions, shutdown_kernel))
    assert cli(cluster, "status", WORKSPACE, capsys=capsys)[0] == 0
    assert cli(cluster, "resume", WORKSPACE, capsys=capsys)[0] == 0
    cluster.wait_for(lambda: cluster.pod_ready(f"ws-{WORKSPACE}-0"), what="workspace back")
    asyncio.run(ws_backend(cluster).startup())


def test_roles_grant_exactly_the_verbs_used(cluster, sessions, shutdown_kernel, capsys):
    tour(cluster, sessions, shutdown_kernel, capsys)
    requests = list(cluster.emu.requests)
    forbidden = [(r.principal, r.verb, r.resource, r.name) for r in requests if r.code == 403]
    assert forbidden == [], f"the Roles miss verbs the code uses: {forbidden}"
    for principal in PRINCIPALS:
        tour_used = used(requests, principal)
        all_used = tour_used | used([r for r in SESSION_REQUESTS if r.code != 403], principal)
        roles = granted(principal)
        assert all_used <= roles, (
            f"{principal} used verbs its Role lacks: {sorted(all_used - roles)}"
        )
        assert roles <= tour_used, (
            f"{principal}'s Role grants unused verbs: {sorted(roles - tour_used)}"
        )


def test_podsnapshots_are_never_written():
    for principal in PRINCIPALS:
        for verb, _group, resource in granted(principal):
            if resource == "podsnapshots":
                assert verb in ("get", "list", "watch", "delete"), (principal, verb)


def test_backend_roles_pin_names():
    """Where the API allows it, the in-pod Roles name the user's own objects."""
    from k8s_emulator import NOTEBOOK

    rules = role_rules("sa-pod-snapshot")
    named = {(tuple(r["resources"]), tuple(r["verbs"])): r.get("resourceNames") for r in rules}
    assert named[(("pods",), ("get",))] == [f"{NOTEBOOK}-0"]
    assert named[(("statefulsets",), ("get", "patch"))] == [NOTEBOOK]
    assert named[(("statefulsets/scale",), ("patch",))] == [NOTEBOOK]
    assert named[(("podsnapshotmanualtriggers",), ("get", "delete"))] == [
        f"jupyter-pause-{NOTEBOOK}"
    ]
    ws_rules = role_rules("sa-workspace")
    assert any(
        r.get("resourceNames") == [WORKSPACE] for r in ws_rules if r["resources"] == ["workspaces"]
    )
    # every Role is namespaced to the user's namespace
    from k8s_emulator import RBAC_DIR, VARIABLES

    for path in RBAC_DIR.glob("*.yaml"):
        text = path.read_text()
        assert "ClusterRole" not in text, path
        assert "namespace: ${NAMESPACE}" in text, path
    assert VARIABLES["NAMESPACE"] == NAMESPACE
