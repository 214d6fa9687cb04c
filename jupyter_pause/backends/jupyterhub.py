"""``jupyterhub``: the server is a JupyterHub single-user server.

On a hub the accelerator belongs to the whole single-user server (a pod under
KubeSpawner, a process tree under LocalProcessSpawner), so this backend is
server-scope: the manager checkpoints every live notebook first, and if one
checkpoint fails nothing is released.  Then :meth:`JupyterHubBackend.release`

1. records the pause in ``jupyterhub.json`` next to the session store
   (``state: stopping``, with each notebook's checkpoint), and
2. asks the Hub to stop this very server
   (``DELETE /hub/api/users/{user}/server``) with the server's own token
   (SIGINT, LocalProcessSpawner's first stop signal, shuts the server down in
   order like SIGTERM: :class:`jupyter_pause.server.app.PauseApp` sees to it).
   The token needs ``delete:servers!server``, which the Hub's default
   ``server`` role does not have: see docs/jupyterhub.md.

It answers only when the Hub has committed to the stop: either the Hub's
answer (202/204), or the Hub's stop itself reaching this process (SIGINT or
SIGTERM; Jupyter Server then calls :meth:`stopping` before it shuts kernels
down).  In the second case :meth:`stopping` holds the shutdown until the
manager has recorded every notebook as paused.  If the Hub refuses (403 when
the role is missing, or no answer), :class:`BackendError` leaves every kernel
running and says why.

A pause with a scheduled resume first hands the schedule to the
``jupyter-pause-hub`` service (``PUT api/schedules/{user}/{server}`` at
``service_url``, with the server's token), which starts the server at that
time; if the service does not take it, nothing is stopped.

On the next start (the hub home page, ``POST /hub/api/users/{user}/server``,
the ``jupyter-pause-hub`` admin page, or its scheduler) :meth:`startup` finds the record,
writes the restart into the ledger, and, with ``resume_on_start``, the
manager restores every paused notebook from its checkpoint; otherwise
JupyterLab offers the resume.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from traitlets import Bool, Float, Unicode, default

from ..engine import durable
from ..hub_api import ENV_HUB_URL, HubAPI, HubError, fetch_json
from ..ledger import EventType
from .base import BackendError, PauseBackend, ReleaseFacts, StartupReport, schedule_summary

#: environment variables the Hub gives every single-user server
HUB_ENV = ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_USER")


def running_under_hub(environ=None) -> bool:
    """Whether this process was spawned by JupyterHub as a single-user server."""
    environ = os.environ if environ is None else environ
    return all(environ.get(name) for name in HUB_ENV)


def pause_reason(sessions) -> str:
    """Why the server pauses, from the pause operation that asked for it."""
    ops = [s.operation for s in sessions if s.operation and s.operation.kind == "pause"]
    options = ops[0].options if ops else {}
    if options.get("auto"):
        why = "paused automatically: idle"
    elif options.get("after_cell"):
        why = "paused by %pause"
    else:
        why = "paused by its user"
    return f"{why} ({options['reason']})" if options.get("reason") else why


class JupyterHubBackend(PauseBackend):
    """Pause by having the Hub stop the whole single-user server."""

    name = "jupyterhub"
    scope = "server"

    api_url = Unicode(help="the Hub API; empty: $JUPYTERHUB_API_URL").tag(config=True)
    user = Unicode(help="this server's owner; empty: $JUPYTERHUB_USER").tag(config=True)
    server_name = Unicode(
        help="this server's name ('' for the default server); empty: $JUPYTERHUB_SERVER_NAME"
    ).tag(config=True)
    stop_timeout = Float(
        60.0,
        help="seconds to wait for the Hub to stop this server; then the pause fails and "
        "every kernel keeps running",
    ).tag(config=True)
    resume_on_start = Bool(
        False,
        help="when the Hub starts this server after a pause, restore every paused notebook "
        "from its checkpoint without waiting for the user",
    ).tag(config=True)
    state_file = Unicode(
        help="where the pause is recorded; default: jupyterhub.json in PauseApp.state_dir"
    ).tag(config=True)
    service_url = Unicode(
        help="the jupyter-pause-hub service as this server reaches it, which starts the "
        f"server for a scheduled resume; empty: ${ENV_HUB_URL}"
    ).tag(config=True)

    @default("service_url")
    def _default_service_url(self):
        return os.environ.get(ENV_HUB_URL, "")

    @default("api_url")
    def _default_api_url(self):
        return os.environ.get("JUPYTERHUB_API_URL", "")

    @default("user")
    def _default_user(self):
        return os.environ.get("JUPYTERHUB_USER", "")

    @default("server_name")
    def _default_server_name(self):
        return os.environ.get("JUPYTERHUB_SERVER_NAME", "")

    @default("state_file")
    def _default_state_file(self):
        return os.path.join(self.state_dir, "jupyterhub.json")

    def __init__(self, ledger=None, **kwargs):
        super().__init__(ledger=ledger, **kwargs)
        self._started = time.time()
        self._stop_signalled = asyncio.Event()
        self._pause_task: asyncio.Task | None = None

    # -- plumbing ----------------------------------------------------------

    @property
    def server(self) -> str:
        """``user/name`` as the Hub writes it."""
        return f"{self.user}/{self.server_name}"

    def hub(self):
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not (self.api_url and self.user and token):
            raise BackendError(
                "jupyterhub: not a JupyterHub single-user server (JUPYTERHUB_API_URL, "
                "JUPYTERHUB_API_TOKEN and JUPYTERHUB_USER must be set)"
            )
        return HubAPI(self.api_url, token, timeout=self.stop_timeout)

    def read_state(self) -> dict[str, Any]:
        try:
            return json.loads(Path(self.state_file).read_text())
        except (OSError, ValueError):
            return {}

    def write_state(self, **state: Any) -> None:
        """Rewrite the record atomically (it must survive the stop)."""
        path = Path(self.state_file)
        durable.makedirs(path.parent)
        durable.write_file(path, json.dumps(state, indent=1).encode())

    def record(self, type_: EventType, path: str = "", **data) -> None:
        if self.ledger is None:
            return
        try:
            self.ledger.record(type_, path=path, backend=self.name, server=self.server, **data)
        except Exception:  # the ledger must never break a pause
            self.log.warning(
                "jupyter-pause: could not write %s to the ledger", type_, exc_info=True
            )

    # -- pause ---------------------------------------------------------------

    async def hand_over_schedule(self, schedule: dict[str, Any]) -> None:
        """Give the service the scheduled resume: nothing in a stopped server can wake it."""
        if not self.service_url:
            raise BackendError(
                "a scheduled resume needs the jupyter-pause-hub service to start this server "
                f"again, and its URL is not set ({ENV_HUB_URL}, see docs/jupyterhub.md); "
                "nothing was stopped: pause without a resume time, or ask the admin"
            )
        url = f"{self.service_url.rstrip('/')}/api/schedules/{self.user}/{self.server_name}"
        try:
            await fetch_json(url, os.environ.get("JUPYTERHUB_API_TOKEN", ""), "PUT", schedule)
        except HubError as e:
            raise BackendError(
                f"the jupyter-pause-hub service did not take the scheduled resume ({e}); "
                "nothing was stopped and every kernel keeps running"
            ) from None

    async def release(self, sessions, shutdown_kernel) -> ReleaseFacts:
        hub = self.hub()
        schedule = schedule_summary(sessions)
        if schedule is not None:
            await self.hand_over_schedule(schedule)
        requested = time.time()
        notebooks = [
            {"path": s.path, "checkpoint": (s.last_checkpoint or {}).get("id"), "gpus": s.gpus}
            for s in sessions
        ]
        self.write_state(
            state="stopping", server=self.server, requested=requested, notebooks=notebooks
        )
        self._pause_task = asyncio.current_task()
        self._stop_signalled.clear()
        stop = asyncio.ensure_future(hub.stop_server(self.user, self.server_name))
        signalled = asyncio.ensure_future(self._stop_signalled.wait())
        try:
            await asyncio.wait(
                {stop, signalled}, timeout=self.stop_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            signalled.cancel()
        if self._stop_signalled.is_set():
            answer = "stopping"  # the Hub's stop reached this process first
        elif stop.done() and stop.exception() is None:
            answer = str(stop.result())
        else:
            failure = stop.exception() if stop.done() else None
            stop.cancel()
            error = str(failure) if failure else f"no answer within {self.stop_timeout:g} s"
            self._pause_task = None
            self.write_state(state="failed", server=self.server, requested=requested, error=error)
            hint = ""
            if getattr(failure, "status", None) == 403:
                hint = (
                    " The Hub admin must let servers stop themselves: give the 'server' role "
                    "the scope delete:servers!server (see docs/jupyterhub.md)."
                )
            raise BackendError(
                f"the Hub did not stop this server ({error}).{hint} Every kernel keeps running; "
                "every notebook is checkpointed."
            )
        self.write_state(
            state="stopping",
            server=self.server,
            requested=requested,
            accepted=time.time(),
            hub_answer=answer,
            notebooks=notebooks,
        )
        self.log.info("jupyter-pause: the Hub is stopping %s (%s)", self.server, answer)
        await self.tell_service(pause_reason(sessions), requested)
        return ReleaseFacts(details={"server": self.server, "hub_answer": answer})

    async def tell_service(self, reason: str, at: float) -> None:
        """Tell the ``jupyter-pause-hub`` service that this server paused itself,
        when and why, so that its admin page says ``paused`` and not ``stopped``
        (``PUT api/pauses/{user}/{server}``).  Best effort, once the Hub has
        committed to the stop: the pause never waits long on it."""
        if not self.service_url:
            return
        url = f"{self.service_url.rstrip('/')}/api/pauses/{self.user}/{self.server_name}"
        body = {"at": at, "reason": reason}
        try:
            await fetch_json(url, os.environ.get("JUPYTERHUB_API_TOKEN", ""), "PUT", body, 5)
        except (HubError, OSError, TimeoutError) as e:
            self.log.warning("jupyter-pause: the hub service was not told of the pause: %s", e)

    async def stopping(self) -> None:
        """The server shuts down.  After a pause, that is the Hub's stop: let the
        manager record every notebook as paused before kernels are shut down,
        and note when the server stopped."""
        task, self._pause_task = self._pause_task, None
        if task is not None and not task.done():
            self._stop_signalled.set()
            await asyncio.wait({task}, timeout=max(1.0, min(self.stop_timeout, 8.0)))
        state = self.read_state()
        if state.get("state") == "stopping":
            state.update(state="stopped", stopped=time.time())
            self.write_state(**state)
            self.record(EventType.WORKSPACE_STOPPED, requested=state.get("requested"))

    # -- the next start ------------------------------------------------------

    async def startup(self) -> StartupReport:
        """Started by the Hub: after a pause, say so and record the restart."""
        state = self.read_state()
        if state.get("state") not in ("stopping", "stopped"):
            return StartupReport(info={"backend": self.name})
        notebooks = state.get("notebooks") or []
        for notebook in notebooks:
            # the server holds its accelerator again from its start
            self.record(
                EventType.CAPACITY_ACQUIRED,
                path=notebook["path"],
                time_=self._started,
                gpus=notebook.get("gpus"),
                reason="the Hub started the server",
            )
        self.write_state(**{**state, "state": "started", "started": self._started})
        info = {
            "backend": self.name,
            "was_paused": True,
            "server": self.server,
            "requested": state.get("requested"),
            "stopped": state.get("stopped"),
            "notebooks": notebooks,
        }
        detail = f"started again after a pause; {len(notebooks)} notebook(s) " + (
            "resume from their checkpoints" if self.resume_on_start else "wait for Resume"
        )
        return StartupReport(detail=detail, auto_resume=self.resume_on_start, info=info)

    # -- the fleet ---------------------------------------------------------------

    def keeps_fleet(self) -> bool:
        return bool(self.service_url)

    async def publish_fleet(self, rows) -> str | None:
        """``PUT api/fleet/{user}/{server}`` at the service, with the server's token:
        the service keeps the rows, so the fleet counts this server while it is stopped."""
        if not self.service_url:
            return None  # no jupyter-pause-hub service: no fleet on this hub
        url = (
            f"{self.service_url.rstrip('/')}/api/fleet/"
            f"{quote(self.user, safe='')}/{quote(self.server_name, safe='')}"
        )
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        try:
            await fetch_json(url, token, "PUT", {"rows": [r.to_json() for r in rows]})
        except HubError as e:
            raise BackendError(f"the jupyter-pause-hub service did not take them ({e})") from None
        return url

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "scope": self.scope, "server": self.server}
