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


class _Running:
    """A hub process that is up, as far as ``poll`` tells."""

    def poll(self):
        return None


def test_a_hub_that_does_not_answer_names_its_log_in_the_failure(tmp_path, monkeypatch):
    """A start that times out says why: the hub's log is in the message, not only
    "timed out" (of a failed run, CI shows the message and little else)."""
    monkeypatch.setattr(conftest.subprocess, "Popen", lambda *args, **kwargs: _Running())
    hub = Hub(tmp_path)
    hub.log_path.write_text("the reason it did not come up\n")
    monkeypatch.setattr(hub, "api", lambda *args: (503, {}))  # never the hub's 200
    with pytest.raises(AssertionError, match="the reason it did not come up"):
        hub._start(timeout=0.5, log_size=0)
