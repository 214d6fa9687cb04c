"""Hibernate in place: a kernel's GPU memory moved to host memory and back by the CUDA
driver's process checkpoint API, the kernel's process left running.

* :mod:`.driver`: the boundary to the NVIDIA driver (``cuCheckpointProcess*`` through
  cuda-bindings, the GPU processes and free memory through NVML): :class:`.GpuDriver`,
  and :class:`.CudaDriver`, the real one.
* :mod:`.protocol`: the typed messages between the server and the helper process.
* :mod:`.helper`: the helper process: one per server, started once (``cuInit`` costs
  seconds), it calls the driver for the server.
* :mod:`.client`: the server's end of the helper (:class:`.Helper`).

What a hibernate may do, and when it is refused, is the server's
(``jupyter_pause/server/hibernate.py``); see docs/engine.md, *Hibernate in place*.
"""
