"""The capacity outcome from looks at a node (pure: backends/kubernetes/nodes.py)."""

from __future__ import annotations

import pytest

from jupyter_pause.backends.kubernetes.common import parse_time
from jupyter_pause.backends.kubernetes.nodes import (
    NodeFollow,
    NodeLook,
    OtherPod,
    ReleasedNode,
    look_at,
)

T = 1_767_571_200.0
ME = ReleasedNode("n1", gpus=1, namespace="alice", pod="nb-0", released_at=T)


def pod(ns, name, gpus=0, created=T - 100, daemon=False, cls="StatefulSet"):
    return OtherPod(ns, name, gpus, cls, created, daemon)


def up(t, *pods, allocatable=2, tainted=None):
    return NodeLook(t, True, allocatable, "nvidia-l4", False, tainted, tuple(pods))


def outcomes(follow, until):
    return [(s.outcome, s.start - T, s.end - T, s.by_namespace) for s in follow.finish(until)]


def test_baseline_reuse_and_daemon_pods_that_keep_nothing_up():
    f = NodeFollow(ME, interval=60)
    agent = pod("kube-system", "gpu-agent", daemon=True)
    f.observe(up(T + 10, agent, pod("bob", "b-0", 1)))  # bob's GPU is the baseline
    f.observe(up(T + 70, agent, pod("bob", "b-0", 1)))
    f.observe(up(T + 130, agent, pod("bob", "b-0", 1), pod("ml", "job", 1, created=T + 100)))
    f.observe(up(T + 190, agent))  # both gone: only a DaemonSet pod is left
    assert outcomes(f, T + 250) == [
        ("kept-up", 0, 130, ""),
        ("reused", 130, 190, "ml"),
        ("idle", 190, 250, ""),
    ]


def test_scale_down_dated_by_the_taint_and_final():
    f = NodeFollow(ME, interval=600)
    f.observe(up(T + 60))
    f.observe(up(T + 660, tainted=T + 630))
    f.observe(NodeLook(T + 720, exists=False))
    assert outcomes(f, T + 3600) == [("idle", 0, 630, ""), ("scaled-down", 630, 3600, "")]


def test_a_node_first_seen_gone_is_dated_at_that_look_and_gaps_are_unknown():
    f = NodeFollow(ME, interval=60)
    f.observe(NodeLook(T + 60, exists=False))
    assert outcomes(f, T + 120) == [("scaled-down", 60, 120, "")]
    g = NodeFollow(ME, interval=60)
    g.observe(up(T + 30))
    g.observe(up(T + 1000))  # the follower stopped: [90, 1000) is unknown
    assert outcomes(g, T + 1060) == [("idle", 0, 90, ""), ("idle", 1000, 1060, "")]
    # and nothing is carried past one interval after the last look
    assert outcomes(NodeFollow.from_json(g.to_json()), T + 5000)[-1][2] == 1060


def test_reading_the_api_objects():
    node = {
        "metadata": {"name": "n1", "labels": {"cloud.google.com/gke-accelerator": "nvidia-l4"}},
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": str(int(T + 5))}],
        },
        "status": {"allocatable": {"nvidia.com/gpu": "4"}},
    }
    pods = [
        {
            "metadata": {
                "namespace": "ml",
                "name": "job-x",
                "creationTimestamp": "2026-01-05T00:00:00Z",
                "ownerReferences": [{"kind": "Job", "controller": True}],
            },
            "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        },
        {
            "metadata": {"namespace": "x", "name": "done"},
            "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Succeeded"},
        },
    ]
    look = look_at(node, pods, T + 10, parse_time)
    assert look.exists and look.allocatable_gpus == 4 and look.accelerator == "nvidia-l4"
    assert look.unschedulable and look.to_be_deleted_at == pytest.approx(T + 5)
    assert look.pods == (OtherPod("ml", "job-x", 2, "Job", T, False),)
    assert not look_at(None, [], T, parse_time).exists
