"""Capacity planning: tensor parallelism in the memory math and the cost model, and how plan chooses."""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.config import Config
from pagesim.cost import RooflineCostModel
from pagesim.cost.features import StepFeatures
from pagesim.errors import UserError
from pagesim.plan import choose, deployments, pareto, skip_lines
from pagesim.specs import GIB


def test_tensor_parallelism_splits_weights_and_kv_heads_per_gpu():
    one, four = Config(model="llama-3-8b"), Config(model="llama-3-8b", tensor_parallel_size=4)
    assert four.weight_bytes_per_gpu == pytest.approx(one.weight_bytes_per_gpu / 4, rel=1e-6)
    assert four.block_bytes == one.block_bytes // 4  # 8 KV heads: 2 per GPU
    budget = lambda c: c.gpu_spec.memory_bytes * 0.9 - c.weight_bytes_per_gpu  # noqa: E731
    assert four.resolved_num_gpu_blocks == int(budget(four) // four.block_bytes)
    assert four.resolved_num_gpu_blocks > 4 * one.resolved_num_gpu_blocks  # more room and smaller blocks


def test_more_gpus_than_kv_heads_replicate_them():
    # Llama-3-70B has 8 KV heads: at TP 16 each GPU keeps one (a copy), not half of one.
    m = Config(model="llama-3-70b", tensor_parallel_size=8).model_spec
    assert m.kv_heads_per_gpu(8) == 1 and m.kv_heads_per_gpu(16) == 1


def test_llama_70b_needs_two_h200s():
    with pytest.raises(UserError, match=r"131\.4 GiB of weights\) leaves no KV-cache memory on h200"):
        Config(model="llama-3-70b").resolved_num_gpu_blocks
    blocks = Config(model="llama-3-70b", tensor_parallel_size=2).resolved_num_gpu_blocks
    assert blocks * Config(model="llama-3-70b", tensor_parallel_size=2).block_bytes > 40 * GIB


@pytest.mark.parametrize("changes, message", [
    ({"tensor_parallel_size": 3}, "must divide llama-3-8b's 32 attention heads"),
    ({"tensor_parallel_size": 0}, "tensor_parallel_size must be at least 1"),
])
def test_bad_tensor_parallel_size_is_refused(changes, message):
    with pytest.raises(UserError, match=message):
        Config(**changes)


def test_tensor_parallel_step_divides_the_work_and_adds_the_all_reduces():
    decode = StepFeatures(num_decode_seqs=64, decode_context_tokens=64 * 1000, max_decode_context=1000)
    t1 = RooflineCostModel(Config(model="llama-3-70b", num_gpu_blocks=100, tensor_parallel_size=2)).step_time(decode)
    m4 = RooflineCostModel(Config(model="llama-3-70b", num_gpu_blocks=100, tensor_parallel_size=4))
    t4 = m4.step_time(decode)
    assert t4 < t1, "four GPUs decode faster than two"
    assert t4 > t1 / 2, "but not twice as fast: the all-reduces and the step overhead do not shrink"
    # The all-reduce term: 2 per layer, each of tokens * hidden * 2 bytes over NVLink.
    assert m4.allreduce_s_per_token == pytest.approx(2 * 80 * 8192 * 2 * (2 * 3 / 4) / (450e9 * 0.8))
    # decode_run_times (the fast path) agrees with step_time.
    run = m4.decode_run_times(64, 64 * 999, 1, 999)
    assert run[0] == pytest.approx(t4)


def test_deployments_fit_the_gpu_budget_and_skip_what_does_not_fit():
    base = {"model": "llama-3-70b", "gpu": "h200", "block_size": 16, "num_gpu_blocks": None,
            "gpu_memory_utilization": 0.9, "max_model_len": None, "max_num_seqs": 256, "tensor_parallel_size": 1,
            "max_num_batched_tokens": 8192, "enable_chunked_prefill": True, "enable_prefix_caching": False,
            "preemption_mode": "recompute", "swap_space": 4.0, "watermark": 0.01, "kv_cache_dtype": "auto",
            "kv_offloading_size": 0.0}
    deps, refused = deployments(base, 4, ["round-robin", "prefix-aware"])
    skipped = skip_lines(refused)
    shapes = {(d["tensor_parallel_size"], d["replicas"]) for d in deps}
    assert shapes == {(2, 1), (2, 2), (4, 1)}
    assert len(deps) == 1 + 2 + 1, "routers only vary with more than one replica"
    assert len(skipped) == 1 and skipped[0].startswith("tensor_parallel_size=1:")


def test_plan_searches_prefix_aware_routing_only_where_prefixes_are_cached():
    """Without a prefix cache prefix-aware routes as least-outstanding-tokens: its candidates were duplicates (a third
    of the multi-replica ones) and each row warned of "--router prefix-aware without --enable-prefix-caching", a flag
    the user never typed. It is searched with prefix caching (fixed or a search axis) or when --grid router= names it."""
    from pagesim.plan import SEARCH, default_routers, plan_candidates
    from pagesim.slo import parse_slos

    base = {"model": "llama-3-8b", "gpu": "h100", "block_size": 16, "num_gpu_blocks": None, "gpu_memory_utilization": 0.9,
            "max_model_len": None, "max_num_seqs": 256, "tensor_parallel_size": 1, "max_num_batched_tokens": 8192,
            "enable_chunked_prefill": True, "enable_prefix_caching": False, "preemption_mode": "recompute",
            "swap_space": 4.0, "watermark": 0.0, "kv_cache_dtype": "auto", "kv_offloading_size": 0.0,
            "cost_model": "roofline"}
    slos = parse_slos(["ttft_p99=1"])

    def routers(base, search=SEARCH, given=None):
        return {p["router"] for p in plan_candidates(base, slos, 4, dict(search), given)[1]}

    assert default_routers(base, SEARCH) == ["round-robin", "least-outstanding-tokens"]
    assert routers(base) == {"round-robin", "least-outstanding-tokens"}
    assert len(plan_candidates(base, slos, 4, dict(SEARCH))[1]) == 88, "was 120: 32 duplicates"
    every = {"round-robin", "least-outstanding-tokens", "prefix-aware"}
    assert routers({**base, "enable_prefix_caching": True}) == every
    assert routers(base, {**SEARCH, "enable_prefix_caching": [False, True]}) == every
    assert routers(base, given=["prefix-aware"]) == {"round-robin", "prefix-aware"}  # typed: searched (and warned of)


def rows(*specs):
    return pd.DataFrame([{"status": "ok", "config_id": f"c{i}", "num_gpus": g, "goodput": gp, "slo_attainment": a,
                          "slo_met": met, "tensor_parallel_size": 1, "replicas": g, "router": "round-robin",
                          "max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16}
                         for i, (g, gp, a, met) in enumerate(specs)]
                        + [{"status": "error", "config_id": "bad", "error": "UserError: x"}])


def test_plan_recommends_fewest_gpus_then_goodput_and_a_runner_up_with_fewer():
    df = rows((1, 2.0, 0.6, False), (2, 4.0, 0.99, True), (2, 4.5, 0.995, True), (3, 5.0, 1.0, True),
              (1, 1.5, 0.7, False))
    rec, runner = choose(df)
    assert (rec["config_id"], rec["num_gpus"]) == ("c2", 2)
    assert runner["config_id"] == "c4", "runner-up: the closest miss with fewer GPUs (most attainment)"
    front = pareto(df)
    assert list(front["num_gpus"]) == [1, 2, 3]
    assert list(front["slo_met"]) == [False, True, True]


def test_plan_without_a_feasible_candidate_reports_the_closest():
    rec, runner = choose(rows((1, 2.0, 0.6, False), (2, 1.0, 0.9, False)))
    assert rec is None and runner["config_id"] == "c1"


def test_plan_cli_writes_plan_json_with_every_candidate(tmp_path, capsys):
    import json
    from pathlib import Path

    from pagesim.cli import main

    trace = Path(__file__).resolve().parent.parent / "traces" / "multiturn-300.jsonl"
    rc = main(["plan", str(trace), "--limit", "40", "--slo", "ttft_p99=0.5", "--max-gpus", "2",
               "--grid", "max_num_seqs=4", "--grid", "max_num_batched_tokens=2048", "--grid", "block_size=16",
               "--grid", "router=round-robin", "--backend", "local", "--num-cpus", "1", "--out", str(tmp_path)])
    assert rc == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["evaluated"] == 3 and len(plan["candidates"]) == 3  # TP 1; 2 replicas of TP 1; TP 2
    assert {c["num_gpus"] for c in plan["candidates"]} == {1, 2}
    assert set(plan) >= {"recommendation", "runner_up", "candidates", "evaluated", "pareto"}
    out = capsys.readouterr().out
    assert ("recommendation:" in out) or ("no candidate meets" in out)


def test_plan_prints_and_records_its_candidates_warnings_once(tmp_path, capsys):
    """Was: plan printed none of the warnings replay and sweep print (here: --policy priority on a trace without
    priorities runs as fcfs), and plan.json had them only inside each candidate's row."""
    import json
    from pathlib import Path

    from pagesim.cli import main

    trace = Path(__file__).resolve().parent.parent / "traces" / "multiturn-300.jsonl"
    rc = main(["plan", str(trace), "--limit", "20", "--slo", "ttft_p99=0.5", "--max-gpus", "1", "--policy", "priority",
               "--grid", "max_num_seqs=4,8", "--grid", "max_num_batched_tokens=2048", "--grid", "block_size=16",
               "--grid", "router=round-robin", "--backend", "local", "--num-cpus", "1", "--out", str(tmp_path)])
    assert rc == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("warning")]
    assert len(lines) == 1 and lines[0].startswith("warning (2 of 2 configurations): --policy priority, but"), err
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["warnings"] == [lines[0].removeprefix("warning ")]


def test_a_search_whose_every_candidate_the_config_checks_refuse_is_an_error_before_any_work(tmp_path, capsys):
    """Was: every candidate became an error row only when it ran, after the trace was read and Ray started, and plan
    then said 'every candidate failed'. The trace here does not exist: the refusal comes before it is read."""
    from pagesim.cli import main

    rc = main(["plan", str(tmp_path / "no-such.jsonl"), "--slo", "ttft_p99=1", "--max-gpus", "2", "--grid",
               "kv_offloading_size=4", "--grid", "block_size=16", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: every configuration of the plan (max_num_seqs=128,256 max_num_batched_tokens=2048,8192 "
                          "block_size=16 kv_offloading_size=4) is refused by the config checks, so none would run: "
                          "--kv-offloading-size needs --enable-prefix-caching")
    assert not (tmp_path / "out").exists()


def test_candidates_the_config_checks_refuse_are_warned_of_once_and_recorded_in_plan_json(tmp_path, capsys):
    import json
    from pathlib import Path

    from pagesim.cli import main

    trace = Path(__file__).resolve().parent.parent / "traces" / "multiturn-300.jsonl"
    rc = main(["plan", str(trace), "--limit", "20", "--slo", "ttft_p99=1", "--max-gpus", "1", "--grid", "max_num_seqs=4",
               "--grid", "max_num_batched_tokens=2048", "--grid", "block_size=16,100000", "--backend", "local",
               "--num-cpus", "1", "--out", str(tmp_path)])
    assert rc == 0
    err = capsys.readouterr().err
    line = ("(1 of 2 configurations): refused by the config checks before the plan ran, so error rows "
            "(block_size=100000): --block-size 100,000 is larger than llama-3-8b's whole window (8,192 tokens)")
    assert err.count(line) == 1 and err.startswith(f"warning {line}"), err
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["warnings"] == [line] and plan["evaluated"] == 2 and plan["failed"] == 1
    assert {c["block_size"]: c["status"] for c in plan["candidates"]} == {16: "ok", 100000: "error"}


def test_plan_without_slo_is_a_one_line_error(tmp_path, capsys):
    from pagesim.cli import main

    assert main(["plan", "t.jsonl", "--out", str(tmp_path)]) == 2
    assert "plan needs at least one --slo" in capsys.readouterr().err


def test_rank_breaks_equal_goodput_by_attainment_then_keeps_the_search_order():
    from pagesim.plan import rank

    df = rows((2, 4.0, 0.97, True), (2, 4.0, 0.99, True), (2, 4.0, 0.99, True), (1, 9.0, 1.0, False))
    assert list(rank(df)["config_id"]) == ["c1", "c2", "c0", "c3"], "error rows are left out"
    rec, runner = choose(df)
    assert rec["config_id"] == "c1" and runner["config_id"] == "c3", "runner-up: the one with fewer GPUs"


def test_closest_candidate_is_the_most_attainment_then_goodput_then_fewest_gpus():
    # none meets the SLOs: most attainment wins over goodput; then goodput; then fewer GPUs
    rec, runner = choose(rows((1, 9.0, 0.5, False), (2, 1.0, 0.8, False), (4, 3.0, 0.8, False)))
    assert rec is None and runner["config_id"] == "c2"
    rec, runner = choose(rows((4, 3.0, 0.8, False), (2, 3.0, 0.8, False), (3, 3.0, 0.8, False)))
    assert runner["config_id"] == "c1"


def test_a_lone_feasible_candidate_with_the_fewest_gpus_has_no_runner_up():
    rec, runner = choose(rows((1, 3.0, 1.0, True), (2, 9.0, 0.9, False), (1, 8.0, 0.5, False)))
    assert rec["config_id"] == "c0" and runner is None


def test_pareto_keeps_per_gpu_count_the_best_of_the_ranked_candidates():
    front = pareto(rows((2, 4.0, 0.9, False), (1, 1.0, 0.99, True), (2, 3.0, 1.0, True), (2, 5.0, 1.0, True),
                        (1, 2.0, 0.5, False)))
    assert list(front["num_gpus"]) == [1, 2]
    assert list(front["config_id"]) == ["c1", "c3"] and list(front["goodput"]) == [1.0, 5.0]
    assert list(front["slo_met"]) == [True, True]
