"""The frontend's list of lifecycle states is the server's, in the same order."""

import re
from pathlib import Path

from jupyter_pause.lifecycle import State

API_TS = Path(__file__).parents[1] / "labextension" / "src" / "api.ts"


def typescript_states() -> list[str]:
    source = API_TS.read_text()
    block = re.search(r"export const PAUSE_STATES = \[(.*?)\] as const;", source, re.S)
    assert block, "PAUSE_STATES not found in labextension/src/api.ts"
    return re.findall(r"'([a-z-]+)'", block.group(1))


def test_typescript_states_equal_the_python_enum():
    assert typescript_states() == [s.value for s in State]
