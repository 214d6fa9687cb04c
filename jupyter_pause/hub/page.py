"""The service's web side: the admin page and its small JSON API.

Every handler is authenticated by the Hub (OAuth cookie for the page, a Hub
token or the cookie for the API) and needs ``access:services!service=…``,
which only the Hub's admins have unless granted.  Cookie-authenticated POSTs
carry the Hub's XSRF token (the page's forms include it).
"""

from __future__ import annotations

import datetime as dt
import json
from html import escape

from jupyterhub.services.auth import HubOAuthenticated
from tornado import web

from .api import HubError


class ServiceHandler(HubOAuthenticated, web.RequestHandler):
    @property
    def service(self):
        return self.settings["service"]

    def write_json(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    async def servers(self) -> list[dict]:
        try:
            return await self.service.servers()
        except HubError as e:
            raise web.HTTPError(502, reason=f"the Hub did not answer: {e}") from None


class ServersHandler(ServiceHandler):
    """``GET api/servers``: what the admin page shows, as JSON."""

    @web.authenticated
    async def get(self):
        self.write_json({"servers": await self.servers()})


class ServerActionHandler(ServiceHandler):
    """``POST api/servers/{user}/{server}/pause|start`` (a form post redirects back)."""

    @web.authenticated
    async def post(self, user: str, name: str, action: str):
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


def when(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, (int, float)):
        value = dt.datetime.fromtimestamp(value, dt.timezone.utc).isoformat()
    return escape(str(value)[:19].replace("T", " ") + " UTC")


class AdminPage(ServiceHandler):
    """One table: each user's servers, their state, and a button."""

    @web.authenticated
    async def get(self):
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
            ".paused{color:#a60}.running{color:#070}</style></head><body>"
            "<h1>Paused and running servers</h1>"
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
