"""The server's settings, as the commands that read local state find them.

``jupyter pause report | export | import | list | verify | delete | gc`` read the
ledger or the checkpoint store on this machine: the very ones the server writes.
So they load the Jupyter config the server loads (``jupyter_server_config.py`` and
``.json``, and the extension's own ``jupyter_jupyter_pause_config``, on the same
config path) and take ``c.PauseApp.state_dir``, ``checkpoint_dir`` and
``checkpoint_cache_dir`` from ``PauseApp`` itself, defaults and environment
included.  Each command says which ledger or store it read, and why that one.
A setting given on the server's command line (``--PauseApp.state_dir=…``) is not
in any file: name it with the command's own option.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import paths


@dataclass(frozen=True)
class ServerSettings:
    """Where the server keeps its state and checkpoints."""

    state_dir: Path
    #: the checkpoint root as the server resolves it: a folder, or a bucket and its cache
    checkpoint_dir: Path | paths.Bucket
    #: the config files read, in the order the server reads them
    files: list[str] = field(default_factory=list)
    #: the settings the files set (``state_dir``, ``checkpoint_dir``, ...)
    configured: frozenset[str] = frozenset()
    #: the checkpoint root came from the environment (``paths.ENV_DIR``)
    from_environment: bool = False

    @property
    def ledger(self) -> Path:
        return self.state_dir / "ledger.sqlite3"

    def origin(self, name: str) -> str:
        """Why the setting ``name`` has its value, in words."""
        if name in self.configured:
            return f"c.PauseApp.{name} in {', '.join(self.files)}"
        if name == "checkpoint_dir" and self.from_environment:
            return f"${paths.ENV_DIR}"
        read = f" (read: {', '.join(self.files)})" if self.files else ""
        return f"the default: no c.PauseApp.{name} in the Jupyter config{read}"


def load() -> ServerSettings:
    """The settings the server would read now, from this user's Jupyter config path.
    ValueError for a checkpoint root the server would refuse too."""
    from jupyter_server.serverapp import ServerApp
    from traitlets.config import Config

    from ..server.app import PauseApp

    own = PauseApp()
    own.load_config_file()  # jupyter_jupyter_pause_config: read first, as the server does
    server = ServerApp()  # not initialised: only its config files are read
    server.load_config_file()
    config = Config()
    config.merge(own.config)
    config.merge(server.config)  # the server's config wins (ExtensionApp.update_config)
    app = PauseApp(config=config)
    files = [*own.loaded_config_files, *server.loaded_config_files]
    configured = frozenset(config.PauseApp.keys()) if "PauseApp" in config else frozenset()
    return ServerSettings(
        state_dir=Path(app.state_dir).expanduser(),
        checkpoint_dir=paths.location(app.checkpoint_location()),
        files=list(dict.fromkeys(files)),
        configured=configured,
        from_environment="checkpoint_dir" not in configured and bool(os.environ.get(paths.ENV_DIR)),
    )


def checkpoint_root(dir: str | None, command: str) -> Path | paths.Bucket:
    """The checkpoint root a command works on: ``--dir`` when given, else the server's
    (said on stderr, with why)."""
    if dir:
        return paths.location(dir)
    settings = load()
    root = settings.checkpoint_dir
    said = root.url if isinstance(root, paths.Bucket) else root
    tell(command, f"the checkpoint store {said} ({settings.origin('checkpoint_dir')})")
    return root


def tell(command: str, what: str) -> None:
    """Which state a command reads, on stderr (stdout may be JSON)."""
    print(f"jupyter pause {command}: {what}", file=sys.stderr)
