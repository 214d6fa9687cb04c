# A notebook image with jupyter-pause for GKE Pod Snapshots and Kubeflow/GKE
# Workspaces (docs/kubernetes.md).  Build the wheel first, then the image,
# from the repository root (.dockerignore sends only the wheel and the config):
#
#   make dist
#   docker build -t REGISTRY/jupyterlab-pause:latest .
#
# Start from the notebook image you already use; it must have Python >= 3.10,
# JupyterLab 4, and the torch build that matches your GPU nodes' CUDA.  The
# wheel has the JupyterLab extension prebuilt: no node in the image.
ARG BASE=quay.io/jupyter/pytorch-notebook:cuda12-latest
FROM ${BASE}

# GKE mounts the NVIDIA driver (nvidia-smi, libraries) under /usr/local/nvidia:
# the environment fingerprint recorded at pause reads the driver version there.
ENV PATH=/usr/local/nvidia/bin:${PATH} \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH}

# installed as the base image's user (docker-stacks: jovyan owns the conda env)
COPY --chown=${NB_UID:-1000}:${NB_GID:-100} dist/ /tmp/jupyter-pause-dist/
RUN pip install --no-cache-dir "$(ls /tmp/jupyter-pause-dist/jupyter_pause-*.whl)[kubernetes]" \
    && rm -rf /tmp/jupyter-pause-dist

# The snapshot-safe server configuration (ipc kernels, a poll selector), as a
# drop-in in a directory of its own on Jupyter's config path; also shipped as
# the ConfigMap jupyter-pause-server-config (deploy/jupyter-config).  The base
# image's /etc/jupyter/jupyter_server_config.py (docker-stacks': listen on all
# interfaces) stays: Jupyter reads both.
COPY deploy/jupyter-config/jupyter_server_config.py /etc/jupyter-pause/jupyter_server_config.py
ENV JUPYTER_CONFIG_PATH=/etc/jupyter-pause${JUPYTER_CONFIG_PATH:+:${JUPYTER_CONFIG_PATH}}

# run as the base image's unprivileged user (docker-stacks: jovyan, NB_UID), never root
USER ${NB_UID:-1000}
