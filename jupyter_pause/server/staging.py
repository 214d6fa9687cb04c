"""Continuous staging: with a bucket as the checkpoint root, a notebook's state goes to the
bucket in the background, so that losing the node (a spot preemption, a SIGKILL, a grace
too short for the whole state) costs only what changed since.

*When* is the autosaver's (server/autosave.py: after a cell ends with the kernel idle, at
most once per workload class's ``stage_every`` of use).  The manager's checkpoint then
commits the state in the local cache at disk speed, so the kernel is free again at once,
and hands the notebook here.  *How it travels* is this module's:

* **In the background** (:meth:`Stager.stage`): the newest checkpoint written here, only
  what the bucket lacks of it (content-addressed tensor files it already holds are not sent
  again), one notebook at a time for the whole server, one part at a time, using at most
  ``share`` of the link (``remote.Pace``: after each part, the link is left to others for
  as long as the part took, scaled).  A newer checkpoint while one is staged waits, and
  the one it supersedes is never sent.
* **The flush** (:meth:`Stager.flush`): a stopping server's last save of a notebook
  (server/shutdown.py).  The background staging stops; what the bucket lacks of the newest
  checkpoint (the delta) is measured, its upload time estimated from the bandwidth this
  process measured (``remote.LINK``), and it is sent at full speed, smallest file first,
  if it can end before the deadline; notebooks take turns on the link, the smallest delta
  first, so that as many as can be are saved.  A flush that cannot end in time says why.

The upload itself is the engine's (``mirror.stage``), in a thread; nothing here blocks the
event loop or a kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..clock import SYSTEM, Clock
from ..engine import mirror, remote
from ..engine import paths as checkpoint_paths
from ..engine.errors import CheckpointError
from ..formatting import format_bytes, format_seconds

#: the share of the link background staging may use, by default
SHARE = 0.5
#: the upload connections a flush uses (remote.PARALLEL // 2 parts in flight)
FLUSH_CONNECTIONS = remote.PARALLEL // 2


@dataclass
class Lane:
    """One notebook's staging, as the status shows it."""

    #: what the bucket lacked of the newest checkpoint here when its upload began
    pending: mirror.Delta | None = None
    #: bytes of ``pending`` up so far
    sent: int = 0
    uploading: bool = False
    #: why the last staging failed (None once one succeeds), and when (wall clock)
    error: str | None = None
    failed_at: float | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def count(self, nbytes: int) -> None:
        """A file of ``pending`` is up (from the upload's thread)."""
        self.sent += nbytes

    @property
    def bytes_left(self) -> int:
        return max(0, self.pending.bytes - self.sent) if self.pending else 0


@dataclass(frozen=True)
class Flushed:
    """What a flush did: ``delta``, what the bucket lacked of the newest checkpoint here
    (None: none was found), and ``why`` it is not committed there (None: it is)."""

    delta: mirror.Delta | None
    why: str | None = None

    @property
    def committed(self) -> bool:
        return self.delta is not None and self.why is None


class _Turns:
    """The link, one flush at a time: of those waiting, the smallest delta goes first."""

    def __init__(self) -> None:
        self._busy = False
        self._waiting: list[tuple[int, int]] = []
        self._seq = itertools.count()
        self._changed = asyncio.Condition()

    @property
    def waiting(self) -> bool:
        """Other flushes wait for the link."""
        return len(self._waiting) > 0

    @contextlib.asynccontextmanager
    async def turn(self, nbytes: int):
        me = (nbytes, next(self._seq))
        async with self._changed:
            heapq.heappush(self._waiting, me)
            try:
                await self._changed.wait_for(lambda: not self._busy and self._waiting[0] == me)
            finally:
                self._waiting.remove(me)
                heapq.heapify(self._waiting)
            self._busy = True
        try:
            yield
        finally:
            async with self._changed:
                self._busy = False
                self._changed.notify_all()


