"""What the server asks a kernel to do, run inside the kernel.

The server calls these through :func:`jupyter_pause.server.kernels.call_in_kernel`
as a silent user expression; each returns plain JSON-able data.  They are thin
on purpose: the checkpoint logic is the engine's, the lifecycle the server's.
While a checkpoint or a restore runs, how far it is goes to the server as display
data of its call (:func:`_progress_to_server`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import io
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from .magics import ServerLink, ServerLinkError
from .protocol import (
    PROGRESS_MIME,
    CallProgress,
    CheckpointReply,
    HibernationFacts,
    RestoreReply,
    kernel_steps,
    user_skipped,
)

# The nonce planted at pause, held only in this process's memory.  A kernel
# that still knows it after a resume is the very process that was paused
# (restored from a platform snapshot); a fresh kernel cannot know it.
_live_nonce: str | None = None

#: when the call running now reached this kernel (monotonic): the origin of the steps
#: a reply names (protocol.kernel_steps)
_call_started = 0.0


def call(function: str, kwargs_json: str) -> str:
    """Dispatch ``function(**kwargs)`` and wrap the outcome as JSON."""
    global _call_started
    _call_started = time.monotonic()
    try:
        target = _OPERATIONS[function]
        return json.dumps({"result": target(**json.loads(kwargs_json))}, default=str)
    except Exception as e:  # reported to the server, which tells the user
        message = f"{type(e).__name__}: {e}"
        return json.dumps({"error": message, "traceback": traceback.format_exc()})


def checkpoint(
    notebook: str,
    dir: str | None,
    nonce: str | None = None,
    keep: int | None = None,
    operation: str | None = None,
    autosave: bool = False,
    lost_from: str | None = None,
    upload: bool = True,
):
    """Checkpoint the whole namespace; plant ``nonce`` in memory and in the manifest.

    ``operation`` (the server's operation id) goes into the manifest too: a
    server that restarts after dying mid-pause finds out from it whether the
    pause's checkpoint was committed.  ``lost_from``: this is a fresh kernel after
    a crash, and its state was that checkpoint's (the result's ``lost`` says what
    this checkpoint does not have of it, and which checkpoint still does).
    ``autosave`` marks it as the server's background save (``autosave: true``),
    kept in its own retention budget.  ``upload=False``: with a bucket, commit in the
    local cache only; the server puts it in the bucket (server/staging.py).
    """
    global _live_nonce
    from .engine.api import checkpoint as engine_checkpoint
    from .engine.checks import AUTOSAVE

    metadata = {
        k: v
        for k, v in (("pause_nonce", nonce), ("operation_id", operation), (AUTOSAVE, autosave))
        if v
    } or None
    started = time.monotonic() - _call_started
    with _progress_to_server():
        result = engine_checkpoint(
            notebook=notebook,
            dir=dir,
            keep=keep,
            metadata=metadata,
            progress=False,
            lost_from=lost_from,
            upload=upload,
        )
    if nonce:
        _live_nonce = nonce
        atexit.unregister(_exit_now)  # once, however many pauses this process tries
        atexit.register(_exit_now)  # a pause: this process is stopped next
    return CheckpointReply(
        id=result.id,
        bytes=result.bytes_total,
        bytes_written=result.bytes_written,
        seconds=result.seconds,
        saved=list(result.saved),
        skipped=dict(result.skipped),
        lost=dict(result.lost),
        **gpu_usage(),
        steps=kernel_steps("checkpoint started", started, result.phases),
        took=time.monotonic() - _call_started,
    ).to_json()


def _exit_now() -> None:
    """The exit of a process whose state a pause has saved: the other exit handlers run
    (the user's, IPython's history, torch's), open files are flushed, and the process ends,
    without the interpreter's teardown of every module, which frees only what the
    process's end frees and held the accelerator meanwhile: 0.45 s once torch is imported
    (docs/ARCHITECTURE.md, "The timeline of an operation"). Registered last, it runs
    first, and runs the others itself."""
    atexit.unregister(_exit_now)
    atexit._run_exitfuncs()
    # what teardown would have flushed: files the user left open (not ipykernel's
    # streams, whose flush waits for a thread that has stopped)
    for obj in gc.get_objects():
        if isinstance(obj, (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)):
            with contextlib.suppress(Exception):
                obj.flush()
    os._exit(0)


def restore(
    notebook: str,
    dir: str | None,
    checkpoint_id: str | None = None,
    handoff: dict | None = None,
    operation: str | None = None,
    or_older: bool = False,
    synced: bool = False,
):
    """Restore a checkpoint into this (fresh) kernel's namespace.

    Lazy unless ``engine.lazy.ENV_RESTORE`` says ``eager``: returns once the graph and the small
    objects are back; large tensors follow in the background (engine/lazy.py), and a
    cell that uses one waits for it alone. ``handoff``: the server's memory holding the
    checkpoint's large files (engine/handoff.py). ``or_older``: ``checkpoint_id`` is the
    one the server chose (engine/plan.choose_for_resume); if the restore finds its tensor
    bytes damaged, the newest older one that verifies. ``operation``: the server's resume;
    objects the background load finds damaged are reported to it (:func:`_report_damage`).
    ``synced``: the server listed the bucket for this resume already (once per resume).
    """
    from .engine import lazy
    from .engine.api import restore as engine_restore

    started = time.monotonic() - _call_started
    with _progress_to_server():
        result = engine_restore(
            checkpoint_id,
            notebook=notebook,
            dir=dir,
            handoff=handoff,
            or_older=or_older,
            synced=synced,
        )
    load = lazy.active()
    if operation and load is not None and result.loading:
        load.on_damage = functools.partial(_report_damage, notebook, result.id, operation)
    return RestoreReply(
        id=result.id,
        restored=list(result.restored),
        bytes=result.bytes_read,
        seconds=result.seconds,
        metadata=result.metadata,
        failed=dict(result.failed),
        notes=list(result.notes),
        rerun=list(result.rerun),
        loading=list(result.loading),
        bytes_loading=result.bytes_loading,
        **gpu_usage(),
        nonce=_live_nonce,
        steps=kernel_steps("restore started", started, result.phases),
        took=time.monotonic() - _call_started,
    ).to_json()


@contextlib.contextmanager
def _progress_to_server() -> Iterator[None]:
    """While inside, the engine's progress goes to the server: each ``(phase, done,
    total)`` as a :class:`CallProgress` in display data of the server's call (IOPub, its
    parent the call's request, captured here), which ``call_in_kernel`` reads; a
    notebook's frontend sent no such request and shows nothing.  Sent from whichever
    thread counts, and never after the call (a lazy restore's reads go on without it).
    Nothing outside a kernel."""
    from IPython import get_ipython

    from .engine.progress import reported_to

    publisher = getattr(get_ipython(), "display_pub", None)
    session = getattr(publisher, "session", None)
    socket = getattr(publisher, "pub_socket", None)
    if session is None or socket is None:
        yield
        return
    parent = publisher.parent_header
    call_ended = threading.Event()

    def send(phase: str, done: int, total: int) -> None:
        if call_ended.is_set():
            return
        data = CallProgress(phase=phase, done=done, total=total).to_json()
        content = {"data": {PROGRESS_MIME: data}, "metadata": {}, "transient": {}}
        # only a display: a checkpoint never fails because the server could not be told
        with contextlib.suppress(Exception):
            session.send(socket, "display_data", content, parent=parent, ident=publisher.topic)

    try:
        with reported_to(send):
            yield
    finally:
        call_ended.set()


def _report_damage(
    notebook: str, checkpoint_id: str, operation: str, recovered: dict[str, str], lost: list[str]
) -> None:
    """Tell the server whose resume restored this kernel what its background load found
    damaged: objects loaded from older checkpoints instead (name -> checkpoint id), and
    objects no checkpoint has a sound copy of.  Best effort, on a thread: no cell waits
    for the server, and a kernel without one keeps its note (printed before the cell)."""
    try:
        server = ServerLink.from_environment()
    except ServerLinkError:
        return  # not a kernel of a server with jupyter-pause
    body = {
        "path": notebook,
        "checkpoint_id": checkpoint_id,
        "operation_id": operation,
        "recovered": recovered,
        "lost": lost,
    }

    def send() -> None:
        with contextlib.suppress(ServerLinkError):
            server.post("sessions/restored", body)

    threading.Thread(target=send, name="jp-restore-report", daemon=True).start()


def warm_up() -> list[str]:
    """A spare kernel (server/prewarm.py) imports what a restore needs before it is asked
    to restore: the engine, and torch and numpy where installed. No GPU is initialised."""
    import importlib
    import importlib.util

    from .engine import api  # noqa: F401

    done = []
    for name in ("numpy", "torch"):
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
            done.append(name)
    return done


def gpu_usage() -> dict[str, Any]:
    """How many GPUs this process holds memory on, and which model (for accounting).

    Only asks torch when the notebook imported it and initialised CUDA.
    Nothing is said when no GPU is in use: reports then count the session's
    allocation as one accelerator (the slot it was given), as documented in
    docs/accounting.md.
    """
    from .engine.lazy import module_ready

    if not module_ready("torch"):  # not imported, or still importing after a lazy restore
        return {}
    torch = sys.modules["torch"]
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    used = [i for i in range(torch.cuda.device_count()) if torch.cuda.memory_reserved(i) > 0]
    if not used:
        return {}
    return {"gpus": len(used), "gpu_model": torch.cuda.get_device_name(used[0])}


def hibernation_facts() -> dict[str, Any]:
    """What the server must know before it hibernates this kernel in place
    (server/hibernate.py): what it uses that the driver cannot checkpoint, and the host
    memory its process may still use. Reads only what is loaded; initialises nothing."""
    from .engine import memory
    from .engine.lazy import module_ready

    blockers = []
    if module_ready("torch"):
        blockers += _torch_blockers(sys.modules["torch"])
    cupy = sys.modules.get("cupy") if module_ready("cupy") else None
    if cupy is not None and getattr(cupy.cuda.get_allocator(), "__name__", "") == "malloc_managed":
        blockers.append("managed (unified) memory: CuPy allocates with malloc_managed")
    room = memory.headroom()
    return HibernationFacts(blockers, room.free, room.limit).to_json()


def _torch_blockers(torch) -> list[str]:
    """NCCL process groups and GPU memory shared through CUDA IPC, as torch knows them."""
    found = []
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        backend = str(dist.get_backend())
        if "nccl" in backend.lower():
            found.append(f"NCCL (a torch.distributed process group, backend {backend})")
    reductions = sys.modules.get("torch.multiprocessing.reductions")
    if reductions is not None:
        # torch keys the CUDA storages it received from another process by (IPC handle,
        # offset); CPU storages by file descriptor ids (ints) or by name
        shared = [
            key
            for key, ref in list(reductions.shared_cache.items())
            if isinstance(key, tuple) and key and isinstance(key[0], bytes) and not ref.expired()
        ]
        if shared:
            found.append(
                f"CUDA IPC: {len(shared)} GPU storage(s) received from another process "
                "(torch.multiprocessing)"
            )
    return found


def unsaveable() -> dict[str, str]:
    """The user's variables a checkpoint would leave out now, with why, so a
    person can decide before pausing.  Each is pickled to nowhere, as the
    checkpoint itself would try (tensors are only referenced, not copied)."""
    from .engine import namespace as ns_mod
    from .engine import pickling

    ns, hidden = ns_mod.user_namespace()
    candidates, skipped, _ = ns_mod.select(ns, hidden)
    for name, obj in candidates.items():
        reason = pickling.probe(obj, ns)
        if reason:
            skipped[name] = reason
    return user_skipped(skipped)


def live_nonce() -> str | None:
    return _live_nonce


_OPERATIONS: dict[str, Any] = {
    "checkpoint": checkpoint,
    "restore": restore,
    "live_nonce": live_nonce,
    "unsaveable": unsaveable,
    "warm_up": warm_up,
    "hibernation_facts": hibernation_facts,
}
