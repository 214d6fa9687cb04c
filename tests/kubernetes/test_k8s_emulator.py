"""The emulator itself, through the official client: the API semantics the tests rely on."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import NAMESPACE

from jupyter_pause.backends.kubernetes.client import Conflict, Invalid, KubeClient, NotFound

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def admin(cluster):
    return KubeClient(
        kubeconfig=cluster.kubeconfig, context="admin", use_in_cluster=False, retries=0
    )


def test_crud_resource_versions_and_errors(cluster, admin):
    with pytest.raises(NotFound):
        admin.get_statefulset("nb")
    cluster.add_gke_notebook()
    cluster.wait_for(
        lambda: admin.get_statefulset("nb").get("status", {}).get("readyReplicas") == 1,
        what="steady",
    )
    state = admin.get_configmap("jupyter-pause-nb")
    rv = state["metadata"]["resourceVersion"]
    # compare-and-swap: the current version wins once, a stale one is a 409
    patched = admin.patch_configmap(
        "jupyter-pause-nb", {"metadata": {"resourceVersion": rv, "annotations": {"a": "1"}}}
    )
    assert int(patched["metadata"]["resourceVersion"]) > int(rv)
    with pytest.raises(Conflict, match="has been modified"):
        admin.patch_configmap(
            "jupyter-pause-nb", {"metadata": {"resourceVersion": rv, "annotations": {"a": "2"}}}
        )
    # merge patch: null removes
    admin.patch_configmap("jupyter-pause-nb", {"metadata": {"annotations": {"a": None}}})
    annotations = admin.get_configmap("jupyter-pause-nb")["metadata"].get("annotations")
    assert "a" not in (annotations or {})
    # scale subresource
    assert admin.scale_statefulset("nb", 0)["spec"]["replicas"] == 0
    with pytest.raises(Invalid):
        admin.scale_statefulset("nb", -1)
    # create twice: AlreadyExists
    body = {"metadata": {"name": "t"}, "spec": {"targetPod": "nb-0"}}
    admin.create_trigger(body)
    with pytest.raises(Conflict, match="already exists"):
        admin.create_trigger(body)
    with pytest.raises(Invalid, match="targetPod"):
        admin.create_trigger({"metadata": {"name": "t2"}, "spec": {}})
    admin.delete_trigger("t")
    with pytest.raises(NotFound):
        admin.delete_trigger("t")


def test_json_patch_test_op_and_workspaces(cluster, admin):
    cluster.add_workspace()
    admin.patch_workspace(
        "myws",
        [
            {"op": "test", "path": "/spec/paused", "value": False},
            {"op": "replace", "path": "/spec/paused", "value": True},
        ],
    )
    assert admin.get_workspace("myws")["spec"]["paused"] is True
    with pytest.raises(Invalid, match="test failed"):
        admin.patch_workspace("myws", [{"op": "test", "path": "/spec/paused", "value": False}])
    assert [w["metadata"]["name"] for w in admin.list_workspaces()] == ["myws"]


def test_podsnapshots_cannot_be_written(cluster, admin):
    cluster.add_gke_notebook()
    admin.create_trigger({"metadata": {"name": "t"}, "spec": {"targetPod": "nb-0"}})
    snaps = cluster.wait_for(
        lambda: admin.list_snapshots("gke-pod-snapshot-triggered-by=t"), what="snapshot"
    )
    name = snaps[0]["metadata"]["name"]
    with pytest.raises(Invalid, match="ValidatingAdmissionPolicy"):
        admin._call(
            admin.custom.patch_namespaced_custom_object,
            "podsnapshot.gke.io",
            "v1",
            NAMESPACE,
            "podsnapshots",
            name,
            {"metadata": {"labels": {"mine": "yes"}}},
            raw=False,
        )


def test_apply_patch_is_refused(cluster, admin):
    cluster.add_gke_notebook()
    from kubernetes.client import ApiException

    with pytest.raises(ApiException) as info:
        admin.apps.patch_namespaced_stateful_set(
            "nb", NAMESPACE, {"metadata": {}}, _content_type="application/apply-patch+yaml"
        )
    assert info.value.status == 415


def test_watch_streams_changes(cluster, admin):
    from kubernetes import watch

    cluster.add_gke_notebook()
    seen = []
    w = watch.Watch()

    def follow():
        for event in w.stream(admin.core.list_namespaced_pod, NAMESPACE, timeout_seconds=5):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                w.stop()
                break

    t = threading.Thread(target=follow)
    t.start()
    cluster.wait_for(lambda: seen, what="initial ADDED")
    admin.scale_statefulset("nb", 0)
    t.join(5)
    assert seen[0] == ("ADDED", "nb-0")
    assert ("MODIFIED", "nb-0") in seen and seen[-1] == ("DELETED", "nb-0")


def test_selectors(cluster, admin):
    cluster.add_gke_notebook()
    assert [p["metadata"]["name"] for p in admin.list_pods("app=nb")] == ["nb-0"]
    assert admin.list_pods("app=other") == []
    assert admin.list_pods("app in (nb,x),!missing") != []
    assert admin.list_events("nb-0", "Pod")
    assert admin.list_events("nope", "Pod") == []


def test_rbac_is_enforced(cluster):
    user = KubeClient(
        kubeconfig=cluster.kubeconfig, context="sa-pod-snapshot", use_in_cluster=False, retries=0
    )
    from jupyter_pause.backends.kubernetes.client import Forbidden

    cluster.add_gke_notebook()
    cluster.add_gke_notebook("other", image="x:1")
    assert user.get_pod("nb-0")
    with pytest.raises(Forbidden):
        user.get_pod("other-0")  # resourceNames pins its own pod
    with pytest.raises(Forbidden):
        user.list_pods()


def test_detect_backend(cluster, monkeypatch):
    from jupyter_pause.backends.kubernetes import detect_backend_class
    from jupyter_pause.backends.kubernetes.detect import UndetectedBackend
    from jupyter_pause.backends.kubernetes.podsnapshot import GkePodSnapshotBackend
    from jupyter_pause.backends.kubernetes.workspace import KubeflowWorkspaceBackend

    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert detect_backend_class() is None  # not in a pod
    cluster.add_gke_notebook()
    cluster.add_workspace()
    monkeypatch.setenv("KUBECONFIG", cluster.kubeconfig)
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("POD_NAME", "nb-0")
    assert detect_backend_class() is GkePodSnapshotBackend
    monkeypatch.setenv("POD_NAME", cluster.workspace_pod())
    assert detect_backend_class() is KubeflowWorkspaceBackend
    # in a pod that cannot be read: the local backend, and status says why
    monkeypatch.setenv("POD_NAME", "missing-0")
    cls = detect_backend_class()
    assert cls is not None and issubclass(cls, UndetectedBackend)
    name = cls().describe()["name"]
    assert name.startswith("local (kubernetes detection failed: cannot read pod missing-0")


def test_snapshot_pod_jupyter_config():
    """The shipped config: ipc transport, a poll selector, the runtime dir off the volume."""
    config = REPO / "deploy" / "jupyter-config" / "jupyter_server_config.py"
    code = (
        "import asyncio, os, sys\n"
        "from traitlets.config.loader import PyFileConfigLoader\n"
        f"cfg = PyFileConfigLoader({config.name!r}, path={str(config.parent)!r}).load_config()\n"
        "loop = asyncio.new_event_loop()\n"
        "print(cfg.KernelManager.transport, type(loop._selector).__name__, os.environ['JUPYTER_RUNTIME_DIR'])\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "JUPYTER_RUNTIME_DIR"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ipc", "PollSelector", "/tmp/jupyter-runtime"]


# -- fidelity to the real API server and controllers (issue 13) ----------------------------


def test_custom_resources_refuse_strategic_merge_and_odd_field_selectors(cluster, admin):
    from kubernetes.client import ApiException

    cluster.add_workspace()
    with pytest.raises(ApiException) as info:
        admin.custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1beta1",
            NAMESPACE,
            "workspaces",
            "myws",
            {"metadata": {"labels": {"a": "b"}}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert info.value.status == 415
    with pytest.raises(ApiException) as info:
        admin.custom.list_namespaced_custom_object(
            "kubeflow.org", "v1beta1", NAMESPACE, "workspaces", field_selector="spec.paused=true"
        )
    assert info.value.status == 400
    listed = admin.custom.list_namespaced_custom_object(
        "kubeflow.org", "v1beta1", NAMESPACE, "workspaces", field_selector="metadata.name=myws"
    )
    assert [w["metadata"]["name"] for w in listed["items"]] == ["myws"]


def test_authorization_comes_before_routing(cluster):
    from jupyter_pause.backends.kubernetes.client import Forbidden

    pod_sa = KubeClient(kubeconfig=cluster.kubeconfig, context="sa-pod-snapshot", retries=0)
    with pytest.raises(Forbidden):
        pod_sa.get_workspace("does-not-exist")  # 403, not 404


def test_label_values_are_validated(cluster, admin):
    cluster.add_gke_notebook()
    with pytest.raises(Invalid, match="63 characters"):
        admin.patch_configmap("jupyter-pause-nb", {"metadata": {"labels": {"a": "x" * 64}}})
    with pytest.raises(Invalid, match="alphanumeric"):
        admin.patch_configmap("jupyter-pause-nb", {"metadata": {"labels": {"a": "-x"}}})


def test_workspace_controller_like_notebooks_v2(cluster, admin):
    """generateName StatefulSet, ServiceAccount ws-<name>, RoleBindings from clusterRoles."""
    cluster.add_workspace()
    (sts,) = admin.list_statefulsets("notebooks.kubeflow.org/workspace-name=myws")
    assert sts["metadata"]["name"].startswith("ws-myws-") and sts["metadata"]["name"] != "ws-myws"
    pod = admin.get_pod(cluster.workspace_pod())
    assert pod["spec"]["serviceAccountName"] == "ws-myws"
    (binding,) = cluster.emu.list("RoleBinding", NAMESPACE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "jupyter-pause-workspace",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ws-myws", "namespace": NAMESPACE}
    ]
    ws = admin.get_workspace("myws")
    assert ws["status"]["state"] == "Running"
    assert ws["status"]["podTemplatePod"]["serviceAccountName"] == "ws-myws"


def test_garbage_collection_follows_owner_references(cluster, admin):
    cluster.add_workspace()
    cluster.emu.store.delete(cluster.emu.resource("Workspace"), NAMESPACE, "myws")
    cluster.wait_for(
        lambda: (
            not cluster.emu.list("StatefulSet", NAMESPACE)
            and not cluster.emu.list("ServiceAccount", NAMESPACE)
            and not cluster.emu.list("RoleBinding", NAMESPACE)
            and not cluster.emu.list("Pod", NAMESPACE)
        ),
        what="dependents collected",
    )


def test_scheduler_events_have_the_events_k8s_io_shape(make_cluster):
    from k8s_emulator import Scenario

    cluster = make_cluster(Scenario(capacity="unavailable"))
    cluster.emu.create(
        "StatefulSet",
        NAMESPACE,
        {
            "metadata": {"name": "nb"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "nb"}},
                "template": {
                    "metadata": {"labels": {"app": "nb"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]},
                },
            },
        },
    )
    event = cluster.wait_for(
        lambda: next(
            (e for e in cluster.emu.list("Event", NAMESPACE) if e["reason"] == "FailedScheduling"),
            None,
        ),
        what="FailedScheduling",
    )
    assert event["firstTimestamp"] is None and event["lastTimestamp"] is None
    assert event["eventTime"] and event["reportingComponent"] == "default-scheduler"


def test_a_checkpoint_freezes_the_pod_until_it_is_gone(make_cluster):
    """Requests of the frozen process are held and its probes fail; once the pod is gone, 401."""
    from k8s_emulator import Scenario

    from jupyter_pause.backends.kubernetes.client import KubeError

    cluster = make_cluster(Scenario(trigger_outcome="hung"))
    admin = KubeClient(kubeconfig=cluster.kubeconfig, context="admin", retries=0)
    cluster.add_gke_notebook()
    context = cluster.process_context("sa-pod-snapshot", "nb-0")
    process = KubeClient(kubeconfig=cluster.kubeconfig, context=context, retries=0)
    assert process.get_pod("nb-0")
    admin.custom.create_namespaced_custom_object(
        "podsnapshot.gke.io",
        "v1",
        NAMESPACE,
        "podsnapshotmanualtriggers",
        {"metadata": {"name": "jupyter-pause-nb"}, "spec": {"targetPod": "nb-0"}},
    )
    cluster.wait_for(lambda: not cluster.pod_ready(), what="probes fail")
    held = []

    def request():
        try:
            held.append(process.get_pod("nb-0"))
        except KubeError as e:
            held.append(e)

    thread = threading.Thread(target=request, daemon=True)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and not held  # the frozen process's request is not answered
    # the pod goes (e.g. `jupyter pause abort`): its process is dead, the bound token refused
    cluster.emu.store.remove(cluster.emu.resource("Pod"), NAMESPACE, "nb-0")
    cluster.emu.thaw(next(iter(cluster.emu.frozen)))
    thread.join(10)
    assert isinstance(held[0], KubeError) and held[0].status == 401
    with pytest.raises(KubeError, match="401"):
        process.get_pod("nb-0")
