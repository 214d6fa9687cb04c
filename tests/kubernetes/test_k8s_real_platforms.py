"""What broke on the real platforms (issue 13), as scenarios against the emulator.

Each test names the defect it guards.  The emulator models what the real
controllers do (a pod frozen while GKE checkpoints it, ``postCheckpoint:
stop``, generated StatefulSet names, per-Workspace ServiceAccounts, label
rules, 403 before 404, transient 503s); see ``tests/k8s_emulator``.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from conftest import (
    FAST,
    NAMESPACE,
    WORKSPACE,
    cli,
    gc_deleting_the_policy,
    pod_backend,
    ws_backend,
)
from k8s_emulator import WORKSPACE_SA, Scenario

from jupyter_pause.backends.base import BackendError
from jupyter_pause.backends.kubernetes.common import pod_restored
from jupyter_pause.ledger import EventType, Ledger

TRIGGER = "jupyter-pause-nb"


def ours(cluster, trigger=TRIGGER):
    return cluster.emu.list("PodSnapshot", NAMESPACE, f"gke-pod-snapshot-triggered-by={trigger}")


def restart_pod(cluster, name="nb-0"):
    """A node upgrade or Spot preemption: the pod goes, its StatefulSet makes a new one."""
    old = cluster.pod(name)["metadata"]["uid"]
    cluster.emu.store.delete(cluster.emu.resource("Pod"), NAMESPACE, name, graceful=True)
    return cluster.wait_for(
        lambda: (p := cluster.pod_ready(name)) and p["metadata"]["uid"] != old and p,
        what="the pod recreated",
    )


def in_thread(fn):
    """Run a pausing "process" in the background; its outcome in ``.result``."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as e:  # the frozen process may die: that is its outcome
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.box = box
    return thread


class ProcessLedger:
    """The ledger as written by the process in one pod: a dead process writes nothing.

    (The test's thread outlives the pod it stands for; the real process does not.)
    """

    def __init__(self, ledger: Ledger, cluster, pod_name: str):
        self.ledger, self.cluster, self.pod_name = ledger, cluster, pod_name
        self.uid = cluster.pod(pod_name)["metadata"]["uid"]

    def record(self, *args, **kwargs):
        pod = self.cluster.pod(self.pod_name)
        alive = pod and pod["metadata"]["uid"] == self.uid
        if alive and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            return self.ledger.record(*args, **kwargs)
        return None


# -- 1. no silent rollback ---------------------------------------------------------------


def test_failed_pause_deletes_its_ready_snapshot_despite_api_errors(
    make_cluster, sessions, shutdown_kernel
):
    """Defect 1: a step after the snapshot is Ready fails, and deletes fail twice."""
    cluster = make_cluster()
    cluster.add_gke_notebook()
    patches = []

    def second_sts_patch(req):
        if req.verb == "patch" and req.resource == "configmaps" and req.principal != "admin":
            patches.append(req)
            return len(patches) == 2  # the "state=paused" annotation, after the snapshot
        return False

    cluster.emu.fail_next(1, code=422, match=second_sts_patch)
    cluster.emu.fail_next(
        2, code=503, match=lambda r: r.verb == "delete" and r.resource == "podsnapshots"
    )
    with pytest.raises(BackendError, match="keeps running"):
        asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    assert cluster.pod_ready() is not None
    assert ours(cluster) == []
    # a later pod start is a cold start: nothing old is restored
    restart_pod(cluster)
    assert "nb-0" not in cluster.ctl.restored_pods


def test_come_back_deletes_a_leftover_snapshot_whatever_the_state(make_cluster):
    """Defect 1: a Ready snapshot of ours survives while the state says "failed"."""
    cluster = make_cluster()
    cluster.add_gke_notebook()
    cluster.emu.create(
        "PodSnapshotManualTrigger",
        NAMESPACE,
        {"metadata": {"name": TRIGGER}, "spec": {"targetPod": "nb-0"}},
    )
    cluster.wait_for(lambda: ours(cluster) and pod_restored_ready(cluster), what="a Ready snapshot")
    cluster.set_state(**{"jupyter-pause.io/state": "failed"})
    pod = restart_pod(cluster)
    assert pod_restored(pod)  # the silent rollback happened once ...
    report = asyncio.run(pod_backend(cluster).startup())
    assert report.info["stale_snapshot"] is True
    cluster.wait_for(lambda: not ours(cluster), what="the stale snapshot deleted")
    # ... and never again
    restart_pod(cluster)
    assert cluster.ctl.restored_pods.count("nb-0") == 1


