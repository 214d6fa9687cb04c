"""The lifecycle and the manager without a server: every state × operation,
recovery of abandoned operations, leases, claims that cannot be persisted."""

import asyncio
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time

import pytest

from jupyter_pause.engine import api as engine
from jupyter_pause.hibernate.client import Helper
from jupyter_pause.lifecycle import (
    LEASE_TIMEOUT,
    OPERATION_STATES,
    TRANSITIONS,
    LiveState,
    LostState,
    Operation,
    OperationInProgress,
    PersistenceError,
    Session,
    SessionStore,
    State,
)
from jupyter_pause.protocol import CallProgress
from jupyter_pause.server.bucket_sessions import RECORD_STATE
from jupyter_pause.server.errors import Conflict, PauseError
from jupyter_pause.server.hibernate import Hibernator

from .fake_gpu_driver import ENV, new_world, world
from .fakes import FakeClock, idle_watcher_for, make_manager

NB = "nb.ipynb"


async def settle(manager):
    """Wait for every operation task the manager started."""
    while manager.tasks.all:
        await asyncio.gather(*list(manager.tasks.all), return_exceptions=True)


def with_session(manager, state: State, *, kernel: bool, operation: Operation | None = None):
    session = manager.store.get(NB)
    session.state = state
    if kernel:
        session.kernel_id = manager.kernel_manager.start({"x": 41})
        manager.reconciler.session_manager.paths[NB] = session.kernel_id
    session.operation = operation
    return session


def earlier_checkpoint(manager, value=1):
    return engine.checkpoint(
        dir=manager.checkpointer.checkpoint_dir, notebook=NB, namespace={"x": value}, progress=False
    ).id


# What each operation does from each state (with a live kernel exactly when the
# state has one, a checkpoint on disk, and nothing else running): the state it
# ends in, or the HTTP status it is refused with.
EXPECTED = {
    (State.RUNNING, "pause"): State.PAUSED,
    (State.RUNNING, "checkpoint"): State.RUNNING,
    (State.RUNNING, "resume"): 409,
    (State.READY, "pause"): State.PAUSED,
    (State.READY, "checkpoint"): State.READY,  # it said "checkpointing -> ready"
    (State.READY, "resume"): 409,
    (State.PAUSED, "pause"): 409,
    (State.PAUSED, "checkpoint"): 409,
    (State.PAUSED, "resume"): State.READY,
    (State.FAILED, "pause"): 409,  # no kernel
    (State.FAILED, "checkpoint"): 409,  # no kernel
    (State.FAILED, "resume"): State.READY,
    (State.RUNNING, "hibernate"): State.HIBERNATED,
    (State.READY, "hibernate"): State.HIBERNATED,
    (State.PAUSED, "hibernate"): 409,
    (State.FAILED, "hibernate"): 409,
    (State.HIBERNATED, "hibernate"): 409,
    (State.HIBERNATED, "wake"): State.RUNNING,
    (State.HIBERNATED, "pause"): State.PAUSED,  # woken first
    (State.HIBERNATED, "checkpoint"): State.RUNNING,  # woken first
    (State.HIBERNATED, "resume"): 409,
    **{(s, "wake"): 409 for s in (State.RUNNING, State.READY, State.PAUSED, State.FAILED)},
}
BUSY = [State.CHECKPOINTING, State.PAUSING, State.RESUMING, State.WAITING_FOR_CAPACITY]
BUSY += [State.RESTORING, State.HIBERNATING, State.WAKING]


async def start(manager, kind):
    if kind == "pause":
        return await manager.pause(NB)
    if kind == "checkpoint":
        return await manager.checkpoint(NB)
    if kind == "hibernate":
        return await manager.hibernate(NB)
    if kind == "wake":
        return await manager.wake(NB)
    return await manager.resume(NB)


@pytest.fixture
def hibernator(tmp_path, monkeypatch):
    """A hibernator whose helper process calls the fake driver (tests/fake_gpu_driver.py),
    which says this test's process (every fake kernel's) holds 1 GiB of GPU memory; the
    test starts it (its helper) and closes it."""
    gpu = new_world(tmp_path / "gpu.json", gpus={0: 8 << 30})
    with world(gpu) as w:
        w["processes"][str(os.getpid())] = {"gpu": 0, "bytes": 1 << 30}
    monkeypatch.setenv(ENV, str(gpu))
    return Hibernator(
        Helper("tests.fake_gpu_driver.FakeDriver", log=logging.getLogger("test")),
        log=logging.getLogger("test"),
    )


