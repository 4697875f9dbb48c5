"""load_trace options: time window, limit, time_scale and rate, applied in that order."""

from __future__ import annotations

import pytest

from pagesim.errors import OptionError
from pagesim.traces import load_trace
from pagesim.traces.stats import trace_stats

# arrivals at 100, 101, ..., 109 s; prompt_len 1..10 identifies each row
VIDUR = "arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(f"{100 + i},{i + 1},5\n" for i in range(10))


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "v.csv"
    p.write_text(VIDUR)
    return p


def test_window_keeps_start_inclusive_end_exclusive_and_rebases(path):
    trace = load_trace(path, start_s=2.0, end_s=5.0)
    assert trace.df["prompt_len"].tolist() == [3, 4, 5]
    assert trace.df["arrival_time_s"].tolist() == [0.0, 1.0, 2.0]
    assert trace.summary.dropped == {"arrives before start_s=2.0": 2, "arrives at or after end_s=5.0": 5}
    assert (trace.summary.rows_read, trace.summary.rows_kept, trace.summary.span_s) == (10, 3, 2.0)


def test_window_starting_between_arrivals_rebases_to_the_first_kept_arrival(path):
    assert load_trace(path, start_s=2.5).df["arrival_time_s"].iloc[:2].tolist() == [0.0, 1.0]


def test_limit_keeps_the_first_requests_after_the_window(path):
    trace = load_trace(path, start_s=4.0, limit=3)
    assert trace.df["prompt_len"].tolist() == [5, 6, 7]
    assert trace.summary.dropped["beyond limit=3"] == 3


def test_time_scale_two_replays_twice_as_fast(path):
    assert load_trace(path, time_scale=2.0).df["arrival_time_s"].tolist() == pytest.approx([i / 2 for i in range(10)])
    assert trace_stats(load_trace(path, time_scale=2.0))["rate"] == pytest.approx(2 * 10 / 9)


def test_rate_rescales_to_the_requested_mean_rate(path):
    trace = load_trace(path, rate=5.0)
    assert trace_stats(trace)["rate"] == pytest.approx(5.0)
    assert trace.df["arrival_time_s"].iloc[-1] == pytest.approx(2.0)  # 10 rows / 5 req/s
    # --rate sets the rate itself: a --time-scale beside it would do nothing, so the pair is refused, naming both
    with pytest.raises(OptionError, match="rate 5.0 sets the mean arrival rate itself, so time_scale 3.0"):
        load_trace(path, time_scale=3.0, rate=5.0)


def test_options_compose_on_a_real_trace(azure_dir):
    trace = load_trace(azure_dir / "AzureLLMInferenceTrace_conv.csv", start_s=600, end_s=1200, limit=1000, rate=10.0)
    stats = trace_stats(trace)
    assert stats["rows"] == 1000 and stats["rate"] == pytest.approx(10.0)
    assert sum(trace.summary.dropped.values()) == 19366 - 1000
