"""The timeline of every pause and resume (issue #41): recorded in the operation and in
the ledger, each step in order, with the kernel's own steps (the checkpoint's pickle,
write, fsync; the restore) placed among the server's; a resume that had a spare says so.
With a real server and real kernels; no duration is asserted (``make bench`` measures)."""

import asyncio

import pytest

from jupyter_pause.engine import api as engine
from jupyter_pause.ledger import EventType
from jupyter_pause.lifecycle import LiveState, Operation, State, Step
from jupyter_pause.protocol import kernel_steps

from .fakes import make_manager
from .helpers import api, execute, operate, running_notebook, session_status, wait_until

NB = "nb.ipynb"

PAUSE = [
    Step.REQUESTED,
    Step.KERNEL_ANSWERING,
    "call received",
    "checkpoint started",
    "prepared",
    "pickled",
    "hashed",
    "written",
    "fsynced",
    "committed",
    Step.CHECKPOINT_RETURNED,
    Step.RELEASING,
    Step.RELEASED,
    Step.PAUSED,
]
RESUME = [
    Step.REQUESTED,
    Step.CHOSEN,
    Step.KERNEL_STARTED,
    Step.KERNEL_ANSWERING,
    "call received",
    "restore started",
    "verified",
    "imported",
    "unpickled",
    "namespace ready",
    Step.READY,
]


def steps(op):
    return [s["step"] for s in op["timeline"]]


def in_order(timeline):
    at = [s["at"] for s in timeline]
    return at == sorted(at) and at[0] == 0.0


def ledger_rows(jp_serverapp, path, type_):
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    return [e for e in ledger.events(path=path) if e.type == type_]


async def test_a_pause_and_a_resume_record_their_timelines(jp_fetch, jp_serverapp, notebook_path):
    await running_notebook(
        jp_fetch, jp_serverapp, notebook_path, "import numpy as np\nw = np.ones(1 << 20)"
    )
    pause = await operate(jp_fetch, "pause", notebook_path)
    assert pause["outcome"] == "succeeded", pause
    assert steps(pause) == PAUSE
    assert in_order(pause["timeline"])
    [paused] = ledger_rows(jp_serverapp, notebook_path, EventType.PAUSED)
    assert paused.data["timeline"] == pause["timeline"]

    resume = await operate(jp_fetch, "resume", notebook_path)
    assert resume["outcome"] == "succeeded", resume
    assert steps(resume) == RESUME
    assert in_order(resume["timeline"])
    assert "note" not in resume["timeline"][2]  # a kernel started for it: no spare
    [ready] = ledger_rows(jp_serverapp, notebook_path, EventType.FIRST_CELL_RUNNABLE)
    assert ready.data["timeline"] == resume["timeline"]
    # GET status leaves the timeline to GET operations/{id}: it would double its size
    row = await session_status(jp_fetch, notebook_path)
    assert row["operation"]["id"] == resume["id"] and "timeline" not in row["operation"]

    # the user's first cell ends it, in the operation and in that cell's ledger row
    assert await execute(jp_serverapp, row["kernel_id"], "int(w.sum())") == str(1 << 20)

    async def first_cell_seen():
        rows = ledger_rows(jp_serverapp, notebook_path, EventType.CELL_EXECUTED)
        return [e for e in rows if e.data["first_after_resume"]]

    await wait_until(first_cell_seen, what="the first cell in the ledger")
    _, resumed = await api(jp_fetch, "operations", resume["id"])
    assert steps(resumed) == [*RESUME, Step.FIRST_CELL]
    assert in_order(resumed["timeline"])
    [cell] = await first_cell_seen()
    assert cell.data["timeline"] == resumed["timeline"]


async def test_a_rest_resume_with_a_spare_says_so_on_its_timeline(
    jp_fetch, jp_serverapp, notebook_path
):
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "answer = 42")
    assert (await operate(jp_fetch, "pause", notebook_path))["outcome"] == "succeeded"
    code, answer = await api(
        jp_fetch, "sessions", "prewarm", method="POST", body={"path": notebook_path}
    )
    assert code == 202, answer

    resume = await operate(jp_fetch, "resume", notebook_path)
    assert resume["outcome"] == "succeeded", resume
    assert steps(resume) == RESUME
    started = resume["timeline"][2]
    assert started["step"] == Step.KERNEL_STARTED and "spare" in started["note"]
    row = await session_status(jp_fetch, notebook_path)
    assert row["kernel_id"] == answer["kernel_id"]


