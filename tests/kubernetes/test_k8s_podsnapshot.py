"""The ``gke-pod-snapshot`` backend against the emulated GKE API."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from conftest import NAMESPACE, cli, pod_backend
from k8s_emulator import Scenario

from jupyter_pause.backends.base import BackendError
from jupyter_pause.ledger import EventType, Ledger


def ann(cluster, name="nb"):
    return cluster.state(name)


def types(ledger):
    return [e.type for e in ledger.events()]


@pytest.mark.parametrize("shape", ["object", "string"])
def test_pause_snapshots_then_scales_down(make_cluster, sessions, shutdown_kernel, shape):
    cluster = make_cluster(Scenario(snapshot_created_shape=shape))
    cluster.add_gke_notebook()
    ledger = Ledger()
    backend = pod_backend(cluster, ledger)

    facts = asyncio.run(backend.release(sessions, shutdown_kernel))

    snap = cluster.emu.get("PodSnapshot", NAMESPACE, facts.details["snapshot"])
    assert snap["metadata"]["labels"]["gke-pod-snapshot-triggered-by"] == "jupyter-pause-nb"
    assert facts.details["trigger"] == "jupyter-pause-nb" and facts.details["statefulset"] == "nb"
    assert facts.restored_from is None
    # the pod's owner is scaled down, so the GPU node can go
    assert cluster.emu.get("StatefulSet", NAMESPACE, "nb")["spec"]["replicas"] == 0
    cluster.wait_for(lambda: cluster.pod() is None, what="pod deleted")
    a = ann(cluster)
    assert a["jupyter-pause.io/state"] == "paused"
    assert a["jupyter-pause.io/snapshot"] == facts.details["snapshot"]
    assert a["jupyter-pause.io/replicas"] == "1"
    fingerprint = json.loads(a["jupyter-pause.io/fingerprint"])
    assert fingerprint["gpu_model"] == "Tesla T4"
    assert (
        fingerprint["image"].endswith("torch:2.6")
        and fingerprint["accelerator"] == "nvidia-tesla-t4"
    )
    checkpoints = json.loads(a["jupyter-pause.io/checkpoints"])
    assert [c["path"] for c in checkpoints] == ["train.ipynb", "eval.ipynb"]
    # kernels stay alive inside the snapshot: the backend never shuts them down
    assert shutdown_kernel.calls == []
    assert types(ledger) == [
        EventType.SNAPSHOT_REQUESTED,
        EventType.SNAPSHOT_READY,
        EventType.WORKSPACE_STOPPED,
        EventType.ACCELERATOR_RELEASED,
    ]
    released = ledger.events(types=[EventType.ACCELERATOR_RELEASED])[0]
    assert released.data == {"gpus": 1, "gpu_model": "Tesla T4"}


def test_trigger_failure_leaves_pod_running(make_cluster, sessions, shutdown_kernel):
    cluster = make_cluster(Scenario(trigger_outcome="fail"))
    cluster.add_gke_notebook()
    ledger = Ledger()
    uid = cluster.pod()["metadata"]["uid"]
    with pytest.raises(BackendError) as info:
        asyncio.run(pod_backend(cluster, ledger).release(sessions, shutdown_kernel))
    msg = str(info.value)
    assert "runsc error: exit status 128" in msg and "keeps running" in msg
    assert cluster.pod()["metadata"]["uid"] == uid  # same pod, still running
    assert cluster.emu.get("StatefulSet", NAMESPACE, "nb")["spec"]["replicas"] == 1
    assert ann(cluster)["jupyter-pause.io/state"] == "failed"
    assert cluster.emu.find("PodSnapshotManualTrigger", NAMESPACE, "jupyter-pause-nb") is None
    assert EventType.SNAPSHOT_FAILED in types(ledger)
    assert EventType.ACCELERATOR_RELEASED not in types(ledger)


def test_checkpoint_failure_is_reported(make_cluster, sessions, shutdown_kernel):
    cluster = make_cluster(Scenario(trigger_outcome="checkpoint_failed"))
    cluster.add_gke_notebook()
    with pytest.raises(BackendError, match="failed"):
        asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    assert cluster.emu.list("PodSnapshot", NAMESPACE) == [] or all(
        s["metadata"].get("deletionTimestamp") for s in cluster.emu.list("PodSnapshot", NAMESPACE)
    )
    assert cluster.pod_ready()


def test_snapshot_never_ready_times_out(make_cluster, sessions, shutdown_kernel):
    cluster = make_cluster(Scenario(trigger_outcome="never_ready"))
    cluster.add_gke_notebook()
    ledger = Ledger()
    backend = pod_backend(cluster, ledger, snapshot_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(BackendError) as info:
        asyncio.run(backend.release(sessions, shutdown_kernel))
    assert time.monotonic() - started < 3, "must not hang"
    msg = str(info.value)
    assert "not ready after 0.5 s" in msg and "PodSnapshot" in msg and "keeps running" in msg
    assert cluster.pod_ready() is not None
    a = ann(cluster)
    assert (
        a["jupyter-pause.io/state"] == "failed" and "keeps running" in a["jupyter-pause.io/message"]
    )
    # the late snapshot must not be restored at some later pod restart
    cluster.wait_for(
        lambda: not cluster.emu.list("PodSnapshot", NAMESPACE), what="partial snapshot deleted"
    )
    assert (
        ledger.events(types=[EventType.SNAPSHOT_FAILED])[0]
        .data["error"]
        .startswith("the pod snapshot was not ready")
    )
    # the CLI shows the failure while the pod keeps running
    from jupyter_pause.backends.kubernetes import status as status_mod

    st = status_mod.fetch(backend.client, "nb", "statefulset")
    assert st.state == "running" and "last pause failed" in st.reason


def test_missing_policy_fails_clearly(make_cluster, sessions, shutdown_kernel):
    cluster = make_cluster()
    cluster.add_gke_notebook(policy=False)
    with pytest.raises(BackendError, match="no PodSnapshotPolicy"):
        asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    assert cluster.pod_ready()


def test_restored_copy_does_not_scale_down(make_cluster, sessions, shutdown_kernel):
    """The process restored from the snapshot wakes up inside release(): it must notice."""
    cluster = make_cluster(Scenario(restore_in_place=True))
    cluster.add_gke_notebook()
    ledger = Ledger()
    facts = asyncio.run(pod_backend(cluster, ledger).release(sessions, shutdown_kernel))
    assert facts.restored_from == "snapshot"
    assert facts.came_back["pod_restored"] is True
    assert cluster.emu.get("StatefulSet", NAMESPACE, "nb")["spec"]["replicas"] == 1
    pod = cluster.pod_ready()
    assert pod is not None and any(c["type"] == "PodRestored" for c in pod["status"]["conditions"])
    a = ann(cluster)
    assert (
        a["jupyter-pause.io/state"] == "ready" and a["jupyter-pause.io/restored-from"] == "snapshot"
    )
    # single use: the consumed snapshot and its trigger are deleted
    cluster.wait_for(
        lambda: not cluster.emu.list("PodSnapshot", NAMESPACE), what="snapshot deleted"
    )
    assert cluster.emu.find("PodSnapshotManualTrigger", NAMESPACE, "jupyter-pause-nb") is None
    assert EventType.ACCELERATOR_RELEASED not in types(ledger)
    changed = ledger.events(types=[EventType.STATE_CHANGED])[-1]
    assert changed.data["restored_from"] == "snapshot"


def _pause_and_resume(cluster, sessions, shutdown_kernel, capsys):
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")
    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 0, out
    return cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")


def test_startup_after_restore(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    _pause_and_resume(cluster, sessions, shutdown_kernel, capsys)
    ledger = Ledger()
    report = asyncio.run(pod_backend(cluster, ledger).startup())
    assert report.restored_from == "snapshot"
    assert "restored from snapshot" in report.detail
    assert report.info["was_paused"] and report.info["pod_restored"]
    assert ann(cluster)["jupyter-pause.io/restored-from"] == "snapshot"
    assert "jupyter-pause.io/resume-operation" not in ann(cluster)
    assert EventType.CAPACITY_ACQUIRED in types(ledger)
    cluster.wait_for(
        lambda: not cluster.emu.list("PodSnapshot", NAMESPACE), what="snapshot consumed"
    )


def test_silent_cold_start_falls_back_to_checkpoints(
    make_cluster, sessions, shutdown_kernel, capsys
):
    cluster = make_cluster(Scenario(restore="cold"))
    cluster.add_gke_notebook()
    _pause_and_resume(cluster, sessions, shutdown_kernel, capsys)
    ledger = Ledger()
    backend = pod_backend(cluster, ledger, resume_from_checkpoint_on_cold_start=True)
    report = asyncio.run(backend.startup())
    assert report.restored_from is None
    assert report.detail.startswith("cold start")
    assert report.info["was_paused"] and not report.info["pod_restored"]
    assert report.auto_resume is True
    assert [c["path"] for c in report.info["checkpoints"]] == ["train.ipynb", "eval.ipynb"]
    assert ann(cluster)["jupyter-pause.io/restored-from"] == "checkpoint"
    changed = ledger.events(types=[EventType.STATE_CHANGED])[-1]
    assert changed.data["restored_from"] == "checkpoint"
    # the stale snapshot must not be restored by a later pod restart
    cluster.wait_for(
        lambda: not cluster.emu.list("PodSnapshot", NAMESPACE), what="snapshot deleted"
    )


def test_cold_start_explains_a_different_gpu(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")

    def to_l4(s):
        s["spec"]["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"] = (
            "nvidia-l4"
        )
        s["spec"]["template"]["spec"]["containers"][0]["image"] = (
            "us-docker.pkg.dev/p/notebooks/torch:2.7"
        )

    cluster.emu.mutate("StatefulSet", NAMESPACE, "nb", to_l4)
    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 0
    assert "will not be restored" in out and "GPU type differs" in out and "image differs" in out
    cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")
    assert "nb-0" not in cluster.ctl.restored_pods  # the spec hash differs: cold start
    report = asyncio.run(pod_backend(cluster).startup())
    assert report.restored_from is None
    assert "GPU type differs" in report.detail
    assert {d["field"] for d in report.info["differences"]} >= {"accelerator", "image"}


def test_startup_of_a_pod_never_paused(cluster):
    cluster.add_gke_notebook()
    ledger = Ledger()
    report = asyncio.run(pod_backend(cluster, ledger).startup())
    assert report.restored_from is None and report.detail == ""
    assert report.info["was_paused"] is False
    assert ledger.events() == []


def test_waiting_for_capacity_is_recorded_after_resume(
    make_cluster, sessions, shutdown_kernel, capsys
):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")
    cluster.scenario.capacity = "unavailable"
    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 0
    cluster.wait_for(
        lambda: any(
            e["reason"] == "TriggeredScaleUp" for e in cluster.emu.list("Event", NAMESPACE)
        ),
        what="unschedulable",
    )
    rc, out = cli(cluster, "status", "nb", capsys=capsys)
    assert "waiting-for-capacity" in out and "Insufficient nvidia.com/gpu" in out
    assert "autoscaler is adding a node" in out
    cluster.scenario.capacity = "available"
    cluster.wait_for(lambda: cluster.pod_ready(), what="scheduled")
    ledger = Ledger()
    asyncio.run(pod_backend(cluster, ledger).startup())
    waiting = ledger.events(types=[EventType.WAITING_FOR_CAPACITY])
    assert len(waiting) == 1 and "Insufficient nvidia.com/gpu" in waiting[0].data["reason"]
    assert waiting[0].data["scale_up"] == "triggered"
    acquired = ledger.events(types=[EventType.CAPACITY_ACQUIRED])
    assert len(acquired) == 1 and acquired[0].time >= waiting[0].time


def test_not_a_statefulset_pod(cluster, sessions, shutdown_kernel):
    cluster.emu.create(
        "Pod",
        NAMESPACE,
        {"metadata": {"name": "nb-0"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
    )
    with pytest.raises(BackendError, match="not owned by a StatefulSet"):
        asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
