"""Progress display for checkpoint and restore.

Silence for fast operations, a live bar (bytes, rate, ETA) for anything that
takes more than a second, and always a one-line summary at the end. Inside a
kernel the bar is an IPython display that is updated in place
(``update_display``), so it lives in the cell's output; elsewhere it is a
carriage-return line on stderr.

A caller that wants the numbers, not a bar (the server, through ``kernel_ops``), runs
the operation inside :func:`reported_to`: every bar made there also tells its listener
how far it is, from whichever thread counts.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from ..formatting import format_bytes, format_seconds

ENV_AFTER = "JUPYTER_PAUSE_PROGRESS_AFTER"  # seconds before the bar appears (tests set 0)

#: a bar's label as the phase a listener hears (protocol.CallProgress.phase)
PHASES = {"checkpoint": "writing", "restore": "reading"}
REPORT_EVERY = 0.25  # seconds between two reports to a listener

#: ``listener(phase, done, total)``: whom the bars made now report to
Listener = Callable[[str, int, int], None]
_LISTENER: ContextVar[Listener | None] = ContextVar("jupyter_pause_progress", default=None)


@contextlib.contextmanager
def reported_to(listener: Listener | None) -> Iterator[None]:
    """Every :class:`Progress` made inside (on this thread) also calls ``listener(phase,
    done, total)``, from the thread that counts: at its first count or total (a download
    held before its first byte says how much it waits for), then at most every
    :data:`REPORT_EVERY` seconds, and once it is done.  ``None``: nobody listens."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def _in_kernel() -> bool:
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class Progress:
    def __init__(self, label: str, total: int, enabled: bool = True, after: float | None = None):
        self.label = label
        self.total = max(int(total), 0)
        self.done = 0
        self.enabled = enabled
        self.after = float(os.environ.get(ENV_AFTER, 1.0)) if after is None else after
        self.start = time.monotonic()
        self._last = 0.0
        self.shown = False
        self._kernel = _in_kernel() if enabled else False
        self._display_id = uuid.uuid4().hex
        self._listener = _LISTENER.get()
        self._reported: float | None = None

    def add_total(self, n: int) -> None:
        self.total += n
        if self._listener is not None:
            self._report()

    def update(self, n: int) -> None:
        self.done += n
        if self._listener is not None:
            self._report()
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < self.after or (self.shown and now - self._last < 0.25):
            return
        self._last = now
        self._render(self.bar(now))

    def _report(self) -> None:
        now = time.monotonic()
        last = self._reported
        if last is None or now - last >= REPORT_EVERY or self.done >= self.total:
            self._reported = now
            self._listener(PHASES.get(self.label, self.label), self.done, self.total)

    def bar(self, now: float | None = None) -> str:
        elapsed = max((now or time.monotonic()) - self.start, 1e-9)
        rate = self.done / elapsed
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        width = 30
        filled = int(frac * width)
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        return (
            f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {frac * 100:5.1f}%  "
            f"{format_bytes(self.done)}/{format_bytes(self.total)}  {format_bytes(rate)}/s  "
            f"ETA {format_seconds(eta)}"
        )

    def _render(self, text: str, final: bool = False) -> None:
        if self._kernel:
            from IPython.display import display, update_display

            data = {"text/plain": text}
            if self.shown:
                update_display(data, raw=True, display_id=self._display_id)
            else:
                display(data, raw=True, display_id=self._display_id)
        else:
            end = "\n" if final else ""
            sys.stderr.write(f"\r{text}{' ' * 8}{end}")
            sys.stderr.flush()
        self.shown = True

    def finish(self, summary: str) -> None:
        """Replace the bar by the summary line (print it if no bar was shown)."""
        if not self.enabled:
            return
        if self.shown:
            self._render(summary, final=True)
        elif self._kernel:
            print(summary)
        else:
            sys.stderr.write(summary + "\n")
            sys.stderr.flush()
