"""The GPU executor end to end on a GPU: Llama-3-8B shapes (2 layers, full vocabulary), bf16, CUDA graphs.

The scenarios of tests/test_executor.py at block size 16, a mixed load that exercises them all at
once (chunked prefill, shared prefixes, parallel sampling, swap and recompute preemption, decode
graphs), CUDA-graph decode against eager decode, and KV-cache sizing from the device's free memory.
Tolerances are bf16's: a generated token may sit a little below the reference's top logit
(near ties), and the last-step logits must match the reference's closely (cosine >= 0.99; a wrong
or missing K/V drops it far below). Skipped without CUDA.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from engine.executor import GPUExecutor, config_for_device, kv_block_bytes
from engine.model import LlamaModel
from pagesim.config import Config
from pagesim.cost.graphs import mixed_graph_token_sizes
from pagesim.request import Request
from pagesim.scheduler import StepPlan
from pagesim.specs import GIB, get_model
from tests.test_executor import (
    assert_greedy_matches_reference,
    check_consecutive_tables,
    chunked_scenario,
    contiguous_scenario,
    fork_scenario,
    mixed_config,
    mixed_load,
    mixed_load_stats,
    prefix_hit_scenario,
    preemption_scenario,
    random_cache_bits,
    run_to_completion,
)

pytestmark = pytest.mark.gpu
DEV = "cuda"
BF16 = torch.bfloat16
BS = 16
NAME = "llama-3-8b"  # the Config's model; the executor runs the 2-layer model below
TOL = dict(margin=0.5, logits_atol=1.0, min_cos=0.99)


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    spec = dataclasses.replace(get_model(NAME), num_layers=2)
    return LlamaModel.random(spec, device=DEV, dtype=BF16, seed=7)


SCENARIOS = {
    "prefix_token_ids": lambda v: prefix_hit_scenario(NAME, BS, v, "token_ids"),
    "prefix_hash_ids": lambda v: prefix_hit_scenario(NAME, BS, v, "hash_ids"),
    "chunked": lambda v: chunked_scenario(NAME, BS, v),
    "recompute": lambda v: preemption_scenario(NAME, BS, v, "recompute"),
    "swap": lambda v: preemption_scenario(NAME, BS, v, "swap"),
    "fork": lambda v: fork_scenario(NAME, BS, v),
    "contiguous": lambda v: contiguous_scenario(NAME, BS, v),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenarios_match_greedy_reference_bf16(model, name):
    cfg, reqs, arrive = SCENARIOS[name](model.spec.vocab_size)
    run = run_to_completion(cfg, model, reqs, arrive, check=check_consecutive_tables if name == "contiguous" else None)
    if name.startswith("prefix"):
        assert reqs[1].num_prefix_hit_tokens == 2 * BS
    if name in ("recompute", "swap"):
        assert run.scheduler.num_preemptions >= 1
    if name == "fork":
        assert run.executor.tokens_of("F#1") == run.executor.tokens_of("F")
    worst = assert_greedy_matches_reference(run, **TOL)
    print(f"{name}: {len(run.plans)} steps, {run.executor.num_graph_steps} from graphs, worst {worst}")


def test_mixed_load_matches_greedy_reference(model):
    # 24 requests of 16..700 prompt tokens, 140 blocks of 16 and 24 CPU blocks: 6 preemptions, 2 of them recomputes.
    cfg = mixed_config(NAME, BS, num_gpu_blocks=140, cpu_blocks=24, max_num_batched_tokens=512, max_model_len=2048)
    reqs, arrive = mixed_load(model.spec.vocab_size, BS, num=24, max_prompt=700, max_output=40, system_len=256)
    run = run_to_completion(cfg, model, reqs, arrive, max_steps=2000)
    stats = mixed_load_stats(run, reqs)
    assert stats["graph_steps"] > 0, stats
    worst = assert_greedy_matches_reference(run, **TOL)
    stats["step_ms_median"] = 1e3 * float(np.median(run.durations))
    print(f"mixed load: {stats}; worst {worst}")


def test_cuda_graph_decode_equals_eager_decode(model):
    cfg = Config(model=NAME, block_size=BS, max_model_len=1024, max_num_seqs=16, max_num_batched_tokens=2048,
                 num_gpu_blocks=256)
    shapes = [(5, 24), (17, 10), (100, 17), (333, 24), (64, 3), (250, 12), (31, 20)]  # 7 -> padded to 8, then fewer

    def requests():
        return [Request(f"g{i}", 0, p, o, seq_no=i) for i, (p, o) in enumerate(shapes)]

    graphs = run_to_completion(cfg, model, requests(), cuda_graphs=True)
    eager = run_to_completion(cfg, model, requests(), cuda_graphs=False)
    assert graphs.executor.num_graph_steps > 0 and eager.executor.num_graph_steps == 0
    bitwise = True
    for r in graphs.scheduler.finished:
        rid = r.request_id
        assert graphs.executor.tokens_of(rid) == eager.executor.tokens_of(rid), f"{rid}: graph and eager tokens differ"
        a, b = graphs.executor.last_logits[rid], eager.executor.last_logits[rid]
        assert torch.allclose(a, b, atol=1e-2, rtol=0), f"{rid}: graph and eager logits differ by {(a - b).abs().max()}"
        bitwise &= torch.equal(a, b)
    decode_ms = {name: 1e3 * float(np.median([d for p, d in zip(run.plans, run.durations) if not p.num_prefill_tokens]))
                 for name, run in (("graph", graphs), ("eager", eager))}
    print(f"graph vs eager decode: logits bitwise equal: {bitwise}; median decode step ms {decode_ms}")


# (max_model_len, max_num_batched_tokens, KV blocks, prompt and output lengths): small buckets, and the buckets above
# 1024 tokens (1152..4096, round 14) with prompts that land in them whole or chunked
MIXED_CASES = {"small": (1024, 256, 256, [(5, 12), (17, 10), (100, 17), (333, 8), (64, 3), (250, 12), (31, 20), (700, 4)]),
               "large": (8192, 4096, 1024, [(40, 12), (1100, 10), (1500, 17), (2500, 8), (3900, 6), (4500, 4), (300, 9)])}


@pytest.mark.parametrize("case", list(MIXED_CASES))
def test_cuda_graph_mixed_steps_equal_eager_mixed_steps(model, case):
    """Prefill and mixed steps replayed from the piecewise graphs (padded to a token bucket) give the tokens and
    logits of the same padded pieces run eagerly, and greedy decoding like the exact-size eager path."""
    max_model_len, budget, blocks, shapes = MIXED_CASES[case]
    cfg = Config(model=NAME, block_size=BS, max_model_len=max_model_len, max_num_seqs=16, max_num_batched_tokens=budget,
                 num_gpu_blocks=blocks, enable_prefix_caching=True)

    def requests():
        return [Request(f"m{i}", 0, p, o, seq_no=i) for i, (p, o) in enumerate(shapes)]

    arrive = {f"m{i}": 3 * i for i in range(len(shapes))}  # arrivals into running decodes: mixed steps
    graphs = run_to_completion(cfg, model, requests(), arrive)
    padded = run_to_completion(cfg, model, requests(), arrive, cuda_graphs=False)
    exact = run_to_completion(cfg, model, requests(), arrive, mixed_graphs=False)
    ex = graphs.executor
    assert ex.mixed_sizes == mixed_graph_token_sizes(budget) and sorted(ex.mixed_graphs) == list(ex.mixed_sizes)
    assert ex.num_mixed_graph_steps > 0 and ex.num_mixed_graph_steps == padded.executor.num_mixed_padded_steps
    assert sum(1 for p in graphs.plans if p.num_prefill_tokens and p.num_decode_tokens) > 3
    if case == "large":  # steps in the buckets above 1024 tokens
        assert sum(1024 < p.num_prefill_tokens + p.num_decode_tokens <= budget for p in graphs.plans) >= 4
    for r in graphs.scheduler.finished:
        rid = r.request_id
        assert ex.tokens_of(rid) == padded.executor.tokens_of(rid), f"{rid}: graph and eager tokens differ"
        a, b = ex.last_logits[rid], padded.executor.last_logits[rid]
        assert torch.allclose(a, b, atol=1e-2, rtol=0), f"{rid}: graph and eager logits differ by {(a - b).abs().max()}"
    worst = {name: assert_greedy_matches_reference(run, **TOL) for name, run in (("graph", graphs), ("exact", exact))}
    same = sum(ex.tokens_of(r.request_id) == exact.executor.tokens_of(r.request_id) for r in graphs.scheduler.finished)
    print(f"graph mixed vs exact eager: {same}/{len(graphs.scheduler.finished)} requests with identical tokens; {worst}")


def test_swap_round_trip_is_bit_exact_with_pinned_memory(model):
    cfg = Config(model=NAME, block_size=BS, max_model_len=1024, max_num_seqs=4, num_gpu_blocks=64,
                 preemption_mode="swap", swap_space=8.5 * get_model(NAME).kv_bytes_per_block(BS) / GIB)
    ex = GPUExecutor(cfg, model, cuda_graphs=False)
    assert ex.cpu_cache is not None and ex.cpu_cache.is_pinned() and ex.cpu_cache.shape[0] == 8
    random_cache_bits(ex.kv_cache, 0)
    original = ex.kv_cache[:, :, [3, 40, 7]].clone()
    ex.execute(StepPlan(0, blocks_to_copy=[(3, 41)], blocks_to_swap_out=[(41, 5), (40, 0), (7, 7)]))
    ex.kv_cache[:, :, [3, 40, 7, 41]] = 0
    ex.execute(StepPlan(1, blocks_to_swap_in=[(5, 10), (0, 11), (7, 12)]))
    assert torch.equal(ex.kv_cache[:, :, [10, 11, 12]].view(torch.int16), original.view(torch.int16)), (
        "copy + swap out + swap in changed the blocks' bits")
    assert ex.last_gpu_time_s is not None and ex.last_gpu_time_s > 0
    # the moves' share of the device time: all of it in a step of moves only; none in a step without moves
    assert 0 < ex.last_move_gpu_time_s <= ex.last_gpu_time_s
    # the swap-in path the executor timed at start on its own swap cache (engine.kernels.swap), both ways bit-exact
    assert ex.describe()["swap_in_by"] in ("kernel", "copies")
    assert ex.describe()["num_cpu_blocks"] == 8
    ex.swap_in_by = "kernel" if ex.swap_in_by_copies else "copies"  # the other path
    ex.kv_cache[:, :, [10, 11, 12]] = 0
    ex.execute(StepPlan(2, blocks_to_swap_in=[(5, 10), (0, 11), (7, 12)]))
    assert torch.equal(ex.kv_cache[:, :, [10, 11, 12]].view(torch.int16), original.view(torch.int16))


def test_executor_builds_its_model_and_times_steps():
    cfg = Config(model="toy", block_size=BS, max_model_len=256, max_num_seqs=4, num_gpu_blocks=32)
    run = run_to_completion(cfg, None, [Request("t0", 0, 40, 6), Request("t1", 0, 9, 6, seq_no=1)])
    ex = run.executor
    assert ex.model.dtype == BF16 and ex.model.device.type == "cuda" and ex.num_graph_steps > 0
    assert all(len(ex.tokens_of(r.request_id)) == r.prompt_len + r.output_len for r in run.scheduler.finished)
    assert 0 < ex.last_gpu_time_s <= run.durations[-1], "device time must lie within the step's wall time"
    assert ex.last_move_gpu_time_s == 0.0, "a run without block moves has none to time"
    assert 0 < ex.last_queue_host_s < run.durations[-1], "the host's queueing lies within the step's wall time"


def test_kv_blocks_sized_from_free_device_memory(model):
    cfg = Config(model=NAME, block_size=BS, gpu_memory_utilization=0.5)
    resolved = config_for_device(cfg, model)
    free, total = torch.cuda.mem_get_info()
    block = kv_block_bytes(model.spec, BS, model.dtype)
    assert 0 < resolved.num_gpu_blocks and resolved.num_gpu_blocks * block <= 0.5 * free
    assert resolved.resolved_num_gpu_blocks == resolved.num_gpu_blocks
    print(f"{resolved.num_gpu_blocks} blocks of {block} bytes from {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB")


def test_after_warm_up_a_run_builds_no_kernel_variant_and_captures_no_graph(model):
    """Prompts of every size arriving into running batches: mixed steps with 1..60 decodes, chunked
    prefills, decode-only steps; after live's warm-up none of them may build a Triton variant."""
    from engine.compile_counter import CompileCounter
    from engine.live import warm_up
    from pagesim.cost.features import StepFeatures
    from pagesim.loop import run_step
    from pagesim.recorder import Recorder
    from pagesim.scheduler import Scheduler

    cfg = Config(model=NAME, block_size=BS, max_model_len=2048, max_num_seqs=64, max_num_batched_tokens=512,
                 num_gpu_blocks=1200)
    ex = GPUExecutor(cfg, model)
    record = warm_up(ex, cfg)
    captures = ex.num_graph_captures
    rng = np.random.default_rng(5)
    reqs = [Request(f"w{i}", 0.0, int(rng.integers(3, 900)), int(rng.integers(2, 60)), seq_no=i) for i in range(64)]
    sched = Scheduler(cfg)
    rec = Recorder(sched, StepFeatures.from_plan)
    with CompileCounter() as compiles:
        for step in range(2000):
            while reqs and step >= 2 * int(reqs[0].request_id[1:]):
                sched.add_request(reqs.pop(0))
            if not reqs and not sched.has_work():
                break
            plan, _, outcome = run_step(sched, ex, rec, float(step))
            for r in outcome.finished:
                ex.release(r.request_id)
    assert compiles.count is not None, "this Triton has no jit_post_compile_hook: cannot count"
    assert compiles.count == 0, f"{compiles.count} kernel variants built after warm-up: {sorted(set(compiles.kernels))}"
    assert ex.num_graph_captures == captures
    assert len(sched.finished) == 64
    steps = rec.steps_frame()
    mixed = steps[(steps["num_prefill_tokens"] > 0) & (steps["num_decode_seqs"] > 0)]
    assert mixed["num_decode_seqs"].nunique() >= 10, "the load should mix prefills with many decode batch sizes"
    print(f"warm-up {record}; {len(steps)} steps, {len(mixed)} mixed with {mixed['num_decode_seqs'].nunique()} decode sizes")


