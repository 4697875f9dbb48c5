"""Property tests of the paged KV cache: random operation sequences keep every bookkeeping invariant.

Two levels:

- `PagedManagerMachine` drives PagedKVCacheManager directly: requests with
  small prompts over a tiny vocabulary (so prefixes collide and prefix caching
  really hits) are admitted with their prefix hits, grown chunk by chunk with
  cache_full_blocks, forked, swapped out and in, preempted and aborted. A
  model of what each physical block holds checks that every prefix hit
  returns blocks holding exactly the request's leading tokens.
- `SchedulerMachine` drives the Scheduler over random configs (block size,
  cache size, budgets, chunked prefill, prefix caching, recompute or swap
  preemption, paged or contiguous with every reserve policy) with random
  arrivals interleaved with steps, and checks the plans' budgets and victims.

After every step (tests/helpers.py): no block owned twice except full shared
blocks, ref_cnt = number of block tables holding a block, free + used = total,
the hash index consistent, the CPU pool conserved, the accounting categories
non-negative and summing to the total with `used` equal to an independent
count; at the end, once every request is finished or aborted, nothing leaked.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagesim.config import Config
from pagesim.kv_paged import PagedKVCacheManager
from pagesim.utils import cdiv
from pagesim.request import Request, RequestStatus
from pagesim.scheduler import Scheduler
from tests.helpers import (assert_all_done, check_paged, check_plan, check_scheduler, prefix_hits_from_scratch,
                           swap_space_for)

MACHINE_SETTINGS = settings(
    max_examples=700, stateful_step_count=60, deadline=None, suppress_health_check=list(HealthCheck),
    derandomize=True,  # the coverage check after it counts operations: the same examples in every run
)

# Prompts share prefixes: a prompt is a prefix of one of a few base prompts plus a random tail.
BASES = [(0, 1) * 20, (1, 0, 0) * 14, (2,) * 40]
prompts = st.builds(
    lambda base, keep, tail: tuple(BASES[base][:keep]) + tuple(tail),
    st.integers(0, len(BASES) - 1),
    st.integers(0, 32),
    st.lists(st.integers(0, 2), max_size=6),
).filter(lambda p: len(p) >= 1)


# ---- level (a): the manager alone -----------------------------------------------------------------
class PagedManagerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.swapped: list[Request] = []
        self.ended: list[Request] = []
        self.tokens: dict[str, list] = {}  # request id -> its token identities (prompt, then sampled)
        self.pending: dict[str, int] = {}  # request id -> tokens allocated this step, not yet computed
        self.content: dict[int, tuple] = {}  # GPU block -> the tokens [0, (i+1)*bs) it holds K/V of, when full
        self.cpu_content: dict[int, tuple] = {}
        self.next_id = 0
        self.hits = 0

    @initialize(
        block_size=st.sampled_from([1, 2, 4, 8, 16]),
        num_gpu_blocks=st.integers(2, 24),
        num_cpu_blocks=st.integers(0, 12),
        caching=st.booleans(),
        watermark=st.sampled_from([0.0, 0.01, 0.1, 0.25]),
    )
    def setup(self, block_size, num_gpu_blocks, num_cpu_blocks, caching, watermark):
        self.config = Config(
            model="toy",
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks,
            enable_prefix_caching=caching,
            preemption_mode="swap",
            swap_space=swap_space_for(num_cpu_blocks, "toy", block_size),
            watermark=watermark,
        )
        self.kv = PagedKVCacheManager(self.config)
        assert self.kv.num_cpu_blocks == num_cpu_blocks
        self.bs = block_size

    # -- helpers --
    def _snapshot(self):
        pool = self.kv.pool
        return (
            [b.ref_cnt for b in pool.blocks],
            [b.block_hash for b in pool.blocks],
            list(pool.free_queue),
            pool.num_free_cached,
            pool.num_extra_refs,
            list(self.kv.free_cpu_blocks),
        )

    def _prefix(self, r: Request, i: int) -> tuple:
        """What block i of r holds when full: the K/V of tokens [0, (i+1)*bs) (a token's K/V depends on all before it)."""
        return tuple(self.tokens[r.request_id][: (i + 1) * self.bs])

    def _new_request(self, prompt, output_len, parent: Request | None = None) -> Request:
        rid = f"q{self.next_id}"
        self.next_id += 1
        if parent is None:
            r = Request(rid, 0.0, len(prompt), output_len, seq_no=self.next_id, prompt_token_ids=prompt)
            self.tokens[rid] = list(prompt)
        else:
            # A sample of `parent`: same prompt (and seq_no), its own sampled tokens after the shared computed ones.
            r = Request(
                rid, 0.0, parent.prompt_len, parent.output_len, seq_no=parent.seq_no,
                prompt_token_ids=parent.prompt_token_ids, parent_id=parent.request_id, sample_index=self.next_id,
                num_computed_tokens=parent.num_computed_tokens, num_output_tokens=parent.num_output_tokens,
            )
            keep = max(parent.num_computed_tokens, parent.prompt_len)
            own = [("sampled", rid, j) for j in range(keep, r.num_tokens)]
            self.tokens[rid] = self.tokens[parent.request_id][:keep] + own
        self.pending[rid] = 0
        return r

    def _record_hashed(self, r: Request) -> None:
        """Blocks are hashed when allocated for the step that fills them (as in vLLM): their content is then known."""
        for i, bid in enumerate(r.block_ids):
            if self.kv.pool.blocks[bid].block_hash is not None:
                self.content[bid] = self._prefix(r, i)

    def _compute(self, r: Request) -> None:
        """The forward pass of one step for r: its pending tokens get K/V, maybe a token is sampled."""
        k = self.pending[r.request_id]
        if not k:
            return
        self.pending[r.request_id] = 0
        old = r.num_computed_tokens
        r.num_computed_tokens += k
        for i in range(old // self.bs, r.num_computed_tokens // self.bs):
            self.content[r.block_ids[i]] = self._prefix(r, i)
        hashed = sum(self.kv.pool.blocks[b].block_hash is not None for b in r.block_ids)
        self.kv.cache_full_blocks(r, old)
        if sum(self.kv.pool.blocks[b].block_hash is not None for b in r.block_ids) > hashed:
            EVENTS["blocks cached"] += 1
        if r.num_computed_tokens == r.num_tokens:
            self.tokens[r.request_id].append(("sampled", r.request_id, r.num_tokens))
            r.num_output_tokens += 1
            if r.num_output_tokens >= r.output_len:
                self.kv.free(r)
                r.status = RequestStatus.FINISHED
                self.running.remove(r)
                self.ended.append(r)
                EVENTS["finished"] += 1

    # -- rules --
    @rule(prompt=prompts, output_len=st.integers(1, 10))
    def add_request(self, prompt, output_len):
        r = self._new_request(prompt, output_len)
        reason = self.kv.rejection_reason(r)
        need = cdiv(r.final_kv_len, self.bs)
        assert (reason is not None) == (need > self.kv.num_gpu_blocks)
        if reason is None:
            self.waiting.append(r)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), tail=st.lists(st.integers(0, 2), max_size=3), output_len=st.integers(1, 10))
    def add_request_like_an_earlier_one(self, data, tail, output_len):
        """A prompt repeating an earlier request's prompt (plus a short tail): the prefix cache's best case."""
        rid = data.draw(st.sampled_from(sorted(self.tokens)))
        prompt = tuple(t for t in self.tokens[rid] if not isinstance(t, tuple)) + tuple(tail)
        self.add_request(prompt, output_len)

    def _looked_up(self, r: Request) -> tuple[list, int]:
        """get_computed_blocks(r), checked against a lookup from scratch: the longest run of leading blocks
        cached, each the first cached copy of its hash."""
        EVENTS["lookup"] += 1
        hits, num_hit = self.kv.get_computed_blocks(r)
        fresh = prefix_hits_from_scratch(self.kv, r)
        assert [b.block_id for b in hits] == fresh, f"{r.request_id}: hits {[b.block_id for b in hits]}, from scratch {fresh}"
        return hits, num_hit

    @precondition(lambda self: self.waiting)
    @rule(data=st.data(), chunk=st.integers(1, 24))
    def admit(self, data, chunk):
        r = data.draw(st.sampled_from(self.waiting))
        assert not r.block_ids and r.num_computed_tokens == 0
        hits, num_hit = self._looked_up(r)
        assert num_hit == len(hits) * self.bs and num_hit <= r.num_tokens - 1
        for i, b in enumerate(hits):
            assert self.content.get(b.block_id) == self._prefix(r, i), (
                f"prefix hit on block {b.block_id} for {r.request_id} at index {i}, but the block holds other tokens"
            )
        num_new = min(chunk, r.num_tokens - num_hit)
        before = self._snapshot()
        hit_tokens_before = r.num_prefix_hit_tokens
        stats_before = (self.kv.prefix_cache_stats.queries, self.kv.prefix_cache_stats.hits)
        need = self.kv.num_blocks_to_allocate(r, num_new, hits, num_hit)
        # Blocks the admission may take: the free ones, less the hits sitting free (touching them takes them),
        # less the watermark kept for running requests' growth (none kept when nothing runs).
        free_hits = sum(1 for b in hits if b.ref_cnt == 0)
        wm = self.kv.watermark_blocks if self.running else 0
        allowed = self.kv.pool.num_free_blocks - free_hits - wm
        # vLLM admits only if the whole sequence fits (scheduler_reserve_full_isl), not just this chunk.
        need_whole = max(cdiv(r.num_tokens, self.bs) - len(hits), 0)
        ok = self.kv.allocate_slots(r, num_new, hits, num_hit, admission=True, num_running=len(self.running))
        if not ok:
            assert self._snapshot() == before and not r.block_ids and r.num_computed_tokens == 0
            assert need_whole > allowed, "allocation refused with room to spare"
            EVENTS["admission refused"] += 1
            return
        assert need <= need_whole <= allowed, (
            f"admission granted {need} new blocks with only {allowed} allowed (free blocks less free hits "
            f"less the watermark of {wm})"
        )
        first = r.num_preemptions == 0
        assert r.num_computed_tokens == num_hit
        assert r.num_prefix_hit_tokens == (num_hit if first and self.kv.enable_caching else hit_tokens_before), (
            "num_prefix_hit_tokens must be the hits of the first admission only"
        )
        if first and self.kv.enable_caching:
            assert (self.kv.prefix_cache_stats.queries, self.kv.prefix_cache_stats.hits) == (
                stats_before[0] + r.prompt_len, stats_before[1] + num_hit)
        else:
            assert (self.kv.prefix_cache_stats.queries, self.kv.prefix_cache_stats.hits) == stats_before
        assert len(r.block_ids) == cdiv(num_hit + num_new, self.bs)
        for bid in r.block_ids[len(hits):]:
            self.content.pop(bid, None)  # fresh blocks: old content overwritten
        self._record_hashed(r)
        self.hits += num_hit
        EVENTS["admitted with prefix hit" if num_hit else "admitted"] += 1
        self.waiting.remove(r)
        r.status = RequestStatus.RUNNING
        self.running.append(r)
        self.pending[r.request_id] = num_new

    @precondition(lambda self: any(not self.pending[r.request_id] for r in self.running))
    @rule(data=st.data(), chunk=st.integers(1, 24))
    def grow(self, data, chunk):
        r = data.draw(st.sampled_from([r for r in self.running if not self.pending[r.request_id]]))
        num_new = min(chunk, r.num_tokens - r.num_computed_tokens)
        assert num_new >= 1
        before = self._snapshot()
        old_len = len(r.block_ids)
        if not self.kv.allocate_slots(r, num_new):
            assert self._snapshot() == before and len(r.block_ids) == old_len
            assert self.kv.num_blocks_to_allocate(r, num_new) > self.kv.pool.num_free_blocks
            EVENTS["growth refused"] += 1
            return
        assert len(r.block_ids) == cdiv(r.num_computed_tokens + num_new, self.bs)
        for bid in r.block_ids[old_len:]:
            self.content.pop(bid, None)
        self._record_hashed(r)
        self.pending[r.request_id] = num_new

    @rule()
    def finish_step(self):
        for r in list(self.running):
            self._compute(r)

    @precondition(lambda self: self.running)
    @rule(chunk=st.integers(1, 8))
    def step_all(self, chunk):
        """One scheduler-like step: every running request without pending tokens grows by up to `chunk`, then all compute."""
        for r in list(self.running):
            if not self.pending[r.request_id]:
                num_new = min(chunk, r.num_tokens - r.num_computed_tokens)
                old_len = len(r.block_ids)
                if self.kv.allocate_slots(r, num_new):
                    for bid in r.block_ids[old_len:]:
                        self.content.pop(bid, None)
                    self.pending[r.request_id] = num_new
                else:
                    EVENTS["growth refused"] += 1
        self.finish_step()

    @precondition(lambda self: any(not self.pending[r.request_id] and r.num_computed_tokens for r in self.running))
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(
            st.sampled_from([r for r in self.running if not self.pending[r.request_id] and r.num_computed_tokens])
        )
        child = self._new_request(None, None, parent=parent)
        num_full = parent.num_computed_tokens // self.bs
        has_partial = parent.num_computed_tokens % self.bs != 0
        before = self._snapshot()
        copies = self.kv.fork(parent, child)
        if copies is None:
            assert has_partial and self.kv.pool.num_free_blocks == 0
            assert self._snapshot() == before and not child.block_ids
            EVENTS["fork refused"] += 1
            return
        assert child.block_ids[:num_full] == parent.block_ids[:num_full]
        assert len(child.block_ids) == len(parent.block_ids) == num_full + has_partial
        if has_partial:
            assert copies == [(parent.block_ids[num_full], child.block_ids[num_full])]
            self.content.pop(child.block_ids[num_full], None)
            EVENTS["fork with copy"] += 1
        else:
            assert copies == []
        child.status = RequestStatus.RUNNING
        self.running.append(child)

    @precondition(lambda self: any(not self.pending[r.request_id] for r in self.running))
    @rule(data=st.data())
    def swap_out(self, data):
        r = data.draw(st.sampled_from([r for r in self.running if not self.pending[r.request_id]]))
        ids = list(r.block_ids)
        before = self._snapshot()
        mapping = self.kv.swap_out(r)
        if mapping is None:
            assert len(ids) > len(before[5]) and self._snapshot() == before and r.block_ids == ids
            return
        assert [g for g, _ in mapping] == ids and [c for _, c in mapping] == r.cpu_block_ids
        assert not r.block_ids
        for g, c in mapping:
            if g in self.content:
                self.cpu_content[c] = self.content[g]
            else:
                self.cpu_content.pop(c, None)
        EVENTS["swapped out"] += 1
        self.running.remove(r)
        r.status = RequestStatus.SWAPPED
        self.swapped.append(r)

    @precondition(lambda self: self.swapped)
    @rule(data=st.data(), chunk=st.integers(1, 24))
    def swap_in(self, data, chunk):
        r = data.draw(st.sampled_from(self.swapped))
        num_new = min(chunk, r.num_tokens - r.num_computed_tokens)
        cpu = list(r.cpu_block_ids)
        before = self._snapshot()
        mapping = self.kv.swap_in(r, num_new, len(self.running))
        if mapping is None:
            assert self._snapshot() == before and r.cpu_block_ids == cpu and not r.block_ids
            return
        assert [c for c, _ in mapping] == cpu and [g for _, g in mapping] == r.block_ids[: len(cpu)]
        assert len(r.block_ids) == max(len(cpu), cdiv(r.num_computed_tokens + num_new, self.bs))
        assert not r.cpu_block_ids
        for bid in r.block_ids:
            self.content.pop(bid, None)
        for c, g in mapping:
            if c in self.cpu_content:
                self.content[g] = self.cpu_content[c]
        EVENTS["swapped in"] += 1
        self.swapped.remove(r)
        r.status = RequestStatus.RUNNING
        self.running.append(r)
        self.pending[r.request_id] = num_new

    @precondition(lambda self: any(not self.pending[r.request_id] for r in self.running))
    @rule(data=st.data())
    def preempt_recompute(self, data):
        r = data.draw(st.sampled_from([r for r in self.running if not self.pending[r.request_id]]))
        self.kv.free(r)
        r.num_computed_tokens = 0
        r.num_preemptions += 1
        r.status = RequestStatus.WAITING
        self.running.remove(r)
        self.waiting.insert(0, r)

    @precondition(lambda self: self.waiting or self.running or self.swapped)
    @rule(data=st.data())
    def abort(self, data):
        r = data.draw(st.sampled_from(self.waiting + self.running + self.swapped))
        self._abort(r)

    def _abort(self, r: Request) -> None:
        for queue in (self.waiting, self.running, self.swapped):
            if r in queue:
                queue.remove(r)
        self.kv.free(r)
        self.kv.free_swapped(r)
        self.pending[r.request_id] = 0
        r.status = RequestStatus.REJECTED
        self.ended.append(r)

    # -- checks --
    @invariant()
    def bookkeeping(self):
        if not hasattr(self, "kv"):
            return
        check_paged(self.kv, self.running, self.swapped, self.waiting[0] if self.waiting else None)
        for r in self.waiting + self.swapped + self.ended:
            assert not r.block_ids, f"{r.request_id} holds GPU blocks outside the running set"
        for r in self.waiting + self.running + self.ended:
            assert not r.cpu_block_ids
        # Every hashed block holds exactly the tokens its hash stands for in every table holding it.
        pool = self.kv.pool
        for r in self.running:
            for i, bid in enumerate(r.block_ids):
                if pool.blocks[bid].block_hash is not None:
                    assert self.content.get(bid) == self._prefix(r, i)
        stats = self.kv.prefix_cache_stats
        assert stats.hits <= stats.queries and stats.recompute_hits <= stats.recompute_queries
        # num_shared_refs and shared_refs (the simulator's shared reads without a pass over every table): the
        # table entries beyond each block's first, in all and by block
        held = [b for r in self.running for b in r.block_ids]
        assert self.kv.num_shared_refs() == len(held) - len(set(held))
        assert self.kv.shared_refs() == {b: n - 1 for b, n in Counter(held).items() if n > 1}

    def teardown(self):
        if not hasattr(self, "kv"):
            return
        for r in self.waiting + self.running + self.swapped:
            self._abort(r)
        check_paged(self.kv, [], [])
        pool = self.kv.pool
        assert pool.num_free_blocks == self.kv.num_gpu_blocks, "GPU blocks leaked"
        assert len(self.kv.free_cpu_blocks) == self.kv.num_cpu_blocks, "CPU blocks leaked"
        assert pool.num_extra_refs == 0 and all(b.ref_cnt == 0 for b in pool.blocks)
        acc = self.kv.accounting([])
        assert acc.used == acc.reserved == acc.internal_fragmentation == 0
        assert acc.free + acc.cached == acc.total
        HIT_TOTAL.append(self.hits)