async def test_a_failed_resume_records_how_far_it_got(jp_fetch, jp_serverapp, notebook_path):
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, "answer = 42")
    assert (await operate(jp_fetch, "pause", notebook_path))["outcome"] == "succeeded"
    manager = jp_serverapp.web_app.settings["jupyter_pause_manager"]
    manager.store.get(notebook_path).kernel_name = "no-such-kernel"

    resume = await operate(jp_fetch, "resume", notebook_path)
    assert resume["outcome"] == "failed", resume
    assert steps(resume) == [Step.REQUESTED, Step.CHOSEN]
    [failed] = ledger_rows(jp_serverapp, notebook_path, EventType.OPERATION_FAILED)
    assert failed.data["timeline"] == resume["timeline"]


# ------------------------------------------------------------ without a server


def test_steps_stay_in_order_and_a_kernels_are_placed_by_its_answer():
    op = Operation(kind="pause", path="nb.ipynb", started=1000.0)
    op.mark(Step.REQUESTED, 1000.0)
    op.mark(Step.KERNEL_ANSWERING, 999.0)  # a clock that went back: never before the last
    assert [s["at"] for s in op.timeline] == [0.0, 0.0]
    steps_ = kernel_steps("checkpoint started", 0.01, {"pickle": 0.02, "write": 0.3})
    assert steps_ == [
        ["call received", 0.0],
        ["checkpoint started", 0.01],
        ["pickled", 0.03],
        ["written", 0.33],
    ]
    op.mark_kernel(steps_, took=0.4, now=1001.0)  # it answered at 1001, 0.4 s after the call
    placed = {s["step"]: s["at"] + op.started for s in op.timeline}
    # the timeline keeps its offsets to 0.1 ms
    assert placed["call received"] == pytest.approx(1000.6, abs=1e-4)
    assert placed["written"] - placed["call received"] == pytest.approx(0.33, abs=1e-3)


async def test_a_resume_asks_its_kernel_once(tmp_path):
    """The nonce (is this the paused process itself?) comes with the restore's answer,
    not in a second round trip."""
    manager = make_manager(tmp_path)
    engine.checkpoint(
        dir=manager.checkpointer.checkpoint_dir, notebook=NB, namespace={"x": 1}, progress=False
    )
    session = manager.store.get(NB)
    session.state = State.PAUSED
    calls = []
    call = manager.restorer.call

    async def counted(kernel, function, **kwargs):
        calls.append(function)
        return await call(kernel, function, **kwargs)

    manager.restorer.call = counted
    op = await manager.resume(NB)
    while manager.tasks.all:
        await asyncio.gather(*list(manager.tasks.all))
    assert op.outcome == "succeeded", op.error
    assert calls == ["restore"]
    assert session.live_state == LiveState.FRESH


async def test_a_paused_kernel_ends_without_tearing_its_modules_down(
    jp_fetch, jp_serverapp, notebook_path, tmp_path
):
    """The kernel's process, its state saved, ends once its exit handlers have run and
    its open files are flushed: the teardown of its modules (0.45 s once torch is
    imported) is not waited for. Nothing the user's code relies on at exit is lost."""
    code = f"""
import atexit, sys, types
class _Late:
    def __del__(self, open=open, path={str(tmp_path / "teardown")!r}):
        open(path, "w").close()
_kept = sys.modules["_kept_for_teardown"] = types.ModuleType("_kept_for_teardown")
_kept.late = _Late()
del _kept, _Late
atexit.register(lambda: open({str(tmp_path / "atexit")!r}, "w").close())
log = open({str(tmp_path / "log")!r}, "w")
log.write("left in the buffer")
"""
    await running_notebook(jp_fetch, jp_serverapp, notebook_path, code)
    pause = await operate(jp_fetch, "pause", notebook_path)
    assert pause["outcome"] == "succeeded", pause
    assert (tmp_path / "atexit").exists()  # the user's exit handler ran
    assert (tmp_path / "log").read_text() == "left in the buffer"  # the open file flushed
    assert not (tmp_path / "teardown").exists()  # no module was torn down
