"""One clock (issue #42 item 4): every time the server writes (a session's, an
operation's, a ledger row's, a schedule's) is read on its injected clock
(jupyter_pause/clock.py), which tests step; none bypasses it with ``time.time()``.
The lifecycle and the ledger stand below the server and take a clock that defaults to
the system's."""

from __future__ import annotations

import re
from pathlib import Path

import jupyter_pause
from jupyter_pause.clock import Instant
from jupyter_pause.ledger import EventType, Ledger
from jupyter_pause.lifecycle import SessionStore, State

PACKAGE = Path(jupyter_pause.__file__).parent
WRITERS = [
    *sorted((PACKAGE / "server").glob("*.py")),
    PACKAGE / "lifecycle.py",
    PACKAGE / "ledger.py",
]
#: documented exceptions (file name -> why); none today
ALLOWED: dict[str, str] = {}


def test_the_server_reads_no_wall_clock_but_its_own():
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in WRITERS
        if path.name not in ALLOWED
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\btime\.time\(\)", line)
    ]
    assert found == [], "read the injected clock instead (jupyter_pause/clock.py)"


class Stepped:
    """A clock that stands still until stepped."""

    def __init__(self, now: float):
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


def test_sessions_operations_and_rows_carry_the_injected_time(tmp_path):
    clock = Stepped(1_000_000.0)
    store = SessionStore(tmp_path / "sessions.json", clock=clock)
    op = store.begin("nb.ipynb", "pause", owner="me")
    assert (op.started, op.heartbeat, store.get("nb.ipynb").since) == (1e6, 1e6, 1e6)
    clock.now += 5
    store.get("nb.ipynb").move(State.CHECKPOINTING, at=clock.time())
    assert store.finish("nb.ipynb").finished == 1_000_005.0
    assert store.get("nb.ipynb").since == 1_000_005.0
    ledger = Ledger(clock=clock)
    assert ledger.record(EventType.PAUSE_REQUESTED, path="nb.ipynb").time == 1_000_005.0
    assert Instant.now(clock).wall == 1_000_005.0