def pod_restored_ready(cluster):
    return all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in s["status"]["conditions"])
        for s in ours(cluster)
    )


def test_restored_copy_deletes_its_snapshot_only_after_pod_restored(
    make_cluster, sessions, shutdown_kernel
):
    """Defect 1: memory is loaded lazily; PodRestored may come after Ready."""
    cluster = make_cluster(Scenario(restore_in_place=True, restored_condition_delay=0.3))
    cluster.add_gke_notebook()
    seen = []

    def on_request(req):
        if req.verb == "delete" and req.resource == "podsnapshots":
            seen.append(bool(pod_restored(cluster.pod())))
        return 0

    cluster.emu.response_delay = on_request
    facts = asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    assert facts.restored_from == "snapshot"
    assert seen and all(seen), "a snapshot was deleted before the pod reported PodRestored"
    assert ours(cluster) == [] or all(s["metadata"].get("deletionTimestamp") for s in ours(cluster))


# -- 2. a frozen pod cannot time itself out ------------------------------------------------


def test_hung_checkpoint_is_seen_and_aborted_from_outside(
    make_cluster, sessions, shutdown_kernel, capsys
):
    """Defect 2: the checkpoint hangs; the process is frozen with its deadlines."""
    cluster = make_cluster(Scenario(trigger_outcome="hung"))
    cluster.add_gke_notebook()
    process = cluster.process_context("sa-pod-snapshot", "nb-0")
    pausing = in_thread(
        lambda: asyncio.run(
            pod_backend(
                cluster, context=process, snapshot_timeout=1.0, cleanup_timeout=1.0
            ).release(sessions, shutdown_kernel)
        )
    )
    cluster.wait_for(lambda: ours(cluster) and not cluster.pod_ready(), what="frozen")
    rc, out = cli(cluster, "status", "nb", capsys=capsys)
    assert rc == 0 and "snapshotting" in out and "since:" in out, out
    assert "jupyter pause abort nb" in out and "trigger: jupyter-pause-nb" in out
    rc, out = cli(cluster, "abort", "nb", "--frozen-limit", "0.2", capsys=capsys)
    assert rc == 0, out
    assert "was deleted" in out and "checkpoints" in out
    assert ours(cluster) == []
    assert cluster.emu.find("PodSnapshotManualTrigger", NAMESPACE, TRIGGER) is None
    # the StatefulSet brings a new pod, cold; the checkpoints bring the notebooks back
    cluster.wait_for(lambda: cluster.pod_ready(), what="a new pod")
    pausing.join(30)
    assert "result" not in pausing.box  # the frozen process never finished its pause
    report = asyncio.run(pod_backend(cluster).startup())
    assert report.restored_from is None and report.detail.startswith("cold start")
    assert [c["path"] for c in report.info["checkpoints"]] == ["train.ipynb", "eval.ipynb"]


# -- 3. the GKE Workspaces add-on, wired as it really is ---------------------------------------


