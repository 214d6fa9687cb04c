"""What became of the node a pause let go of, on the emulated cluster (fake clock).

The cluster runs a GPU node pool under the emulated cluster autoscaler
(``k8s_emulator/nodes.py``) on a clock the test moves.  A notebook pauses
(the real ``GkePodSnapshotBackend.release``), ``jupyter pause follow-nodes``
looks at its node every minute of the cluster's clock (``follow_round``, as the
platform's node-follower principal, RBAC enforced), the notebook is resumed
(``start_resume``, as ``jupyter pause resume``) and the server that comes back
(``startup``) writes the capacity outcome into its ledger.  Each outcome is
checked against the emulator's own bookkeeping (``NodeBook``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from conftest import FAST, NAMESPACE, WORKSPACE, Clock, NodePool, Scenario, ws_backend

from jupyter_pause import cli as cli_mod
from jupyter_pause.backends.base import ReleaseFacts
from jupyter_pause.backends.kubernetes.client import KubeClient, KubeError
from jupyter_pause.backends.kubernetes.common import A_FLEET, A_PAUSED_AT, A_RESUMED_AT, parse_time
from jupyter_pause.backends.kubernetes.follow import follow_round
from jupyter_pause.backends.kubernetes.podsnapshot import GkePodSnapshotBackend
from jupyter_pause.backends.kubernetes.resume import start_resume
from jupyter_pause.ledger import EventType, Ledger
from jupyter_pause.report.build import build_report
from jupyter_pause.server.fleet import FleetPublisher

MONDAY = 1_767_571_200.0  # 2026-01-05 00:00 UTC
MINUTE = 60.0


class Notebook:
    """One user's notebook server on plain GKE, driven as the server and the CLI would."""

    def __init__(self, cluster, namespace: str, name: str = "nb"):
        self.cluster, self.namespace, self.name = cluster, namespace, name
        self.ledger = Ledger(":memory:", user=namespace)
        self.cluster.add_gke_notebook(name=name, namespace=namespace)
        self.ledger.record(
            EventType.KERNEL_STARTED, path="work.ipynb", time_=cluster.clock.time(), gpus=1
        )

    def client(self, context: str = "admin") -> KubeClient:
        return KubeClient(
            kubeconfig=self.cluster.kubeconfig, context=context, namespace=self.namespace
        )

    def backend(self) -> GkePodSnapshotBackend:
        return GkePodSnapshotBackend(
            ledger=self.ledger,
            client=self.client(),
            pod_name=f"{self.name}-0",
            clock=self.cluster.clock,
            snapshot_timeout=10.0,
            **FAST,
        )

    @property
    def node(self) -> str | None:
        pod = self.cluster.pod(f"{self.name}-0", self.namespace)
        return (pod or {}).get("spec", {}).get("nodeName")

    def pause(self, sessions, shutdown_kernel) -> ReleaseFacts:
        facts = asyncio.run(self.backend().release(sessions, shutdown_kernel))
        self.cluster.wait_for(
            lambda: self.cluster.pod(f"{self.name}-0", self.namespace) is None, what="pod gone"
        )
        self.cluster.ctl.settle()
        # what the manager records for its notebook (server/manager.py, pause)
        self.ledger.record(
            EventType.ACCELERATOR_RELEASED,
            path="work.ipynb",
            time_=facts.released_at or time.time(),
            gpus=1,
            **{k: v for k, v in facts.details.items() if k == "node"},
        )
        return facts

    def resume(self) -> None:
        op = {"id": uuid.uuid4().hex[:12], "started": "now", "by": "test"}
        start_resume(self.client(), self.name, op, kind="statefulset")

    def came_back(self) -> dict:
        """The new pod is up: the new server's start-up, then the manager's resume records."""
        pod = self.cluster.wait_for(
            lambda: self.cluster.pod_ready(f"{self.name}-0", self.namespace), what="pod ready"
        )
        report = asyncio.run(self.backend().startup())
        scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        self.ledger.record(
            EventType.CAPACITY_ACQUIRED,
            path="work.ipynb",
            time_=parse_time(scheduled["lastTransitionTime"]),
        )
        return report.info

    def spans(self) -> list[dict]:
        return [e.data for e in self.ledger.events(types=[EventType.CAPACITY_OUTCOME])]


