"""ValidatingAdmissionPolicies (``admissionregistration.k8s.io/v1``) as kube-apiserver applies them.

The emulator stores policies and bindings like any object; on every write it
evaluates the installed ones with a real CEL implementation (``cel-python``),
after RBAC and mutation, as the API server's admission chain does:

* a binding selects its policy by ``spec.policyName``; a binding whose policy
  does not exist is ignored;
* the policy's ``matchConstraints.resourceRules`` select the request by API
  group, version, operation (``CREATE``, ``UPDATE``: a PATCH is an update) and
  resource (``statefulsets/scale`` for the scale subresource), and the
  binding's ``matchResources`` narrows it (here: namespaces by their
  ``kubernetes.io/metadata.name`` label, which every namespace has);
* every ``matchConditions`` expression must be true for the policy to apply;
* every ``validations`` expression must be true, else the request is denied
  (``validationActions: [Deny]``) with the API server's Status: message
  ``<resource>.<group> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>'
  with binding '<binding>' denied request: <message>``, reason the
  validation's ``reason`` (default ``Invalid``) and its HTTP code (422 by
  default, 403 for ``Forbidden``);
* an expression that fails to evaluate denies under ``failurePolicy: Fail``
  (the default) and is skipped under ``Ignore``.

For a subresource the admitted ``object`` is the subresource's object (an
``autoscaling/v1`` Scale for ``statefulsets/scale``).  The CEL variables are
``object``, ``oldObject`` and ``request`` (``userInfo.username``,
``operation``, ``namespace``, ``name``, ``subResource``, ``resource``).  What
the emulator does not model -- ``paramKind``, ``variables``,
``messageExpression``, other selectors, ``Warn``/``Audit`` -- is refused when
the policy is evaluated (:class:`NotModelled`), never silently passed.
"""

from __future__ import annotations

from dataclasses import dataclass

import celpy

#: the status code of each reason a validation may give (kube-apiserver's reasonToCode)
REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
METADATA_NAME_LABEL = "kubernetes.io/metadata.name"


class NotModelled(Exception):
    """A policy uses something the emulator does not evaluate."""


@dataclass(frozen=True)
class AdmissionRequest:
    """What a policy sees of one write."""

    operation: str  # CREATE | UPDATE | DELETE
    group: str
    version: str
    resource: str  # the plural, e.g. "statefulsets"
    subresource: str  # "" or e.g. "scale"
    namespace: str | None
    name: str
    username: str
    object: dict | None
    old_object: dict | None

    def variables(self) -> dict:
        return {
            "object": self.object,
            "oldObject": self.old_object,
            "request": {
                "operation": self.operation,
                "namespace": self.namespace or "",
                "name": self.name,
                "subResource": self.subresource,
                "resource": {
                    "group": self.group,
                    "version": self.version,
                    "resource": self.resource,
                },
                "userInfo": {"username": self.username},
            },
        }


@dataclass(frozen=True)
class Denial:
    """A policy's refusal, as the API server words it."""

    code: int
    reason: str
    message: str


_ENV = celpy.Environment()


def _evaluate(expression: str, activation) -> bool:
    """A boolean CEL expression (the API server type-checks them to bool)."""
    result = _ENV.program(_ENV.compile(expression)).evaluate(activation)
    if not isinstance(result, celpy.celtypes.BoolType):
        raise celpy.CELEvalError(f"{expression!r} is {type(result).__name__}, not bool")
    return bool(result)


def _rule_matches(rule: dict, req: AdmissionRequest) -> bool:
    def has(values, value) -> bool:
        return "*" in (values or []) or value in (values or [])

    resource = req.resource + (f"/{req.subresource}" if req.subresource else "")
    if rule.get("resourceNames") and req.name not in rule["resourceNames"]:
        return False
    return (
        has(rule.get("apiGroups"), req.group)
        and has(rule.get("apiVersions"), req.version)
        and has(rule.get("operations"), req.operation)
        and has(rule.get("resources"), resource)
    )


def _selects(match: dict | None, req: AdmissionRequest) -> bool:
    """A policy's ``matchConstraints`` or a binding's ``matchResources`` (absent rules: any)."""
    match = match or {}
    selector = match.get("namespaceSelector") or {}
    labels = selector.get("matchLabels") or {}
    if (
        set(match) - {"namespaceSelector", "resourceRules"}
        or set(selector) - {"matchLabels"}
        or set(labels) - {METADATA_NAME_LABEL}
    ):
        raise NotModelled(f"match {match}")
    rules = match.get("resourceRules")
    if rules is not None and not any(_rule_matches(r, req) for r in rules):
        return False
    return METADATA_NAME_LABEL not in labels or labels[METADATA_NAME_LABEL] == req.namespace


def admit(policies: list[dict], bindings: list[dict], req: AdmissionRequest) -> Denial | None:
    """The first denial of the installed policies, or None when the request is admitted."""
    by_name = {p["metadata"]["name"]: p for p in policies}
    activation = celpy.json_to_cel(req.variables())
    for binding in sorted(bindings, key=lambda b: b["metadata"]["name"]):
        spec = binding.get("spec") or {}
        policy = by_name.get(spec.get("policyName", ""))
        if policy is None:
            continue  # a binding to a missing policy is ignored
        pspec = policy.get("spec") or {}
        for field in ("paramKind", "variables", "auditAnnotations"):
            if pspec.get(field):
                raise NotModelled(f"ValidatingAdmissionPolicy spec.{field}")
        if spec.get("paramRef") or set(spec.get("validationActions") or []) != {"Deny"}:
            raise NotModelled(f"binding {binding['metadata']['name']}: only Deny, no params")
        constraints = pspec.get("matchConstraints") or {"resourceRules": []}
        if _selects(constraints, req) and _selects(spec.get("matchResources"), req):
            denial = _validate(policy, binding, req, activation)
            if denial is not None:
                return denial
    return None


def _validate(policy: dict, binding: dict, req: AdmissionRequest, activation) -> Denial | None:
    pspec = policy["spec"]
    try:
        for condition in pspec.get("matchConditions") or []:
            if not _evaluate(condition["expression"], activation):
                return None  # the policy does not apply to this request
        for validation in pspec.get("validations") or []:
            if validation.get("messageExpression"):
                raise NotModelled("validations[].messageExpression")
            if not _evaluate(validation["expression"], activation):
                message = validation.get("message") or (
                    f"failed expression: {validation['expression']}"
                )
                return _denial(policy, binding, req, message, validation.get("reason"))
    except celpy.CELEvalError as e:
        if pspec.get("failurePolicy", "Fail") == "Fail":
            return _denial(policy, binding, req, f"expression evaluation failed: {e}", None)
    return None


def _denial(policy, binding, req, message: str, reason: str | None) -> Denial:
    reason = reason or "Invalid"
    what = f"{req.resource}.{req.group}" if req.group else req.resource
    text = (
        f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
        f"'{binding['metadata']['name']}' denied request: {message}"
    )
    return Denial(REASON_CODES[reason], reason, f'{what} "{req.name}" is forbidden: {text}')
