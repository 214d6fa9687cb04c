"""Kubernetes backends: release the GPU by taking the whole pod away.

* :class:`~.workspace.KubeflowWorkspaceBackend` (``kubeflow-workspace``)
* :class:`~.podsnapshot.GkePodSnapshotBackend` (``gke-pod-snapshot``)
* :func:`~.detect.detect_backend_class` picks one in a pod.

See ``docs/kubernetes.md``.  Importing this package does not import ``kubernetes``.
"""

from .detect import detect_backend_class

__all__ = ["detect_backend_class"]
