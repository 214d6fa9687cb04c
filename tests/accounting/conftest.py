"""Fixtures for the accounting tests: a small-model notebook and a real server.

The trial and the probe drive a Jupyter server over HTTP with a synchronous
client, so the server runs in a subprocess (pytest-jupyter's in-process
server would share, and be blocked by, the test's thread).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

SMALL_MODEL_CELLS = [
    "import torch\ntorch.manual_seed(0)",
    "model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))\n"
    "x = torch.randn(32, 64)\nnotes = {'epochs': 3, 'lr': 0.01}",
    "import json\nwith open('results.json', 'w') as f:\n    json.dump({'out': float(model(x).sum())}, f)",
    "with torch.no_grad():\n    y = model(x)\nprint(float(y.sum()))",
]


def notebook_json(cells: list[str]) -> dict:
    return {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": c,
                "outputs": [],
                "execution_count": None,
            }
            for c in cells
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@pytest.fixture
def small_model_notebook(tmp_path) -> Path:
    pytest.importorskip("torch")
    path = tmp_path / "small_model.ipynb"
    path.write_text(json.dumps(notebook_json(SMALL_MODEL_CELLS)))
    return path


@pytest.fixture(scope="module")
def pause_server():
    """A jupyter server with jupyter-pause (local backend) in a subprocess."""
    from jupyter_pause.client import LocalServer

    work = Path(tempfile.mkdtemp(prefix="jp-accounting-"))
    (work / "root" / "work").mkdir(parents=True)
    # this machine has no GPU: each kernel counts as holding one, as on a GPU machine
    server = LocalServer(
        root_dir=work / "root",
        state_dir=work / "state",
        extra_args=["--PauseApp.kernel_accelerators=1"],
    )
    client = server.start()
    yield server, client
    server.stop()
    shutil.rmtree(work, ignore_errors=True)
