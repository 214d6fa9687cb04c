"""The server's own calls into a kernel (jupyter_pause.server.kernels.call_in_kernel)."""

import json
import sys

from jupyter_client import AsyncKernelManager
from jupyter_client.channels import HBChannel
from jupyter_client.kernelspec import KernelSpecManager

from jupyter_pause.server.kernels import call_in_kernel

from .helpers import api, running_notebook


async def test_a_call_into_a_kernel_starts_no_heartbeat(
    jp_fetch, jp_serverapp, notebook_path, monkeypatch
):
    """No heartbeat thread per call: the kernel's death is watched otherwise, and a
    heartbeat stopped as it starts (a call that ends at once) spins making zmq sockets
    until zmq refuses (seen in CI: "ZMQError: Too many open files" in a channel thread,
    some 2000 descriptors held meanwhile)."""
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "x = 1")
    started = []
    real = HBChannel.start

    def start(self):
        started.append(self)
        return real(self)

    monkeypatch.setattr(HBChannel, "start", start)
    code, body = await api(jp_fetch, "sessions", "unsaveable", params={"path": notebook_path})
    assert code == 200, body
    assert started == []


async def test_a_call_into_a_kernel_slow_to_start_is_answered(tmp_path):
    """A kernel that binds its sockets seconds after its process started is asked again
    each second, and then answers every request at once: the call passes over the
    answers to the earlier requests and gets its own (it used to read one stale answer
    per request it sent, and never caught up)."""
    spec = tmp_path / "kernels" / "slow"
    spec.mkdir(parents=True)
    start = "import time; time.sleep(3); from ipykernel import kernelapp; kernelapp.launch_new_instance()"
    argv = [sys.executable, "-c", start, "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python"}))
    km = AsyncKernelManager(
        kernel_name="slow",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]),
    )
    await km.start_kernel()
    try:
        assert await call_in_kernel(km, "live_nonce", timeout=30) is None
    finally:
        await km.shutdown_kernel(now=True)
