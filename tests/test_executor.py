"""The GPU executor end to end: the real scheduler's plans run on the real model give greedy decoding.

Every scenario drives a pagesim Scheduler + GPUExecutor through pagesim.loop.run_step until all
requests finish, then checks each finished request against a plain full-sequence forward
(reference_forward over prompt + generated tokens, no cache): each generated token is the argmax
of the reference logits at the position before it, and the logits of the request's last step
match the reference's. On a CPU the kernels run under Triton's interpreter (toy model, fp32);
tests/gpu/test_executor_gpu.py runs the same scenarios at Llama-3-8B shapes in bf16.

The random model is made attention-sensitive (larger QKV and output projections) so that a
token whose K/V is wrong, missing or someone else's changes the logits well beyond tolerance.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch

from engine.executor import GPUExecutor, config_for_device, graph_batch_sizes
from engine.model import LlamaModel, reference_forward
from engine.tokens import prompt_token_ids, splitmix64
from pagesim.config import Config
from pagesim.cost.features import StepFeatures
from pagesim.loop import run_step
from pagesim.recorder import Recorder
from pagesim.request import Request, RequestStatus
from pagesim.scheduler import Scheduler, StepPlan
from pagesim.specs import GIB, get_model

DEV = "cuda" if torch.cuda.is_available() else "cpu"
BS = 8


def sensitive_model(spec, device, dtype, seed: int = 1, qkv_gain: float = 4.0, o_gain: float = 16.0) -> LlamaModel:
    """Random weights with sharper attention and a larger attention contribution to the residual."""
    model = LlamaModel.random(spec, device=device, dtype=dtype, seed=seed)
    for w in model.layers:
        w.qkv.mul_(qkv_gain)
        w.o_proj.mul_(o_gain)
    return model


@pytest.fixture(scope="module")
def toy_model() -> LlamaModel:
    return sensitive_model(get_model("toy"), DEV, torch.float32)


# ---- driving the loop ---------------------------------------------------------------------------
class PlanSpy:
    """An executor wrapper that checks each plan before the real executor runs it (block tables are
    live only until finish_step) and keeps the plans."""

    def __init__(self, executor: GPUExecutor, check=None):
        self.executor, self.check, self.plans = executor, check, []

    def execute(self, plan: StepPlan) -> float:
        if self.check is not None:
            self.check(plan)
        self.plans.append(plan)
        return self.executor.execute(plan)


@dataclasses.dataclass
class Run:
    scheduler: Scheduler
    executor: GPUExecutor
    plans: list[StepPlan]
    durations: list[float]


def run_to_completion(config: Config, model: LlamaModel, requests: list[Request], arrive_at: dict[str, int] = None,
                      check=None, max_steps: int = 200, **executor_kw) -> Run:
    """Run the shared loop until every request ends; request r is added before step arrive_at[r] (default 0)."""
    arrive_at = arrive_at or {}
    sched = Scheduler(config)
    ex = GPUExecutor(config, model, keep_logits=True, **executor_kw)
    spy = PlanSpy(ex, check)
    rec = Recorder(sched, StepFeatures.from_plan)
    pending = sorted(requests, key=lambda r: arrive_at.get(r.request_id, 0))
    now, durations = 0.0, []
    for step in range(max_steps):
        while pending and arrive_at.get(pending[0].request_id, 0) <= step:
            assert sched.add_request(pending.pop(0)), "scenario request rejected"
        if not pending and not sched.has_work():
            break
        plan, duration, _ = run_step(sched, spy, rec, now)
        if not plan.is_empty:
            assert duration > 0, f"step {plan.step_id} reported a duration of {duration}"
            durations.append(duration)
        now += duration
    else:
        raise AssertionError(f"requests still unfinished after {max_steps} steps")
    assert not sched.rejected, f"rejected: {[(r.request_id, r.reject_reason) for r in sched.rejected]}"
    return Run(sched, ex, spy.plans, durations)


def assert_greedy_matches_reference(run: Run, margin: float, logits_atol: float, min_cos: float = 1.0 - 1e-6):
    """Every finished request's tokens are greedy decoding by the plain full-sequence forward.

    margin: how far below the reference's top logit the engine's token may be (numerics of a
    near tie); logits_atol / min_cos: the last step's logits against the reference's.
    """
    model, ex = run.executor.model, run.executor
    finished = run.scheduler.finished
    assert finished, "no request finished"
    worst = {"requests": len(finished), "token_gap": 0.0, "logits_err": 0.0, "cos": 1.0}
    for req in finished:
        rid = req.request_id
        toks = ex.tokens_of(rid)
        assert len(toks) == req.prompt_len + req.output_len, (
            f"{rid}: the executor holds {len(toks)} tokens; expected prompt {req.prompt_len} + output {req.output_len}")
        ids = torch.tensor(toks[:-1], device=model.device)
        ref = model.compute_logits(reference_forward(model, ids))[req.prompt_len - 1:]
        generated = torch.tensor(toks[req.prompt_len:], device=model.device)
        gap = ref.max(dim=-1).values - ref.gather(1, generated[:, None])[:, 0]
        j = int(gap.argmax())
        assert gap[j] <= margin, (
            f"{rid}: generated token {j} ({int(generated[j])}) is not the greedy token of the full forward "
            f"({int(ref[j].argmax())}); its logit is {float(gap[j]):.3g} below the top")
        last = ex.last_logits[rid]
        err = (last - ref[-1]).abs().max().item()
        cos = torch.nn.functional.cosine_similarity(last, ref[-1], dim=0).item()
        assert err <= logits_atol and cos >= min_cos, (
            f"{rid}: last-step logits differ from the full forward's by {err:.3g} (cosine {cos:.6f})")
        worst["token_gap"] = max(worst["token_gap"], float(gap[j]))
        worst["logits_err"], worst["cos"] = max(worst["logits_err"], err), min(worst["cos"], cos)
    return worst


# ---- scenarios, in units of the block size (shared with the GPU tests) --------------------------
def base_config(model_name: str, bs: int, **kw) -> Config:
    kw = {"max_model_len": 8 * bs, "max_num_seqs": 8, "max_num_batched_tokens": 8 * bs, "num_gpu_blocks": 32} | kw
    return Config(model=model_name, block_size=bs, **kw)


def ids_for(seed: int, n: int, vocab: int) -> tuple[int, ...]:
    return tuple(int(x) for x in np.random.default_rng(seed).integers(0, vocab, n))


def prefix_hit_scenario(model_name, bs, vocab, content="token_ids"):
    """B shares A's first two blocks and arrives once A's prompt is in the cache."""
    cfg = base_config(model_name, bs, enable_prefix_caching=True)
    if content == "token_ids":
        a_ids = ids_for(1, 2 * bs + 4, vocab)
        b_ids = a_ids[: 2 * bs] + ids_for(2, 5, vocab)
        a = Request("A", 0, len(a_ids), 3, seq_no=0, prompt_token_ids=a_ids)
        b = Request("B", 0, len(b_ids), 3, seq_no=1, prompt_token_ids=b_ids)
    else:  # trace hash ids only, one per block
        a = Request("A", 0, 2 * bs + 4, 3, seq_no=0, prefix_hash_ids=(11, 12, 13), hash_block_size=bs)
        b = Request("B", 0, 2 * bs + 5, 3, seq_no=1, prefix_hash_ids=(11, 12, 14), hash_block_size=bs)
    return cfg, [a, b], {"B": 1}


def chunked_scenario(model_name, bs, vocab):
    cfg = base_config(model_name, bs, max_num_batched_tokens=bs)
    return cfg, [Request("C", 0, 2 * bs + 5, 3, seq_no=0)], {}


def preemption_scenario(model_name, bs, vocab, mode):
    """Two requests fill all 4 usable blocks (5 with vLLM's null block); when P0 needs a third block, P1 (two
    blocks, the last one partial) is preempted.

    A partial block matters: attention over whole blocks is blind to their order, so only a
    partial block put back in the wrong place shows in the tokens.
    """
    block_bytes = get_model(model_name).kv_bytes_per_block(bs)
    cfg = base_config(model_name, bs, num_gpu_blocks=5, preemption_mode=mode, swap_space=4.5 * block_bytes / GIB)
    return cfg, [Request("P0", 0, 2 * bs - 2, 4, seq_no=0), Request("P1", 0, bs + 3, 4, seq_no=1)], {}


def fork_scenario(model_name, bs, vocab):
    cfg = base_config(model_name, bs)
    return cfg, [Request("F", 0, bs + 5, 4, seq_no=0, n=2)], {}


def contiguous_scenario(model_name, bs, vocab):
    cfg = base_config(model_name, bs, kv_layout="contiguous", reserve_policy="max", max_model_len=3 * bs,
                      num_gpu_blocks=12)
    reqs = [Request(f"K{i}", 0, p, 3, seq_no=i) for i, p in enumerate((bs + 1, bs + 3, 2 * bs - 1))]
    return cfg, reqs, {}


def mixed_load(vocab: int, bs: int, num: int, max_prompt: int, max_output: int, system_len: int, seed: int = 3):
    """Requests of 16..max_prompt prompt tokens and 4..max_output outputs arriving every other step: a
    quarter share a system prompt (token ids), a quarter share trace hash blocks, a quarter sample n=2."""
    rng = np.random.default_rng(seed)
    system = ids_for(100, system_len, vocab)
    reqs, arrive = [], {}
    for i in range(num):
        p, o = int(rng.integers(16, max_prompt)), int(rng.integers(4, max_output))
        kind = i % 4
        if kind == 0:
            ids = system + ids_for(1000 + i, max(1, p - system_len), vocab)
            r = Request(f"m{i}", 0, len(ids), o, seq_no=i, prompt_token_ids=ids)
        elif kind == 1:
            hashes = tuple([5, 6, 7] + [10_000 + i * 100 + k for k in range(p // bs)])
            r = Request(f"m{i}", 0, p, o, seq_no=i, prefix_hash_ids=hashes, hash_block_size=bs)
        else:
            r = Request(f"m{i}", 0, p, o, seq_no=i, n=2 if kind == 2 else 1)
        reqs.append(r)
        arrive[r.request_id] = 2 * i
    return reqs, arrive


def mixed_config(model_name: str, bs: int, num_gpu_blocks: int, cpu_blocks: int, **kw) -> Config:
    block_bytes = get_model(model_name).kv_bytes_per_block(bs)
    return Config(model=model_name, block_size=bs, max_num_seqs=32, num_gpu_blocks=num_gpu_blocks,
                  enable_prefix_caching=True, preemption_mode="swap",
                  swap_space=(cpu_blocks + 0.5) * block_bytes / GIB, **kw)


def mixed_load_stats(run: Run, reqs: list[Request]) -> dict:
    """What the mixed load exercised; asserts it exercised everything it is meant to."""
    sched, plans = run.scheduler, run.plans
    assert len(sched.finished) == len(reqs) + sum(r.n - 1 for r in reqs), "every request and sample finishes"
    stats = {
        "steps": len(plans),
        "graph_steps": run.executor.num_graph_steps,
        "preemptions": sched.num_preemptions,
        "swap_out_blocks": sum(len(p.blocks_to_swap_out) for p in plans),
        "swap_in_blocks": sum(len(p.blocks_to_swap_in) for p in plans),
        "recomputed": sum(len(p.preempted) for p in plans) - sum(len(p.swapped_in) for p in plans),
        "copies": sum(len(p.blocks_to_copy) for p in plans),
        # Hits at first admission and at re-admission after a recompute preemption: both read cached K/V.
        "prefix_hit_tokens": sched.kv.prefix_cache_stats.hits + sched.kv.prefix_cache_stats.recompute_hits,
        "mixed_steps": sum(1 for p in plans if p.num_prefill_tokens and p.num_decode_tokens),
    }
    for what in ("swap_out_blocks", "recomputed", "copies", "prefix_hit_tokens", "mixed_steps"):
        assert stats[what] > 0, f"the mixed load exercised no {what}: {stats}"
    return stats


def check_consecutive_tables(plan: StepPlan) -> None:
    for s in plan.scheduled:
        ids = s.block_ids
        assert ids == list(range(ids[0], ids[0] + len(ids))), f"{s.request_id}: contiguous table is not a run: {ids}"


# ---- CPU tests ---------------------------------------------------------------------------------
# fp32 on a CPU; on a GPU the attention kernels' fp32 dots run in tf32 (about 1e-3 relative).
TOL = dict(margin=1e-5, logits_atol=1e-4) if DEV == "cpu" else dict(margin=1e-2, logits_atol=1e-2, min_cos=0.999)


@pytest.mark.parametrize("content", ["token_ids", "hash_ids"])
def test_prefix_cache_hit_reads_identical_tokens(toy_model, content):
    cfg, reqs, arrive = prefix_hit_scenario("toy", BS, toy_model.spec.vocab_size, content)
    run = run_to_completion(cfg, toy_model, reqs, arrive)
    a, b = reqs
    assert b.num_prefix_hit_tokens == 2 * BS, f"B hit {b.num_prefix_hit_tokens} cached tokens; expected {2 * BS}"
    assert run.executor.tokens_of("A")[: 2 * BS] == run.executor.tokens_of("B")[: 2 * BS]
    assert_greedy_matches_reference(run, **TOL)


def test_chunked_prefill(toy_model):
    cfg, reqs, arrive = chunked_scenario("toy", BS, toy_model.spec.vocab_size)
    run = run_to_completion(cfg, toy_model, reqs, arrive)
    chunks = [s.num_new_tokens for p in run.plans for s in p.scheduled if not s.is_decode]
    assert chunks == [BS, BS, 5], f"prefill chunks {chunks}"
    assert_greedy_matches_reference(run, **TOL)


def test_preemption_with_recompute_refeeds_generated_tokens(toy_model):
    cfg, reqs, arrive = preemption_scenario("toy", BS, toy_model.spec.vocab_size, "recompute")
    run = run_to_completion(cfg, toy_model, reqs, arrive)
    assert run.scheduler.num_preemptions >= 1, "the scenario should force a preemption"
    victim = next(r for r in reqs if r.num_preemptions)
    recomputed = [s for p in run.plans for s in p.scheduled
                  if s.request is victim and not s.is_decode and s.num_computed_tokens + s.num_new_tokens > victim.prompt_len]
    assert recomputed, "the preempted request never recomputed its generated tokens"
    assert_greedy_matches_reference(run, **TOL)


def test_preemption_with_swap_brings_blocks_back(toy_model):
    cfg, reqs, arrive = preemption_scenario("toy", BS, toy_model.spec.vocab_size, "swap")
    assert cfg.num_cpu_blocks == 4
    run = run_to_completion(cfg, toy_model, reqs, arrive)
    assert any(p.blocks_to_swap_out for p in run.plans) and any(p.blocks_to_swap_in for p in run.plans), (
        "the scenario should swap a request out and back in")
    assert_greedy_matches_reference(run, **TOL)


def test_parallel_sampling_fork_copies_the_partial_block(toy_model):
    cfg, reqs, arrive = fork_scenario("toy", BS, toy_model.spec.vocab_size)
    run = run_to_completion(cfg, toy_model, reqs, arrive)
    assert any(p.blocks_to_copy for p in run.plans), "the fork should copy the parent's partial last block"
    assert sorted(r.request_id for r in run.scheduler.finished) == ["F", "F#1"]
    assert run.executor.tokens_of("F#1") == run.executor.tokens_of("F"), "greedy samples of one prompt must agree"
    assert_greedy_matches_reference(run, **TOL)


class Advancing(PlanSpy):
    """Advances (GPUExecutor.advance) the plans of the given steps instead of computing them."""

    def __init__(self, executor: GPUExecutor, steps: set[int]):
        super().__init__(executor)
        self.steps = steps

    def execute(self, plan: StepPlan) -> float:
        self.plans.append(plan)
        return (self.executor.advance if plan.step_id in self.steps else self.executor.execute)(plan)


def test_advanced_steps_keep_the_requests_going_with_finite_noise_in_the_cache(toy_model):
    """The calibration advances steps that only build context: the requests go on as if those steps had run (a
    sampling step repeats the last token), later computed steps read the noise the cache was filled with and stay
    finite, and every request ends with its prompt and output tokens."""
    cfg, reqs, arrive = chunked_scenario("toy", BS, toy_model.spec.vocab_size)
    sched = Scheduler(cfg)
    ex = GPUExecutor(cfg, toy_model, keep_logits=True)
    ex.kv_cache.fill_(float("nan"))  # unwritten memory may hold anything
    spy = Advancing(ex, {0, 2})
    rec = Recorder(sched, StepFeatures.from_plan)
    pending = sorted(reqs, key=lambda r: arrive.get(r.request_id, 0))
    before: dict[str, list[int]] = {}
    for step in range(60):
        while pending and arrive.get(pending[0].request_id, 0) <= step:
            assert sched.add_request(pending.pop(0))
        if not pending and not sched.has_work():
            break
        before = {r.request_id: ex.tokens_of(r.request_id) for r in sched.running if r.request_id in ex._tokens}
        plan, _, _ = run_step(sched, spy, rec, 0.0)
        if plan.step_id == 2:  # an advanced step: each request that sampled repeated its last token
            sampled = [s.request_id for s in plan.scheduled if len(ex.tokens_of(s.request_id)) > len(before[s.request_id])]
            assert sampled and all(ex.tokens_of(r)[-1] == ex.tokens_of(r)[-2] for r in sampled)
    assert not pending and not sched.has_work()
    assert torch.isfinite(ex.kv_cache).all()
    for r in sched.finished:
        assert len(ex.tokens_of(r.request_id)) == r.prompt_len + r.output_len
        assert torch.isfinite(ex.last_logits[r.request_id]).all()
    assert {0, 2} <= {p.step_id for p in spy.plans if p.scheduled}


def test_contiguous_baseline_end_to_end(toy_model):
    cfg, reqs, arrive = contiguous_scenario("toy", BS, toy_model.spec.vocab_size)
    run = run_to_completion(cfg, toy_model, reqs, arrive, check=check_consecutive_tables)
    assert max(len([s for s in p.scheduled if s.is_decode]) for p in run.plans) == 3  # a padded decode batch
    assert_greedy_matches_reference(run, **TOL)


def test_block_table_rows_hold_only_the_blocks_the_step_reaches(toy_model):
    """A contiguous reservation holds max_model_len's blocks ahead; a step's table row gets only the blocks its
    tokens reach (the kernels read no further), the rest of the row stays zero, as a paged request's would."""
    from types import SimpleNamespace

    from engine.executor import _Tokens

    cfg, _, _ = contiguous_scenario("toy", BS, toy_model.spec.vocab_size)
    ex = GPUExecutor(cfg, toy_model)
    w = ex.max_blocks_per_seq
    reserved = list(range(20, 20 + w))  # a whole reservation: every block the row could hold
    steps = [(SimpleNamespace(num_computed_tokens=c, num_new_tokens=n, request=SimpleNamespace(block_ids=reserved)),
              _Tokens(np.zeros(1, dtype=np.int64), 1, 1, 1)) for c, n in ((0, 1), (BS - 1, 1), (BS, 1), (0, BS + 1), (2 * BS, BS))]
    out = np.zeros((len(steps), w), dtype=np.int32)
    ex._table_rows(out, steps)
    for row, want in zip(out, (1, 1, 2, 2, 3)):
        assert row[:want].tolist() == reserved[:want] and not row[want:].any(), (row.tolist(), want)


