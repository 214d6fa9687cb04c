"""Random number generator state, so a restored kernel continues the same sequences.

A paused training notebook that resumes with fresh RNG state would draw
different dropout masks, shuffles and samples than it would have without the
pause. We save Python's ``random``, numpy's global generator and torch's CPU
(and, if CUDA was used, per-GPU) generators, touching each library only if the
user already imported it.

torch's states are kept as plain bytes, not tensors: unpickling them then needs no
torch, so a lazy restore puts ``random`` and numpy back at once and applies torch's
part (:func:`restore_torch`) once its background import is done (engine/lazy.py).
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
        state["torch"] = torch.get_rng_state().numpy().tobytes()
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                state["cuda"] = [s.numpy().tobytes() for s in torch.cuda.get_rng_state_all()]
        except Exception:  # a broken driver must not break a checkpoint
            pass
    return state


def restore(state: dict[str, Any], torch_too: bool = True) -> list[str]:
    """Apply a captured state; returns notes about generators that could not be restored.
    ``torch_too=False`` leaves torch's generators to a later :func:`restore_torch`."""
    if "random" in state:
        random.setstate(state["random"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    return restore_torch(state) if torch_too else []


def restore_torch(state: dict[str, Any]) -> list[str]:
    """Apply the torch part of a captured state (a no-op without one)."""
    if "torch" not in state and "cuda" not in state:
        return []
    import torch

    def tensor(s):  # bytes since this module keeps them so; a tensor in older checkpoints
        if isinstance(s, bytes | bytearray):
            return torch.frombuffer(bytearray(s), dtype=torch.uint8)
        return s.cpu()

    notes = []
    if "torch" in state:
        torch.set_rng_state(tensor(state["torch"]))
    cuda = state.get("cuda")
    if cuda:
        if torch.cuda.is_available() and torch.cuda.device_count() >= len(cuda):
            torch.cuda.set_rng_state_all([tensor(s) for s in cuda])
        else:
            notes.append(f"CUDA generator state for {len(cuda)} GPU(s) not restored (no such GPUs)")
    return notes
