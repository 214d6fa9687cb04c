"""Auto-pause: idleness judged like a person would, per workload class."""

import asyncio
import json
import time

import pytest

from jupyter_pause.cli import main as cli_main
from jupyter_pause.idle_policy import (
    ActivityFacts,
    WorkloadClass,
    judge,
    load_classes,
    probe_output,
    resolve_class,
)

from .fakes import FakeClock
from .helpers import (
    api,
    execute,
    held_cell,
    session_status,
    start_client,
    start_session,
    wait_for_state,
    wait_until,
)

#: idle time passes only when a test moves the clock (``clock``), so these may be long
THRESHOLD = 300
WARN_BEFORE = 60
STEPPED_THRESHOLD = 600


@pytest.fixture
def jp_server_config(jp_server_config):
    return {
        **jp_server_config,
        "PauseApp": {
            **jp_server_config["PauseApp"],
            "backend": "local",
            "idle_check_interval": 0.25,
            "workload_classes": {
                "gpu-interactive": {
                    "idle_threshold": THRESHOLD,
                    "min_running_time": 0,
                    "warn_before": WARN_BEFORE,
                    "gpu_utilization_counts": False,
                },
                "cpu-small": {"idle_threshold": THRESHOLD, "warn_before": 0},
                "stepped": {
                    "idle_threshold": STEPPED_THRESHOLD,
                    "warn_before": 60,
                    "gpu_utilization_counts": False,
                },
            },
        },
    }


@pytest.fixture
def clock(jp_serverapp):
    """The clock of the idle watcher and of the activity monitor, handed to them before
    any kernel starts: idle time passes when the test moves it, never while a loaded
    machine is slow (the watcher still checks every ``idle_check_interval``)."""
    settings = jp_serverapp.web_app.settings
    clock = FakeClock()
    settings["jupyter_pause_idle"].clock = settings["jupyter_pause_manager"].activity.clock = clock
    return clock


