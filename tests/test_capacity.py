"""The 9:00 crowd, without a server: the resume gate admits at most its bound, in
the order the resumes fell due, tells each waiting one how many are ahead, and
gives up the place of one that fails or is cancelled; the manager shows
``waiting-for-capacity`` meanwhile, and a server that stops leaves the waiting
notebooks paused."""

import asyncio
import time
from pathlib import Path

import pytest

from jupyter_pause.ledger import EventType
from jupyter_pause.lifecycle import State
from jupyter_pause.server import capacity
from jupyter_pause.server.capacity import ResumeGate
from jupyter_pause.server.scheduler import ResumeScheduler

from .fakes import FakeClock, make_manager
from .helpers import wait_until


class Crowd:
    """Resumes that go through one gate and hold their place until released."""

    def __init__(self, gate: ResumeGate):
        self.gate = gate
        self.admitted: list[str] = []
        self.told: dict[str, list[int]] = {}
        self.release: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.most_at_once = 0

    def arrive(self, name: str, due: float, fail: bool = False) -> None:
        self.told[name] = []
        self.release[name] = asyncio.Event()
        self.tasks[name] = asyncio.ensure_future(self._resume(name, due, fail))

    async def _resume(self, name: str, due: float, fail: bool) -> None:
        async with self.gate.admitted(due, on_wait=self.told[name].append):
            self.admitted.append(name)
            self.most_at_once = max(self.most_at_once, self.gate.running)
            await self.release[name].wait()
            if fail:
                raise RuntimeError("the restore failed")

    async def settled(self) -> None:
        """Let every task run until it waits again."""
        for _ in range(5):
            await asyncio.sleep(0)


async def test_resumes_are_admitted_in_due_order_within_the_bound():
    crowd = Crowd(ResumeGate(limit=1))
    crowd.arrive("first", due=100)
    await crowd.settled()
    assert crowd.admitted == ["first"] and crowd.told["first"] == []  # no wait, no message

    # they arrive out of order: the one due earliest goes next, whatever its arrival
    for name, due in [("late", 300), ("early", 200), ("middle", 250)]:
        crowd.arrive(name, due)
        await crowd.settled()
    assert crowd.admitted == ["first"]
    # how many are ahead: the one running, and those due before it
    assert crowd.told["late"] == [1, 2, 3]
    assert crowd.told["early"] == [1]
    assert crowd.told["middle"] == [2]

    for name in ["first", "early", "middle", "late"]:
        await wait_until(lambda name=name: crowd.admitted[-1] == name, 10, f"{name}'s turn")
        crowd.release[name].set()
    await asyncio.gather(*crowd.tasks.values())
    assert crowd.admitted == ["first", "early", "middle", "late"]
    assert crowd.most_at_once == 1
    assert crowd.told["late"] == [1, 2, 3, 2, 1]  # counted down as the others went
    assert crowd.gate.running == 0 and crowd.gate.waiting == 0


async def test_the_bound_admits_that_many_at_once_and_equal_times_keep_their_arrival():
    crowd = Crowd(ResumeGate(limit=2))
    for name in ["a", "b", "c", "d"]:
        crowd.arrive(name, due=100)
        await crowd.settled()
    assert crowd.admitted == ["a", "b"]
    assert crowd.told["c"] == [2] and crowd.told["d"] == [3]
    crowd.release["b"].set()
    await wait_until(lambda: len(crowd.admitted) == 3, 10, "c's turn")
    assert crowd.admitted == ["a", "b", "c"]
    for event in crowd.release.values():
        event.set()
    await asyncio.gather(*crowd.tasks.values())
    assert crowd.most_at_once == 2


async def test_a_resume_that_fails_or_is_cancelled_gives_up_its_place():
    crowd = Crowd(ResumeGate(limit=1))
    crowd.arrive("fails", due=1, fail=True)
    crowd.arrive("cancelled", due=2)
    crowd.arrive("last", due=3)
    await crowd.settled()  # arriving together: each is told once where it stands
    assert crowd.told["last"] == [2]

    crowd.tasks["cancelled"].cancel()  # while it waits
    await crowd.settled()
    assert crowd.told["last"] == [2, 1]
    assert crowd.gate.waiting == 1

    crowd.release["fails"].set()  # its restore raises: the place is free again
    await wait_until(lambda: crowd.admitted[-1] == "last", 10, "the last one's turn")
    with pytest.raises(RuntimeError):
        await crowd.tasks["fails"]
    crowd.release["last"].set()
    await crowd.tasks["last"]
    assert crowd.admitted == ["fails", "last"]
    assert crowd.gate.running == 0 and crowd.gate.waiting == 0


def test_the_gate_needs_room_for_one():
    with pytest.raises(ValueError, match="at least one"):
        ResumeGate(limit=0)