@pytest.mark.parametrize("kind", ["pause", "checkpoint", "resume", "hibernate", "wake"])
@pytest.mark.parametrize("state", list(State))
async def test_every_state_and_operation(tmp_path, state, kind, hibernator):
    await hibernator.start()
    try:
        await one_state_and_operation(tmp_path, state, kind, hibernator)
    finally:
        await hibernator.close()


async def one_state_and_operation(tmp_path, state, kind, hibernator):
    manager = make_manager(tmp_path, hibernator=hibernator)
    earlier_checkpoint(manager)
    running = None
    if state in BUSY:
        # an operation another live server runs (its lease is fresh)
        running = Operation(kind="pause", path=NB, owner="elsewhere:1:x")
    if state == State.HIBERNATED:  # the way there is a hibernate
        with_session(manager, State.RUNNING, kernel=True)
        await manager.hibernate(NB)
        await settle(manager)
    with_session(manager, state, kernel=state.has_kernel and state != State.HIBERNATED,
                 operation=running)  # fmt: skip

    if state in BUSY:
        with pytest.raises(OperationInProgress):
            await start(manager, kind)
        assert manager.store.sessions[NB].state == state
        return
    expected = EXPECTED[(state, kind)]
    if expected == 409:
        with pytest.raises(PauseError) as refused:
            await start(manager, kind)
        assert isinstance(refused.value, Conflict)
        assert manager.store.sessions[NB].state == state
        assert not manager.store.sessions[NB].busy
        return
    op = await start(manager, kind)
    await settle(manager)
    assert op.outcome == "succeeded", op.error
    assert manager.store.sessions[NB].state == expected


def test_the_operation_table_only_names_states_a_claim_can_leave():
    for kind, states in OPERATION_STATES.items():
        first = {
            "pause": State.CHECKPOINTING,
            "checkpoint": State.CHECKPOINTING,
            "hibernate": State.HIBERNATING,
            "wake": State.WAKING,
        }.get(kind, State.RESUMING)
        for state in states:
            # a hibernated kernel is woken first, whatever the operation
            first_here = State.WAKING if state == State.HIBERNATED else first
            assert first_here in TRANSITIONS[state] or state == State.FAILED, (kind, state)


async def test_a_checkpoint_right_after_a_resume_keeps_the_session_ready(tmp_path):
    manager = make_manager(tmp_path)
    earlier_checkpoint(manager)
    with_session(manager, State.PAUSED, kernel=False)
    await manager.resume(NB)
    await settle(manager)
    assert manager.store.sessions[NB].state == State.READY

    op = await manager.checkpoint(NB)
    await settle(manager)
    assert op.outcome == "succeeded", op.error
    assert manager.store.sessions[NB].state == State.READY
    assert len(engine.list_checkpoints(dir=manager.checkpointer.checkpoint_dir, notebook=NB)) == 2


# ------------------------------------------------------------------ recovery


