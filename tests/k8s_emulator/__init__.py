"""A Kubernetes API emulator for the jupyter-pause tests (see ``server.py``, ``controllers.py``).

:class:`Cluster` wires one emulator, its controllers, principals with the RBAC
Roles from ``deploy/rbac/`` and a kubeconfig with one context per principal.
"""

from __future__ import annotations

import string
import time
from pathlib import Path

import yaml

from .controllers import WS_LABEL, Controllers, Scenario
from .nodes import NodeBook, NodePool
from .server import Clock, KubeEmulator, Request, rbac_allows, use_clock

__all__ = [
    "Clock",
    "Cluster",
    "Controllers",
    "NodeBook",
    "NodePool",
    "KubeEmulator",
    "Request",
    "NOTEBOOK_SA",
    "Scenario",
    "rbac_allows",
    "load_roles",
]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RBAC_DIR = DEPLOY / "rbac"
WORKSPACE_CLUSTERROLE = DEPLOY / "kubeflow-workspaces" / "clusterrole.yaml"
REPLICAS_POLICY = DEPLOY / "gke-pod-snapshot" / "replicas-policy.yaml"

NAMESPACE = "alice"
NOTEBOOK = "nb"
WORKSPACE = "myws"
WORKSPACE_KIND = "jupyterlab-resumable"
#: the Workspace's own ServiceAccount; its rules come from the RoleBinding the
#: emulated Workspace controller makes for the kind's ``clusterRoles``
WORKSPACE_SA = f"system:serviceaccount:{NAMESPACE}:ws-{WORKSPACE}"

#: the ClusterRole a notebook server reads its own node with (the notice before SIGTERM)
NODE_NOTICE = ("gke-pod-snapshot/node-notice.yaml", "jupyter-pause-node-notice")
WORKSPACE_NODE_NOTICE = ("kubeflow-workspaces/node-notice.yaml", "jupyter-pause-node-notice")

# principal -> (manifest under deploy/, Role name or names), or a list of them
PRINCIPALS = {
    "sa-pod-snapshot": [
        ("gke-pod-snapshot/rbac.yaml", f"jupyter-pause-{NOTEBOOK}"),
        NODE_NOTICE,
    ],
    "user": ("rbac/cli.yaml", "jupyter-pause-user"),
    "gc": ("rbac/cli.yaml", "jupyter-pause-gc"),
    # the emulator's RBAC is not scoped by namespace: the ClusterRole's and the
    # namespace Role's rules together are what this principal may do
    "node-follower": (
        "rbac/node-follower.yaml",
        ("jupyter-pause-node-follower", "jupyter-pause-node-follower-state"),
    ),
    "fleet": ("rbac/cli.yaml", "jupyter-pause-fleet"),
}
VARIABLES = {
    "NAMESPACE": NAMESPACE,
    "NOTEBOOK": NOTEBOOK,
    "WORKSPACE": WORKSPACE,
    "SERVICE_ACCOUNT": "notebook",
    "USER_NAME": "alice@example.com",
    "GC_USER": "platform@example.com",
    "FOLLOWER": "node-follower@example.com",
    "FLEET_USER": "platform@example.com",
}
#: the notebook pod's ServiceAccount as the API server names it (the kit's ${SERVICE_ACCOUNT})
NOTEBOOK_SA = f"system:serviceaccount:{NAMESPACE}:{VARIABLES['SERVICE_ACCOUNT']}"


def load_roles(manifest: str) -> dict[str, list[dict]]:
    """Role name -> rules, with the ``${VARIABLES}`` substituted."""
    text = string.Template((DEPLOY / manifest).read_text()).substitute(VARIABLES)
    out = {}
    for doc in yaml.safe_load_all(text):
        if doc and doc.get("kind") in ("Role", "ClusterRole"):
            out[doc["metadata"]["name"]] = doc.get("rules") or []
    return out


def workspace_clusterrole() -> dict:
    return yaml.safe_load(WORKSPACE_CLUSTERROLE.read_text())


def role_rules(principal: str) -> list[dict]:
    if principal == WORKSPACE_SA:  # the kind's ClusterRole, and the namespace's node notice
        return workspace_clusterrole()["rules"] + _rules(*WORKSPACE_NODE_NOTICE)
    granted = PRINCIPALS[principal]
    if isinstance(granted, tuple):
        granted = [granted]
    return [rule for manifest, roles in granted for rule in _rules(manifest, roles)]


def _rules(manifest: str, roles: str | tuple[str, ...]) -> list[dict]:
    loaded = load_roles(manifest)
    if isinstance(roles, str):
        return loaded[roles]
    return [rule for role in roles for rule in loaded[role]]


