"""A pod deleted or preempted (SIGTERM) is not a pause: the stopping server pauses its
notebooks on their checkpoints and asks the cluster for nothing (no snapshot, no
scale); the next pod's server finds them paused and, when so configured, resumes
them from their checkpoints (the manager over the fakes, the backend over the
emulated API)."""

from __future__ import annotations

import asyncio

from conftest import NAMESPACE, pod_backend

from jupyter_pause.ledger import Ledger
from jupyter_pause.lifecycle import SessionStore, State
from jupyter_pause.server.shutdown import save_all
from tests.fakes import make_manager, make_wired

NOTEBOOKS = ("train.ipynb", "eval.ipynb")


def test_a_pod_stopped_under_the_server_snapshots_nothing_and_comes_back_from_checkpoints(
    cluster, tmp_path
):
    cluster.add_gke_notebook()
    ledger = Ledger()
    parts, manager = make_wired(
        tmp_path, notebooks=NOTEBOOKS, ledger=ledger, backend=pod_backend(cluster, ledger)
    )
    for value, path in enumerate(NOTEBOOKS):
        session = manager.store.get(path)
        session.state = State.RUNNING
        session.kernel_id = manager.kernel_manager.start({"step": value})
        manager.reconciler.session_manager.paths[path] = session.kernel_id
    seen = len(cluster.emu.requests)

    report = asyncio.run(save_all(manager, parts, grace=60, concurrency=2))

    assert sorted(report.paused) == sorted(NOTEBOOKS) and report.not_saved == []
    asked = [(r.verb, r.resource) for r in cluster.emu.requests[seen:]]
    assert asked == []  # no trigger, no snapshot, no scale, no annotation
    assert cluster.emu.get("StatefulSet", NAMESPACE, "nb")["spec"]["replicas"] == 1

    # the next pod: a new server over the same session file (the home volume)
    ledger = Ledger()
    again = make_manager(
        tmp_path,
        notebooks=NOTEBOOKS,
        store=SessionStore(tmp_path / "sessions.json"),
        ledger=ledger,
        backend=pod_backend(cluster, ledger, resume_from_checkpoint_on_cold_start=True),
    )

    async def next_start():
        await again.recover()
        assert {p: again.store.sessions[p].state for p in NOTEBOOKS} == dict.fromkeys(
            NOTEBOOKS, State.PAUSED
        )
        await again.came_back(await again.backend.startup())
        while again.tasks.all:
            await asyncio.gather(*list(again.tasks.all), return_exceptions=True)

    asyncio.run(next_start())
    for value, path in enumerate(NOTEBOOKS):
        session = again.store.sessions[path]
        assert session.state == State.READY, session.error
        assert again.kernel_manager.get_kernel(session.kernel_id).namespace == {"step": value}
