"""One composition root (issue #42 item 1): ``PauseApp.initialize_settings`` builds the
collaborators (through :func:`.build_collaborators`, as the tests' ``make_manager``
does), the manager builds none and takes few parameters, and what stays in it is the
orchestration of its operations."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import jupyter_pause
from jupyter_pause.server.manager import PauseManager
from jupyter_pause.status_row import StatusRow

SERVER = Path(jupyter_pause.__file__).parent / "server"
#: the goal of issue #42, reached: the checkpoint, the restore and the release are
#: steps the manager orchestrates (server/checkpointing.py, restoring.py, releasing.py)
MANAGER_LINES = 600
MAX_MANAGER_PARAMETERS = 12
MAX_INITIALIZE_SETTINGS = 120
#: what the manager is handed and must not build
COLLABORATORS = {
    "Recorder",
    "Catalogue",
    "Schedules",
    "Prewarmer",
    "Reconciler",
    "Recovery",
    "ActivityMonitor",
    "StatusIndex",
    "Hibernator",
    "Tasks",
    "Checkpointer",
    "Restorer",
    "Releaser",
}


def definition(path: Path, name: str) -> ast.AST:
    tree = ast.parse(path.read_text())
    return next(n for n in ast.walk(tree) if getattr(n, "name", None) == name)


def test_the_manager_is_short_and_takes_few_parameters():
    manager = definition(SERVER / "manager.py", "PauseManager")
    assert manager.end_lineno - manager.lineno + 1 <= MANAGER_LINES
    assert len(inspect.signature(PauseManager.__init__).parameters) < MAX_MANAGER_PARAMETERS


def test_the_manager_builds_no_collaborator():
    manager = definition(SERVER / "manager.py", "PauseManager")
    built = {
        n.func.id
        for n in ast.walk(manager)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert built & COLLABORATORS == set()


def test_the_composition_root_is_short():
    init = definition(SERVER / "app.py", "initialize_settings")
    assert init.end_lineno - init.lineno + 1 <= MAX_INITIALIZE_SETTINGS


def test_the_app_handlers_and_shutdown_never_reach_through_the_manager():
    reached = [
        f"{name}:{n.lineno}"
        for name in ("app.py", "handlers.py", "shutdown.py")
        for n in ast.walk(ast.parse((SERVER / name).read_text()))
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Attribute | ast.Name)
        and (getattr(n.value, "attr", None) or getattr(n.value, "id", None)) == "manager"
        and n.attr in {c.lower() for c in COLLABORATORS} | {"store", "activity", "stager"}
    ]
    assert reached == []


def test_a_status_row_keeps_the_order_of_its_json():
    row = StatusRow(
        session={"path": "nb.ipynb", "state": "running", "kernel_id": None},
        kernel_id="k1",
        execution_state="idle",
        last_activity=None,
        last_saved=None,
        explained={"paused_by": None},
        staging=None,
        can={"pause": True},
    )
    assert list(row.to_json()) == [
        "path",
        "state",
        "kernel_id",
        "execution_state",
        "last_activity",
        "last_saved",
        "paused_by",
        "staging",
        "can",
    ]
    assert row.to_json()["kernel_id"] == "k1"
    policed = dataclasses.replace(row, auto_pause={"in": 5}, auto_pause_on=True)
    assert policed.to_json()["auto_pause"] == {"in": 5}
