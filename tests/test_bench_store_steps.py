"""bench/store_steps.py on a committed offload window: the steps with host-tier stores, recorded with the copies
issued before the forward (round 36), ran longer than their prediction by a fixed part and a part per block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.store_steps import main, store_excess

RUN = Path(__file__).resolve().parent.parent / "results" / "live" / "offload-kshot-r36h"


@pytest.mark.skipif(not RUN.exists(), reason="the committed offload window is not in this checkout")
def test_store_steps_of_an_offload_window_run_over_their_prediction(tmp_path):
    r = store_excess(RUN)
    assert r["steps_with_stores"] == 53 and r["steps_without"] > 9000
    assert r["ratio_with_stores"] > r["ratio_without"] + 0.03  # the stores' issue time, priced as overlapped
    assert 0.1 < r["excess_ms_median"] < 1.0 and r["fit_fixed_ms"] > 0 and r["fit_per_block_ms"] > 0
    assert sum(b["steps"] for b in r["by_stored_blocks"].values()) == 53
    out = tmp_path / "r.json"
    assert main([str(RUN), str(RUN.parent / "longdoc-a-r36h"), "--out", str(out)]) == 0  # no host tier: left out
    assert [x["run"] for x in json.loads(out.read_text())["runs"]] == [RUN.name]
