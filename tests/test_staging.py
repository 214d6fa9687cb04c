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
