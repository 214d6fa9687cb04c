"""``LocalServer`` (the trial's, the CLI tests' and the browser tests' server) talks
only to the server it started, however busy the machine's ports are."""

import socket

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