def test_mixed_load_matches_greedy_reference(toy_model):
    """Everything at once: arrivals between steps, chunked and mixed steps, prefix hits, a fork, swaps and
    recomputes (8 requests, 16 blocks of 8 (15 usable beside the null block), 5 CPU blocks: 2 preemptions, one
    swapped and one recomputed when the CPU pool is full)."""
    cfg = mixed_config("toy", BS, num_gpu_blocks=16, cpu_blocks=5, max_num_batched_tokens=32, max_model_len=256)
    reqs, arrive = mixed_load(toy_model.spec.vocab_size, BS, num=8, max_prompt=64, max_output=12, system_len=24)
    run = run_to_completion(cfg, toy_model, reqs, arrive)
    mixed_load_stats(run, reqs)
    assert_greedy_matches_reference(run, **TOL)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_padded_piecewise_steps_match_exact_eager_steps(toy_model, kv_cache_dtype):
    """Prefill and mixed steps padded to a token bucket and run piece by piece (what the CUDA graphs capture; on
    the CPU the same pieces run eagerly) give the tokens and logits of the exact-size eager path: the mixed load's
    chunked prefills, prefix hits, forks, swaps and mixed batches, with a bf16-style and an fp8 cache."""
    cfg = mixed_config("toy", BS, num_gpu_blocks=16, cpu_blocks=5, max_num_batched_tokens=32, max_model_len=256,
                       kv_cache_dtype=kv_cache_dtype)
    runs = {}
    for padded in (True, False):
        reqs, arrive = mixed_load(toy_model.spec.vocab_size, BS, num=8, max_prompt=64, max_output=12, system_len=24)
        runs[padded] = run_to_completion(cfg, toy_model, reqs, arrive, mixed_graphs=padded)
        if kv_cache_dtype == "auto":  # (fp8's smaller blocks fit the CPU pool: no recompute there)
            mixed_load_stats(runs[padded], reqs)
    padded, exact = runs[True], runs[False]
    assert padded.executor.mixed_sizes == (16, 32) and exact.executor.mixed_sizes == ()
    plans = padded.plans
    sizes = {p.num_tokens for p in plans if p.num_prefill_tokens}
    assert padded.executor.num_mixed_padded_steps == sum(1 for p in plans if p.num_prefill_tokens)
    assert exact.executor.num_mixed_padded_steps == 0
    assert sizes - {16, 32}, f"every step filled its bucket exactly ({sizes}): nothing was padded"
    assert [p.num_tokens for p in plans] == [p.num_tokens for p in exact.plans]
    for r in padded.scheduler.finished:
        rid = r.request_id
        assert padded.executor.tokens_of(rid) == exact.executor.tokens_of(rid), f"{rid}: padded and exact tokens differ"
        a, b = padded.executor.last_logits[rid], exact.executor.last_logits[rid]
        assert torch.allclose(a, b, atol=1e-4, rtol=0), f"{rid}: logits differ by {(a - b).abs().max()}"


