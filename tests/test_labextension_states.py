"""The frontend's list of lifecycle states is the server's, in the same order, and so are
its groups of them (the kernel guard decides by them); the README names what the
frontend puts in the notebook toolbar."""

import json
import re
from pathlib import Path

from jupyter_pause.lifecycle import BUSY_STATES, OPERATION_STATES, State
from jupyter_pause.protocol import MODULE_REIMPORTED

API_TS = Path(__file__).parents[1] / "labextension" / "src" / "api.ts"


def typescript_states(name: str = "PAUSE_STATES") -> list[str]:
    source = API_TS.read_text()
    block = re.search(rf"export const {name}\b[^=]*= \[(.*?)\]", source, re.S)
    assert block, f"{name} not found in labextension/src/api.ts"
    return re.findall(r"'([a-z-]+)'", block.group(1))


def test_typescript_states_equal_the_python_enum():
    assert typescript_states() == [s.value for s in State]


def test_the_kernel_guards_groups_of_states_are_the_servers():
    """The kernel guard waits in the busy states, asks in the resumable ones, and joins
    the server's kernel in the others: the same groups as the server's."""
    assert set(typescript_states("BUSY_STATES")) == {s.value for s in BUSY_STATES}
    assert set(typescript_states("RESUMABLE_STATES")) == {
        s.value for s in OPERATION_STATES["resume"]
    }


def test_the_frontend_hides_the_skipped_modules_the_server_hides():
    """``unsavedNames`` (labels.ts) leaves out what ``protocol.user_skipped`` leaves out."""
    source = (API_TS.parent / "labels.ts").read_text()
    constant = re.search(r"export const MODULE_REIMPORTED = '([^']*)'", source)
    assert constant and constant.group(1) == MODULE_REIMPORTED


def test_the_readme_names_the_toolbar_buttons_the_schema_puts_there():
    """README.md's "**Pause** and **Resume** in the notebook toolbar" lists the labels
    of the commands labextension/schema/plugin.json puts in the toolbar, and no other."""
    root = Path(__file__).parents[1]
    schema = json.loads((root / "labextension" / "schema" / "plugin.json").read_text())
    in_toolbar = {item["command"] for item in schema["jupyter.lab.toolbars"]["Notebook"]}
    source = (root / "labextension" / "src" / "index.ts").read_text()
    ids = dict(re.findall(r"^\s+(\w+): '(jupyter-pause:[\w-]+)',?$", source, re.M))
    labels = {
        ids[key]: label
        for key, label in re.findall(
            r"addCommand\(CommandIDs\.(\w+), \{\s*label: trans\.__\('([^']+)'\)", source
        )
    }
    readme = (root / "README.md").read_text()
    claim = re.search(r"In JupyterLab:(.*?) in the notebook\s+toolbar", readme, re.S)
    assert claim, "README.md no longer says what is in the notebook toolbar"
    assert set(re.findall(r"\*\*(.+?)\*\*", claim[1])) == {labels[c] for c in in_toolbar}