def follow(cluster, namespaces, minutes: int = 1, step: float = MINUTE) -> None:
    """``jupyter pause follow-nodes`` rounds, one per ``step`` of the cluster's clock."""
    for _ in range(minutes):
        cluster.advance(step)
        for ns in namespaces:
            client = KubeClient(
                kubeconfig=cluster.kubeconfig, context="node-follower", namespace=ns
            )
            for result in follow_round(client, cluster.clock.time(), step):
                assert not result.error, result


@pytest.fixture
def pool_cluster(make_cluster):
    def make(**pool) -> object:
        scenario = Scenario(node_pool=NodePool(**pool))
        return make_cluster(scenario, clock=Clock(MONDAY))

    return make


def one_span(spans, outcome):
    found = [s for s in spans if s["outcome"] == outcome]
    assert len(found) == 1, spans
    return found[0]


def test_scaled_down_after_the_unneeded_time(pool_cluster, sessions, shutdown_kernel):
    cluster = pool_cluster(gpus_per_node=1)
    cluster.nodes.add_node()
    nb = Notebook(cluster, NAMESPACE)
    node = nb.node
    nb.pause(sessions, shutdown_kernel)
    released = cluster.clock.time()
    follow(cluster, [NAMESPACE], minutes=9)
    assert cluster.emu.find("Node", None, node) is not None  # not yet: 10 min unneeded
    follow(cluster, [NAMESPACE], minutes=3)
    assert cluster.emu.find("Node", None, node) is None
    # what the real autoscaler leaves behind: events on the node and on its status
    reasons = {
        (e["involvedObject"]["kind"], e["reason"], e["message"])
        for e in cluster.emu.list("Event", "default") + cluster.emu.list("Event", "kube-system")
    }
    assert ("Node", "ScaleDown", "marked the node as toBeDeleted/unschedulable") in reasons
    assert ("ConfigMap", "ScaleDown", f"Scale-down: removing empty node {node}") in reasons
    follow(cluster, [NAMESPACE], minutes=30, step=2 * MINUTE)
    nb.resume()
    cluster.ctl.settle()
    info = nb.came_back()
    assert nb.node != node  # a new node came up for it
    spans = nb.spans()
    deleted = cluster.nodes.book.nodes[node][0].end
    idle, down = one_span(spans, "idle"), one_span(spans, "scaled-down")
    assert idle["start"] == released and idle["end"] == down["start"] == deleted
    assert down["node"] == node and down["accelerator"] == "nvidia-tesla-t4"
    assert deleted - released >= 600
    assert info["capacity_outcome"] == spans
    # the annotations are gone with the pause
    assert "jupyter-pause.io/node-follow" not in cluster.state()


def test_reused_by_another_namespace(pool_cluster, sessions, shutdown_kernel):
    cluster = pool_cluster(gpus_per_node=1, max_nodes=2)
    cluster.nodes.add_node()
    nb = Notebook(cluster, NAMESPACE)
    node = nb.node
    nb.pause(sessions, shutdown_kernel)
    follow(cluster, [NAMESPACE], minutes=5)
    cluster.add_workload("bob", "train", gpus=1, workload_class="training")
    took = cluster.nodes.book.allocations[-1]
    assert took.node == node and took.namespace == "bob"
    follow(cluster, [NAMESPACE], minutes=30)
    nb.resume()  # the node is busy: the autoscaler adds one
    cluster.ctl.settle()
    nb.came_back()
    reused = one_span(nb.spans(), "reused")
    assert reused["by_namespace"] == "bob" and reused["by_class"] == "training"
    # a change is seen at most one look late
    assert took.start <= reused["start"] <= took.start + MINUTE
    assert reused["share"] == 1.0


def test_idle_node_that_stays_up(pool_cluster, sessions, shutdown_kernel):
    # the pool's minimum size keeps the node: the GPU is free and the bill runs
    cluster = pool_cluster(gpus_per_node=1, min_nodes=1)
    cluster.nodes.add_node()
    nb = Notebook(cluster, NAMESPACE)
    nb.pause(sessions, shutdown_kernel)
    follow(cluster, [NAMESPACE], minutes=40)
    nb.resume()
    cluster.ctl.settle()
    nb.came_back()
    spans = nb.spans()
    assert [s["outcome"] for s in spans] == ["idle"], spans
    assert spans[0]["end"] - spans[0]["start"] == pytest.approx(40 * MINUTE, abs=MINUTE)


