"""The ``kubeflow-workspace`` backend against emulated Kubeflow (and GKE Workspaces) APIs."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from conftest import NAMESPACE, WORKSPACE, cli, ws_backend
from k8s_emulator import Scenario

from jupyter_pause.backends.base import BackendError
from jupyter_pause.ledger import EventType, Ledger


def ws(cluster):
    return cluster.emu.get("Workspace", NAMESPACE, WORKSPACE)


def ann(cluster):
    return ws(cluster)["metadata"].get("annotations") or {}


def test_pause_without_snapshot_addon(cluster, sessions, shutdown_kernel, capsys):
    cluster.add_workspace()
    ledger = Ledger()
    facts = asyncio.run(ws_backend(cluster, ledger).release(sessions, shutdown_kernel))
    assert facts.details["workspace"] == WORKSPACE and "snapshot" not in facts.details
    assert ws(cluster)["spec"]["paused"] is True
    cluster.wait_for(lambda: cluster.pod(cluster.workspace_pod()) is None, what="pod gone")
    cluster.wait_for(lambda: ws(cluster).get("status", {}).get("state") == "Paused", what="Paused")
    a = ann(cluster)
    assert a["jupyter-pause.io/state"] == "paused"
    assert '"image_config":"jupyterlab-gpu-2.6"' in a["jupyter-pause.io/fingerprint"]
    assert [e.type for e in ledger.events()] == [
        EventType.WORKSPACE_STOPPED,
        EventType.ACCELERATOR_RELEASED,
    ]
    assert shutdown_kernel.calls == []

    rc, out = cli(cluster, "status", WORKSPACE, capsys=capsys)
    assert rc == 0 and f"{WORKSPACE} (Workspace): paused" in out

    # resume = spec.paused=false; no snapshot: the server comes back cold, from checkpoints
    rc, out = cli(cluster, "resume", WORKSPACE, capsys=capsys)
    assert rc == 0 and "operation" in out
    assert ws(cluster)["spec"]["paused"] is False
    cluster.wait_for(lambda: cluster.pod_ready(cluster.workspace_pod()), what="pod back")
    report = asyncio.run(ws_backend(cluster, ledger).startup())
    assert report.restored_from is None and report.detail.startswith("cold start")
    assert report.info["checkpoints"][0]["path"] == "train.ipynb"
    assert ann(cluster)["jupyter-pause.io/restored-from"] == "checkpoint"
    rc, out = cli(cluster, "status", WORKSPACE, capsys=capsys)
    assert "ready" in out and "restored from: checkpoint" in out


def test_pause_and_resume_with_gke_snapshot_addon(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster(Scenario(workspace_addon=True))
    cluster.add_workspace(addon=True)
    ledger = Ledger()
    facts = asyncio.run(ws_backend(cluster, ledger).release(sessions, shutdown_kernel))
    # the add-on took the snapshot before letting spec.paused=true through
    assert facts.details["snapshot"]
    assert cluster.emu.get("PodSnapshot", NAMESPACE, facts.details["snapshot"])
    assert ws(cluster)["spec"]["paused"] is True
    assert [e.type for e in ledger.events()] == [
        EventType.SNAPSHOT_REQUESTED,
        EventType.SNAPSHOT_READY,
        EventType.WORKSPACE_STOPPED,
        EventType.ACCELERATOR_RELEASED,
    ]
    cluster.wait_for(lambda: cluster.pod(cluster.workspace_pod()) is None, what="pod gone")
    rc, out = cli(cluster, "resume", WORKSPACE, capsys=capsys)
    assert rc == 0
    pod = cluster.wait_for(lambda: cluster.pod_ready(cluster.workspace_pod()), what="pod back")
    assert pod["metadata"]["annotations"]["podsnapshot.gke.io/ps-name"] == facts.details["snapshot"]
    report = asyncio.run(ws_backend(cluster, ledger).startup())
    assert report.restored_from == "snapshot"
    assert ann(cluster)["jupyter-pause.io/state"] == "ready"


def test_addon_snapshot_hangs_then_stop_times_out(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster(Scenario(workspace_addon=True, trigger_outcome="never_ready"))
    cluster.add_workspace(addon=True)
    ledger = Ledger()
    with pytest.raises(BackendError) as info:
        asyncio.run(
            ws_backend(cluster, ledger, stop_timeout=0.4).release(sessions, shutdown_kernel)
        )
    assert "did not stop within 0.4 s" in str(info.value) and "keeps running" in str(info.value)
    # running, but unreachable: the add-on's readiness gate is False while it checkpoints
    pod = cluster.pod(cluster.workspace_pod())
    assert pod["status"]["phase"] == "Running" and not cluster.pod_ready(cluster.workspace_pod())
    assert ann(cluster)["jupyter-pause.io/state"] == "failed"
    assert EventType.SNAPSHOT_FAILED in [e.type for e in ledger.events()]
    rc, out = cli(cluster, "status", WORKSPACE, capsys=capsys)
    assert "snapshotting" in out  # the add-on is still checkpointing


def test_restored_copy_of_a_workspace(make_cluster, sessions, shutdown_kernel):
    """The add-on's snapshot is restored: the frozen process wakes up in a pod with a new UID."""
    cluster = make_cluster(Scenario(workspace_addon=True, trigger_outcome="never_ready"))
    cluster.add_workspace(addon=True)
    result = {}

    def pause():
        try:
            result["facts"] = asyncio.run(
                ws_backend(cluster, stop_timeout=5).release(sessions, shutdown_kernel)
            )
        except Exception as e:  # pragma: no cover - reported below
            result["error"] = e

    thread = threading.Thread(target=pause)
    thread.start()
    cluster.wait_for(
        lambda: (
            ann(cluster).get("podsnapshot.gke.kubeflow.org/checkpoint-state") == "Checkpointing"
        ),
        what="add-on checkpointing",
    )
    time.sleep(0.1)
    # pause, release and resume all happened while the process was frozen
    pod_name = cluster.workspace_pod()
    sts = cluster.emu.get("StatefulSet", NAMESPACE, pod_name[: -len("-0")])
    cluster.emu.store.remove(cluster.emu.resource("Pod"), NAMESPACE, pod_name)
    pod = cluster.ctl._create_pod(NAMESPACE, sts, pod_name, restored_from="snap-1")

    def restored(p):
        p["status"]["phase"] = "Running"
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"},
            {
                "type": "PodRestored",
                "status": "True",
                "message": "Pod restored from snapshot snap-1",
            },
        ]

    cluster.emu.mutate("Pod", NAMESPACE, pod["metadata"]["name"], restored)
    thread.join(10)
    assert "error" not in result, result.get("error")
    facts = result["facts"]
    assert facts.restored_from == "snapshot" and facts.came_back["pod_restored"]
    assert ann(cluster)["jupyter-pause.io/restored-from"] == "snapshot"


def test_workspace_already_pausing_is_not_an_error(cluster, sessions, shutdown_kernel):
    cluster.add_workspace()

    def culler_pauses_first(req):
        # the culler (or the dashboard) pauses it while the server records its state
        if (req.verb, req.resource, req.content_type) == (
            "patch",
            "workspaces",
            "application/merge-patch+json",
        ):
            cluster.emu.mutate(
                "Workspace", NAMESPACE, WORKSPACE, lambda w: w["spec"].update(paused=True)
            )
        return 0

    cluster.emu.response_delay = culler_pauses_first
    facts = asyncio.run(ws_backend(cluster).release(sessions, shutdown_kernel))
    assert facts.details["workspace"] == WORKSPACE
