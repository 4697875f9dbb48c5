"""Cost models: the roofline's arithmetic, the fast path's vectorised decode runs, profile files and fitting."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.config import Config
from pagesim.cost import ProfileCostModel, RooflineCostModel, StepFeatures, fit_profile, make_cost_model
from pagesim.cost.profile import FEATURES
from pagesim.errors import UserError
from pagesim.request import Request
from pagesim.scheduler import ScheduledRequest, StepPlan

CONFIG = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=1000)


def features(prefill=(), decode=()) -> StepFeatures:
    """prefill: (cached c, new q) per chunk; decode: computed tokens per sequence."""
    return StepFeatures(
        num_prefill_tokens=sum(q for _, q in prefill), num_prefill_seqs=len(prefill),
        prefill_attn_pairs=sum(q * c + q * (q + 1) // 2 for c, q in prefill),
        prefill_context_tokens=sum(c + q for c, q in prefill),
        num_decode_seqs=len(decode), decode_context_tokens=sum(c + 1 for c in decode))


def calibration_grid() -> list[StepFeatures]:
    """Steps like a calibration run's: prefill chunks, decode batches, and mixes of both."""
    steps = [features(prefill=[(c, q)]) for q in (16, 64, 256, 1024, 4096, 8192) for c in (0, 1024, 8192)]
    for n in (1, 4, 16, 64, 128, 256):
        for ctx in (128, 1024, 4096):
            steps.append(features(decode=[ctx] * n))
            steps += [features(prefill=[(0, q)], decode=[ctx] * n) for q in (128, 1024)]
    return steps


def frame(steps: list[StepFeatures], duration) -> pd.DataFrame:
    rows = [{name: getattr(f, name) for name in StepFeatures.__slots__} for f in steps]
    df = pd.DataFrame(rows)
    df["duration_s"] = [duration(f) for f in steps]
    return df


@pytest.fixture(scope="module")
def roofline() -> RooflineCostModel:
    return make_cost_model("roofline", CONFIG)


@pytest.fixture(scope="module")
def profile(roofline) -> ProfileCostModel:
    return fit_profile(frame(calibration_grid(), roofline.step_time), "llama-3-8b", "h200")[0]


# ---- features ---------------------------------------------------------------------------
def test_features_from_plan_count_causal_pairs_and_context():
    def sched(c, q, decode):
        return ScheduledRequest(Request("r", 0.0, 100, 10), c, q, decode)

    plan = StepPlan(0, scheduled=[sched(0, 4, False), sched(10, 3, False), sched(7, 1, True), sched(20, 1, True)],
                    blocks_to_swap_out=[(1, 2)], blocks_to_swap_in=[(3, 4), (5, 6)], blocks_to_copy=[(7, 8)])
    f = StepFeatures.from_plan(plan)
    # chunk 1: 4 new tokens, nothing cached: 1+2+3+4 = 10 pairs; chunk 2: 3 after 10: 3*10 + 1+2+3 = 36.
    assert (f.num_prefill_tokens, f.num_prefill_seqs, f.prefill_attn_pairs, f.prefill_context_tokens) == (7, 2, 46, 17)
    # decodes read their computed tokens and the new one: 8 + 21.
    assert (f.num_decode_seqs, f.decode_context_tokens) == (2, 29)
    assert (f.num_swap_out_blocks, f.num_swap_in_blocks, f.num_copy_blocks) == (1, 2, 1)


# ---- roofline ---------------------------------------------------------------------------
def test_roofline_batch1_decode_of_llama3_8b_on_h200_is_weight_bandwidth_bound(roofline):
    # Llama-3-8B: 8.03e9 parameters x 2 bytes = 16.06e9 bytes of weights; an H200 streams 4.8e12 B/s,
    # so reading them once takes 16.06e9 / 4.8e12 = 3.35 ms: the floor of a batch-1 decode step.
    ideal = CONFIG.model_spec.weight_bytes / CONFIG.gpu_spec.hbm_bandwidth
    assert ideal == pytest.approx(3.346e-3, rel=1e-3)
    # The model reads every matrix but the 128256 x 4096 embedding table (1.05e9 B, only gathered):
    # 15.01e9 B at 4.8e12 x 0.9 = 4.32e12 B/s -> 3.474 ms. K/V of 128 cached + 1 new token, read and
    # the new one written: 130 x 131072 B = 17 MB -> 4 us. Compute: 14.0e9 + 1.05e9 (LM head) FLOPs at
    # 989e12 x 0.7 -> 22 us, under the 3.474 ms of weight reads. Plus the 0.2 ms step overhead: 3.68 ms.
    t = roofline.step_time(features(decode=[128]))
    assert t == pytest.approx(3.474e-3 + 4e-6 + 0.2e-3, rel=2e-3)
    assert abs(t / ideal - 1) < 0.2, f"batch-1 decode {t * 1e3:.2f} ms is not within 20% of {ideal * 1e3:.2f} ms"