def test_kept_up_by_a_pod_that_cannot_move(pool_cluster, sessions, shutdown_kernel):
    cluster = pool_cluster(gpus_per_node=1)
    cluster.nodes.add_node()
    nb = Notebook(cluster, NAMESPACE)
    node = nb.node
    # a bare pod (no controller): the autoscaler cannot move it, so the node stays
    cluster.add_workload("monitoring", "exporter", gpus=0, controller=None)
    nb.pause(sessions, shutdown_kernel)
    follow(cluster, [NAMESPACE], minutes=30)
    assert cluster.emu.find("Node", None, node) is not None
    nb.resume()
    cluster.ctl.settle()
    nb.came_back()
    assert [s["outcome"] for s in nb.spans()] == ["kept-up"]


def test_nobody_followed_means_unknown(pool_cluster, sessions, shutdown_kernel):
    cluster = pool_cluster(gpus_per_node=1, min_nodes=1)
    cluster.nodes.add_node()
    nb = Notebook(cluster, NAMESPACE)
    nb.pause(sessions, shutdown_kernel)
    cluster.advance(3600)
    nb.resume()
    cluster.ctl.settle()
    info = nb.came_back()
    assert nb.spans() == [] and info["capacity_outcome"] == []


def test_three_users_on_one_node_two_pause(pool_cluster, sessions, shutdown_kernel, capsys):
    """alice and bob pause, carol keeps working: the node stays up; a training job
    from another namespace takes one freed GPU for two hours.  The fleet read from
    the API (``report --fleet --kubernetes``) shows the same outcomes per user."""
    cluster = pool_cluster(gpus_per_node=3, max_nodes=1)
    node = cluster.nodes.add_node()["metadata"]["name"]
    users = {ns: Notebook(cluster, ns) for ns in ("alice", "bob", "carol")}
    assert {nb.node for nb in users.values()} == {node}
    everyone = list(users)
    alice, bob = users["alice"], users["bob"]
    t0 = cluster.clock.time()
    quarter = 15 * MINUTE
    alice.pause(sessions, shutdown_kernel)
    follow(cluster, everyone, minutes=4, step=quarter)
    bob.pause(sessions, shutdown_kernel)
    follow(cluster, everyone, minutes=4, step=quarter)
    cluster.add_workload("ml", "train", gpus=1, workload_class="training")
    follow(cluster, everyone, minutes=8, step=quarter)
    cluster.remove_workload("ml", "train")
    follow(cluster, everyone, minutes=8, step=quarter)
    alice.resume()
    bob.resume()
    cluster.ctl.settle()
    for nb in (alice, bob):
        nb.came_back()
        assert nb.node == node
    back = cluster.clock.time()
    assert cluster.emu.find("Node", None, node) is not None  # carol kept it up

    def hours(nb, outcome):
        return sum(s["end"] - s["start"] for s in nb.spans() if s["outcome"] == outcome) / 3600

    # alice: the two others held the node; the job took a GPU bob's pause freed
    assert hours(alice, "kept-up") == pytest.approx((back - t0) / 3600, abs=1 / 60)
    assert hours(alice, "reused") == hours(alice, "idle") == hours(alice, "scaled-down") == 0
    assert hours(bob, "reused") == pytest.approx(2, abs=1 / 60)
    assert hours(bob, "kept-up") == pytest.approx(3, abs=1 / 60)
    assert {s["by_namespace"] for s in bob.spans() if s["outcome"] == "reused"} == {"ml"}
    # the emulator's own book: the job's GPU-hours on the node while bob was paused
    job = [a for a in cluster.nodes.book.allocations if a.namespace == "ml"]
    assert sum(a.end - a.start for a in job) / 3600 == pytest.approx(
        hours(bob, "reused"), abs=1 / 60
    )
    # the report over the three servers' ledgers
    events = [e for nb in users.values() for e in nb.ledger.events()]
    report = build_report(events, since=t0, until=back, now=back).to_json()
    by_user = {g["key"]: g["capacity"] for g in report["by_user"]}
    assert by_user["alice"]["kept_up"] == pytest.approx(6, abs=1 / 60)
    assert by_user["bob"]["reused"] == pytest.approx(2, abs=1 / 60)
    # node-hours: the node stayed up for both pauses, never removed
    assert by_user["alice"]["node_hours_up"] == pytest.approx(6, abs=1 / 60)
    assert by_user["bob"]["node_hours_up"] == pytest.approx(5, abs=1 / 60)
    assert report["totals"]["capacity"]["node_hours_removed"] == 0

    # each server hands its rows over (into its state ConfigMap); the platform team's
    # fleet, read from the API, carries the outcomes its ledger recorded
    cluster.advance(MINUTE)  # alice and bob run again
    for nb in users.values():
        publisher = FleetPublisher(
            ledger=nb.ledger, backend=nb.backend(), interval=0, clock=cluster.clock
        )
        assert asyncio.run(publisher.publish()) == A_FLEET
    argv = ["report", "--fleet", "--kubernetes", "--kubeconfig", cluster.kubeconfig]
    argv += ["--context", "fleet", "-n", "alice", "-n", "bob", "-n", "carol"]
    assert cli_mod.main([*argv, "--format", "json"]) == 0
    fleet = {g["key"]: g for g in json.loads(capsys.readouterr().out)["by_user"]}
    assert set(fleet) == {"alice", "bob", "carol"}
    for user in ("alice", "bob"):
        hours, cap = fleet[user]["capacity_outcomes"]["hours"], by_user[user]
        assert hours.get("kept-up", 0) == pytest.approx(cap["kept_up"])
        assert hours.get("reused", 0) == pytest.approx(cap["reused"])
        assert fleet[user]["capacity_outcomes"]["unknown_hours"] == pytest.approx(0, abs=1e-6)
    assert fleet["carol"]["capacity_outcomes"]["text"] == "-"  # released nothing
    assert cli_mod.main(argv) == 0
    text = capsys.readouterr().out
    assert "kept-up 6.00 h" in text and "reused 2.00 h, kept-up 3.00 h" in text, text