def random_cache_bits(cache: torch.Tensor, seed: int) -> None:
    """Fill a cache with random bit patterns (NaNs and infinities included): equality below is of bits."""
    as_int = cache.view({4: torch.int32, 2: torch.int16}[cache.element_size()])
    info = torch.iinfo(as_int.dtype)
    bits = torch.randint(info.min, info.max, as_int.shape, generator=torch.Generator().manual_seed(seed),
                         dtype=as_int.dtype)
    as_int.copy_(bits.to(cache.device))


def test_swapped_out_blocks_come_back_bit_exact(toy_model):
    cfg = base_config("toy", BS, preemption_mode="swap", swap_space=4.5 * get_model("toy").kv_bytes_per_block(BS) / GIB)
    ex = GPUExecutor(cfg, toy_model)
    random_cache_bits(ex.kv_cache, 0)
    original = ex.kv_cache[:, :, [3, 7]].clone()
    ex.execute(StepPlan(0, blocks_to_swap_out=[(3, 2), (7, 0)]))
    ex.kv_cache[:, :, [3, 7]] = 0
    ex.execute(StepPlan(1, blocks_to_swap_in=[(2, 9), (0, 4)]))
    back = ex.kv_cache[:, :, [9, 4]]
    assert torch.equal(back.view(torch.int32), original.view(torch.int32)), "swap out + in changed the blocks' bits"
    # summary.json's record of the swap cache: its block count (the block-major cache's first dimension), and which
    # way swap-ins go (measured on CUDA only)
    assert ex.describe()["num_cpu_blocks"] == cfg.num_cpu_blocks == 4
    assert ex.describe()["swap_in_by"] is None


