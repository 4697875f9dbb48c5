"""Synthetic traces: reproducible by seed, with rates and length statistics near their targets, and prefix
sharing where the workload shares prefixes.

Tolerances are about 4 standard errors at the sizes used: Poisson and gamma rates within 6%
(n = 5000, cv up to 2) and 8% (kshot, n = 3000), multiturn rate within 15% (n = 3000; conversations
arrive in clumps of turns), means within 5% (n = 20000, lognormal sigma up to 1.3), medians within 3%.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.errors import UserError
from pagesim.traces.stats import trace_stats
from pagesim.traces.synth import PRESETS, Fixed, LogNormal, Uniform, synthesize

TARGETS = {  # preset: (prompt mean, prompt median, output mean, output median); None where not targeted
    "azure-conv": (1154.7, 1020, 211.1, 129),
    "azure-code": (2047.8, 1469, 27.9, 13),
    "sharegpt": (161.31, 98, 337.99, 205),
    "alpaca": (19.31, 15.3, 58.45, 41.2),
}


@pytest.mark.parametrize("preset", PRESETS)
def test_same_seed_gives_the_same_trace_and_another_seed_does_not(preset):
    a, b = synthesize(preset, num_requests=300, rate=5, seed=11), synthesize(preset, num_requests=300, rate=5, seed=11)
    pd.testing.assert_frame_equal(a.df, b.df)
    assert not a.df.equals(synthesize(preset, num_requests=300, rate=5, seed=12).df)
    assert len(a.df) == 300 and a.summary.rows_kept == 300


@pytest.mark.parametrize("preset", TARGETS)
def test_length_statistics_match_the_preset_targets(preset):
    stats = trace_stats(synthesize(preset, num_requests=20000, rate=10, seed=1))
    p_mean, p_median, o_mean, o_median = TARGETS[preset]
    assert stats["prompt_len"]["mean"] == pytest.approx(p_mean, rel=0.05)
    assert stats["output_len"]["mean"] == pytest.approx(o_mean, rel=0.05)
    # integer rounding moves small medians by up to half a token
    assert stats["prompt_len"]["p50"] == pytest.approx(p_median, rel=0.03, abs=0.5)
    assert stats["output_len"]["p50"] == pytest.approx(o_median, rel=0.03, abs=0.5)
    assert stats["prompt_len"]["max"] <= PRESETS[preset].prompt_len.max
    assert stats["output_len"]["max"] <= PRESETS[preset].output_len.max


@pytest.mark.parametrize("arrival, cv", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 2.0)])
def test_arrival_rate_and_burstiness_match(arrival, cv):
    trace = synthesize("sharegpt", num_requests=5000, rate=8.0, arrival=arrival, cv=cv, seed=2)
    gaps = np.diff(trace.df["arrival_time_s"])
    assert trace_stats(trace)["rate"] == pytest.approx(8.0, rel=0.06)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)
    assert trace.df["arrival_time_s"].iloc[0] == 0.0


@pytest.mark.parametrize("preset", ["kshot", "multiturn"])
def test_shared_prefix_presets_hit_the_rate_and_share_blocks(preset):
    trace = synthesize(preset, num_requests=3000, rate=6.0, seed=3, hash_block_size=16)
    stats = trace_stats(trace)
    assert stats["rate"] == pytest.approx(6.0, rel=0.15 if preset == "multiturn" else 0.08)
    assert trace.hash_block_size == 16
    assert stats["prefix_sharing_ratio"] > 0.5


def test_kshot_requests_open_with_one_of_the_shared_prefixes():
    df = synthesize("kshot", num_requests=400, rate=5, seed=4).df
    openings = {tuple(h[:64]) for h in df["prefix_hash_ids"]}  # the shortest prefix has >= 1024 tokens = 64 blocks
    assert len(openings) == 4


def test_multiturn_prompts_extend_the_previous_turn_of_their_conversation():
    df = synthesize("multiturn", num_requests=1000, rate=5, seed=5).df
    turns = df.assign(conv=df["request_id"].str.split(".").str[0], turn=df["request_id"].str.split(".").str[1].astype(int))
    checked = 0
    for _, conv in turns.groupby("conv"):
        conv = conv.sort_values("turn")
        for (_, a), (_, b) in zip(conv.iloc[:-1].iterrows(), conv.iloc[1:].iterrows()):
            assert b["turn"] == a["turn"] + 1 and b["arrival_time_s"] > a["arrival_time_s"]
            assert b["prompt_len"] > a["prompt_len"] + a["output_len"]  # history + the reply + a new message
            assert b["prefix_hash_ids"][: len(a["prefix_hash_ids"])] == a["prefix_hash_ids"]
            checked += 1
    assert checked > 300


def test_custom_distributions_override_the_preset():
    trace = synthesize("sharegpt", num_requests=500, rate=5, prompt_len=Fixed(100), output_len=Uniform(10, 20), seed=0)
    assert set(trace.df["prompt_len"]) == {100}
    assert trace.df["output_len"].between(10, 20).all()
    assert "prefix_hash_ids" not in trace.df and trace.hash_block_size is None


def test_lognormal_holds_both_mean_and_median_after_clipping():
    lengths = LogNormal(mean=300, median=150, max=1000).sample(np.random.default_rng(0), 200_000)
    assert lengths.max() == 1000 and (lengths == 1000).any()
    assert lengths.mean() == pytest.approx(300, rel=0.01)
    assert np.median(lengths) == pytest.approx(150, abs=1)


@pytest.mark.parametrize(
    "kwargs",
    [dict(preset="nope"), dict(arrival="uniform"), dict(arrival="poisson", cv=2.0), dict(rate=0), dict(num_requests=0)],
)
def test_bad_arguments_are_user_errors(kwargs):
    with pytest.raises(UserError):
        synthesize(**kwargs)


def test_a_lognormal_needs_median_below_mean_below_max():
    with pytest.raises(UserError):
        LogNormal(mean=10, median=20, max=100)
