"""``jupyter-pause-hub``: a JupyterHub managed service that pauses idle servers
instead of culling them.

Every ``check_interval`` it walks the users' running servers through the Hub
API.  For a server with jupyter-pause it reads ``jupyter-pause/api/activity``
(through the proxy, with the service's token) and, when
:func:`~.policy.decide` says so, pauses it: it asks the server to pause one
live notebook (the ``jupyterhub`` backend then checkpoints every notebook and
has the Hub stop the server), and waits until the Hub reports the server
stopped.  A server without jupyter-pause is left alone, or culled with
``fallback = "cull"``.

At its URL (``/services/jupyter-pause/``) it serves a page for the Hub's
admins: each user's servers, running or paused, last activity, accelerator
hours released by pausing this week (from each server's report), and a
Pause / Start button per server.  ``api/servers`` serves the same as JSON,
and ``metrics`` as Prometheus metrics (``hub/metrics.py``).

It also holds the fleet (``hub/fleet.py``): each server hands over its ledger
rolled up per notebook (``PUT api/fleet/{user}/{server}``), so ``fleet`` (a
page), ``api/fleet`` (``jupyter pause report --fleet --hub``) and the metrics
count every user's notebooks, also while their servers are stopped.

A paused server with a scheduled resume (``%pause --resume-at``, the Pause
dialog) hands the schedule over before it stops (``PUT api/schedules/{user}/{server}``);
at that time the service starts the server, and the server resumes its
notebooks from their checkpoints by itself (its own session file knows the
schedule), so the user finds them ready.

What it did is kept in ``pauses.json`` in ``data_dir``, so that a restart of
the service (or of the Hub) still knows which stopped servers are paused,
and when they are to start again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tornado import web
from tornado.ioloop import IOLoop
from traitlets import Enum, Float, Int, Unicode, default
from traitlets.config import Application

from ..engine import durable
from ..hub_api import HubAPI, HubError, fetch_json
from ..version import __version__
from .fleet import FleetStore
from .policy import FALLBACKS, Refused, decide, iso, retry_delay, schedule_problem

log = logging.getLogger("jupyter_pause.hub")


def week_start(now: float) -> float:
    """Monday 00:00 UTC of the week that contains ``now``."""
    day = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
    monday = day - dt.timedelta(days=day.weekday())
    return dt.datetime(monday.year, monday.month, monday.day, tzinfo=dt.timezone.utc).timestamp()


class Records:
    """What the service knows about each server (``user/name``), as one JSON file.

    The file is replaced atomically and durably at each change.  One that cannot
    be read back (a power loss, a disk fault, a hand edit) is never taken for
    "nothing recorded" in silence: it is kept aside as ``pauses.json.damaged-<time>``,
    the error is logged, and :attr:`problem` says so on the admin page.
    """

    def __init__(self, path: Path):
        self.path = path
        self.problem = ""  # why the file found at start could not be used
        self.servers: dict[str, dict[str, Any]] = self.load()

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}  # a new service
        except OSError as e:
            self.problem = f"{self.path} could not be read ({e}): the service knows no servers"
            log.error("jupyter-pause-hub: %s", self.problem)
            return {}
        try:
            servers = json.loads(raw)["servers"]
            if not all(isinstance(r, dict) for r in servers.values()):
                raise TypeError("a server's record is not an object")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            why = "it is empty" if not raw.strip() else f"{type(e).__name__}: {e}"
            aside = self.path.with_name(
                f"{self.path.name}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            )
            os.replace(self.path, aside)
            durable.fsync_dir(self.path.parent)
            self.problem = (
                f"{self.path} was damaged ({why}) and is kept as {aside}: the pauses and "
                "scheduled starts it held are not known to the service; start those servers "
                "from this page"
            )
            log.error("jupyter-pause-hub: %s", self.problem)
            return {}
        return servers

    def get(self, key: str) -> dict[str, Any]:
        return self.servers.setdefault(key, {})

    def update(self, key: str, **values: Any) -> dict[str, Any]:
        record = self.get(key)
        record.update(values)
        self.save()
        return record

    def scheduled(self, user: str) -> list[str]:
        """The keys of ``user``'s servers with a scheduled start."""
        return [
            key
            for key, record in self.servers.items()
            if key.partition("/")[0] == user and record.get("schedule")
        ]

    def save(self) -> None:
        durable.makedirs(self.path.parent)
        payload = {"version": 1, "servers": self.servers}
        durable.write_file(self.path, json.dumps(payload, indent=1).encode())