def test_host_tier_loads_through_the_copy_engine_are_bit_exact(toy_model):
    """HostTier(by_copies=True) loads through a staging buffer (engine.kernels.swap._swap_in_by_copies): a store and
    a load bring the blocks back bit for bit, as the kernel's loads do."""
    from engine.host_tier import HostTier

    ex = GPUExecutor(base_config("toy", BS), toy_model)
    random_cache_bits(ex.kv_cache, 3)
    original = ex.kv_cache[:, :, [2, 5, 6]].clone()
    tier = HostTier(ex.kv_cache, 8, by_copies=True)
    tier.store(ex.kv_cache, [(2, 3), (5, 4), (6, 0)])
    tier.finish()
    ex.kv_cache[:, :, [2, 5, 6]] = 0
    tier.load(ex.kv_cache, [(3, 1), (4, 7), (0, 8)])
    assert torch.equal(ex.kv_cache[:, :, [1, 7, 8]].view(torch.int32), original.view(torch.int32))


def test_fork_copies_run_before_swap_outs(toy_model):
    """A sample forked last step is the first swap victim: its swap-out must carry the copied block."""
    cfg = base_config("toy", BS, preemption_mode="swap", swap_space=4.5 * get_model("toy").kv_bytes_per_block(BS) / GIB)
    ex = GPUExecutor(cfg, toy_model)
    random_cache_bits(ex.kv_cache, 1)
    ex.execute(StepPlan(0, blocks_to_copy=[(2, 6)], blocks_to_swap_out=[(6, 1)]))
    assert torch.equal(ex.cpu_cache[1].view(torch.int32), ex.kv_cache[:, :, 2].cpu().view(torch.int32)), (
        "the swapped-out block does not hold the fork's copy")


