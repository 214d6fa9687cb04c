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
from conftest import (
    NAMESPACE,
    SESSION_REQUESTS,
    WORKSPACE,
    cli,
    gc_deleting_the_policy,
    pod_backend,
    ws_backend,
)
from k8s_emulator import PRINCIPALS, WORKSPACE_SA, role_rules

from jupyter_pause.backends.base import BackendError
from jupyter_pause.cli import main as cli_main


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
    cluster.emu.create(  # the node the pod ran on (the scenario has no node pool)
        "Node",
        None,
        {
            "metadata": {"name": cluster.pod()["spec"]["nodeName"]},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}},
        },
    )
    # -- the notice before SIGTERM: the server reads its own node
    assert asyncio.run(pod_backend(cluster).termination_notice()) is None
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")
    # -- the platform's node follower: the node and its pods, the state's annotation
    assert cli(cluster, "follow-nodes", "--once", context="node-follower", capsys=capsys)[0] == 0
    assert cli(cluster, "status", capsys=capsys)[0] == 0
    assert cli(cluster, "list", capsys=capsys)[0] == 0
    assert cli(cluster, "resume", "nb", capsys=capsys)[0] == 0
    cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")
    assert cli(cluster, "status", "nb", capsys=capsys)[0] == 0  # a pod: its events too
    asyncio.run(pod_backend(cluster).startup())
    cluster.scenario.trigger_outcome = "fail"
    with pytest.raises(BackendError):
        asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    # -- a hung snapshot, seen and aborted from outside: the pod is frozen
    cluster.scenario.trigger_outcome = "hung"
    cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")
    cluster.set_state(**{"jupyter-pause.io/state": "snapshotting"})
    cluster.emu.create(
        "PodSnapshotManualTrigger",
        NAMESPACE,
        {"metadata": {"name": "jupyter-pause-nb"}, "spec": {"targetPod": "nb-0"}},
    )
    cluster.wait_for(lambda: not cluster.pod_ready(), what="frozen")
    assert cli(cluster, "status", "nb", capsys=capsys)[0] == 0
    rc, out = cli(cluster, "abort", "nb", "--frozen-limit", "0", capsys=capsys)
    assert rc == 0 and "was deleted" in out, out
    cluster.scenario.trigger_outcome = "complete"
    cluster.wait_for(lambda: cluster.pod_ready(), what="pod back after abort")
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    # -- gc by the platform team: snapshots, then triggers, then the policy
    rc, out = gc_deleting_the_policy(cluster, "0s", capsys)
    assert rc == 0, out
    # -- kubeflow-workspace: pause, status, resume, startup; then with the add-on
    cluster.add_workspace()
    node = cluster.emu.get("Pod", NAMESPACE, cluster.workspace_pod())["spec"]["nodeName"]
    if cluster.emu.find("Node", None, node) is None:
        cluster.emu.create("Node", None, {"metadata": {"name": node}})
    assert asyncio.run(ws_backend(cluster).termination_notice()) is None
    asyncio.run(ws_backend(cluster).release(sessions, shutdown_kernel))
    rc, out = cli(cluster, "follow-nodes", "--once", context="node-follower", capsys=capsys)
    assert rc == 0 and f"{WORKSPACE}: node " in out, out
    assert cli(cluster, "status", WORKSPACE, capsys=capsys)[0] == 0
    assert cli(cluster, "resume", WORKSPACE, capsys=capsys)[0] == 0
    cluster.wait_for(lambda: cluster.pod_ready(cluster.workspace_pod()), what="workspace back")
    asyncio.run(ws_backend(cluster).startup())
    cluster.scenario.workspace_addon = True
    cluster.emu.mutate(
        "Workspace",
        NAMESPACE,
        WORKSPACE,
        lambda w: w["metadata"]["annotations"].update(
            {"podsnapshot.gke.kubeflow.org/enabled": "true"}
        ),
    )
    # the add-on's webhook mutates new pods only
    cluster.emu.store.delete(
        cluster.emu.resource("Pod"), NAMESPACE, cluster.workspace_pod(), graceful=True
    )
    cluster.wait_for(
        lambda: (
            (cluster.pod_ready(cluster.workspace_pod()) or {}).get("spec", {}).get("readinessGates")
        ),
        what="add-on pod",
    )
    asyncio.run(ws_backend(cluster).release(sessions, shutdown_kernel))
    # -- the platform team's fleet report: it lists, and starts nothing
    fleet = ["report", "--fleet", "--kubernetes", "--kubeconfig", cluster.kubeconfig]
    assert cli_main([*fleet, "--context", "fleet"]) == 0


def test_roles_grant_exactly_the_verbs_used(cluster, sessions, shutdown_kernel, capsys):
    tour(cluster, sessions, shutdown_kernel, capsys)
    requests = list(cluster.emu.requests)
    forbidden = [(r.principal, r.verb, r.resource, r.name) for r in requests if r.code == 403]
    assert forbidden == [], f"the Roles miss verbs the code uses: {forbidden}"
    for principal in [*PRINCIPALS, WORKSPACE_SA]:
        tour_used = used(requests, principal)
        all_used = tour_used | used([r for r in SESSION_REQUESTS if r.code != 403], principal)
        roles = granted(principal)
        assert all_used <= roles, (
            f"{principal} used verbs its Role lacks: {sorted(all_used - roles)}"
        )
        assert roles <= tour_used, (
            f"{principal}'s Role grants unused verbs: {sorted(roles - tour_used)}"
        )


def test_notebook_code_cannot_rewrite_its_pod_template():
    """Issue 13, defect 6: the server's only write to its StatefulSet is the scale."""
    writes = {
        (resource, verb)
        for verb, group, resource in granted("sa-pod-snapshot")
        if group == "apps" and verb not in ("get", "list", "watch")
    }
    assert writes == {("statefulsets/scale", "patch")}


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
    assert named[(("statefulsets",), ("get",))] == [NOTEBOOK]
    assert named[(("configmaps",), ("get", "patch"))] == [f"jupyter-pause-{NOTEBOOK}"]
    assert named[(("statefulsets/scale",), ("patch",))] == [NOTEBOOK]
    assert named[(("podsnapshotmanualtriggers",), ("get", "delete"))] == [
        f"jupyter-pause-{NOTEBOOK}"
    ]
    # The Workspace's ClusterRole is bound per namespace (RoleBinding) by the
    # controller; the only write it grants is patching Workspaces.
    writes = {
        (r, v)
        for rule in role_rules(WORKSPACE_SA)
        for r in rule["resources"]
        for v in rule["verbs"]
        if v not in ("get", "list", "watch")
    }
    assert writes == {("workspaces", "patch")}
    # every Role is namespaced to the user's namespace
    from k8s_emulator import DEPLOY, VARIABLES

    for path in [DEPLOY / "rbac" / "cli.yaml", DEPLOY / "gke-pod-snapshot" / "rbac.yaml"]:
        text = path.read_text()
        assert "ClusterRole" not in text, path
        assert "namespace: ${NAMESPACE}" in text, path
    assert VARIABLES["NAMESPACE"] == NAMESPACE