def test_after_warm_up_swaps_and_host_tier_loads_of_any_count_build_no_kernel_variant(model):
    """Round 10's swap window compiled the swap kernel 4 times inside the run (its first swap-out and swap-in, then
    again at the first odd block count: the two id rows' pointer alignment picked a variant) and the host-tier
    window twice: 57-84 ms steps. After warm-up, swaps and host-tier loads of 1, 2, 3 and 5 blocks build nothing."""
    from engine.compile_counter import CompileCounter
    from engine.kernels.swap import swap_in, swap_out
    from engine.live import warm_up
    from pagesim.specs import GIB

    block = Config(model=NAME, block_size=BS).block_bytes / GIB
    cfg = Config(model=NAME, block_size=BS, max_model_len=2048, max_num_seqs=16, max_num_batched_tokens=512,
                 num_gpu_blocks=300, preemption_mode="swap", swap_space=16 * block, enable_prefix_caching=True,
                 kv_offloading_size=16 * block)
    ex = GPUExecutor(cfg, model)
    record = warm_up(ex, cfg)
    assert record["warmup_transfer_round_trips"] == 2
    with CompileCounter() as compiles:
        for n in (1, 2, 3, 5):
            pairs = torch.tensor([[10 + i, i] for i in range(n)], dtype=torch.int64)
            swap_out(ex.kv_cache, ex.cpu_cache, pairs)
            swap_in(ex.cpu_cache, ex.kv_cache, pairs.flip(1))
            ex.host_tier.store(ex.kv_cache, [(20 + i, i) for i in range(n)])
            ex.host_tier.load(ex.kv_cache, [(i, 30 + i) for i in range(n)])
        torch.cuda.synchronize()
    assert compiles.count == 0, f"{compiles.count} kernel variants built after warm-up: {sorted(set(compiles.kernels))}"
