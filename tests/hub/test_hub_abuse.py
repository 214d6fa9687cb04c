"""What a plain user (or a power loss) must not be able to do to the jupyter-pause-hub
service, without a hub: times that are no dates, one schedule too many, starts the
Hub refuses forever, and a ``pauses.json`` lost or damaged in silence."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import time

import pytest

from jupyter_pause.client import free_port
from jupyter_pause.hub.fleet import FleetStore
from jupyter_pause.hub.policy import Refused, retry_delay, schedule_problem
from jupyter_pause.hub.service import PauseService, Records
from jupyter_pause.hub_api import HubAPI

NOW = 1_800_000_000.0
YEAR_10000 = 253_402_300_800.0


@pytest.mark.parametrize("at", [1e300, -1e300, YEAR_10000, float("nan"), float("inf"), 0.0])
def test_a_time_that_is_no_date_is_refused(at):
    problem = schedule_problem(at, NOW, ahead=366 * 86400)
    assert problem and "'at' must be epoch seconds between" in problem


@pytest.mark.parametrize("at", [NOW - 60, NOW + 60, NOW + 365 * 86400])
def test_a_time_from_a_day_ago_to_the_limit_is_taken(at):
    assert schedule_problem(at, NOW, ahead=366 * 86400) is None


def test_the_retry_delay_doubles_and_is_capped():
    assert [retry_delay(n, 30, 600) for n in range(1, 7)] == [30, 60, 120, 240, 480, 600]
    assert retry_delay(10_000, 30, 600) == 600  # no overflow


def service(tmp_path, **settings) -> PauseService:
    """The service with its records, and a Hub that never answers (nothing listens)."""
    app = PauseService(data_dir=str(tmp_path), **settings)
    app.records = Records(tmp_path / "pauses.json")
    app.fleet = FleetStore(tmp_path / "fleet.json")
    app.hub = HubAPI(f"http://127.0.0.1:{free_port()}/hub/api/", "token", timeout=5)
    app._pausing = {}
    return app


def test_a_user_has_at_most_max_schedules_per_user(tmp_path):
    app = service(tmp_path, max_schedules_per_user=2)
    for name in ("a", "b"):
        app.records.update(f"alice/{name}", schedule={"at": NOW, "kind": "scheduled"})
    app.records.update("bob/", schedule={"at": NOW, "kind": "scheduled"})
    with pytest.raises(Refused) as refused:
        asyncio.run(app.set_schedule("alice", "c", time.time() + 60, "scheduled"))
    assert refused.value.status == 429 and "alice has 2 scheduled starts" in str(refused.value)
    assert "alice/c" not in app.records.servers
    # rescheduling one of the two is no third; the Hub is asked (here: no answer)
    with pytest.raises(Refused) as refused:
        asyncio.run(app.set_schedule("alice", "a", time.time() + 60, "scheduled"))
    assert refused.value.status == 502


def test_a_user_has_at_most_max_servers_per_user_recorded(tmp_path):
    app = service(tmp_path, max_servers_per_user=2)
    for name in ("a", "b"):
        app.records.update(f"alice/{name}", state="paused")
    with pytest.raises(Refused) as refused:
        asyncio.run(app.paused_itself("alice", "c", time.time(), "paused itself"))
    assert refused.value.status == 429 and "alice has 2 servers recorded" in str(refused.value)
    assert "alice/c" not in app.records.servers
    # one of the two again is no third; the Hub is asked whether it knows it (no answer)
    with pytest.raises(Refused) as refused:
        asyncio.run(app.paused_itself("alice", "a", time.time(), "paused itself"))
    assert refused.value.status == 502


def test_a_time_that_is_no_date_is_never_recorded(tmp_path):
    app = service(tmp_path)
    with pytest.raises(Refused) as refused:
        asyncio.run(app.set_schedule("alice", "", 1e300, "scheduled"))
    assert refused.value.status == 400
    assert app.records.servers == {}


def test_a_refused_start_is_tried_ever_later_then_given_up_and_says_why(tmp_path):
    app = service(tmp_path, start_tries=4, start_retry_delay=10, start_retry_max_delay=25)
    app.records.update("alice/", schedule={"at": NOW, "kind": "scheduled"}, state="paused")
    tries_at = []
    for second in range(0, 120):
        now = NOW + second
        before = (app.records.servers["alice/"].get("schedule") or {}).get("tries", 0)
        asyncio.run(app.start_scheduled(set(), now))
        schedule = app.records.servers["alice/"].get("schedule")
        if schedule is None or schedule.get("tries", 0) > before:
            tries_at.append(second)
        if schedule is None:
            break
    assert tries_at == [0, 10, 30, 55]  # waits of 10, 20, then 25 (capped)
    record = app.records.servers["alice/"]
    assert record["schedule"] is None
    assert record["error"].startswith("gave up the scheduled start of ")
    assert "after 4 tries" in record["error"] and "no answer" in record["error"]
    assert app._next_check(NOW + 200) == app.check_interval  # nothing due any more


# -- pauses.json --------------------------------------------------------------


@pytest.mark.parametrize(
    "content", [b"", b"\0" * 512, b'{"version": 1, "serv', b"[]", b'{"servers": {"a/": 3}}']
)
def test_a_damaged_pauses_json_is_kept_aside_and_said_loudly(tmp_path, caplog, content):
    path = tmp_path / "pauses.json"
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="jupyter_pause.hub"):
        records = Records(path)
    assert records.servers == {}
    (aside,) = tmp_path.glob("pauses.json.damaged-*")
    assert aside.read_bytes() == content
    assert str(path) in records.problem and str(aside) in records.problem
    assert any(str(path) in r.getMessage() for r in caplog.records)
    app = service(tmp_path)
    app.records = records
    assert app.problems() == [records.problem]
    records.update("alice/", state="paused")  # the service goes on, with a new file
    assert json.loads(path.read_text())["servers"] == {"alice/": {"state": "paused"}}
    assert aside.read_bytes() == content


def test_no_pauses_json_is_a_new_service_not_a_problem(tmp_path):
    records = Records(tmp_path / "pauses.json")
    assert records.servers == {} and records.problem == ""
    assert service(tmp_path).problems() == []


def test_pauses_json_is_written_atomically_and_durably(tmp_path, monkeypatch):
    """The file's data and the folder's new entry both reach the disk (fsync) before
    ``save`` returns; nothing else is left in the folder."""
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(stat.S_IFMT(os.fstat(fd).st_mode))
        real_fsync(fd)

    path = tmp_path / "pauses.json"
    records = Records(path)
    monkeypatch.setattr(os, "fsync", fsync)
    records.update("alice/", schedule={"at": NOW, "kind": "scheduled"})
    assert synced == [stat.S_IFREG, stat.S_IFDIR]
    assert [p.name for p in tmp_path.iterdir()] == ["pauses.json"]
    assert Records(path).servers == {"alice/": {"schedule": {"at": NOW, "kind": "scheduled"}}}


def test_a_time_recorded_before_times_were_checked_is_given_up_not_a_crash(tmp_path):
    app = service(tmp_path, start_tries=1)
    app.records.update("alice/", schedule={"at": -1e300, "kind": "scheduled"}, state="paused")
    asyncio.run(app.start_scheduled(set(), NOW))
    error = app.records.servers["alice/"]["error"]
    assert error.startswith("gave up the scheduled start of -1e+300 (not a date) after 1 try")


def test_cancelling_a_schedule_never_made_records_nothing(tmp_path):
    app = service(tmp_path)
    for i in range(100):
        app.cancel_schedule("mallory", f"server-{i}")
    assert app.records.servers == {}
