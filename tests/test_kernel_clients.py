"""The server's own calls into a kernel (jupyter_pause.server.kernels.call_in_kernel)."""

from jupyter_client.channels import HBChannel

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
