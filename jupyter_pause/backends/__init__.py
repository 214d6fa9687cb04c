"""Platform backends: what "release the accelerator" means where the server runs.

``local`` (the default) shuts the paused notebook's kernel down.
``jupyterhub`` has the Hub stop the whole single-user server.  The
Kubernetes backends (``kubeflow-workspace``, ``gke-pod-snapshot``) take the
whole pod away after every kernel has been checkpointed.
"""

from __future__ import annotations

import importlib

from .base import PauseBackend


def backend_class_for(name: str) -> type[PauseBackend]:
    """The backend class for a configured name ("auto" detects a pod)."""
    from .jupyterhub import JupyterHubBackend, running_under_hub
    from .local import LocalBackend

    if name == "local":
        return LocalBackend
    if name == "jupyterhub" or (name == "auto" and running_under_hub()):
        # before the pod check: under KubeSpawner the Hub, not the pod, is the owner
        return JupyterHubBackend
    if name == "auto":
        try:
            from .kubernetes.detect import detect_backend_class
        except ImportError:  # the kubernetes extra is not installed
            return LocalBackend
        return detect_backend_class() or LocalBackend
    if name not in KUBERNETES_BACKENDS:
        known = ", ".join(["auto", "local", "jupyterhub", *KUBERNETES_BACKENDS])
        raise ValueError(f"unknown jupyter-pause backend {name!r}; choose one of {known}")
    module, _, cls = KUBERNETES_BACKENDS[name].rpartition(".")
    return getattr(importlib.import_module(module), cls)


#: name -> class; imported on demand (the kubernetes client is an extra)
KUBERNETES_BACKENDS = {
    "gke-pod-snapshot": "jupyter_pause.backends.kubernetes.podsnapshot.GkePodSnapshotBackend",
    "kubeflow-workspace": "jupyter_pause.backends.kubernetes.workspace.KubeflowWorkspaceBackend",
}


def configurable_backend_classes() -> list[type[PauseBackend]]:
    """Every backend class that has settings of its own, bases before subclasses
    (``c.KubeBackend.namespace`` applies to both Kubernetes backends)."""
    from .jupyterhub import JupyterHubBackend
    from .kubernetes.common import KubeBackend
    from .local import LocalBackend

    kubernetes = [backend_class_for(name) for name in KUBERNETES_BACKENDS]
    return [LocalBackend, JupyterHubBackend, KubeBackend, *kubernetes]
