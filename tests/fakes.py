"""Fakes for the Jupyter Server parts the PauseManager talks to, so that the
lifecycle and the manager can be tested without a server.

The checkpoint files are real: the fake kernel's "checkpoint" and "restore"
run the real engine on a plain dict as the namespace.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from pathlib import Path

from jupyter_pause import kernel_ops
from jupyter_pause.backends.base import PauseBackend, ReleaseFacts
from jupyter_pause.clock import SYSTEM
from jupyter_pause.engine import api as engine
from jupyter_pause.idle_policy import load_classes
from jupyter_pause.ledger import Ledger
from jupyter_pause.lifecycle import SessionStore
from jupyter_pause.server.classify import WorkloadClassifier
from jupyter_pause.server.collaborators import Collaborators, build_collaborators
from jupyter_pause.server.idle_watcher import IdleWatcher
from jupyter_pause.server.kernels import KernelCallError
from jupyter_pause.server.manager import PauseManager
from jupyter_pause.server.ports import Policies
from jupyter_pause.server.scheduler import ResumeScheduler

_ids = itertools.count(1)


class FakeProvisioner:
    """A fake kernel's process: this test's own (a hibernate asks the GPU driver about
    it; tests/fake_gpu_driver.py pretends the GPU memory it holds)."""

    pid = os.getpid()


class FakeKernel:
    def __init__(self, kernel_id: str, namespace: dict | None = None):
        self.kernel_id = kernel_id
        self.execution_state = "idle"
        self.namespace = namespace if namespace is not None else {}
        self.nonce = None
        self.provisioner = FakeProvisioner()


class FakeKernelManager:
    def __init__(self):
        self.kernels: dict[str, FakeKernel] = {}

    def start(self, namespace: dict | None = None) -> str:
        kernel_id = f"kernel-{next(_ids)}"
        self.kernels[kernel_id] = FakeKernel(kernel_id, namespace)
        return kernel_id

    def get_kernel(self, kernel_id: str) -> FakeKernel:
        return self.kernels[kernel_id]

    def __contains__(self, kernel_id) -> bool:
        return kernel_id in self.kernels

    async def shutdown_kernel(self, kernel_id: str, now: bool = False) -> None:
        del self.kernels[kernel_id]

    async def interrupt_kernel(self, kernel_id: str) -> None:
        self.kernels[kernel_id].execution_state = "idle"


class FakeSessionManager:
    """Jupyter's notebook sessions: path -> kernel id."""

    def __init__(self, kernel_manager: FakeKernelManager):
        self.kernel_manager = kernel_manager
        self.paths: dict[str, str] = {}

    async def list_sessions(self) -> list[dict]:
        return [
            {"path": path, "kernel": {"id": kid, "name": "python3", "execution_state": "idle"}}
            for path, kid in self.paths.items()
            if kid in self.kernel_manager
        ]

    async def create_session(self, path, name, type, kernel_name, kernel_id=None):
        # like Jupyter's: an existing kernel (a pre-warmed spare) is adopted, else one starts
        kernel_id = kernel_id or self.kernel_manager.start()
        self.paths[path] = kernel_id
        return {"path": path, "kernel": {"id": kernel_id, "name": kernel_name}}


class FakeContentsManager:
    def __init__(self, files=()):
        self.files = set(files)

    def file_exists(self, path: str) -> bool:
        return path in self.files


class FakeClock:
    """A wall clock and a monotonic clock that a test moves: ``advance`` lets
    time pass (both move), ``step`` moves the wall clock only (an NTP step, a
    VM resumed from suspend, a laptop lid)."""

    def __init__(self, wall: float | None = None):
        self.wall = time.time() if wall is None else wall
        self.mono = 1000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds

    def step(self, seconds: float) -> None:
        self.wall += seconds


class FakeActivity:
    """The ActivityMonitor's interface, without IOPub."""

    def __init__(self, clock=SYSTEM):
        self.listeners = []
        self.kernels = {}
        self.clock = clock

    def watch(self, kernel_id, path):
        from jupyter_pause.server.activity import KernelActivity

        return self.kernels.setdefault(
            kernel_id, KernelActivity(kernel_id=kernel_id, path=path, clock=self.clock)
        )

    def unwatch(self, kernel_id):
        self.kernels.pop(kernel_id, None)

    def for_path(self, path):
        return next((a for a in self.kernels.values() if a.path == path), None)

    def close(self):
        self.kernels.clear()


class FakeBackend(PauseBackend):
    name = "fake"

    async def release(self, sessions, shutdown_kernel):
        for session in sessions:
            if session.kernel_id:
                await shutdown_kernel(session.kernel_id)
        return ReleaseFacts(released_at=time.time())


