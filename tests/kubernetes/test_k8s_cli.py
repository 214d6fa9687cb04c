"""``jupyter pause status | resume | list | gc`` against the emulator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import threading

from conftest import NAMESPACE, cli, gc_deleting_the_policy, main, pod_backend
from k8s_emulator import Scenario

import jupyter_pause as jp
from jupyter_pause.backends.kubernetes import status as status_mod
from jupyter_pause.backends.kubernetes.client import KubeClient
from jupyter_pause.engine import durable, paths
from jupyter_pause.engine.paths import user_root


def pause(cluster, sessions, shutdown_kernel):
    facts = asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")
    return facts


def has_event(cluster, reason):
    return any(e["reason"] == reason for e in cluster.emu.list("Event", NAMESPACE))


def status_json(cluster, capsys, name="nb"):
    rc, out = cli(cluster, "status", name, "--json", capsys=capsys)
    assert rc == 0
    return json.loads(out)


def test_status_through_the_lifecycle(cluster, sessions, shutdown_kernel, capsys):
    cluster.add_gke_notebook()
    assert status_json(cluster, capsys)["state"] == "running"
    pause(cluster, sessions, shutdown_kernel)
    st = status_json(cluster, capsys)
    assert st["state"] == "paused" and st["kind"] == "StatefulSet"
    rc, out = cli(cluster, "status", capsys=capsys)  # all workspaces
    assert rc == 0 and "nb" in out and "paused" in out
    cli(cluster, "resume", "nb", capsys=capsys)
    cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")
    # the server has not reported yet: restoring
    st = status_json(cluster, capsys)
    assert st["state"] == "restoring" and st["detail"]["pod_restored"] is True
    asyncio.run(pod_backend(cluster).startup())
    st = status_json(cluster, capsys)
    assert st["state"] == "ready" and st["restored_from"] == "snapshot"


def test_snapshotting_is_reported(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster(Scenario(trigger_outcome="never_ready"))
    cluster.add_gke_notebook()
    backend = pod_backend(cluster, snapshot_timeout=1)
    done = threading.Event()

    def run():
        with contextlib.suppress(Exception):
            asyncio.run(backend.release(sessions, shutdown_kernel))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    cluster.wait_for(lambda: cluster.emu.list("PodSnapshot", NAMESPACE), what="snapshot started")
    st = status_json(cluster, capsys)
    assert st["state"] == "snapshotting"
    done.wait(10)


def test_waiting_for_capacity_then_ready(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    pause(cluster, sessions, shutdown_kernel)
    cluster.scenario.capacity = "unavailable"
    cluster.scenario.scale_up = "not_triggered"
    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 0
    cluster.wait_for(lambda: has_event(cluster, "NotTriggerScaleUp"), what="scheduler events")
    st = status_json(cluster, capsys)
    assert st["state"] == "waiting-for-capacity"
    assert "Insufficient nvidia.com/gpu" in st["reason"]
    assert st["scale_up"] == "failed" and "max node group size" in st["detail"]["scale_up_message"]
    rc, out = cli(cluster, "status", "nb", capsys=capsys)
    assert "could not add a node" in out
    # capacity arrives; the pod schedules, the server reports back
    cluster.scenario.capacity = "available"
    cluster.wait_for(lambda: cluster.pod_ready(), what="scheduled")
    asyncio.run(pod_backend(cluster).startup())
    assert status_json(cluster, capsys)["state"] == "ready"


def test_scale_up_failure_on_gce_quota(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    pause(cluster, sessions, shutdown_kernel)
    cluster.scenario.capacity = "unavailable"
    cluster.scenario.scale_up = "failed"
    cli(cluster, "resume", "nb", capsys=capsys)
    cluster.wait_for(lambda: has_event(cluster, "FailedScaleUp"), what="scheduler events")
    st = status_json(cluster, capsys)
    assert st["state"] == "waiting-for-capacity" and st["scale_up"] == "failed"
    assert "GCE quota exceeded" in st["detail"]["scale_up_message"]


def test_resource_quota_refusal_is_failed(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    pause(cluster, sessions, shutdown_kernel)
    cluster.scenario.quota_refuses = True
    cli(cluster, "resume", "nb", capsys=capsys)
    cluster.wait_for(lambda: has_event(cluster, "FailedCreate"), what="FailedCreate")
    st = status_json(cluster, capsys)
    assert st["state"] == "failed" and "exceeded quota" in st["reason"]
    # the quota is raised: the StatefulSet creates the pod
    cluster.scenario.quota_refuses = False
    cluster.wait_for(lambda: cluster.pod_ready(), what="pod created")


def test_concurrent_resumes_are_single_flight(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    pause(cluster, sessions, shutdown_kernel)
    cluster.scenario.capacity = "unavailable"  # keep it waiting: no server clears the lock
    # Hold every read of the state ConfigMap a little, so that the resumes race on one version.
    cluster.emu.response_delay = lambda r: (
        0.2 if (r.verb, r.resource) == ("get", "configmaps") else 0
    )
    n = 8
    barrier = threading.Barrier(n)
    codes = []

    def resume():
        barrier.wait()
        codes.append(
            main(
                ["resume", "--kubeconfig", cluster.kubeconfig, "--context", "user", "--json", "nb"]
            )
        )

    threads = [threading.Thread(target=resume) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(codes) == [0] + [3] * (n - 1), codes
    scale_patches = [
        r
        for r in cluster.emu.requests
        if r.resource == "statefulsets/scale" and r.principal == "user"
    ]
    assert len(scale_patches) == 1
    conflicts = [r for r in cluster.emu.requests if r.principal == "user" and r.code == 409]
    assert conflicts, "the lock must be a compare-and-swap"
    cluster.emu.response_delay = None
    outputs = [json.loads(chunk) for chunk in _json_docs(capsys.readouterr().out)]
    assert sum(o["outcome"] == "started" for o in outputs) == 1
    assert sum(o["outcome"] == "in-progress" for o in outputs) == n - 1
    # a later resume is also reported, not duplicated, while the pod waits for a node
    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 3 and "already in progress" in out and "waiting-for-capacity" in out


def _json_docs(text: str):
    decoder = json.JSONDecoder()
    i = 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        obj, end = decoder.raw_decode(text, i)
        yield json.dumps(obj)
        i = end


def test_resume_of_a_running_workspace(cluster, capsys):
    cluster.add_gke_notebook()
    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 0 and "not paused" in out


def test_resume_wait_follows_to_ready(cluster, sessions, shutdown_kernel, capsys):
    cluster.add_gke_notebook()
    pause(cluster, sessions, shutdown_kernel)

    def server_comes_back():
        cluster.wait_for(lambda: cluster.pod_ready(), timeout=10, what="pod")
        asyncio.run(pod_backend(cluster).startup())

    t = threading.Thread(target=server_comes_back)
    t.start()
    rc, out = cli(cluster, "resume", "nb", "--wait", "--timeout", "10", capsys=capsys)
    t.join(10)
    assert rc == 0, out
    assert "ready" in out


def test_resume_compatibility_warning_with_target(cluster, sessions, shutdown_kernel, capsys):
    cluster.add_gke_notebook()
    pause(cluster, sessions, shutdown_kernel)
    rc, out = cli(cluster, "resume", "nb", "--json", "--target", "gpu_driver=535.0", capsys=capsys)
    data = json.loads(out)
    assert rc == 0
    fields = {d["field"] for d in data["compatibility"]["differences"]}
    assert fields == {"gpu_driver"}
    assert "gpu_model" in data["compatibility"]["unchecked"]


def test_list_shows_snapshots_and_checkpoints(make_cluster, sessions, shutdown_kernel, capsys):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    facts = pause(cluster, sessions, shutdown_kernel)
    rc, out = cli(cluster, "list", "--json", capsys=capsys)
    assert rc == 0
    data = json.loads(out)
    assert [s["name"] for s in data["snapshots"]] == [facts.details["snapshot"]]
    assert data["snapshots"][0]["workspace"] == "nb" and data["snapshots"][0]["ready"]
    assert {c["notebook"]: c["bytes"] for c in data["checkpoints"]} == {
        "train.ipynb": 6_300_000_000,
        "eval.ipynb": 1_000_000,
    }
    rc, out = cli(cluster, "list", capsys=capsys)
    assert "6.3 GB" in out and "AllSnapshotsAvailable" in out and facts.details["snapshot"] in out


def _age_snapshot(cluster, name, days):
    cluster.emu.backdate("PodSnapshot", NAMESPACE, name, days * 86400)


def test_gc_deletes_expired_snapshots_before_policies(
    make_cluster, sessions, shutdown_kernel, capsys
):
    cluster = make_cluster()
    cluster.add_gke_notebook()
    old = pause(cluster, sessions, shutdown_kernel).details["snapshot"]
    _age_snapshot(cluster, old, 10)
    # a second notebook paused just now: its snapshot is not expired
    # (another image: with an identical pod spec GKE would restore nb2-0 from nb's snapshot)
    cluster.add_gke_notebook("nb2", image="us-docker.pkg.dev/p/notebooks/torch:2.7")
    fresh_trigger = {
        "metadata": {
            "name": "jupyter-pause-nb2",
            "labels": {"app.kubernetes.io/managed-by": "jupyter-pause"},
        },
        "spec": {"targetPod": "nb2-0"},
    }
    cluster.emu.create("PodSnapshotManualTrigger", NAMESPACE, fresh_trigger)
    cluster.wait_for(
        lambda: len(cluster.emu.list("PodSnapshot", NAMESPACE)) == 2, what="second snapshot"
    )
    fresh = next(
        s["metadata"]["name"]
        for s in cluster.emu.list("PodSnapshot", NAMESPACE)
        if s["metadata"]["name"] != old
    )

    # --delete-policy is refused while a snapshot still uses the policy
    rc, out = gc_deleting_the_policy(cluster, "7d", capsys)
    assert rc == 1
    assert f"  {old}" in out and "kept policy notebooks" in out
    assert cluster.emu.find("PodSnapshot", NAMESPACE, old) is None  # finalizer done: gone
    assert cluster.emu.find("PodSnapshot", NAMESPACE, fresh) is not None
    assert cluster.emu.find("PodSnapshotPolicy", NAMESPACE, "notebooks") is not None
    assert cluster.emu.find("PodSnapshotManualTrigger", NAMESPACE, "jupyter-pause-nb") is None
    assert cluster.emu.find("PodSnapshotManualTrigger", NAMESPACE, "jupyter-pause-nb2") is not None
    assert cluster.ctl.orphaned == [] and old not in cluster.ctl.bucket

    # once everything is expired the policy goes too, after its snapshots
    rc, out = gc_deleting_the_policy(cluster, "0s", capsys)
    assert rc == 0, out
    assert cluster.emu.find("PodSnapshotPolicy", NAMESPACE, "notebooks") is None
    assert cluster.ctl.orphaned == [], "a policy deleted before its snapshots orphans their files"
    assert cluster.ctl.bucket == {}
    gc_requests = [
        (r.verb, r.resource) for r in cluster.emu.requests_by("gc") if r.verb == "delete"
    ]
    last_snapshot_delete = max(i for i, r in enumerate(gc_requests) if r[1] == "podsnapshots")
    policy_delete = gc_requests.index(("delete", "podsnapshotpolicies"))
    assert policy_delete > last_snapshot_delete


def test_gc_dry_run_deletes_nothing(cluster, sessions, shutdown_kernel, capsys):
    cluster.add_gke_notebook()
    snap = pause(cluster, sessions, shutdown_kernel).details["snapshot"]
    _age_snapshot(cluster, snap, 30)
    rc, out = cli(cluster, "gc", "--older-than", "7d", "--dry-run", context="gc", capsys=capsys)
    assert rc == 0 and "would delete 1" in out
    assert cluster.emu.find("PodSnapshot", NAMESPACE, snap) is not None


def test_gc_checkpoints_keeps_the_newest(tmp_path, cluster, capsys, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))  # this user's key
    made = jp.checkpoint(namespace={"x": 1}, dir=tmp_path / "src", notebook="a", progress=False)
    signed = paths.notebook_dir(tmp_path / "src", "a") / made.id

    def checkpoint_at(folder, sign=True):
        shutil.copytree(signed, folder)
        if not sign:  # another key's, as far as this user can tell
            (folder / "manifest.sig").unlink()

    root = tmp_path / "checkpoints"
    mine = user_root(root)
    durable.makedirs(mine)  # this user's alone (a folder open to others is refused)
    nb = mine / "train.ipynb-0123456789"
    for cid in ("2020-01-01T00-00-00", "2020-01-02T00-00-00", "2099-01-01T00-00-00"):
        checkpoint_at(nb / cid)
    foreign = nb / "2020-01-03T00-00-00"  # another server's of this Unix user: same folder
    checkpoint_at(foreign, sign=False)
    only = mine / "eval.ipynb-0123456789" / "2020-01-01T00-00-00"
    checkpoint_at(only)
    theirs = user_root(root, "someone-else") / "train.ipynb-0123456789" / "2020-01-01T00-00-00"
    checkpoint_at(theirs)
    rc, out = cli(
        cluster,
        "gc",
        "--older-than",
        "7d",
        "--checkpoints-dir",
        str(root),
        "--json",
        context="gc",
        capsys=capsys,
    )
    assert rc == 0
    data = json.loads(out)["checkpoints"]
    assert sorted(data["deleted"]) == [
        "train.ipynb-0123456789/2020-01-01T00-00-00",
        "train.ipynb-0123456789/2020-01-02T00-00-00",
    ]
    assert only.exists() and (nb / "2099-01-01T00-00-00").exists()
    assert theirs.exists(), "another user's checkpoints are never expired"
    assert foreign.exists() and data["foreign"] == ["train.ipynb-0123456789/2020-01-03T00-00-00"]


def test_status_of_a_missing_workspace(cluster, capsys):
    rc = main(["status", "--kubeconfig", cluster.kubeconfig, "--context", "user", "nope"])
    assert rc == 1
    assert 'statefulsets.apps "nope" not found' in capsys.readouterr().err


def test_status_derivation_is_pure():
    owner = {
        "spec": {"replicas": 1},
        "metadata": {"annotations": {"jupyter-pause.io/state": "resuming"}},
    }
    pod = {
        "metadata": {"name": "nb-0"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes",
                }
            ],
        },
    }
    st = status_mod.derive("nb", "StatefulSet", owner, pod, [])
    assert st.state == "waiting-for-capacity" and st.reason == "0/1 nodes" and st.scale_up is None
    pod["status"]["containerStatuses"] = [
        {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no"}}}
    ]
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    assert status_mod.derive("nb", "StatefulSet", owner, pod, []).state == "failed"


def test_kubeconfig_namespace_is_used(cluster):
    client = KubeClient(kubeconfig=cluster.kubeconfig, context="user", use_in_cluster=False)
    assert client.namespace == NAMESPACE
