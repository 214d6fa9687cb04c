"""What a stopping server saves, without a server: ``save_all`` over
the fakes (real checkpoint files), and start-up's view of kernels that vanished.
The same with real server processes and signals: test_shutdown.py."""

import asyncio

from jupyter_pause.engine import api as engine
from jupyter_pause.ledger import EventType
from jupyter_pause.lifecycle import State
from jupyter_pause.server.explain import paused_by
from jupyter_pause.server.shutdown import save_all

from .fakes import FakeBackend, make_wired

NOTEBOOKS = ("a.ipynb", "b.ipynb", "c.ipynb")


class ServerScopeBackend(FakeBackend):
    """A platform whose release stops the whole server (JupyterHub, Kubernetes)."""

    scope = "server"
    released: list

    async def release(self, sessions, shutdown_kernel):
        self.released.append([s.path for s in sessions])
        raise AssertionError("a stopping server must not release through the platform")


def running(manager, path, value):
    session = manager.store.get(path)
    session.state = State.RUNNING
    session.kernel_id = manager.kernel_manager.start({"x": value})
    manager.reconciler.session_manager.paths[path] = session.kernel_id
    return session


async def test_every_live_notebook_is_paused_on_its_checkpoint_and_the_platform_not_asked(
    tmp_path,
):
    parts, manager = make_wired(tmp_path, notebooks=NOTEBOOKS, backend=ServerScopeBackend())
    manager.backend.released = []
    sessions = [running(manager, path, i) for i, path in enumerate(NOTEBOOKS)]

    report = await save_all(manager, parts, grace=60, concurrency=2)

    assert sorted(report.paused) == sorted(NOTEBOOKS) and report.not_saved == []
    assert manager.backend.released == []
    assert manager.kernel_manager.kernels == {}  # each kernel stopped, as a pause stops it
    for i, session in enumerate(sessions):
        assert session.state == State.PAUSED and not session.busy
        assert session.operation.outcome == "succeeded"
        assert paused_by(session) == "server-shutdown"
        restored = {}
        engine.restore(
            dir=manager.checkpointer.checkpoint_dir,
            notebook=session.path,
            namespace=restored,
            progress=False,
        )
        assert restored == {"x": i}
    requested = manager.ledger.events(types=[EventType.PAUSE_REQUESTED])
    assert {e.data["reason"] for e in requested} == {"server-shutdown"}
    assert len(manager.ledger.events(types=[EventType.PAUSED])) == len(NOTEBOOKS)


async def test_a_kernel_busy_past_the_grace_is_named_not_saved_and_failed(tmp_path):
    parts, manager = make_wired(tmp_path, notebooks=NOTEBOOKS[:2])
    idle = running(manager, NOTEBOOKS[0], 1)
    busy = running(manager, NOTEBOOKS[1], 2)
    manager.kernel_manager.get_kernel(busy.kernel_id).execution_state = "busy"

    report = await save_all(manager, parts, grace=2, concurrency=2)

    assert report.paused == [idle.path] and idle.state == State.PAUSED
    assert [(n.path, n.why) for n in report.not_saved] == [(busy.path, "kernel busy")]
    assert busy.state == State.FAILED and not busy.busy
    assert "not saved" in busy.error and busy.operation.outcome == "failed"
    [event] = manager.ledger.events(types=[EventType.NOT_SAVED])
    assert event.path == busy.path and event.data["why"] == "kernel busy"
    # nothing was written for it
    assert (
        engine.list_checkpoints(dir=manager.checkpointer.checkpoint_dir, notebook=busy.path) == []
    )


async def test_a_cell_that_ends_within_the_grace_is_waited_for_then_saved(tmp_path):
    parts, manager = make_wired(tmp_path)
    session = running(manager, "nb.ipynb", 7)
    kernel = manager.kernel_manager.get_kernel(session.kernel_id)
    kernel.execution_state = "busy"

    async def cell_ends():
        await asyncio.sleep(0.5)
        kernel.execution_state = "idle"

    ending = asyncio.ensure_future(cell_ends())
    report = await save_all(manager, parts, grace=60, concurrency=1)
    await ending

    assert report.paused == ["nb.ipynb"] and session.state == State.PAUSED