def test_roofline_large_prefill_is_compute_bound(roofline):
    # 8192 new tokens: 8192 x 14.0e9 dense FLOPs + 1.05e9 (one LM head row) + 33.6e6 causal pairs x
    # 524288 FLOPs = 1.32e14 FLOPs at 6.92e14 FLOP/s = 191 ms; the weights alone would take 3.5 ms.
    t = roofline.step_time(features(prefill=[(0, 8192)]))
    assert 0.18 < t < 0.2, f"a 8192-token prefill takes {t * 1e3:.0f} ms, expected ~191 ms (compute-bound)"


def test_roofline_swaps_and_copies_cost_their_bytes_over_the_links(roofline):
    block = CONFIG.block_bytes  # 16 tokens x 131072 B = 2 MiB
    f = StepFeatures(num_swap_out_blocks=3, num_swap_in_blocks=1, num_copy_blocks=2)
    expected = 4 * block / (64e9 * 0.75) + 2 * 2 * block / (4.8e12 * 0.9) + 0.2e-3
    assert roofline.step_time(f) == pytest.approx(expected, rel=1e-12)
    assert roofline.step_time(StepFeatures()) == 0.0


def test_roofline_mixed_step_pays_attention_and_matmuls_one_after_the_other(roofline):
    # 128 decodes at 4k context stream 128 x 4097 x 131072 B = 68.7 GB of K/V: 15.9 ms at 4.32e12 B/s.
    # They run in their own kernels, so they add to the 1024-token prefill's ~22 ms of matmuls instead
    # of hiding under them (one max over the whole step would give ~24 ms for both).
    prefill, decode = [(0, 1024)], [4096] * 128
    kv_stream = 128 * 4097 * CONFIG.model_spec.kv_bytes_per_token / (4.8e12 * 0.9)
    mixed = roofline.step_time(features(prefill=prefill, decode=decode))
    assert mixed >= roofline.step_time(features(prefill=prefill)) + kv_stream
    assert mixed == pytest.approx(39.6e-3, rel=0.01)


# ---- properties shared by both models ---------------------------------------------------------
counts = st.integers(0, 5000)
feature_values = st.fixed_dictionaries({name: counts for name in StepFeatures.__slots__})


@pytest.mark.parametrize("which", ["roofline", "profile"])
@settings(max_examples=200, deadline=None)
@given(base=feature_values, more=feature_values)
def test_more_work_is_never_cheaper(request, which, base, more):
    model = request.getfixturevalue(which)
    bigger = {k: base[k] + more[k] for k in base}
    bigger["prefill_attn_pairs"] += more["num_prefill_tokens"] ** 2  # pairs grow fastest
    t0, t1 = model.step_time(StepFeatures(**base)), model.step_time(StepFeatures(**bigger))
    assert t1 >= t0, f"{which}: {bigger} costs {t1} s, less than {base} at {t0} s"


@pytest.mark.parametrize("which", ["roofline", "profile"])
@pytest.mark.parametrize("num_seqs, context_start, k", [(1, 0, 1), (1, 100, 50), (37, 12345, 300), (256, 10**6, 700),
                                                        (0, 0, 5)])
def test_decode_run_times_equal_step_by_step(request, which, num_seqs, context_start, k):
    model = request.getfixturevalue(which)
    run = model.decode_run_times(num_seqs, context_start, k)
    one_by_one = [model.step_time(StepFeatures(num_decode_seqs=num_seqs, decode_context_tokens=context_start + num_seqs * (j + 1)))
                  for j in range(k)]
    assert isinstance(run, np.ndarray) and run.shape == (k,)
    np.testing.assert_allclose(run, one_by_one, rtol=1e-12, atol=0, err_msg=f"{which}: vectorised decode run differs")


# ---- profile: fitting ------------------------------------------------------------------------
def test_fit_recovers_a_known_linear_model():
    truth = {"intercept": 4e-3, "prefill_step": 3e-4, "num_prefill_tokens": 2e-6, "num_decode_seqs": 5e-6,
             "decode_context_tokens": 3e-8, "prefill_attn_pairs": 8e-10, "tokens_over_knee": 2e-5}
    knee = 256  # one of the fitter's candidate knees
    known = ProfileCostModel("llama-3-8b", "h200", {**truth, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0}, knee)
    rng = np.random.default_rng(1)
    steps = calibration_grid() * 3
    noisy = frame(steps, known.step_time)
    noisy["duration_s"] *= 1 + 0.01 * rng.standard_normal(len(noisy))  # 1% timing noise
    fitted, report = fit_profile(noisy, "llama-3-8b", "h200")
    assert report["knee_tokens"] == knee
    for name, value in truth.items():
        assert fitted.coefficients[name] == pytest.approx(value, rel=0.1), f"{name}: fitted {fitted.coefficients[name]:.3g}, true {value:.3g}"
    assert report["mape"] < 0.015 and report["n_test"] == round(len(steps) * 0.2)