def dead_owner() -> str:
    """The lease owner of a server process on this machine that has exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return f"{socket.gethostname()}:{process.pid}:gone"


def abandoned(manager, kind, state, *, kernel, committed, earlier=True):
    """A session as a server killed mid-``kind`` left it in the session file."""
    if earlier:
        earlier_checkpoint(manager)
    op = Operation(kind=kind, path=NB, owner=dead_owner())
    session = with_session(manager, state, kernel=kernel, operation=op)
    if not kernel:
        session.kernel_id = "kernel-of-the-dead-server"
    if committed:
        engine.checkpoint(
            dir=manager.checkpointer.checkpoint_dir,
            notebook=NB,
            namespace={"x": 2},
            metadata={"operation_id": op.id, "pause_nonce": "n"},
            progress=False,
        )
    return session, op


@pytest.mark.parametrize(
    "kind, state, kernel, committed, ends, outcome",
    [
        ("pause", State.CHECKPOINTING, False, False, State.FAILED, "failed"),
        ("pause", State.CHECKPOINTING, False, True, State.PAUSED, "succeeded"),
        ("pause", State.PAUSING, False, True, State.PAUSED, "succeeded"),
        ("pause", State.CHECKPOINTING, True, False, State.RUNNING, "failed"),
        ("pause", State.PAUSING, True, True, State.RUNNING, "failed"),
        ("checkpoint", State.CHECKPOINTING, False, False, State.FAILED, "failed"),
        ("checkpoint", State.CHECKPOINTING, True, True, State.RUNNING, "failed"),
        ("resume", State.RESTORING, False, False, State.PAUSED, "failed"),
        ("resume", State.WAITING_FOR_CAPACITY, False, False, State.PAUSED, "failed"),
        ("resume", State.RESTORING, True, False, State.FAILED, "failed"),
        ("hibernate", State.HIBERNATING, True, False, State.FAILED, "failed"),
        ("wake", State.WAKING, True, False, State.FAILED, "failed"),
        ("hibernate", State.HIBERNATING, False, False, State.FAILED, "failed"),
    ],
)
async def test_start_up_resolves_what_a_dead_server_left_running(
    tmp_path, kind, state, kernel, committed, ends, outcome
):
    manager = make_manager(tmp_path)
    session, op = abandoned(manager, kind, state, kernel=kernel, committed=committed)

    await manager.recover()

    assert session.state == ends
    assert op.outcome == outcome and op.finished
    assert not session.busy
    if ends == State.FAILED and not kernel:
        # the truth: the state is lost, and which checkpoint to resume from
        earlier = engine.list_checkpoints(dir=manager.checkpointer.checkpoint_dir, notebook=NB)[
            0
        ].id
        assert "lost" in session.error and earlier in session.error
    if ends == State.PAUSED and committed:
        assert session.kernel_id is None
        assert (
            session.last_checkpoint["id"]
            == engine.list_checkpoints(dir=manager.checkpointer.checkpoint_dir, notebook=NB)[-1].id
        )
    if kernel:
        assert session.kernel_id in manager.kernel_manager
    # and the notebook is free again: the next operation is not refused with 409
    if ends in (State.PAUSED, State.FAILED) and not kernel:
        await manager.resume(NB)
        await settle(manager)
        assert session.state == State.READY


@pytest.mark.parametrize("state", [State.READY, State.RUNNING])
@pytest.mark.parametrize("kernel", [True, False])
async def test_start_up_resolves_a_resumed_notebook_from_its_kernel(tmp_path, state, kernel):
    """A resumed notebook (its lazy restore's background load finished or not): a kernel
    that survived is adopted; one that stopped with the server leaves it paused on the
    checkpoint its state came from, and a resume is not refused."""
    manager = make_manager(tmp_path)
    restored = earlier_checkpoint(manager)
    earlier_checkpoint(manager, value=2)  # a newer one: the error names the restored one
    session = with_session(manager, state, kernel=kernel)
    session.restored_from, session.state_checkpoint = "checkpoint", restored
    if not kernel:
        session.kernel_id = "kernel-of-the-dead-server"

    await manager.recover()

    if kernel:
        assert session.state == state and session.kernel_id in manager.kernel_manager
        return
    assert session.state == State.PAUSED and session.kernel_id is None
    assert restored in session.error
    await manager.resume(NB, restored)
    await settle(manager)
    assert session.state == State.READY


async def test_a_failed_pause_without_any_checkpoint_says_there_is_none(tmp_path):
    manager = make_manager(tmp_path)
    session, _ = abandoned(
        manager, "pause", State.CHECKPOINTING, kernel=False, committed=False, earlier=False
    )
    await manager.recover()
    assert session.state == State.FAILED
    assert "no checkpoint to resume from" in session.error


async def test_a_live_lease_is_respected_and_an_expired_one_is_taken_over(tmp_path):
    manager = make_manager(tmp_path)
    earlier_checkpoint(manager)
    op = Operation(kind="checkpoint", path=NB, owner="other-server:7:alive")
    session = with_session(manager, State.CHECKPOINTING, kernel=True, operation=op)

    await manager.recover()  # at start-up, too: another live server owns it
    with pytest.raises(OperationInProgress):
        await manager.checkpoint(NB)
    assert session.busy

    op.heartbeat = time.time() - 3600  # its owner stopped renewing the lease
    new = await manager.checkpoint(NB)
    await settle(manager)
    assert op.outcome == "failed" and "lease" in op.error
    assert new.outcome == "succeeded", new.error
    assert session.state == State.RUNNING


@pytest.mark.parametrize("step", [2 * 3600, 24 * 3600, -2 * 3600, -24 * 3600])
async def test_a_wall_clock_step_neither_expires_a_live_lease_nor_keeps_a_dead_one(tmp_path, step):
    """Another machine's server owns the operation; its heartbeat is a wall-clock
    stamp.  Once seen, how long it goes unrenewed is measured on the monotonic
    clock: a step of the wall clock (either way) changes nothing."""
    clock = FakeClock()
    manager = make_manager(tmp_path, clock=clock)
    earlier_checkpoint(manager)
    op = Operation(kind="checkpoint", path=NB, owner="other-host:7:x", heartbeat=clock.wall)
    session = with_session(manager, State.CHECKPOINTING, kernel=True, operation=op)
    await manager.recover()  # first sight: a fresh lease

    clock.step(step)
    clock.advance(LEASE_TIMEOUT - 1)
    with pytest.raises(OperationInProgress):
        await manager.checkpoint(NB)
    assert session.busy and op.outcome == "running"

    clock.advance(2)  # now it has gone unrenewed for longer than the lease
    new = await manager.checkpoint(NB)
    await settle(manager)
    assert op.outcome == "failed" and "lease" in op.error
    assert new.outcome == "succeeded", new.error


async def test_a_lease_already_old_when_first_seen_has_expired(tmp_path):
    """At start-up only the wall clock can tell how old another server's heartbeat is."""
    clock = FakeClock()
    manager = make_manager(tmp_path, clock=clock)
    earlier_checkpoint(manager)
    stale = clock.wall - LEASE_TIMEOUT - 1
    op = Operation(kind="checkpoint", path=NB, owner="other-host:7:x", heartbeat=stale)
    session = with_session(manager, State.CHECKPOINTING, kernel=True, operation=op)
    await manager.recover()
    assert op.outcome == "failed" and not session.busy


async def test_an_operation_of_this_server_without_a_task_is_not_stuck(tmp_path):
    manager = make_manager(tmp_path)
    earlier_checkpoint(manager)
    op = Operation(kind="pause", path=NB, owner=manager.tasks.owner)
    with_session(manager, State.CHECKPOINTING, kernel=True, operation=op)
    new = await manager.checkpoint(NB)
    await settle(manager)
    assert op.outcome == "failed"
    assert new.outcome == "succeeded", new.error


# ------------------------------------------------------ claims and persistence


def test_a_claim_that_cannot_be_saved_is_rolled_back(tmp_path):
    store = SessionStore(tmp_path / "sessions.json")
    store.get(NB).state = State.RUNNING
    store.save()
    before = (tmp_path / "sessions.json").read_text()
    # the session file cannot be replaced: a real OSError from the file system
    (tmp_path / "sessions.json").unlink()
    (tmp_path / "sessions.json").mkdir()
    (tmp_path / "sessions.json" / "blocker").write_text(before)

    with pytest.raises(PersistenceError, match="nothing was started"):
        store.begin(NB, "pause")
    assert not store.sessions[NB].busy
    with pytest.raises(PersistenceError):
        store.begin("new.ipynb", "checkpoint")
    assert "new.ipynb" not in store.sessions
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".sessions-")]

    (tmp_path / "sessions.json" / "blocker").unlink()
    (tmp_path / "sessions.json").rmdir()
    op = store.begin(NB, "pause")  # not 409: nothing was left claimed
    assert store.sessions[NB].operation is op


