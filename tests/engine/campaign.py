"""Corruption campaign: flip or truncate each kind of checkpoint file, shared and unshared
blobs, and measure what the engine does about it.

Each trial takes two checkpoints A and B of a small notebook state (a 1 MiB model in its
own blob, a small array and the RNG state in the shared small-object blob), damages one
file of B, then measures:

* ``detected``: restoring B by id raises a CheckpointError and nothing was unpickled;
  ``unaffected``: it restores B's state exactly (the damaged bytes are ones B does not
  use: a shared blob also holds tensors of A that B replaced); ``silent``: anything
  else (wrong data, or an error after unpickling began) -- the target is 0;
* ``fallback``: restoring without an id right away brings back a sound state (A's or B's);
* ``spread``: the next checkpoint C, taken from the live objects, does not verify;
* ``healed``: restoring without an id after C brings back the live state.

Run ``python -m tests.engine.campaign [--trials N]`` for the table; tests/engine/
test_campaign.py runs it as a test.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import tempfile
from collections import Counter
from pathlib import Path

KINDS = ("manifest.json", "manifest.sig", "objects.pkl", "blob-shared", "blob-unshared")
FAULTS = ("flip", "truncate")
# which object changes between A and B decides which blob B shares with A
VARIANTS = ("model-changes", "small-changes")
OUTCOMES = ("detected", "unaffected", "silent", "fallback", "spread", "healed")


def _damage(path: Path, fault: str, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    if fault == "flip":
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
    else:
        del data[rng.randrange(len(data)) :]
    path.write_bytes(bytes(data))


def _state(ns):
    return (ns["model"].weight.sum().item(), ns["small"].tolist(), ns["cfg"])


def trial(root: Path, kind: str, fault: str, variant: str, seed: int) -> dict[str, bool]:
    import numpy as np
    import torch

    import jupyter_pause as jp
    from jupyter_pause.engine import errors, paths, pickling, store

    rng = random.Random(seed)
    ck = {"dir": str(root), "notebook": f"nb-{seed}.ipynb", "progress": False}
    nbdir = paths.notebook_dir(ck["dir"], ck["notebook"])
    torch.manual_seed(seed)
    ns = {"model": torch.nn.Linear(512, 512), "small": np.arange(8.0) + seed, "cfg": {"s": seed}}
    a = jp.checkpoint(namespace=ns, **ck)
    state_a = _state(ns)
    if variant == "model-changes":
        with torch.no_grad():
            ns["model"].weight.add_(1.0)
    else:
        ns["small"] = ns["small"] * 2
    ns["cfg"] = {"s": seed, "b": True}
    b = jp.checkpoint(namespace=ns, **ck)
    state_b = _state(ns)

    mb = store.get_manifest(ck["dir"], ck["notebook"], b.id)
    ma = store.get_manifest(ck["dir"], ck["notebook"], a.id)
    if kind.startswith("blob"):
        shared = sorted(set(mb.files) & set(ma.files))
        own = sorted(set(mb.files) - set(ma.files))
        target = nbdir / (shared if kind == "blob-shared" else own)[0]
    else:
        target = nbdir / b.id / kind
    _damage(target, fault, rng)

    unpickled = []
    real_load = pickling.load_records

    def spy(*args, **kwargs):
        unpickled.append(1)
        return real_load(*args, **kwargs)

    pickling.load_records = spy
    got: dict = {}
    try:
        try:
            jp.restore(b.id, namespace=got, **ck)
            detected, silent = False, _state(got) != state_b
        except errors.CheckpointError:
            detected, silent = not unpickled, bool(unpickled)
    finally:
        pickling.load_records = real_load

    def restore_latest():
        got: dict = {}
        try:
            jp.restore(namespace=got, **ck)
        except errors.CheckpointError:
            return None
        return _state(got)

    fallback = restore_latest() in (state_a, state_b)
    c = jp.checkpoint(namespace=ns, **ck)
    try:
        store.verify_checkpoint(ck["dir"], ck["notebook"], c.id)
        spread = False
    except errors.CheckpointError:
        spread = True
    healed = restore_latest() == state_b
    return {
        "detected": detected,
        "unaffected": not detected and not silent,
        "silent": silent,
        "fallback": fallback,
        "spread": spread,
        "healed": healed,
    }


def run(trials: int = 200, root: Path | None = None) -> tuple[list[dict], Counter]:
    combos = list(itertools.product(KINDS, FAULTS, VARIANTS))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = root or Path(tmp)
        for n in range(trials):
            kind, fault, variant = combos[n % len(combos)]
            r = trial(root / "ck", kind, fault, variant, seed=n)
            results.append({"kind": kind, "fault": fault, "variant": variant, **r})
    totals = Counter()
    for r in results:
        for k in OUTCOMES:
            totals[k] += r[k]
    return results, totals


def table(results: list[dict]) -> str:
    rows = {}
    for r in results:
        shared = {"blob-shared": "shared", "blob-unshared": "unshared"}.get(r["kind"], "-")
        key = (r["kind"], r["fault"], shared)
        row = rows.setdefault(key, Counter())
        row["trials"] += 1
        for k in OUTCOMES:
            row[k] += r[k]
    lines = [f"{'file':<14} {'fault':<9} {'trials':>6} " + " ".join(f"{k:>10}" for k in OUTCOMES)]
    for (kind, fault, _shared), row in sorted(rows.items()):
        lines.append(
            f"{kind:<14} {fault:<9} {row['trials']:>6} "
            + " ".join(f"{row[k]:>10}" for k in OUTCOMES)
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=240)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["JUPYTER_DATA_DIR"] = str(Path(tmp) / "data")
        results, totals = run(args.trials, Path(tmp))
    print(table(results))
    print(
        f"\n{len(results)} trials: detected before load {totals['detected']}, "
        f"damage in bytes the checkpoint does not use {totals['unaffected']}, "
        f"silent {totals['silent']}, "
        f"restorable by automatic fallback at once {totals['fallback']}, "
        f"spread into the next checkpoint {totals['spread']}, "
        f"restorable after the next checkpoint {totals['healed']}"
    )


if __name__ == "__main__":
    main()
