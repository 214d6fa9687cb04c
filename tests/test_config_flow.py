"""Configuration flows one way: ``PauseApp``'s traitlets are handed down to what it
builds, and each setting has one home that the others name."""

from __future__ import annotations

from pathlib import Path

import jupyter_pause
from jupyter_pause.backends.jupyterhub import JupyterHubBackend
from jupyter_pause.engine import paths
from jupyter_pause.server.app import PauseApp
from jupyter_pause.server.kernels import PauseKernelManager

from .fakes import FakeClock

PACKAGE = Path(jupyter_pause.__file__).parent


def sources(under: Path = PACKAGE):
    for path in sorted(under.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def test_the_checkpoint_root_variable_is_spelled_in_paths_only():
    spelled = [name for name, text in sources() if paths.ENV_DIR in text]
    assert spelled == ["engine/paths.py"]


def test_backends_are_handed_their_settings_not_reading_their_parent():
    read_back = [name for name, text in sources(PACKAGE / "backends") if "self.parent" in text]
    assert read_back == []


def test_the_hub_backend_records_its_pause_in_the_state_dir_it_is_given(tmp_path):
    backend = JupyterHubBackend(state_dir=str(tmp_path))
    assert backend.state_file == str(tmp_path / "jupyterhub.json")
    backend.write_state(pause={"at": 1})
    assert backend.read_state() == {"pause": {"at": 1}}


def test_the_app_hands_its_dirs_and_clock_to_the_backend(tmp_path):
    app = PauseApp(
        backend="local", state_dir=str(tmp_path / "state"), checkpoint_dir=str(tmp_path / "ck")
    )
    app.ledger = None
    app.in_force = app._read_settings()
    clock = FakeClock()
    backend = app._make_backend(clock)
    assert backend.state_dir == str(tmp_path / "state")
    assert backend.checkpoint_dir == str(tmp_path / "ck")
    assert backend.clock is clock


def test_the_kernel_manager_hands_kernels_the_settings_it_is_given(tmp_path):
    settings = {paths.ENV_DIR: str(tmp_path), paths.ENV_KEEP: "5"}
    kernel_manager = PauseKernelManager(pause_settings=settings)
    assert kernel_manager._pause_env({}).items() >= settings.items()