def test_warming_the_transfers_leaves_the_cache_as_it_was(toy_model):
    """live's warm-up runs the swap kernel both ways through the swap cache and the host tier (so a run's first swap
    compiles nothing); the GPU block it round-trips comes back bit for bit."""
    block = get_model("toy").kv_bytes_per_block(BS) / GIB
    cfg = base_config("toy", BS, preemption_mode="swap", swap_space=4.5 * block, enable_prefix_caching=True,
                      kv_offloading_size=4.5 * block)
    ex = GPUExecutor(cfg, toy_model)
    assert ex.cpu_cache is not None and ex.host_tier is not None
    random_cache_bits(ex.kv_cache, 2)
    original = ex.kv_cache.clone()
    assert ex.warm_transfers() == 2
    assert torch.equal(ex.kv_cache.view(torch.int32), original.view(torch.int32)), "warming the transfers changed the cache"
    assert GPUExecutor(base_config("toy", BS), toy_model).warm_transfers() == 0


# ---- token ids -----------------------------------------------------------------------------------
def test_token_ids_follow_prefix_cache_keys():
    vocab = 1000
    a = Request("a", 0, 40, 1, seq_no=1, prefix_hash_ids=(7, 8, 9), hash_block_size=16)
    b = Request("b", 0, 44, 1, seq_no=2, prefix_hash_ids=(7, 8, 10), hash_block_size=16)
    plain = Request("c", 0, 40, 1, seq_no=2)
    short = Request("d", 0, 40, 1, seq_no=2, prefix_hash_ids=(7,), hash_block_size=16)
    ta, tb, tc, td = (prompt_token_ids(r, vocab) for r in (a, b, plain, short))
    assert (ta[:32] == tb[:32]).all(), "a shared trace hash block must give identical tokens"
    assert (ta[32:40] != tb[32:40]).mean() > 0.9, "different hash blocks should give different tokens"
    assert (td[:16] == ta[:16]).all() and (td[16:] == tc[16:]).all(), "beyond the hash ids: the request's own tokens"
    assert (tc != prompt_token_ids(Request("e", 0, 40, 1, seq_no=3), vocab)).mean() > 0.9
    assert ta.dtype == np.int64 and ta.min() >= 0 and ta.max() < vocab
    assert (prompt_token_ids(a, vocab) == ta).all(), "token ids must be deterministic"
    given = Request("g", 0, 5, 1, prompt_token_ids=(3, 999, 1000, 1001, 5))
    assert prompt_token_ids(given, vocab).tolist() == [3, 999, 0, 1, 5], "given token ids pass through (mod vocab)"


