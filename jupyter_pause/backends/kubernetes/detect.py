"""Pick a Kubernetes backend automatically when the server runs in a pod.

:func:`detect_backend_class` is what ``PauseApp`` calls when its ``backend``
setting is ``"auto"``.  It returns ``None`` (use the local backend) when:

* this process is not in a pod (no ``POD_NAME``, and no in-cluster service
  account), or the ``kubernetes`` client is not installed;
* the pod cannot be read (no RBAC, no API): a warning says why;
* the pod is neither a Kubeflow Workspace's nor a GKE Sandbox StatefulSet pod.

Otherwise: a pod labelled ``notebooks.kubeflow.org/workspace-name`` belongs to
a Workspace (``kubeflow-workspace``); a pod with ``runtimeClassName: gvisor``
owned by a StatefulSet can be snapshotted (``gke-pod-snapshot``).
"""

from __future__ import annotations

import logging

from ..base import BackendError
from .client import KubeClient, in_cluster, own_pod
from .common import WORKSPACE_LABEL, owner_statefulset

log = logging.getLogger("jupyter_pause")


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
        return None
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
