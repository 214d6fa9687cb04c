"""jupyter-pause: pause a notebook tonight, carry on tomorrow.

This module is imported in three places with very different budgets:

* in every kernel (the IPython extension is loaded at start-up), where it must
  cost next to nothing: torch, safetensors and the server are imported lazily;
* by Jupyter Server, to find the server extension (``PauseApp``);
* by JupyterLab, to find the prebuilt labextension.

The kernel-side API (``track``, ``checkpoint``, ``restore``, ``list_checkpoints``)
lives in :mod:`jupyter_pause.engine` and is re-exported here on first use.
"""

from __future__ import annotations

import importlib

from .version import __version__

# name -> module that defines it; resolved on first attribute access (PEP 562).
_LAZY = {
    "track": "jupyter_pause.engine.api",
    "untrack": "jupyter_pause.engine.api",
    "checkpoint": "jupyter_pause.engine.api",
    "restore": "jupyter_pause.engine.api",
    "list_checkpoints": "jupyter_pause.engine.api",
    "rerun": "jupyter_pause.engine.rerun",
    "offered": "jupyter_pause.engine.rerun",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jupyter_pause' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def load_ipython_extension(ipython):
    """``%load_ext jupyter_pause``: register the magics (idempotent)."""
    from .magics import load_ipython_extension as load

    load(ipython)


def _jupyter_server_extension_points():
    from .server.app import PauseApp

    return [{"module": "jupyter_pause", "app": PauseApp}]


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-pause"}]
