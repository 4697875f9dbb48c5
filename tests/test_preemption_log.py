"""Per-request preemption intervals (issue #16 item 4): recorded by the scheduler, typed on disk, read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pagesim.config import Config
from pagesim.metrics import summarize_run
from pagesim.replay import write_run_dir
from pagesim.results import read_run
from pagesim.simulator import simulate
from pagesim.traces import load_trace

TRACES = Path(__file__).resolve().parent.parent / "traces"


@pytest.fixture(scope="module")
def multiturn():
    return load_trace(str(TRACES / "multiturn-300.jsonl"), "auto", limit=120)


def small_cache(mode: str) -> Config:
    return Config(enable_prefix_caching=True, num_gpu_blocks=300, max_model_len=3000, preemption_mode=mode,
                  swap_space=0.25)


def check_intervals(requests: pd.DataFrame, steps: pd.DataFrame) -> int:
    """Each preemption has a later re-admission, before the next preemption and the finish; returns the count."""
    total = 0
    step_times = set(steps.loc[steps["num_preemptions"] > 0, "time_s"])
    for row in requests.itertuples():
        pre, res, swp = row.preempted_at, row.resumed_at, row.swapped_out
        if row.num_preemptions == 0:
            assert pre is None and res is None and swp is None, f"{row.request_id}: intervals without a preemption"
            continue
        assert len(pre) == len(res) == len(swp) == row.num_preemptions, f"{row.request_id}: counts differ"
        assert row.first_scheduled_s <= pre[0]
        for k in range(len(pre)):
            assert pre[k] < res[k], f"{row.request_id}: resumed at {res[k]} before its preemption at {pre[k]}"
            assert k + 1 == len(pre) or res[k] <= pre[k + 1]
            assert pre[k] in step_times, f"{row.request_id}: preempted at {pre[k]}, not a step that preempted"
        assert res[-1] < row.finish_s
        total += len(pre)
    return total


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_each_preemption_has_an_interval_that_ends_before_the_finish(multiturn, mode):
    r = simulate(multiturn, small_cache(mode))
    total = check_intervals(r.requests, r.steps)
    assert total == summarize_run(r)["num_preemptions"] > 0, "the test should exercise preemption"
    swapped = [s for v in r.requests["swapped_out"].dropna() for s in v]
    assert any(swapped) if mode == "swap" else not any(swapped)


def test_intervals_round_trip_typed(multiturn, tmp_path):
    results = {name: simulate(multiturn, small_cache(mode)) for name, mode in
               (("paged", "recompute"), ("swap", "swap"))}
    results["roomy"] = simulate(multiturn, Config(enable_prefix_caching=True, num_gpu_blocks=8000, max_model_len=3000))
    assert summarize_run(results["roomy"])["num_preemptions"] == 0
    write_run_dir(tmp_path, Config(), multiturn, results, {n: summarize_run(r) for n, r in results.items()})
    schema = pq.read_schema(tmp_path / "requests.parquet")
    assert schema.field("preempted_at").type == pa.list_(pa.float64())
    assert schema.field("resumed_at").type == pa.list_(pa.float64())
    assert schema.field("swapped_out").type == pa.list_(pa.bool_())
    _, steps, requests = read_run(tmp_path)
    for name, r in results.items():
        q = requests[requests["run"] == name].drop(columns="run").reset_index(drop=True)
        pd.testing.assert_frame_equal(q, r.requests, check_dtype=False)
        check_intervals(q, steps[steps["run"] == name])
    assert requests.loc[requests["run"] == "roomy", "preempted_at"].isna().all()