async def test_start_up_says_at_once_that_a_kernel_vanished_with_the_server(tmp_path):
    """A server killed (or stopped without saving) left notebooks ``running``; the
    next one says the truth before its first status: failed, which checkpoint to
    resume from; a paused one stays paused."""
    parts, manager = make_wired(tmp_path, notebooks=NOTEBOOKS)
    with_checkpoint = manager.store.get(NOTEBOOKS[0])
    with_checkpoint.state = State.RUNNING
    with_checkpoint.kernel_id = "kernel-of-the-dead-server"
    saved = engine.checkpoint(
        dir=manager.checkpointer.checkpoint_dir,
        notebook=NOTEBOOKS[0],
        namespace={"x": 1},
        progress=False,
    ).id
    without = manager.store.get(NOTEBOOKS[1])
    without.state = State.READY
    without.kernel_id = "another-kernel-of-the-dead-server"
    paused = manager.store.get(NOTEBOOKS[2])
    paused.state = State.PAUSED

    await manager.recover()

    assert with_checkpoint.state == State.FAILED and with_checkpoint.kernel_id is None
    assert "lost" in with_checkpoint.error and saved in with_checkpoint.error
    assert without.state == State.FAILED and "no checkpoint" in without.error
    assert paused.state == State.PAUSED
    await manager.resume(NOTEBOOKS[0])
    while manager.tasks.all:
        await asyncio.gather(*list(manager.tasks.all), return_exceptions=True)
    assert with_checkpoint.state == State.READY


class StoppingPlatform(FakeBackend):
    """A platform whose release returns only once the server stops (a Kubernetes
    pause waits for the pod to go; the pod's SIGTERM is this server stopping)."""

    scope = "server"

    async def release(self, sessions, shutdown_kernel):
        self.releasing.set()
        await asyncio.Event().wait()


async def test_a_pause_whose_checkpoint_is_committed_is_not_waited_for_nor_named(tmp_path):
    parts, manager = make_wired(tmp_path, backend=StoppingPlatform())
    manager.backend.releasing = asyncio.Event()
    session = running(manager, "nb.ipynb", 3)
    await manager.pause("nb.ipynb")
    await asyncio.wait_for(manager.backend.releasing.wait(), 60)
    assert session.state == State.PAUSING

    report = await save_all(manager, parts, grace=30, concurrency=1)

    assert report.paused == ["nb.ipynb"] and report.not_saved == []
    assert not manager.ledger.events(types=[EventType.NOT_SAVED])
    await manager.close()  # the release is left to the platform; recovery settles it
    assert session.last_checkpoint["id"] in [
        c.id
        for c in engine.list_checkpoints(
            dir=manager.checkpointer.checkpoint_dir, notebook=session.path
        )
    ]


async def test_a_kernel_slow_to_stop_after_its_state_is_saved_is_waited_for(tmp_path):
    """The grace bounds the saves: a notebook whose state is saved and whose kernel is
    still stopping when the grace ends is paused, not named unsaved, and its kernel's stop
    is not cancelled half way (Jupyter's clean-up, which stops it next, would hang)."""
    parts, manager = make_wired(tmp_path)
    session = running(manager, "nb.ipynb", 3)
    stop = manager.kernel_manager.shutdown_kernel
    loop = asyncio.get_running_loop()
    grace_ends = loop.time() + 2

    async def slow_stop(kernel_id, now=False):  # it ends after the grace
        await asyncio.sleep(grace_ends + 0.5 - loop.time())
        await stop(kernel_id, now)

    manager.kernel_manager.shutdown_kernel = slow_stop
    report = await save_all(manager, parts, grace=2, concurrency=1)

    assert report.paused == ["nb.ipynb"] and report.not_saved == []
    assert session.state == State.PAUSED and session.operation.outcome == "succeeded"
    assert manager.kernel_manager.kernels == {}
    assert manager.ledger.events(types=[EventType.NOT_SAVED]) == []
