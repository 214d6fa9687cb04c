"""The fleet's rows as ``jupyter-pause-hub`` keeps them, in ``fleet.json``.

Each user's server hands over its ledger rolled up per notebook
(``PUT api/fleet/{user}/{server}``, ``JupyterHubBackend.publish_fleet``)
periodically, after a pause and when it stops; the service keeps the newest row
of each notebook, so the fleet page, ``GET api/fleet`` and the metrics count a
stopped server as it was when it stopped.  The rows' ``user`` and ``server``
are the URL's, which the Hub authenticated: a server cannot speak for another.

The file is replaced atomically and durably when rows are taken; it holds at
most ``max_rows`` rows, the least recently handed over dropped first.  A file
that cannot be read back is kept aside (``fleet.json.damaged-<time>``) and
said so, as ``pauses.json`` is.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..engine import durable
from ..report.fleet import Fleet, FleetRow, RowError, build_fleet, merge_rows

log = logging.getLogger("jupyter_pause.hub")


class FleetStore:
    """Every server's rows (:class:`FleetRow`), by key, in one JSON file."""

    def __init__(self, path: Path, max_rows: int = 20000):
        self.path = path
        self.max_rows = max_rows
        self.problem = ""
        self.rows: dict[str, FleetRow] = self.load()

    def load(self) -> dict[str, FleetRow]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            self.problem = f"{self.path} could not be read ({e}): the fleet is empty"
            log.error("jupyter-pause-hub: %s", self.problem)
            return {}
        try:
            rows = [FleetRow.from_json(r) for r in json.loads(raw)["rows"]]
        except (ValueError, KeyError, TypeError) as e:
            aside = self.path.with_name(
                f"{self.path.name}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            )
            os.replace(self.path, aside)
            durable.fsync_dir(self.path.parent)
            self.problem = (
                f"{self.path} was damaged ({type(e).__name__}: {e}) and is kept as {aside}: "
                "the fleet counts each server again from its next hand-over"
            )
            log.error("jupyter-pause-hub: %s", self.problem)
            return {}
        kept: dict[str, FleetRow] = {}
        merge_rows(kept, rows)
        return kept

    def put_body(self, user: str, server: str, body: bytes) -> int:
        """:meth:`put` of a request's body; :class:`RowError` when it is not such JSON."""
        try:
            payload = json.loads(body or b"null")
        except ValueError as e:
            raise RowError(f"the body is not JSON: {e}") from None
        except RecursionError:
            raise RowError("the body is nested too deeply") from None
        return self.put(user, server, payload)

    def put(self, user: str, server: str, payload: Any) -> int:
        """Take a server's rows (``{"rows": [...]}``); the number that were newer.
        :class:`RowError` (nothing taken) when one is malformed or there are too many."""
        if not isinstance(payload, dict) or not isinstance(payload.get("rows"), list):
            raise RowError('the body must be JSON {"rows": [...]}')
        if len(payload["rows"]) > self.max_rows:
            raise RowError(f"at most {self.max_rows} rows")
        rows = [replace(FleetRow.from_json(r), user=user, server=server) for r in payload["rows"]]
        taken = merge_rows(self.rows, rows)
        if taken:
            self.bound()
            self.save()
        return taken

    def bound(self) -> None:
        """At most ``max_rows``: the rows handed over longest ago go first."""
        if len(self.rows) <= self.max_rows:
            return
        newest = sorted(self.rows.values(), key=lambda r: r.as_of, reverse=True)
        dropped = len(self.rows) - self.max_rows
        self.rows = {r.key: r for r in newest[: self.max_rows]}
        log.warning(
            "jupyter-pause-hub: the fleet keeps %d rows; %d oldest dropped", self.max_rows, dropped
        )

    def save(self) -> None:
        durable.makedirs(self.path.parent)
        payload = {"version": 1, "rows": [r.to_json() for r in self.rows.values()]}
        durable.write_file(self.path, json.dumps(payload, separators=(",", ":")).encode())

    def fleet(self, now: float) -> Fleet:
        return build_fleet(
            self.rows.values(),
            now,
            sources=[str(self.path)],
            problems=[self.problem] if self.problem else [],
        )
