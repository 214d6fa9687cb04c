"""Jupyter's config as an image or a pod would have it: files laid out over a base image.

A layout (:class:`Layout`: files at absolute paths, environment variables) is
written into a temporary root over a docker-stacks-like base image, whose
``/etc/jupyter/jupyter_server_config.py`` makes the server listen on all
interfaces.  :func:`load` then loads the config in a fresh process with
Jupyter Server's own loader (``ServerApp.load_config_file()``), its system
config path pointed at the root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: the part of docker-stacks' /etc/jupyter/jupyter_server_config.py that matters here
BASE_CONFIG = 'c = get_config()\nc.ServerApp.ip = "0.0.0.0"\nc.ServerApp.open_browser = False\n'

LOAD = r"""
import asyncio, json, os, sys
import jupyter_core.paths as paths
root = sys.argv[1]
paths.SYSTEM_CONFIG_PATH[:] = [root + "/usr/local/etc/jupyter", root + "/etc/jupyter"]
paths.ENV_CONFIG_PATH[:] = []
from jupyter_server.serverapp import ServerApp
app = ServerApp()
app.load_config_file()
loop = asyncio.new_event_loop()
print(json.dumps({
    "config": app.config,
    "ip": app.ip,
    "transport": app.config.KernelManager.get("transport"),
    "selector": type(loop._selector).__name__,
    "runtime_dir": os.environ.get("JUPYTER_RUNTIME_DIR"),
}))
"""


@dataclass
class Layout:
    """What an image or a pod puts on the filesystem (absolute paths) and in the env."""

    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def load(layout: Layout, root: Path) -> dict:
    """Lay ``layout`` out over the base image under ``root``; Jupyter's config as loaded there."""
    base = root / "etc" / "jupyter" / "jupyter_server_config.py"
    base.parent.mkdir(parents=True)
    base.write_text(BASE_CONFIG)
    for path, content in layout.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    home = root / "home" / "jovyan"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    for name, value in layout.env.items():
        if name == "JUPYTER_CONFIG_PATH":  # the image's absolute paths, under root
            value = os.pathsep.join(str(root) + p for p in value.split(":") if p)
        if name.startswith("JUPYTER_"):
            env[name] = value
    out = subprocess.run(
        [sys.executable, "-c", LOAD, str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])