def write_notebook(jp_root_dir, name, workload_class=None):
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    if workload_class:
        metadata["jupyter_pause"] = {"workload_class": workload_class}
    nb = {"cells": [], "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    (jp_root_dir / name).write_text(json.dumps(nb))
    return name


async def open_notebook(jp_fetch, jp_serverapp, path):
    model = await start_session(jp_fetch, path)
    kernel_id = model["kernel"]["id"]
    await wait_for_state(jp_serverapp, kernel_id, "idle")
    await execute(jp_serverapp, kernel_id, "x = 1")
    # the cell's end is the user's last activity: seen before the test moves any clock
    activity = jp_serverapp.web_app.settings["jupyter_pause_manager"].activity
    await wait_until(
        lambda: (seen := activity.for_path(path)) and seen.last_cell_finished,
        what="the cell seen finishing",
    )
    return kernel_id


async def wait_state(jp_fetch, path, state, timeout=60):
    async def reached():
        return (await session_status(jp_fetch, path))["state"] == state

    await wait_until(reached, timeout=timeout, what=f"{path} becoming {state}")


def ledger_events(jp_serverapp, path, type_):
    ledger = jp_serverapp.web_app.settings["jupyter_pause_ledger"]
    return [e for e in ledger.events(path=path) if e.type.value == type_]


async def test_an_idle_notebook_is_warned_then_paused(jp_fetch, jp_serverapp, jp_root_dir, clock):
    path = write_notebook(jp_root_dir, "idle.ipynb")
    kernel_id = await open_notebook(jp_fetch, jp_serverapp, path)

    clock.advance(THRESHOLD - WARN_BEFORE)
    await wait_until(
        lambda: ledger_events(jp_serverapp, path, "auto-pause-warned"), what="the warning"
    )
    # polling the status (as every open JupyterLab does) does not keep it awake
    for _ in range(5):
        assert (await session_status(jp_fetch, path))["state"] == "running"
    clock.advance(WARN_BEFORE)
    await wait_state(jp_fetch, path, "paused")

    assert kernel_id not in jp_serverapp.kernel_manager
    (requested,) = ledger_events(jp_serverapp, path, "pause-requested")
    assert requested.data["auto"] is True
    # warned first (again, if a slow machine delivered the first cell late)
    warnings = ledger_events(jp_serverapp, path, "auto-pause-warned")
    assert warnings and all(w.time < requested.time for w in warnings)
    assert all(w.workload_class == "gpu-interactive" for w in warnings)


async def test_a_busy_kernel_printing_nothing_is_never_paused(
    jp_fetch, jp_serverapp, jp_root_dir, clock, tmp_path
):
    watcher = jp_serverapp.web_app.settings["jupyter_pause_idle"]
    path = write_notebook(jp_root_dir, "busy.ipynb")
    kernel_id = await open_notebook(jp_fetch, jp_serverapp, path)
    client = start_client(jp_serverapp, kernel_id)
    release = tmp_path / "release"
    try:
        # a send before the shell socket is connected can be lost
        await client.wait_for_ready(timeout=60)
        # silent and busy until the test has looked, however slow the machine
        client.execute(held_cell(release))
        await wait_for_state(jp_serverapp, kernel_id, "busy")
        clock.advance(THRESHOLD * 2)
        await watcher.check()
        session = await session_status(jp_fetch, path)
        assert session["state"] == "running"
        code, activity = await api(jp_fetch, "activity")
        (entry,) = [s for s in activity["sessions"] if s["path"] == path]
        assert entry["idle"] is False and entry["busy"] is True
        assert "busy" in entry["reasons"][0]
        assert activity["server"]["idle"] is False
    finally:
        release.touch()
        client.stop_channels()
    assert not ledger_events(jp_serverapp, path, "pause-requested")


async def test_keep_running_postpones_by_one_threshold(jp_fetch, jp_serverapp, jp_root_dir, clock):
    watcher = jp_serverapp.web_app.settings["jupyter_pause_idle"]
    path = write_notebook(jp_root_dir, "keep.ipynb")
    await open_notebook(jp_fetch, jp_serverapp, path)
    clock.advance(THRESHOLD - WARN_BEFORE)

    async def warning():
        auto = (await session_status(jp_fetch, path)).get("auto_pause")
        return auto if auto and auto["warning"] else None

    auto = await wait_until(warning, what="the auto-pause warning in the status")
    assert auto["workload_class"] == "gpu-interactive" and auto["seconds_left"] == WARN_BEFORE

    code, body = await api(jp_fetch, "sessions", "postpone", method="POST", body={"path": path})
    assert code == 200, body
    after = (await session_status(jp_fetch, path))["auto_pause"]
    assert after["seconds_left"] == THRESHOLD and not after["warning"]
    assert ledger_events(jp_serverapp, path, "auto-pause-postponed")
    clock.advance(THRESHOLD - WARN_BEFORE)  # idle for longer than a threshold, in all
    await watcher.check()
    assert (await session_status(jp_fetch, path))["state"] == "running"
    clock.advance(WARN_BEFORE)
    await wait_state(jp_fetch, path, "paused")  # one threshold later, it does pause


async def test_a_class_that_forbids_auto_pause_is_honoured(
    jp_fetch, jp_serverapp, jp_root_dir, clock
):
    path = write_notebook(jp_root_dir, "never.ipynb", workload_class="never")
    await open_notebook(jp_fetch, jp_serverapp, path)
    clock.advance(THRESHOLD * 2)
    await jp_serverapp.web_app.settings["jupyter_pause_idle"].check()
    assert (await session_status(jp_fetch, path))["state"] == "running"
    code, activity = await api(jp_fetch, "activity")
    (entry,) = activity["sessions"]
    assert entry["workload_class"] == "never" and entry["workload_class_source"] == "notebook"
    assert entry["idle"] is True and entry["idle_seconds"] >= THRESHOLD
    assert any("never acts" in r for r in entry["reasons"])
    assert not ledger_events(jp_serverapp, path, "pause-requested")


class SteppedClock:
    """This machine's clocks, with the wall clock moved ``offset`` seconds: the
    step of the system clock a test cannot make."""

    def __init__(self):
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic()


async def test_a_wall_clock_step_does_not_auto_pause_a_notebook_in_use(
    jp_fetch, jp_serverapp, jp_root_dir
):
    """A cell runs in a real kernel, then the server's wall clock steps 2 h
    forward: the idle watcher's rounds leave the notebook running, unwarned."""
    settings = jp_serverapp.web_app.settings
    watcher, manager = settings["jupyter_pause_idle"], settings["jupyter_pause_manager"]
    clock = SteppedClock()
    watcher.clock = manager.activity.clock = clock  # before the kernel starts
    path = write_notebook(jp_root_dir, "stepped.ipynb", workload_class="stepped")
    kernel_id = await open_notebook(jp_fetch, jp_serverapp, path)
    assert manager.activity.for_path(path).clock is clock

    clock.offset = 2 * 3600
    await watcher.check()
    code, activity = await api(jp_fetch, "activity")
    (entry,) = [s for s in activity["sessions"] if s["path"] == path]
    assert entry["idle_seconds"] < STEPPED_THRESHOLD / 2 and not entry["warning"], entry
    session = await session_status(jp_fetch, path)
    assert session["state"] == "running" and session["kernel_id"] == kernel_id
    assert not ledger_events(jp_serverapp, path, "auto-pause-warned")
    assert not ledger_events(jp_serverapp, path, "pause-requested")


async def test_a_checkpoint_only_class_checkpoints_and_keeps_running(
    jp_fetch, jp_serverapp, jp_root_dir, clock
):
    path = write_notebook(jp_root_dir, "small.ipynb", workload_class="cpu-small")
    kernel_id = await open_notebook(jp_fetch, jp_serverapp, path)
    clock.advance(THRESHOLD)
    await wait_until(
        lambda: ledger_events(jp_serverapp, path, "checkpoint-finished"),
        what="the automatic checkpoint",
    )
    clock.advance(THRESHOLD + 1)
    await jp_serverapp.web_app.settings["jupyter_pause_idle"].check()
    session = await session_status(jp_fetch, path)
    assert session["state"] == "running" and session["kernel_id"] == kernel_id
    # nothing happened since: no second checkpoint of the same state
    assert len(ledger_events(jp_serverapp, path, "checkpoint-started")) == 1
    assert len(ledger_events(jp_serverapp, path, "checkpoint-finished")) == 1


async def test_the_activity_probe_command_prints_kubeflow_json(
    jp_fetch, jp_serverapp, jp_root_dir, tmp_path, capsys, monkeypatch
):
    path = write_notebook(jp_root_dir, "probe.ipynb", workload_class="never")
    await open_notebook(jp_fetch, jp_serverapp, path)
    out = tmp_path / "probe.json"
    monkeypatch.setenv("OUTPUT_JSON_PATH", str(out))
    argv = [
        "activity",
        "--json",
        "--url",
        jp_serverapp.connection_url,
        "--token",
        jp_serverapp.identity_provider.token,
    ]
    assert await asyncio.to_thread(cli_main, argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"last_activity"}
    assert json.loads(out.read_text()) == printed


async def test_culling_before_auto_pause_is_warned_at_start(jp_configurable_serverapp, capfd):
    jp_configurable_serverapp(
        config={
            "ServerApp": {"jpserver_extensions": {"jupyter_pause": True}},
            "MappingKernelManager": {"cull_idle_timeout": 60},
            "PauseApp": {"backend": "local"},
        }
    )
    assert "cull_idle_timeout=60s kills idle kernels" in capfd.readouterr().err


# ------------------------------------------------------------ pure policy


def test_class_resolution_order():
    nb = {"jupyter_pause": {"workload_class": "a"}}
    spec = {"jupyter_pause": {"workload_class": "b"}}
    env = {"JUPYTER_PAUSE_WORKLOAD_CLASS": "c"}
    assert resolve_class(
        notebook_metadata=nb, kernelspec_metadata=spec, environ=env, default="d"
    ) == ("a", "notebook")
    assert resolve_class(
        notebook_metadata={}, kernelspec_metadata=spec, environ=env, default="d"
    ) == ("b", "kernelspec")
    assert resolve_class(
        notebook_metadata=None, kernelspec_metadata={}, environ=env, default="d"
    ) == ("c", "environment")
    assert resolve_class(
        notebook_metadata=None, kernelspec_metadata=None, environ={}, default="d"
    ) == ("d", "default")


def test_judge_verdicts():
    policy = WorkloadClass("p", idle_threshold=100, min_running_time=500, warn_before=30)
    busy = judge(ActivityFacts(now=1000, started=0, last_user_activity=0, busy=True), policy)
    assert not busy.idle and not busy.act
    young = judge(ActivityFacts(now=400, started=0, last_user_activity=0, busy=False), policy)
    assert young.idle and not young.act and young.seconds_left == 100
    assert any("minimum" in r for r in young.reasons)
    warn = judge(ActivityFacts(now=1080, started=0, last_user_activity=1000, busy=False), policy)
    assert warn.warn and not warn.act and warn.seconds_left == 20
    act = judge(ActivityFacts(now=1100, started=0, last_user_activity=1000, busy=False), policy)
    assert act.act
    gpu = WorkloadClass("g", idle_threshold=10, gpu_utilization_counts=True)
    hot = judge(
        ActivityFacts(now=100, started=0, last_user_activity=0, busy=False, gpu_utilization=80), gpu
    )
    assert not hot.idle and "GPU" in hot.reasons[0]


def test_unknown_settings_are_refused():
    with pytest.raises(ValueError, match="unknown setting"):
        load_classes({"x": {"idle_treshold": 5}})
    with pytest.raises(ValueError, match="action"):
        load_classes({"x": {"action": "kill"}})


def test_probe_output_counts_busy_kernels_as_active():
    assert probe_output([{"busy": True, "last_activity": "2026-01-01T00:00:00+00:00"}]) == {
        "has_activity": True
    }
    assert probe_output(
        [
            {"busy": False, "last_activity": "2026-01-01T00:00:00+00:00"},
            {"busy": False, "last_activity": "2026-01-02T00:00:00+00:00"},
        ]
    ) == {"last_activity": "2026-01-02T00:00:00+00:00"}
    assert probe_output([]) == {"has_activity": False}


async def test_the_idle_clock_starts_from_the_resume(jp_fetch, jp_serverapp, jp_root_dir, clock):
    path = write_notebook(jp_root_dir, "again.ipynb")
    await open_notebook(jp_fetch, jp_serverapp, path)
    clock.advance(THRESHOLD)
    await wait_state(jp_fetch, path, "paused")  # auto-paused after THRESHOLD idle seconds
    clock.advance(THRESHOLD)
    code, body = await api(jp_fetch, "sessions", "resume", method="POST", body={"path": path})
    assert code == 202

    async def finished():
        code, op = await api(jp_fetch, "operations", body["operation"]["id"])
        return op if op["outcome"] != "running" else None

    op = await wait_until(finished, what="the resume")
    assert op["outcome"] == "succeeded", op
    code, activity = await api(jp_fetch, "activity")
    (entry,) = [s for s in activity["sessions"] if s["path"] == path]
    # the last cell ran 2 * THRESHOLD ago; the clock counts from the resume
    assert entry["idle_seconds"] < THRESHOLD
