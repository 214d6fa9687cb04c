# A notebook image with jupyter-pause for GKE Pod Snapshots and Kubeflow/GKE
# Workspaces (docs/kubernetes.md).  Build from the repository root:
#
#   docker build -t REGISTRY/jupyterlab-pause:latest .
#
# Start from the notebook image you already use; it must have Python >= 3.10,
# JupyterLab 4, and the torch build that matches your GPU nodes' CUDA.
ARG BASE=quay.io/jupyter/pytorch-notebook:cuda12-latest
FROM ${BASE}

# GKE mounts the NVIDIA driver (nvidia-smi, libraries) under /usr/local/nvidia:
# the environment fingerprint recorded at pause reads the driver version there.
ENV PATH=/usr/local/nvidia/bin:${PATH} \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH}

COPY --chown=${NB_UID:-1000}:${NB_GID:-100} . /tmp/jupyter-pause
RUN pip install --no-cache-dir "/tmp/jupyter-pause[kubernetes]" && rm -rf /tmp/jupyter-pause

# The snapshot-safe server configuration (ipc kernels, a poll selector); also
# shipped as the ConfigMap jupyter-pause-server-config (deploy/jupyter-config).
COPY deploy/jupyter-config/jupyter_server_config.py /etc/jupyter/jupyter_server_config.py