def test_splitmix64_matches_the_reference_values():
    # splitmix64 seeded with 0 (Vigna's reference): next() = mix(0 + golden), mix(2 * golden), ...
    out = splitmix64(np.array([0, 0x9E3779B97F4A7C15], dtype=np.uint64))
    assert [hex(int(x)) for x in out] == ["0xe220a8397b1dcdaf", "0x6e789e6aa1b965f4"]


# ---- sizing --------------------------------------------------------------------------------------
def test_graph_batch_sizes_stop_at_max_num_seqs():
    assert graph_batch_sizes(256) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert graph_batch_sizes(100) == (1, 2, 4, 8, 16, 32, 64, 100)
    assert graph_batch_sizes(1) == (1,)
    assert graph_batch_sizes(1024)[-1] == 256


@pytest.mark.parametrize("prefill_tokens, num_decodes", [(0, 1), (0, 4), (0, 5), (0, 32), (0, 33), (3, 0), (3, 29),
                                                           (3, 30), (32, 0), (33, 0), (16, 4)])
def test_the_executor_runs_each_step_as_validate_and_the_profile_classify_it(prefill_tokens, num_decodes):
    """The executor's choice between a decode graph, the padded mixed-step pieces and an eager step is
    pagesim.cost.graphs' rule, which the profile's fit and validate's step kinds use: at and across both
    boundaries (the largest decode graph, 4 sequences here; the largest token bucket, 32 tokens)."""
    from types import SimpleNamespace

    from pagesim.validate import step_kinds

    chunk = SimpleNamespace(is_decode=False, num_new_tokens=prefill_tokens, request=None)
    decode = SimpleNamespace(is_decode=True, num_new_tokens=1, request=None)
    plan = SimpleNamespace(scheduled=[chunk] * bool(prefill_tokens) + [decode] * num_decodes)
    fake = SimpleNamespace(decode_sizes=(1, 2, 4), mixed_sizes=(16, 32), _tokens_for=lambda r: None,
                           _check=lambda s, t: None, _decode_step=lambda d: "graph decode",
                           _mixed_step=lambda p, d, bucket: "graph mixed", _eager_step=lambda p, d: "eager")
    ran = GPUExecutor._forward(fake, plan)
    steps = pd.DataFrame({"num_prefill_tokens": [prefill_tokens], "num_decode_seqs": [num_decodes],
                          "num_swap_out_blocks": [0], "num_swap_in_blocks": [0]})
    kind = step_kinds(steps, 4, 32)[0]
    assert ran == (kind if kind in ("graph decode", "graph mixed") else "eager"), (ran, kind)


