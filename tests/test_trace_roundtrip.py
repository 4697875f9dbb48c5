"""Writing a trace in the own format and reading it back gives the same trace."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagesim.traces import load_trace, trace_from_frame, write_trace
from pagesim.traces.synth import synthesize

INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def frames(draw):
    n = draw(st.integers(1, 12))
    block = draw(st.integers(1, 8))
    optional = draw(st.sets(st.sampled_from(["prefix_hash_ids", "prompt_token_ids", "n", "priority"])))
    prompt = draw(st.lists(st.integers(1, 40 if "prompt_token_ids" in optional else 100_000), min_size=n, max_size=n))
    df = pd.DataFrame(
        {
            "request_id": draw(st.lists(st.text(st.characters(exclude_categories=["Cs"]), min_size=1), min_size=n, max_size=n, unique=True)),
            "arrival_time_s": draw(st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=n, max_size=n)),
            "prompt_len": prompt,
            "output_len": draw(st.lists(st.integers(1, 2**31 - 1), min_size=n, max_size=n)),
        }
    )
    if "prefix_hash_ids" in optional:
        df["prefix_hash_ids"] = [draw(st.lists(INT64, min_size=p // block, max_size=p // block)) if p // block < 50 else list(range(p // block)) for p in prompt]
    if "prompt_token_ids" in optional:
        df["prompt_token_ids"] = [draw(st.lists(INT64, min_size=p, max_size=p)) for p in prompt]
    if "n" in optional:
        df["n"] = draw(st.lists(st.integers(1, 64), min_size=n, max_size=n))
    if "priority" in optional:
        df["priority"] = draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n))
    return trace_from_frame(df, draw(st.text(max_size=20)), block)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=frames())
def test_write_then_read_gives_an_equal_trace(tmp_path, trace):
    path = tmp_path / "t.jsonl"
    write_trace(trace, path)
    back = load_trace(path)
    pd.testing.assert_frame_equal(back.df, trace.df)
    assert (back.name, back.hash_block_size, back.summary.format) == (trace.name or "t", trace.hash_block_size, "pagesim")


def test_synthetic_traces_round_trip(tmp_path):
    for preset in ("kshot", "multiturn", "azure-code"):
        trace = synthesize(preset, num_requests=200, rate=5.0, seed=7)
        write_trace(trace, tmp_path / "t.jsonl")
        back = load_trace(tmp_path / "t.jsonl")
        pd.testing.assert_frame_equal(back.df, trace.df)
        assert back.hash_block_size == trace.hash_block_size
