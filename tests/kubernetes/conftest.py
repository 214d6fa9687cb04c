"""Fixtures: an emulated Kubernetes API per test, reached through a kubeconfig.

The production code talks to it only through the official ``kubernetes``
client over HTTP.  Every request made by a restricted principal is also kept
in :data:`SESSION_REQUESTS`, for the RBAC test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from k8s_emulator import (  # noqa: E402, F401
    NAMESPACE,
    NOTEBOOK,
    WORKSPACE,
    Clock,
    Cluster,
    NodePool,
    Scenario,
)

SESSION_REQUESTS: list = []

FAST = {
    "poll_interval": 0.02,
    "settle_seconds": 0.0,
    "request_timeout": 5.0,
    "retry_backoff": 0.02,
}


@pytest.fixture
def fingerprint_env(monkeypatch):
    fp = {"gpu_model": "Tesla T4", "gpu_driver": "570.86.15", "torch": "2.6.0", "cuda": "12.4"}
    monkeypatch.setenv("JUPYTER_PAUSE_FINGERPRINT", json.dumps(fp))
    return fp


@pytest.fixture
def make_cluster(tmp_path, fingerprint_env):
    clusters = []

    def make(scenario: Scenario | None = None, **kw) -> Cluster:
        where = tmp_path / f"cluster{len(clusters)}"
        where.mkdir()
        c = Cluster(where, scenario, **kw)
        clusters.append(c)
        return c

    yield make
    for c in clusters:
        c.stop()
        SESSION_REQUESTS.extend(
            r for r in c.emu.requests if r.principal not in ("admin", "system:controller")
        )
        assert not c.ctl.errors, c.ctl.errors


@pytest.fixture
def cluster(make_cluster) -> Cluster:
    return make_cluster()


def pod_backend(cluster: Cluster, ledger=None, context="sa-pod-snapshot", **kw):
    from jupyter_pause.backends.kubernetes.podsnapshot import GkePodSnapshotBackend

    opts = {**FAST, "snapshot_timeout": 5.0, **kw}
    return GkePodSnapshotBackend(
        ledger=ledger,
        kubeconfig=cluster.kubeconfig,
        kube_context=context,
        namespace=NAMESPACE,
        pod_name=f"{NOTEBOOK}-0",
        **opts,
    )


def ws_backend(cluster: Cluster, ledger=None, context="sa-workspace", **kw):
    from jupyter_pause.backends.kubernetes.workspace import KubeflowWorkspaceBackend

    opts = {**FAST, "stop_timeout": 5.0, **kw}
    return KubeflowWorkspaceBackend(
        ledger=ledger,
        kubeconfig=cluster.kubeconfig,
        kube_context=context,
        namespace=NAMESPACE,
        pod_name=cluster.workspace_pod(),
        **opts,
    )


def main(argv: list[str]) -> int:
    """``jupyter pause`` with the sub-commands of :mod:`jupyter_pause.commands.kube`.

    The parser is built like ``jupyter_pause.cli.build_parser`` does, from its
    command table, but only for this module (the others have their own tests).
    """
    import argparse
    import importlib

    from jupyter_pause import cli as cli_mod

    # status, list and resume go through commands.where, which picks kube
    # when a kubeconfig is given
    kube_modules = ("jupyter_pause.commands.kube", "jupyter_pause.commands.where")
    parser = argparse.ArgumentParser(prog="jupyter pause")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in cli_mod.COMMANDS.items():
        if module_name in kube_modules:
            module = importlib.import_module(module_name)
            command = sub.add_parser(name, help=help_text)
            module.add_arguments(command, name)
            command.set_defaults(_run=module.run)
    args = parser.parse_args(argv)
    return int(args._run(args) or 0)


def cli(cluster: Cluster, *argv: str, context: str = "user", capsys=None):
    """Run ``jupyter pause ARGV`` against the emulator; returns (rc, stdout)."""
    rc = main(
        [
            *argv[:1],
            "--kubeconfig",
            cluster.kubeconfig,
            "--context",
            context,
            "--poll-interval",
            "0.02",
            *argv[1:],
        ]
    )
    out = capsys.readouterr().out if capsys else ""
    return rc, out


def gc_deleting_the_policy(cluster: Cluster, older_than: str, capsys) -> tuple[int, str]:
    """``jupyter pause gc --older-than AGE --delete-policy notebooks``, as the platform
    team runs it (context ``gc``)."""
    return cli(
        cluster,
        "gc",
        "--older-than",
        older_than,
        "--delete-policy",
        "notebooks",
        context="gc",
        capsys=capsys,
    )


@pytest.fixture
def sessions():
    from jupyter_pause.lifecycle import Session, State

    return [
        Session(
            path="train.ipynb",
            state=State.PAUSING,
            kernel_id="k1",
            kernel_name="python3",
            last_checkpoint={
                "id": "2026-11-30T18-02-11",
                "time": 1_790_000_000.0,
                "bytes": 6_300_000_000,
            },
        ),
        Session(
            path="eval.ipynb",
            state=State.PAUSING,
            kernel_id="k2",
            kernel_name="python3",
            last_checkpoint={
                "id": "2026-11-30T18-02-12",
                "time": 1_790_000_001.0,
                "bytes": 1_000_000,
            },
        ),
    ]


@pytest.fixture
def shutdown_kernel():
    calls = []

    async def shutdown(kernel_id):
        calls.append(kernel_id)

    shutdown.calls = calls
    return shutdown
