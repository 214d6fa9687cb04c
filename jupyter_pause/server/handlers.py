"""HTTP in, HTTP out: one handler class per endpoint, built from a route table.

Handlers parse the request, call the :class:`~.manager.PauseManager`, and turn
its answers into JSON.  Domain errors are translated in one place,
:func:`translate_errors`; nothing here decides anything about pausing.
The contract is described in ``jupyter_pause/openapi.yaml``.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado.httputil import responses

from ..engine.errors import (
    CheckpointError,
    CheckpointNotFound,
    ForeignCheckpoint,
    RemoteStoreError,
    StoreBusy,
)
from ..lifecycle import Operation, OperationInProgress
from ..schedule import ScheduleError, parse_resume_at
from .errors import Conflict, NotFound, PauseError, Unavailable
from .reconcile import RestoreDamage
from .unsaveable import unsaveable

NAMESPACE = "jupyter-pause/api"

#: Bounds of the numbers the API accepts: SQLite's integers, and times that
#: a calendar can show (year 1970 to 9999).
MAX_ID = 2**63 - 1
MAX_TIME = 253402300799.0


#: the HTTP status of each error a handler answers with, by type: the first that matches
STATUS_OF_ERROR: tuple[tuple[type[Exception], int], ...] = (
    (NotFound, 404),
    (Conflict, 409),
    (Unavailable, 503),
    (PauseError, 400),
    (OperationInProgress, 409),
    (CheckpointNotFound, 404),
    (StoreBusy, 409),
    (ForeignCheckpoint, 403),
    (RemoteStoreError, 503),  # the bucket behind the store: not the request's fault
    (CheckpointError, 400),
)
TRANSLATED = tuple(kind for kind, _ in STATUS_OF_ERROR)


def translate_errors(method):
    """Map domain exceptions to HTTP answers with a message the user can act on."""

    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        try:
            return await method(self, *args, **kwargs)
        except TRANSLATED as e:
            status = next(code for kind, code in STATUS_OF_ERROR if isinstance(e, kind))
            extra = {}
            if isinstance(e, OperationInProgress):
                extra["operation"] = e.operation.to_json()
            self.send_failure(status, str(e), **extra)

    return wrapper


class PauseHandler(ExtensionHandlerMixin, APIHandler):
    """Base class: access to the manager and request-body helpers."""

    @property
    def manager(self):
        return self.settings["jupyter_pause_manager"]

    @property
    def catalogue(self):
        """The checkpoint store as the server reads and changes it (server/catalogue.py)."""
        return self.settings["jupyter_pause_catalogue"]

    @property
    def schedules(self):
        """The notebooks' scheduled resumes (server/schedules.py)."""
        return self.settings["jupyter_pause_schedules"]

    @property
    def checkpointer(self):
        """A kernel's checkpoint, as the operations take it (server/checkpointing.py)."""
        return self.settings["jupyter_pause_checkpointer"]

    @property
    def reconciler(self):
        """Jupyter's kernels and contents brought into the sessions (server/reconcile.py)."""
        return self.settings["jupyter_pause_reconciler"]

    @property
    def clock(self):
        """The server's clock (jupyter_pause/clock.py)."""
        return self.settings["jupyter_pause_clock"]

    @property
    def idle_watcher(self):
        """The idle watcher, or None when auto-pause is off."""
        return self.settings.get("jupyter_pause_idle")

    def body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.request.body or b"{}")
        except RecursionError:
            raise PauseError("the request body is nested too deeply") from None
        except ValueError as e:
            raise PauseError(f"the request body is not JSON: {e}") from e
        if not isinstance(body, dict):
            raise PauseError("the request body must be a JSON object")
        return body

    async def path_argument(self, value: Any) -> str:
        return await self.manager.check_path(value)

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        try:  # almost always: walking every value first would double the cost
            text = json.dumps(data, default=str, allow_nan=False)
        except ValueError:  # a NaN or an infinity somewhere
            text = json.dumps(finite(data), default=str, allow_nan=False)
        self.finish(text)

    def send_failure(self, status: int, message: str, **extra: Any) -> None:
        """A JSON error body, as Jupyter's APIHandler writes them."""
        self.write_json({"message": message, "reason": responses.get(status), **extra}, status)