HIT_TOTAL: list[int] = []
EVENTS: Counter = Counter()
PagedManagerMachine.TestCase.settings = MACHINE_SETTINGS
TestPagedManagerMachine = PagedManagerMachine.TestCase


def test_manager_machine_really_hits_the_prefix_cache():
    """The state machine above is only worth its invariants if prefix caching hits; this runs after it."""
    if not HIT_TOTAL:
        pytest.skip("the state machine did not run in this session")
    assert sum(h > 0 for h in HIT_TOTAL) >= 5, f"too few runs with prefix hits: {HIT_TOTAL}"
    wanted = ["admitted", "admitted with prefix hit", "admission refused", "growth refused", "fork with copy",
              "fork refused", "swapped out", "swapped in", "finished", "blocks cached", "lookup"]
    assert all(EVENTS[w] >= 3 for w in wanted), f"some operations were (almost) never exercised: {dict(EVENTS)}"
    print(dict(EVENTS))


# ---- level (b): the scheduler ----------------------------------------------------------------------
@st.composite
def scheduler_configs(draw):
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    max_model_len = draw(st.integers(4, 64))
    chunked = draw(st.booleans())
    if chunked:
        budget = draw(st.integers(1, 64))
    else:
        budget = draw(st.integers(max_model_len, max_model_len + 32))
    mode = draw(st.sampled_from(["recompute", "swap"]))
    layout = draw(st.sampled_from(["paged", "paged", "contiguous"]))
    return Config(
        model="toy",
        block_size=block_size,
        num_gpu_blocks=draw(st.integers(2, 40)),
        max_model_len=max_model_len,
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.booleans()),
        preemption_mode=mode,
        swap_space=swap_space_for(draw(st.integers(0, 16)), "toy", block_size) if mode == "swap" else 0.0,
        watermark=draw(st.sampled_from([0.0, 0.01, 0.1])),
        kv_layout=layout,
        reserve_policy=draw(st.sampled_from(["max", "pow2", "oracle"])),
    )


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.requests: list[Request] = []
        self.saw: set[str] = set()
        self.tables: dict[str, tuple[list, list]] = {}  # request id -> (its table as last scheduled, a copy)

    @initialize(config=scheduler_configs(), group=st.booleans())
    def setup(self, config, group):
        self.scheduler = Scheduler(config)
        self.scheduler.group_decodes = group  # the simulator's fast path takes a step's leading decodes as one group
        self.now = 0.0

    @rule(prompt=prompts, output_len=st.integers(1, 40), n=st.sampled_from([1, 1, 2, 3]))
    def add_request(self, prompt, output_len, n):
        i = len(self.requests)
        r = Request(f"r{i}", self.now, len(prompt), output_len, seq_no=i, prompt_token_ids=prompt, n=n)
        self.requests.append(r)
        s = self.scheduler
        accepted = s.add_request(r)
        too_long = len(prompt) >= s.max_model_len  # vLLM rejects such prompts; a long output is cut instead
        too_many_samples = n > s.config.max_num_seqs
        assert accepted == (not too_long and not too_many_samples and s.kv.rejection_reason(r) is None)
        if not accepted:
            assert r.status == RequestStatus.REJECTED and r.reject_reason
            self.saw.add("rejected")

    @rule()
    def step(self):
        self._step()

    def _step(self):
        s = self.scheduler
        running_before = [r.request_id for r in s.running]
        plan = s.schedule(self.now)
        check_plan(s, plan, running_before)
        check_scheduler(s)
        for r in s.running:  # the engine keeps each table's array form by it (engine.executor._Tokens.block_row)
            seen = self.tables.get(r.request_id)
            if seen is not None and seen[0] is r.block_ids:
                assert r.block_ids[: len(seen[1])] == seen[1], f"{r.request_id}'s block table changed in place"
            self.tables[r.request_id] = (r.block_ids, list(r.block_ids))
        # the recorder reads the decode summary unchecked during the step: the one before it is stale by now
        assert s.decode_summary is s.decode_summary_now(), "a stale decode summary read during the step"
        if plan.preempted:
            self.saw.add("preempted")
        if plan.blocks_to_swap_out:
            self.saw.add("swapped")
        if plan.blocks_to_copy:
            self.saw.add("copied")
        if plan.decode_group:
            self.saw.add("decode group")
        self.now += 1.0
        s.finish_step(plan, self.now)
        check_scheduler(s)
        summary = s.decode_summary_now()  # what the fast path reads instead of a pass over the running requests
        # the hot paths read the attribute unchecked: between steps it is the checked one or None, never stale
        assert s.decode_summary is summary, "a stale decode summary left for the fast path and the recorder"
        if summary is not None:
            assert s.group_decodes and all(r.is_decoding for r in s.running)
            if s.running:
                assert summary.fewest_left == min(r.output_len - r.num_output_tokens for r in s.running)
                assert summary.total_computed == sum(r.num_computed_tokens for r in s.running)
                assert summary.max_computed == max(r.num_computed_tokens for r in s.running)
            self.saw.add("decode summary")
        return plan

    def teardown(self):
        if not hasattr(self, "scheduler"):
            return
        s = self.scheduler
        empty = 0
        for _ in range(20_000):
            if not s.has_work():
                break
            plan = self._step()
            empty = empty + 1 if plan.is_empty else 0
            assert empty < 3, "scheduler stuck: work remains but nothing is scheduled"
        assert_all_done(s, self.requests)
        for r in self.requests:
            if r.status == RequestStatus.FINISHED and r.n > 1:
                samples = [x for x in s.finished if x.request_id == r.request_id or x.parent_id == r.request_id]
                assert len(samples) == r.n, f"{r.request_id} (n={r.n}) produced {len(samples)} samples"
        SEEN.update(self.saw)


