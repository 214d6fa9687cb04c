"""The service's web side: the admin page and its small JSON API.

Every handler is authenticated by the Hub (OAuth cookie for the page, a Hub
token or the cookie for the API) and needs ``access:services!service=…``.
Users have it too (their servers hand over scheduled resumes), so the page
and the server actions also check that the caller is one of the Hub's admins
(or a service granted access); a user may only schedule their own server.
Cookie-authenticated POSTs carry the Hub's XSRF token (the page's forms
include it).
"""

from __future__ import annotations

import json
import time
from html import escape

from jupyterhub.services.auth import HubOAuthenticated
from prometheus_client import CONTENT_TYPE_LATEST
from tornado import web

from ..hub_api import HubError
from ..report.fleet import FLEET_CSS, RowError
from .metrics import exposition
from .policy import Refused, iso


class ServiceHandler(HubOAuthenticated, web.RequestHandler):
    @property
    def service(self):
        return self.settings["service"]

    def write_json(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    async def is_admin(self) -> bool:
        """An admin of the Hub, or a service the Hub granted access (a script)."""
        me = self.current_user or {}
        if me.get("kind") == "service":
            return True
        try:
            return bool((await self.service.hub.user(me.get("name", ""))).get("admin"))
        except HubError:
            return False

    async def check_owner(self, user: str, what: str = "schedule") -> None:
        me = self.current_user or {}
        if (
            me.get("kind", "user") != "user" or me.get("name") != user
        ) and not await self.is_admin():
            raise web.HTTPError(403, reason=f"only {user} or an admin may {what} {user}'s server")

    async def require_admin(self) -> None:
        if not await self.is_admin():
            raise web.HTTPError(403, reason="only the Hub's admins may see and act on servers")

    async def servers(self) -> list[dict]:
        try:
            return await self.service.servers()
        except HubError as e:
            raise web.HTTPError(502, reason=f"the Hub did not answer: {e}") from None


class ServersHandler(ServiceHandler):
    """``GET api/servers``: what the admin page shows, as JSON."""

    @web.authenticated
    async def get(self):
        await self.require_admin()
        self.write_json({"servers": await self.servers(), "problems": self.service.problems()})


class MetricsHandler(ServiceHandler):
    """``GET metrics``: the servers per user and state, for Prometheus (a token
    as ``Authorization: Bearer``)."""

    @web.authenticated
    async def get(self):
        await self.require_admin()
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(exposition(await self.servers(), self.service.fleet.fleet(time.time())))


class ServerActionHandler(ServiceHandler):
    """``POST api/servers/{user}/{server}/pause|start`` (a form post redirects back)."""

    @web.authenticated
    async def post(self, user: str, name: str, action: str):
        await self.require_admin()
        service = self.service
        try:
            model = await service.hub.user(user)
        except HubError as e:
            raise web.HTTPError(404 if e.status == 404 else 502, reason=str(e)) from None
        server = (model.get("servers") or {}).get(name)
        if action == "pause":
            if server is None or not server.get("ready"):
                raise web.HTTPError(409, reason=f"{user}/{name} is not running")
            try:
                has_pause, _, status = await service.inspect(server)
            except HubError as e:
                raise web.HTTPError(502, reason=f"{user}/{name} did not answer: {e}") from None
            live = [
                s["path"]
                for s in (status or {}).get("sessions", [])
                if s.get("state") in ("running", "ready") and s.get("kernel_id")
            ]
            if not has_pause:
                raise web.HTTPError(409, reason=f"{user}/{name} has no jupyter-pause")
            service.start_pause(
                user, name, server, live[0] if live else None, "paused by an admin", "admin"
            )
        else:
            if server is not None:
                raise web.HTTPError(409, reason=f"{user}/{name} is already running")
            try:
                await service.start_server(user, name)
            except HubError as e:
                raise web.HTTPError(409, reason=str(e)) from None
        if self.get_body_argument("_xsrf", None) is not None:
            self.redirect(self.settings["page_url"])
        else:
            self.write_json({"user": user, "server": name, "action": action}, status=202)

    def write_error(self, status_code, **kwargs):
        self.write_json({"message": self._reason, "status": status_code}, status=status_code)


class ScheduleHandler(ServiceHandler):
    """``PUT | DELETE api/schedules/{user}/{server}``: a scheduled start of a server.

    A server hands over its scheduled resume before it stops (its own token,
    with ``access:services!service=jupyter-pause``); a user may only schedule
    their own servers, an admin anyone's.
    """

    @web.authenticated
    async def put(self, user: str, name: str):
        await self.check_owner(user)
        try:
            body = json.loads(self.request.body or b"{}")
            at = float(body["at"])
        except (ValueError, KeyError, TypeError):
            raise web.HTTPError(
                400, reason="the body must be JSON with 'at' (epoch seconds)"
            ) from None
        kind = body.get("kind") if body.get("kind") in ("scheduled", "predicted") else "scheduled"
        try:
            schedule = await self.service.set_schedule(user, name, at, kind)
        except Refused as e:
            raise web.HTTPError(e.status, reason=str(e)) from None
        self.write_json({"user": user, "server": name, "schedule": schedule})

    @web.authenticated
    async def delete(self, user: str, name: str):
        await self.check_owner(user)
        self.service.cancel_schedule(user, name)
        self.set_status(204)
        self.finish()

    def write_error(self, status_code, **kwargs):
        self.write_json({"message": self._reason, "status": status_code}, status=status_code)


class PausedHandler(ServiceHandler):
    """``PUT api/pauses/{user}/{server}``: a server that pauses itself says so
    (its own token, as for a schedule), with when and why, before it stops."""

    @web.authenticated
    async def put(self, user: str, name: str):
        await self.check_owner(user, "report the pause of")
        try:
            body = json.loads(self.request.body or b"{}")
            at = float(body["at"])
            reason = str(body.get("reason") or "paused itself")[:200]
        except (ValueError, KeyError, TypeError):
            raise web.HTTPError(
                400, reason="the body must be JSON with 'at' (epoch seconds) and 'reason'"
            ) from None
        try:
            await self.service.paused_itself(user, name, at, reason)
        except Refused as e:
            raise web.HTTPError(e.status, reason=str(e)) from None
        self.set_status(204)
        self.finish()

    def write_error(self, status_code, **kwargs):
        self.write_json({"message": self._reason, "status": status_code}, status=status_code)


def when(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, (int, float)):  # epoch seconds, or what is no date as itself
        return escape(iso(value).replace("T", " ").replace("+00:00", " UTC"))
    return escape(str(value)[:19].replace("T", " ") + " UTC")


class AdminPage(ServiceHandler):
    """One table: each user's servers, their state, and a button."""

    @web.authenticated
    async def get(self):
        await self.require_admin()
        rows = []
        for s in await self.servers():
            target = f"api/servers/{escape(s['user'])}/{escape(s['server'])}"
            if s["state"] == "running" and s["jupyter_pause"]:
                button = self.form(target + "/pause", "Pause")
            elif s["state"] in ("paused", "stopped", "culled"):
                button = self.form(target + "/start", "Start")
            else:
                button = ""
            note = s.get("error") or s.get("decision") or ""
            if s["state"] == "paused" and s.get("reason"):
                note = f"{s['reason']} at {when(s['paused_at'])}"
            if s.get("resumes_at") and s["state"] != "running":
                note = f"resumes at {when(s['resumes_at'])}"
            rows.append(
                "<tr>"
                f"<td>{escape(s['user'])}</td><td>{escape(s['server'] or '(default)')}</td>"
                f"<td class='{escape(s['state'])}'>{escape(s['state'])}</td>"
                f"<td>{when(s['last_activity'])}</td>"
                f"<td>{s['released_hours_this_week']:.2f}</td>"
                f"<td>{escape(note)}</td><td>{button}</td>"
                "</tr>"
            )
        self.set_header(
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        )
        self.finish(
            "<!doctype html><html><head><meta charset='utf-8'><title>jupyter-pause</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border-bottom:1px solid #ddd;padding:.3em .8em;text-align:left}"
            ".paused{color:#a60}.running{color:#070}.problem{color:#b00;font-weight:bold}</style></head><body>"
            "<h1>Paused and running servers</h1>"
            f"{''.join(f'<p class=problem>{escape(p)}</p>' for p in self.service.problems())}"
            "<p>Idle servers are paused (every notebook checkpointed, the server stopped) "
            "instead of culled; Start brings one back.</p>"
            "<table><thead><tr><th>User</th><th>Server</th><th>State</th><th>Last activity</th>"
            "<th>Accelerator-hours released this week</th><th>Why</th><th></th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></body></html>"
        )

    def form(self, action: str, label: str) -> str:
        xsrf = self.xsrf_token
        xsrf = xsrf.decode() if isinstance(xsrf, bytes) else xsrf
        return (
            f"<form method='post' action='{action}'>"
            f"<input type='hidden' name='_xsrf' value='{escape(xsrf)}'>"
            f"<button type='submit'>{escape(label)}</button></form>"
        )


class FleetHandler(ServiceHandler):
    """``PUT api/fleet/{user}/{server}``: a server hands over its ledger rolled up
    (its own token, with ``access:services!service=jupyter-pause``; a user only
    their own, an admin anyone's).  ``GET api/fleet``: the fleet as JSON (admins)."""

    @web.authenticated
    async def put(self, user: str, name: str):
        await self.check_owner(user, "report the fleet rows of")
        fleet = self.service.fleet
        if len(self.request.body) > 4096 * fleet.max_rows:
            raise web.HTTPError(413, reason=f"too large: at most {fleet.max_rows} rows")
        try:
            taken = fleet.put_body(user, name, self.request.body)
        except RowError as e:
            raise web.HTTPError(400, reason=str(e)) from None
        self.write_json({"user": user, "server": name, "taken": taken})

    @web.authenticated
    async def get(self):
        await self.require_admin()
        self.write_json(self.service.fleet.fleet(time.time()).to_json())

    def write_error(self, status_code, **kwargs):
        self.write_json({"message": self._reason, "status": status_code}, status=status_code)


class FleetPage(ServiceHandler):
    """``GET fleet``: every user's notebooks, per user and per workload class."""

    @web.authenticated
    async def get(self):
        await self.require_admin()
        fleet = self.service.fleet.fleet(time.time())
        total = fleet.total
        self.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
        self.finish(
            "<!doctype html><html><head><meta charset='utf-8'><title>jupyter-pause fleet</title>"
            f"<style>{FLEET_CSS}</style></head><body>"
            "<h1>Fleet: accelerator time of every notebook</h1>"
            f"{''.join(f'<p class=problem>{escape(p)}</p>' for p in fleet.problems)}"
            f"<p>{total.servers} servers, {total.notebooks} notebooks, {total.paused} of them "
            f"paused now, as each server last handed its ledger over (at the latest when it "
            "stopped). Accelerator-hours since each server's ledger began; a paused "
            "notebook's release counts until now. Capacity outcome: what became of the "
            "released time (unknown where the platform cannot see nodes, and while a "
            "paused server has not come back to say). "
            "<a href='.'>Servers</a></p>"
            f"{fleet.to_html_table()}</body></html>"
        )