def test_a_simulated_week_agrees_with_the_emulators_node_book(
    pool_cluster, sessions, shutdown_kernel, capsys
):
    """Three users, a week of workdays on 1-GPU nodes under the autoscaler, a training
    job some nights, a monitoring pod pinning one node: the ledger's released
    accelerator-hours, by outcome, within 1 % of the emulator's own bookkeeping."""
    cluster = pool_cluster(gpus_per_node=1, max_nodes=4, scale_up_seconds=120)
    for _ in range(3):
        cluster.nodes.add_node()
    users = {ns: Notebook(cluster, ns) for ns in ("alice", "bob", "carol")}
    t0 = cluster.clock.time()
    # the monitoring pod lands on the first node and can never move: it keeps it up
    cluster.add_workload("monitoring", "exporter", gpus=0, controller=None)
    hour, day = 3600.0, 86400.0
    script: list[tuple[float, str, str]] = []
    for d in range(5):
        for i, ns in enumerate(users):
            script.append((t0 + d * day + (17 + i) * hour, "pause", ns))
            # back the next workday (Friday's pause lasts the weekend)
            script.append((t0 + (d + 1 if d < 4 else 7) * day + (8 + i) * hour, "resume", ns))
    for d in (1, 3):  # a training job on Tuesday and Thursday nights
        script.append((t0 + d * day + 21 * hour, "job", "start"))
        script.append((t0 + d * day + 27 * hour, "job", "stop"))
    script.sort()
    end = t0 + 7 * day  # the report's week; the simulation runs on to Monday's resumes
    resuming: set[str] = set()
    windows: list[tuple[str, str, float, float]] = []  # ns, node, released, reacquired
    released: dict[str, tuple[str, float]] = {}

    def round_() -> None:
        for ns in users:
            client = KubeClient(
                kubeconfig=cluster.kubeconfig, context="node-follower", namespace=ns
            )
            for result in follow_round(client, cluster.clock.time(), hour):
                assert not result.error, result
        for ns in list(resuming):
            nb = users[ns]
            if cluster.pod_ready(f"{nb.name}-0", ns):
                nb.came_back()
                resuming.discard(ns)
                node, at = released.pop(ns)
                acquired = nb.ledger.events(types=[EventType.CAPACITY_ACQUIRED], path="work.ipynb")
                windows.append((ns, node, at, acquired[-1].time))

    last = script[-1][0] + hour
    for when, action, who in [*script, (last, "end", "")]:
        # a look every 7 minutes for the 15 minutes after each change (the
        # autoscaler acts 10 minutes after a node empties, a scale-up takes 2),
        # then hourly: a scale-down is seen up to 7 minutes late
        while cluster.clock.time() < when:
            step = min(when - cluster.clock.time(), hour)
            recent = [t for t, _, _ in script if t <= cluster.clock.time() < t + 15 * MINUTE]
            if recent:
                step = min(step, 7 * MINUTE)
            cluster.advance(step)
            round_()
        if action == "pause":
            nb = users[who]
            node = nb.node
            nb.pause(sessions, shutdown_kernel)
            released[who] = (node, cluster.clock.time())
        elif action == "resume":
            users[who].resume()
            resuming.add(who)
            cluster.ctl.settle()
        elif action == "job" and who == "start":
            cluster.add_workload("ml", "train", gpus=1, workload_class="training")
        elif action == "job":
            cluster.remove_workload("ml", "train")
        round_()
    assert not released and not resuming

    # the emulator's book, over the same windows (within the report's week)
    book = cluster.nodes.book
    expected = {"released": 0.0, "reused": 0.0, "scaled_down": 0.0, "up_and_free": 0.0}
    for _ns, node, a, b in windows:
        b = min(b, end)
        up = book.node_up(node, a, b, end)
        taken = sum(x1 - x0 for x0, x1, _g, _n in book.gpu_seconds(node, a, b, end))
        expected["released"] += b - a
        expected["scaled_down"] += (b - a) - up
        expected["reused"] += taken
        expected["up_and_free"] += up - taken
    expected = {k: v / hour for k, v in expected.items()}

    events = [e for nb in users.values() for e in nb.ledger.events()]
    report = build_report(events, since=t0, until=end, now=end).to_json()
    cap = report["totals"]["capacity"]
    got = {
        "released": cap["released"],
        "reused": cap["reused"],
        "scaled_down": cap["scaled_down"],
        "up_and_free": cap["idle"] + cap["kept_up"],
    }
    tolerance = 0.01 * expected["released"]
    for key in expected:
        assert abs(got[key] - expected[key]) <= tolerance, (key, got, expected)
    assert cap["unknown"] <= tolerance
    assert all(cap[k] > 0 for k in ("reused", "scaled_down", "kept_up")), cap
    # the week's table, for the record (pytest -s shows it)
    share = report["totals"]["always_on_share"]
    with capsys.disabled():
        print("\nweek on the emulator (accelerator-hours)")
        print(f"{'':12}{'ledger':>10}{'emulator':>10}")
        for key in expected:
            print(f"{key:12}{got[key]:10.2f}{expected[key]:10.2f}")
        for key in ("idle", "kept_up", "unknown", "node_hours_up", "node_hours_removed"):
            print(f"{key:12}{cap[key]:10.2f}")
        print(f"always-on {report['totals']['gpu_hours']['always_on']:.1f} h, allocated "
              f"{report['totals']['gpu_hours']['allocated']:.1f} h; shares: "
              + ", ".join(f"{k} {v:.1%}" for k, v in share.items() if v is not None))  # fmt: skip
        for g in report["by_user"]:
            c = g["capacity"]
            print(f"  {g['key']:6} released {c['released']:6.2f} reused {c['reused']:5.2f} "
                  f"scaled-down {c['scaled_down']:6.2f} idle {c['idle']:5.2f} "
                  f"kept-up {c['kept_up']:6.2f} node-h up {c['node_hours_up']:6.2f} "
                  f"removed {c['node_hours_removed']:6.2f}")  # fmt: skip


