"""bench/power_cap.py: the recent prefill rate, the factor's fit and the cost-model wrapper, on tiny synthetic data."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from bench.power_cap import (RATE_EDGES, Factor, LoadFactorCost, RateMeter, ewma_rates, fit_factor, pooled_bins,
                             step_kind, target, window_of)
from pagesim.validate import step_kinds


def test_ewma_rates_sum_each_earlier_steps_tokens_decayed_from_its_end():
    start = np.array([0.0, 0.1, 0.3, 1.0])
    duration = np.array([0.1, 0.2, 0.05, 0.1])
    tokens = np.array([1000.0, 0.0, 500.0, 8.0])
    tau = 0.25
    ends = start + duration
    brute = [sum(p * math.exp(-(s - e) / tau) for p, e in zip(tokens, ends) if e <= s) / tau for s in start]
    assert ewma_rates(start, duration, tokens, tau) == pytest.approx(brute)
    assert ewma_rates(start, duration, tokens, tau)[0] == 0.0


def test_a_steady_prefill_stream_reads_as_its_rate():
    n, d, p = 400, 0.01, 200.0  # 200 tokens every 10 ms: 20k tokens/s
    start = np.arange(n) * d
    rate = ewma_rates(start, np.full(n, d), np.full(n, p), 0.5)
    assert rate[-1] == pytest.approx(20000, rel=0.01)
    meter = RateMeter(0.5)
    meter.add(1.0, 1000.0)
    assert meter.rate(1.5) == pytest.approx(1000 / 0.5 * math.exp(-1))


def test_step_kind_matches_validates_step_kinds():
    frame = pd.DataFrame({"num_prefill_tokens": [0, 0, 100, 100, 3000, 3000, 0, 50],
                          "num_decode_seqs": [4, 300, 0, 4, 0, 4, 300, 2],
                          "num_swap_out_blocks": [0, 0, 0, 0, 0, 0, 0, 3],
                          "num_swap_in_blocks": 0})
    expected = step_kinds(frame, 256, 2048).tolist()
    got = [step_kind(int(p), int(d), int(o + i), 256, 2048) for p, d, o, i in frame.itertuples(index=False)]
    assert got == expected
    assert got[:6] == ["graph decode", "graph mixed", "graph mixed", "graph mixed", "prefill", "mixed"]


def test_pooled_bins_pool_thin_bins_with_those_below():
    rate = np.array([10.0] * 30 + [2000.0] * 5 + [7000.0] * 25)  # bins 0, 1 (thin), 2
    measured = np.r_[np.full(30, 1.0), np.full(5, 2.0), np.full(25, 3.0)]
    mid, value, counts = pooled_bins(rate, measured, np.ones(60), min_steps=20)
    assert counts[:3].tolist() == [30, 5, 25]
    assert value[0] == 1.0
    assert value[1] == value[2] == pytest.approx((5 * 2 + 25 * 3) / 30)  # the thin bin joined the next one
    assert value[-1] == value[2]  # empty top bins take the last group's value
    assert mid[0] == 10.0
    assert pooled_bins(rate[:5], measured[:5], np.ones(5), min_steps=20) is None


def synthetic_training() -> pd.DataFrame:
    """graph mixed steps 10% slower above 30k tokens/s, graph decode flat, both at a 0.95 level everywhere."""
    rows = []
    for rate in (100.0, 35000.0):
        for kind, slow in (("graph mixed", 1.10), ("graph decode", 1.0)):
            ratio = 0.95 * (slow if rate > 30000 else 1.0)
            rows += [{"kind": kind, "rate": rate, "predicted_s": 0.02, "measured_s": 0.02 * ratio,
                      "sm_clock_mhz": 1980.0 if rate < 1000 else 1650.0}] * 30
    return pd.DataFrame(rows)


def test_the_kind_factor_is_one_at_rest_and_carries_only_the_load_dependence():
    f = fit_factor(synthetic_training(), "kind", smooth=False, tau=0.1)
    assert f("graph mixed", 0.0) == pytest.approx(1.0)  # the 0.95 level is not the factor's
    assert f("graph mixed", 36000.0) == pytest.approx(1.10)
    assert f("graph decode", 36000.0) == pytest.approx(1.0)
    assert f("swap", 36000.0) == 1.0  # a kind without a table
    smooth = fit_factor(synthetic_training(), "kind", smooth=True, tau=0.1)
    assert 1.0 < smooth("graph mixed", 20000.0) < 1.10  # between the two bins' median rates
    assert smooth("graph mixed", 1e6) == pytest.approx(1.10)


def test_the_clock_factor_prices_the_bins_clock_with_the_profiles_share():
    f = fit_factor(synthetic_training(), "clock", smooth=False, tau=0.1, share=0.15, reference_mhz=1980.0)
    assert f("mixed", 0.0) == pytest.approx(1.0)
    assert f("graph decode", 40000.0) == pytest.approx(1 + 0.15 * (1980 / 1650 - 1))


def test_the_wrapper_reads_the_rate_left_by_the_steps_it_priced():
    class Clock:
        t = 0.0

        def now(self):
            return self.t

    base = SimpleNamespace(prices_sharing=False, prefill_grid=None, governor=None, step_time=lambda f: 0.1,
                           describe=lambda: {})
    fast = np.array(RATE_EDGES[:-1]) < 20000  # factor 2 from 20k tokens/s on
    factor = Factor(0.5, {"*": (np.zeros(len(fast)), np.where(fast, 1.0, 2.0))}, smooth=False)
    cost = LoadFactorCost(base, factor, 256, 0)
    cost.clock = Clock()

    def step(p, d):
        return SimpleNamespace(num_prefill_tokens=p, num_decode_seqs=d, num_swap_out_blocks=0, num_swap_in_blocks=0)

    assert cost.step_time(step(8000, 0)) == pytest.approx(0.1)  # nothing before it
    cost.clock.t = 0.1  # 8000 tokens ended at 0.1 s: 16k tokens/s now
    assert cost.step_time(step(8000, 0)) == pytest.approx(0.1)
    cost.clock.t = 0.2  # (8000 e^-0.2 + 8000) / 0.5 = 29.1k tokens/s
    assert cost.step_time(step(0, 8)) == pytest.approx(0.2)
    cost.clock.t = 5.0  # long idle: back to rest
    assert cost.step_time(step(0, 8)) == pytest.approx(0.1)


def test_targets_and_windows():
    assert (target("ttft_s_p50"), target("e2e_s_p99"), target("makespan_s")) == (0.05, 0.10, 0.01)
    assert window_of("azure-code-600-660-r25w") == "azure-code-600-660"
    assert window_of("offload-kshot-r19pa") == "offload-kshot"
    assert window_of("pair-conv-paged-r18") == "pair-conv-paged"