class StatusHandler(PauseHandler):
    # Polled every few seconds by every open JupyterLab: never counts as activity.
    _track_activity = False

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        status = await self.manager.status()
        self.write_json({"version": self.settings["jupyter_pause_version"], **status})


def finite(data: Any) -> Any:
    """``data`` with NaN and infinities as null: they are not JSON."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def flag(body: dict[str, Any], name: str) -> bool:
    """A boolean field of a request body: absent is false, anything but a
    JSON boolean is refused (``"false"`` must not mean true)."""
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise PauseError(f"{name!r} must be true or false, not {value!r}")
    return value


def number_argument(handler, name: str, *, integer: bool = False) -> float | int | None:
    """A numeric query argument, refused unless finite and within range."""
    raw = handler.get_query_argument(name, None)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw) if integer else float(raw)
    except (ValueError, OverflowError):
        kind = "an integer" if integer else "seconds since the epoch"
        raise PauseError(f"{name!r} must be {kind}, not {raw[:40]!r}") from None
    low, high = (-MAX_ID, MAX_ID) if integer else (0.0, MAX_TIME)
    if not (math.isfinite(value) and low <= value <= high):
        raise PauseError(f"{name!r} is out of range ({raw[:40]!r})")
    return value


def resume_time(body: dict[str, Any], now: float) -> float | None:
    """The optional ``resume_at`` of a body as epoch seconds, ``now`` being the
    server's time (see
    :func:`jupyter_pause.schedule.parse_resume_at` for what is accepted)."""
    value = body.get("resume_at")
    if value is None:
        return None
    try:
        return parse_resume_at(value, now)
    except ScheduleError as e:
        raise PauseError(str(e)) from None


class StartOperationHandler(PauseHandler):
    """POST ``{"path": ...}``: start an operation on the notebook; 202 with the
    operation, which its own endpoint then follows.  Each endpoint says which
    (:meth:`start`)."""

    async def start(self, path: str, body: dict[str, Any]) -> Operation:
        raise NotImplementedError

    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        body = self.body()
        op = await self.start(await self.path_argument(body.get("path")), body)
        self.write_json({"operation": op.to_json()}, status=202)


class PauseSessionHandler(StartOperationHandler):
    async def start(self, path: str, body: dict[str, Any]) -> Operation:
        return await self.manager.pause(
            path,
            force=flag(body, "force"),
            after_cell=flag(body, "after_cell"),
            resume_at=resume_time(body, self.clock.time()),
        )


class ScheduleHandler(PauseHandler):
    """A paused notebook's scheduled resume: set (PUT) or cancel (DELETE)."""

    @tornado.web.authenticated
    @translate_errors
    async def put(self):
        body = self.body()
        path = await self.path_argument(body.get("path"))
        at = resume_time(body, self.clock.time())
        if at is None:
            raise PauseError("'resume_at' is required: when to resume")
        await self.manager.recovered.wait()
        schedule = self.schedules.set(path, at)
        self.write_json({"path": path, "schedule": schedule})

    @tornado.web.authenticated
    @translate_errors
    async def delete(self):
        path = await self.path_argument(self.get_query_argument("path", None))
        await self.manager.recovered.wait()
        if not self.schedules.cancel(path, "cancelled by the user"):
            raise NotFound(f"{path!r} has no scheduled resume")
        self.set_status(204)
        self.finish()


class ResumeSessionHandler(StartOperationHandler):
    async def start(self, path: str, body: dict[str, Any]) -> Operation:
        checkpoint_id = body.get("checkpoint_id")
        if checkpoint_id is not None and not isinstance(checkpoint_id, str):
            raise PauseError("'checkpoint_id' must be a string")
        return await self.manager.resume(path, checkpoint_id=checkpoint_id)