def test_sessions_round_trip_with_their_lease():
    session = Session(path=NB, state=State.READY, live_state=LiveState.FRESH)
    session.operation = Operation(kind="pause", path=NB, owner="me:1:x", heartbeat=12.5)
    again = Session.from_json(session.to_json())
    assert again.operation.owner == "me:1:x" and again.operation.heartbeat == 12.5
    assert again.state == State.READY and again.live_state == LiveState.FRESH


def test_a_session_file_a_later_version_wrote_is_read(tmp_path):
    """A field this version does not know (the timeline, read by a version before it)
    is dropped, not a server that fails to start."""
    session = Session(path=NB, state=State.PAUSED)
    session.operation = Operation(kind="pause", path=NB, outcome="succeeded")
    data = session.to_json()
    data["newer"] = 1
    data["operation"]["newer"] = [{"step": "request received", "at": 0.0}]
    assert Session.from_json(data) == session


def test_an_operation_s_progress_is_shown_and_never_written(tmp_path):
    store = SessionStore(tmp_path / "sessions.json")
    op = store.begin(NB, "pause")
    op.progress = CallProgress("uploading", 3, 8)
    store.save()
    shown = store.sessions[NB].to_json()["operation"]["progress"]
    assert shown == {"phase": "uploading", "done": 3, "total": 8}
    assert op.to_json()["progress"] == shown
    assert "progress" not in (tmp_path / "sessions.json").read_text()
    assert SessionStore(tmp_path / "sessions.json").sessions[NB].operation.progress is None
    assert Session.from_json(store.sessions[NB].to_json()) == store.sessions[NB]


