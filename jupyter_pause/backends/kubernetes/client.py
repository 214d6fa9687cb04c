"""A small, dict-in / dict-out layer over the official ``kubernetes`` client.

Every Kubernetes request jupyter-pause makes goes through :class:`KubeClient`,
one method per (verb, resource).  That keeps the verbs in one place, which is
what the least-privilege RBAC manifests in ``deploy/rbac/`` are checked
against.  The backends, on the server's event loop, use it through
:class:`AsyncKubeClient`: the same requests, each in a worker thread, with the
objects whose fields they read decoded into the dataclasses of :mod:`.objects`.

* Configuration: in a pod (``KUBERNETES_SERVICE_HOST`` set and a service
  account token mounted) the in-cluster config is used; otherwise the
  kubeconfig (``KUBECONFIG`` or ``~/.kube/config``, or an explicit path).
* Identity: the pod's own name and namespace come from the downward API
  (``POD_NAME``, ``POD_NAMESPACE``), falling back to ``HOSTNAME`` and the
  service account's namespace file.
* ``kubernetes`` is imported lazily, so that the rest of jupyter-pause works
  without the extra; a clear error says how to install it.
* Connections are not trusted to survive: a pod restored from a snapshot has
  all its external connections closed, so :meth:`KubeClient.reset` drops the
  pool and requests retry on connection errors, 429 and 5xx.
* How long to retry is the caller's decision, not a fixed count: a zonal
  control plane is unreachable for minutes during an upgrade, and giving up
  after a few seconds would turn that into a failed pause.  Inside
  :func:`retrying_until` every request retries transient failures, with
  exponential backoff, until that deadline; outside it, ``retries`` times.
  Inside it a 401 also reloads the credentials and retries: a pod restored
  from a snapshot wakes up with the token of the pod it was taken from.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..base import BackendError
from .objects import Pod, PodSnapshot, SnapshotTrigger, StatefulSet, StateObject

SNAPSHOT_GROUP = "podsnapshot.gke.io"
SNAPSHOT_VERSION = "v1"
WORKSPACE_GROUP = "kubeflow.org"
WORKSPACE_VERSION = "v1beta1"

SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

#: the monotonic deadline of the operation in progress (see :func:`retrying_until`);
#: ``asyncio.to_thread`` copies the context, so it reaches the client's thread.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "jupyter_pause_kube_deadline", default=None
)
#: the longest wait between two retries
MAX_BACKOFF = 10.0


@contextlib.contextmanager
def retrying_until(deadline: float) -> Iterator[None]:
    """Retry transient API failures until ``deadline`` (``time.monotonic()``) in this block."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


INSTALL_HINT = (
    "the Kubernetes backends need the kubernetes client: pip install 'jupyter-pause[kubernetes]'"
)