class HibernateSessionHandler(StartOperationHandler):
    """Hibernate a kernel in place: its GPU memory to host memory, its process kept."""

    async def start(self, path: str, body: dict[str, Any]) -> Operation:
        return await self.manager.hibernate(path, after_cell=flag(body, "after_cell"))


class WakeSessionHandler(StartOperationHandler):
    """Bring a hibernated kernel's GPU memory back (a cell does it by itself)."""

    async def start(self, path: str, body: dict[str, Any]) -> Operation:
        return await self.manager.wake(path)


class PrewarmSessionHandler(PauseHandler):
    """Start a spare kernel for a paused notebook whose resume offer is showing."""

    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        path = await self.path_argument(self.body().get("path"))
        kernel_id = await self.manager.prewarm(path)
        self.write_json({"path": path, "kernel_id": kernel_id}, status=202)


class CheckpointSessionHandler(StartOperationHandler):
    async def start(self, path: str, body: dict[str, Any]) -> Operation:
        return await self.manager.checkpoint(path)


class CheckpointedHandler(PauseHandler):
    """The kernel took a checkpoint by itself (``%checkpoint``): record it."""

    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        body = self.body()
        path = await self.path_argument(body.get("path"))
        checkpoint_id = body.get("checkpoint_id")
        if not isinstance(checkpoint_id, str):
            raise PauseError("'checkpoint_id' must be a string")
        await self.manager.recovered.wait()
        checkpoint = await self.catalogue.record_kernel_checkpoint(path, checkpoint_id)
        self.write_json({"path": path, "last_checkpoint": checkpoint})


class RestoredHandler(PauseHandler):
    """A resumed kernel's background load found objects damaged after the resume ended."""

    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        body = self.body()
        path = await self.path_argument(body.get("path"))
        recovered = body.get("recovered", {})
        lost = body.get("lost", [])
        if not all(isinstance(body.get(k), str) for k in ("checkpoint_id", "operation_id")):
            raise PauseError("'checkpoint_id' and 'operation_id' must be strings")
        if not isinstance(recovered, dict) or not all(
            isinstance(v, str) for v in recovered.values()
        ):
            raise PauseError("'recovered' must map names to checkpoint ids")
        if not isinstance(lost, list) or not all(isinstance(n, str) for n in lost):
            raise PauseError("'lost' must be a list of names")
        await self.manager.recovered.wait()
        damage = RestoreDamage(body["operation_id"], body["checkpoint_id"], recovered, lost)
        op = self.reconciler.record_restore_damage(path, damage)
        self.write_json({"operation": op.to_json()})


class UnsaveableHandler(PauseHandler):
    """What a pause would not save now: asked before a person pauses."""

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        path = await self.path_argument(self.get_query_argument("path", None))
        self.write_json(
            {"path": path, "unsaveable": await unsaveable(self.manager, self.checkpointer, path)}
        )


class OperationHandler(PauseHandler):
    _track_activity = False

    @tornado.web.authenticated
    @translate_errors
    async def get(self, operation_id: str):
        self.write_json(self.manager.operation(operation_id).to_json())


class CheckpointsHandler(PauseHandler):
    _track_activity = False

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        path = await self.path_argument(self.get_query_argument("path", None))
        listing = await self.catalogue.list_checkpoints(path)
        if self.get_query_argument("verify", "") in ("1", "true"):
            listing = await self.catalogue.verify(path, listing)
        self.write_json({"path": path, "checkpoints": listing})


class CheckpointHandler(PauseHandler):
    @tornado.web.authenticated
    @translate_errors
    async def delete(self, checkpoint_id: str):
        path = await self.path_argument(self.get_query_argument("path", None))
        await self.catalogue.delete_checkpoint(path, checkpoint_id)
        self.set_status(204)
        self.finish()