def test_config_for_device_keeps_a_given_block_count(toy_model):
    cfg = base_config("toy", BS, num_gpu_blocks=17)
    assert config_for_device(cfg, toy_model) is cfg
    if toy_model.device.type == "cpu":
        with pytest.raises(ValueError, match="CUDA"):
            config_for_device(cfg.replace(num_gpu_blocks=None, gpu_memory_utilization=0.05), toy_model)


def test_requests_the_executor_never_saw_are_reported(toy_model):
    cfg = base_config("toy", BS)
    ex = GPUExecutor(cfg, toy_model)
    sched = Scheduler(cfg)
    req = Request("late", 0, 5, 3, num_output_tokens=1, status=RequestStatus.WAITING)
    sched.add_request(req)
    with pytest.raises(RuntimeError, match="never ran it"):
        ex.execute(sched.schedule())


def test_max_model_len_beyond_the_window_is_refused_unless_allowed():
    from pagesim.errors import UserError

    with pytest.raises(UserError, match="exceeds llama-3-8b's window of 8,192 positions"):
        Config(model="llama-3-8b", max_model_len=32768)
    assert Config(model="llama-3.1-8b", max_model_len=32768).resolved_max_model_len == 32768
    assert Config(model="llama-3-8b", max_model_len=32768, allow_long_max_model_len=True).resolved_max_model_len == 32768


