"""BlockPool: free queue in vLLM's order, reference counts, prefix-cache hashes kept until reuse, null block 0.

Example-based tests of the behaviours block_pool.py promises, plus a
hypothesis state machine over the pool alone (the pool's bookkeeping after
every operation, against a plain model of who holds which block).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pagesim.block_pool import ALLOCATED, FREED, REMOVED, STORED, BlockPool


def pool_invariants(pool: BlockPool) -> None:
    free_ids = set(pool.free_queue)
    assert free_ids == {b.block_id for b in pool.blocks[1:] if b.ref_cnt == 0}, "free queue != blocks with ref_cnt 0"
    assert pool.blocks[0].ref_cnt == 0 and 0 not in free_ids, "the null block was handed out"
    assert all(b.ref_cnt >= 0 for b in pool.blocks)
    assert pool.num_free_blocks + pool.num_used_blocks == pool.num_blocks - 1
    for h, holders in pool.cached_block_hash_to_block.items():
        assert holders and all(b.block_hash == h for b in holders.values())
    hashed = [b for b in pool.blocks if b.block_hash is not None]
    assert len(hashed) == sum(len(v) for v in pool.cached_block_hash_to_block.values())
    assert pool.num_free_cached == sum(1 for b in hashed if b.ref_cnt == 0)
    assert pool.num_extra_refs == sum(b.ref_cnt - 1 for b in pool.blocks if b.ref_cnt > 0)


def test_new_blocks_come_from_the_front_and_freed_uncached_blocks_are_reused_first():
    pool = BlockPool(5)
    a = pool.get_new_blocks(2)
    assert [b.block_id for b in a] == [1, 2], "block 0 is the null block"
    assert all(b.ref_cnt == 1 for b in a)
    pool.free_blocks(reversed(a))  # a request frees tail first
    assert list(pool.free_queue) == [2, 1, 3, 4]
    assert [b.block_id for b in pool.get_new_blocks(4)] == [2, 1, 3, 4]
    assert pool.num_free_blocks == 0 and pool.num_used_blocks == 4
    pool_invariants(pool)


def test_asking_for_more_blocks_than_free_raises_and_changes_nothing():
    pool = BlockPool(3)
    pool.get_new_blocks(1)
    with pytest.raises(ValueError):
        pool.get_new_blocks(2)
    assert pool.num_free_blocks == 1
    pool_invariants(pool)


def test_freed_block_keeps_its_hash_until_reused_then_it_is_evicted():
    pool = BlockPool(3, record_events=True)
    (b0,) = pool.get_new_blocks(1)
    assert b0.block_id == 1
    assert pool.cache_block(b0, 111)
    pool.free_blocks([b0])
    assert pool.get_cached_block(111) is b0 and pool.num_free_cached == 1
    pool_invariants(pool)
    # A hit on the free cached block takes it out of the free queue without evicting it.
    pool.touch([b0])
    assert b0.ref_cnt == 1 and 1 not in pool.free_queue and pool.num_free_cached == 0
    pool.free_blocks([b0])
    # Block 2 is older in the queue: it is reused first; then block 1 is reused and its hash evicted.
    (x,) = pool.get_new_blocks(1)
    assert x.block_id == 2 and pool.get_cached_block(111) is b0
    (y,) = pool.get_new_blocks(1)
    assert y is b0 and y.block_hash is None and pool.get_cached_block(111) is None
    assert pool.num_free_cached == 0
    assert (REMOVED, 1) in pool.events and (STORED, 1) in pool.events
    assert pool.events[0] == (ALLOCATED, 1) and (FREED, 1) in pool.events
    pool_invariants(pool)


def test_same_content_in_two_blocks_stays_findable_until_both_are_evicted():
    pool = BlockPool(3)
    a, b = pool.get_new_blocks(2)
    assert pool.cache_block(a, 7)
    assert pool.cache_block(b, 7), "a second copy of the content is indexed too (vLLM's BlockHashToBlockMap)"
    assert not pool.cache_block(a, 8), "a block is hashed once"
    assert pool.get_cached_block(7) is a, "the first copy is found first"
    pool.free_blocks([a, b])
    pool.get_new_blocks(1)  # evicts a
    assert pool.get_cached_block(7) is b
    pool_invariants(pool)


def test_touch_counts_sharing_and_free_drops_it():
    pool = BlockPool(3)
    (a,) = pool.get_new_blocks(1)
    pool.cache_block(a, 5)
    pool.touch([a])
    pool.touch([a])
    assert a.ref_cnt == 3 and pool.num_extra_refs == 2
    pool.free_blocks([a, a])
    assert a.ref_cnt == 1 and pool.num_extra_refs == 0 and a.block_id not in pool.free_queue
    pool.free_blocks([a])
    assert a.ref_cnt == 0 and pool.num_free_cached == 1
    pool_invariants(pool)


def test_taking_blocks_reports_which_ones_evicted_a_cached_prefix():
    pool = BlockPool(4)
    a, b, c = pool.get_new_blocks(3)
    assert pool.cache_block(b, b"kb")
    pool.free_blocks([a, b, c])  # uncached a, c to the front in order, cached b to the back
    evicted = []
    taken = pool.get_new_blocks(3, evicted)
    assert [x.block_id for x in taken] == [1, 3, 2] and evicted == [False, False, True]
    assert pool.get_cached_block(b"kb") is None and pool.cached_free_blocks() == []


class BlockPoolMachine(RuleBasedStateMachine):
    """Random get/touch/free/cache sequences against a model: owner lists of block ids and the LRU order.

    The model's free list is the eviction order: blocks are taken from its head;
    blocks whose last reference is dropped join its tail if they hold a hash, else
    its head (in the order freed); a touched free block leaves it from wherever it is.
    """

    def __init__(self):
        super().__init__()
        self.pool = BlockPool(7)
        self.holders: list[list[int]] = []  # each holder: the block ids it references (one ref each)
        self.lru: list[int] = list(range(1, 7))  # free block ids, next to be taken first (0 is the null block)

    def _refs(self, block_id: int) -> int:
        return sum(ids.count(block_id) for ids in self.holders)

    @rule(n=st.integers(0, 3))
    def get(self, n):
        if n > self.pool.num_free_blocks:
            with pytest.raises(ValueError):
                self.pool.get_new_blocks(n)
            return
        evicting = [b for b in list(self.pool.free_queue.values())[:n] if b.block_hash is not None]
        blocks = self.pool.get_new_blocks(n)
        expected, self.lru = self.lru[:n], self.lru[n:]
        assert [b.block_id for b in blocks] == expected, (
            f"took blocks {[b.block_id for b in blocks]}, not the least recently freed {expected}"
        )
        assert all(b.block_hash is None for b in blocks)
        for b in evicting:
            assert all(b.block_id not in v for v in self.pool.cached_block_hash_to_block.values())
        self.holders.append([b.block_id for b in blocks])

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def touch(self, data):
        src = data.draw(st.sampled_from(self.holders))
        hashed = [i for i in src if self.pool.blocks[i].block_hash is not None]
        self.pool.touch([self.pool.blocks[i] for i in hashed])
        self.holders.append(hashed)
        self.lru = [i for i in self.lru if i not in hashed]

    @rule(h=st.integers(0, 4))
    def touch_cached(self, h):
        """A prefix-cache hit: a block found by hash, possibly sitting free in the queue."""
        b = self.pool.get_cached_block(h)
        if b is not None:
            self.pool.touch([b])
            self.holders.append([b.block_id])
            self.lru = [i for i in self.lru if i != b.block_id]

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def free(self, data):
        i = data.draw(st.integers(0, len(self.holders) - 1))
        ids = self.holders.pop(i)
        self.pool.free_blocks(self.pool.blocks[j] for j in reversed(ids))
        freed = [j for j in reversed(ids) if self._refs(j) == 0]
        hashed = [j for j in freed if self.pool.blocks[j].block_hash is not None]
        self.lru = [j for j in freed if j not in hashed] + self.lru + hashed

    @precondition(lambda self: self.holders)
    @rule(data=st.data(), h=st.integers(0, 4))
    def cache(self, data, h):
        ids = data.draw(st.sampled_from(self.holders))
        if ids:
            b = self.pool.blocks[data.draw(st.sampled_from(ids))]
            expect = b.block_hash is None  # a second copy of a content is indexed too
            assert self.pool.cache_block(b, h) == expect

    @invariant()
    def consistent(self):
        pool_invariants(self.pool)
        refs = [0] * self.pool.num_blocks
        for ids in self.holders:
            for i in ids:
                refs[i] += 1
        assert refs == [b.ref_cnt for b in self.pool.blocks], "ref counts differ from the holders"
        assert list(self.pool.free_queue) == self.lru, (
            f"free queue {list(self.pool.free_queue)} is not in LRU order {self.lru}"
        )

    def teardown(self):
        while self.holders:
            ids = self.holders.pop()
            self.pool.free_blocks(self.pool.blocks[j] for j in ids)
        assert self.pool.num_free_blocks == self.pool.num_blocks - 1 and self.pool.num_extra_refs == 0


BlockPoolMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
)
TestBlockPoolMachine = BlockPoolMachine.TestCase


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data(), st.booleans())
def test_free_table_is_free_ids_tail_first(data, record_events):
    """BlockPool.free_table(table) (KV managers free a request's table by it) leaves the pool exactly as
    free_ids(table[::-1]) does: free queue order, hashes, shared references and events, whether or not blocks
    are shared or cached (its shortcut covers neither)."""
    pools = [BlockPool(24, record_events) for _ in range(2)]
    tables = []
    for _ in range(data.draw(st.integers(1, 5))):
        n = data.draw(st.integers(1, 4))
        if n > pools[0].num_free_blocks:
            break
        taken = [p.take(n) for p in pools]
        assert taken[0] == taken[1]
        tables.append(taken[0])
    for b in data.draw(st.lists(st.sampled_from([b for t in tables for b in t]), max_size=3)) if tables else []:
        for p in pools:
            p.cache_block_id(b, b"h%d" % b)  # a full block's hash: a cached prefix once freed
    for t in data.draw(st.lists(st.sampled_from(tables), max_size=2, unique_by=id)) if tables else []:
        for p in pools:
            p.touch_ids(t[:1])  # a prefix hit: the block is shared
    for i in data.draw(st.permutations(range(len(tables)))):
        pools[0].free_table(tables[i])
        pools[1].free_ids(tables[i][::-1])
        assert pools[0].free_queue.keys() == pools[1].free_queue.keys()
        assert list(pools[0].free_queue) == list(pools[1].free_queue)
        assert pools[0].block_hashes == pools[1].block_hashes and pools[0].events == pools[1].events
        assert pools[0]._extra_refs == pools[1]._extra_refs and pools[0].num_extra_refs == pools[1].num_extra_refs
        pool_invariants(pools[0])
