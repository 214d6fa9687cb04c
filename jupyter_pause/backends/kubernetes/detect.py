"""Pick a Kubernetes backend automatically when the server runs in a pod.

:func:`detect_backend_class` is what ``PauseApp`` calls when its ``backend``
setting is ``"auto"``.  It returns ``None`` (use the local backend) when:

* this process is not in a pod (no ``POD_NAME``, and no in-cluster service
  account), or the ``kubernetes`` client is not installed;
* the pod is neither a Kubeflow Workspace's nor a GKE Sandbox StatefulSet pod.

When the process *is* in a pod but cannot read it (no RBAC -- e.g. the
Workspace's ServiceAccount ``ws-<name>`` was not given the ClusterRole --, no
API), the fallback must not be silent: a "pause" would then only stop
kernels, and the pod and its GPU would never be released.  It returns
:class:`UndetectedBackend`, a local backend whose status says
``local (kubernetes detection failed: …)``.

Otherwise: a pod labelled ``notebooks.kubeflow.org/workspace-name`` belongs to
a Workspace (``kubeflow-workspace``); a pod with ``runtimeClassName: gvisor``
owned by a StatefulSet can be snapshotted (``gke-pod-snapshot``).
"""

from __future__ import annotations

import logging
from typing import Any

from ..base import BackendError
from ..local import LocalBackend
from .client import KubeClient, in_cluster, own_pod
from .common import WORKSPACE_LABEL
from .objects import owner_statefulset

log = logging.getLogger("jupyter_pause")


class UndetectedBackend(LocalBackend):
    """The local backend, in a pod whose platform could not be detected (says so in status)."""

    #: why detection failed (set on the subclass :func:`undetected` makes)
    detection_error = ""

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["name"] = f"local (kubernetes detection failed: {self.detection_error})"
        out["detection_error"] = self.detection_error
        return out

    async def startup(self):
        self.log.warning(
            "jupyter-pause: kubernetes detection failed (%s): pausing only stops kernels; the "
            "pod and its accelerator are not released. Grant the pod's ServiceAccount "
            "'get pods' (deploy/) or set PauseApp.backend.",
            self.detection_error,
        )
        return await super().startup()


def undetected(error: str) -> type[UndetectedBackend]:
    return type("UndetectedBackend", (UndetectedBackend,), {"detection_error": error})


def detect_backend_class(logger=None, client: KubeClient | None = None):
    """The backend class for this pod, or ``None`` (see the module doc)."""
    logger = logger or log
    namespace, pod_name = own_pod()
    if not pod_name or not (namespace or in_cluster()):
        return None
    try:
        client = client or KubeClient(namespace=namespace, request_timeout=10.0, retries=1)
        pod = client.get_pod(pod_name)
    except BackendError as e:
        logger.warning(
            "jupyter-pause: in pod %s but cannot read it (%s); using the local backend", pod_name, e
        )
        return undetected(f"cannot read pod {pod_name}: {e}")
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(WORKSPACE_LABEL):
        from .workspace import KubeflowWorkspaceBackend

        return KubeflowWorkspaceBackend
    if (pod.get("spec") or {}).get("runtimeClassName") == "gvisor" and owner_statefulset(pod):
        from .podsnapshot import GkePodSnapshotBackend

        return GkePodSnapshotBackend
    logger.info(
        "jupyter-pause: pod %s is neither a Workspace pod nor a GKE Sandbox StatefulSet pod; "
        "using the local backend",
        pod_name,
    )
    return None
