"""Random number generator state, so a restored kernel continues the same sequences.

A paused training notebook that resumes with fresh RNG state would draw
different dropout masks, shuffles and samples than it would have without the
pause. We save Python's ``random``, numpy's global generator and torch's CPU
(and, if CUDA was used, per-GPU) generators, touching each library only if the
user already imported it.
"""

from __future__ import annotations

import random
import sys
from typing import Any


def capture() -> dict[str, Any]:
    state: dict[str, Any] = {"random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                state["cuda"] = torch.cuda.get_rng_state_all()
        except Exception:  # a broken driver must not break a checkpoint
            pass
    return state


def restore(state: dict[str, Any]) -> list[str]:
    """Apply a captured state; returns notes about generators that could not be restored."""
    notes = []
    if "random" in state:
        random.setstate(state["random"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "torch" in state or "cuda" in state:
        import torch

        if "torch" in state:
            torch.set_rng_state(state["torch"].cpu())
        cuda = state.get("cuda")
        if cuda:
            if torch.cuda.is_available() and torch.cuda.device_count() >= len(cuda):
                torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
            else:
                notes.append(
                    f"CUDA generator state for {len(cuda)} GPU(s) not restored (no such GPUs)"
                )
    return notes
