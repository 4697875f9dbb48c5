"""pagesim.run_warnings on small cases: when each warning fires, at its boundary, and the figures it gives.

(The CLI's printing and summary.json's record of them are in tests/test_cli_hygiene.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from pagesim.config import Config
from pagesim.errors import UserError
from pagesim.run_warnings import (baseline_warnings, cluster_warnings, config_warnings, emit, profile_warnings,
                                  result_warnings, slo_warnings)
from pagesim.slo import parse_slos
from pagesim.specs import GIB


def trace(prompt_output, **columns):
    df = pd.DataFrame(prompt_output, columns=["prompt_len", "output_len"])
    for k, v in columns.items():
        df[k] = v
    return SimpleNamespace(df=df)


def requests(states, parents=None, reasons=None):
    n = len(states)
    return pd.DataFrame({"state": states, "parent_id": parents or [""] * n,
                         "reason": reasons or ["prompt of 100 tokens is too long" if s == "rejected" else ""
                                               for s in states]})


# ---- result_warnings: more than a tenth rejected -----------------------------------------------------------
def test_exactly_a_tenth_rejected_is_no_warning_one_more_is():
    assert result_warnings("paged", requests(["rejected"] + ["finished"] * 9)) == []
    (w,) = result_warnings("paged", requests(["rejected"] * 2 + ["finished"] * 8))
    assert w.startswith("paged: 2 of 10 requests (20.0%) were rejected; most often (2): prompt of 100 tokens")


def test_forked_samples_do_not_count_in_the_rejected_share():
    # 1 of 5 requests rejected (20%): a warning; the four finished requests' 40 samples do not dilute it below 10%
    states = ["rejected"] + ["finished"] * 4 + ["finished"] * 40
    parents = [""] * 5 + ["r1"] * 40
    (w,) = result_warnings("paged", requests(states, parents))
    assert "1 of 5 requests (20.0%)" in w


def test_the_most_common_kind_of_reason_is_named_with_how_many_share_it():
    reasons = ["prompt of 100 tokens is too long", "prompt of 200 tokens is too long", "needs 9 blocks, cache has 8",
               "", ""]
    (w,) = result_warnings("paged", requests(["rejected"] * 3 + ["finished"] * 2, reasons=reasons))
    assert w == ("paged: 3 of 5 requests (60.0%) were rejected; most often (2): figures differ by request; the first: "
                 "prompt of 100 tokens is too long")
    (every,) = result_warnings("max", requests(["rejected"] * 3, reasons=["needs 9 blocks, cache has 8"] * 3))
    assert every == "max: every request (3) was rejected; most often (3): needs 9 blocks, cache has 8"


# ---- config_warnings ---------------------------------------------------------------------------------------
def toy(**kw) -> Config:
    return Config(**{"model": "toy", "block_size": 4, "num_gpu_blocks": 64, **kw})


def test_outputs_cut_at_max_model_len_count_only_requests_that_run_past_it():
    # limit 100: (99, 1) ends exactly at the limit (not cut); (100, 5) is rejected (not cut: its reason says so);
    # (90, 30) and (50, 51) run past it by 20 and 1 tokens
    t = trace([(99, 1), (100, 5), (90, 30), (50, 51), (10, 10)])
    (w,) = config_warnings(toy(max_model_len=100), t)
    assert w.startswith("2 of 5 requests (40.0%) have prompt + output beyond max_model_len 100 (--max-model-len)")
    assert "(21 output tokens fewer than the trace's)" in w
    assert config_warnings(toy(max_model_len=100), trace([(99, 1), (100, 5)])) == []


def test_policy_priority_warns_only_when_the_trace_has_no_priority():
    t = trace([(10, 10)])
    (w,) = config_warnings(toy(policy="priority"), t)
    assert w.startswith("--policy priority, but the trace has no priority field")
    assert config_warnings(toy(policy="priority"), trace([(10, 10)], priority=[1])) == []
    assert config_warnings(toy(), t) == []


def test_swap_space_that_holds_no_block_warns_only_in_swap_mode():
    assert config_warnings(toy(swap_space=0.0), trace([(10, 10)])) == []  # recompute: the host pool is not used
    (w,) = config_warnings(toy(swap_space=0.0, preemption_mode="swap"), trace([(10, 10)]))
    assert w.startswith("--preemption-mode swap with --swap-space 0 GiB holds no host block")


def test_swap_space_given_without_swap_mode_warns_that_it_has_no_effect():
    """Was: --swap-space 8 without --preemption-mode swap was silently ignored."""
    (w,) = config_warnings(toy(swap_space=8.0), trace([(10, 10)]))
    assert w == ("--swap-space 8 GiB has no effect with --preemption-mode recompute: a preempted request's blocks are "
                 "freed and recomputed, never swapped (--preemption-mode swap uses it)")
    assert config_warnings(toy(), trace([(10, 10)])) == []  # the default (4 GiB), not given
    assert config_warnings(toy(swap_space=0.0), trace([(10, 10)])) == []  # none: nothing to ignore
    assert config_warnings(toy(swap_space=0.001, preemption_mode="swap"), trace([(10, 10)])) == []
    # a sweep over preemption modes: its recompute runs share the swap runs' --swap-space
    assert config_warnings(toy(swap_space=8.0), trace([(10, 10)]), swept={"preemption_mode": "recompute"}) == []


def test_a_given_cache_warns_when_it_and_the_weights_exceed_the_gpu():
    config = Config(model="llama-3-8b", gpu="h100", num_gpu_blocks=1)
    memory, weights = config.gpu_spec.memory_bytes, config.weight_bytes_per_gpu
    fits = (memory - weights) // config.block_bytes  # the most blocks that fit beside the weights
    assert config_warnings(config.replace(num_gpu_blocks=fits), trace([(10, 10)])) == []
    (w,) = config_warnings(config.replace(num_gpu_blocks=fits + 1), trace([(10, 10)]))
    assert "exceed one h100's" in w
    assert fits * config.block_bytes < memory - weights / 2, "the test needs the weights to matter"


def test_max_model_len_warns_only_beyond_the_models_window():
    window = toy().model_spec.max_position_embeddings
    assert config_warnings(toy(max_model_len=window), trace([(10, 10)])) == []
    (w,) = config_warnings(toy(max_model_len=window + 1, allow_long_max_model_len=True), trace([(10, 10)]))
    assert w.startswith(f"--max-model-len {window + 1:,} is larger than toy's window")


def test_a_token_budget_below_the_seat_count_warns_as_vllm_refuses_it():
    assert config_warnings(toy(max_num_seqs=64, max_num_batched_tokens=64), trace([(10, 10)])) == []
    (w,) = config_warnings(toy(max_num_seqs=64, max_num_batched_tokens=63), trace([(10, 10)]))
    assert w.startswith("--max-num-batched-tokens 63 is below --max-num-seqs 64, which vLLM refuses")
    assert "at most 63 of the 64 sequences can run in one step" in w


# ---- before the run: baselines and routers ---------------------------------------------------------------
def test_baseline_warning_needs_both_a_baseline_and_a_paged_only_option():
    caching = toy(enable_prefix_caching=True)
    assert baseline_warnings(caching, []) == []
    assert baseline_warnings(toy(), ["max"]) == []
    (w,) = baseline_warnings(caching, ["max", "oracle", "max"])
    assert w.startswith("--enable-prefix-caching applies to the paged run only: the contiguous baselines (max, oracle)")
    both = caching.replace(kv_offloading_size=1.0)
    assert baseline_warnings(both, ["pow2"])[0].startswith("--enable-prefix-caching and --kv-offloading-size apply")


@pytest.mark.parametrize("caching, replicas, router, warns", [
    (False, 1, "round-robin", None),
    (False, 1, "least-outstanding-tokens", "has no effect with --replicas 1"),
    (True, 1, "prefix-aware", "has no effect with --replicas 1"),
    (False, 2, "prefix-aware", "without --enable-prefix-caching"),
    (True, 2, "prefix-aware", None),
    (False, 2, "least-outstanding-tokens", None),
])
def test_router_warnings(caching, replicas, router, warns):
    out = cluster_warnings(toy(enable_prefix_caching=caching), replicas, router)
    assert (out == []) if warns is None else (len(out) == 1 and warns in out[0])


def test_emit_prints_each_warning_once_and_records_it(capsys):
    seen: list[str] = []
    emit(["a", "b"], seen)
    emit(["b", "c"], seen)
    assert seen == ["a", "b", "c"]
    assert capsys.readouterr().err == "warning: a\nwarning: b\nwarning: c\n"


def test_a_host_tier_smaller_than_a_block_is_a_warning_a_block_is_not():
    config = toy(enable_prefix_caching=True)
    small = config.replace(kv_offloading_size=0.5 * config.block_bytes / GIB)
    (w,) = config_warnings(small, trace([(10, 10)], prompt_token_ids=[[1] * 10]))
    assert "holds no host block" in w and "the host tier is off" in w
    one = config.replace(kv_offloading_size=1.0 * config.block_bytes / GIB)
    assert config_warnings(one, trace([(10, 10)], prompt_token_ids=[[1] * 10])) == []


def test_a_tpot_slo_no_request_can_be_judged_by_is_a_warning():
    """TPOT is the time between output tokens: a request of one output token has none, and a TPOT SLO holds for it
    (pagesim.slo). Where no request has two (the trace's outputs, cut at max_model_len), the SLO says nothing: it was met
    and goodput counted every finished request without a word. One request that has two is enough to judge by."""
    slos = parse_slos(["ttft_p99=1", "tpot_p99=0.05", "tpot_p50=0.02"])
    # outputs: 1; 99 + 5 cut at the limit to 1; the third rejected (its prompt reaches the limit)
    (w,) = slo_warnings(toy(max_model_len=100), trace([(10, 1), (99, 5), (100, 3)]), slos)
    assert w.startswith("--slo tpot_p99=0.05 and --slo tpot_p50=0.02: no request ")
    assert "two output tokens within max_model_len 100 (--max-model-len)" in w
    assert slo_warnings(toy(max_model_len=100), trace([(10, 1), (98, 5)]), slos) == []  # 98 + 2 fits: one TPOT
    assert slo_warnings(toy(), trace([(10, 1)]), parse_slos(["ttft_p99=1", "e2e_p90=3"])) == []  # TTFT, E2E: always


# ---- profile_warnings: a profile cost model timed at another block size --------------------------------------
PROFILE = Path(__file__).resolve().parent.parent / "results" / "profiles" / "h200-llama-3-8b.json"  # config.block_size 16


def test_a_profile_timed_at_another_block_size_is_a_warning_naming_both_and_what_to_do(tmp_path):
    """Was: a profile timed at block size 16 priced a run at --block-size 32 (or 8) without a word."""
    from pagesim.cost import make_cost_model

    at = {bs: Config(block_size=bs) for bs in (8, 16, 32)}
    assert profile_warnings(at[16], make_cost_model(str(PROFILE), at[16])) == []
    assert profile_warnings(at[32], make_cost_model("roofline", at[32])) == []
    (w,) = profile_warnings(at[32], make_cost_model(str(PROFILE), at[32]))
    assert w == (f"--cost-model {PROFILE} was timed at block size 16 (its config.block_size), but the run uses "
                 "--block-size 32: its kernel timings, measured at 16 tokens a block, are applied unchanged; calibrate "
                 "at this block size (calibrate --block-size 32) or run at the profile's (--block-size 16)")
    assert "--block-size 8:" in profile_warnings(at[8], make_cost_model(str(PROFILE), at[8]))[0]
    timed_at_32 = json.loads(PROFILE.read_text())
    timed_at_32["config"]["block_size"] = 32
    (tmp_path / "p32.json").write_text(json.dumps(timed_at_32))
    assert profile_warnings(at[32], make_cost_model(str(tmp_path / "p32.json"), at[32])) == []
    assert "timed at block size 32 (its config.block_size)" in profile_warnings(
        at[16], make_cost_model(str(tmp_path / "p32.json"), at[16]))[0]
    # a profile that records no block size (made by hand, or refitted into a new --out before round 45): taken as
    # calibrate's default
    old = {k: v for k, v in json.loads(PROFILE.read_text()).items() if k != "config"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert profile_warnings(at[16], make_cost_model(str(tmp_path / "old.json"), at[16])) == []
    (w,) = profile_warnings(at[32], make_cost_model(str(tmp_path / "old.json"), at[32]))
    assert "timed at block size 16 (it records no config.block_size: calibrate's default, 16, assumed)" in w
    bad = {**old, "config": {"block_size": "16"}}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(UserError, match=r"'config.block_size' is '16', expected a positive integer"):
        make_cost_model(str(tmp_path / "bad.json"), at[16])


def test_the_profile_block_size_warning_is_printed_and_recorded_once_for_a_replay_with_baselines(tmp_path, capsys):
    from pagesim.cli import main

    path = tmp_path / "t.jsonl"
    lines = ['{"pagesim_trace": 1, "name": "t", "hash_block_size": null}']
    lines += [json.dumps({"request_id": str(i), "arrival_time_s": 0.1 * i, "prompt_len": 200 + i, "output_len": 8})
              for i in range(6)]
    path.write_text("\n".join(lines) + "\n")
    argv = ["replay", str(path), "--cost-model", str(PROFILE), "--block-size", "32", "--baseline", "max",
            "--baseline", "oracle", "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    recorded = json.loads((tmp_path / "run" / "summary.json").read_text())["warnings"]
    (w,) = [w for w in recorded if "was timed at block size" in w]
    assert "--block-size 32" in w and err.count(f"warning: {w}") == 1 and err.count("was timed at block size") == 1
    at16 = ["replay", str(path), "--cost-model", str(PROFILE), "--baseline", "max", "--out", str(tmp_path / "at16")]
    assert main(at16) == 0  # the default --block-size 16, the profile's: no warning
    assert "was timed at block size" not in capsys.readouterr().err
    assert not [w for w in json.loads((tmp_path / "at16" / "summary.json").read_text())["warnings"] if "timed at" in w]