def test_the_default_bound_follows_cpus_and_memory(monkeypatch):
    monkeypatch.setattr(capacity.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(capacity, "cgroup_limits", lambda: (None, None))
    monkeypatch.setattr(capacity, "memory_available", lambda: 64 * 2**30)
    assert capacity.machine_limit() == 4  # the CPUs
    monkeypatch.setattr(capacity, "memory_available", lambda: 5 * 2**30)
    assert capacity.machine_limit() == 2  # 2 GiB each
    monkeypatch.setattr(capacity, "memory_available", lambda: 2**30)
    assert capacity.machine_limit() == 1  # never none
    monkeypatch.setattr(capacity, "memory_available", lambda: 64 * 2**30)
    monkeypatch.setattr(capacity, "cgroup_limits", lambda: (1.5, 3 * 2**30))
    assert capacity.machine_limit() == 1  # a pod's limits


def test_cgroup_v2_limits_are_read_from_this_process_s_cgroup(tmp_path):
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    if relative is None:
        pytest.skip("no cgroup v2 line for this process")
    folder = tmp_path / relative.lstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    assert capacity.cgroup_limits(tmp_path) == (None, None)
    (folder / "cpu.max").write_text("150000 100000\n")
    (folder / "memory.max").write_text(f"{8 * 2**30}\n")
    (folder / "memory.current").write_text(f"{3 * 2**30}\n")
    assert capacity.cgroup_limits(tmp_path) == (1.5, 5 * 2**30)
    (folder / "cpu.max").write_text("max 100000\n")
    (folder / "memory.max").write_text("max\n")
    assert capacity.cgroup_limits(tmp_path) == (None, None)


# ------------------------------------------------------------- the manager


async def paused_notebooks(manager, names):
    for name in names:
        session = manager.store.get(name)
        session.kernel_id = manager.kernel_manager.start({"x": name})
        manager.reconciler.session_manager.paths[name] = session.kernel_id
        op = await manager.pause(name)
        while manager.tasks.all:
            await asyncio.gather(*list(manager.tasks.all), return_exceptions=True)
        assert op.outcome == "succeeded", op.error


@pytest.mark.parametrize("stop_server", [False, True])
async def test_due_resumes_wait_for_capacity_in_order_and_say_how_many_are_ahead(
    tmp_path, stop_server
):
    names = ["a.ipynb", "b.ipynb", "c.ipynb"]
    manager = make_manager(tmp_path, notebooks=names)
    manager.resume_gate = ResumeGate(limit=1)
    await paused_notebooks(manager, names)
    held = asyncio.Event()

    async def acquire(session, report_waiting):
        await held.wait()  # the first one's restore takes its time

    manager.backend.acquire = acquire
    now = time.time()
    due = {"b.ipynb": now + 10, "c.ipynb": now + 20, "a.ipynb": now + 30}
    for name, at in due.items():
        manager.schedules.set(name, at)
    scheduler = ResumeScheduler(
        operations=manager,
        schedules=manager.schedules,
        store=manager.store,
        ledger=manager.ledger,
        log=manager.log,
        clock=FakeClock(now + 60),
    )
    await scheduler.check()
    sessions = manager.store.sessions
    await wait_until(
        lambda: sessions["a.ipynb"].operation.step.startswith("waiting for capacity: 2"),
        10,
        "the last one to queue",
    )
    assert sessions["b.ipynb"].state == State.RESUMING  # due first: its turn now
    assert sessions["c.ipynb"].state == State.WAITING_FOR_CAPACITY
    assert sessions["c.ipynb"].operation.step == (
        "waiting for capacity: 1 resume ahead (at most 1 at a time)"
    )
    assert sessions["a.ipynb"].state == State.WAITING_FOR_CAPACITY
    assert sessions["a.ipynb"].operation.step == (
        "waiting for capacity: 2 resumes ahead (at most 1 at a time)"
    )

    if stop_server:
        await manager.close()
        for name in ["a.ipynb", "c.ipynb"]:
            assert sessions[name].state == State.PAUSED
            assert sessions[name].operation.outcome == "failed"
            assert "waited for capacity: nothing was restored" in sessions[name].error
        return

    held.set()
    while manager.tasks.all:
        await asyncio.gather(*list(manager.tasks.all), return_exceptions=True)
    ready = sorted(
        (e.time, e.path) for e in manager.ledger.events() if e.type == EventType.FIRST_CELL_RUNNABLE
    )
    assert [path for _, path in ready] == ["b.ipynb", "c.ipynb", "a.ipynb"]
    for name in names:
        assert sessions[name].state == State.READY
        types = [e.type for e in manager.ledger.events(path=name)]
        if name != "b.ipynb":
            assert (
                types.index(EventType.WAITING_FOR_CAPACITY)
                < types.index(EventType.CAPACITY_ACQUIRED)
                < types.index(EventType.RESTORE_STARTED)
            )