SEEN: set[str] = set()
SchedulerMachine.TestCase.settings = settings(
    max_examples=600, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck),
    derandomize=True,  # the coverage check after it: the same examples in every run (it failed once at random)
)
TestSchedulerMachine = SchedulerMachine.TestCase


def test_scheduler_machine_reaches_the_interesting_paths():
    """Rejection, preemption, swapping and fork copies all happened in the random runs above."""
    if not SEEN:
        pytest.skip("the state machine did not run in this session")
    assert {"rejected", "preempted", "swapped", "copied", "decode group", "decode summary"} <= SEEN, f"only saw {sorted(SEEN)}"


@given(st.lists(st.integers(0, 15), max_size=40), st.integers(1, 200))
def test_a_runs_block_count_is_its_block_steps(firsts, k):
    """num_block_steps (allocate_decode_steps' count) and block_steps (the steps the recorder and evictions read) say
    the same rule: each request takes a block at its first step, then every block_size steps while the run lasts."""
    from pagesim.kv_manager import block_steps, num_block_steps

    firsts = sorted(j for j in firsts if j < k)
    steps = block_steps(firsts, k, 16)
    assert num_block_steps(firsts, k, 16) == len(steps)
    assert sorted(steps) == sorted(j + p for j in firsts for p in range(0, k, 16) if j + p < k)
