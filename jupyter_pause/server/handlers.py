"""HTTP in, HTTP out: one handler class per endpoint, built from a route table.

Handlers parse the request, call the :class:`~.manager.PauseManager`, and turn
its answers into JSON.  Domain errors are translated in one place,
:func:`translate_errors`; nothing here decides anything about pausing.
The contract is described in ``jupyter_pause/openapi.yaml``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado.httputil import responses

from ..engine.errors import CheckpointError, CheckpointNotFound
from ..lifecycle import OperationInProgress
from .manager import PauseError

NAMESPACE = "jupyter-pause/api"


def translate_errors(method):
    """Map domain exceptions to HTTP answers with a message the user can act on."""

    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        try:
            return await method(self, *args, **kwargs)
        except PauseError as e:
            self.send_failure(e.status, str(e))
        except OperationInProgress as e:
            self.send_failure(409, str(e), operation=e.operation.to_json())
        except CheckpointNotFound as e:
            self.send_failure(404, str(e))
        except CheckpointError as e:
            self.send_failure(400, str(e))

    return wrapper


class PauseHandler(ExtensionHandlerMixin, APIHandler):
    """Base class: access to the manager and request-body helpers."""

    @property
    def manager(self):
        return self.settings["jupyter_pause_manager"]

    def body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError as e:
            raise PauseError(f"the request body is not JSON: {e}") from e
        if not isinstance(body, dict):
            raise PauseError("the request body must be a JSON object")
        return body

    async def path_argument(self, value: Any) -> str:
        return await self.manager.check_path(value)

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data, default=str))

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


class PauseSessionHandler(PauseHandler):
    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        body = self.body()
        path = await self.path_argument(body.get("path"))
        op = await self.manager.pause(
            path,
            force=bool(body.get("force", False)),
            after_cell=bool(body.get("after_cell", False)),
        )
        self.write_json({"operation": op.to_json()}, status=202)


class ResumeSessionHandler(PauseHandler):
    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        body = self.body()
        path = await self.path_argument(body.get("path"))
        checkpoint_id = body.get("checkpoint_id")
        if checkpoint_id is not None and not isinstance(checkpoint_id, str):
            raise PauseError("'checkpoint_id' must be a string")
        op = await self.manager.resume(path, checkpoint_id=checkpoint_id)
        self.write_json({"operation": op.to_json()}, status=202)


class PrewarmSessionHandler(PauseHandler):
    """Start a spare kernel for a paused notebook whose resume offer is showing."""

    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        path = await self.path_argument(self.body().get("path"))
        kernel_id = await self.manager.prewarm(path)
        self.write_json({"path": path, "kernel_id": kernel_id}, status=202)


class CheckpointSessionHandler(PauseHandler):
    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        path = await self.path_argument(self.body().get("path"))
        op = await self.manager.checkpoint(path)
        self.write_json({"operation": op.to_json()}, status=202)


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
        self.write_json({"path": path, "checkpoints": self.manager.list_checkpoints(path)})


class CheckpointHandler(PauseHandler):
    @tornado.web.authenticated
    @translate_errors
    async def delete(self, checkpoint_id: str):
        path = await self.path_argument(self.get_query_argument("path", None))
        self.manager.delete_checkpoint(path, checkpoint_id)
        self.set_status(204)
        self.finish()


class EventsHandler(PauseHandler):
    _track_activity = False

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        try:
            since = float(self.get_query_argument("since", "0") or 0)
            after_id = self.get_query_argument("after_id", None)
            after_id = int(after_id) if after_id is not None else None
        except ValueError as e:
            raise PauseError(
                f"'since' must be seconds since the epoch and 'after_id' an integer: {e}"
            ) from e
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
        watcher = self.manager.idle
        if watcher is None:
            raise PauseError("auto-pause is off (PauseApp.auto_pause = False)", status=404)
        self.write_json(await watcher.report())


class PostponeHandler(PauseHandler):
    @tornado.web.authenticated
    @translate_errors
    async def post(self):
        path = await self.path_argument(self.body().get("path"))
        watcher = self.manager.idle
        if watcher is None:
            raise PauseError("auto-pause is off (PauseApp.auto_pause = False)", status=409)
        await self.manager.sync()
        self.write_json({"path": path, "idle_clock_started": watcher.postpone(path)})


def build_report(handler: PauseHandler):
    """The accounting report for the request's ``since``/``until`` (epoch seconds)."""
    from ..accounting.report import build_report

    try:
        since = handler.get_query_argument("since", None)
        until = handler.get_query_argument("until", None)
        since = float(since) if since else None
        until = float(until) if until else None
    except ValueError as e:
        raise PauseError(f"'since' and 'until' are seconds since the epoch: {e}") from e
    return build_report(
        handler.settings["jupyter_pause_ledger"],
        since=since,
        until=until,
        storage=handler.manager.storage_by_notebook(),
    )


class ReportHandler(PauseHandler):
    """GPU-time accounting over a period (JSON)."""

    _track_activity = False

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        self.write_json(build_report(self).to_json())


class ReportPageHandler(ExtensionHandlerMixin, JupyterHandler):
    """The same report as a self-contained page with plots (no scripts)."""

    manager = PauseHandler.manager

    def send_failure(self, status: int, message: str, **extra: Any) -> None:
        raise tornado.web.HTTPError(status, reason=message)

    @tornado.web.authenticated
    @translate_errors
    async def get(self):
        from ..accounting.html import render_html

        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header(
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
        )
        self.finish(render_html(build_report(self)))


_OPERATION_ID = r"(?P<operation_id>[0-9a-f]{1,64})"
_CHECKPOINT_ID = r"(?P<checkpoint_id>[A-Za-z0-9_.:-]{1,128})"

#: (pattern under the base URL, handler class)
ROUTES = [
    (rf"{NAMESPACE}/status", StatusHandler),
    (rf"{NAMESPACE}/sessions/pause", PauseSessionHandler),
    (rf"{NAMESPACE}/sessions/resume", ResumeSessionHandler),
    (rf"{NAMESPACE}/sessions/prewarm", PrewarmSessionHandler),
    (rf"{NAMESPACE}/sessions/checkpoint", CheckpointSessionHandler),
    (rf"{NAMESPACE}/operations/{_OPERATION_ID}", OperationHandler),
    (rf"{NAMESPACE}/checkpoints", CheckpointsHandler),
    (rf"{NAMESPACE}/checkpoints/{_CHECKPOINT_ID}", CheckpointHandler),
    (rf"{NAMESPACE}/sessions/postpone", PostponeHandler),
    (rf"{NAMESPACE}/events", EventsHandler),
    (rf"{NAMESPACE}/activity", ActivityHandler),
    (rf"{NAMESPACE}/report", ReportHandler),
    (rf"{NAMESPACE}/report\.html", ReportPageHandler),
]
