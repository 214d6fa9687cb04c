"""The objects the backends read and the namespace listing, decoded (pure:
backends/kubernetes/objects.py and status.py, no API server)."""

from __future__ import annotations

import json

import pytest

from jupyter_pause.backends.kubernetes import status
from jupyter_pause.backends.kubernetes.common import (
    A_CHECKPOINTS,
    A_STATE,
    TRIGGERED_BY_LABEL,
    parse_time,
)
from jupyter_pause.backends.kubernetes.objects import (
    Pod,
    PodSnapshot,
    SnapshotTrigger,
    StatefulSet,
    StateObject,
)

NOW = parse_time("2026-12-02T12:00:00Z")


def test_a_pod_is_decoded_with_its_owner_and_whether_it_is_going():
    obj = {
        "metadata": {
            "name": "nb-0",
            "namespace": "alice",
            "uid": "u1",
            "labels": {"app": "nb"},
            "annotations": {"podsnapshot.gke.io/ps-name": "s1"},
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": "x"},
                {"kind": "StatefulSet", "name": "nb"},
            ],
            "deletionTimestamp": "2026-12-02T11:00:00Z",
        },
        "spec": {"nodeName": "n1"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    pod = Pod.from_obj(obj)
    assert (pod.name, pod.namespace, pod.uid, pod.node_name) == ("nb-0", "alice", "u1", "n1")
    assert pod.owner_statefulset == "nb" and pod.deleting and pod.ready
    assert pod.labels == {"app": "nb"} and pod.annotations["podsnapshot.gke.io/ps-name"] == "s1"
    assert pod.obj is obj
    bare = Pod.from_obj({"metadata": {"name": "p"}})
    assert bare.owner_statefulset is None and not bare.deleting and not bare.ready
    assert bare.node_name is None and bare.condition("Ready") is None


@pytest.mark.parametrize("created", [{"name": "snap-1"}, "snap-1"])
def test_a_trigger_names_its_snapshot_in_either_shape(created):
    trigger = SnapshotTrigger.from_obj(
        {
            "metadata": {"name": "jupyter-pause-nb"},
            "status": {
                "snapshotCreated": created,
                "conditions": [
                    {"type": "Triggered", "status": "False", "reason": "Failed", "message": "oom"}
                ],
            },
        }
    )
    assert trigger.snapshot == "snap-1"
    assert trigger.triggered is not None and not trigger.triggered.true
    assert (trigger.triggered.reason, trigger.triggered.message) == ("Failed", "oom")
    assert SnapshotTrigger.from_obj({"metadata": {"name": "t"}}).snapshot is None


def test_a_snapshot_is_ready_or_says_why_not():
    ready = PodSnapshot.from_obj(
        {"metadata": {"name": "s"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert ready.ready and ready.checkpoint is None
    failed = PodSnapshot.from_obj(
        {
            "metadata": {"name": "s"},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "Checkpoint", "status": "False", "reason": "Failed"},
                ]
            },
        }
    )
    assert not failed.ready and failed.checkpoint.reason == "Failed"


def test_a_statefulset_keeps_unset_replicas_apart_from_zero():
    sts = StatefulSet.from_obj({"metadata": {"name": "nb", "uid": "u"}, "spec": {"replicas": 0}})
    assert (sts.name, sts.uid, sts.replicas) == ("nb", "u", 0)
    assert StatefulSet.from_obj({"metadata": {"name": "nb"}}).replicas is None


def test_a_state_object_reads_its_json_annotations():
    state = StateObject.from_obj(
        {
            "metadata": {
                "name": "jupyter-pause-nb",
                "annotations": {"a": json.dumps({"x": 1}), "b": "{not json"},
            }
        }
    )
    assert state.name == "jupyter-pause-nb"
    assert state.json("a") == {"x": 1}
    assert state.json("b") is None and state.json("missing") is None


def snapshot(name, trigger=None, **status_):
    labels = {TRIGGERED_BY_LABEL: trigger} if trigger else {}
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-12-01T12:00:00Z"},
        "spec": {"policyName": "p"},
        "status": status_,
    }


def test_a_snapshot_row_says_whose_snapshot_it_is():
    ours = status.snapshot_row(
        snapshot(
            "s1",
            "jupyter-pause-nb",
            conditions=[{"type": "Ready", "status": "True", "reason": "AllSnapshotsAvailable"}],
            storageStatus={"gcs": {"observedGCSPath": "gs://b/s1"}},
        ),
        NOW,
    )
    assert (ours.workspace, ours.trigger, ours.policy) == ("nb", "jupyter-pause-nb", "p")
    assert ours.state == "AllSnapshotsAvailable" and ours.ready
    assert ours.age_seconds == 86400 and ours.location == "gs://b/s1" and ours.bytes is None
    addon = status.snapshot_row(snapshot("s2", "ws-alice-trigger"), NOW)
    assert addon.workspace == "alice" and addon.state == "-" and not addon.ready
    assert status.snapshot_row(snapshot("s3", "someone-else"), NOW).workspace == "-"
    going = snapshot("s4")
    going["metadata"]["deletionTimestamp"] = "2026-12-02T11:00:00Z"
    assert status.snapshot_row(going, NOW).state == "Terminating"


def test_checkpoint_rows_come_from_the_state_annotation():
    checkpoints = [
        {"path": "a.ipynb", "id": "c1", "bytes": 10, "time": "2026-12-02T11:00:00Z"},
        {"path": "b.ipynb", "id": "c2", "bytes": 20, "time": NOW - 60},
        {"path": "c.ipynb"},
    ]
    owner = status.Managed(
        "StatefulSet",
        "nb",
        {"metadata": {"annotations": {A_STATE: "paused", A_CHECKPOINTS: json.dumps(checkpoints)}}},
    )
    rows = status.checkpoint_rows(owner, NOW)
    assert [(r.notebook, r.id, r.bytes, r.age_seconds) for r in rows] == [
        ("a.ipynb", "c1", 10, 3600),
        ("b.ipynb", "c2", 20, 60),
        ("c.ipynb", None, None, None),
    ]
    assert {(r.workspace, r.kind, r.state) for r in rows} == {("nb", "StatefulSet", "paused")}
    listing = status.Listing("alice", [], rows, warnings=["cannot list Workspaces: 500"])
    assert set(listing.to_json()) == {"namespace", "snapshots", "checkpoints"}
    assert listing.to_json()["checkpoints"][0]["notebook"] == "a.ipynb"
