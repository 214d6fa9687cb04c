"""An in-process Kubernetes API server for tests: real HTTP, JSON, resourceVersions, watch.

It serves the REST paths the official ``kubernetes`` client uses for the
objects jupyter-pause touches (pods, events, statefulsets and their scale,
the four ``podsnapshot.gke.io/v1`` kinds, ``kubeflow.org/v1beta1``
Workspaces), with the API server's semantics where they matter:

* ``metadata.resourceVersion`` from one global counter, ``uid``,
  ``creationTimestamp``, ``generation``;
* 404 ``NotFound``, 409 ``AlreadyExists`` / ``Conflict`` (stale resourceVersion
  in a PUT or PATCH body), 422 ``Invalid`` (validation, admission, failed JSON
  patch ``test``), 415 for apply patches, 403 ``Forbidden`` from RBAC;
* PATCH with ``application/json-patch+json``, ``merge-patch+json`` and
  ``strategic-merge-patch+json`` (treated as a merge patch);
* finalizers and graceful pod deletion (``deletionTimestamp``);
* ``?watch=true`` streaming (chunked JSON lines) from a resourceVersion;
* label and field selectors;
* RBAC: bearer tokens map to principals; a principal with Role rules is held
  to them (resourceNames included, list by ``metadata.name`` field selector).
  A ServiceAccount principal (``system:serviceaccount:NS:NAME``) gets the
  rules of the RoleBindings stored in the emulator (to Roles or ClusterRoles).
  Authorization comes before routing, as in kube-apiserver: a resource the
  caller may not touch answers 403 even when it does not exist;
* custom resources: no strategic merge patch (415), field selectors only on
  ``metadata.name`` / ``metadata.namespace`` (400);
* label keys and values are validated (value <= 63 characters, charset);
* tokens bound to a pod (like projected ServiceAccount tokens): while the pod
  is frozen by a checkpoint the requests of its process never arrive (they are
  held), and once the pod is gone or completed they are refused (401);
* injected faults: :meth:`KubeEmulator.fail_next` answers the next N matching
  requests with an error (503 by default) -- a control plane upgrade;
* ValidatingAdmissionPolicies and their bindings, once created, are enforced
  on every write after validation, with real CEL (``admission.py``).

Every request is recorded (principal, verb, group, resource, name, status) so
tests can compare what the code does with the RBAC manifests.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from .admission import AdmissionRequest, NotModelled, admit


class Clock:
    """The emulated cluster's wall clock: the real one, or one a test moves by hand.

    Every timestamp the emulator writes (creation, conditions, events, taints,
    ``pauseTime``) and every wait the node pool and the autoscaler count comes
    from it, so a test can live through a week in seconds (:meth:`advance`).
    The scripted delays of pods and snapshots stay on the real clock: they are
    the machinery, not the time being accounted.
    """

    def __init__(self, start: float | None = None):
        self._now = start
        self._lock = threading.Lock()

    @property
    def fake(self) -> bool:
        return self._now is not None

    def time(self) -> float:
        with self._lock:
            return time.time() if self._now is None else self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            if self._now is None:
                raise RuntimeError("the real clock cannot be advanced")
            self._now += seconds
            return self._now


#: the clock of the emulator running now (one per test; :class:`Cluster` sets it)
CLOCK = Clock()


def use_clock(clock: Clock) -> None:
    global CLOCK
    CLOCK = clock


def now_iso(t: float | None = None) -> str:
    t = CLOCK.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = True
    custom: bool = False  # a CustomResourceDefinition (no strategic merge, few field selectors)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RBAC_GROUP = "rbac.authorization.k8s.io"
ADMISSION_GROUP = "admissionregistration.k8s.io"
SNAP_GROUP = "podsnapshot.gke.io"

RESOURCES = [
    Resource("", "v1", "pods", "Pod"),
    Resource("", "v1", "events", "Event", status_subresource=False),
    Resource("", "v1", "configmaps", "ConfigMap", status_subresource=False),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", status_subresource=False),
    Resource("", "v1", "nodes", "Node", namespaced=False),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, False),
    Resource("apps", "v1", "statefulsets", "StatefulSet"),
    Resource(RBAC_GROUP, "v1", "roles", "Role", status_subresource=False),
    Resource(RBAC_GROUP, "v1", "rolebindings", "RoleBinding", status_subresource=False),
    Resource(RBAC_GROUP, "v1", "clusterroles", "ClusterRole", False, False),
    Resource(RBAC_GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding", False, False),
    Resource(
        ADMISSION_GROUP,
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        namespaced=False,
    ),
    Resource(
        ADMISSION_GROUP,
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        namespaced=False,
        status_subresource=False,
    ),
    Resource(
        SNAP_GROUP,
        "v1",
        "podsnapshotstorageconfigs",
        "PodSnapshotStorageConfig",
        namespaced=False,
        custom=True,
    ),
    Resource(SNAP_GROUP, "v1", "podsnapshotpolicies", "PodSnapshotPolicy", custom=True),
    Resource(
        SNAP_GROUP, "v1", "podsnapshotmanualtriggers", "PodSnapshotManualTrigger", custom=True
    ),
    Resource(SNAP_GROUP, "v1", "podsnapshots", "PodSnapshot", custom=True),
    Resource("kubeflow.org", "v1beta1", "workspaces", "Workspace", custom=True),
    Resource("kubeflow.org", "v1beta1", "workspacekinds", "WorkspaceKind", False, True, True),
]
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_KIND = {r.kind: r for r in RESOURCES}

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
#: the only field selectors a custom resource supports (without declared selectableFields)
CUSTOM_FIELDS = ("metadata.name", "metadata.namespace")
#: the field selectors kube-apiserver supports on these built-in kinds
#: (pkg/registry/core/{pod,node,event}/strategy.go ``ToSelectableFields``)
BUILTIN_FIELDS = {
    "Pod": (
        *CUSTOM_FIELDS,
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "Node": ("metadata.name", "spec.unschedulable"),
    "Event": (
        *CUSTOM_FIELDS,
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def not_found(res: Resource, name: str) -> ApiError:
    what = f"{res.plural}.{res.group}" if res.group else res.plural
    return ApiError(404, "NotFound", f'{what} "{name}" not found')


# -- selectors -----------------------------------------------------------------


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def match_labels(selector: str | None, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    for req in _split_selector(selector):
        m = re.match(r"^([^\s!=]+)\s+(in|notin)\s+\((.*)\)$", req)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            ok = labels.get(key) in values
            if (op == "in") != ok:
                return False
            continue
        if req.startswith("!"):
            if req[1:] in labels:
                return False
            continue
        m = re.match(r"^([^!=]+?)\s*(==|!=|=)\s*(.*)$", req)
        if not m:
            if req not in labels:
                return False
            continue
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            if labels.get(key) == value:
                return False
        elif labels.get(key) != value:
            return False
    return True


def match_selector_obj(selector: dict | None, labels: dict[str, str]) -> bool:
    """A LabelSelector object (matchLabels + matchExpressions)."""
    if not selector:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _dotted(obj: dict, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def match_fields(selector: str | None, obj: dict) -> bool:
    if not selector:
        return True
    for req in _split_selector(selector):
        m = re.match(r"^([^!=]+?)\s*(==|!=|=)\s*(.*)$", req)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector {req!r}")
        value = _dotted(obj, m.group(1))
        value = "" if value is None else str(value)
        if (m.group(2) == "!=") == (value == m.group(3)):
            return False
    return True


def field_selector_name(selector: str | None) -> str | None:
    for req in _split_selector(selector or ""):
        m = re.match(r"^metadata\.name\s*==?\s*(.+)$", req)
        if m:
            return m.group(1)
    return None


# -- patches ---------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str], create: bool = False):
    cur = doc
    for part in parts:
        if isinstance(cur, list):
            cur = cur[int(part)]
        elif isinstance(cur, dict):
            if part not in cur:
                if not create:
                    raise KeyError(part)
                cur[part] = {}
            cur = cur[part]
        else:
            raise KeyError(part)
    return cur


def json_patch(doc: Any, ops: list[dict]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        kind = op.get("op")
        parts = _pointer(op.get("path", ""))
        try:
            if kind == "test":
                if _resolve(doc, parts) != op.get("value"):
                    raise ApiError(
                        422,
                        "Invalid",
                        f"the server rejected our request due to an error in our request: test failed for {op.get('path')}",
                    )
                continue
            if kind in ("copy", "move"):
                source = _pointer(op.get("from", ""))
                value = copy.deepcopy(_resolve(doc, source))
                if kind == "move":
                    parent = _resolve(doc, source[:-1])
                    if isinstance(parent, list):
                        parent.pop(int(source[-1]))
                    else:
                        del parent[source[-1]]
                op = {"op": "add", "path": op["path"], "value": value}
                kind = "add"
            parent = _resolve(doc, parts[:-1])
            last = parts[-1]
            if kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), op.get("value"))
                else:
                    parent[last] = op.get("value")
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = op.get("value")
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = op.get("value")
            elif kind == "remove":
                if isinstance(parent, list):
                    parent.pop(int(last))
                else:
                    del parent[last]
            else:
                raise ApiError(422, "Invalid", f"unknown JSON patch op {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(
                422, "Invalid", f"JSON patch {kind} {op.get('path')}: path not found"
            ) from None
    return doc


# -- RBAC --------------------------------------------------------------------------


def rbac_allows(rules: list[dict], verb: str, group: str, resource: str, name: str | None) -> bool:
    for rule in rules:
        if group not in rule.get("apiGroups", []) and "*" not in rule.get("apiGroups", []):
            continue
        if resource not in rule.get("resources", []) and "*" not in rule.get("resources", []):
            continue
        if verb not in rule.get("verbs", []) and "*" not in rule.get("verbs", []):
            continue
        names = rule.get("resourceNames")
        if names and (name is None or name not in names):
            continue
        return True
    return False


@dataclass
class Request:
    principal: str
    verb: str
    group: str
    resource: str  # plural, or "plural/subresource"
    namespace: str | None
    name: str | None
    code: int = 0
    content_type: str = ""
    time: float = field(default_factory=time.time)


# -- the store -------------------------------------------------------------------------


class Store:
    """Objects, resourceVersions and the watch log.  Thread-safe."""

    def __init__(self):
        self.cond = threading.Condition(threading.RLock())
        self.rv = 100
        self.objects: dict[tuple[str, str | None, str], dict] = {}  # (plural-key, ns, name)
        self.log: list[tuple[int, str, str, str | None, dict]] = []  # (rv, type, key, ns, obj)
        self.listeners: list[Any] = []  # called (type, resource, obj) after each change

    @staticmethod
    def key(res: Resource) -> str:
        return f"{res.group}/{res.plural}"

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, type_: str, res: Resource, obj: dict) -> None:
        self.log.append(
            (self.rv, type_, self.key(res), obj["metadata"].get("namespace"), copy.deepcopy(obj))
        )
        self.cond.notify_all()
        for listener in list(self.listeners):
            listener(type_, res, obj)

    def get(self, res: Resource, ns: str | None, name: str) -> dict:
        with self.cond:
            obj = self.objects.get((self.key(res), ns if res.namespaced else None, name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def find(self, res: Resource, ns: str | None, name: str) -> dict | None:
        try:
            return self.get(res, ns, name)
        except ApiError:
            return None

    def list(
        self, res: Resource, ns: str | None, label_selector=None, field_selector=None
    ) -> list[dict]:
        allowed = CUSTOM_FIELDS if res.custom else BUILTIN_FIELDS.get(res.kind)
        if allowed and field_selector:
            for req in _split_selector(field_selector):
                fieldname = re.split(r"\s*(?:==|!=|=)", req, maxsplit=1)[0].strip()
                if fieldname not in allowed:
                    raise ApiError(400, "BadRequest", f'field label not supported: "{fieldname}"')
        with self.cond:
            out = []
            for (key, ons, _name), obj in sorted(self.objects.items()):
                if key != self.key(res):
                    continue
                if res.namespaced and ns is not None and ons != ns:
                    continue
                if not match_labels(label_selector, (obj["metadata"].get("labels") or {})):
                    continue
                if not match_fields(field_selector, obj):
                    continue
                out.append(copy.deepcopy(obj))
            return out

    def create(self, res: Resource, ns: str | None, obj: dict) -> dict:
        with self.cond:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name or not NAME_RE.match(name) or len(name) > 253:
                raise ApiError(
                    422, "Invalid", f'{res.kind} "{name}" is invalid: metadata.name: Invalid value'
                )
            validate_labels(res, obj)
            ns = ns if res.namespaced else None
            k = (self.key(res), ns, name)
            if k in self.objects:
                what = f"{res.plural}.{res.group}" if res.group else res.plural
                raise ApiError(409, "AlreadyExists", f'{what} "{name}" already exists')
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            if res.kind == "Pod":
                obj.setdefault("status", {"phase": "Pending", "conditions": []})
            if ns:
                meta["namespace"] = ns
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_iso()
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            meta["resourceVersion"] = self._bump()
            self.objects[k] = obj
            self._emit("ADDED", res, obj)
            return copy.deepcopy(obj)

    def replace(
        self, res: Resource, ns: str | None, name: str, obj: dict, *, check_rv: bool = True
    ) -> dict:
        """Update; a stale ``metadata.resourceVersion`` in ``obj`` is a 409."""
        with self.cond:
            ns = ns if res.namespaced else None
            k = (self.key(res), ns, name)
            old = self.objects.get(k)
            if old is None:
                raise not_found(res, name)
            obj = copy.deepcopy(obj)
            validate_labels(res, obj)
            meta = obj.setdefault("metadata", {})
            sent = meta.get("resourceVersion")
            if check_rv and sent and sent != old["metadata"]["resourceVersion"]:
                what = f"{res.plural}.{res.group}" if res.group else res.plural
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                )
            for immutable in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp"):
                if immutable in old["metadata"]:
                    meta[immutable] = old["metadata"][immutable]
                else:
                    meta.pop(immutable, None)
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            if obj.get("spec") != old.get("spec"):
                meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
            else:
                meta["generation"] = old["metadata"].get("generation", 1)
            if obj == old:
                return copy.deepcopy(old)
            meta["resourceVersion"] = self._bump()
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                del self.objects[k]
                self._emit("DELETED", res, obj)
                return copy.deepcopy(obj)
            self.objects[k] = obj
            self._emit("MODIFIED", res, obj)
            return copy.deepcopy(obj)

    def mutate(self, res: Resource, ns: str | None, name: str, fn) -> dict | None:
        """Controller-side read-modify-write (no conflict check); None if gone."""
        with self.cond:
            obj = self.find(res, ns, name)
            if obj is None:
                return None
            fn(obj)
            obj["metadata"].pop("resourceVersion", None)
            return self.replace(res, ns, name, obj, check_rv=False)

    def delete(self, res: Resource, ns: str | None, name: str, *, graceful: bool = False) -> dict:
        with self.cond:
            ns = ns if res.namespaced else None
            k = (self.key(res), ns, name)
            obj = self.objects.get(k)
            if obj is None:
                raise not_found(res, name)
            if obj["metadata"].get("finalizers") or graceful:
                if not obj["metadata"].get("deletionTimestamp"):
                    obj["metadata"]["deletionTimestamp"] = now_iso()
                    obj["metadata"]["resourceVersion"] = self._bump()
                    self._emit("MODIFIED", res, obj)
                return copy.deepcopy(obj)
            del self.objects[k]
            obj["metadata"]["resourceVersion"] = self._bump()
            self._emit("DELETED", res, obj)
            return copy.deepcopy(obj)

    def remove(self, res: Resource, ns: str | None, name: str) -> None:
        """Finalizers done / kubelet confirmed: the object goes."""
        with self.cond:
            k = (self.key(res), ns if res.namespaced else None, name)
            obj = self.objects.pop(k, None)
            if obj is not None:
                obj["metadata"]["resourceVersion"] = self._bump()
                self._emit("DELETED", res, obj)


# -- HTTP -----------------------------------------------------------------------------


class KubeEmulator:
    """The API server.  ``start()`` binds 127.0.0.1 on a random port."""

    def __init__(self):
        self.store = Store()
        self.requests: list[Request] = []
        self.tokens: dict[str, str] = {}  # bearer token -> principal
        self.rbac: dict[str, list[dict]] = {}  # principal -> Role rules (absent: unrestricted)
        self.admission: list[
            Any
        ] = []  # fn(verb, res, old, new, principal) -> new (may raise ApiError)
        self.controller_principals = {"system:controller"}
        self.response_delay = (
            None  # fn(Request) -> seconds to hold a response (after it was computed)
        )
        self.bound: dict[str, tuple[str, str]] = {}  # token -> (namespace, pod uid)
        self.frozen: set[str] = set()  # uids of pods whose processes are frozen
        self.faults: list[list] = []  # [remaining, code, predicate]
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self._req_lock = threading.Lock()

    # lifecycle
    def start(self) -> KubeEmulator:
        emu = self

        class Handler(_Handler):
            emulator = emu

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="k8s-emulator",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        with self.store.cond:
            self.store.cond.notify_all()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def add_token(self, token: str, principal: str, rules: list[dict] | None = None) -> None:
        self.tokens[token] = principal
        if rules is not None:
            self.rbac[principal] = rules

    def bind_token(self, token: str, principal: str, namespace: str, pod_uid: str) -> None:
        """A token of ``principal`` bound to one pod (a projected ServiceAccount token)."""
        self.tokens[token] = principal
        self.bound[token] = (namespace, pod_uid)

    def rebind(self, old_uid: str, new_uid: str) -> None:
        """The process of ``old_uid`` now runs in ``new_uid`` (restored): the kubelet
        mounted a fresh token there, which the client reads."""
        for token, (ns, uid) in list(self.bound.items()):
            if uid == old_uid:
                self.bound[token] = (ns, new_uid)

    def freeze(self, uid: str) -> None:
        with self.store.cond:
            self.frozen.add(uid)

    def thaw(self, uid: str) -> None:
        with self.store.cond:
            self.frozen.discard(uid)
            self.store.cond.notify_all()

    def fail_next(self, count: int, code: int = 503, match=None) -> None:
        """Answer the next ``count`` requests for which ``match(Request)`` is true with ``code``."""
        with self._req_lock:
            self.faults.append([count, code, match or (lambda req: True)])

    def _fault(self, req: Request) -> ApiError | None:
        with self._req_lock:
            for fault in self.faults:
                if fault[0] > 0 and fault[2](req):
                    fault[0] -= 1
                    reason = {
                        503: "ServiceUnavailable",
                        500: "InternalError",
                        429: "TooManyRequests",
                    }
                    return ApiError(fault[1], reason.get(fault[1], "Error"), "injected fault")
        return None

    def _pod_alive(self, ns: str, uid: str) -> bool:
        for pod in self.store.list(BY_KIND["Pod"], ns):
            if pod["metadata"]["uid"] == uid:
                return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        return False

    def wait_while_frozen(self, token: str) -> bool:
        """Hold a request of a frozen process; ``False``: its pod is gone (token invalid)."""
        ns = self.bound[token][0]
        with self.store.cond:
            while (
                self.bound[token][1] in self.frozen
                and self._pod_alive(ns, self.bound[token][1])
                and not self.stopping.is_set()
            ):
                self.store.cond.wait(timeout=0.1)
            return self._pod_alive(ns, self.bound[token][1])

    def rules_for(self, principal: str) -> list[dict] | None:
        """Role rules of a principal; a ServiceAccount's come from stored RoleBindings."""
        if principal in self.rbac:
            return self.rbac[principal]
        if not principal.startswith("system:serviceaccount:"):
            return None
        _, _, ns, name = principal.split(":", 3)
        groups = {"system:serviceaccounts", f"system:serviceaccounts:{ns}"}

        def names_it(subject: dict) -> bool:
            if subject.get("kind") == "Group":
                return subject.get("name") in groups
            return (
                subject.get("kind") == "ServiceAccount"
                and subject.get("name") == name
                and (subject.get("namespace") or ns) == ns
            )

        rules: list[dict] = []
        bindings = [
            *self.store.list(BY_KIND["RoleBinding"], ns),
            *self.store.list(BY_KIND["ClusterRoleBinding"], None),  # its groups' too
        ]
        for binding in bindings:
            if not any(names_it(s) for s in binding.get("subjects") or []):
                continue
            ref = binding.get("roleRef") or {}
            kind = "ClusterRole" if ref.get("kind") == "ClusterRole" else "Role"
            role = self.store.find(
                BY_KIND[kind], ns if kind == "Role" else None, ref.get("name", "")
            )
            rules += (role or {}).get("rules") or []
        return rules

    def record(self, req: Request) -> None:
        with self._req_lock:
            self.requests.append(req)

    def requests_by(self, principal: str) -> list[Request]:
        with self._req_lock:
            return [r for r in self.requests if r.principal == principal]

    # direct access for tests and controllers (bypasses HTTP)
    def resource(self, kind: str) -> Resource:
        return BY_KIND[kind]

    def get(self, kind: str, ns: str | None, name: str) -> dict:
        return self.store.get(BY_KIND[kind], ns, name)

    def find(self, kind: str, ns: str | None, name: str) -> dict | None:
        return self.store.find(BY_KIND[kind], ns, name)

    def list(
        self, kind: str, ns: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        return self.store.list(BY_KIND[kind], ns, label_selector)

    def create(self, kind: str, ns: str | None, obj: dict) -> dict:
        return self.store.create(BY_KIND[kind], ns, obj)

    def mutate(self, kind: str, ns: str | None, name: str, fn) -> dict | None:
        return self.store.mutate(BY_KIND[kind], ns, name, fn)

    def backdate(self, kind: str, ns: str | None, name: str, seconds: float) -> None:
        """Make an object older (creationTimestamp is immutable through the API)."""
        res = BY_KIND[kind]
        with self.store.cond:
            obj = self.store.objects[(self.store.key(res), ns if res.namespaced else None, name)]
            obj["metadata"]["creationTimestamp"] = now_iso(CLOCK.time() - seconds)
            (obj.get("status") or {}).pop("lastAccessTime", None)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    emulator: KubeEmulator

    def log_message(self, *args):  # quiet
        pass

    # -- dispatch --
    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")

    def _parse(self):
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [p for p in url.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = BY_PATH.get((group, version, rest[0]))
        if res is None:
            # Authorization runs before routing: the caller learns "forbidden" first.
            res = Resource(group, version, rest[0], "", status_subresource=False)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return res, ns, name, sub, query

    def _route(self, res: Resource, ns: str | None, sub: str | None) -> None:
        """404 for what the server does not serve (after authorization)."""
        missing = ApiError(404, "NotFound", "the server could not find the requested resource")
        if not res.kind or (res.namespaced and ns is None and self.command != "GET"):
            raise missing
        if sub not in (None, "status", "scale") or (sub == "scale" and res.kind != "StatefulSet"):
            raise missing

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "invalid JSON body") from None

    def _send(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _token(self) -> str:
        auth = self.headers.get("Authorization") or ""
        return auth[7:] if auth.startswith("Bearer ") else ""

    def _principal(self) -> str:
        token = self._token()
        return self.emulator.tokens.get(token, "anonymous" if not token else "unknown")

    def _handle(self, method: str) -> None:
        emu = self.emulator
        principal = self._principal()
        req = Request(
            principal, "?", "", "", None, None, content_type=self.headers.get("Content-Type", "")
        )
        body = None
        try:
            if method in ("POST", "PUT", "PATCH"):
                body = self._body()
            res, ns, name, sub, query = self._parse()
            verb = {
                "GET": "get"
                if name
                else ("watch" if query.get("watch") in ("true", "1") else "list"),
                "POST": "create",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection",
            }[method]
            req.verb, req.group, req.namespace, req.name = verb, res.group, ns, name
            req.resource = res.plural + (f"/{sub}" if sub else "")
            if principal == "unknown":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            token = self._token()
            if token in emu.bound and not emu.wait_while_frozen(token):
                # the pod the token was bound to is gone: its process is dead
                raise ApiError(401, "Unauthorized", "Unauthorized: the bound pod no longer exists")
            rules = emu.rules_for(principal)
            if rules is not None:
                check_name = name or (
                    field_selector_name(query.get("fieldSelector"))
                    if verb in ("list", "watch")
                    else None
                )
                if not rbac_allows(rules, verb, res.group, req.resource, check_name):
                    raise ApiError(
                        403,
                        "Forbidden",
                        f'{res.plural}{"." + res.group if res.group else ""} "{name or ""}" is forbidden: '
                        f'User "{principal}" cannot {verb} resource "{req.resource}" in API group '
                        f'"{res.group}" in the namespace "{ns}"',
                    )
            self._route(res, ns, sub)
            fault = emu._fault(req)
            if fault is not None:
                raise fault
            if verb == "watch":
                req.code = 200
                emu.record(req)
                self._watch(res, ns, query)
                return
            code, out = self._dispatch(verb, res, ns, name, sub, query, body, principal)
            req.code = code
            emu.record(req)
            if emu.response_delay is not None:
                time.sleep(emu.response_delay(req) or 0)
            self._send(code, out)
        except ApiError as e:
            req.code = e.code
            emu.record(req)
            self._send(e.code, e.status())

    def _dispatch(self, verb, res, ns, name, sub, query, body, principal):
        store = self.emulator.store
        if verb == "get":
            obj = store.get(res, ns, name)
            return 200, scale_of(obj) if sub == "scale" else obj
        if verb == "list":
            items = store.list(res, ns, query.get("labelSelector"), query.get("fieldSelector"))
            return 200, {
                "apiVersion": res.api_version,
                "kind": res.kind + "List",
                "metadata": {"resourceVersion": str(store.rv)},
                "items": items,
            }
        if verb == "create":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "a JSON object is required")
            body = self._admit("create", res, None, body, principal)
            validate(res, body)
            name = (body.get("metadata") or {}).get("name", "")
            self._admit_policies("CREATE", res, ns, name, None, None, body, principal)
            return 201, store.create(res, ns, body)
        if verb in ("update", "patch"):
            with store.cond:
                old = store.get(res, ns, name)
                current = scale_of(old) if sub == "scale" else old
                if verb == "update":
                    new = body
                else:
                    ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                    if ctype == "application/json-patch+json":
                        if not isinstance(body, list):
                            raise ApiError(400, "BadRequest", "a JSON patch must be a list")
                        new = json_patch(current, body)
                    elif ctype == "application/merge-patch+json" or (
                        ctype == "application/strategic-merge-patch+json" and not res.custom
                    ):
                        if not isinstance(body, dict):
                            raise ApiError(400, "BadRequest", "a merge patch must be an object")
                        new = merge_patch(current, body)
                    else:
                        raise ApiError(
                            415,
                            "UnsupportedMediaType",
                            "the body of the request was in an unknown format - accepted media "
                            "types include: application/json-patch+json, application/merge-patch+json"
                            + ("" if res.custom else ", application/strategic-merge-patch+json")
                            + f" (got {ctype})",
                        )
                if not isinstance(new, dict):
                    raise ApiError(400, "BadRequest", "a JSON object is required")
                sent_rv = (new.get("metadata") or {}).get("resourceVersion")
                if sub == "scale":
                    replicas = (new.get("spec") or {}).get("replicas")
                    if not isinstance(replicas, int) or replicas < 0:
                        raise ApiError(
                            422,
                            "Invalid",
                            f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value',
                        )
                    full = copy.deepcopy(old)
                    full["spec"]["replicas"] = replicas
                    full["metadata"]["resourceVersion"] = (
                        sent_rv or old["metadata"]["resourceVersion"]
                    )
                    new = full
                elif sub == "status":
                    full = copy.deepcopy(old)
                    full["status"] = new.get("status")
                    full["metadata"]["resourceVersion"] = (
                        sent_rv or old["metadata"]["resourceVersion"]
                    )
                    new = full
                elif res.status_subresource:
                    new["status"] = copy.deepcopy(old.get("status"))
                if sent_rv is None:
                    new.setdefault("metadata", {})["resourceVersion"] = old["metadata"][
                        "resourceVersion"
                    ]
                new = self._admit(verb, res, old, new, principal)
                validate(res, new)
                self._admit_policies("UPDATE", res, ns, name, sub, old, new, principal)
                out = store.replace(res, ns, name, new)
                return 200, scale_of(out) if sub == "scale" else out
        if verb == "delete":
            obj = store.delete(res, ns, name, graceful=(res.kind == "Pod"))
            return 200, obj
        raise ApiError(405, "MethodNotAllowed", f"{verb} is not supported here")

    def _admit(self, verb, res, old, new, principal):
        for fn in self.emulator.admission:
            new = fn(verb, res, old, new, principal) or new
        return new

    def _admit_policies(self, operation, res, ns, name, sub, old, new, principal) -> None:
        """The installed ValidatingAdmissionPolicies, after validation as in kube-apiserver.

        For the scale subresource the policies see Scale objects, as there."""
        store = self.emulator.store
        bindings = store.list(BY_KIND["ValidatingAdmissionPolicyBinding"], None)
        if not bindings:
            return
        policies = store.list(BY_KIND["ValidatingAdmissionPolicy"], None)
        if sub == "scale":
            old, new = scale_of(old), scale_of(new)
        request = AdmissionRequest(
            operation, res.group, res.version, res.plural, sub or "", ns, name, principal, new, old
        )
        try:
            denial = admit(policies, bindings, request)
        except NotModelled as e:  # a test installed a policy the emulator cannot evaluate
            raise ApiError(500, "InternalError", f"emulator: not modelled: {e}") from e
        if denial is not None:
            raise ApiError(denial.code, denial.reason, denial.message)

    def _watch(self, res: Resource, ns: str | None, query: dict) -> None:
        store = self.emulator.store
        timeout = float(query.get("timeoutSeconds") or 30)
        deadline = time.monotonic() + min(timeout, 60)
        since = query.get("resourceVersion") or "0"
        labels, fields = query.get("labelSelector"), query.get("fieldSelector")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def send(type_: str, obj: dict) -> None:
            chunk(json.dumps({"type": type_, "object": obj}).encode() + b"\n")

        key = store.key(res)

        def wanted(obj, ons):
            if res.namespaced and ns is not None and ons != ns:
                return False
            return match_labels(labels, obj["metadata"].get("labels") or {}) and match_fields(
                fields, obj
            )

        try:
            with store.cond:
                if since in ("0", ""):
                    initial = store.list(res, ns, labels, fields)
                    cursor = len(store.log)
                else:
                    initial = []
                    cursor = next(
                        (i for i, e in enumerate(store.log) if e[0] > int(since)), len(store.log)
                    )
            for obj in initial:
                send("ADDED", obj)
            while time.monotonic() < deadline and not self.emulator.stopping.is_set():
                with store.cond:
                    if cursor >= len(store.log):
                        store.cond.wait(timeout=0.1)
                    batch = store.log[cursor:]
                    cursor = len(store.log)
                for _rv, type_, k, ons, obj in batch:
                    if k == key and wanted(obj, ons):
                        send(type_, obj)
            chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


def scale_of(sts: dict) -> dict:
    meta = sts["metadata"]
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": (sts.get("spec") or {}).get("replicas", 1)},
        "status": {
            "replicas": (sts.get("status") or {}).get("replicas", 0),
            "selector": ",".join(
                f"{k}={v}"
                for k, v in (
                    ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                ).items()
            ),
        },
    }