def test_an_allowed_long_max_model_len_extends_the_engine_rope_table():
    spec = get_model("toy")
    model = LlamaModel.random(spec, device=DEV, dtype=torch.float32)
    cfg = Config(model="toy", block_size=BS, num_gpu_blocks=4, max_num_seqs=2, max_model_len=2 * spec.max_position_embeddings,
                 allow_long_max_model_len=True)
    GPUExecutor(cfg, model, cuda_graphs=False)
    assert model.cos_sin.shape[0] == 2 * spec.max_position_embeddings


def test_swap_moves_scattered_and_consecutive_blocks_bit_exact():
    from engine.kernels.swap import cpu_cache_shape, swap_in, swap_out

    kv = torch.empty((2, 2, 12, 4, 2, 8), dtype=torch.float32)
    random_cache_bits(kv, 3)
    cpu = torch.zeros(cpu_cache_shape(tuple(kv.shape), 10), dtype=kv.dtype)
    out_pairs = [(7, 3), (1, 4), (11, 5), (0, 9), (5, 0)]  # CPU ids 3, 4, 5 make one run
    swap_out(kv, cpu, torch.tensor(out_pairs))
    for g, c in out_pairs:
        assert torch.equal(cpu[c].view(torch.int32), kv[:, :, g].view(torch.int32)), f"GPU block {g} -> CPU {c}"
    before = kv.clone()
    in_pairs = [(4, 2), (3, 8), (9, 6), (5, 10)]
    swap_in(cpu, kv, torch.tensor(in_pairs))
    for c, g in in_pairs:
        assert torch.equal(kv[:, :, g].view(torch.int32), cpu[c].view(torch.int32)), f"CPU block {c} -> GPU {g}"
    untouched = [b for b in range(12) if b not in {g for _, g in in_pairs}]
    assert torch.equal(kv[:, :, untouched].view(torch.int32), before[:, :, untouched].view(torch.int32))


def test_one_executor_runs_loop_after_loop_with_the_same_request_ids(toy_model):
    """Live mode warms up, calibrates, warms up again and then runs on one executor, and the warm-ups reuse
    their request ids: the loop hands the last step's finished requests to the executor when it ends, so
    nothing of an earlier loop is left to clash with."""
    from pagesim.loop import Arrivals, VirtualClock, drive, run

    cfg = base_config("toy", BS, num_gpu_blocks=64)
    ex = GPUExecutor(cfg, toy_model)
    for _ in range(2):
        reqs = [Request(f"warmup-{i}", 0.0, p, o, seq_no=-1 - i) for i, (p, o) in enumerate([(7, 3), (11, 5), (5, 2)])]
        sched = Scheduler(cfg)
        run(drive(sched, ex, None, Arrivals([(0, r) for r in reqs], by_step=True), VirtualClock()))
        assert all(r.status == RequestStatus.FINISHED for r in reqs)
        assert ex._tokens == {}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "extend", "new"]), st.lists(st.integers(0, 10_000), max_size=5),
                          st.integers(0, 40)), max_size=30))
def test_kept_block_row_is_the_tables_prefix(ops):
    """_Tokens.block_row keeps a table's array form between steps; under the KV-cache managers' rule (a table grows
    in place or is replaced by a new list: tests/test_kv_paged_properties.py checks the managers keep it) every row
    it gives is the table's first k entries."""
    from engine.executor import _Tokens

    width = 40
    t = _Tokens(np.zeros(4, dtype=np.int64), 1, 1, 1)
    table: list[int] = []
    for op, ids, k in ops:
        if op == "append":
            table.append(ids[0] if ids else 7)
        elif op == "extend":
            table.extend(ids)
        else:
            table = list(ids)
        table = table[:width] if len(table) > width else table
        k = min(k, len(table))
        row = t.block_row(table, k, width)
        assert row.dtype == np.int32 and row.tolist() == table[:k]