def test_a_pod_snapshot_week_is_on_the_clock_it_is_given(pool_cluster, sessions, shutdown_kernel):
    """A workweek of pod-snapshot pauses at 17:00 and resumes at 8:00 (a new node each
    morning, 2 minutes to come up) on the cluster's fake clock: every row the backend
    writes, the release the manager records from its facts and the state annotations
    are on that clock, and the ledger's accelerator-hours are within 1 % of the
    emulator's own book of the pod's GPU."""
    cluster = pool_cluster(gpus_per_node=1, scale_up_seconds=120)
    cluster.nodes.add_node()
    nb = Notebook(cluster, NAMESPACE)
    t0 = cluster.clock.time()
    hour, day = 3600.0, 86400.0
    for d in range(5):
        cluster.advance(t0 + d * day + 17 * hour - cluster.clock.time())
        facts = nb.pause(sessions, shutdown_kernel)
        assert facts.released_at == cluster.clock.time()
        assert parse_time(cluster.state()[A_PAUSED_AT]) == pytest.approx(t0 + d * day + 17 * hour)
        cluster.advance(t0 + (d + 1) * day + 8 * hour - cluster.clock.time())
        nb.resume()
        cluster.ctl.settle()
        for _ in range(10):  # the autoscaler brings a node up
            if cluster.pod_ready(f"{nb.name}-0", NAMESPACE):
                break
            cluster.advance(MINUTE)
        nb.came_back()
        assert parse_time(cluster.state()[A_RESUMED_AT]) == pytest.approx(cluster.clock.time())
    end = cluster.clock.time()
    rows = nb.ledger.events()
    assert {e.type for e in rows} >= {
        EventType.SNAPSHOT_REQUESTED,
        EventType.SNAPSHOT_READY,
        EventType.WORKSPACE_STOPPED,
        EventType.ACCELERATOR_RELEASED,
        EventType.CAPACITY_ACQUIRED,
        EventType.STATE_CHANGED,
    }
    off_clock = [(e.type.value, e.time) for e in rows if not t0 <= e.time <= end]
    assert not off_clock, off_clock

    # the emulator's book of the pod's GPU, against the ledger's report
    held = sum(
        min(a.end if a.end is not None else end, end) - max(a.start, t0)
        for a in cluster.nodes.book.allocations
        if a.namespace == NAMESPACE
    )
    expected = {"allocated": held / hour, "released": (end - t0 - held) / hour}
    got = build_report(rows, since=t0, until=end, now=end).to_json()["totals"]["gpu_hours"]
    for key, hours in expected.items():
        assert abs(got[key] - hours) <= 0.01 * hours, (key, got, expected)