# ------------------------------------------------------------- the idle watcher


async def test_the_idle_watcher_acts_only_through_the_operations_it_is_given(tmp_path):
    clock = FakeClock()
    manager = make_manager(tmp_path, clock=clock)
    session = with_session(manager, State.RUNNING, kernel=True)
    manager.activity.watch(session.kernel_id, NB)
    clock.advance(100)
    classes = {"gpu-interactive": {"idle_threshold": 60, "min_running_time": 0, "warn_before": 0}}
    watcher = idle_watcher_for(manager, clock, classes)

    await watcher.check()
    await settle(manager)

    assert session.state == State.PAUSED
    (requested,) = manager.ledger.events(types=["pause-requested"])
    assert requested.data["auto"] is True


async def test_concurrent_claims_settle_an_abandoned_operation_once(tmp_path):
    manager = make_manager(tmp_path)
    session, op = abandoned(
        manager, "checkpoint", State.CHECKPOINTING, kernel=True, committed=False
    )
    answers = await asyncio.gather(
        *(manager.checkpoint(NB) for _ in range(5)), return_exceptions=True
    )
    await settle(manager)
    started = [a for a in answers if isinstance(a, Operation)]
    assert len(started) == 1, answers
    assert all(isinstance(a, OperationInProgress) for a in answers if a not in started)
    assert op.outcome == "failed"
    failures = manager.ledger.events(types=["operation-failed"])
    assert [e.operation_id for e in failures] == [op.id]
    assert started[0].outcome == "succeeded" and session.state == State.RUNNING


def test_a_session_s_json_is_its_fields_copied():
    """to_json is what dataclasses.asdict gives (GET status and every save write it),
    its containers the session's own: changing them changes nothing in the session."""
    session = Session(path="nb.ipynb", state=State.PAUSED, schedule={"at": 1.0, "kind": "x"})
    session.operation = Operation(kind="pause", path="nb.ipynb", options={"force": True})
    session.operation.messages.append("Not saved: f (function)")
    session.last_checkpoint = {"id": "2026-12-01T08-00-00", "time": 1.0, "bytes": 3}
    session.lost = LostState(why="damaged", names={"big": ""})

    data = session.to_json()

    expected = dataclasses.asdict(session)
    expected.update(state="paused", live_state="unknown")
    assert data == expected and list(data) == list(expected)
    data["operation"]["messages"].append("changed")
    data["operation"]["options"]["force"] = False
    data["schedule"]["at"] = 2.0
    data["lost"]["names"]["big"] = "changed"
    assert session.lost.names == {"big": ""}
    assert session.operation.messages == ["Not saved: f (function)"]
    assert session.operation.options == {"force": True} and session.schedule["at"] == 1.0
    assert Session.from_json(json.loads(json.dumps(session.to_json()))) == session


@pytest.mark.parametrize("kind", ["pause", "checkpoint", "resume", "hibernate", "wake"])
@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("state", list(State))
async def test_status_says_which_operations_would_start(tmp_path, state, kernel, kind, hibernator):
    """``can`` in GET status (what the UI enables) is what the operation then does:
    started exactly when it says so, in every state, with a kernel or without (and for
    hibernate and wake, with a server that can hibernate)."""
    if kind in ("hibernate", "wake"):
        await hibernator.start()
    try:
        await status_and_start(tmp_path, state, kernel, kind, hibernator)
    finally:
        await hibernator.close()


async def status_and_start(tmp_path, state, kernel, kind, hibernator):
    manager = make_manager(tmp_path, hibernator=hibernator)
    checkpoint_id = earlier_checkpoint(manager)
    running = Operation(kind="pause", path=NB, owner="elsewhere:1:x") if state in BUSY else None
    session = with_session(manager, state, kernel=kernel, operation=running)
    session.last_checkpoint = {"id": checkpoint_id, "time": time.time(), "bytes": 1}
    manager.recovered.set()

    (row,) = (await manager.status())["sessions"]
    try:
        await start(manager, kind)
        started = True
    except (PauseError, OperationInProgress):
        started = False
    await settle(manager)
    assert row["can"][kind] is started


def test_every_state_says_something_in_the_bucket():
    """A notebook in any state has a record state for other servers (bucket_sessions.py):
    a state added without one would fail every save of the sessions with a bucket."""
    assert set(RECORD_STATE) == set(State)
