"""Kishu's re-checkpoint after one small change, measured in a real kernel.

Kishu (https://github.com/illinoisdata/kishu) checkpoints incrementally after every
cell from IPython's ``post_run_cell`` hook, so its cost is what it adds to a cell:
the round trip of ``n = i`` with Kishu attached minus the same cell's round trip in
the same kernel before Kishu was attached (the messaging and execution overhead).

Kishu brings Flask, pandas and more, so it lives in its own environment
(``make bench`` creates ``.venv/peers`` with kishu 0.3.4 and the same torch); its
kernel is started from a kernelspec written for that interpreter.  Kishu finds its
notebook through the kernel's connection file, whose name must be ``kernel-<id>.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from pathlib import Path

# the namespace of the re-checkpoint figure, cell by cell (bench_checkpoint.RECHECKPOINT_CHILD)
NAMESPACE_CELLS = [
    "model = make_model({size})",
    "array = np.random.default_rng(1).random(25_000_000)",
    "small = [{{'id': i, 'name': f'item{{i}}', 'tags': [i % 7, i % 11], 'score': i / 3}} "
    "for i in range(10_000)]",
    "n = 0",
]


def measure_kishu(python: str, make_model: str, size: int, rounds: int, work: Path) -> dict:
    """Seconds Kishu adds to a cell that changes one small variable (``rounds`` cells)."""
    from jupyter_client.manager import KernelManager

    work.mkdir(parents=True, exist_ok=True)
    notebook = work / "kishu.ipynb"
    notebook.write_text(
        json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    spec = work / "share" / "kernels" / "peers"
    spec.mkdir(parents=True)
    argv = [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "peers", "language": "python"})
    )
    previous = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(work / "share")
    try:
        km = KernelManager(
            kernel_name="peers", connection_file=str(work / f"kernel-{uuid.uuid4()}.json")
        )
        km.start_kernel(env={**os.environ, "HOME": str(work)}, cwd=str(work))
    finally:
        if previous is None:
            os.environ.pop("JUPYTER_PATH")
        else:
            os.environ["JUPYTER_PATH"] = previous
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)

        def run(code: str) -> float:
            t = time.perf_counter()
            reply = kc.execute_interactive(code, timeout=1800, output_hook=lambda m: None)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"{code[:40]!r}: {reply['content'].get('evalue')}")
            return time.perf_counter() - t

        run(make_model)
        bare = [run(f"n = {i}") for i in range(rounds)]
        run(f"from kishu import init_kishu; init_kishu({str(notebook)!r})")
        for cell in NAMESPACE_CELLS:
            run(cell.format(size=size))
        attached = [run(f"n = {i}") for i in range(1, rounds + 1)]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    added = [a - statistics.median(bare) for a in attached]
    return {"kishu": added, "cell_with_kishu": attached, "cell_bare": bare}
