"""The capacity outcome of a pause: what the released accelerator did meanwhile.

One :class:`CapacitySpan` per stretch of time and outcome; the ledger keeps
them as ``CAPACITY_OUTCOME`` events (server-wide, ``data`` = :meth:`CapacitySpan.to_json`)
and the report splits the accelerator-hours released by pausing by them.  Only
the Kubernetes backends can see nodes (``backends/kubernetes/nodes.py`` builds
the spans); elsewhere there are none, and the report says "node outcome
unknown".  Definitions in ``docs/accounting.md``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: another pod took the GPU (capacity to other work; the bill unchanged)
REUSED = "reused"
#: the node was deleted (the bill stopped)
SCALED_DOWN = "scaled-down"
#: the node stayed up with the GPU unallocated and nothing else on it (nothing saved)
IDLE = "idle"
#: the GPU was free, but other pods kept the node up (capacity freed, the bill unchanged)
KEPT_UP = "kept-up"
OUTCOMES = (REUSED, SCALED_DOWN, IDLE, KEPT_UP)


@dataclass
class CapacitySpan:
    """From ``start`` to ``end``, ``gpus`` of the released accelerators had ``outcome``."""

    outcome: str
    start: float
    end: float
    gpus: float
    share: float  # gpus / the accelerators released (what the report multiplies by)
    node: str
    accelerator: str = ""
    by_namespace: str = ""  # reused: the namespace of the pod that took the GPU
    by_class: str = ""  # reused: its workload class (:func:`workload_class`)

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CapacitySpan:
        return cls(
            outcome=str(data["outcome"]),
            start=float(data["start"]),
            end=float(data["end"]),
            gpus=float(data.get("gpus") or 0),
            share=float(data.get("share") or 0),
            node=str(data.get("node") or ""),
            accelerator=str(data.get("accelerator") or ""),
            by_namespace=str(data.get("by_namespace") or ""),
            by_class=str(data.get("by_class") or ""),
        )