def test_addon_enabled_on_the_kind_and_postcheckpoint_stop(
    make_cluster, sessions, shutdown_kernel, capsys
):
    """Defect 3: GKE's kind enables the add-on ("True"), and the process never sees the end."""
    cluster = make_cluster(Scenario(workspace_addon=True))
    cluster.add_workspace(addon=True)  # the annotation is on the WorkspaceKind
    ledger = Ledger()
    pod = cluster.workspace_pod()
    process = cluster.process_context("sa-workspace", pod)
    pausing = in_thread(
        lambda: asyncio.run(
            ws_backend(cluster, ProcessLedger(ledger, cluster, pod), context=process).release(
                sessions, shutdown_kernel
            )
        )
    )
    cluster.wait_for(lambda: cluster.pod(pod) is None, what="the add-on stopped the pod")
    pausing.join(30)
    assert "result" not in pausing.box  # frozen, then stopped: it never returned
    assert [e.type for e in ledger.events()] == [EventType.SNAPSHOT_REQUESTED]
    ws = cluster.emu.get("Workspace", NAMESPACE, WORKSPACE)
    snapshot = ws["metadata"]["annotations"]["podsnapshot.gke.kubeflow.org/last-checkpoint-name"]
    assert ws["metadata"]["annotations"]["jupyter-pause.io/state"] == "snapshotting"
    rc, out = cli(cluster, "status", WORKSPACE, capsys=capsys)
    assert "paused" in out
    assert cli(cluster, "resume", WORKSPACE, capsys=capsys)[0] == 0
    cluster.wait_for(lambda: cluster.pod_ready(cluster.workspace_pod()), what="back")
    report = asyncio.run(ws_backend(cluster, ledger).startup())
    assert report.info["was_paused"] and report.info["pause_recorded_later"]
    types = [e.type for e in ledger.events()]
    for recorded_later in (
        EventType.SNAPSHOT_READY,
        EventType.WORKSPACE_STOPPED,
        EventType.ACCELERATOR_RELEASED,
    ):
        assert types.count(recorded_later) == 1, types
    assert ledger.events(types=[EventType.SNAPSHOT_READY])[0].data["name"] == snapshot


def test_addon_decision_comes_from_the_pod():
    """Defect 3: the webhook's marks decide; "false" on the Workspace and TPUs say no."""
    from jupyter_pause.backends.kubernetes.workspace import addon_snapshots

    gated = {"spec": {"readinessGates": [{"conditionType": "podsnapshot.gke.kubeflow.org/active"}]}}
    ipc = {"spec": {"volumes": [{"name": "jupyter-ipc-config", "configMap": {}}]}}
    plain = {"spec": {"runtimeClassName": "gvisor"}}
    ws = {"metadata": {"annotations": {}}}
    off = {"metadata": {"annotations": {"podsnapshot.gke.kubeflow.org/enabled": "FALSE"}}}
    tpu = {
        "spec": {
            **gated["spec"],
            "containers": [{"resources": {"limits": {"google.com/tpu": "4"}}}],
        }
    }
    assert addon_snapshots(gated, ws) and addon_snapshots(ipc, ws)
    assert not addon_snapshots(plain, ws)
    assert not addon_snapshots(gated, off)
    assert not addon_snapshots(tpu, ws)


def test_addon_trigger_failure_fails_fast_and_reopens_the_pod(
    make_cluster, sessions, shutdown_kernel
):
    """Defect 3: Triggered=False (e.g. driver < 570) never recovers on its own."""
    cluster = make_cluster(Scenario(workspace_addon=True, trigger_outcome="fail"))
    cluster.add_workspace(addon=True)
    ledger = Ledger()
    with pytest.raises(BackendError) as info:
        asyncio.run(ws_backend(cluster, ledger, stop_timeout=60).release(sessions, shutdown_kernel))
    message = str(info.value)
    assert "ws-myws-trigger failed" in message and "runsc error" in message
    assert "reachable again" in message
    cluster.wait_for(lambda: cluster.pod_ready(cluster.workspace_pod()), what="the gate reopened")
    assert EventType.SNAPSHOT_FAILED in [e.type for e in ledger.events()]


# -- 4. Kubeflow Workspaces v2: identity and state ----------------------------------------------