def test_fit_to_the_roofline_is_close(roofline):
    _, report = fit_profile(frame(calibration_grid(), roofline.step_time), "llama-3-8b", "h200")
    assert report["mape"] < 0.03 and report["p90_ape"] < 0.05, f"linear profile misses the roofline: {report}"


def test_fit_is_deterministic_and_leaves_out_transfer_and_empty_rows(roofline):
    df = frame(calibration_grid() + [StepFeatures(num_swap_in_blocks=4), StepFeatures()], roofline.step_time)
    df.loc[len(df) - 1, "duration_s"] = 0.0  # an empty step: left out, so its zero duration is no error
    (a, ra), (b, rb) = fit_profile(df, "llama-3-8b", "h200"), fit_profile(df, "llama-3-8b", "h200")
    assert a.coefficients == b.coefficients and ra["mape"] == rb["mape"] and ra["n_left_out"] == 2


def test_fit_rejects_rows_it_cannot_use():
    with pytest.raises(UserError, match="lack column.*decode_context_tokens"):
        fit_profile(pd.DataFrame({"num_prefill_tokens": [1], "num_decode_seqs": [0], "prefill_attn_pairs": [1],
                                  "duration_s": [1e-3]}), "llama-3-8b", "h200")
    df = frame(calibration_grid(), lambda f: 1e-3)
    df.loc[3, "duration_s"] = -1.0
    with pytest.raises(UserError, match="row 3"):
        fit_profile(df, "llama-3-8b", "h200")


# ---- profile: files ------------------------------------------------------------------------
def test_profile_json_round_trip(profile, tmp_path):
    path = tmp_path / "h200.json"
    profile.to_json(path)
    d = json.loads(path.read_text())
    assert d["kind"] == "profile" and d["features"] == list(FEATURES)
    assert {"model", "gpu", "coefficients", "fit", "created"} <= d.keys() and {"mape", "n_train", "n_test"} <= d["fit"].keys()
    loaded = make_cost_model(str(path), CONFIG)
    assert loaded.coefficients == profile.coefficients and loaded.knee_tokens == profile.knee_tokens
    for f in calibration_grid()[::7] + [StepFeatures(num_swap_out_blocks=2, num_copy_blocks=1)]:
        assert loaded.step_time(f) == profile.step_time(f)
    assert loaded.describe()["kind"] == "profile" and loaded.describe()["source"] == str(path)


def _write(tmp_path, text: str):
    path = tmp_path / "profile.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("coefficients"), "missing key.*coefficients"),
    (lambda d: d.update(kind="roofline"), "'kind' is 'roofline'"),
    (lambda d: d["coefficients"].update(intercept="fast"), r"coefficients\['intercept'\] is 'fast'"),
    (lambda d: d["coefficients"].pop("swap_s_per_byte"), r"coefficients\['swap_s_per_byte'\]"),
    (lambda d: d["features"].append("moon_phase"), "unknown feature.*moon_phase"),
    (lambda d: d.update(model="gpt-5"), "unknown model 'gpt-5'"),
    (lambda d: d.update(knee_tokens=-3), "knee_tokens"),
])
def test_bad_profile_files_are_named_in_the_error(profile, tmp_path, mutate, message):
    path = tmp_path / "good.json"
    profile.to_json(path)
    d = json.loads(path.read_text())
    mutate(d)
    bad = _write(tmp_path, json.dumps(d))
    with pytest.raises(UserError, match=message) as e:
        make_cost_model(bad, CONFIG)
    assert bad in str(e.value)


def test_missing_or_non_json_profile_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such file.*'roofline'") as e:
        make_cost_model(str(tmp_path / "nope.json"), CONFIG)
    assert "nope.json" in str(e.value)
    with pytest.raises(UserError, match="not valid JSON"):
        make_cost_model(_write(tmp_path, "{'kind': profile"), CONFIG)
    with pytest.raises(UserError, match="expected a JSON object"):
        make_cost_model(_write(tmp_path, "[1, 2]"), CONFIG)


def test_profile_for_another_model_or_gpu_is_refused(profile, tmp_path):
    path = tmp_path / "h200.json"
    profile.to_json(path)
    with pytest.raises(UserError, match="fitted for llama-3-8b on h200.*llama-3-8b on h100"):
        make_cost_model(str(path), CONFIG.replace(gpu="h100"))


def test_cost_package_does_not_import_torch():
    code = "import sys, pagesim.cost; assert 'torch' not in sys.modules, 'pagesim.cost imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)
