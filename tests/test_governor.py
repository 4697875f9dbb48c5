"""The power governor (pagesim/cost/governor.py): fitted from a calibration's clocks, applied by the simulator and by
validation alike, and kept out of the exact fast path's decode runs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pagesim.cost import ProfileCostModel
from pagesim.cost.features import StepFeatures
from pagesim.cost.governor import (GOVERNOR_MIN_ROWS, ClockGovernor, Throttle, flops_rates, load_at_starts,
                                   step_flops)
from pagesim.errors import UserError
from pagesim.specs import get_model
from tests.test_fast_path import fast_and_plain

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "results/profiles/h200-llama-3-8b.json"
SPEC = get_model("llama-3-8b")


def true_slowdown(load):
    """The clock a synthetic GPU runs at: the top clock up to 150 TFLOP/s of load, then down linearly to 1/1.3 of it."""
    return 0.3 * np.clip((np.asarray(load) - 150) / 350, 0, 1)


def synthetic_rows(tau: float = 0.15, seed: int = 0) -> pd.DataFrame:
    """Calibration-like rows: workloads of 20-60 steps (prefill chunks of random size, or decode-only steps), one
    after the other with rests between them, whose SM clock follows true_slowdown of the load at each step's start."""
    rng = np.random.default_rng(seed)
    rows, t, w = [], 0.0, 0
    while len(rows) < 3000:
        prefill = rng.random() < 0.6
        tokens = int(rng.choice([512, 1024, 2048, 4096, 8192])) if prefill else 0
        for _ in range(int(rng.integers(20, 60))):
            duration = 0.01 + tokens * 2.5e-5 * rng.uniform(0.9, 1.1) if prefill else 0.008
            rows.append(dict(workload=f"w{w}", started_unix=1.7e9, time_s=t, duration_s=duration,
                             num_prefill_tokens=tokens, num_decode_seqs=0 if prefill else 32,
                             prefill_attn_pairs=tokens * (tokens + 1) // 2, decode_context_tokens=0 if prefill else 32_000))
            t += duration
        t += float(rng.uniform(0.0, 0.5))  # the rest between workloads
        w += 1
    df = pd.DataFrame(rows)
    per_token, per_pair = flops_rates(SPEC)
    flops = step_flops(per_token, per_pair, df.num_prefill_tokens, df.num_decode_seqs, df.prefill_attn_pairs,
                       df.decode_context_tokens)
    rate = np.where(df.num_prefill_tokens > 0, flops / df.duration_s / 1e12, 0.0)
    load = load_at_starts(df.time_s.to_numpy(), df.duration_s.to_numpy(), rate, tau)
    return df.assign(sm_clock_mhz=np.round(1980 / (1 + true_slowdown(load))))


def test_the_fit_recovers_a_known_clock_curve_and_its_time_constant():
    rows = synthetic_rows()
    governor, report = ClockGovernor.fit(rows, SPEC, 1980.0, 0.1)
    assert governor is not None and report["tau_s"] == 0.15, report
    for load in (0.0, 100.0, 250.0, 400.0, governor.loads[-1]):
        expected = 1 + 0.1 * float(true_slowdown(min(load, governor.loads[-1])))
        assert governor.factor(load) == pytest.approx(expected, abs=0.004), load
    assert governor.factor(10 * governor.loads[-1]) == governor.factor(governor.loads[-1])  # flat beyond the rows


def test_the_fit_needs_start_times_and_enough_prefill_rows():
    rows = synthetic_rows()
    assert ClockGovernor.fit(rows.drop(columns="started_unix"), SPEC, 1980.0, 0.1)[0] is None
    few = rows[rows.num_prefill_tokens == 0].head(500)
    few = pd.concat([few, rows[rows.num_prefill_tokens > 0].head(GOVERNOR_MIN_ROWS - 1)])
    governor, report = ClockGovernor.fit(few, SPEC, 1980.0, 0.1)
    assert governor is None and str(GOVERNOR_MIN_ROWS) in report["skipped"]


def test_a_burst_slows_prefill_steps_and_a_pause_restores_them():
    governor, _ = ClockGovernor.fit(synthetic_rows(), SPEC, 1980.0, 0.1)
    throttle = Throttle(governor)
    f = StepFeatures(num_prefill_tokens=8192, num_prefill_seqs=1, prefill_attn_pairs=8192 * 8193 // 2)
    t, times = 0.0, []
    for _ in range(12):  # back to back: the load rises, and with it each step's time
        times.append(throttle.price(t, 0.2, f))
        t += times[-1]
    assert times[0] == pytest.approx(0.2 * governor.factor(0.0))
    assert all(b >= a for a, b in zip(times, times[1:])) and times[-1] > 1.02 * times[0]
    assert times[-1] <= 0.2 * governor.factor(governor.loads[-1])
    decode = StepFeatures(num_decode_seqs=64, decode_context_tokens=64 * 2048)
    assert throttle.price(t, 0.01, decode) == 0.01  # a decode-only step: as priced, and the load only decays over it
    assert throttle.price(t + 20 * governor.tau_s, 0.2, f) == pytest.approx(times[0], rel=1e-4)  # rested


def governed_profile() -> ProfileCostModel:
    """The committed H200 profile with the synthetic GPU's governor (its own clock share)."""
    base = ProfileCostModel.from_json(PROFILE)
    governor, _ = ClockGovernor.fit(synthetic_rows(), get_model(base.model), 1980.0, 0.1)
    return replace(base, governor=governor)


def test_a_profile_keeps_its_governor_through_json_and_refuses_a_bad_one(tmp_path):
    profile = governed_profile()
    profile.to_json(tmp_path / "p.json")
    back = ProfileCostModel.from_json(tmp_path / "p.json")
    assert back.governor == profile.governor and back.describe()["clock_governor"] == profile.governor.to_json()
    d = json.loads((tmp_path / "p.json").read_text())
    for bad in ({**d["clock_governor"], "tau_s": 0}, {**d["clock_governor"], "slowdown": [0.1, 0.0]},
                {**d["clock_governor"], "sensitivity": "0.1"}, "fast"):
        (tmp_path / "bad.json").write_text(json.dumps({**d, "clock_governor": bad}))
        with pytest.raises(UserError, match="'clock_governor' is .*expected"):
            ProfileCostModel.from_json(tmp_path / "bad.json")


@pytest.mark.parametrize("overrides", [dict(num_gpu_blocks=300, watermark=0.01), dict(max_num_batched_tokens=512)],
                         ids=["preempting", "chunked"])
def test_the_fast_path_equals_step_by_step_with_a_governor(overrides):
    """Decode runs leave the governor's load to decay: the fast path gives the step-by-step simulation exactly, and
    the governor made the steps with prefill tokens slower than the same profile without it."""
    fast, plain = fast_and_plain("sharegpt-bursty-1k.jsonl", governed_profile(), overrides)
    tokens = [r.steps["num_prefill_tokens"].to_numpy() for r in (fast, plain)]
    m = min(map(len, tokens))
    differ = tokens[0][:m] != tokens[1][:m]
    n = int(np.argmax(differ)) if differ.any() else m  # the plans are the same until the timing changes one
    prefill = tokens[0] > 0
    first = fast.steps["duration_s"].to_numpy()[:n] / plain.steps["duration_s"].to_numpy()[:n]
    assert (first[prefill[:n]] >= 1).all() and (first[prefill[:n]] > 1.001).any()
    assert (first[~prefill[:n]] == 1).all()


def test_validation_prices_live_steps_as_the_simulator_does(tmp_path):
    """Validating the committed longdoc-b-r34h run with its own profile and with a governor fitted to the same
    session's calibration rows (no live step used): its eager steps, which ran during bursts at a lower clock,
    are priced closer."""
    from pagesim.validate import validate

    run = REPO / "results/live/longdoc-b-r34h"
    profile = json.loads((run / "profile.json").read_text())
    clock = profile["fit"]["sm_clock"]
    governor, _ = ClockGovernor.fit(pd.read_csv(run / "profile.steps.csv.gz"), get_model(profile["model"]),
                                    clock["reference_mhz"], clock["sensitivity"])
    (tmp_path / "governed.json").write_text(json.dumps({**profile, "clock_governor": governor.to_json()}))
    without = validate(run, str(run / "profile.json"), out=tmp_path / "without")["step_level"]["by_kind"]
    with_ = validate(run, str(tmp_path / "governed.json"), out=tmp_path / "with")["step_level"]["by_kind"]
    for kind in ("mixed", "prefill"):
        bias = [abs(k[kind]["predicted_total_s"] / k[kind]["measured_total_s"] - 1) for k in (without, with_)]
        assert with_[kind]["mape"] < without[kind]["mape"] and bias[1] < bias[0], (kind, without[kind], with_[kind])
    assert with_["graph decode"] == without["graph decode"]  # decode-only steps are priced as before
    assert math.isclose(sum(k["n_steps"] for k in with_.values()), sum(k["n_steps"] for k in without.values()))


def test_the_oracle_replay_runs_a_profile_with_a_governor():
    """pagesim/live_oracle.py builds its own executor: with a governed profile (a round 35 recording's) it takes the
    simulation's clock, replays the live plans to the end, and its model-priced replay (take_live False) prices the
    steps with prefill tokens as the simulator does."""
    from pagesim.cost import make_cost_model
    from pagesim.live_oracle import oracle_run
    from pagesim.validate import default_cost_model, load_run

    run = load_run(REPO / "results/live/pair-conv-paged-r35bh")
    cost = make_cost_model(default_cost_model(run), run["config"])
    assert cost.governor is not None
    result, diverged, _ = oracle_run(run, cost)
    assert not diverged and result.num_steps == len(run["steps"])
    priced, _, _ = oracle_run(run, cost, take_live=False)
    plain, _, _ = oracle_run(run, replace(cost, governor=None), take_live=False)
    prefill = (priced.steps["num_prefill_tokens"] > 0).to_numpy()
    n = min(len(priced.steps), len(plain.steps))
    ratio = priced.steps["duration_s"].to_numpy()[:n] / plain.steps["duration_s"].to_numpy()[:n]
    assert ratio[0] == pytest.approx(cost.governor.factor(0.0)) and (ratio[prefill[:n]] >= 1).all()
