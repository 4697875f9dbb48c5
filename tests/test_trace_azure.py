"""The real Azure LLM inference 2023 traces load with the row counts and statistics their README states."""

from __future__ import annotations

import time

import pytest

from pagesim.traces import load_trace
from pagesim.traces.stats import trace_stats

# From /work/shared/traces/azure2023/README.txt (computed there with the csv module).
STATED = {
    "conv": dict(rows=19366, span_s=3501.7, rate=5.53, prompt=(1154.7, 1020, 4142, 2, 14050), output=(211.1, 129, 601, 7, 1000)),
    "code": dict(rows=8819, span_s=3435.9, rate=2.57, prompt=(2047.8, 1469, 7436, 3, 7437), output=(27.9, 13, 251.5, 6, 1899)),
}


@pytest.mark.parametrize("kind", STATED)
def test_azure_2023_rows_and_statistics_match_the_published_summary(azure_dir, kind):
    trace = load_trace(azure_dir / f"AzureLLMInferenceTrace_{kind}.csv")
    stated, stats = STATED[kind], trace_stats(trace)
    assert trace.summary.format == "azure"
    assert stats["rows"] == trace.summary.rows_read == stated["rows"]
    assert trace.summary.dropped == {} and trace.summary.warnings == []
    assert stats["span_s"] == pytest.approx(stated["span_s"], abs=0.05)
    assert stats["rate"] == pytest.approx(stated["rate"], abs=0.005)
    for key, (mean, p50, p99, low, high) in (("prompt_len", stated["prompt"]), ("output_len", stated["output"])):
        s = stats[key]
        assert round(s["mean"], 1) == mean, key
        assert s["p50"] == p50, key
        assert s["p99"] == pytest.approx(p99, abs=0.05), key
        assert (s["min"], s["max"]) == (low, high), key


def test_loading_the_azure_conv_trace_takes_well_under_a_second(azure_dir):
    path = azure_dir / "AzureLLMInferenceTrace_conv.csv"
    load_trace(path)  # warm imports and caches
    start = time.perf_counter()
    load_trace(path)
    assert time.perf_counter() - start < 0.5