class Stager:
    """Puts the checkpoints written in the local cache of a bucket into the bucket: in the
    background at ``share`` of the link, or as a stopping server's flush."""

    def __init__(
        self,
        *,
        checkpoint_dir: checkpoint_paths.Bucket,
        share: float = SHARE,
        log,
        clock: Clock = SYSTEM,
        link: remote.Link = remote.LINK,
    ):
        self.checkpoint_dir = checkpoint_dir
        self.share = share
        self.log = log
        self.clock = clock
        self.link = link
        self.lanes: dict[str, Lane] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._background = asyncio.Semaphore(1)  # one background upload for the server
        self._turns: _Turns | None = None
        self._stopping = False

    def _nbdir(self, path: str) -> Path:
        return checkpoint_paths.notebook_dir(self.checkpoint_dir, path)

    def lane(self, path: str) -> Lane:
        return self.lanes.setdefault(path, Lane())

    # ------------------------------------------------------------ background

    async def stage(self, path: str) -> mirror.Delta | None:
        """Put the newest checkpoint written here of ``path`` in the bucket, in the
        background; returns it once it is committed there (None: nothing to stage, or the
        server stops).  Raises what the store raised (``CheckpointError``) or
        ``OSError``."""
        lock = self._locks.setdefault(path, asyncio.Lock())
        async with lock, self._background:
            if self._stopping:
                return None
            lane = self.lane(path)
            lane.stop.clear()
            lane.uploading, lane.sent = True, 0
            pace = remote.Pace(self.share, stop=lane.stop.is_set)
            try:
                staged = await in_daemon_thread(self._stage, path, lane, pace)
            except remote.Stopped:
                return None
            except (CheckpointError, OSError) as e:
                lane.error, lane.failed_at = f"{type(e).__name__}: {e}", self.clock.time()
                raise
            finally:
                lane.uploading = False
            lane.pending, lane.sent, lane.error = None, 0, None
            return staged

    def _stage(self, path: str, lane: Lane, pace: remote.Pace):
        nbdir = self._nbdir(path)
        wanted = mirror.delta(self.checkpoint_dir, nbdir)
        lane.pending = wanted if wanted and wanted.files else None
        return mirror.stage(self.checkpoint_dir, nbdir, pace, on_file=lane.count, wanted=wanted)

    def stop(self, path: str) -> None:
        """A pause of ``path`` uploads its newest state itself: its background staging
        stops at the next part (a later save stages again)."""
        if path in self.lanes:
            self.lanes[path].stop.set()

    def stop_background(self) -> None:
        """The server stops: no background staging starts, and those running stop at
        their next part."""
        self._stopping = True
        for lane in self.lanes.values():
            lane.stop.set()

    # ----------------------------------------------------------------- flush

    async def flush(self, path: str, deadline: float) -> Flushed:
        """Put the newest checkpoint here of ``path`` in the bucket before ``deadline``
        (monotonic), if it can be: see the module's docstring."""
        self.stop_background()
        if self._turns is None:
            self._turns = _Turns()
        try:
            delta = await asyncio.wait_for(
                in_daemon_thread(mirror.delta, self.checkpoint_dir, self._nbdir(path)),
                max(0.0, deadline - self.clock.monotonic()),
            )
        except (TimeoutError, asyncio.TimeoutError):
            return Flushed(None, "the bucket did not answer within the shutdown grace")
        except (CheckpointError, OSError) as e:
            return Flushed(None, f"the bucket could not be read: {e}")
        if delta is None:
            return Flushed(None, "no whole checkpoint of it was written here")
        if not delta.files:
            return Flushed(delta)
        async with self._turns.turn(delta.bytes):
            left = deadline - self.clock.monotonic()
            rate = self.link.rate(FLUSH_CONNECTIONS)
            if left <= 0 or (
                rate is not None and delta.bytes / rate > left and self._turns.waiting
            ):
                # it cannot end in time, and others can use the link: they have it
                return Flushed(delta, self._late(delta, 0, left, rate))
            lane = self.lane(path)
            lane.pending, lane.sent, lane.uploading = delta, 0, True
            stop = threading.Event()

            def run() -> None:
                mirror.stage(
                    self.checkpoint_dir,
                    self._nbdir(path),
                    remote.Pace(1.0, stop=stop.is_set),
                    on_file=lane.count,
                    lock_timeout=max(1.0, left),
                    wanted=delta,
                )

            upload = asyncio.ensure_future(in_daemon_thread(run))
            try:
                await asyncio.wait_for(asyncio.shield(upload), left)
            except (TimeoutError, asyncio.TimeoutError):
                stop.set()  # no part starts any more, and the commit is never sent
                upload.add_done_callback(_quietly)
                rate = self.link.rate(FLUSH_CONNECTIONS)
                return Flushed(delta, self._late(delta, lane.sent, 0, rate))
            except remote.Stopped:
                return Flushed(delta, "its upload was stopped")
            except (CheckpointError, OSError) as e:
                return Flushed(delta, f"its upload failed: {e}")
            finally:
                lane.uploading = False
        lane.pending, lane.sent = None, 0
        return Flushed(delta)

    @staticmethod
    def _late(delta: mirror.Delta, sent: int, left: float, rate: float | None) -> str:
        need = format_bytes(delta.bytes) + (f" ({format_bytes(sent)} of it sent)" if sent else "")
        speed = f" at the {format_bytes(rate)}/s measured" if rate else ""
        if left > 0 and rate:
            return (
                f"its last changes, {need}, need about {format_seconds(delta.bytes / rate)}"
                f"{speed}, and {format_seconds(left)} of the shutdown grace were left"
            )
        return (
            f"the upload of its last changes, {need}, did not end within the shutdown grace{speed}"
        )

    # ---------------------------------------------------------------- status

    def lag(self, session, activity, now: float) -> dict[str, Any]:
        """The staging lag of a notebook, as ``GET status``, the status popover and
        ``/metrics`` show it: ``seconds``, how old the newest state the bucket holds is
        while the kernel has run cells since (0: the bucket holds the kernel's state);
        ``bytes``, what the bucket lacks of the checkpoints written here (changes since
        the last one are measured at the next save); ``checkpoint``, the bucket's newest
        ({id, time}); ``uploading``; ``error``, why the last staging failed, until one
        succeeds or the bucket holds a state written after it (a pause's or a
        checkpoint's own upload went through).  ``activity``: the kernel's
        :class:`~.activity.KernelActivity`, if it runs."""
        lane = self.lanes.get(session.path) or Lane()
        held = session.bucket_checkpoint or {}
        error = lane.error
        if error and lane.failed_at is not None and (held.get("time") or 0) > lane.failed_at:
            error = None
        seconds = 0.0
        if session.state.has_kernel and activity is not None:
            at = held.get("time")
            changed = activity.busy or at is None or activity.last_user_activity.wall > at
            if changed:
                seconds = max(0.0, now - (at if at is not None else activity.started.wall))
        return {
            "seconds": seconds,
            "bytes": lane.bytes_left,
            "checkpoint": {"id": held["id"], "time": held.get("time")} if held.get("id") else None,
            "uploading": lane.uploading,
            "error": error,
        }


