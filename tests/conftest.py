"""Shared fixtures: a real Jupyter server with jupyter-pause, real kernels."""

import json

import pytest

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
        "PauseApp": {"backend": "local", "shutdown_grace": 0},
    }


@pytest.fixture
def notebook_path(jp_root_dir):
    """An empty Python notebook on disk; returns its server-relative path."""
    nb = {
        "cells": [],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (jp_root_dir / "work").mkdir(exist_ok=True)
    (jp_root_dir / "work" / "demo.ipynb").write_text(json.dumps(nb))
    return "work/demo.ipynb"
