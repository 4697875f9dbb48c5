"""The scheduler's promises, on small hand-made workloads (every step checked by tests/helpers.py).

Preempted requests come back and finish, in recompute and in swap mode (and
swap mode really moves blocks out and back); impossible requests are rejected
at arrival with a reason; prefix hits save exactly the hit tokens; budgets
hold in every plan; same inputs give the same plans; the victim is the most
recently admitted running request; first admission is first-come-first-served;
n > 1 requests fork n samples whose copies reach the next plan.
"""

from __future__ import annotations

import pytest

from pagesim.config import Config
from pagesim.kv_paged import PagedKVCacheManager
from pagesim.request import Request, RequestStatus
from pagesim.scheduler import Scheduler
from tests.helpers import assert_all_done, check_plan, check_scheduler, drive, make_requests, swap_space_for


def config(**kw) -> Config:
    base = dict(model="toy", block_size=4, num_gpu_blocks=64, max_model_len=128, max_num_seqs=16,
                max_num_batched_tokens=64, watermark=0.0)
    return Config(**{**base, **kw})


def signature(steps):
    """Everything a plan decides, step by step (block tables as they were at schedule time)."""
    return [
        (
            s.scheduled,
            s.plan.preempted,
            s.plan.swapped_in,
            s.plan.admitted,
            s.plan.blocks_to_swap_out,
            s.plan.blocks_to_swap_in,
            s.plan.blocks_to_copy,
            [r.request_id for r in s.outcome.finished],
        )
        for s in steps
    ]


