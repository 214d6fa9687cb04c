"""The notice before SIGTERM (issue 38): a server reads its own node for the termination
taint or condition GKE sets and the taints and labels AWS's node termination handler sets,
modelled in the emulator as the real controllers set them (k8s_emulator/termination.py),
with only the read-only RBAC of deploy/gke-pod-snapshot/node-notice.yaml; and a real
server that hears the notice sends the state it had not staged yet to the bucket then,
before any SIGTERM."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conftest import FAST, NAMESPACE, NodePool, Scenario, pod_backend
from k8s_emulator import termination

from jupyter_pause.client import LocalServer
from tests.helpers import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pool_cluster(make_cluster):
    """A GPU pool with one node, the notebook's pod bound to it."""
    cluster = make_cluster(Scenario(node_pool=NodePool(max_nodes=1), restore="cold"))
    cluster.nodes.add_node()
    cluster.add_gke_notebook()
    return cluster


def notice(cluster):
    return asyncio.run(pod_backend(cluster).termination_notice())


def test_a_healthy_node_gives_no_notice(pool_cluster):
    assert notice(pool_cluster) is None


def test_gke_taints_the_node_then_kubelet_says_it_shuts_down(pool_cluster):
    cluster = pool_cluster
    node = cluster.pod()["spec"]["nodeName"]
    termination.kubelet_shutdown(cluster.emu, node)
    said = notice(cluster)
    assert (said.source, said.kind, said.node, said.certain) == ("kubelet", "shutdown", node, True)
    assert "node is shutting down" in said.detail
    termination.gke_termination(cluster.emu, node)
    said = notice(cluster)
    assert (said.source, said.kind) == ("gke", "termination")
    assert said.detail == "taint cloud.google.com/impending-node-termination:NoSchedule"


def test_the_aws_handler_recommends_a_rebalance_then_interrupts(pool_cluster):
    cluster = pool_cluster
    node = cluster.pod()["spec"]["nodeName"]
    termination.nth_rebalance(cluster.emu, node, "rebalance-recommendation-7f1c")
    said = notice(cluster)
    assert (said.source, said.kind, said.certain) == (
        "aws-node-termination-handler",
        "rebalance-recommendation",
        False,  # may never be followed by an interruption
    )
    termination.nth_spot_interruption(cluster.emu, node, "spot-itn-7f1d")
    said = notice(cluster)
    assert (said.kind, said.certain) == ("spot-interruption", True)
    assert "aws-node-termination-handler/spot-itn=spot-itn-7f1d:NoSchedule" in said.detail


def test_scheduled_maintenance_is_read_from_its_label_and_taint(pool_cluster):
    cluster = pool_cluster
    node = cluster.pod()["spec"]["nodeName"]
    termination.nth_scheduled_maintenance(cluster.emu, node, "instance-event-0d59")
    said = notice(cluster)
    assert (said.kind, said.certain) == ("scheduled-maintenance", True)


def test_without_the_node_rbac_the_server_is_told_why(pool_cluster):
    """The notebook's own Role (deploy/gke-pod-snapshot/rbac.yaml) alone cannot read nodes:
    the error reaches the caller (the watcher logs it once), nothing is assumed."""
    from k8s_emulator import role_rules

    rules = role_rules("sa-pod-snapshot")
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]} in rules
    assert not any("list" in r["verbs"] and "nodes" in r["resources"] for r in rules)
    cluster = pool_cluster
    with pytest.raises(Exception, match="403|[Ff]orbidden"):
        asyncio.run(pod_backend(cluster, context="user").termination_notice())


def test_a_server_sends_its_state_to_the_bucket_at_the_notice(
    pool_cluster, seaweed, bucket, tmp_path
):
    """The notice comes (AWS's spot interruption, two minutes ahead): the state the bucket
    lacked goes there then, at full speed, the kernel running on; no SIGTERM yet."""
    cluster = pool_cluster
    root = tmp_path / "notebooks"
    root.mkdir()
    nb = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    (root / "demo.ipynb").write_text(json.dumps(nb))
    backend = "GkePodSnapshotBackend"
    args = [f"--{backend}.{k}={v}" for k, v in FAST.items()]
    classes = {"gpu-interactive": {"stage_every": 3600}}  # no staging but at the notice
    server = LocalServer(
        root,
        tmp_path / "state",
        backend="gke-pod-snapshot",
        env={
            **seaweed.env(),
            "KUBECONFIG": cluster.kubeconfig,
            "POD_NAME": "nb-0",
            "POD_NAMESPACE": NAMESPACE,
            "JUPYTER_DATA_DIR": str(tmp_path / "data"),
            "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
            "PYTHONPATH": str(REPO),
        },
        checkpoints=f"s3://{bucket}/ck",
        extra_args=[
            *args,
            f"--{backend}.kube_context=sa-pod-snapshot",
            "--PauseApp.notice_interval=0.5",
            f"--PauseApp.workload_classes={json.dumps(classes)}",
        ],
    )
    try:
        client = server.start()
        kernel_id = client.open_notebook("demo.ipynb")["kernel"]["id"]
        assert client.execute(kernel_id, "import numpy as np\nx = np.ones(500_000)").ok
        lag = client.session_status("demo.ipynb")["staging"]
        assert lag["checkpoint"] is None and lag["seconds"] > 0  # nothing in the bucket

        termination.nth_spot_interruption(
            cluster.emu, cluster.pod()["spec"]["nodeName"], "spot-itn-7f1d"
        )
        status = wait_for(
            lambda: (s := client.status())["notice"] and s,
            60,
            lambda: f"the notice\n{server.log_tail()}",
        )
        assert status["notice"]["kind"] == "spot-interruption"
        lag = wait_for(
            lambda: (
                (lag := client.session_status("demo.ipynb")["staging"])["checkpoint"]
                and lag["bytes"] == 0
                and lag["seconds"] == 0
                and lag
            ),
            120,
            lambda: f"the state in the bucket\n{server.log_tail()}",
        )
        assert client.session_status("demo.ipynb")["state"] == "running"  # it runs on
        assert "is to be terminated (aws-node-termination-handler" in server.log_tail(20000)
    finally:
        server.stop()