def final_save(
    outcome: str,
    held: dict[str, Any] | None,
    newest: str | None,
    why: str | None,
    now: float,
    delta: int | None = None,
) -> dict[str, Any]:
    """What a stopping server's last save left in the bucket (``Session.final_save``, the
    bucket's record): ``outcome`` ``newest`` (the state as of the last cell), ``older``
    (the newest state the bucket holds is ``checkpoint``, taken ``at``), or ``none``
    (the bucket holds no state of it); ``newest`` the checkpoint the server wrote last,
    ``why`` why that is not the one, ``stopped`` when; ``bytes`` what the bucket lacked
    of the newest when the last save began (None: unknown, no checkpoint was written)."""
    held = held or {}
    return {
        "outcome": outcome,
        "checkpoint": held.get("id"),
        "at": held.get("time"),
        "newest": newest,
        "why": why,
        "stopped": now,
        "bytes": delta,
    }


def describe_final_save(final: dict[str, Any]) -> str:
    """A :func:`final_save` in a sentence, for the log and a pause's messages."""
    outcome = final["outcome"]
    if outcome == "newest":
        return f"saved in the bucket to its last cell (checkpoint {final['checkpoint']})"
    if outcome == "older":
        at = final.get("at") or checkpoint_paths.id_time(final["checkpoint"])
        age = format_seconds(max(0.0, final["stopped"] - at))
        return (
            f"the bucket holds an older state, checkpoint {final['checkpoint']} of "
            f"{_clock(at)} ({age} before the server stopped); the changes after it were "
            f"not uploaded: {final['why']}"
        )
    return f"NOT saved in the bucket, which holds no state of it: {final['why']}"


def lost_at_stop(final: dict[str, Any] | None, restored: str) -> str | None:
    """What a resume that restored ``restored`` tells of a notebook whose server stopped
    before the bucket held its last state (its ``final_save``); None when nothing was
    lost (the newest state was saved, or this node's own cache had it)."""
    if not final or final.get("outcome") == "newest" or restored == final.get("newest"):
        return None
    at = final.get("at") or checkpoint_paths.id_time(restored)
    return (
        f"Resumed from the state of {_clock(at)} (checkpoint {restored}); the changes "
        f"after that were lost when its node stopped: {final.get('why')}"
    )


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


async def in_daemon_thread(function, *args):
    """``function(*args)`` in a thread of its own that does not keep the process alive:
    an upload given up on (a part still in flight when the grace ended, or when staging
    was stopped) must not hold the stopping server until its request times out."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def settle(result, error) -> None:
        if done.cancelled():
            return
        if error is None:
            done.set_result(result)
        else:
            done.set_exception(error)

    def run() -> None:
        try:
            result, error = function(*args), None
        except BaseException as e:  # handed to the awaiting task
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="jp-staging", daemon=True).start()
    return await done


def _quietly(future: asyncio.Future) -> None:
    """A flush given up on ends later, unheard: its error is not news."""
    if not future.cancelled():
        future.exception()
