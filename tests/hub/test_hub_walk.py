"""The service walks a big hub a few servers at a time: one slow server holds up its
own check, not the walk, and a thousand servers are not read at once.

Real HTTP end to end: the service's own client talks to a local endpoint that answers
as the Hub API (the users and their servers) and, behind the "proxy", as each
server's jupyter-pause API, and counts the servers being read at the same time."""

from __future__ import annotations

import asyncio
import contextlib
import json

import tornado.httpserver
import tornado.testing
import tornado.web

from jupyter_pause.hub.service import PauseService

SERVERS = 10
LIMIT = 3
#: the most a request waits for others to arrive (only a walk one at a time waits it)
GATHER = 5.0


class Fleet:
    """What the endpoint saw: which servers are being read now, and the most at once."""

    def __init__(self, limit: int):
        self.limit = limit
        self.reading: dict[str, int] = {}  # user -> requests of theirs in flight
        self.seen: set[str] = set()
        self.peak = 0
        self.changed = asyncio.Condition()

    async def read(self, user: str) -> None:
        """One request of ``user``'s server: held until as many servers as the walk may
        read at once are being read (or every server has been), so that a walk that
        reads more at once than it should is caught at it."""
        async with self.changed:
            self.reading[user] = self.reading.get(user, 0) + 1
            self.seen.add(user)
            self.peak = max(self.peak, len(self.reading))
            self.changed.notify_all()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.changed.wait_for(
                        lambda: len(self.reading) >= self.limit or len(self.seen) == SERVERS
                    ),
                    GATHER,
                )
            self.reading[user] -= 1
            if not self.reading[user]:
                del self.reading[user]
            self.changed.notify_all()


class Users(tornado.web.RequestHandler):
    def get(self):
        users = [
            {
                "name": f"u{i}",
                "servers": {"": {"url": f"/user/u{i}/", "ready": True, "pending": None}},
            }
            for i in range(SERVERS)
        ]
        self.finish(json.dumps(users))


class ServerAPI(tornado.web.RequestHandler):
    async def get(self, user, endpoint):
        await self.settings["fleet"].read(user)
        if endpoint == "activity":  # busy: the service keeps the server
            session = {"path": "a.ipynb", "busy": True, "reasons": ["a cell is running"]}
            self.finish(json.dumps({"server": {"idle": False}, "sessions": [session]}))
        else:
            self.finish(json.dumps({"sessions": [], "totals": {}}))


def test_a_walk_reads_at_most_max_concurrent_checks_servers_at_once(tmp_path, monkeypatch):
    async def walk():
        fleet = Fleet(LIMIT)
        app = tornado.web.Application(
            [
                (r"/hub/api/users", Users),
                (r"/user/([^/]+)/jupyter-pause/api/(status|activity|report)", ServerAPI),
            ],
            fleet=fleet,
        )
        sock, port = tornado.testing.bind_unused_port()
        server = tornado.httpserver.HTTPServer(app)
        server.add_sockets([sock])
        url = f"http://127.0.0.1:{port}"
        monkeypatch.setenv("JUPYTERHUB_API_URL", f"{url}/hub/api")
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-token")
        service = PauseService(proxy_url=url, data_dir=str(tmp_path), max_concurrent_checks=LIMIT)
        service.initialize([])
        try:
            await service.check()
        finally:
            server.stop()
        return fleet, service

    fleet, service = asyncio.run(walk())
    assert fleet.seen == {f"u{i}" for i in range(SERVERS)}
    assert fleet.peak == LIMIT
    rows = {key: record for key, record in service.records.servers.items()}
    assert len(rows) == SERVERS
    assert all("a.ipynb is active" in r["decision"] for r in rows.values()), rows
