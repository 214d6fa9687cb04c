"""The notice before SIGTERM: a spot or preemptible node gets a short warning before its
pods are stopped (GKE's termination taint, AWS's node termination handler; the backend
reads them, backends/kubernetes/notice.py).  The flush starts then, not at SIGTERM.

Every ``interval`` seconds the backend is asked whether the machine under the server is
about to go.  At the first notice the saves hurry (:meth:`PauseManager.hurry`: staging
takes the whole link; :meth:`Autosaver.hurry`: every idle notebook is saved and staged
now, and then after every cell), so that when SIGTERM comes the shutdown's flush has only
the last cell's changes to carry.  The kernels keep running: a rebalance recommendation
may never be followed by an interruption, and the user's work goes on until the end.
The notice is in ``GET status`` (``notice``) and the log.
"""

from __future__ import annotations

import asyncio
import contextlib

from ..backends.base import TerminationNotice


class NoticeWatcher:
    def __init__(self, *, backend, operations, autosaver, interval: float, log):
        self.backend = backend
        #: the manager: told of the notice (:meth:`PauseManager.hurry`)
        self.operations = operations
        #: the autosaver, if one runs: saves every idle notebook now
        self.autosaver = autosaver
        self.interval = interval
        self.log = log
        self.notice: TerminationNotice | None = None
        self._task: asyncio.Task | None = None
        self._problem: str | None = None

    def start(self) -> None:
        if self.interval > 0:
            self._task = asyncio.ensure_future(self._watch())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                notice = await self.backend.termination_notice()
            except Exception as e:  # the API or its RBAC: said once per different cause
                problem = f"{type(e).__name__}: {e}"
                if problem != self._problem:
                    self.log.warning(
                        "jupyter-pause: could not read this server's node for a termination "
                        "notice (%s); see docs/kubernetes.md, 'Spot and preemptible GPUs'",
                        problem,
                    )
                    self._problem = problem
                continue
            self._problem = None
            if notice is not None:
                await self.heard(notice)

    async def heard(self, notice: TerminationNotice) -> None:
        """The platform gave notice: hurry the saves (once per notice that says more)."""
        if self.notice is not None and (self.notice.certain or not notice.certain):
            return
        self.notice = notice
        self.log.warning(
            "jupyter-pause: node %s is to be terminated (%s: %s, %s); every notebook's state "
            "goes to the bucket now, at full speed",
            notice.node or "?",
            notice.source,
            notice.kind,
            notice.detail,
        )
        self.operations.hurry(notice)
        if self.autosaver is not None:
            await self.autosaver.hurry()
