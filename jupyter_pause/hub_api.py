"""An async client for the Hub REST API and for jupyter-pause on users' servers.

Both the ``jupyterhub`` backend (a single-user server asking the Hub to stop
itself) and the ``jupyter-pause-hub`` service (:mod:`jupyter_pause.hub`) use it,
so it stands below both.  Requests carry a Hub
API token (``Authorization: token …``); errors become :class:`HubError` with
the Hub's own message, so callers can say why.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

#: the ``jupyter-pause-hub`` service as a single-user server or the CLI reaches it
ENV_HUB_URL = "JUPYTER_PAUSE_HUB_URL"


class HubError(Exception):
    """An HTTP error (``status``) or no answer at all (``status`` 0)."""

    def __init__(self, status: int, message: str):
        self.status = status
        message = " ".join(str(message).split())  # one line: it may end up in a status line
        super().__init__(f"HTTP {status}: {message}" if status else message)


async def fetch_json(
    url: str,
    token: str,
    method: str = "GET",
    body: Any = None,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One request; returns ``(status, parsed JSON or None)`` or raises :class:`HubError`."""
    request = HTTPRequest(
        url,
        method=method,
        headers={"Authorization": f"token {token}", **(headers or {})},
        body=None if body is None else json.dumps(body),
        allow_nonstandard_methods=True,
        request_timeout=timeout,
        connect_timeout=timeout,
        follow_redirects=False,
    )
    try:
        response = await AsyncHTTPClient().fetch(request)
    except HTTPClientError as e:
        message = e.message or ""
        if e.response is not None and e.response.body:
            try:
                payload = json.loads(e.response.body)
                message = payload.get("message") or message
            except (ValueError, AttributeError):
                message = e.response.body.decode(errors="replace")[:300] or message
        raise HubError(e.code, message) from None
    except OSError as e:  # refused, reset, unreachable
        raise HubError(0, f"no answer from {url}: {e}") from None
    if not response.body:
        return response.code, None
    try:
        return response.code, json.loads(response.body)
    except ValueError:
        raise HubError(response.code, f"{url} did not answer JSON") from None


def server_path(user: str, server_name: str = "") -> str:
    """``users/{user}/server`` (default server) or ``users/{user}/servers/{name}``."""
    if server_name:
        return f"users/{quote(user, safe='')}/servers/{quote(server_name, safe='')}"
    return f"users/{quote(user, safe='')}/server"


class HubAPI:
    """The Hub REST API (``JUPYTERHUB_API_URL``) with one token."""

    def __init__(self, api_url: str, token: str, timeout: float = 30.0):
        self.api_url = api_url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout

    @classmethod
    def from_environment(cls, timeout: float = 30.0) -> HubAPI:
        """As a single-user server or a managed service sees the Hub."""
        return cls(os.environ["JUPYTERHUB_API_URL"], os.environ["JUPYTERHUB_API_TOKEN"], timeout)

    async def request(self, method: str, path: str, body: Any = None, **query: Any):
        url = self.api_url + path
        if query:
            url += "?" + urlencode(query)
        return await fetch_json(url, self.token, method, body, self.timeout)

    async def user(self, name: str, include_stopped_servers: bool = False) -> dict[str, Any]:
        """The user's model; its ``servers`` are the running ones, or all of them."""
        query = {"include_stopped_servers": "1"} if include_stopped_servers else {}
        return (await self.request("GET", f"users/{quote(name, safe='')}", **query))[1]

    async def users(self, include_stopped_servers: bool = False) -> list[dict[str, Any]]:
        """Every user with their servers (all pages): the running ones, or all of them."""
        users: list[dict[str, Any]] = []
        offset = 0
        stopped = {"include_stopped_servers": "1"} if include_stopped_servers else {}
        while True:
            query = {"offset": offset, "limit": 200, **stopped}
            url = self.api_url + "users?" + urlencode(query)
            _, page = await fetch_json(
                url,
                self.token,
                timeout=self.timeout,
                headers={"Accept": "application/jupyterhub-pagination+json"},
            )
            if isinstance(page, list):  # a Hub without pagination
                return page
            users.extend(page["items"])
            following = (page.get("_pagination") or {}).get("next")
            if not following:
                return users
            offset = following["offset"]

    async def stop_server(self, user: str, server_name: str = "") -> int:
        """Ask the Hub to stop a server: 204 stopped, 202 stopping."""
        return (await self.request("DELETE", server_path(user, server_name)))[0]

    async def start_server(self, user: str, server_name: str = "") -> int:
        """Ask the Hub to start a server: 201 started, 202 starting."""
        return (await self.request("POST", server_path(user, server_name), {}))[0]
