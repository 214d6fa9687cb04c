"""The spot drill at small sizes (benchmarks/drill_spot.py runs it at full size in
``make bench``): a real server and kernel train in a loop over a throttled link to a real
SeaweedFS, with a namespace several times larger than the shutdown grace can upload;
SIGTERM comes at random moments, and another node resumes.  At most the last cell is
lost whenever the delta fits the grace, and when anything is lost the resume says so."""

from __future__ import annotations

import pytest

from benchmarks.drill_spot import MB, Sizes, run_drill, table

pytestmark = pytest.mark.slow

SIZES = Sizes(
    bandwidth=3 * MB,  # 9 MB in the grace
    grace=3.0,  # a cell running at SIGTERM ends well within it (the drill's misses at full size)
    kill_after=8.0,
    state=24 * MB,  # several times what the grace can upload
    tensor=1 * MB,
    cell=0.5,
    gap=1.0,
    stage_every=3.0,
    span=14.0,
)


def test_a_preempted_node_loses_at_most_the_last_cell_when_the_delta_fits(tmp_path):
    results = run_drill(2, SIZES, seed=38, folder=tmp_path)
    print(table(results, SIZES))
    for trial in results:
        assert trial.outcome in ("newest", "older", "none"), trial
        assert trial.fits, trial  # the delta is the tensor and a few small variables
        assert trial.cells_lost <= 1, trial
        if trial.outcome != "newest" and trial.cells_lost:
            assert trial.told, trial  # never silence