def test_workspace_serviceaccount_gets_the_clusterrole_or_status_says_so(make_cluster, monkeypatch):
    """Defect 4: ws-<name> has no rights unless the kind lists the ClusterRole."""
    from jupyter_pause.backends.kubernetes.client import KubeClient
    from jupyter_pause.backends.kubernetes.detect import UndetectedBackend, detect_backend_class
    from jupyter_pause.backends.kubernetes.workspace import KubeflowWorkspaceBackend

    cluster = make_cluster()
    cluster.add_workspace_kind(cluster_roles=())
    cluster.add_workspace()
    pod = cluster.workspace_pod()
    monkeypatch.setenv("POD_NAME", pod)
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    client = KubeClient(kubeconfig=cluster.kubeconfig, context="sa-workspace", namespace=NAMESPACE)
    cls = detect_backend_class(client=client)
    assert issubclass(cls, UndetectedBackend)
    assert (
        "403" in cls().describe()["name"]
        and "local (kubernetes detection failed" in (cls().describe()["name"])
    )
    # listing the ClusterRole in the kind: the controller binds it to ws-<name>
    cluster.emu.mutate(
        "WorkspaceKind",
        None,
        "jupyterlab-resumable",
        lambda k: k["spec"]["podTemplate"]["serviceAccount"].update(
            clusterRoles=[{"name": "jupyter-pause-workspace"}]
        ),
    )
    # (the binding is the controller's to make, in its own time: detection succeeds once it is)
    cluster.wait_for(
        lambda: detect_backend_class(client=client) is KubeflowWorkspaceBackend,
        what="ws-<name> bound to the ClusterRole, and the Workspace detected",
    )
    assert any(
        b["roleRef"]["name"] == "jupyter-pause-workspace"
        and any(s.get("name") == WORKSPACE_SA.rsplit(":", 1)[1] for s in b.get("subjects") or [])
        for b in cluster.emu.list("RoleBinding", NAMESPACE)
    )


def test_workspace_quota_refusal_is_failed_with_the_controllers_message(make_cluster, capsys):
    """Defect 4: the controller's status.state/stateMessage, the StatefulSet found by label."""
    cluster = make_cluster(Scenario(quota_refuses=True))
    cluster.add_workspace(paused=True)
    cluster.emu.mutate(
        "Workspace",
        NAMESPACE,
        WORKSPACE,
        lambda w: (
            w["metadata"].setdefault("annotations", {}).update({"jupyter-pause.io/state": "paused"})
        ),
    )
    assert cli(cluster, "resume", WORKSPACE, capsys=capsys)[0] == 0
    cluster.wait_for(
        lambda: (
            cluster.emu.get("Workspace", NAMESPACE, WORKSPACE)["status"].get("state") == "Error"
        ),
        what="the controller reports the refusal",
    )
    rc, out = cli(cluster, "status", WORKSPACE, capsys=capsys)
    assert f"{WORKSPACE} (Workspace): failed" in out, (rc, capsys.readouterr())
    assert "exceeded quota" in out


# -- 5. names and limits --------------------------------------------------------------------------


def test_a_52_character_statefulset_name_fits_the_snapshot_label(
    make_cluster, sessions, shutdown_kernel
):
    """Defect 5: the trigger's name becomes a label value (<= 63 characters)."""
    from jupyter_pause.backends.kubernetes.podsnapshot import GkePodSnapshotBackend

    name = "n" * 52
    cluster = make_cluster(enforce_rbac=False)
    cluster.add_gke_notebook(name=name)
    backend = GkePodSnapshotBackend(
        kubeconfig=cluster.kubeconfig,
        kube_context="admin",
        namespace=NAMESPACE,
        pod_name=f"{name}-0",
        snapshot_timeout=5.0,
        **FAST,
    )
    facts = asyncio.run(backend.release(sessions, shutdown_kernel))
    assert len(facts.details["trigger"]) <= 63
    snap = cluster.emu.get("PodSnapshot", NAMESPACE, facts.details["snapshot"])
    assert snap["metadata"]["labels"]["gke-pod-snapshot-triggered-by"] == facts.details["trigger"]


def test_status_on_plain_gke_without_access_to_workspaces(cluster, capsys):
    """Defect 5: the API server answers 403 (not 404) for a kind the caller may not read."""
    cluster.add_gke_notebook()
    rc, out = cli(cluster, "status", "nb", context="sa-pod-snapshot", capsys=capsys)
    assert rc == 0 and "nb (StatefulSet): running" in out


