"""A Kubernetes API emulator for the jupyter-pause tests (see ``server.py``, ``controllers.py``).

:class:`Cluster` wires one emulator, its controllers, principals with the RBAC
Roles from ``deploy/rbac/`` and a kubeconfig with one context per principal.
"""

from __future__ import annotations

import string
import time
from pathlib import Path

import yaml

from .controllers import Controllers, Scenario
from .server import KubeEmulator, Request, rbac_allows

__all__ = [
    "Cluster",
    "Controllers",
    "KubeEmulator",
    "Request",
    "Scenario",
    "rbac_allows",
    "load_roles",
]

REPO = Path(__file__).resolve().parents[2]
RBAC_DIR = REPO / "deploy" / "rbac"

NAMESPACE = "alice"
NOTEBOOK = "nb"
WORKSPACE = "myws"

# principal -> (manifest, Role name)
PRINCIPALS = {
    "sa-pod-snapshot": ("gke-pod-snapshot.yaml", f"jupyter-pause-{NOTEBOOK}"),
    "sa-workspace": ("kubeflow-workspace.yaml", f"jupyter-pause-ws-{WORKSPACE}"),
    "user": ("cli.yaml", "jupyter-pause-user"),
    "gc": ("cli.yaml", "jupyter-pause-gc"),
}
VARIABLES = {
    "NAMESPACE": NAMESPACE,
    "NOTEBOOK": NOTEBOOK,
    "WORKSPACE": WORKSPACE,
    "SERVICE_ACCOUNT": "notebook",
    "USER_NAME": "alice@example.com",
    "GC_USER": "platform@example.com",
}


def load_roles(manifest: str) -> dict[str, list[dict]]:
    """Role name -> rules, with the ``${VARIABLES}`` substituted."""
    text = string.Template((RBAC_DIR / manifest).read_text()).substitute(VARIABLES)
    out = {}
    for doc in yaml.safe_load_all(text):
        if doc and doc.get("kind") == "Role":
            out[doc["metadata"]["name"]] = doc.get("rules") or []
    return out


def role_rules(principal: str) -> list[dict]:
    manifest, role = PRINCIPALS[principal]
    return load_roles(manifest)[role]


class Cluster:
    """An emulated cluster with the objects of a user's namespace."""

    def __init__(self, tmp_path: Path, scenario: Scenario | None = None, enforce_rbac: bool = True):
        self.emu = KubeEmulator().start()
        self.ctl = Controllers(self.emu, scenario).start()
        self.scenario = self.ctl.scenario
        self.namespace = NAMESPACE
        self.emu.add_token("admin-token", "admin")
        self.emu.add_token("controller-token", "system:controller")
        for principal in PRINCIPALS:
            self.emu.add_token(
                f"{principal}-token", principal, role_rules(principal) if enforce_rbac else None
            )
        self.kubeconfig = str(tmp_path / "kubeconfig")
        users = ["admin", *PRINCIPALS]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.emu.url}}],
            "users": [{"name": u, "user": {"token": f"{u}-token"}} for u in users],
            "contexts": [
                {"name": u, "context": {"cluster": "emulator", "user": u, "namespace": NAMESPACE}}
                for u in users
            ],
            "current-context": "user",
        }
        Path(self.kubeconfig).write_text(yaml.safe_dump(config))

    def stop(self) -> None:
        self.ctl.stop()
        self.emu.stop()

    # -- waiting --
    def wait_for(self, predicate, timeout: float = 5.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}")

    def pod(self, name: str | None = None) -> dict | None:
        return self.emu.find("Pod", NAMESPACE, name or f"{NOTEBOOK}-0")

    def pod_ready(self, name: str | None = None) -> dict | None:
        pod = self.pod(name)
        if pod and not pod["metadata"].get("deletionTimestamp"):
            for c in pod["status"].get("conditions") or []:
                if c["type"] == "Ready" and c["status"] == "True":
                    return pod
        return None

    # -- objects --
    def add_gke_notebook(
        self,
        name: str = NOTEBOOK,
        image: str = "us-docker.pkg.dev/p/notebooks/torch:2.6",
        accelerator: str = "nvidia-tesla-t4",
        policy: bool = True,
    ) -> dict:
        """A gVisor StatefulSet running the server, matched by a manual PodSnapshotPolicy."""
        if policy and not self.emu.find("PodSnapshotStorageConfig", None, "notebooks-storage"):
            self.emu.create(
                "PodSnapshotStorageConfig",
                None,
                {
                    "metadata": {"name": "notebooks-storage"},
                    "spec": {"snapshotStorageConfig": {"gcs": {"bucket": "snapshots"}}},
                },
            )
        if policy and not self.emu.find("PodSnapshotPolicy", NAMESPACE, "notebooks"):
            self.emu.create(
                "PodSnapshotPolicy",
                NAMESPACE,
                {
                    "metadata": {"name": "notebooks"},
                    "spec": {
                        "selector": {"matchLabels": {"jupyter-pause.io/snapshot": "true"}},
                        "storageConfigName": "notebooks-storage",
                        "triggerConfig": {"type": "manual", "postCheckpoint": "resume"},
                        "retentionConfig": {"lastAccessTimeout": "7d"},
                    },
                },
            )
        sts = self.emu.create(
            "StatefulSet",
            NAMESPACE,
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "serviceName": name,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name, "jupyter-pause.io/snapshot": "true"}},
                        "spec": {
                            "runtimeClassName": "gvisor",
                            "serviceAccountName": "notebook",
                            "nodeSelector": {"cloud.google.com/gke-accelerator": accelerator},
                            "containers": [
                                {
                                    "name": "notebook",
                                    "image": image,
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                }
                            ],
                        },
                    },
                },
            },
        )
        self.wait_for(lambda: self.pod_ready(f"{name}-0"), what=f"pod {name}-0 ready")
        return sts

    def add_workspace(
        self, name: str = WORKSPACE, addon: bool = False, paused: bool = False
    ) -> dict:
        ann = {"podsnapshot.gke.kubeflow.org/enabled": "true"} if addon else {}
        ws = self.emu.create(
            "Workspace",
            NAMESPACE,
            {
                "metadata": {"name": name, "annotations": ann},
                "spec": {
                    "paused": paused,
                    "kind": "jupyterlab-resumable",
                    "podTemplate": {
                        "options": {"imageConfig": "jupyterlab-gpu-2.6", "podConfig": "gpu-t4"}
                    },
                },
            },
        )
        if not paused:
            self.wait_for(lambda: self.pod_ready(f"ws-{name}-0"), what=f"workspace {name} running")
        return ws
