"""The corruption campaign (tests/engine/campaign.py) as a test: 200 trials of flipped and
truncated files of every kind, shared and unshared blobs."""

from __future__ import annotations

import pytest

from . import campaign


@pytest.mark.slow
def test_corruption_is_detected_and_never_spreads(tmp_path):
    results, totals = campaign.run(200, tmp_path)
    assert len(results) == 200
    assert totals["silent"] == 0, [r for r in results if r["silent"]]
    assert totals["detected"] + totals["unaffected"] == 200
    assert totals["spread"] == 0, [r for r in results if r["spread"]]
    assert totals["healed"] == 200, [r for r in results if not r["healed"]]
    # only damage to data both checkpoints need leaves nothing to fall back to at once
    assert all(r["fallback"] for r in results if r["kind"] != "blob-shared")
