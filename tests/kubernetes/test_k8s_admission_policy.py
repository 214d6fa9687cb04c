"""Least privilege that RBAC cannot give: the notebook may scale itself to 0 or 1 only.

RBAC lets the notebook's ServiceAccount patch ``statefulsets/scale`` of its own
StatefulSet (it scales itself to 0 at the end of a pause) but cannot limit the
number.  deploy/gke-pod-snapshot/replicas-policy.yaml, a ValidatingAdmissionPolicy
with its binding, does.  The emulator enforces installed policies with real CEL
(tests/k8s_emulator/admission.py); the requests here go through the official
``kubernetes`` client, authenticated as that ServiceAccount.
"""

from __future__ import annotations

import json

import pytest
from conftest import NAMESPACE, NOTEBOOK
from k8s_emulator import NOTEBOOK_SA
from k8s_emulator.admission import AdmissionRequest, admit
from kubernetes import config
from kubernetes.client import ApiException, AppsV1Api

POLICY = f"jupyter-pause-{NAMESPACE}-{NOTEBOOK}-replicas"


def apps(cluster, context: str) -> AppsV1Api:
    return AppsV1Api(config.new_client_from_config(cluster.kubeconfig, context=context))


def scale(api: AppsV1Api, replicas: int) -> int:
    out = api.patch_namespaced_stateful_set_scale(
        NOTEBOOK, NAMESPACE, {"spec": {"replicas": replicas}}
    )
    return out.spec.replicas


def test_without_the_policy_the_notebook_can_scale_itself_up(cluster):
    """The gap the policy closes: RBAC alone allows replicas 2 (two GPUs)."""
    cluster.add_gke_notebook()
    assert scale(apps(cluster, "sa-notebook"), 2) == 2


def test_the_notebook_may_scale_itself_to_0_or_1_only(cluster):
    cluster.add_gke_notebook()
    created = cluster.install_replicas_policy()
    assert [o["kind"] for o in created] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    sa = apps(cluster, "sa-notebook")
    with pytest.raises(ApiException) as refused:
        scale(sa, 2)
    status = json.loads(refused.value.body)
    assert (status["code"], status["reason"]) == (403, "Forbidden")  # the validation's reason
    assert status["message"] == (
        f'statefulsets.apps "{NOTEBOOK}" is forbidden: ValidatingAdmissionPolicy '
        f"'{POLICY}' with binding '{POLICY}' denied request: the notebook's ServiceAccount "
        "may scale its StatefulSet to 0 or 1 only"
    )
    assert cluster.emu.get("StatefulSet", NAMESPACE, NOTEBOOK)["spec"]["replicas"] == 1
    assert scale(sa, 0) == 0  # the end of a pause
    assert scale(sa, 1) == 1
    # the owner's `jupyter pause resume` (and the platform) are not matched
    assert scale(apps(cluster, "user"), 2) == 2


def test_the_statefulset_itself_is_held_to_it_too(cluster):
    """Were the Role wider (patch statefulsets), spec.replicas would still be held to <= 1."""
    cluster.add_gke_notebook()
    cluster.install_replicas_policy()
    wider = cluster.emu.rules_for(NOTEBOOK_SA) + [
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["patch"]}
    ]
    cluster.emu.add_token("sa-notebook-token", NOTEBOOK_SA, wider)
    sa = apps(cluster, "sa-notebook")
    with pytest.raises(ApiException) as refused:
        sa.patch_namespaced_stateful_set(NOTEBOOK, NAMESPACE, {"spec": {"replicas": 3}})
    assert refused.value.status == 403
    assert "denied request" in refused.value.body
    out = sa.patch_namespaced_stateful_set(NOTEBOOK, NAMESPACE, {"spec": {"replicas": 0}})
    assert out.spec.replicas == 0


def _request(replicas: int, username: str = NOTEBOOK_SA) -> AdmissionRequest:
    scale_obj = {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": replicas}}
    return AdmissionRequest(
        "UPDATE", "apps", "v1", "statefulsets", "scale", NAMESPACE, NOTEBOOK, username,
        scale_obj, None,
    )  # fmt: skip


def _policy(**validation) -> tuple[list[dict], list[dict]]:
    policy = {
        "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["statefulsets/scale"],
                    }
                ]
            },
            "validations": [{"expression": "object.spec.replicas <= 1", **validation}],
        },
    }
    binding = {
        "metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": ["Deny"]},
    }
    return [policy], [binding]


def test_a_denial_without_a_reason_is_422_invalid_as_in_kube_apiserver():
    denial = admit(*_policy(), _request(2))
    assert (denial.code, denial.reason) == (422, "Invalid")
    assert denial.message.endswith(
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: "
        "failed expression: object.spec.replicas <= 1"
    )
    assert admit(*_policy(), _request(1)) is None
    # another resource, or a binding to a missing policy: not evaluated
    assert admit(_policy()[0], [{"metadata": {"name": "b"}, "spec": {"policyName": "q", "validationActions": ["Deny"]}}], _request(2)) is None  # fmt: skip


def test_an_expression_that_cannot_be_evaluated_denies_under_fail():
    policies, bindings = _policy()
    policies[0]["spec"]["validations"][0]["expression"] = "object.spec.missing <= 1"
    denial = admit(policies, bindings, _request(1))
    assert denial is not None and "expression evaluation failed" in denial.message
    policies[0]["spec"]["failurePolicy"] = "Ignore"
    assert admit(policies, bindings, _request(1)) is None