class PauseService(Application):
    """Pause idle JupyterHub servers instead of culling them."""

    name = "jupyter-pause-hub"
    version = __version__
    description = __doc__

    timeout = Float(
        1800.0,
        help="seconds a server must be idle (no notebook activity, no busy kernel) before "
        "it is paused; workload classes with a longer threshold keep it longer",
    ).tag(config=True)
    check_interval = Float(60.0, help="seconds between two walks over the servers").tag(config=True)
    max_concurrent_checks = Int(
        8,
        min=1,
        help="servers a walk checks at the same time (each check reads the server's status, "
        "activity and report through the proxy)",
    ).tag(config=True)
    fallback = Enum(
        FALLBACKS,
        "leave",
        help="servers without jupyter-pause: 'leave' them to the usual culler, or 'cull' "
        "them (stop, losing kernel state) after the same timeout",
    ).tag(config=True)
    stop_timeout = Float(
        300.0, help="seconds a pause may take, from the request until the Hub reports it stopped"
    ).tag(config=True)
    proxy_url = Unicode(
        "http://127.0.0.1:8000",
        help="where the service reaches users' servers: the proxy's URL (on Zero to "
        "JupyterHub http://proxy-public)",
    ).tag(config=True)
    max_schedules_per_user = Int(
        16, help="scheduled starts one user may have at a time (one per server)"
    ).tag(config=True)
    max_servers_per_user = Int(
        16,
        help="servers of one user the service keeps a record of (a pause, a schedule); a "
        "server reporting its pause beyond that is refused (429)",
    ).tag(config=True)
    max_schedule_ahead = Float(
        366 * 86400.0, help="seconds from now a scheduled start may be, at most"
    ).tag(config=True)
    start_tries = Int(
        5,
        help="times a scheduled start the Hub refuses is tried before the service gives "
        "up on it (and says why on its page); a server the Hub no longer knows: once",
    ).tag(config=True)
    start_retry_delay = Float(
        60.0, help="seconds before the second try of a refused scheduled start; doubles each try"
    ).tag(config=True)
    start_retry_max_delay = Float(
        3600.0, help="seconds between two tries of a refused scheduled start, at most"
    ).tag(config=True)
    data_dir = Unicode(
        help="where pauses.json and fleet.json are kept; default: the working directory"
    ).tag(config=True)
    max_fleet_rows = Int(
        20000,
        help="notebooks the fleet keeps (one row each, all servers together); beyond, the "
        "rows handed over longest ago are dropped",
    ).tag(config=True)
    service_url = Unicode(help="where to listen; default: $JUPYTERHUB_SERVICE_URL").tag(config=True)
    ip = Unicode(
        "",
        help="the address to listen on; empty: the host of service_url (in a pod whose "
        "service URL names a Kubernetes Service, use 0.0.0.0)",
    ).tag(config=True)

    aliases = {
        "timeout": "PauseService.timeout",
        "check-interval": "PauseService.check_interval",
        "max-concurrent-checks": "PauseService.max_concurrent_checks",
        "fallback": "PauseService.fallback",
        "stop-timeout": "PauseService.stop_timeout",
        "proxy-url": "PauseService.proxy_url",
        "data-dir": "PauseService.data_dir",
        "max-schedules-per-user": "PauseService.max_schedules_per_user",
        "max-servers-per-user": "PauseService.max_servers_per_user",
        "max-schedule-ahead": "PauseService.max_schedule_ahead",
        "start-tries": "PauseService.start_tries",
        "start-retry-delay": "PauseService.start_retry_delay",
        "start-retry-max-delay": "PauseService.start_retry_max_delay",
        "max-fleet-rows": "PauseService.max_fleet_rows",
        "url": "PauseService.service_url",
        "ip": "PauseService.ip",
    }

    @default("data_dir")
    def _default_data_dir(self):
        return os.getcwd()

    @default("service_url")
    def _default_service_url(self):
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    def initialize(self, argv=None):
        super().initialize(argv)
        self.hub = HubAPI.from_environment()
        self.token = self.hub.token
        self.records = Records(Path(self.data_dir) / "pauses.json")
        self.fleet = FleetStore(Path(self.data_dir) / "fleet.json", self.max_fleet_rows)
        self._pausing: dict[str, asyncio.Task] = {}

    # -- one server ------------------------------------------------------------

    def server_url(self, server: dict[str, Any]) -> str:
        return self.proxy_url.rstrip("/") + server["url"]

    async def server_api(self, server, method: str, path: str, body=None):
        url = self.server_url(server) + "jupyter-pause/api/" + path
        return await fetch_json(url, self.token, method, body, timeout=30)

    async def inspect(self, server) -> tuple[bool, dict | None, dict | None]:
        """(has jupyter-pause, its activity or None, its status or None)."""
        try:
            _, status = await self.server_api(server, "GET", "status")
        except HubError as e:
            if e.status == 404:
                return False, None, None
            raise
        try:
            _, activity = await self.server_api(server, "GET", "activity")
        except HubError as e:
            if e.status != 404:
                raise
            activity = None  # auto-pause is off there
        return True, activity, status

    async def refresh_report(self, key: str, server) -> None:
        """Accelerator-hours released by pausing this week, from the server's report."""
        now = time.time()
        try:
            _, report = await self.server_api(
                server, "GET", f"report?since={week_start(now)}&until={now}"
            )
        except HubError as e:
            log.info("jupyter-pause-hub: no report from %s: %s", key, e)
            return
        hours = ((report.get("totals") or {}).get("gpu_hours") or {}).get("released", 0.0)
        self.records.update(key, released_hours=hours, report_time=now)

    async def check_server(self, user: dict, name: str, server: dict) -> None:
        key = f"{user['name']}/{name}"
        if key in self._pausing or server.get("pending") or not server.get("ready"):
            return  # starting, stopping, or being paused
        now = time.time()
        try:
            has_pause, activity, _ = await self.inspect(server)
        except HubError as e:
            log.warning("jupyter-pause-hub: cannot read %s: %s", key, e)
            return
        record = self.records.get(key)
        record.update(jupyter_pause=has_pause, state="running")
        if activity and activity.get("server", {}).get("last_activity"):
            record["last_activity"] = activity["server"]["last_activity"]
        if has_pause and now - record.get("report_time", 0) > 600:
            await self.refresh_report(key, server)
        decision = decide(
            server,
            activity,
            has_pause=has_pause,
            now=now,
            timeout=self.timeout,
            fallback=self.fallback,
        )
        record.update(decision=decision.reason, checked=now)
        self.records.save()
        failed_recently = record.get("error") and now - record.get("requested", 0) < self.timeout
        if decision.action == "pause" and failed_recently:
            return  # the last pause failed (its error is on the page); retry after a timeout
        if decision.action == "pause":
            self.start_pause(user["name"], name, server, decision.path, decision.reason, "idle")
        elif decision.action == "cull":
            log.info("jupyter-pause-hub: culling %s: %s", key, decision.reason)
            await self.hub.stop_server(user["name"], name)
            self.records.update(key, state="culled", stopped=time.time(), reason=decision.reason)

    def start_pause(self, user: str, name: str, server, path, reason: str, by: str) -> None:
        key = f"{user}/{name}"
        task = asyncio.ensure_future(self.pause(user, name, server, path, reason, by))
        self._pausing[key] = task
        task.add_done_callback(lambda _: self._pausing.pop(key, None))

    async def pause(self, user: str, name: str, server, path, reason: str, by: str) -> None:
        """Pause one server and wait until the Hub reports it stopped."""
        key = f"{user}/{name}"
        requested = time.time()
        log.info("jupyter-pause-hub: pausing %s (%s)", key, reason)
        gpus = None
        try:
            _, status = await self.server_api(server, "GET", "status")
            gpus = max((s.get("gpus") or 0 for s in status.get("sessions") or []), default=0)
        except HubError:
            pass
        self.records.update(
            key, state="pausing", requested=requested, reason=reason, by=by, error=None, gpus=gpus
        )
        operation = None
        try:
            if path:
                _, answer = await self.server_api(server, "POST", "sessions/pause", {"path": path})
                operation = answer["operation"]["id"]
            else:  # no live notebook: nothing to checkpoint
                await self.hub.stop_server(user, name)
            await self.wait_stopped(user, name, server, operation)
        except (HubError, TimeoutError) as e:
            log.warning("jupyter-pause-hub: pause of %s failed: %s", key, e)
            self.records.update(key, state="running", error=str(e))
            return
        stopped = time.time()
        self.records.update(
            key, state="paused", stopped=stopped, pause_seconds=round(stopped - requested, 3)
        )
        log.info("jupyter-pause-hub: %s paused in %.1f s", key, stopped - requested)

    async def wait_stopped(self, user: str, name: str, server, operation: str | None) -> None:
        """Until the Hub reports the server stopped; raise if the pause failed."""
        deadline = time.monotonic() + self.stop_timeout
        while True:
            model = await self.hub.user(user)
            if name not in (model.get("servers") or {}):
                return
            if operation:
                try:
                    _, op = await self.server_api(server, "GET", f"operations/{operation}")
                except HubError:
                    op = None  # the server is going away
                if op and op.get("outcome") == "failed":
                    raise HubError(409, op.get("error") or "the pause failed")
                if op and op.get("outcome") == "succeeded":
                    # paused, but the server's backend did not stop it (not the
                    # jupyterhub backend): every notebook is checkpointed, stop it
                    await self.hub.stop_server(user, name)
                    operation = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"{user}/{name} did not stop within {self.stop_timeout:g} s")
            await asyncio.sleep(0.5)

    async def start_server(self, user: str, name: str, by: str = "admin") -> int:
        """The admin's Start button (or a schedule): the server's notebooks resume on
        their own when configured so (JupyterHubBackend.resume_on_start) or scheduled,
        else in JupyterLab."""
        code = await self.hub.start_server(user, name)
        self.records.update(
            f"{user}/{name}", state="starting", started=time.time(), started_by=by, schedule=None
        )
        return code

    async def paused_itself(self, user: str, name: str, at: float, reason: str) -> None:
        """A server told us it paused itself (its idle policy, ``%pause``, its
        user), the Hub stopping it: the page says ``paused``, with its reason.
        Raises :class:`Refused`: ``at`` no date from a day ago to a minute ahead
        (clocks differ), one server too many for the user, or a server the Hub does
        not know (each would be a row on every admin's page, and a metric, forever)."""
        now = time.time()
        problem = schedule_problem(at, now, ahead=60)
        if problem:
            raise Refused(400, problem)
        key = f"{user}/{name}"
        others = [k for k in self.records.servers if k.partition("/")[0] == user and k != key]
        if len(others) >= self.max_servers_per_user:
            raise Refused(
                429,
                f"{user} has {len(others)} servers recorded already, the most this service "
                "keeps for one user (c.PauseService.max_servers_per_user)",
            )
        await self.known_server(user, name)
        self.records.update(
            key,
            state="paused",
            requested=min(at, now),
            stopped=now,
            reason=reason,
            by="self",
            error=None,
        )

    def cancel_schedule(self, user: str, name: str) -> None:
        key = f"{user}/{name}"
        if key in self.records.servers:  # never a record for a server it never saw
            self.records.update(key, schedule=None)

    async def set_schedule(self, user: str, name: str, at: float, kind: str) -> dict[str, Any]:
        """Record the time the server is to be started again, or raise
        :class:`Refused`: no date, one schedule too many for the user, or a
        server the Hub does not know (each would have the service ask the Hub for
        starts it cannot give)."""
        problem = schedule_problem(at, time.time(), ahead=self.max_schedule_ahead)
        if problem:
            raise Refused(400, problem)
        key = f"{user}/{name}"
        others = [k for k in self.records.scheduled(user) if k != key]
        if len(others) >= self.max_schedules_per_user:
            raise Refused(
                429,
                f"{user} has {len(others)} scheduled starts already, the most this service "
                "keeps for one user; cancel one first",
            )
        await self.known_server(user, name)
        schedule = {"at": at, "kind": kind}
        self.records.update(key, schedule=schedule)
        return schedule

    async def known_server(self, user: str, name: str) -> None:
        """Raise :class:`Refused` unless the Hub knows ``user``'s server ``name`` (running
        or stopped; every user has a default server, ``""``)."""
        try:
            model = await self.hub.user(user, include_stopped_servers=True)
        except HubError as e:
            if e.status == 404:
                raise Refused(404, f"the Hub has no user {user!r}") from None
            raise Refused(502, f"the Hub did not answer: {e}") from None
        if name and name not in (model.get("servers") or {}):
            raise Refused(404, f"{user} has no server named {name!r}")

    async def start_scheduled(self, running: set[str], now: float) -> None:
        """Start every stopped server whose scheduled resume is due.  A server the
        user started meanwhile has no use for it.  A start the Hub refuses (no
        capacity, a spawn error) is tried again later, ever later (``start_retry_delay``
        doubled each time), and given up after ``start_tries``, at once for a server
        the Hub no longer knows; each failure is on the page."""
        for key, record in list(self.records.servers.items()):
            schedule = record.get("schedule")
            if not schedule or max(schedule["at"], schedule.get("next_try", 0)) > now:
                continue
            if key in running:
                self.records.update(key, schedule=None)
                continue
            user, _, name = key.partition("/")
            log.info("jupyter-pause-hub: starting %s for its scheduled resume", key)
            try:
                await self.start_server(user, name, by="schedule")
            except HubError as e:
                self.start_failed(key, schedule, e, now)

    def start_failed(self, key: str, schedule: dict[str, Any], error: HubError, now: float) -> None:
        tries = schedule.get("tries", 0) + 1
        if error.status == 404 or tries >= self.start_tries:
            why = (
                f"gave up the scheduled start of {iso(schedule['at'])} after {tries} "
                f"{'try' if tries == 1 else 'tries'}: {error}"
            )
            log.error("jupyter-pause-hub: %s: %s", key, why)
            self.records.update(key, schedule=None, error=why)
            return
        delay = retry_delay(tries, self.start_retry_delay, self.start_retry_max_delay)
        why = f"scheduled start failed ({tries} of {self.start_tries} tries, next in {delay:.0f} s): {error}"
        log.warning("jupyter-pause-hub: %s: %s", key, why)
        self.records.update(
            key, schedule={**schedule, "tries": tries, "next_try": now + delay}, error=why
        )

    # -- all servers -----------------------------------------------------------

    async def check(self) -> None:
        servers = [
            (user, name, server)
            for user in await self.hub.users()
            for name, server in (user.get("servers") or {}).items()
        ]
        running = {f"{user['name']}/{name}" for user, name, _ in servers}
        # a slow server holds up one check, not the walk; a big hub is read a few at a time
        checks = asyncio.Semaphore(self.max_concurrent_checks)

        async def check_one(user: dict, name: str, server: dict) -> None:
            async with checks:
                try:
                    await self.check_server(user, name, server)
                except Exception:
                    log.exception("jupyter-pause-hub: checking %s/%s failed", user["name"], name)

        await asyncio.gather(*(check_one(*s) for s in servers))
        for key, record in self.records.servers.items():
            if key not in running and record.get("state") in ("running", "starting"):
                # stopped by the user or the Hub; a server that pauses itself says
                # so first (its schedule) and is "paused"
                record["state"] = "paused" if record.get("schedule") else "stopped"
        self.records.save()
        await self.start_scheduled(running, time.time())
        try:
            await self.forget_unknown()
        except HubError as e:  # the next walk tries again
            log.warning("jupyter-pause-hub: could not list the Hub's servers: %s", e)

    async def forget_unknown(self) -> None:
        """Drop the records of servers the Hub no longer lists (a user or a named
        server deleted): nothing is left to pause, start or count.  A scheduled start
        is kept until it is due and given up, and a failure stays on the page."""
        known = set()
        for user in await self.hub.users(include_stopped_servers=True):
            known.add(f"{user['name']}/")
            known.update(f"{user['name']}/{name}" for name in user.get("servers") or {})
        gone = [
            key
            for key, record in self.records.servers.items()
            if key not in known and not record.get("schedule") and not record.get("error")
        ]
        for key in gone:
            log.info("jupyter-pause-hub: forgetting %s: the Hub no longer lists it", key)
            del self.records.servers[key]
        if gone:
            self.records.save()

    async def loop(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:
                log.exception("jupyter-pause-hub: a check failed")
            await asyncio.sleep(self._next_check(time.time()))

    def _next_check(self, now: float) -> float:
        """``check_interval``, or less when a scheduled start falls due sooner."""
        due = [
            max(r["schedule"]["at"], r["schedule"].get("next_try", 0))
            for r in self.records.servers.values()
            if r.get("schedule")
        ]
        return max(1.0, min([self.check_interval, *(at - now for at in due)]))

    def problems(self) -> list[str]:
        """What the admins must know about the service itself (a damaged pauses.json)."""
        return [p for p in (self.records.problem, self.fleet.problem) if p]

    async def servers(self) -> list[dict[str, Any]]:
        """Every user's servers for the admin page: the Hub's view joined with ours.

        A server the Hub does not list is stopped; it is ``paused`` (or
        ``culled``) when this service stopped it that way.
        """
        now = time.time()
        running = {}
        for user in await self.hub.users():
            running[f"{user['name']}/"] = None  # every user has a default server
            for name, server in (user.get("servers") or {}).items():
                running[f"{user['name']}/{name}"] = server
        keys = sorted(set(running) | set(self.records.servers))
        return [self.row(key, running.get(key), now) for key in keys]

    def row(self, key: str, server: dict | None, now: float) -> dict[str, Any]:
        record = self.records.servers.get(key) or {}
        if server is not None:
            state = "pausing" if key in self._pausing else (server.get("pending") or "running")
        else:
            state = record.get("state") or "stopped"
            if state in ("running", "pausing", "starting"):
                state = "stopped"
            if record.get("schedule"):
                state = "paused"  # it paused itself, to be started at a set time
        user, _, name = key.partition("/")
        return {
            "user": user,
            "server": name,
            "state": state,
            "last_activity": (server or {}).get("last_activity") or record.get("last_activity"),
            "jupyter_pause": record.get("jupyter_pause"),
            "released_hours_this_week": self.released_hours(record, state, now),
            "paused_at": record.get("stopped") if state == "paused" else None,
            "reason": record.get("reason") if state == "paused" else None,
            "pause_seconds": record.get("pause_seconds"),
            "decision": record.get("decision"),
            "resumes_at": (record.get("schedule") or {}).get("at"),
            "checked": record.get("checked"),
            "error": record.get("error"),
        }

    @staticmethod
    def released_hours(record: dict[str, Any], state: str, now: float) -> float:
        """The server's own report (as last read), plus the pause going on now."""
        hours = float(record.get("released_hours") or 0.0)
        stopped = record.get("stopped")
        if state == "paused" and stopped:
            since = max(stopped, week_start(now), record.get("report_time") or 0)
            hours += max(0.0, now - since) / 3600 * (record.get("gpus") or 1)
        return round(hours, 4)

    # -- the web side ----------------------------------------------------------

    def make_app(self) -> web.Application:
        from jupyterhub.services.auth import HubOAuthCallbackHandler
        from jupyterhub.utils import url_path_join

        from .page import (
            AdminPage,
            FleetHandler,
            FleetPage,
            MetricsHandler,
            PausedHandler,
            ScheduleHandler,
            ServerActionHandler,
            ServersHandler,
        )

        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/jupyter-pause/")
        return web.Application(
            [
                (prefix, AdminPage),
                (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler),
                (url_path_join(prefix, "api/servers"), ServersHandler),
                (url_path_join(prefix, "metrics"), MetricsHandler),
                (
                    url_path_join(prefix, r"api/servers/([^/]+)/([^/]*)/(pause|start)"),
                    ServerActionHandler,
                ),
                (url_path_join(prefix, r"api/schedules/([^/]+)/([^/]*)"), ScheduleHandler),
                (url_path_join(prefix, r"api/pauses/([^/]+)/([^/]*)"), PausedHandler),
                (url_path_join(prefix, "fleet"), FleetPage),
                (url_path_join(prefix, "api/fleet"), FleetHandler),
                (url_path_join(prefix, r"api/fleet/([^/]+)/([^/]*)"), FleetHandler),
            ],
            service=self,
            page_url=prefix,
            cookie_secret=os.urandom(32),
            # no tornado xsrf_cookies: it would check before the Hub's auth can
            # tell a token from a cookie; the Hub's auth checks XSRF on cookie POSTs
        )

    def start_service(self) -> None:
        url = urlparse(self.service_url)
        app = self.make_app()
        app.listen(url.port or 80, self.ip or url.hostname or "127.0.0.1")
        log.info("jupyter-pause-hub %s listening on %s", __version__, self.service_url)
        loop = IOLoop.current()
        # The Hub stops its services with SIGINT, then SIGTERM.  Both are handled in
        # the event loop, whatever this process inherited: a hub started in the
        # background (`jupyterhub &`, a non-interactive shell) passes SIGINT on
        # ignored, and a SIGTERM turned into SIGINT was then ignored too, so the
        # Hub waited out its timeouts (61 s) before it killed the service.
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.asyncio_loop.add_signal_handler(signum, self.stop, signum)
        loop.add_callback(self.loop)
        loop.start()

    def stop(self, signum: int) -> None:
        """A stop signal: end at once (every record on disk is already durable)."""
        log.info("jupyter-pause-hub: %s received, stopping", signal.Signals(signum).name)
        IOLoop.current().stop()


def main(argv=None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="[%(levelname).1s %(asctime)s %(name)s] %(message)s"
    )
    service = PauseService()
    service.initialize(argv)
    service.start_service()
    log.info("jupyter-pause-hub: stopped")