class KubeError(BackendError):
    """A Kubernetes API error with its HTTP status and reason."""

    def __init__(self, message: str, status: int = 0, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: AlreadyExists on create, or a stale resourceVersion (somebody else won)."""


class Forbidden(KubeError):
    """403.  The API server authorizes before it routes, so a resource type the
    caller may not see (or that is not installed) answers 403, not 404."""


class Invalid(KubeError):
    """422: the object was rejected (validation or admission)."""


def import_kubernetes():
    """Import the ``kubernetes`` package or explain how to get it."""
    try:
        import kubernetes  # noqa: F401
        import kubernetes.client
        import kubernetes.config
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BackendError(INSTALL_HINT) from e
    return kubernetes


def in_cluster(env: dict[str, str] | None = None) -> bool:
    """Whether in-cluster configuration is available (running in a pod)."""
    env = os.environ if env is None else env
    return bool(env.get("KUBERNETES_SERVICE_HOST")) and (SERVICEACCOUNT_DIR / "token").exists()


def own_pod(env: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """``(namespace, pod name)`` of the pod this process runs in, from the downward API.

    Either may be ``None`` when unknown (not in a pod).  The pod name falls
    back to ``HOSTNAME`` only in a pod: a StatefulSet pod's hostname is its name.
    """
    env = os.environ if env is None else env
    name = env.get("POD_NAME") or None
    namespace = env.get("POD_NAMESPACE") or None
    if namespace is None:
        ns_file = SERVICEACCOUNT_DIR / "namespace"
        try:
            namespace = ns_file.read_text().strip() or None
        except OSError:
            namespace = None
    if name is None and in_cluster(env):
        name = env.get("HOSTNAME") or None
    return namespace, name


def kubeconfig_namespace(kubeconfig: str | None = None, context: str | None = None) -> str | None:
    """The namespace of the kubeconfig's (current) context, if any."""
    k8s = import_kubernetes()
    try:
        contexts, active = k8s.config.list_kube_config_contexts(
            config_file=kubeconfig or os.environ.get("KUBECONFIG") or None
        )
    except Exception:
        return None
    if context:
        active = next((c for c in contexts if c.get("name") == context), active)
    return ((active or {}).get("context") or {}).get("namespace")


def _status_message(exc: Any) -> tuple[str, str]:
    """(message, reason) from an ApiException's Status body."""
    body = getattr(exc, "body", None) or b""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        status = json.loads(body)
        return status.get("message") or str(body), status.get("reason") or ""
    except (ValueError, AttributeError):
        return str(body or getattr(exc, "reason", "") or exc), getattr(exc, "reason", "") or ""


class KubeClient:
    """The requests jupyter-pause makes, as plain JSON dicts.

    Synchronous (the official client is); async callers use ``asyncio.to_thread``.
    """

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        request_timeout: float = 30.0,
        retries: int = 4,
        retry_backoff: float = 0.5,
        use_in_cluster: bool | None = None,
    ):
        self.kubeconfig = kubeconfig or None
        self.context = context or None
        self.request_timeout = request_timeout
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.use_in_cluster = in_cluster() if use_in_cluster is None else use_in_cluster
        if namespace is None:
            namespace = own_pod()[0] if self.use_in_cluster else None
            if namespace is None and not self.use_in_cluster:
                namespace = kubeconfig_namespace(self.kubeconfig, self.context)
        self.namespace = namespace or "default"
        self._api_client = None

    # -- plumbing ---------------------------------------------------------

    @property
    def api_client(self):
        if self._api_client is None:
            k8s = import_kubernetes()
            if self.use_in_cluster:
                cfg = k8s.client.Configuration()
                k8s.config.load_incluster_config(client_configuration=cfg)
                self._api_client = k8s.client.ApiClient(cfg)
            else:
                try:
                    self._api_client = k8s.config.new_client_from_config(
                        config_file=self.kubeconfig or os.environ.get("KUBECONFIG") or None,
                        context=self.context,
                    )
                except Exception as e:
                    raise BackendError(
                        f"cannot load a kubeconfig ({self.kubeconfig or 'KUBECONFIG or ~/.kube/config'}): {e}"
                    ) from e
            self._api_client.user_agent = "jupyter-pause"
        return self._api_client

    def reset(self) -> None:
        """Drop pooled connections (after a snapshot restore they are dead)."""
        if self._api_client is not None:
            with contextlib.suppress(Exception):
                self._api_client.close()
        self._api_client = None

    def close(self) -> None:
        self.reset()

    @property
    def core(self):
        return import_kubernetes().client.CoreV1Api(self.api_client)

    @property
    def apps(self):
        return import_kubernetes().client.AppsV1Api(self.api_client)

    @property
    def custom(self):
        return import_kubernetes().client.CustomObjectsApi(self.api_client)

    def _call(self, fn, *args, raw: bool = True, **kwargs) -> Any:
        """Call an API method, retrying transient failures, mapping errors."""
        k8s = import_kubernetes()
        import urllib3

        kwargs.setdefault("_request_timeout", self.request_timeout)
        if raw:
            kwargs["_preload_content"] = False
        attempt = 0
        while True:
            attempt += 1
            try:
                result = fn(*args, **kwargs)
                if raw:
                    data = result.data
                    return json.loads(data) if data else {}
                return result
            except k8s.client.ApiException as e:
                message, reason = _status_message(e)
                status = e.status or 0
                if (status == 429 or status >= 500) and self._wait_to_retry(attempt):
                    continue
                if status == 401 and _DEADLINE.get() is not None and self._wait_to_retry(attempt):
                    # A pod restored from a snapshot holds the token of the pod it
                    # was taken from; the kubelet mounts a new one: read it again.
                    self.reset()
                    fn = self._rebind(fn)
                    continue
                cls = {404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid}.get(
                    status, KubeError
                )
                raise cls(f"{status} {reason or e.reason}: {message}", status, reason) from None
            except (urllib3.exceptions.HTTPError, OSError) as e:
                # Connections cut by a snapshot restore, API server restarts.
                if not self._wait_to_retry(attempt):
                    raise KubeError(f"cannot reach the Kubernetes API: {e}") from e
                self.reset()
                fn = self._rebind(fn)

    def _wait_to_retry(self, attempt: int) -> bool:
        """Sleep before retry ``attempt + 1``; ``False`` when it is time to give up."""
        wait = min(MAX_BACKOFF, self.retry_backoff * 2 ** (attempt - 1))
        deadline = _DEADLINE.get()
        if deadline is None:
            if attempt > self.retries:
                return False
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            wait = min(wait, left)
        time.sleep(wait)
        return True

    def _rebind(self, fn):
        """The same API method on a fresh ApiClient (after :meth:`reset`)."""
        owner = getattr(fn, "__self__", None)
        if owner is None:
            return fn
        fresh = type(owner)(self.api_client)
        return getattr(fresh, fn.__name__)

    # -- core/v1 ----------------------------------------------------------

    def get_pod(self, name: str) -> dict:
        return self._call(self.core.read_namespaced_pod, name, self.namespace)

    def list_pods(self, label_selector: str | None = None) -> list[dict]:
        kw = {"label_selector": label_selector} if label_selector else {}
        return self._call(self.core.list_namespaced_pod, self.namespace, **kw).get("items", [])

    def delete_pod(self, name: str) -> None:
        """``jupyter pause abort``: a pod frozen by a hung checkpoint; its StatefulSet recreates it."""
        self._call(self.core.delete_namespaced_pod, name, self.namespace)

    def list_events(self, involved_name: str, kind: str | None = None) -> list[dict]:
        selector = f"involvedObject.name={involved_name}"
        if kind:
            selector += f",involvedObject.kind={kind}"
        return self._call(
            self.core.list_namespaced_event, self.namespace, field_selector=selector
        ).get("items", [])

    def get_node(self, name: str) -> dict:
        """A node (cluster-scoped): the node follower's ClusterRole
        (deploy/rbac/node-follower.yaml), and a server's own node, for its termination
        notice (deploy/gke-pod-snapshot/node-notice.yaml)."""
        return self._call(self.core.read_node, name)

    def list_pods_on_node(self, node: str) -> list[dict]:
        """Every pod bound to ``node``, in any namespace (field selector ``spec.nodeName``)."""
        return self._call(
            self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
        ).get("items", [])

    def get_configmap(self, name: str) -> dict:
        return self._call(self.core.read_namespaced_config_map, name, self.namespace)

    def list_configmaps(self, label_selector: str | None = None) -> list[dict]:
        kw = {"label_selector": label_selector} if label_selector else {}
        return self._call(self.core.list_namespaced_config_map, self.namespace, **kw).get(
            "items", []
        )

    def patch_configmap(self, name: str, patch: dict) -> dict:
        """Merge-patch; include ``metadata.resourceVersion`` for compare-and-swap."""
        return self._call(
            self.core.patch_namespaced_config_map,
            name,
            self.namespace,
            patch,
            _content_type=MERGE_PATCH,
        )

    # -- apps/v1 ----------------------------------------------------------

    def get_statefulset(self, name: str) -> dict:
        return self._call(self.apps.read_namespaced_stateful_set, name, self.namespace)

    def list_statefulsets(self, label_selector: str | None = None) -> list[dict]:
        kw = {"label_selector": label_selector} if label_selector else {}
        return self._call(self.apps.list_namespaced_stateful_set, self.namespace, **kw).get(
            "items", []
        )

    def scale_statefulset(self, name: str, replicas: int) -> dict:
        return self._call(
            self.apps.patch_namespaced_stateful_set_scale,
            name,
            self.namespace,
            {"spec": {"replicas": int(replicas)}},
            _content_type=MERGE_PATCH,
        )

    # -- kubeflow.org/v1beta1 Workspaces ---------------------------------

    def _custom_args(self, group: str, version: str, plural: str) -> tuple:
        return (group, version, self.namespace, plural)

    def get_workspace(self, name: str) -> dict:
        return self._call(
            self.custom.get_namespaced_custom_object,
            *self._custom_args(WORKSPACE_GROUP, WORKSPACE_VERSION, "workspaces"),
            name,
            raw=False,
        )

    def list_workspaces(self) -> list[dict]:
        return self._call(
            self.custom.list_namespaced_custom_object,
            *self._custom_args(WORKSPACE_GROUP, WORKSPACE_VERSION, "workspaces"),
            raw=False,
        ).get("items", [])

    def patch_workspace(self, name: str, patch: dict | list) -> dict:
        """Merge patch (a dict) or JSON patch (a list of operations)."""
        return self._call(
            self.custom.patch_namespaced_custom_object,
            *self._custom_args(WORKSPACE_GROUP, WORKSPACE_VERSION, "workspaces"),
            name,
            patch,
            _content_type=JSON_PATCH if isinstance(patch, list) else MERGE_PATCH,
            raw=False,
        )

    # -- podsnapshot.gke.io/v1 --------------------------------------------

    def _snap(self, plural: str) -> tuple:
        return self._custom_args(SNAPSHOT_GROUP, SNAPSHOT_VERSION, plural)

    def create_trigger(self, body: dict) -> dict:
        return self._call(
            self.custom.create_namespaced_custom_object,
            *self._snap("podsnapshotmanualtriggers"),
            body,
            raw=False,
        )

    def get_trigger(self, name: str) -> dict:
        return self._call(
            self.custom.get_namespaced_custom_object,
            *self._snap("podsnapshotmanualtriggers"),
            name,
            raw=False,
        )

    def list_triggers(self, label_selector: str | None = None) -> list[dict]:
        kw = {"label_selector": label_selector} if label_selector else {}
        return self._call(
            self.custom.list_namespaced_custom_object,
            *self._snap("podsnapshotmanualtriggers"),
            raw=False,
            **kw,
        ).get("items", [])

    def delete_trigger(self, name: str) -> None:
        self._call(
            self.custom.delete_namespaced_custom_object,
            *self._snap("podsnapshotmanualtriggers"),
            name,
            raw=False,
        )

    def get_snapshot(self, name: str) -> dict:
        return self._call(
            self.custom.get_namespaced_custom_object,
            *self._snap("podsnapshots"),
            name,
            raw=False,
        )

    def list_snapshots(self, label_selector: str | None = None) -> list[dict]:
        kw = {"label_selector": label_selector} if label_selector else {}
        return self._call(
            self.custom.list_namespaced_custom_object,
            *self._snap("podsnapshots"),
            raw=False,
            **kw,
        ).get("items", [])

    def delete_snapshot(self, name: str) -> None:
        """Deleting a PodSnapshot also deletes its files (through GKE's finalizer)."""
        self._call(
            self.custom.delete_namespaced_custom_object,
            *self._snap("podsnapshots"),
            name,
            raw=False,
        )

    def list_policies(self) -> list[dict]:
        return self._call(
            self.custom.list_namespaced_custom_object,
            *self._snap("podsnapshotpolicies"),
            raw=False,
        ).get("items", [])

    def delete_policy(self, name: str) -> None:
        self._call(
            self.custom.delete_namespaced_custom_object,
            *self._snap("podsnapshotpolicies"),
            name,
            raw=False,
        )


