"""The release-check probe: did the live process come back, or only its checkpoint?

Before an upgrade, :func:`plant` puts a random nonce where only the running
kernel process can keep it (an attribute of the ``sys`` module: not in the
user namespace, so no application checkpoint saves it), writes a file the
kernel reads back, puts a marker variable in the namespace and (by default)
takes an application checkpoint.  After the upgrade and resume,
:func:`check` reports:

* ``restored``: the kernel still holds the nonce - the very process came back
  (a platform snapshot restore);
* ``fresh-with-checkpoint``: the nonce is gone, but a checkpoint is
  restorable - the kernel's namespace already holds the marker (the server
  restored the checkpoint on resume), or a checkpoint is listed (and, with
  ``verify=True``, restoring it into the kernel brings the marker back);
* ``lost``: neither.

and whether the file is still there (``present``, ``changed``, ``missing``).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

from ..client import ClientError, PauseClient

MARKER = "pause_probe_marker"


@dataclass
class Planted:
    url: str
    path: str  # the notebook, server-relative
    nonce: str
    file: str  # absolute path, as the kernel sees it
    pid: int
    kernel_id: str
    checkpoint_id: str | None
    time: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_PLANT = """
def __jupyter_pause_probe():
    import json, os, sys
    nonce, name = {nonce!r}, {name!r}
    path = os.path.abspath(name)
    with open(path, "w") as f:
        f.write(nonce)
    with open(path) as f:  # the kernel uses the file
        assert f.read() == nonce
    sys._jupyter_pause_probe = {{"nonce": nonce, "file": path, "pid": os.getpid()}}
    print(json.dumps(sys._jupyter_pause_probe))
__jupyter_pause_probe(); del __jupyter_pause_probe
{marker} = {nonce!r}
"""

_OBSERVE = """
def __jupyter_pause_probe():
    import json, os, sys
    p = getattr(sys, "_jupyter_pause_probe", None)
    path = {file!r}
    content = None
    if os.path.exists(path):
        with open(path) as f:
            content = f.read()
    print(json.dumps({{
        "value": p.get("nonce") if isinstance(p, dict) else None,
        "marker": globals().get({marker!r}),
        "pid": os.getpid(),
        "file_exists": os.path.exists(path),
        "file_content": content,
    }}))
__jupyter_pause_probe(); del __jupyter_pause_probe
"""

_RESTORE = """
import json as __j
from jupyter_pause import kernel_ops as __ko
print(__j.dumps(__ko.restore(notebook={path!r}, dir=None, checkpoint_id={cid!r})))
del __j, __ko
"""


def kernel_of(client: PauseClient, path: str, open_if_missing: bool = False) -> str | None:
    s = client.session_for(path)
    if s and s.get("kernel"):
        return s["kernel"]["id"]
    if open_if_missing:
        return client.open_notebook(path)["kernel"]["id"]
    return None


def plant(
    client: PauseClient, path: str, *, checkpoint: bool = True, timeout: float = 600
) -> Planted:
    """Plant the nonce, the file and the marker in the notebook's running kernel."""
    kernel_id = kernel_of(client, path)
    if kernel_id is None:
        raise RuntimeError(f"{path} has no running kernel: open it (or run it) first")
    nonce = secrets.token_hex(12)
    name = f"jupyter-pause-probe-{nonce[:8]}.txt"  # visible: Jupyter may not delete hidden files
    info = client.evaluate(kernel_id, _PLANT.format(nonce=nonce, name=name, marker=MARKER), timeout)
    cid = None
    if checkpoint:
        op = client.wait(client.checkpoint(path), timeout)
        if op.get("outcome") != "succeeded":
            raise RuntimeError(f"the probe's checkpoint failed: {op.get('error')}")
        cps = client.checkpoints(path)
        cid = cps[-1]["id"] if cps else None
    return Planted(
        client.base_url, path, nonce, info["file"], int(info["pid"]), kernel_id, cid, time.time()
    )


def classify(planted_nonce: str, observed: dict[str, Any], checkpoint_restorable: bool) -> str:
    """The outcome from what the kernel holds now (pure; see the module docstring)."""
    if observed.get("value") == planted_nonce:
        return "restored"
    if observed.get("marker") == planted_nonce or checkpoint_restorable:
        return "fresh-with-checkpoint"
    return "lost"


def file_state(planted_nonce: str, observed: dict[str, Any]) -> str:
    if not observed.get("file_exists"):
        return "missing"
    return "present" if observed.get("file_content") == planted_nonce else "changed"


def observe(
    client: PauseClient, planted: Planted, kernel_id: str, timeout: float = 120
) -> dict[str, Any]:
    return client.evaluate(kernel_id, _OBSERVE.format(file=planted.file, marker=MARKER), timeout)


def check(
    client: PauseClient,
    planted: Planted,
    *,
    resume: bool = True,
    verify: bool = False,
    timeout: float = 600,
) -> dict[str, Any]:
    """Observe the notebook's kernel now and classify it.

    ``resume``: if the session is paused, resume it first (as the returning
    user would); otherwise a kernel is opened for the notebook if none runs
    (a new session that opens the same file).  ``verify``: when the nonce is
    gone and the namespace lacks the marker, restore the listed checkpoint
    into the kernel to prove it restorable.
    """
    path = planted.path
    session = None
    with contextlib.suppress(ClientError):
        session = client.session_status(path)
    resumed = None
    if resume and session and session.get("state") in ("paused", "failed"):
        op = client.wait(client.resume(path), timeout)
        resumed = op.get("outcome")
    kernel_id = kernel_of(client, path, open_if_missing=True)
    obs = observe(client, planted, kernel_id)
    try:
        cps = client.checkpoints(path)
    except ClientError:
        cps = []
    restorable = False
    verified = None
    if obs.get("value") != planted.nonce and obs.get("marker") != planted.nonce and cps:
        restorable = True
        if verify:
            cid = (
                planted.checkpoint_id
                if any(c["id"] == planted.checkpoint_id for c in cps)
                else None
            )
            try:
                client.evaluate(kernel_id, _RESTORE.format(path=path, cid=cid), timeout)
                after = observe(client, planted, kernel_id)
                verified = after.get("marker") == planted.nonce
            except RuntimeError:
                verified = False
            restorable = bool(verified)
    outcome = classify(planted.nonce, obs, restorable)
    return {
        "outcome": outcome,
        "file": file_state(planted.nonce, obs),
        "path": path,
        "nonce": planted.nonce,
        "live_value": obs.get("value") == planted.nonce,
        "marker_in_namespace": obs.get("marker") == planted.nonce,
        "checkpoints": len(cps),
        "verified_restore": verified,
        "resumed": resumed,
        "pid_before": planted.pid,
        "pid_after": obs.get("pid"),
        "kernel_before": planted.kernel_id,
        "kernel_after": kernel_id,
        "file_path": planted.file,
    }


def save(planted: Planted, state_file: str) -> None:
    with open(state_file, "w") as f:
        json.dump(planted.to_json(), f, indent=1)


def load(state_file: str) -> Planted:
    with open(state_file) as f:
        return Planted(**json.load(f))
