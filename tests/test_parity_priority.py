"""policy="priority", as vLLM v1's: queue order, victim, the fast path, the trace field, the CLI (issue 12).

The step-by-step comparison with vLLM under priority is in tests/test_parity.py (hypothesis) and here (a
bundled trace given random priorities).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pagesim.block_pool import STORED
from pagesim.config import Config
from pagesim.cost import make_cost_model
from pagesim.errors import OptionError
from pagesim.request import Request, requests_from_trace
from pagesim.scheduler import Scheduler
from pagesim.simulator import Simulation
from pagesim.traces import load_trace
from pagesim.traces.errors import TraceError
from pagesim.traces.own_format import write_trace
from pagesim.traces.schema import trace_from_frame
from tests.conftest import REPO
from tests.test_parity import needs_vllm


def with_priorities(path, limit: int, levels: int = 4, seed: int = 0):
    """A bundled trace with a random priority 0..levels-1 per request."""
    trace = load_trace(path, limit=limit)
    df = trace.df.copy()
    df["priority"] = np.random.default_rng(seed).integers(0, levels, len(df))
    return trace_from_frame(df, trace.name, trace.hash_block_size)


def test_waiting_queue_orders_by_priority_then_arrival_then_id():
    s = Scheduler(Config(block_size=4, num_gpu_blocks=64, max_model_len=64, policy="priority"))
    for rid, t, prio in [("a", 0.0, 2), ("b", 1.0, 0), ("r10", 2.0, 1), ("r2", 2.0, 1), ("c", 0.5, 1)]:
        s.add_request(Request(rid, t, 4, 2, priority=prio))
    assert [r.request_id for r in s.waiting] == ["b", "c", "r10", "r2", "a"], \
        "lower priority value first, then earlier arrival, then request id (as strings, like vLLM's Request.__lt__)"
    fcfs = Scheduler(Config(block_size=4, num_gpu_blocks=64, max_model_len=64))
    for rid, prio in [("a", 2), ("b", 0)]:
        fcfs.add_request(Request(rid, 0.0, 4, 2, priority=prio))
    assert [r.request_id for r in fcfs.waiting] == ["a", "b"], "fcfs ignores priority"


def test_priority_preempts_the_lowest_ranked_running_request_even_one_already_scheduled():
    # Two usable blocks of 4 tokens (block 0 is the null block).
    s = Scheduler(Config(block_size=4, num_gpu_blocks=3, max_model_len=12, max_num_batched_tokens=64,
                         policy="priority"))
    s.add_request(Request("lo", 0.0, 2, 4, priority=5))
    s.finish_step(s.schedule(0.0), 0.0)  # lo: 2 prompt tokens in block 1, one sampled
    s.add_request(Request("hi", 1.0, 4, 3, priority=0))
    plan = s.schedule(1.0)
    assert [x.request_id for x in plan.scheduled] == ["lo", "hi"]
    s.finish_step(plan, 1.0)
    plan = s.schedule(2.0)  # lo decodes within its block; hi needs a new one and none is free
    assert plan.preempted == ["lo"], "victim: max (priority, arrival) among running, not the last admitted"
    assert [x.request_id for x in plan.scheduled] == ["hi"], "the victim, scheduled first this step, left the plan"
    assert plan.num_tokens == 1
    assert [r.request_id for r in s.waiting] == ["lo"] and s.waiting[0].num_computed_tokens == 0
    fcfs = Scheduler(s.config.replace(policy="fcfs"))
    fcfs.add_request(Request("lo", 0.0, 2, 4, priority=5))
    fcfs.finish_step(fcfs.schedule(0.0), 0.0)
    fcfs.add_request(Request("hi", 1.0, 4, 3, priority=0))
    fcfs.finish_step(fcfs.schedule(1.0), 1.0)
    plan = fcfs.schedule(2.0)
    assert plan.preempted == ["hi"] and [x.request_id for x in plan.scheduled] == ["lo"], \
        "fcfs: the last admitted request preempts itself"


def test_config_refuses_an_unknown_policy():
    with pytest.raises(OptionError, match="policy must be one of"):
        Config(policy="lifo")


@pytest.mark.parametrize("overrides", [dict(num_gpu_blocks=600, enable_prefix_caching=True),
                                       dict(num_gpu_blocks=600, preemption_mode="swap", swap_space=0.05)],
                         ids=["pressure-prefix", "pressure-swap"])
def test_fast_path_stays_exact_under_priority(overrides):
    """The fast path reads the waiting head as queue[0], which is the priority head; no victim is ever
    chosen inside a decode run (every allocation succeeds), so runs equal step-by-step simulation."""
    trace = with_priorities(REPO / "traces" / "sharegpt-poisson-1k.jsonl", 300)
    cfg = Config(model="llama-3-8b", gpu="h200", max_model_len=8192, policy="priority", **overrides)
    results = []
    for fast in (False, True):
        sim = Simulation(requests_from_trace(trace), cfg, make_cost_model("roofline", cfg), fast_path=fast,
                         record_events=True)
        results.append((sim.run(), [e for e in sim.scheduler.kv.events if e[0] != STORED]))
    (slow, slow_events), (fast, fast_events) = results
    assert fast.num_steps == slow.num_steps and fast_events == slow_events
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=False, rtol=1e-9, atol=1e-9)
    assert fast.extra["fast_path_steps"] > fast.num_steps / 4, "the fast path was hardly taken: the test proves nothing"
    assert slow.requests["num_preemptions"].sum() > 0, "no memory pressure: the victim rule was not exercised"


def test_trace_priority_field_is_read_and_a_bad_one_is_named(tmp_path):
    good = tmp_path / "p.jsonl"
    good.write_text('{"pagesim_trace": 1}\n'
                    '{"request_id": "a", "arrival_time_s": 0, "prompt_len": 4, "output_len": 2, "priority": -3}\n'
                    '{"request_id": "b", "arrival_time_s": 1, "prompt_len": 4, "output_len": 2, "priority": 7}\n')
    assert [r.priority for r in requests_from_trace(load_trace(good))] == [-3, 7]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"pagesim_trace": 1}\n'
                   '{"request_id": "a", "arrival_time_s": 0, "prompt_len": 4, "output_len": 2, "priority": 1}\n'
                   '{"request_id": "b", "arrival_time_s": 1, "prompt_len": 4, "output_len": 2, "priority": "high"}\n')
    with pytest.raises(TraceError) as err:
        load_trace(bad)
    assert "bad.jsonl" in str(err.value) and "line 3" in str(err.value) and "priority" in str(err.value)


def test_replay_cli_takes_policy_priority(tmp_path):
    from pagesim.cli import main

    path = tmp_path / "prio.jsonl"
    write_trace(with_priorities(REPO / "traces" / "sharegpt-poisson-1k.jsonl", 40), path)
    rc = main(["replay", str(path), "--policy", "priority", "--num-gpu-blocks", "300", "--max-model-len", "2048",
               "--out", str(tmp_path / "run")])
    assert rc == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["config"]["policy"] == "priority", "the run records its policy"


@needs_vllm
def test_bundled_trace_with_priorities_matches_vllm_step_by_step(tmp_path):
    from pagesim.cli import main

    path = tmp_path / "prio.jsonl"
    write_trace(with_priorities(REPO / "traces" / "sharegpt-bursty-1k.jsonl", 80), path)
    rc = main(["parity", str(path), "--policy", "priority", "--num-gpu-blocks", "200", "--max-model-len", "2048",
               "--max-num-batched-tokens", "512", "--out", str(tmp_path / "p")])
    report = json.loads((tmp_path / "p" / "parity.json").read_text())
    assert rc == 0 and report["n_steps_differing"] == 0, f"differs from vLLM: {report['first_difference']}"
    assert report["config"]["policy"] == "priority" and report["num_preemptions"] > 0


def test_synth_priority_levels_add_a_priority_column_and_change_nothing_else():
    from pagesim.traces.synth import synthesize

    with_prio = synthesize("kshot", num_requests=200, rate=10, seed=3, priority_levels=3).df
    without = synthesize("kshot", num_requests=200, rate=10, seed=3).df
    assert set(with_prio["priority"]) == {0, 1, 2}
    pd.testing.assert_frame_equal(with_prio.drop(columns="priority"), without)
    with pytest.raises(OptionError, match="priority_levels"):
        synthesize("sharegpt", num_requests=5, rate=1, priority_levels=-1)