def test_api_errors_after_paused_true_are_not_a_failed_pause(cluster, sessions, shutdown_kernel):
    """Defect 5: the control plane is away for a while after spec.paused=true was applied."""
    cluster.add_workspace()

    def pod_read_after_pause(req):
        ws = cluster.emu.get("Workspace", NAMESPACE, WORKSPACE)
        return req.verb == "get" and req.resource == "pods" and ws["spec"].get("paused")

    cluster.emu.fail_next(6, code=503, match=pod_read_after_pause)
    facts = asyncio.run(ws_backend(cluster, stop_timeout=60).release(sessions, shutdown_kernel))
    assert facts.details["workspace"] == WORKSPACE
    ann = cluster.emu.get("Workspace", NAMESPACE, WORKSPACE)["metadata"]["annotations"]
    assert ann["jupyter-pause.io/state"] == "paused"


def test_restored_copy_reloads_its_token(make_cluster, sessions, shutdown_kernel):
    """Defect 5: right after a restore the old pod's token is refused (401) until reloaded."""
    cluster = make_cluster(Scenario(restore_in_place=True))
    cluster.add_gke_notebook()
    restored = []

    def after_restore(req):
        return bool(cluster.ctl.restored_pods) and not restored.append(req) and len(restored) <= 2

    cluster.emu.fail_next(2, code=401, match=after_restore)
    facts = asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    assert facts.restored_from == "snapshot"
    assert [r.code for r in cluster.emu.requests if r.code == 401] == [401, 401]


# -- 7. gc never suggests deleting other tools' snapshots -------------------------------------------


def test_gc_suggests_deleting_by_policy_not_everything(
    make_cluster, sessions, shutdown_kernel, capsys
):
    cluster = make_cluster(Scenario(workspace_addon=True))
    cluster.add_gke_notebook()
    cluster.add_workspace(addon=True)
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    asyncio.run(
        ws_backend(cluster).release(sessions, shutdown_kernel)
    )  # the add-on's ws-* snapshot
    addon = cluster.emu.list(
        "PodSnapshot", NAMESPACE, "gke-pod-snapshot-triggered-by=ws-myws-trigger"
    )
    assert addon
    rc, out = gc_deleting_the_policy(cluster, "1d", capsys)
    assert rc == 1 and "--all" not in out and "gc --policy notebooks --older-than 0s" in out
    rc, out = cli(
        cluster, "gc", "--policy", "notebooks", "--older-than", "0s", context="gc", capsys=capsys
    )
    assert rc == 0, out
    assert ours(cluster) == []
    assert [
        s["metadata"]["name"]
        for s in cluster.emu.list(
            "PodSnapshot", NAMESPACE, "gke-pod-snapshot-triggered-by=ws-myws-trigger"
        )
    ] == [s["metadata"]["name"] for s in addon]


def test_trigger_names_are_label_values_and_stay_distinct():
    """Defect 5: legal StatefulSet names (1-52 characters) give valid, distinct label values."""
    import random
    import re
    import string

    from jupyter_pause.backends.kubernetes.common import trigger_name_for

    rng = random.Random(13)
    inner = string.ascii_lowercase + string.digits + "-"
    edge = string.ascii_lowercase + string.digits
    names = {"a" * 52, "x" * 49, "x" * 50, "n" * 40 + "-" * 11 + "z"}
    for length in range(1, 53):
        for _ in range(40):
            middle = "".join(rng.choice(inner) for _ in range(max(0, length - 2)))
            names.add((rng.choice(edge) + middle + rng.choice(edge))[:length])
    triggers: dict[str, str] = {}
    for name in names:
        trigger = trigger_name_for(name)
        assert len(trigger) <= 63, name
        assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", trigger), name
        assert trigger_name_for(name) == trigger
        assert triggers.setdefault(trigger, name) == name, f"{name} and {triggers[trigger]} collide"
    assert trigger_name_for("x" * 49) == "jupyter-pause-" + "x" * 49  # short names unchanged
