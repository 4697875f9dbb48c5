"""metrics.summarize on hand-made frames: every figure of summary.json worked out by hand.

The frames are what Recorder.steps_frame / requests_frame give (only the columns summarize reads). The scenario:

requests: "a" arrives first (t=0) and is rejected; "b" (t=1) finishes at 5 with 3 output tokens; "c" (t=2) finishes at
9 with 1 output token (no TPOT); "c" asked for two samples, and its forked sample "c#1" finishes at 10 with 4 tokens.
steps: 1 s, then a zero-length step (weighs nothing in the time-weighted figures), then 3 s.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pagesim.metrics import percentiles, summarize

NAN = np.nan


def requests_frame() -> pd.DataFrame:
    rows = [  # request_id, parent_id, state, arrival, first token, finish, output_len
        ("a", "", "rejected", 0.0, NAN, NAN, 5),
        ("b", "", "finished", 1.0, 2.0, 5.0, 3),
        ("c", "", "finished", 2.0, 4.0, 9.0, 1),
        ("c#1", "c", "finished", 2.0, 4.0, 10.0, 4),
    ]
    df = pd.DataFrame(rows, columns=["request_id", "parent_id", "state", "arrival_time_s", "first_token_s", "finish_s",
                                     "output_len"])
    finished = df["state"] == "finished"
    df["ttft_s"] = df["first_token_s"] - df["arrival_time_s"]
    df["tpot_s"] = np.where(finished & (df["output_len"] > 1),
                            (df["finish_s"] - df["first_token_s"]) / np.maximum(df["output_len"] - 1, 1), NAN)
    df["e2e_s"] = np.where(finished, df["finish_s"] - df["arrival_time_s"], NAN)
    return df


def steps_frame() -> pd.DataFrame:
    cols = ["duration_s", "used", "reserved", "internal_fragmentation", "external_fragmentation", "free", "cached",
            "kv_cache_usage", "num_running", "num_preemptions", "num_load_blocks", "num_store_blocks"]
    return pd.DataFrame([
        (1.0, 10, 4, 2, 0, 84, 0, 0.16, 2, 1, 2, 5),
        (0.0, 0, 0, 0, 50, 50, 0, 0.90, 7, 0, 0, 0),  # zero length: counts in peaks and totals, not in time averages
        (3.0, 30, 6, 4, 10, 40, 10, 0.40, 4, 2, 1, 0),
    ], columns=cols)


@pytest.fixture(scope="module")
def summary() -> dict:
    return summarize(steps_frame(), requests_frame(), leaked_blocks=0, sim_wall_s=0.5, prefix_cache_queries=200,
                     prefix_cache_hits=80, prefix_cache_recompute_queries=50, prefix_cache_recompute_hits=10,
                     prefix_cache_host_hits=30, block_bytes=1000)


def test_request_counts_are_of_the_traces_requests_and_samples_count_apart(summary):
    assert summary["num_requests"] == 3  # a, b, c: the forked sample is not a request of the trace
    assert summary["num_finished"] == 2
    assert summary["num_rejected"] == 1
    assert summary["num_samples"] == 3  # finished rows, samples included


def test_makespan_runs_from_the_first_arrival_even_a_rejected_one_to_the_last_finish(summary):
    assert summary["makespan_s"] == 10.0  # 0 (a's arrival, though rejected) to 10 (c#1's finish)


def test_throughputs_count_requests_once_and_every_samples_tokens(summary):
    assert summary["request_throughput"] == pytest.approx(2 / 10)  # b and c; c's sample is not another request
    assert summary["output_token_throughput"] == pytest.approx((3 + 1 + 4) / 10)  # the sample's tokens are output


def test_latency_percentiles_leave_out_requests_without_a_value(summary):
    assert summary["ttft_s"] == pytest.approx({"p50": 2.0, "p90": 2.0, "p99": 2.0, "mean": 5 / 3})
    # TPOT: b's 1.5 s and c#1's 2 s; c's one output token has none (not 0)
    assert summary["tpot_s"]["p50"] == pytest.approx(1.75) and summary["tpot_s"]["mean"] == pytest.approx(1.75)
    assert summary["e2e_s"]["p50"] == pytest.approx(7.0)
    assert percentiles([NAN, NAN]) == {"p50": None, "p90": None, "p99": None, "mean": None}


def test_memory_fractions_are_weighted_by_step_time_over_allocated_or_total_slots(summary):
    # allocated = used + reserved + internal: 16 slots for 1 s, 40 for 3 s
    assert summary["token_state_fraction"] == pytest.approx((10 * 1 + 30 * 3) / (16 * 1 + 40 * 3))
    assert summary["reserved_fraction"] == pytest.approx((4 * 1 + 6 * 3) / 136)
    assert summary["internal_fragmentation_fraction"] == pytest.approx((2 * 1 + 4 * 3) / 136)
    # external fragmentation is a share of the whole cache (100 slots), not of what is allocated
    assert summary["external_fragmentation_fraction"] == pytest.approx((0 * 1 + 10 * 3) / (100 * 4))
    assert summary["mean_kv_cache_usage"] == pytest.approx((0.16 * 1 + 0.40 * 3) / 4)
    assert summary["mean_num_running"] == pytest.approx((2 * 1 + 4 * 3) / 4)


def test_peaks_and_totals_count_every_step(summary):
    assert summary["peak_num_running"] == 7  # the zero-length step's
    assert summary["num_preemptions"] == 3
    assert summary["num_steps"] == 3
    assert summary["busy_s"] == 4.0


def test_prefix_cache_rates_split_gpu_and_host_hits_over_the_same_queries(summary):
    assert summary["prefix_cache_hit_rate"] == pytest.approx(80 / 200)
    assert summary["prefix_cache_gpu_hit_rate"] == pytest.approx((80 - 30) / 200)
    assert summary["prefix_cache_host_hit_rate"] == pytest.approx(30 / 200)
    assert summary["prefix_cache_gpu_hit_rate"] + summary["prefix_cache_host_hit_rate"] == pytest.approx(
        summary["prefix_cache_hit_rate"])
    assert summary["prefix_cache_recompute_hit_rate"] == pytest.approx(10 / 50)


def test_offload_traffic_is_blocks_moved_times_block_bytes(summary):
    assert summary["offload_load_bytes"] == 3 * 1000  # host -> GPU
    assert summary["offload_store_bytes"] == 5 * 1000  # GPU -> host


def test_a_run_that_allocated_nothing_has_no_fractions_and_no_throughput():
    steps = steps_frame().iloc[:1].assign(used=0, reserved=0, internal_fragmentation=0, external_fragmentation=0,
                                          free=100, kv_cache_usage=0.0)
    reqs = requests_frame().iloc[:1]  # only the rejected request
    s = summarize(steps, reqs, leaked_blocks=0, sim_wall_s=0.0, prefix_cache_queries=0, prefix_cache_hits=0)
    assert s["token_state_fraction"] is None and s["reserved_fraction"] is None
    assert s["external_fragmentation_fraction"] == 0.0
    assert s["makespan_s"] == 0.0 and s["request_throughput"] is None and s["output_token_throughput"] is None
    assert s["prefix_cache_hit_rate"] is None and s["prefix_cache_gpu_hit_rate"] is None
    assert s["offload_load_bytes"] is None  # no block size: no bytes to count
    assert math.isclose(s["mean_kv_cache_usage"], 0.0)
