# Jupyter Server configuration for a pod that is paused with GKE Pod Snapshots
# (jupyter-pause backends "gke-pod-snapshot" and "kubeflow-workspace" with the
# GKE Workspaces snapshot add-on).  A drop-in: it goes into a directory of its
# own, /etc/jupyter-pause (the image's COPY, or the ConfigMap mounted there),
# which JUPYTER_CONFIG_PATH puts on Jupyter's config path.  It must never
# replace /etc/jupyter/jupyter_server_config.py: that file is the base image's
# (docker-stacks' makes the server listen on all interfaces), and Jupyter reads
# both.  Not a JSON file in jupyter_server_config.d/: Jupyter Server reads only
# the extensions to enable from there, and a poll selector needs Python.
# See docs/kubernetes.md.
#
# Why (observations of the GKE Workspaces team, gke-labs/workspaces and
# siyuanfoundation/kubeflow-notebooks gke/pause_resume_attempts.md):
#
# 1. Kernel transport "ipc".  A restored sandbox gets a new pod IP and all
#    external connections are closed; with the default TCP transport the
#    restored server lost its kernels (NameError after resume).  Unix domain
#    sockets are inside the snapshot (GKE: "loopback connections, listening
#    sockets, Unix domain sockets" are restored), so ZeroMQ over ipc survives.
# 2. A poll(2)-based selector instead of epoll for the server's asyncio loop.
#    Tornado's epoll state did not restore cleanly under gVisor (the server
#    hung or spun a CPU); with IPC alone a second pause/resume cycle hung.
#    selectors.PollSelector keeps no kernel-side state between calls, and was
#    seen to survive three cycles in a row.
# 3. Clients must use fresh msg_id / session ids after a restore: the restored
#    kernel's replay protection rejects duplicates ("Duplicate Signature").
#    JupyterLab does this when it reconnects; custom clients must too.

import asyncio
import os
import selectors


class PollSelectorEventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """New event loops use poll(2), which keeps no state a checkpoint could lose."""

    def new_event_loop(self):
        return asyncio.SelectorEventLoop(selectors.PollSelector())


asyncio.set_event_loop_policy(PollSelectorEventLoopPolicy())

c = get_config()  # noqa: F821 - provided by Jupyter's config loader

# Kernels talk to the server over Unix domain sockets (restored by the snapshot).
# The socket files live next to the connection files, in the runtime dir.
c.KernelManager.transport = "ipc"

# Keep the runtime dir (connection files, ipc sockets) on the container's own
# filesystem, which the snapshot contains, not on the home volume: a persistent
# volume is re-attached at restore, not restored, and may be changed meanwhile.
os.environ.setdefault("JUPYTER_RUNTIME_DIR", "/tmp/jupyter-runtime")

# The shutdown grace, set together with the pod's (docs/kubernetes.md, "Spot and
# preemptible GPUs"): JUPYTER_PAUSE_STOP_SECONDS is what the platform gives between
# SIGTERM and SIGKILL -- the pod's terminationGracePeriodSeconds, but on GKE Spot and
# preemptible nodes at most 15 s by default (up to 120 s where the node pool says so),
# on AWS Spot 120 s at most, on Azure Spot 30 s.  The saves get all of it but the last
# STOP_MARGIN seconds, which the server needs to write the bucket's records and stop its
# kernels.
STOP_MARGIN = 4.0
if os.environ.get("JUPYTER_PAUSE_STOP_SECONDS"):
    stop = float(os.environ["JUPYTER_PAUSE_STOP_SECONDS"])  # not a number: the server stops here
    c.PauseApp.shutdown_grace = max(0.0, stop - STOP_MARGIN)
