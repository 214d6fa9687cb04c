"""The hub harness survives the port race that parallel test runs make likely."""

import socket

import pytest

from . import conftest
from .conftest import Hub

pytestmark = pytest.mark.slow


def test_a_port_taken_before_the_hub_binds_it_is_replaced(tmp_path, monkeypatch):
    squatter = socket.socket()  # answers no HTTP: a kernel's socket, say
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    picks = iter([taken])
    pick_free = conftest.free_port
    monkeypatch.setattr(conftest, "free_port", lambda: next(picks, None) or pick_free())
    hub = Hub(tmp_path)
    assert hub.port == taken
    try:
        hub.start()
        assert hub.port != taken
        assert hub.api("GET", "")[0] == 200
    finally:
        hub.stop()
        squatter.close()
