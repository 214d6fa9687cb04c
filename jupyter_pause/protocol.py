"""What a kernel answers the server: the replies of ``kernel_ops.checkpoint`` and
``kernel_ops.restore``, and which names a checkpoint skipped a person is told about.

The kernel builds a reply and sends it as JSON (:meth:`to_json`); the server reads it
back (:meth:`from_json`), so both sides name the same fields.  Fields a kernel leaves
out (an older one, or a test's stand-in) take their defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from .formatting import format_bytes_of

#: the MIME type of :class:`CallProgress` in the display data a kernel sends on IOPub,
#: its parent the server's call (``kernel_ops`` sends it, ``call_in_kernel`` reads it)
PROGRESS_MIME = "application/vnd.jupyter-pause.progress+json"

#: why a checkpoint skipped a module it did not pickle: a restore imports it again by
#: name, so a person need not hear of it (one that cannot be imported again is news)
MODULE_REIMPORTED = "module (re-imported by name on restore)"

#: what the server's kernel manager puts in a notebook kernel's environment: the
#: notebook's server-relative path, and the way back to the server for ``%pause``
NOTEBOOK_ENV = "JUPYTER_PAUSE_NOTEBOOK"
SERVER_URL_ENV = "JUPYTER_PAUSE_SERVER_URL"
SERVER_TOKEN_ENV = "JUPYTER_PAUSE_SERVER_TOKEN"


def user_skipped(skipped: dict[str, str]) -> dict[str, str]:
    """The names of a checkpoint's ``skipped`` ({name: why it was not saved}) that are news
    to a person: their own variables, and modules a restore cannot import again.
    IPython's history and internals (one entry, named ``<IPython history>``) and modules
    a restore imports again are left out."""
    return {
        name: why
        for name, why in skipped.items()
        if not name.startswith("<") and why != MODULE_REIMPORTED and not why.startswith("IPython")
    }


#: the steps a kernel names in a reply's ``steps``: the end of each phase of the engine's
#: checkpoint or restore (engine/phases.py)
KERNEL_STEPS = {
    "prepare": "prepared",
    "pickle": "pickled",
    "hash": "hashed",
    "write": "written",
    "fsync": "fsynced",
    "commit": "committed",
    "upload": "uploaded",
    "verify": "verified",
    "imports": "imported",
    "unpickle": "unpickled",
    "assign": "namespace ready",
}


def kernel_steps(first: str, at: float, phases: dict[str, float]) -> list[list]:
    """A reply's ``steps``: the call reached the kernel (0), ``first`` at ``at`` (seconds
    after that: what came between is the import of what the call needs), then the end of
    each phase (``phases``: seconds each, in order), laid out one after another: phases
    that alternate (each file's write and fsync) are added up under their names."""
    steps = [["call received", 0.0], [first, round(at, 4)]]
    for phase, seconds in phases.items():
        at += seconds
        steps.append([KERNEL_STEPS.get(phase, phase), round(at, 4)])
    return steps


class _Reply:
    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class CheckpointReply(_Reply):
    """A checkpoint the kernel wrote."""

    id: str
    bytes: int  # tensor bytes referenced + the pickle
    seconds: float
    bytes_written: int = 0
    saved: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # name -> why it was not saved
    lost: dict[str, str] = field(default_factory=dict)  # name -> the checkpoint that has it
    gpus: int | None = None  # GPUs the kernel holds memory on (None: none in use)
    gpu_model: str | None = None
    #: where the call's time went in the kernel: [step, seconds after the call reached
    #: it] (:func:`kernel_steps`); ``took``: seconds from then until this reply
    steps: list[list] = field(default_factory=list)
    took: float = 0.0


@dataclass(frozen=True)
class RestoreReply(_Reply):
    """A checkpoint the kernel restored (lazily: ``loading`` is still being read)."""

    id: str
    bytes: int
    seconds: float
    restored: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)  # the checkpoint's
    failed: dict[str, str] = field(default_factory=dict)  # name -> why not restored
    notes: list[str] = field(default_factory=list)  # e.g. newer checkpoints passed over, and why
    rerun: list[dict[str, Any]] = field(default_factory=list)  # cells that made unsaved names
    loading: list[str] = field(default_factory=list)
    bytes_loading: int = 0
    gpus: int | None = None
    gpu_model: str | None = None
    #: the nonce this process holds (planted by the pause of this very process), None in
    #: a fresh kernel: the server learns whether the process itself came back with the
    #: restore's own answer, not with a second call
    nonce: str | None = None
    steps: list[list] = field(default_factory=list)  # as CheckpointReply's
    took: float = 0.0


@dataclass(frozen=True)
class CallProgress(_Reply):
    """How far a long kernel call has got, sent while it runs: its phase now (a
    checkpoint writes, then uploads to a bucket; a restore downloads, then reads), and
    the bytes done of those the phase knows of so far."""

    phase: Literal["writing", "uploading", "downloading", "reading"]
    done: int
    total: int

    def text(self) -> str:
        """``"uploading 3.1 / 8.0 GB"``."""
        return f"{self.phase} {format_bytes_of(self.done, self.total)}"


@dataclass(frozen=True)
class HibernationFacts(_Reply):
    """What a kernel says of itself before it is hibernated (``kernel_ops.hibernation_facts``):
    what it uses that the driver's process checkpoint cannot carry, named, and how much
    more host memory its process may use (the driver puts its GPU memory there)."""

    blockers: list[str] = field(default_factory=list)
    host_free: int | None = None  # bytes; None: no limit could be read
    host_limit: str = ""  # which limit says so
