"""One home per concept: each is spelled in one module of the package, and the others
import it from there."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import jupyter_pause

PACKAGE = Path(jupyter_pause.__file__).parent
ENV_NAME = re.compile(r"\bJUPYTER_PAUSE_[A-Z0-9_]+\b")


def spelled(pattern: re.Pattern) -> dict[str, set[str]]:
    """Each match of ``pattern`` in the package's modules: the modules that spell it."""
    found = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        for name in pattern.findall(path.read_text()):
            found[name].add(str(path.relative_to(PACKAGE)))
    return found


def test_each_environment_name_is_spelled_in_one_module():
    found = spelled(ENV_NAME)
    # the grep sees them: those the kernel, the store and the hub read
    assert {
        "JUPYTER_PAUSE_NOTEBOOK",
        "JUPYTER_PAUSE_CHECKPOINT_DIR",
        "JUPYTER_PAUSE_HUB_URL",
    } <= set(found)
    assert {name: sorted(where) for name, where in found.items() if len(where) > 1} == {}
