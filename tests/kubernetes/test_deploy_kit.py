"""deploy/: every kustomize base renders with ``kubectl kustomize`` into valid objects.

The schemas (``schemas/deploy.yaml``) are written from the real types
(notebooks-v2 ``workspacekind_types.go``, the GKE Pod snapshot CRD reference,
the Kubernetes RBAC and core APIs).  ``kubectl`` comes from Debian's
``kubernetes-client`` (``make kubectl``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCHEMAS = yaml.safe_load((Path(__file__).parent / "schemas" / "deploy.yaml").read_text())
BASES = sorted(p.parent.name for p in DEPLOY.glob("*/kustomization.yaml"))


def render(base: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail(
            "kubectl is needed to render deploy/ (make kubectl: Debian's kubernetes-client)"
        )
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / base)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def validate(obj: dict) -> None:
    kind = obj.get("kind")
    assert kind in SCHEMAS["kinds"], f"no schema for {kind}"
    schema = {**SCHEMAS["kinds"][kind], "definitions": SCHEMAS["definitions"]}
    jsonschema.validate(obj, schema)


def test_every_base_is_found():
    assert BASES == ["gke-pod-snapshot", "jupyter-config", "kubeflow-workspaces"]


@pytest.mark.parametrize("base", BASES)
def test_base_renders_valid_objects(base):
    objects = render(base)
    assert objects
    for obj in objects:
        validate(obj)


def test_the_kits_contents():
    by_kind = {}
    for base in ("gke-pod-snapshot", "kubeflow-workspaces"):
        for obj in render(base):
            by_kind.setdefault((base, obj["kind"]), []).append(obj)
    # the Jupyter config, under a name the GKE Workspaces add-on does not overwrite
    for base in ("gke-pod-snapshot", "kubeflow-workspaces"):
        configs = {cm["metadata"]["name"]: cm for cm in by_kind[(base, "ConfigMap")]}
        cm = configs["jupyter-pause-server-config"]
        assert 'c.KernelManager.transport = "ipc"' in cm["data"]["jupyter_server_config.py"]
    # the pause state lives in a ConfigMap the server's Role pins by name
    configs = {cm["metadata"]["name"]: cm for cm in by_kind[("gke-pod-snapshot", "ConfigMap")]}
    state = configs["jupyter-pause-${NOTEBOOK}"]
    assert state["metadata"]["labels"]["jupyter-pause.io/statefulset"] == "${NOTEBOOK}"
    (role,) = by_kind[("gke-pod-snapshot", "Role")]
    assert {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["jupyter-pause-${NOTEBOOK}"],
        "verbs": ["get", "patch"],
    } in role["rules"]
    (kind,) = by_kind[("kubeflow-workspaces", "WorkspaceKind")]
    template = kind["spec"]["podTemplate"]
    (role,) = by_kind[("kubeflow-workspaces", "ClusterRole")]
    assert template["serviceAccount"]["clusterRoles"] == [{"name": role["metadata"]["name"]}]
    assert "jupyter pause activity --json" in template["activityProbe"]["podExec"]["script"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}) for e in template["extraEnv"]}
    assert env["POD_NAME"] == {"fieldPath": "metadata.name"}
    assert env["POD_NAMESPACE"] == {"fieldPath": "metadata.namespace"}
    volumes = {v["name"]: v for v in template["extraVolumes"]}
    assert volumes["jupyter-pause-config"]["configMap"]["name"] == "jupyter-pause-server-config"
    assert "livenessProbe" not in template["probes"]  # a frozen pod fails every probe
    for value in template["options"]["podConfig"]["values"]:
        assert "cloud.google.com/compute-class" in value["spec"]["nodeSelector"]
    (policy,) = by_kind[("gke-pod-snapshot", "PodSnapshotPolicy")]
    assert policy["spec"]["triggerConfig"] == {"type": "manual", "postCheckpoint": "resume"}
    # the notebook's ServiceAccount may set its StatefulSet's replicas to 0 or 1 only
    (vap,) = by_kind[("gke-pod-snapshot", "ValidatingAdmissionPolicy")]
    (binding,) = by_kind[("gke-pod-snapshot", "ValidatingAdmissionPolicyBinding")]
    (account,) = by_kind[("gke-pod-snapshot", "ServiceAccount")]
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    username = f"system:serviceaccount:${{NAMESPACE}}:{account['metadata']['name']}"
    assert [c["expression"] for c in vap["spec"]["matchConditions"]] == [
        f"request.userInfo.username == '{username}'"
    ]
    (rule,) = vap["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"statefulsets", "statefulsets/scale"}
