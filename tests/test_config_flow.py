"""Configuration flows one way: ``PauseApp``'s traitlets are handed down to what it
builds, and each setting has one home that the others name."""

from __future__ import annotations

from pathlib import Path

import jupyter_pause
from jupyter_pause.engine import paths

PACKAGE = Path(jupyter_pause.__file__).parent


def sources(under: Path = PACKAGE):
    for path in sorted(under.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def test_the_checkpoint_root_variable_is_spelled_in_paths_only():
    spelled = [name for name, text in sources() if paths.ENV_DIR in text]
    assert spelled == ["engine/paths.py"]
