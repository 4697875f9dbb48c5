"""The contiguous reserve-ahead baseline: the first-fit allocator and the manager built on it.

The allocator is checked by a hypothesis state machine against a plain model
(a list of allocated runs): free extents never overlap, stay sorted and
coalesced, free + allocated = size, and allocation is first-fit. The manager
is checked on examples: reservation sizes per policy, rejection, external
fragmentation emerging from the arrival order, the accounting, fork and swap.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagesim.config import Config
from pagesim.kv_contiguous import ContiguousKVCacheManager, FirstFitAllocator
from pagesim.scheduler import Scheduler
from tests.helpers import assert_all_done, check_contiguous, check_extents, drive, make_requests, swap_space_for


# ---- the allocator -----------------------------------------------------------------------------------
class FirstFitMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.runs: list[tuple[int, int]] = []  # allocated (start, length)

    @initialize(size=st.integers(0, 64))
    def setup(self, size):
        self.alloc = FirstFitAllocator(size)

    @rule(n=st.integers(1, 20))
    def allocate(self, n):
        expect = next((s for s, length in zip(self.alloc.starts, self.alloc.lengths) if length >= n), None)
        fits = self.alloc.largest_extent >= n
        start = self.alloc.allocate(n)
        assert start == expect, f"first fit for {n} should give {expect}, got {start}"
        assert (start is not None) == fits
        if start is not None:
            self.runs.append((start, n))

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def free(self, data):
        i = data.draw(st.integers(0, len(self.runs) - 1))
        start, n = self.runs.pop(i)
        self.alloc.free(start, n)

    @invariant()
    def tiles_the_space(self):
        if hasattr(self, "alloc"):
            check_extents(self.alloc, self.runs)
            assert self.alloc.num_free + sum(n for _, n in self.runs) == self.alloc.size

    def teardown(self):
        if hasattr(self, "alloc"):
            for start, n in self.runs:
                self.alloc.free(start, n)
            assert self.alloc.num_free == self.alloc.size
            assert self.alloc.starts == ([0] if self.alloc.size else []), "free space did not coalesce into one extent"


FirstFitMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
)
TestFirstFitMachine = FirstFitMachine.TestCase


def test_free_coalesces_with_both_neighbours():
    a = FirstFitAllocator(10)
    assert [a.allocate(3), a.allocate(3), a.allocate(3)] == [0, 3, 6]
    a.free(0, 3)
    a.free(6, 3)
    assert list(zip(a.starts, a.lengths)) == [(0, 3), (6, 4)]
    assert a.free_in_extents_shorter_than(4) == 3 and a.largest_extent == 4
    a.free(3, 3)
    assert list(zip(a.starts, a.lengths)) == [(0, 10)] and a.num_free == 10


# ---- the manager ---------------------------------------------------------------------------------------
def config(**kw) -> Config:
    base = dict(model="toy", block_size=4, num_gpu_blocks=64, max_model_len=64, kv_layout="contiguous",
                watermark=0.0)
    return Config(**{**base, **kw})


@pytest.mark.parametrize(
    "policy, prompt, output, tokens",
    [("max", 10, 5, 64), ("pow2", 10, 5, 16), ("pow2", 10, 6, 16), ("pow2", 10, 7, 32), ("oracle", 10, 5, 15)],
)
def test_reservation_follows_the_policy(policy, prompt, output, tokens):
    kv = ContiguousKVCacheManager(config(reserve_policy=policy))
    (r,) = make_requests([(prompt, output)])
    assert kv.reserve_tokens(r) == tokens
    assert kv.allocate_slots(r, prompt, admission=True, num_running=0)
    assert len(r.block_ids) == -(-tokens // 4)
    assert r.block_ids == list(range(r.block_ids[0], r.block_ids[0] + len(r.block_ids)))
    assert kv.allocate_slots(r, 1), "growth inside the reserved run always succeeds"
    check_contiguous(kv, [r])


def test_a_run_larger_than_the_cache_is_rejected_with_its_reason():
    kv = ContiguousKVCacheManager(config(num_gpu_blocks=8))  # max policy: 64 tokens = 16 blocks > 8
    (r,) = make_requests([(3, 2)])
    reason = kv.rejection_reason(r)
    assert reason and "16" in reason and "8 blocks" in reason


def test_external_fragmentation_emerges_from_holes():
    # 12 blocks; runs of 4 (oracle: 16 tokens each) fill the space; freeing the middle one leaves a hole of 4,
    # too small for a head needing 6 blocks.
    kv = ContiguousKVCacheManager(config(num_gpu_blocks=12, reserve_policy="oracle"))
    a, b, c = make_requests([(8, 8), (8, 8), (8, 8)])
    for r in (a, b, c):
        assert kv.allocate_slots(r, 8, admission=True, num_running=0)
    assert [a.block_ids[0], b.block_ids[0], c.block_ids[0]] == [0, 4, 8]
    for r in (a, c):
        r.num_computed_tokens = 8
    kv.free(b)
    (head,) = make_requests([(12, 12)], start_seq=3)  # 24 tokens = 6 blocks
    assert not kv.allocate_slots(head, 12, admission=True, num_running=2)
    acc = check_contiguous(kv, [a, c], head=head)
    assert acc.external_fragmentation == 4 * 4 and acc.free == 0
    assert acc.used == 16 and acc.allocated == 32
    assert acc.internal_fragmentation == 2 * (16 - 15)  # each run: 16 slots for final_kv_len 15
    assert acc.reserved == 32 - 16 - 2
    # A head that fits the hole sees no external fragmentation.
    (small,) = make_requests([(4, 4)], start_seq=4)
    assert check_contiguous(kv, [a, c], head=small).external_fragmentation == 0


def test_watermark_blocks_admission_but_not_a_lone_request():
    kv = ContiguousKVCacheManager(config(num_gpu_blocks=20, max_model_len=128, reserve_policy="oracle", watermark=0.2))  # keeps 4 free
    a, b = make_requests([(34, 34), (32, 32)])  # 17 and 16 blocks
    assert not kv.allocate_slots(a, 34, admission=True, num_running=1), "admission ate into the watermark"
    assert not a.block_ids
    assert kv.allocate_slots(b, 32, admission=True, num_running=1), "16 of 20 leaves the watermark free"
    kv.free(b)
    assert kv.allocate_slots(a, 34, admission=True, num_running=0), "with nobody running the watermark is not kept"
    check_contiguous(kv, [a])


def test_fork_gives_the_sample_its_own_run_and_copies_the_computed_blocks():
    kv = ContiguousKVCacheManager(config(reserve_policy="oracle"))
    parent, child = make_requests([(10, 6), (10, 6)])
    child.seq_no, child.parent_id, child.sample_index = parent.seq_no, parent.request_id, 1
    assert kv.allocate_slots(parent, 10, admission=True, num_running=0)
    parent.num_computed_tokens = 10
    child.num_computed_tokens = 10
    copies = kv.fork(parent, child)
    assert len(child.block_ids) == len(parent.block_ids) == 4
    assert copies == list(zip(parent.block_ids[:3], child.block_ids[:3]))  # 10 tokens: 3 blocks of 4
    assert not set(parent.block_ids) & set(child.block_ids)
    assert kv.num_shared_refs() == 0 and kv.shared_refs() == {}  # so no step of this layout reads a block twice
    check_contiguous(kv, [parent, child])


def test_swap_out_moves_only_the_computed_blocks_and_swap_in_brings_them_back():
    cfg = config(reserve_policy="pow2", preemption_mode="swap", swap_space=swap_space_for(8, "toy", 4))
    kv = ContiguousKVCacheManager(cfg)
    (r,) = make_requests([(9, 7)])  # pow2: 16 tokens = 4 blocks
    assert kv.allocate_slots(r, 9, admission=True, num_running=0)
    r.num_computed_tokens = 9
    gpu = list(r.block_ids)
    out = kv.swap_out(r)
    assert out == list(zip(gpu[:3], [0, 1, 2])) and r.cpu_block_ids == [0, 1, 2] and not r.block_ids
    check_contiguous(kv, [], [r])
    back = kv.swap_in(r, 1, num_running=0)
    assert [c for c, _ in back] == [0, 1, 2] and len(r.block_ids) == 4 and not r.cpu_block_ids
    check_contiguous(kv, [r], [])
    assert kv.cpu.num_free == 8


def test_swap_out_fails_when_the_cpu_pool_is_short():
    cfg = config(reserve_policy="oracle", preemption_mode="swap", swap_space=swap_space_for(2, "toy", 4))
    kv = ContiguousKVCacheManager(cfg)
    (r,) = make_requests([(12, 4)])
    assert kv.allocate_slots(r, 12, admission=True, num_running=0)
    r.num_computed_tokens = 12
    ids = list(r.block_ids)
    assert kv.swap_out(r) is None and r.block_ids == ids and kv.cpu.num_free == 2


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_every_request_finishes_under_each_policy(policy, mode):
    cfg = config(num_gpu_blocks=40, reserve_policy=policy, preemption_mode=mode, max_num_seqs=8,
                 max_num_batched_tokens=32, swap_space=swap_space_for(16, "toy", 4) if mode == "swap" else 0.0)
    specs = [(3 + (7 * i) % 23, 1 + (5 * i) % 17) for i in range(30)]
    reqs = make_requests(specs)
    s = Scheduler(cfg)
    steps = drive(s, reqs, arrivals=[i // 3 for i in range(30)])
    assert_all_done(s, reqs)
    # The baseline never preempts: a running request's reservation covers all its tokens.
    assert s.num_preemptions == 0
    assert all(st.accounting.cached == 0 for st in steps)


def test_max_policy_wastes_what_oracle_does_not():
    """Same workload: the time-averaged token-state fraction is ordered oracle > pow2 > max."""
    specs = [(5 + (11 * i) % 20, 2 + (13 * i) % 30) for i in range(40)]
    fractions = {}
    for policy in ("max", "pow2", "oracle"):
        s = Scheduler(config(num_gpu_blocks=64, reserve_policy=policy, max_num_seqs=64, max_num_batched_tokens=64))
        steps = drive(s, make_requests(specs))
        fractions[policy] = sum(x.accounting.token_state_fraction for x in steps) / len(steps)
    assert fractions["oracle"] > fractions["pow2"] > fractions["max"], fractions



def test_a_run_of_exactly_the_caches_size_is_admitted_one_block_more_is_rejected():
    kv = ContiguousKVCacheManager(config(num_gpu_blocks=16))  # max policy: 64 tokens = 16 blocks of 4
    (r,) = make_requests([(3, 2)])
    assert kv.rejection_reason(r) is None
    assert kv.allocate_slots(r, 3, admission=True, num_running=0) and r.block_ids == list(range(16))
    small = ContiguousKVCacheManager(config(num_gpu_blocks=15))
    assert "reserves 16 contiguous KV blocks but the cache has only 15 blocks" in small.rejection_reason(r)


def test_the_admission_check_keeps_the_watermark_only_while_others_run():
    """can_allocate (the scheduler's question) and can_swap_in agree with placing the run: the watermark's blocks
    stay free while anything runs, a run that leaves exactly the watermark free fits, a lone request ignores it."""
    kv = ContiguousKVCacheManager(config(num_gpu_blocks=20, max_model_len=128, reserve_policy="oracle", watermark=0.2))
    a, b = make_requests([(34, 34), (32, 32)])  # 17 and 16 blocks; 4 blocks of watermark
    assert not kv.can_allocate(a, 34, admission=True, num_running=1)
    assert kv.can_allocate(a, 34, admission=True, num_running=0), "nobody running: the watermark is not kept"
    assert kv.can_allocate(b, 32, admission=True, num_running=1), "16 of 20 leaves exactly the watermark free"
    assert not kv.can_swap_in(a, 1, num_running=1) and kv.can_swap_in(a, 1, num_running=0)
    assert kv.can_swap_in(b, 1, num_running=1)
    assert not kv.allocate_slots(a, 34, admission=True, num_running=1), "placing agrees with the question"
    assert kv.allocate_slots(b, 32, admission=True, num_running=1)


def test_freeing_a_run_returns_its_internal_fragmentation():
    kv = ContiguousKVCacheManager(config(reserve_policy="max", num_gpu_blocks=40))
    a, b = make_requests([(10, 5), (6, 3)])  # final lengths 14 and 8 of 64-slot runs: 50 and 56 slots internal
    for r in (a, b):
        assert kv.allocate_slots(r, r.prompt_len, admission=True, num_running=0)
        r.num_computed_tokens = r.prompt_len
    assert check_contiguous(kv, [a, b]).internal_fragmentation == 50 + 56
    kv.free(a)
    acc = check_contiguous(kv, [b])
    assert acc.internal_fragmentation == 56 and acc.used == 6 and acc.reserved == 64 - 6 - 56
    kv.free(b)
    assert kv.num_internal_slots == 0 and check_contiguous(kv, []).free == 40 * 4


def test_held_blocks_count_a_swapped_out_requests_host_blocks():
    """num_held_blocks is what leaked_blocks reads at the end of a run: blocks on the GPU and in the swap space."""
    cfg = config(reserve_policy="oracle", preemption_mode="swap", swap_space=swap_space_for(8, "toy", 4))
    kv = ContiguousKVCacheManager(cfg)
    (r,) = make_requests([(9, 7)])  # 16 tokens: 4 blocks
    assert kv.allocate_slots(r, 9, admission=True, num_running=0)
    assert kv.num_held_blocks() == 4
    r.num_computed_tokens = 9
    kv.swap_out(r)
    assert kv.num_held_blocks() == 3, "the 3 computed blocks now held in the swap space"
    kv.free_swapped(r)
    assert kv.num_held_blocks() == 0