def kernel_call(checkpoint_dir: Path):
    """``call_in_kernel`` for fake kernels: the real engine on the kernel's dict."""

    async def call(kernel: FakeKernel, function: str, timeout: float = 60, **kw):
        if function == "checkpoint":
            metadata = {
                k: v
                for k, v in (
                    ("pause_nonce", kw.get("nonce")),
                    ("operation_id", kw.get("operation")),
                )
                if v
            }
            try:
                result = engine.checkpoint(
                    dir=checkpoint_dir,
                    notebook=kw["notebook"],
                    keep=kw.get("keep"),
                    metadata=metadata,
                    progress=False,
                    namespace=kernel.namespace,
                )
            except Exception as e:
                raise KernelCallError(f"{type(e).__name__}: {e}") from e
            kernel.nonce = kw.get("nonce") or kernel.nonce
            return {
                "id": result.id,
                "bytes": result.bytes_total,
                "bytes_written": result.bytes_written,
                "seconds": result.seconds,
                "skipped": {},
            }
        if function == "restore":
            result = engine.restore(
                kw.get("checkpoint_id"),
                dir=checkpoint_dir,
                notebook=kw["notebook"],
                namespace=kernel.namespace,
                progress=False,
                or_older=kw.get("or_older", False),
            )
            return {
                "id": result.id,
                "bytes": result.bytes_read,
                "seconds": result.seconds,
                "nonce": kernel.nonce,
            }
        if function == "live_nonce":
            return kernel.nonce
        if function == "hibernation_facts":  # what this process says of itself
            return kernel_ops.hibernation_facts()
        raise AssertionError(function)

    return call


def make_manager(tmp_path: Path, *args, **kwargs) -> PauseManager:
    """A PauseManager over fakes, its checkpoints and session file under ``tmp_path``."""
    return make_wired(tmp_path, *args, **kwargs)[1]


def make_wired(
    tmp_path: Path,
    notebooks=("nb.ipynb",),
    store: SessionStore | None = None,
    clock=SYSTEM,
    policies: Policies = Policies(),
    hibernator=None,
    backend=None,
    ledger: Ledger | None = None,
) -> tuple[Collaborators, PauseManager]:
    """A PauseManager over fakes, and its collaborators, wired as the server wires them
    (:func:`.build_collaborators`)."""
    kernels = FakeKernelManager()
    contents = FakeContentsManager(notebooks)
    log = logging.getLogger("test")
    checkpoint_dir = tmp_path / "checkpoints"
    classifier = WorkloadClassifier(
        classes=load_classes(),
        default_class="gpu-interactive",
        kernel_manager=kernels,
        contents_manager=contents,
        log=log,
    )
    parts = build_collaborators(
        kernel_manager=kernels,
        session_manager=FakeSessionManager(kernels),
        contents_manager=contents,
        backend=backend if backend is not None else FakeBackend(),
        store=store or SessionStore(tmp_path / "sessions.json", clock=clock),
        ledger=ledger if ledger is not None else Ledger(clock=clock),
        checkpoint_dir=str(checkpoint_dir),
        keep_checkpoints=3,
        kernel_call_timeout=60,
        idle_wait_timeout=60,
        classifier=classifier,
        policies=policies,
        log=log,
        clock=clock,
        call=kernel_call(checkpoint_dir),
        activity=FakeActivity(clock),
        hibernator=hibernator,
    )
    manager = PauseManager(
        parts=parts,
        log=log,
        policies=policies,
    )
    manager.recovered.set()  # nothing to recover unless a test calls recover()
    return parts, manager


def idle_watcher_for(manager: PauseManager, clock, classes: dict) -> IdleWatcher:
    """An idle watcher over ``manager``'s parts, its notebooks of the classes
    ``classes`` (in the form of :func:`.load_classes`); it looks when a test calls
    ``check()``."""
    return IdleWatcher(
        operations=manager,
        store=manager.store,
        activity=manager.activity,
        ledger=manager.ledger,
        kernel_manager=manager.kernel_manager,
        classifier=WorkloadClassifier(
            classes=load_classes(classes),
            default_class="gpu-interactive",
            kernel_manager=manager.kernel_manager,
            contents_manager=manager.contents_manager,
            log=manager.log,
        ),
        interval=3600,
        log=manager.log,
        clock=clock,
    )


def scheduler_for(manager: PauseManager, clock, **options) -> ResumeScheduler:
    """The resume scheduler over ``manager``'s parts; it looks when a test calls
    ``check()``."""
    return ResumeScheduler(
        operations=manager,
        schedules=manager.schedules,
        store=manager.store,
        ledger=manager.ledger,
        log=logging.getLogger("test"),
        clock=clock,
        **options,
    )
