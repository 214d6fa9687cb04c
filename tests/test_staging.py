"""A stopping server's flushes share the link (server/staging.py): one at a time, and of
those waiting the smallest delta first, so that as many notebooks as can be are saved to
their last cell within the grace."""

import asyncio

from jupyter_pause.server.staging import _Turns


async def test_flushes_take_the_link_one_at_a_time_the_smallest_delta_first():
    turns = _Turns()
    order, inside = [], []
    first_holds = asyncio.Event()

    async def flush(name: str, nbytes: int) -> None:
        async with turns.turn(nbytes):
            inside.append(name)
            order.append(name)
            if name == "first":
                await first_holds.wait()
            await asyncio.sleep(0)
            assert inside == [name]  # alone on the link
            inside.remove(name)

    first = asyncio.ensure_future(flush("first", 500))
    while order != ["first"]:
        await asyncio.sleep(0)
    others = [flush("large", 900), flush("small", 10), flush("middle", 100)]
    waiting = [asyncio.ensure_future(f) for f in others]
    deadline = asyncio.get_running_loop().time() + 10
    while len(turns._waiting) < 3:  # all three wait for the link
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    assert turns.waiting
    first_holds.set()
    await asyncio.gather(first, *waiting)
    assert order == ["first", "small", "middle", "large"]


async def test_a_background_staging_that_fails_is_tried_again_until_it_succeeds(
    tmp_path, monkeypatch
):
    """A store down for a while does not leave the bucket behind an idle kernel for good:
    the staging is tried again, later each time, while the notebook keeps its kernel."""
    import logging
    from types import SimpleNamespace

    from jupyter_pause.clock import SYSTEM
    from jupyter_pause.ledger import Ledger
    from jupyter_pause.lifecycle import SessionStore
    from jupyter_pause.server import bucket_saves
    from jupyter_pause.server.recorder import Recorder

    monkeypatch.setattr(bucket_saves, "STAGE_RETRY", 0.01)
    tries = []

    class DownThenUp:
        async def stage(self, path):
            tries.append(path)
            if len(tries) < 3:
                raise OSError("the store is down")
            return SimpleNamespace(checkpoint="2026-12-07T05-00-00")

    log = logging.getLogger("test")
    store = SessionStore(tmp_path / "sessions.json")
    saves = bucket_saves.BucketSaves(
        stager=DownThenUp(),
        store=store,
        recorder=Recorder(store=store, ledger=Ledger(), log=log),
        clock=SYSTEM,
        log=log,
    )
    session = store.get("nb.ipynb")
    session.kernel_id = "k1"
    await saves.stage(session)
    assert tries == ["nb.ipynb"] * 3
    assert session.bucket_checkpoint["id"] == "2026-12-07T05-00-00"


async def test_a_failed_staging_is_news_until_the_bucket_holds_a_state_written_after_it():
    """The status says why the last staging failed while the bucket lacks what was saved
    here; once a pause's or a checkpoint's own upload put a newer state there, it does
    not (the frontend's 'upload failed' goes with it)."""
    import logging
    from types import SimpleNamespace

    from jupyter_pause.engine import paths
    from jupyter_pause.lifecycle import Session, State
    from jupyter_pause.server.staging import Stager

    from .fakes import FakeClock

    clock = FakeClock()
    stager = Stager(
        checkpoint_dir=paths.parse_bucket("s3://staging-test/ck", "/tmp/unused"),
        log=logging.getLogger("test"),
        clock=clock,
    )
    lane = stager.lane("nb.ipynb")
    lane.error, lane.failed_at = "RemoteStoreError: no bucket", clock.time()
    session = Session(path="nb.ipynb", state=State.RUNNING)
    session.bucket_checkpoint = {"id": "old", "time": clock.time() - 60}
    idle = SimpleNamespace(busy=False, last_user_activity=SimpleNamespace(wall=0.0))
    assert stager.lag(session, idle, clock.time())["error"] == "RemoteStoreError: no bucket"
    clock.advance(5)
    session.bucket_checkpoint = {"id": "new", "time": clock.time()}
    assert stager.lag(session, idle, clock.time())["error"] is None