# ---- preemption -----------------------------------------------------------------------------------------
def test_preempted_requests_resume_and_finish():
    # 12 blocks of 4 slots; six requests that each end at 27 tokens (7 blocks) cannot all grow at once.
    s = Scheduler(config(num_gpu_blocks=12))
    reqs = make_requests([(8, 20)] * 6)
    steps = drive(s, reqs)
    assert s.num_preemptions > 0, "the workload was meant to force preemption"
    assert_all_done(s, reqs)
    assert sum(r.num_preemptions for r in reqs) == s.num_preemptions
    # A preempted request is re-admitted later (recompute: it rejoins the waiting queue at the front).
    for k, st in enumerate(steps):
        for rid in st.plan.preempted:
            assert st.waiting_after[0] in st.plan.preempted, "a recompute victim rejoins the front of the queue"
            assert any(rid in later.plan.admitted for later in steps[k + 1 :]), f"{rid} was never re-admitted"


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_swap_and_recompute_modes_both_finish(mode):
    cpu = 40 if mode == "swap" else 0
    s = Scheduler(config(num_gpu_blocks=12, preemption_mode=mode, swap_space=swap_space_for(cpu, "toy", 4)))
    reqs = make_requests([(8, 20)] * 6)
    by_id = {r.request_id: r for r in reqs}
    swapped_out = {}  # request id -> (cpu blocks, computed tokens) at swap-out
    saw_swap_out = saw_swap_in = False
    now = 0.0
    for r in reqs:
        s.add_request(r)
    while s.has_work():
        before = [r.request_id for r in s.running]
        plan = s.schedule(now)
        check_plan(s, plan, before)
        check_scheduler(s)
        for rid in plan.preempted:
            r = by_id[rid]
            if r.status == RequestStatus.SWAPPED:
                assert mode == "swap"
                cpu_of = {c: g for g, c in plan.blocks_to_swap_out}
                assert all(c in cpu_of for c in r.cpu_block_ids), f"{rid}'s CPU blocks are not in the swap-out list"
                assert len(r.cpu_block_ids) == -(-r.num_computed_tokens // 4)
                swapped_out[rid] = (list(r.cpu_block_ids), r.num_computed_tokens)
            else:
                assert r.num_computed_tokens == 0 and r.status == RequestStatus.WAITING
        saw_swap_out |= bool(plan.blocks_to_swap_out)
        for rid in plan.swapped_in:
            saw_swap_in = True
            r = by_id[rid]
            cpu_ids, computed = swapped_out.pop(rid)
            pairs = [(c, g) for c, g in plan.blocks_to_swap_in if c in cpu_ids]
            assert [c for c, _ in pairs] == cpu_ids, f"{rid}'s swapped-out blocks did not all come back"
            assert [g for _, g in pairs] == r.block_ids[: len(cpu_ids)]
            assert r.num_computed_tokens == computed, "a swapped-in request must not recompute"
        now += 1.0
        s.finish_step(plan, now)
        check_scheduler(s)
        assert now < 10_000
    assert_all_done(s, reqs)
    assert s.num_preemptions > 0
    if mode == "swap":
        assert saw_swap_out and saw_swap_in and not swapped_out
    else:
        assert not saw_swap_out


def test_swap_mode_falls_back_to_recompute_when_the_cpu_pool_is_full():
    s = Scheduler(config(num_gpu_blocks=12, preemption_mode="swap", swap_space=swap_space_for(2, "toy", 4)))
    reqs = make_requests([(8, 20)] * 6)
    steps = drive(s, reqs)
    assert_all_done(s, reqs)
    recomputed = [rid for st in steps for rid in st.plan.preempted if rid in st.waiting_after]
    assert recomputed, "with 2 CPU blocks some victim must fall back to recompute"


def test_victim_is_the_most_recently_admitted_running_request():
    # A, B, C arrive one step apart and decode in lockstep until the 10 blocks run out.
    s = Scheduler(config(num_gpu_blocks=10, max_num_batched_tokens=128))
    reqs = make_requests([(4, 30)] * 3)
    steps = drive(s, reqs, arrivals=[0, 1, 2])
    admitted_at = {}
    first = None
    for k, st in enumerate(steps):
        for rid in st.plan.admitted:
            admitted_at[rid] = k
        if st.plan.preempted and first is None:
            first = st
            newest = max(st.running_before, key=lambda rid: admitted_at[rid])
            assert st.plan.preempted[0] == newest == "r2"
    assert first is not None, "the workload was meant to force preemption"
    assert_all_done(s, reqs)


# ---- admission ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_impossible_requests_are_rejected_with_their_reason_and_the_rest_finish(layout):
    # 8 blocks of 4 = 32 slots; max_model_len 64.
    s = Scheduler(config(num_gpu_blocks=8, max_model_len=64, kv_layout=layout, reserve_policy="oracle"))
    ok = make_requests([(5, 5), (10, 3), (2, 8)])
    too_long, too_big = make_requests([(64, 10), (30, 10)], start_seq=10)
    assert s.add_request(too_long) is False and s.add_request(too_big) is False
    assert too_long.status == too_big.status == RequestStatus.REJECTED
    assert "max_model_len" in too_long.reject_reason and "64" in too_long.reject_reason
    assert "blocks" in too_big.reject_reason and "8" in too_big.reject_reason
    assert s.rejected == [too_long, too_big]
    steps = drive(s, ok)
    assert_all_done(s, ok)
    scheduled = {x[0] for st in steps for x in st.scheduled}
    assert not scheduled & {too_long.request_id, too_big.request_id}


def test_an_output_running_past_max_model_len_is_cut_there_as_in_vllm():
    s = Scheduler(config(num_gpu_blocks=64, max_model_len=64))
    (r,) = make_requests([(60, 10)])
    drive(s, [r])  # vLLM cannot know the output length: it cuts, it does not reject
    assert r.status == RequestStatus.FINISHED and r.num_tokens == 64 and r.num_output_tokens == 4


def test_first_admission_is_first_come_first_served():
    # Arrivals at distinct times; max_num_seqs and a small token budget make requests queue; memory is ample.
    s = Scheduler(config(num_gpu_blocks=400, max_num_seqs=3, max_num_batched_tokens=16))
    specs = [(3 + (7 * i) % 19, 2 + (5 * i) % 11) for i in range(24)]
    reqs = make_requests(specs)
    arrivals = [0.5 * i + (0.25 if i % 3 == 0 else 0.0) for i in range(24)]
    steps = drive(s, reqs, arrivals=arrivals)
    assert s.num_preemptions == 0
    assert_all_done(s, reqs)
    order = [rid for st in steps for rid in st.plan.admitted]
    by_arrival = [r.request_id for _, r in sorted(zip(arrivals, reqs), key=lambda p: p[0])]
    assert order == by_arrival
    times = [r.first_scheduled_time for _, r in sorted(zip(arrivals, reqs), key=lambda p: p[0])]
    assert times == sorted(times), "a later arrival was first scheduled before an earlier one"
    assert any(len(st.waiting_after) >= 2 for st in steps), "the workload was meant to queue"


# ---- prefix caching ------------------------------------------------------------------------------------------
def test_prefix_hits_reduce_the_tokens_computed_by_the_hit_tokens():
    prefix = tuple(range(32))  # 8 full blocks of 4

    def workload():
        specs = [
            dict(prompt_len=37, output_len=4, prompt_token_ids=prefix + (100 + i, 101, 102, 103, 104 + i))
            for i in range(10)
        ]
        return make_requests(specs)

    totals, hits = {}, {}
    for caching in (False, True):
        s = Scheduler(config(num_gpu_blocks=200, enable_prefix_caching=caching))
        reqs = workload()
        steps = drive(s, reqs, arrivals=[0] + [20] * 9)  # the first one is done (and cached) before the rest arrive
        assert_all_done(s, reqs)
        totals[caching] = sum(x[2] for st in steps for x in st.scheduled)
        hits[caching] = sum(r.num_prefix_hit_tokens for r in reqs)
        if caching:
            assert s.kv.prefix_cache_stats.hits == hits[caching]
            assert s.kv.prefix_cache_stats.queries == sum(r.prompt_len for r in reqs)
    assert hits[False] == 0
    assert hits[True] == 9 * 32, "each later request should hit the 32-token shared prefix"
    assert totals[False] - totals[True] == hits[True]
    assert totals[False] == 10 * (37 + 3)


def test_a_recomputed_request_hits_its_own_cached_blocks():
    s = Scheduler(config(num_gpu_blocks=12, enable_prefix_caching=True))
    reqs = make_requests([(8, 20)] * 6)
    drive(s, reqs)
    assert_all_done(s, reqs)
    preempted = [r for r in reqs if r.num_preemptions]
    stats = s.kv.prefix_cache_stats
    assert preempted and stats.recompute_hits > 0, "no re-admitted request found its own blocks in the cache"
    # Requests without token ids or hash ids share nothing: no first admission hits another's blocks.
    assert stats.hits == 0 and all(r.num_prefix_hit_tokens == 0 for r in reqs)


# ---- budgets and determinism -------------------------------------------------------------------------------------
BUDGET_CONFIGS = {
    "chunked-small-budget": dict(max_num_batched_tokens=7, max_num_seqs=3),
    "no-chunking": dict(enable_chunked_prefill=False, max_num_batched_tokens=64, max_model_len=64, max_num_seqs=2),
    "tight-memory-swap": dict(num_gpu_blocks=14, preemption_mode="swap", swap_space=swap_space_for(6, "toy", 4),
                              max_num_batched_tokens=20),
    "prefix-watermark": dict(num_gpu_blocks=30, enable_prefix_caching=True, watermark=0.1, max_num_seqs=4),
    "contiguous-pow2": dict(kv_layout="contiguous", reserve_policy="pow2", num_gpu_blocks=40, max_model_len=64),
}


@pytest.mark.parametrize("name", BUDGET_CONFIGS)
def test_budgets_hold_in_every_plan(name):
    cfg = config(**BUDGET_CONFIGS[name])
    specs = [
        dict(prompt_len=3 + (13 * i) % 29, output_len=1 + (7 * i) % 23, prompt_token_ids=tuple([i % 2] * (3 + (13 * i) % 29)))
        for i in range(30)
    ]
    reqs = make_requests(specs)
    s = Scheduler(cfg)
    steps = drive(s, reqs, arrivals=[i // 4 for i in range(30)])  # check_plan asserts the budgets at every step
    assert_all_done(s, reqs)
    for st in steps:
        assert sum(x[2] for x in st.scheduled) <= cfg.max_num_batched_tokens
        assert len(st.scheduled) <= cfg.max_num_seqs
        if not cfg.enable_chunked_prefill:
            for rid, computed, new, _, _ in st.scheduled:
                r = next(r for r in reqs if r.request_id == rid)
                assert computed + new >= r.prompt_len, f"{rid}'s prompt was split without chunked prefill"


def test_same_inputs_give_identical_plans():
    def run():
        cfg = config(num_gpu_blocks=16, enable_prefix_caching=True, preemption_mode="swap",
                     swap_space=swap_space_for(8, "toy", 4), max_num_batched_tokens=24)
        specs = [
            dict(prompt_len=5 + i % 9, output_len=3 + (5 * i) % 17, n=1 + i % 3, prompt_token_ids=tuple([7] * (5 + i % 9)))
            for i in range(20)
        ]
        reqs = make_requests(specs)
        s = Scheduler(cfg)
        steps = drive(s, reqs, arrivals=[i // 2 for i in range(20)])
        return s, signature(steps)

    s1, a = run()
    s2, b = run()
    assert s1.num_preemptions > 0
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"step {k} differs between two identical runs"


# ---- parallel sampling ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_n_samples_finish_and_fork_copies_reach_the_next_plan(layout):
    s = Scheduler(config(num_gpu_blocks=100, kv_layout=layout, reserve_policy="oracle", max_num_seqs=32))
    # Prompts of 6 tokens end mid-block (copy needed); 8 tokens end on a block boundary (paged: no copy).
    specs = [dict(prompt_len=6, output_len=5, n=2), dict(prompt_len=6, output_len=3, n=3),
             dict(prompt_len=8, output_len=4, n=3), dict(prompt_len=7, output_len=1, n=2)]
    reqs = make_requests(specs)
    for r in reqs:
        assert s.add_request(r)
    expected_copies = []
    forks = 0
    now = 0.0
    while s.has_work():
        before = [r.request_id for r in s.running]
        plan = s.schedule(now)
        assert set(expected_copies) <= set(plan.blocks_to_copy), "a fork's copy is missing from the next plan"
        expected_copies = []
        check_plan(s, plan, before)
        check_scheduler(s)
        now += 1.0
        outcome = s.finish_step(plan, now)
        check_scheduler(s)
        for child in outcome.forked:
            forks += 1
            parent = next(r for r in reqs if r.request_id == child.parent_id)
            assert child.num_computed_tokens == parent.num_computed_tokens == parent.prompt_len
            if child.is_finished:
                continue
            if isinstance(s.kv, PagedKVCacheManager):
                full = parent.prompt_len // 4
                assert child.block_ids[:full] == parent.block_ids[:full], "full prompt blocks are shared"
                if parent.prompt_len % 4:
                    expected_copies.append((parent.block_ids[full], child.block_ids[full]))
                    assert child.block_ids[full] != parent.block_ids[full]
                else:
                    assert child.block_ids == parent.block_ids
            else:
                expected_copies += list(zip(parent.block_ids[:2], child.block_ids[:2]))
        assert now < 1000
    assert forks == sum(r.n - 1 for r in reqs)
    assert_all_done(s, reqs)
    for r in reqs:
        samples = [x for x in s.finished if x.request_id == r.request_id or x.parent_id == r.request_id]
        assert len(samples) == r.n
        assert all(x.num_output_tokens == r.output_len for x in samples)
        assert len({x.request_id for x in samples}) == r.n


def test_forked_samples_respect_max_num_seqs():
    """max_num_seqs bounds the sequences in a step; an n > 1 request's samples are sequences too.

    A request with n = 2 takes two seats when admitted (as vLLM v0 counts a sequence group), so with
    max_num_seqs = 2 the second such request waits until the first one's samples finish; a request
    with more samples than max_num_seqs is rejected with the reason.
    """
    s = Scheduler(config(max_num_seqs=2))
    a, b, too_many = make_requests([dict(prompt_len=3, output_len=3, n=2), dict(prompt_len=3, output_len=3, n=2),
                                    dict(prompt_len=3, output_len=3, n=3)])
    assert not s.add_request(too_many) and "max_num_seqs" in too_many.reject_reason
    drive(s, [a, b])  # check_plan asserts len(scheduled) and len(running) <= max_num_seqs at every step
    b_admitted = min(x.first_scheduled_time for x in s.finished if (x.parent_id or x.request_id) == b.request_id)
    a_done = max(x.finish_time for x in s.finished if (x.parent_id or x.request_id) == a.request_id)
    assert b_admitted >= a_done, "the second n=2 request was admitted while the first held both seats"
