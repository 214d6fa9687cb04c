"""A real Jupyter server in a "pod" whose ServiceAccount may not read its pod.

Issue 13, defect 4: each Kubeflow Workspace runs as its own ServiceAccount
``ws-<name>``; without the ClusterRole in the kind's ``clusterRoles`` it may not
read its pod, detection fails, and the server falls back to the local backend.
That must be loud: ``GET status`` names the failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from conftest import NAMESPACE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import api  # noqa: E402


@pytest.fixture
def pod_without_rights(make_cluster, monkeypatch, tmp_path):
    cluster = make_cluster()
    cluster.add_workspace_kind(cluster_roles=())  # the kind grants the Workspace nothing
    cluster.add_workspace()
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    config["current-context"] = "sa-workspace"  # what the pod's own credentials would be
    kubeconfig = tmp_path / "pod-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("POD_NAME", cluster.workspace_pod())
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return cluster


@pytest.fixture
def jp_server_config(pod_without_rights):
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_pause": True},
            "allow_unauthenticated_access": False,
        },
        "PauseApp": {"backend": "auto"},
    }


async def test_status_says_that_kubernetes_detection_failed(jp_fetch, pod_without_rights):
    code, body = await api(jp_fetch, "status")
    assert code == 200, body
    backend = body["backend"]
    assert backend["name"].startswith("local (kubernetes detection failed: cannot read pod ws-myws")
    assert "403" in backend["detection_error"]
    assert backend["scope"] == "notebook"