class Cluster:
    """An emulated cluster with the objects of a user's namespace."""

    def __init__(
        self,
        tmp_path: Path,
        scenario: Scenario | None = None,
        enforce_rbac: bool = True,
        clock: Clock | None = None,
    ):
        self.clock = clock or Clock()
        use_clock(self.clock)
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
        self.emu.add_token("sa-workspace-token", WORKSPACE_SA if enforce_rbac else "admin")
        # the notebook pod's ServiceAccount under its real name (admission policies match it)
        self.emu.add_token(
            "sa-notebook-token",
            NOTEBOOK_SA,
            role_rules("sa-pod-snapshot") if enforce_rbac else None,
        )
        self.emu.create("ClusterRole", None, workspace_clusterrole())
        # the platform team's binding of the node notice for the namespace's accounts
        manifest, _ = WORKSPACE_NODE_NOTICE
        text = string.Template((DEPLOY / manifest).read_text()).substitute(VARIABLES)
        for doc in yaml.safe_load_all(text):
            self.emu.create(doc["kind"], None, doc)
        self.kubeconfig = str(tmp_path / "kubeconfig")
        self._users = ["admin", *PRINCIPALS, "sa-workspace", "sa-notebook"]
        self._write_kubeconfig()

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.emu.url}}],
            "users": [{"name": u, "user": {"token": f"{u}-token"}} for u in self._users],
            "contexts": [
                {"name": u, "context": {"cluster": "emulator", "user": u, "namespace": NAMESPACE}}
                for u in self._users
            ],
            "current-context": "user",
        }
        Path(self.kubeconfig).write_text(yaml.safe_dump(config))

    def process_context(self, context: str, pod_name: str) -> str:
        """A kubeconfig context for "the process in ``pod_name``": the principal of
        ``context`` with a token bound to the pod as it is now (frozen with it,
        invalid once it is gone)."""
        pod = self.emu.get("Pod", NAMESPACE, pod_name)
        name = f"{context}@{pod['metadata']['uid'][:8]}"
        principal = self.emu.tokens[f"{context}-token"]
        self.emu.bind_token(f"{name}-token", principal, NAMESPACE, pod["metadata"]["uid"])
        self._users.append(name)
        self._write_kubeconfig()
        return name

    def install_replicas_policy(self) -> list[dict]:
        """The deploy kit's ValidatingAdmissionPolicy and its binding, as the platform applies them."""
        text = string.Template(REPLICAS_POLICY.read_text()).substitute(VARIABLES)
        return [self.emu.create(d["kind"], None, d) for d in yaml.safe_load_all(text) if d]

    def stop(self) -> None:
        self.ctl.stop()
        self.emu.stop()
        use_clock(Clock())

    # -- time and nodes --
    def advance(self, seconds: float) -> float:
        """Move the cluster's (fake) clock and let the controllers act on it, stopping
        at each moment the autoscaler acts on its own (as its 10 s scan would)."""
        target = self.clock.time() + seconds
        pool = self.ctl.node_pool
        while pool is not None:
            due = pool.next_deadline()
            if due is None or due >= target:
                break
            self.clock.advance(due - self.clock.time())
            self.ctl.settle()
        self.clock.advance(target - self.clock.time())
        self.ctl.settle()
        return target

    @property
    def nodes(self):
        """The node pool's controller (``Scenario.node_pool``): its nodes and its book."""
        assert self.ctl.node_pool is not None, "the scenario has no node_pool"
        return self.ctl.node_pool

    def add_workload(
        self,
        namespace: str,
        name: str,
        gpus: int = 0,
        controller: str | None = "StatefulSet",
        workload_class: str = "",
        node_selector: dict | None = None,
        safe_to_evict: bool = True,
    ) -> dict:
        """Someone else's pod: a StatefulSet's (its pod ``<name>-0``), or a bare pod
        (``controller=None``: the autoscaler cannot move it)."""
        labels = {"app": name}
        if workload_class:
            labels["jupyter-pause.io/workload-class"] = workload_class
        annotations = (
            {} if safe_to_evict else {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
        )
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        spec = {
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
            "nodeSelector": dict(node_selector or {}),
        }
        if controller is None:
            self.emu.create(
                "Pod",
                namespace,
                {
                    "metadata": {"name": name, "labels": labels, "annotations": annotations},
                    "spec": spec,
                },
            )
            pod_name = name
        else:
            self.emu.create(
                "StatefulSet",
                namespace,
                {
                    "metadata": {"name": name},
                    "spec": {
                        "replicas": 1,
                        "serviceName": name,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {
                            "metadata": {"labels": labels, "annotations": annotations},
                            "spec": spec,
                        },
                    },
                },
            )
            pod_name = f"{name}-0"
        return self.wait_for(
            lambda: (
                (self.emu.find("Pod", namespace, pod_name) or {}).get("spec", {}).get("nodeName")
                and self.emu.find("Pod", namespace, pod_name)
            ),
            what=f"pod {namespace}/{pod_name} bound",
        )

    def remove_workload(self, namespace: str, name: str) -> None:
        """Delete a workload added by :meth:`add_workload` and wait until its pod is gone."""
        res = self.emu.resource("StatefulSet")
        if self.emu.find("StatefulSet", namespace, name):
            self.emu.store.delete(res, namespace, name)
            pod = f"{name}-0"
        else:
            pod = name
            self.emu.store.delete(self.emu.resource("Pod"), namespace, name, graceful=True)
        self.wait_for(lambda: self.emu.find("Pod", namespace, pod) is None, what=f"{pod} gone")
        self.ctl.settle()

    # -- waiting --
    def wait_for(self, predicate, timeout: float = 60.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}")

    def state(self, statefulset: str = NOTEBOOK) -> dict[str, str]:
        """The pause-state annotations of a notebook StatefulSet (its ConfigMap)."""
        cm = self.emu.get("ConfigMap", NAMESPACE, f"jupyter-pause-{statefulset}")
        return cm["metadata"].get("annotations") or {}

    def set_state(self, statefulset: str = NOTEBOOK, **annotations: str) -> None:
        self.emu.mutate(
            "ConfigMap",
            NAMESPACE,
            f"jupyter-pause-{statefulset}",
            lambda c: c["metadata"].setdefault("annotations", {}).update(annotations),
        )

    def pod(self, name: str | None = None, namespace: str = NAMESPACE) -> dict | None:
        return self.emu.find("Pod", namespace, name or f"{NOTEBOOK}-0")

    def pod_ready(self, name: str | None = None, namespace: str = NAMESPACE) -> dict | None:
        pod = self.pod(name, namespace)
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
        namespace: str = NAMESPACE,
        home_class: str | None = None,
    ) -> dict:
        """A gVisor StatefulSet running the server, matched by a manual PodSnapshotPolicy;
        with ``home_class``, its home volume from a claim template of that StorageClass."""
        if policy and not self.emu.find("PodSnapshotStorageConfig", None, "notebooks-storage"):
            self.emu.create(
                "PodSnapshotStorageConfig",
                None,
                {
                    "metadata": {"name": "notebooks-storage"},
                    "spec": {"snapshotStorageConfig": {"gcs": {"bucket": "snapshots"}}},
                },
            )
        if policy and not self.emu.find("PodSnapshotPolicy", namespace, "notebooks"):
            self.emu.create(
                "PodSnapshotPolicy",
                namespace,
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
        # the state ConfigMap of the deploy kit (deploy/gke-pod-snapshot/state.yaml)
        self.emu.create(
            "ConfigMap",
            namespace,
            {
                "metadata": {
                    "name": f"jupyter-pause-{name}",
                    "labels": {
                        "app.kubernetes.io/managed-by": "jupyter-pause",
                        "jupyter-pause.io/statefulset": name,
                    },
                }
            },
        )
        claims = []
        if home_class:
            claims.append(
                {
                    "metadata": {"name": "home"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": home_class,
                        "resources": {"requests": {"storage": "100Gi"}},
                    },
                }
            )
        sts = self.emu.create(
            "StatefulSet",
            namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "serviceName": name,
                    **({"volumeClaimTemplates": claims} if claims else {}),
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
        self.wait_for(
            lambda: self.pod_ready(f"{name}-0", namespace), what=f"pod {namespace}/{name}-0 ready"
        )
        return sts

    def add_workspace_kind(self, addon: bool = False, cluster_roles=("jupyter-pause-workspace",)):
        """GKE's resumable kind: the add-on enabled on the *kind* (when ``addon``)."""
        ann = {"podsnapshot.gke.kubeflow.org/enabled": "True"} if addon else {}
        return self.emu.create(
            "WorkspaceKind",
            None,
            {
                "metadata": {"name": WORKSPACE_KIND, "annotations": ann},
                "spec": {
                    "podTemplate": {
                        "serviceAccount": {"clusterRoles": [{"name": r} for r in cluster_roles]}
                    }
                },
            },
        )

    def add_workspace(
        self,
        name: str = WORKSPACE,
        addon: bool = False,
        paused: bool = False,
        annotations: dict | None = None,
        pod_config: str = "gpu-t4",
    ) -> dict:
        """A Workspace of the kind (created first; ``addon`` enables the add-on on the kind)."""
        if not self.emu.find("WorkspaceKind", None, WORKSPACE_KIND):
            self.add_workspace_kind(addon=addon)
        ws = self.emu.create(
            "Workspace",
            NAMESPACE,
            {
                "metadata": {"name": name, "annotations": dict(annotations or {})},
                "spec": {
                    "paused": paused,
                    "kind": WORKSPACE_KIND,
                    "podTemplate": {
                        "options": {"imageConfig": "jupyterlab-gpu-2.6", "podConfig": pod_config}
                    },
                },
            },
        )
        if not paused:
            # running as its controller says so: the pod ready, then the status reconciled
            self.wait_for(
                lambda: (
                    self.pod_ready(self.workspace_pod(name))
                    and self._workspace_state(name) == "Running"
                ),
                what=f"workspace {name} running",
            )
        return ws

    def _workspace_state(self, name: str) -> str | None:
        ws = self.emu.find("Workspace", NAMESPACE, name)
        return ((ws or {}).get("status") or {}).get("state")

    def workspace_pod(self, name: str = WORKSPACE) -> str:
        """The pod name of a Workspace (its StatefulSet's name is generated)."""
        found = self.emu.list("StatefulSet", NAMESPACE, f"{WS_LABEL}={name}")
        return f"{found[0]['metadata']['name']}-0" if found else f"ws-{name}-unknown-0"
