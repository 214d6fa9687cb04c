"""The environment a pod snapshot depends on, recorded at pause and compared before resume.

A GKE pod snapshot restores only onto the same GPU model and driver, the same
machine series, and an identical distilled pod spec (image included); anything
else silently cold-starts.  Recording what the pod had at pause lets the CLI
warn *before* a resume ("the image changed: the snapshot will not be used, your
notebooks come back from their checkpoints") and lets the server explain a cold
start afterwards.

Collected without importing torch (that costs seconds and a lot of memory in
the server): versions come from package metadata and ``torch/version.py``; the
GPU from ``nvidia-smi`` when present.  The environment variable :data:`ENV_FINGERPRINT`
(JSON) overrides fields, for tests and for platforms that know better.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: fields that override what is collected (JSON), for tests and platforms that know better
ENV_FINGERPRINT = "JUPYTER_PAUSE_FINGERPRINT"

ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
MACHINE_FAMILY_LABEL = "cloud.google.com/machine-family"
GPU_RESOURCE = "nvidia.com/gpu"

# field -> what a difference means for a snapshot restore
FIELDS: dict[str, str] = {
    "accelerator": "the GPU type differs, and a snapshot cannot be restored onto another GPU type",
    "gpu_model": "the GPU model differs, and a snapshot cannot be restored onto another GPU model",
    "gpu_count": "the number of GPUs differs",
    "gpu_driver": "the GPU driver differs, and a snapshot needs the same driver version",
    "image": "the image differs, and a snapshot needs an identical pod spec",
    "runtime_class": "the runtime class differs, and a snapshot needs GKE Sandbox (gvisor)",
    "machine_family": "the machine series differs, and a snapshot needs the same machine series",
    "image_config": "the workspace's image option differs, and a snapshot needs an identical pod spec",
    "pod_config": "the workspace's pod option (GPU type, resources) differs",
    "torch": "the torch version differs",
    "cuda": "the CUDA version differs",
}


@dataclass
class Difference:
    field: str
    paused: Any
    now: Any
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _main_container(spec: dict, container: str | None = None) -> dict:
    containers = spec.get("containers") or []
    if container:
        for c in containers:
            if c.get("name") == container:
                return c
    return containers[0] if containers else {}


def from_pod_spec(spec: dict, container: str | None = None) -> dict[str, Any]:
    """What a pod (template) spec says: image, accelerator, GPU count, runtime class."""
    spec = spec or {}
    main = _main_container(spec, container)
    selector = spec.get("nodeSelector") or {}
    limits = (main.get("resources") or {}).get("limits") or {}
    out: dict[str, Any] = {}
    if main.get("image"):
        out["image"] = main["image"]
    if selector.get(ACCELERATOR_LABEL):
        out["accelerator"] = selector[ACCELERATOR_LABEL]
    if selector.get(MACHINE_FAMILY_LABEL):
        out["machine_family"] = selector[MACHINE_FAMILY_LABEL]
    if limits.get(GPU_RESOURCE) is not None:
        out["gpu_count"] = int(limits[GPU_RESOURCE])
    if spec.get("runtimeClassName"):
        out["runtime_class"] = spec["runtimeClassName"]
    return out


def from_pod(pod: dict | None, container: str | None = None) -> dict[str, Any]:
    return from_pod_spec((pod or {}).get("spec") or {}, container)


def _torch_versions() -> dict[str, str]:
    out = {}
    try:
        out["torch"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return out
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec and spec.origin:
        version_py = Path(spec.origin).parent / "version.py"
        try:
            m = re.search(
                r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", version_py.read_text(), re.M
            )
            if m:
                out["cuda"] = m.group(1)
        except OSError:
            pass
    return out


def _nvidia_smi() -> dict[str, Any]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        text = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [[p.strip() for p in line.split(",")] for line in text.splitlines() if line.strip()]
    if not rows:
        return {}
    return {"gpu_model": rows[0][0], "gpu_driver": rows[0][1], "gpus_visible": len(rows)}


def collect(pod: dict | None = None, container: str | None = None) -> dict[str, Any]:
    """The fingerprint of this server's environment (and of its pod, when given)."""
    out: dict[str, Any] = {}
    out.update(from_pod(pod, container))
    # The image actually running (a digest pins it) beats the spec's tag.
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("imageID") and status.get("image") == out.get("image"):
            out["image_id"] = status["imageID"]
            break
    out.update(_torch_versions())
    out.update(_nvidia_smi())
    override = os.environ.get(ENV_FINGERPRINT)
    if override:
        with contextlib.suppress(ValueError):
            out.update(json.loads(override))
    return out


def compare(paused: dict[str, Any] | None, now: dict[str, Any] | None) -> list[Difference]:
    """Known fields that differ between the pause and the resume target.

    Fields unknown on either side (e.g. the driver, before the pod runs) are not
    differences; see :func:`unknown`.
    """
    paused, now = paused or {}, now or {}
    out = []
    for key, why in FIELDS.items():
        a, b = paused.get(key), now.get(key)
        if a is None or b is None or str(a) == str(b):
            continue
        out.append(Difference(key, a, b, f"{why} ({a} at pause, {b} now)"))
    return out


def unknown(paused: dict[str, Any] | None, now: dict[str, Any] | None) -> list[str]:
    """Fields recorded at pause that cannot be checked against the target yet."""
    paused, now = paused or {}, now or {}
    return [k for k in FIELDS if paused.get(k) is not None and now.get(k) is None]


def parse_target(pairs: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` pairs from ``--target`` (e.g. ``gpu_driver=570.86``)."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or key not in FIELDS:
            raise ValueError(
                f"--target {pair!r}: expected KEY=VALUE with KEY in {', '.join(FIELDS)}"
            )
        out[key] = value
    return out