class EventsHandler(PauseHandler):
    _track_activity = False

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        since = number_argument(self, "since") or 0
        after_id = number_argument(self, "after_id", integer=True)
        path = self.get_query_argument("path", None)
        events = self.settings["jupyter_pause_ledger"].events(
            since=since, path=path, after_id=after_id
        )
        self.write_json({"events": [e.to_json() for e in events]})


class ActivityHandler(PauseHandler):
    # Probes poll this; reading activity must never create any.
    _track_activity = False

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        watcher = self.idle_watcher
        if watcher is None:
            raise NotFound("auto-pause is off (PauseApp.auto_pause = False)")
        self.write_json(await watcher.report())


class PostponeHandler(PauseHandler):
    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        path = await self.path_argument(self.body().get("path"))
        watcher = self.idle_watcher
        if watcher is None:
            raise Conflict("auto-pause is off (PauseApp.auto_pause = False)")
        await self.manager.sync()
        self.write_json({"path": path, "idle_clock_started": watcher.postpone(path)})


async def build_report(handler: PauseHandler):
    """The accounting report for the request's ``since``/``until`` (epoch seconds)."""
    from ..report.build import build_report

    since = number_argument(handler, "since")
    until = number_argument(handler, "until")
    if since is not None and until is not None and until < since:
        raise PauseError("'until' is before 'since'")
    return build_report(
        handler.settings["jupyter_pause_ledger"],
        since=since,
        until=until,
        storage=await handler.catalogue.storage_by_notebook(),
    )


class ReportHandler(PauseHandler):
    """GPU-time accounting over a period (JSON)."""

    _track_activity = False

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        self.write_json((await build_report(self)).to_json())


class ReportPageHandler(ExtensionHandlerMixin, JupyterHandler):
    """The same report as a self-contained page with plots (no scripts)."""

    manager = PauseHandler.manager
    catalogue = PauseHandler.catalogue

    def send_failure(self, status: int, message: str, **extra: Any) -> None:
        raise tornado.web.HTTPError(status, reason=message)

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        from ..report.html import render_html

        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header(
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
        )
        self.finish(render_html(await build_report(self)))


_OPERATION_ID = r"(?P<operation_id>[0-9a-f]{1,64})"
_CHECKPOINT_ID = r"(?P<checkpoint_id>[A-Za-z0-9_.:-]{1,128})"

#: (pattern under the base URL, handler class)
ROUTES = [
    (rf"{NAMESPACE}/status", StatusHandler),
    (rf"{NAMESPACE}/sessions/pause", PauseSessionHandler),
    (rf"{NAMESPACE}/sessions/resume", ResumeSessionHandler),
    (rf"{NAMESPACE}/sessions/prewarm", PrewarmSessionHandler),
    (rf"{NAMESPACE}/sessions/hibernate", HibernateSessionHandler),
    (rf"{NAMESPACE}/sessions/wake", WakeSessionHandler),
    (rf"{NAMESPACE}/sessions/schedule", ScheduleHandler),
    (rf"{NAMESPACE}/sessions/checkpoint", CheckpointSessionHandler),
    (rf"{NAMESPACE}/sessions/checkpointed", CheckpointedHandler),
    (rf"{NAMESPACE}/sessions/restored", RestoredHandler),
    (rf"{NAMESPACE}/sessions/unsaveable", UnsaveableHandler),
    (rf"{NAMESPACE}/operations/{_OPERATION_ID}", OperationHandler),
    (rf"{NAMESPACE}/checkpoints", CheckpointsHandler),
    (rf"{NAMESPACE}/checkpoints/{_CHECKPOINT_ID}", CheckpointHandler),
    (rf"{NAMESPACE}/sessions/postpone", PostponeHandler),
    (rf"{NAMESPACE}/events", EventsHandler),
    (rf"{NAMESPACE}/activity", ActivityHandler),
    (rf"{NAMESPACE}/report", ReportHandler),
    (rf"{NAMESPACE}/report\.html", ReportPageHandler),
]
