"""Scheduled resumes of paused workspaces, against the emulator: the pod records
its notebooks' schedule when it pauses, ``jupyter pause schedule`` sets one from
outside, and ``jupyter pause scheduler`` (:func:`schedule.fire_due`) brings the
workspace back at the time, single flight with a resume by hand."""

from __future__ import annotations

import asyncio
import json
import time

from conftest import NAMESPACE, NOTEBOOK, WORKSPACE, cli, pod_backend, ws_backend

from jupyter_pause.backends.kubernetes import schedule
from jupyter_pause.backends.kubernetes.client import KubeClient

RESUME_AT = "jupyter-pause.io/resume-at"


def client(cluster, context="user"):
    return KubeClient(kubeconfig=cluster.kubeconfig, context=context, namespace=NAMESPACE)


def workspace(cluster):
    return cluster.emu.get("Workspace", NAMESPACE, WORKSPACE)


def test_a_pause_with_a_schedule_is_resumed_by_the_scheduler_at_its_time(
    cluster, sessions, shutdown_kernel, capsys
):
    cluster.add_workspace()
    at = time.time() + 3600
    sessions[1].schedule = {"at": at, "kind": "scheduled", "by": "user", "set_at": time.time()}
    sessions[0].schedule = {"at": at + 60, "kind": "predicted", "by": "prediction"}
    asyncio.run(ws_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod(cluster.workspace_pod()) is None, what="pod gone")
    annotations = workspace(cluster)["metadata"]["annotations"]
    assert json.loads(annotations[RESUME_AT])["at"] == at  # the earliest one

    rc, out = cli(cluster, "status", WORKSPACE, "--json", capsys=capsys)
    assert json.loads(out)["schedule"]["at"] == at

    kube = client(cluster)
    (early,) = schedule.fire_due(kube, [("workspace", WORKSPACE)], now=at - 1)
    assert early["outcome"] == "waiting" and workspace(cluster)["spec"]["paused"] is True

    (due,) = schedule.fire_due(kube, [("workspace", WORKSPACE)], now=at + 1)
    assert due["outcome"] == "started"
    ws = workspace(cluster)
    assert ws["spec"]["paused"] is False
    assert RESUME_AT not in (ws["metadata"].get("annotations") or {})
    op = json.loads(ws["metadata"]["annotations"]["jupyter-pause.io/resume-operation"])
    assert op["by"] == "schedule" and op["scheduled"] == "scheduled"
    cluster.wait_for(lambda: cluster.pod_ready(cluster.workspace_pod()), what="pod back")
    # used up: a later round starts nothing
    assert schedule.fire_due(kube, [("workspace", WORKSPACE)], now=at + 120) == []


def test_the_schedule_command_and_the_scheduler_on_plain_gke(
    cluster, sessions, shutdown_kernel, capsys
):
    cluster.add_gke_notebook()
    rc, out = cli(cluster, "schedule", NOTEBOOK, "in", "1h", capsys=capsys)
    assert rc == 1  # running: nothing to schedule
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")

    rc, out = cli(cluster, "schedule", NOTEBOOK, "tomorrow", "08:45", capsys=capsys)
    assert rc == 0 and "resumes at" in out
    rc, out = cli(cluster, "status", NOTEBOOK, capsys=capsys)
    assert "resumes at" in out and "08:45 (scheduled)" in out
    rc, out = cli(cluster, "scheduler", "--once", capsys=capsys)
    assert rc == 0 and out == ""  # not due yet: nothing happens
    assert cluster.emu.get("StatefulSet", NAMESPACE, NOTEBOOK)["spec"]["replicas"] == 0

    (due,) = schedule.fire_due(
        client(cluster), [("statefulset", NOTEBOOK)], now=time.time() + 2 * 86400
    )
    assert due["outcome"] == "started"
    assert cluster.emu.get("StatefulSet", NAMESPACE, NOTEBOOK)["spec"]["replicas"] == 1
    cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")


def test_a_resume_by_hand_cancels_the_schedule_and_nothing_is_doubled(
    cluster, sessions, shutdown_kernel, capsys
):
    cluster.add_workspace()
    asyncio.run(ws_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod(cluster.workspace_pod()) is None, what="pod gone")
    rc, _ = cli(cluster, "schedule", WORKSPACE, "in", "2h", capsys=capsys)
    assert rc == 0 and RESUME_AT in workspace(cluster)["metadata"]["annotations"]

    rc, out = cli(cluster, "resume", WORKSPACE, capsys=capsys)
    assert rc == 0
    assert RESUME_AT not in workspace(cluster)["metadata"]["annotations"]
    assert (
        schedule.fire_due(client(cluster), [("workspace", WORKSPACE)], now=time.time() + 86400)
        == []
    )

    # a schedule meeting a resume under way (the lock held) is used up, not doubled
    client(cluster).patch_workspace(
        WORKSPACE,
        {"spec": {"paused": True}, "metadata": {"annotations": {RESUME_AT: json.dumps({"at": 1})}}},
    )
    (result,) = schedule.fire_due(client(cluster), [("workspace", WORKSPACE)])
    assert result["outcome"] == "in-progress"
    assert RESUME_AT not in workspace(cluster)["metadata"]["annotations"]


def test_cancel_from_the_command_line(cluster, sessions, shutdown_kernel, capsys):
    cluster.add_workspace()
    asyncio.run(ws_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod(cluster.workspace_pod()) is None, what="pod gone")
    cli(cluster, "schedule", WORKSPACE, "monday", "08:45", capsys=capsys)
    rc, out = cli(cluster, "schedule", WORKSPACE, "--cancel", capsys=capsys)
    assert rc == 0 and "cancelled" in out
    rc, out = cli(cluster, "schedule", WORKSPACE, "--cancel", capsys=capsys)
    assert rc == 0 and "nothing was scheduled" in out
