"""The fleet on Kubernetes: each server writes its rolled-up ledger into its state
object, and ``jupyter pause report --fleet --kubernetes`` reads every workspace's
from the API (the emulator, real REST) while they are paused, starting none."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from conftest import NAMESPACE, NOTEBOOK, WORKSPACE, pod_backend, ws_backend

from jupyter_pause import cli as cli_mod
from jupyter_pause.backends.kubernetes.common import (
    A_FLEET,
    A_PAUSED_AT,
    MAX_FLEET_BYTES,
    parse_time,
)
from jupyter_pause.ledger import EventType as E
from jupyter_pause.ledger import Ledger
from jupyter_pause.report.fleet import FleetRow
from jupyter_pause.server.fleet import FleetPublisher

H = 3600.0


def worked_then_paused(user: str, path: str, start: float, gpus: int = 1) -> Ledger:
    """A ledger: a kernel with ``gpus`` for an hour, a cell of 30 min, then a pause."""
    ledger = Ledger(user=user)
    ledger.record(E.KERNEL_STARTED, path=path, time_=start, gpus=gpus, workload_class="gpu")
    ledger.record(E.CELL_EXECUTED, path=path, time_=start + 0.5 * H, duration=0.5 * H)
    ledger.record(E.PAUSE_REQUESTED, path=path, time_=start + H)
    ledger.record(E.ACCELERATOR_RELEASED, path=path, time_=start + H + 10, gpus=gpus)
    ledger.record(E.PAUSED, path=path, time_=start + H + 10)
    return ledger


def fleet_cli(cluster, capsys, *argv: str) -> tuple[int, str]:
    rc = cli_mod.main(
        ["report", "--fleet", "--kubernetes", "--kubeconfig", cluster.kubeconfig]
        + ["--context", "fleet", *argv]
    )
    return rc, capsys.readouterr().out


def publish(backend, ledger) -> str | None:
    return asyncio.run(FleetPublisher(ledger=ledger, backend=backend, interval=0).publish())


def test_the_fleet_is_read_from_paused_workspaces_without_starting_them(
    cluster, sessions, shutdown_kernel, capsys
):
    start = time.time() - 3 * H
    cluster.add_gke_notebook()
    cluster.add_workspace()
    gke_ledger = worked_then_paused("alice", "train.ipynb", start, gpus=2)
    ws_ledger = worked_then_paused("bob", "eval.ipynb", start)
    # both pause (the pod goes away), and each server process hands its rows over as
    # it stops (the same backend: it knows its state object from before)
    ws_pod = cluster.workspace_pod()
    for backend, ledger in ((pod_backend(cluster), gke_ledger), (ws_backend(cluster), ws_ledger)):
        asyncio.run(backend.release(sessions, shutdown_kernel))
        assert publish(backend, ledger) == A_FLEET
    cluster.wait_for(lambda: cluster.pod() is None, what="the notebook's pod gone")
    cluster.wait_for(lambda: cluster.pod(ws_pod) is None, what="the workspace's pod gone")
    before = len(cluster.emu.requests)

    rc, out = fleet_cli(cluster, capsys, "--format", "json")
    assert rc == 0, out
    fleet = json.loads(out)
    servers = {(r["user"], r["server"]) for r in fleet["rows"]}
    assert servers == {("alice", f"{NAMESPACE}/{NOTEBOOK}"), ("bob", f"{NAMESPACE}/{WORKSPACE}")}
    users = {g["key"]: g for g in fleet["by_user"]}
    assert users["alice"]["gpu_hours"]["allocated"] == approx(2 * (H + 10) / H)
    assert users["bob"]["gpu_hours"]["active"] == approx(0.5)
    # released from the pause until now: about two hours (x2 GPUs for alice)
    assert 2 * 1.9 < users["alice"]["gpu_hours"]["released"] < 2 * 2.1
    assert users["alice"]["paused"] == users["bob"]["paused"] == 1
    assert fleet["totals"]["capacity_outcomes"]["text"] == "node outcome unknown"
    assert [g["key"] for g in fleet["by_class"]] == ["gpu"]

    # nothing was started, nothing written: the platform team only listed
    fleet_requests = [r for r in cluster.emu.requests[before:] if r.principal == "fleet"]
    assert {r.verb for r in fleet_requests} == {"list"}
    assert all(r.principal in ("fleet", "system:controller") for r in cluster.emu.requests[before:])
    assert cluster.pod() is None and cluster.pod(ws_pod) is None
    assert cluster.emu.get("Workspace", NAMESPACE, WORKSPACE)["spec"]["paused"] is True
    assert cluster.emu.get("StatefulSet", NAMESPACE, NOTEBOOK)["spec"]["replicas"] == 0

    rc, text = fleet_cli(cluster, capsys)
    assert rc == 0 and "alice" in text and "bob" in text and "unknown" in text, text


def test_a_workspace_paused_after_its_last_hand_over_counts_paused_from_its_pause(
    cluster, sessions, shutdown_kernel, capsys
):
    """A snapshot freezes the process inside its pause: its last rows are from before
    it (the notebook running); the state annotation says since when it is paused."""
    cluster.add_gke_notebook()
    ledger = Ledger(user="alice")
    ledger.record(E.KERNEL_STARTED, path="train.ipynb", time_=time.time() - H, gpus=2)
    backend = pod_backend(cluster)
    assert publish(backend, ledger) == A_FLEET  # periodically, while it runs
    asyncio.run(backend.release(sessions, shutdown_kernel))
    cluster.wait_for(lambda: cluster.pod() is None, what="the notebook's pod gone")
    paused_at = parse_time(cluster.state()[A_PAUSED_AT])

    rc, out = fleet_cli(cluster, capsys, "--format", "json")
    assert rc == 0, out
    fleet = json.loads(out)
    (row,) = fleet["rows"]
    assert row["state"] == "paused" and row["pauses"] == 1
    assert fleet["totals"]["paused"] == 1
    # held until the pause, released (2 GPUs) from then until now
    assert row["allocated_s"] == approx(2 * (paused_at - (time.time() - H)), rel=0.01)
    assert 0 <= row["released_s"] <= 2 * (fleet["now"] - paused_at) + 1e-6


def test_a_resent_row_counts_once_and_a_damaged_annotation_is_said(cluster, capsys):
    cluster.add_gke_notebook()
    ledger = worked_then_paused("alice", "train.ipynb", time.time() - 2 * H)
    backend = pod_backend(cluster)
    publish(backend, ledger)
    publish(backend, ledger)
    rc, out = fleet_cli(cluster, capsys, "--format", "json")
    assert json.loads(out)["totals"]["notebooks"] == 1
    cluster.set_state(**{A_FLEET: '{"rows": [{"user": 1}]}'})
    rc, out = fleet_cli(cluster, capsys, "--format", "json")
    fleet = json.loads(out)
    assert rc == 0 and fleet["rows"] == []
    assert any(A_FLEET in p and f"{NAMESPACE}/{NOTEBOOK}" in p for p in fleet["problems"])


def test_the_annotation_keeps_within_its_bound_largest_rows_first(cluster, caplog):
    cluster.add_gke_notebook()
    ledger = Ledger(user="alice")
    t = 1_790_000_000.0
    for i in range(3000):  # a server with very many notebooks
        path = f"notebooks/{i:04d}-{'x' * 40}.ipynb"
        ledger.record(E.KERNEL_STARTED, path=path, time_=t + i, gpus=1)
        ledger.record(E.KERNEL_STOPPED, path=path, time_=t + 2 * i + 10)
    with caplog.at_level(logging.WARNING):
        publish(pod_backend(cluster), ledger)
    raw = cluster.state()[A_FLEET]
    assert len(raw) <= MAX_FLEET_BYTES
    rows = [FleetRow.from_json(r) for r in json.loads(raw)["rows"]]
    assert 0 < len(rows) < 3000
    assert "do not fit the annotation" in caplog.text
    kept = min(r.allocated_s for r in rows)
    assert kept >= 3000 - len(rows) - 1 + 10  # the notebooks that held the most were kept


def approx(value, rel=1e-3):
    return pytest.approx(value, rel=rel)