class AsyncKubeClient:
    """The requests the backends make, awaitable and typed.

    Each runs :class:`KubeClient`'s method in a worker thread (the official
    client blocks); ``asyncio.to_thread`` copies the context, so a
    :func:`retrying_until` deadline around the ``await`` applies.
    """

    def __init__(self, client: KubeClient):
        self.client = client

    # -- core/v1 ----------------------------------------------------------

    async def get_pod(self, name: str) -> Pod:
        return Pod.from_obj(await asyncio.to_thread(self.client.get_pod, name))

    async def get_node(self, name: str) -> dict:
        """A node, as the API returns it (:func:`.notice.termination_notice` reads it)."""
        return await asyncio.to_thread(self.client.get_node, name)

    async def list_events(self, involved_name: str, kind: str | None = None) -> list[dict]:
        """Core/v1 events, as the API returns them (:func:`.common.capacity_events` reads them)."""
        return await asyncio.to_thread(self.client.list_events, involved_name, kind)

    async def get_configmap(self, name: str) -> StateObject:
        return StateObject.from_obj(await asyncio.to_thread(self.client.get_configmap, name))

    async def patch_configmap(self, name: str, patch: dict) -> None:
        await asyncio.to_thread(self.client.patch_configmap, name, patch)

    # -- apps/v1 ----------------------------------------------------------

    async def get_statefulset(self, name: str) -> StatefulSet:
        return StatefulSet.from_obj(await asyncio.to_thread(self.client.get_statefulset, name))

    async def scale_statefulset(self, name: str, replicas: int) -> None:
        await asyncio.to_thread(self.client.scale_statefulset, name, replicas)

    # -- kubeflow.org/v1beta1 Workspaces ---------------------------------

    async def get_workspace(self, name: str) -> StateObject:
        return StateObject.from_obj(await asyncio.to_thread(self.client.get_workspace, name))

    async def patch_workspace(self, name: str, patch: dict | list) -> None:
        await asyncio.to_thread(self.client.patch_workspace, name, patch)

    # -- podsnapshot.gke.io/v1 --------------------------------------------

    async def create_trigger(
        self, name: str, *, target_pod: str, owner: StatefulSet, labels: dict[str, str]
    ) -> None:
        """A ``PodSnapshotManualTrigger`` of ``target_pod``, owned (garbage-collected) by ``owner``."""
        body = {
            "apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}",
            "kind": "PodSnapshotManualTrigger",
            "metadata": {
                "name": name,
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "StatefulSet",
                        "name": owner.name,
                        "uid": owner.uid,
                    }
                ],
            },
            "spec": {"targetPod": target_pod},
        }
        await asyncio.to_thread(self.client.create_trigger, body)

    async def get_trigger(self, name: str) -> SnapshotTrigger:
        return SnapshotTrigger.from_obj(await asyncio.to_thread(self.client.get_trigger, name))

    async def delete_trigger(self, name: str) -> None:
        await asyncio.to_thread(self.client.delete_trigger, name)

    async def get_snapshot(self, name: str) -> PodSnapshot:
        return PodSnapshot.from_obj(await asyncio.to_thread(self.client.get_snapshot, name))


def ignore_not_found(fn, *args, **kwargs):
    """Call ``fn``; a 404 returns ``None``."""
    try:
        return fn(*args, **kwargs)
    except NotFound:
        return None