def test_kubeflow_workspace_node_followed_and_recorded(pool_cluster, sessions, shutdown_kernel):
    cluster = pool_cluster(gpus_per_node=1)
    cluster.nodes.add_node()
    cluster.add_workspace()
    pod = cluster.pod_ready(cluster.workspace_pod())
    node = pod["spec"]["nodeName"]
    ledger = Ledger(":memory:", user=NAMESPACE)
    asyncio.run(ws_backend(cluster, ledger, clock=cluster.clock).release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod(cluster.workspace_pod()) is None, what="pod gone")
    ws = cluster.emu.get("Workspace", NAMESPACE, WORKSPACE)
    assert node in ws["metadata"]["annotations"]["jupyter-pause.io/node"]
    follow(cluster, [NAMESPACE], minutes=20)
    assert cluster.emu.find("Node", None, node) is None
    start_resume(
        KubeClient(kubeconfig=cluster.kubeconfig, context="user", namespace=NAMESPACE),
        WORKSPACE,
        {"id": "r1", "started": "now", "by": "test"},
        kind="workspace",
    )
    cluster.ctl.settle()
    cluster.wait_for(lambda: cluster.pod_ready(cluster.workspace_pod()), what="back")
    asyncio.run(ws_backend(cluster, ledger, clock=cluster.clock).startup())
    spans = [e.data for e in ledger.events(types=[EventType.CAPACITY_OUTCOME])]
    assert [s["outcome"] for s in spans] == ["idle", "scaled-down"]
    assert spans[1]["start"] == cluster.nodes.book.nodes[node][0].end


def test_emulated_nodes_field_selectors_and_cordon(pool_cluster):
    cluster = pool_cluster(gpus_per_node=1, max_nodes=2)
    first = cluster.nodes.add_node()["metadata"]["name"]
    cluster.emu.mutate("Node", None, first, lambda n: n["spec"].update(unschedulable=True))
    pod = cluster.add_workload("bob", "train", gpus=1)
    assert pod["spec"]["nodeName"] != first  # cordoned: a new node was added for it
    client = KubeClient(kubeconfig=cluster.kubeconfig, context="admin", namespace="default")
    on_node = client.list_pods_on_node(pod["spec"]["nodeName"])
    assert [p["metadata"]["name"] for p in on_node] == ["train-0"]
    assert client.list_pods_on_node(first) == []
    with pytest.raises(KubeError, match="field label not supported"):
        client._call(client.core.list_pod_for_all_namespaces, field_selector="spec.image=x")
