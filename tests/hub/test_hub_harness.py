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


def test_a_port_taken_before_the_service_binds_it_is_replaced(tmp_path, monkeypatch):
    """The Hub restarts a service that exits, so a service whose port was taken
    fails in a loop while the hub itself answers: the harness must see it.

    The Hub waits about 10 s for a managed service to answer, then goes on, so
    on a loaded machine the service may bind (and fail) after the hub answers;
    a ``sitecustomize`` (the Hub passes ``PYTHONPATH`` on to its services) makes
    this one that slow."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import sys, time\n"
        "if sys.argv and sys.argv[0].endswith('jupyter-pause-hub'):\n"
        "    time.sleep(15)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(slow))
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    pick_free = conftest.free_port
    picks = iter([pick_free(), pick_free(), pick_free(), taken])  # port, hub, proxy API, service
    monkeypatch.setattr(conftest, "free_port", lambda: next(picks, None) or pick_free())
    hub = Hub(tmp_path, service={"timeout": 3600, "check_interval": 60})
    assert hub.service_port == taken
    try:
        hub.start(timeout=60)
        assert hub.service_port != taken
        assert hub.service_up()
    finally:
        hub.stop()
        squatter.close()