def validate(res: Resource, obj: dict) -> None:
    """Schema checks the real CRDs/types enforce, enough to produce 422s."""
    spec = obj.get("spec") or {}

    def invalid(msg):
        name = (obj.get("metadata") or {}).get("name")
        return ApiError(
            422, "Invalid", f'{res.kind}.{res.group or "core"} "{name}" is invalid: {msg}'
        )

    if res.kind == "PodSnapshotManualTrigger":
        if not isinstance(spec.get("targetPod"), str) or not spec.get("targetPod"):
            raise invalid("spec.targetPod: Required value")
    elif res.kind == "PodSnapshotPolicy":
        for key in ("selector", "storageConfigName", "triggerConfig"):
            if not spec.get(key):
                raise invalid(f"spec.{key}: Required value")
        if spec["triggerConfig"].get("type") not in ("workload", "manual"):
            raise invalid("spec.triggerConfig.type: Unsupported value")
    elif res.kind == "Workspace":
        if "paused" in spec and not isinstance(spec["paused"], bool):
            raise invalid("spec.paused: Invalid value: must be a boolean")
    elif res.kind == "StatefulSet":
        r = spec.get("replicas", 1)
        if not isinstance(r, int) or r < 0:
            raise invalid("spec.replicas: Invalid value")
    for key, value in ((obj.get("metadata") or {}).get("annotations") or {}).items():
        if not isinstance(value, str):
            raise invalid(f"metadata.annotations[{key}]: must be a string")


def validate_labels(res: Resource, obj: dict) -> None:
    """Label keys (optional DNS prefix + name <= 63) and values (<= 63, charset)."""
    meta = obj.get("metadata") or {}
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, name = key.rpartition("/")
        bad = None
        if not isinstance(value, str):
            bad = f"metadata.labels: Invalid value: {value!r}: must be a string"
        elif len(value) > 63:
            bad = f'metadata.labels: Invalid value: "{value}": must be no more than 63 characters'
        elif not LABEL_VALUE_RE.match(value):
            bad = (
                f'metadata.labels: Invalid value: "{value}": a valid label must be an empty string '
                "or consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character"
            )
        elif len(name) > 63 or not LABEL_NAME_RE.match(name) or len(prefix) > 253:
            bad = f'metadata.labels: Invalid value: "{key}": name part must be valid'
        if bad:
            raise ApiError(
                422,
                "Invalid",
                f'{res.kind}.{res.group or "core"} "{meta.get("name")}" is invalid: {bad}',
            )
