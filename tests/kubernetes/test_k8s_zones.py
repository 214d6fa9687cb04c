"""Zones: a notebook paused in one zone, and the only free GPU in another.

The emulator's StatefulSet controller makes the home claim, the PD CSI driver
provisions it where the pod first lands (``WaitForFirstConsumer``), and the scheduler
keeps a pod off nodes its volume cannot reach (k8s_emulator/volumes.py).  A zonal home
disk pins the notebook to its zone; a regional one lets it come back in the other.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from conftest import FAST, NAMESPACE, NodePool, Scenario, cli, pod_backend
from k8s_emulator.volumes import CONFLICT, GKE_ZONE_LABEL, ZONE_LABEL, storage_class

from jupyter_pause.client import LocalServer
from tests.helpers import write_notebooks
from tests.objectstores import Seaweed
from tests.test_remote_store_server import CHECK, CODE, EXPECTED, NB  # the same, on pods

REPO = Path(__file__).resolve().parents[2]
ZONES = ("us-central1-a", "us-central1-b")


@pytest.fixture
def zonal_cluster(make_cluster):
    """A GPU pool over two zones, at its maximum: one node in each (the second added
    when the test says), one GPU each."""
    cluster = make_cluster(Scenario(node_pool=NodePool(zones=ZONES, max_nodes=2), restore="cold"))
    cluster.emu.create("StorageClass", None, storage_class("standard-rwo"))
    cluster.emu.create("StorageClass", None, storage_class("regional-rwo", regional=True))
    cluster.nodes.add_node(zone=ZONES[0])
    return cluster


def zone_of(cluster, node: str) -> str:
    return cluster.emu.get("Node", None, node)["metadata"]["labels"][ZONE_LABEL]


def home_volume_zones(cluster) -> list[str]:
    claim = cluster.emu.get("PersistentVolumeClaim", NAMESPACE, "home-nb-0")
    pv = cluster.emu.get("PersistentVolume", None, claim["spec"]["volumeName"])
    (term,) = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    assert expr["key"] == GKE_ZONE_LABEL and expr["operator"] == "In"
    return expr["values"]


def pause_and_lose_the_zone(cluster, sessions, shutdown_kernel) -> None:
    """The notebook pauses in zone a; meanwhile another team's job takes zone a's only
    GPU, and the free GPU is in zone b."""
    assert zone_of(cluster, cluster.pod()["spec"]["nodeName"]) == ZONES[0]
    asyncio.run(pod_backend(cluster).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")
    assert cluster.emu.find("PersistentVolumeClaim", NAMESPACE, "home-nb-0")  # retained
    trainer = cluster.add_workload("team-b", "trainer", gpus=1)
    assert zone_of(cluster, trainer["spec"]["nodeName"]) == ZONES[0]
    cluster.nodes.add_node(zone=ZONES[1])


def test_a_zonal_home_disk_keeps_the_notebook_from_the_free_gpu_in_another_zone(
    zonal_cluster, sessions, shutdown_kernel, capsys
):
    cluster = zonal_cluster
    cluster.add_gke_notebook(home_class="standard-rwo")
    assert home_volume_zones(cluster) == [ZONES[0]]
    pause_and_lose_the_zone(cluster, sessions, shutdown_kernel)

    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 0, out
    reason = f"1 Insufficient nvidia.com/gpu, 1 {CONFLICT}"
    cluster.wait_for(
        lambda: any(
            e["reason"] == "FailedScheduling" and reason in e["message"]
            for e in cluster.emu.list("Event", NAMESPACE)
        ),
        what="FailedScheduling for the volume's zone",
    )
    cluster.ctl.settle()
    assert not cluster.pod()["spec"].get("nodeName")  # the free GPU is not reachable
    rc, out = cli(cluster, "status", "nb", capsys=capsys)
    assert "waiting-for-capacity" in out and CONFLICT in out, out


def test_a_regional_home_disk_lets_the_notebook_come_back_in_the_other_zone(
    zonal_cluster, sessions, shutdown_kernel, capsys
):
    cluster = zonal_cluster
    cluster.add_gke_notebook(home_class="regional-rwo")
    assert home_volume_zones(cluster) == list(ZONES)
    pause_and_lose_the_zone(cluster, sessions, shutdown_kernel)

    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 0, out
    pod = cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")
    assert zone_of(cluster, pod["spec"]["nodeName"]) == ZONES[1]
    report = asyncio.run(pod_backend(cluster).startup())
    assert report.restored_from is None and report.detail.startswith("cold start")
    assert [c["path"] for c in report.info["checkpoints"]] == ["train.ipynb", "eval.ipynb"]


# ------------------------------------------------------------------ with real servers


@pytest.fixture
def pod_server(tmp_path, started):
    """``pod_server(cluster, store, url, node)``: a real Jupyter server as the process of
    the pod ``nb-0`` on ``node``, with the layout of docs/kubernetes.md: the notebooks and
    the server's state on the regional disk, the live state in the bucket, the cache on
    the node's disk, the user's key a Secret mounted in every pod."""
    regional = tmp_path / "regional-disk"  # the notebooks, sessions.json, the ledger
    write_notebooks(regional / "notebooks", NB)
    key = tmp_path / "secret"

    def make(cluster, store, url: str, node: str) -> LocalServer:
        data = tmp_path / node / "data"  # the node's disk: the cache
        (data / "pause").mkdir(parents=True, mode=0o700)
        if key.exists():
            shutil.copy2(key, data / "pause" / "secret")
        env = {
            **store.env(),
            "KUBECONFIG": cluster.kubeconfig,
            "POD_NAME": "nb-0",
            "POD_NAMESPACE": NAMESPACE,
            "JUPYTER_DATA_DIR": str(data),
            "JUPYTER_CONFIG_DIR": str(tmp_path / node / "config"),
            "PYTHONPATH": str(REPO),
        }
        backend = "GkePodSnapshotBackend"
        args = [f"--{backend}.{k}={v}" for k, v in {**FAST, "snapshot_timeout": 30.0}.items()]
        args.append(f"--{backend}.kube_context=sa-pod-snapshot")
        server = LocalServer(
            regional / "notebooks",
            regional / "state",
            backend="gke-pod-snapshot",
            env=env,
            checkpoints=url,
            extra_args=args,
        )
        started.append(server)
        return server

    def keep_key(node: str) -> None:
        shutil.copy2(tmp_path / node / "data" / "pause" / "secret", key)

    make.keep_key = keep_key
    make.data = lambda node: tmp_path / node / "data"
    return make


def test_a_resume_in_the_other_zone_restores_from_the_bucket_and_says_so(
    zonal_cluster, seaweed, bucket, pod_server, capsys
):
    """The pod comes back on a node of the other zone, whose cache never saw the
    checkpoint."""
    cluster = zonal_cluster
    cluster.add_gke_notebook(home_class="regional-rwo")
    url = f"s3://{bucket}/ck"
    a = pod_server(cluster, seaweed, url, "node-a")
    client = a.start()
    kernel_id = client.open_notebook(NB)["kernel"]["id"]
    assert client.execute(kernel_id, CODE).ok
    op = client.wait(client.pause(NB))
    assert op["outcome"] == "succeeded", op
    cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")
    pod_server.keep_key("node-a")
    a.stop()

    cluster.add_workload("team-b", "trainer", gpus=1)  # zone a's GPU is taken
    cluster.nodes.add_node(zone=ZONES[1])
    rc, out = cli(cluster, "resume", "nb", capsys=capsys)
    assert rc == 0, out
    pod = cluster.wait_for(lambda: cluster.pod_ready(), what="pod back")
    assert zone_of(cluster, pod["spec"]["nodeName"]) == ZONES[1]

    client = pod_server(cluster, seaweed, url, "node-b").start()
    assert not list(pod_server.data("node-b").glob("pause/checkpoint-cache/*/*/*"))
    assert client.session_status(NB)["state"] == "paused"
    op = client.wait(client.resume(NB))
    assert op["outcome"] == "succeeded", op
    assert any("downloaded from " + url in m for m in op["messages"]), op["messages"]
    kernel_id = client.session_status(NB)["kernel_id"]
    assert client.evaluate(kernel_id, CHECK) == EXPECTED


def test_the_pod_is_kept_until_the_upload_commits(zonal_cluster, pod_server, tmp_path):
    """The store down at the pause: no snapshot, the pod and its GPU kept, the kernel
    running; once the store is back, a retry pauses and only then lets the pod go."""
    cluster = zonal_cluster
    cluster.add_gke_notebook(home_class="regional-rwo")
    store = Seaweed(tmp_path / "weed")
    store.start()
    try:
        store.create_bucket("pod-kept")
        url = "s3://pod-kept/ck"
        client = pod_server(cluster, store, url, "node-a").start()
        kernel_id = client.open_notebook(NB)["kernel"]["id"]
        assert client.execute(kernel_id, CODE).ok
        uid = cluster.pod()["metadata"]["uid"]

        store.kill()
        op = client.wait(client.pause(NB))
        assert op["outcome"] == "failed" and "checkpoint store " + url in op["error"], op
        assert cluster.pod_ready()["metadata"]["uid"] == uid  # the same pod, its GPU held
        assert cluster.emu.get("StatefulSet", NAMESPACE, "nb")["spec"]["replicas"] == 1
        assert not cluster.emu.list("PodSnapshotManualTrigger", NAMESPACE)
        assert client.evaluate(kernel_id, CHECK) == EXPECTED

        store.start()
        op = client.wait(client.pause(NB))
        assert op["outcome"] == "succeeded", op
        cluster.wait_for(lambda: cluster.pod() is None, what="pod gone")
    finally:
        store.stop()
