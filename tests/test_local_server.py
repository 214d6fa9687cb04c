"""``LocalServer`` (the trial's, the CLI tests' and the browser tests' server) talks
only to the server it started, however busy the machine's ports are."""

import socket

import pytest

from jupyter_pause import client as client_mod
from jupyter_pause.client import LocalServer


def test_a_port_taken_by_someone_else_never_misleads_the_client(tmp_path, monkeypatch):
    # another process (here: a socket that answers no HTTP) holds the port a picker
    # would have chosen before the server could bind it, as kernels do under load
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    monkeypatch.setattr(client_mod, "free_port", lambda: taken)
    (tmp_path / "root").mkdir()
    server = LocalServer(root_dir=tmp_path / "root", state_dir=tmp_path / "state")
    try:
        answer = server.start().status()
        assert server.port != taken
        assert answer["sessions"] == []
        # a restart keeps the port the server chose (open browser tabs reconnect)
        first = server.port
        server.stop()
        server.start().status()
        assert server.port == first
    finally:
        server.stop()
        squatter.close()


def test_a_free_port_is_one_no_kernel_can_draw():
    """Kernels bind port 0, so the system hands them ports from its ephemeral range; a
    server's port picked there may be a kernel's before the server binds it (a hub's
    spawn then fails at once, with a 500). Picks stay below that range."""
    ephemeral = client_mod._ephemeral_ports()
    if ephemeral is None or ephemeral.start <= 12_000:
        pytest.skip("no room below this system's ephemeral range")
    for _ in range(20):
        port = client_mod.free_port()
        assert port not in ephemeral
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
