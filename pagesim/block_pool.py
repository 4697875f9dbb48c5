"""The physical KV blocks of the GPU cache: free queue, reference counts, prefix-cache index.

Invariants (checked by tests/test_kv_paged_properties.py):
- a block is in the free queue exactly when its ref_cnt is 0;
- the free queue is in eviction order: blocks are taken from the front; freed
  blocks holding a cached prefix are appended at the back (least recently used
  first), freed blocks with nothing cached go to the front (reused first);
- block 0 is the null block: never in the free queue, never allocated;
- a block keeps its hash after it is freed, so it can still be hit, until it is
  taken from the free queue for new content (then its hash is evicted);
- `cached_block_hash_to_block` maps each hash to the blocks holding it (one or
  more, as vLLM's BlockHashToBlockMap), and every block with a hash is in it.

How the queue is stored: a block gets a hash only while it is held, and
uncached blocks are freed to the front, cached ones to the back, so the queue
is always [free blocks without a hash][free blocks with a hash, LRU first].
The first part is a list used as a stack (its end is the queue's front), so a
request's blocks are taken and given back with list slices, no per-block
Python; the second is an OrderedDict (O(1) removal from the middle on a hit).
Reference counts are not stored per block: a block that is not free has 1,
plus its entry in `_extra_refs` when it is shared (a prefix hit or a fork).
The kv manager works on block ids (`take`, `free_ids`, `touch_ids`); the
`Block` objects are views for callers that want them (`get_new_blocks`, tests).
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import repeat

from pagesim.utils import paused_gc

# Block event kinds, consumed by recorders.
ALLOCATED, FREED, STORED, REMOVED = "allocated", "freed", "stored", "removed"


class Block:
    """A view of one physical block of a BlockPool: its id, reference count and hash (read from the pool)."""

    __slots__ = ("block_id", "_pool")

    def __init__(self, block_id: int, pool: "BlockPool"):
        self.block_id = block_id
        self._pool = pool

    @property
    def ref_cnt(self) -> int:
        return self._pool.ref_cnt(self.block_id)

    @property
    def block_hash(self) -> bytes | None:
        """The prefix-cache key (block_hash.py) while the block holds a cached full block."""
        return self._pool.block_hashes[self.block_id]

    def __repr__(self) -> str:
        return f"Block({self.block_id}, ref_cnt={self.ref_cnt}, block_hash={self.block_hash!r})"


class BlockPool:
    """`num_blocks` blocks; a free queue in LRU order with O(1) removal from the middle."""

    def __init__(self, num_blocks: int, record_events: bool = False):
        self.num_blocks = num_blocks
        self._blocks: list[Block] | None = None  # the views by id, made on first use (`blocks`)
        self.block_hashes: list[bytes | None] = [None] * num_blocks
        # Block 0 is vLLM's null block (vllm/v1/core/block_pool.py BlockPool.__init__): never allocated,
        # so `num_blocks` blocks hold num_blocks - 1 blocks of KV. Front of the queue = end of the stack.
        self._free_uncached: list[int] = list(range(num_blocks - 1, 0, -1))
        self._free_cached: OrderedDict[int, None] = OrderedDict()  # LRU first
        # len(_free_uncached) + len(_free_cached), kept as the queue changes (asked ~3 times a simulated step)
        self.num_free_blocks = len(self._free_uncached)
        # len(_free_cached): blocks in the free queue that still hold a hash, kept likewise (asked twice a decode run)
        self.num_free_cached = 0
        self._extra_refs: dict[int, int] = {}  # block id -> ref_cnt - 1, for shared blocks only
        self._num_hashed = 0  # blocks holding a hash
        self._version = 0  # bumped when the uncached part of the queue changes (for _free_set)
        self._free_set_cache: tuple[int, frozenset] = (-1, frozenset())
        self.cached_block_hash_to_block: dict[bytes, dict[int, Block]] = {}  # hash -> holders, first inserted first
        self.num_extra_refs = 0  # sum over blocks in use of (ref_cnt - 1): sharing
        self.events: list[tuple] | None = [] if record_events else None

    # ---- queries -----------------------------------------------------------
    @property
    def blocks(self) -> list[Block]:
        """A view of each block, by id. Made on first use (a replay without prefix caching never asks), with the
        cyclic collector paused: an H200 pool's ~57k new tracked objects would otherwise trigger collections
        that rescan everything alive."""
        if self._blocks is None:
            with paused_gc():
                self._blocks = list(map(Block, range(self.num_blocks), repeat(self, self.num_blocks)))
        return self._blocks

    @property
    def num_usable_blocks(self) -> int:
        """Blocks that can hold KV: all but the null block."""
        return self.num_blocks - 1

    @property
    def num_used_blocks(self) -> int:
        """Blocks held by requests (the null block is neither used nor free)."""
        return self.num_blocks - 1 - self.num_free_blocks

    @property
    def free_queue(self) -> OrderedDict[int, Block]:
        """The free queue in eviction order, front first (a copy: id -> Block)."""
        blocks = self.blocks
        out = OrderedDict((b, blocks[b]) for b in reversed(self._free_uncached))
        out.update((b, blocks[b]) for b in self._free_cached)
        return out

    @property
    def extra_refs(self) -> dict[int, int]:
        """Block id -> ref_cnt - 1 of each shared block (ref_cnt > 1): the pool's own dict, to be read, not changed."""
        return self._extra_refs

    def ref_cnt(self, block_id: int) -> int:
        """How many block tables hold the block (0: free, or the null block)."""
        if block_id == 0 or block_id in self._free_cached:
            return 0
        extra = self._extra_refs.get(block_id)
        if extra:
            return 1 + extra
        return 0 if block_id in self._free_set() else 1

    def _free_set(self) -> frozenset:
        if self._free_set_cache[0] != self._version:
            self._free_set_cache = (self._version, frozenset(self._free_uncached))
        return self._free_set_cache[1]

    def num_free_among(self, block_ids) -> int:
        """How many of these prefix-hit blocks sit in the free queue (hit blocks hold a hash)."""
        cached = self._free_cached
        return sum(1 for b in block_ids if b in cached)

    def get_cached_block(self, block_hash: bytes) -> Block | None:
        """The first cached block holding this content (vLLM's BlockHashToBlockMap.get_one_block)."""
        holders = self.cached_block_hash_to_block.get(block_hash)
        return next(iter(holders.values())) if holders else None

    def cached_free_blocks(self) -> list[Block]:
        """Free blocks that still hold a cached prefix, in queue order."""
        return [self.blocks[b] for b in self._free_cached]

    def cached_free_block_ids(self) -> list[int]:
        return list(self._free_cached)

    # ---- allocation ----------------------------------------------------------
    def get_new_blocks(self, n: int, evicted: list[bool] | None = None) -> list[Block]:
        """Take `n` blocks in eviction order: least recently freed first (caller checked there are enough).

        A taken block that still held a cached prefix loses it (is evicted);
        with `evicted`, one flag per block taken says whether it was.
        """
        return [self.blocks[b] for b in self.take(n, evicted)]

    def take(self, n: int, evicted: list[bool] | None = None) -> list[int]:
        """`get_new_blocks`, as block ids."""
        stack = self._free_uncached
        m = len(stack)
        if n > m + len(self._free_cached):
            raise ValueError(f"asked for {n} blocks with {self.num_free_blocks} free")
        if n <= 0:
            return []
        self._version += 1
        self.num_free_blocks -= n
        events = self.events
        if n <= m:
            out = stack[-1:-n - 1:-1]  # the top n, top first (one reversed slice)
            del stack[m - n:]
            if evicted is not None:
                evicted.extend([False] * n)
            if events is not None:
                events.extend([(ALLOCATED, b) for b in out])
            return out
        out = stack[::-1]
        stack.clear()
        if evicted is not None:
            evicted.extend([False] * m)
        if events is not None:
            events.extend([(ALLOCATED, b) for b in out])
        popitem = self._free_cached.popitem
        self.num_free_cached -= n - m
        for _ in range(n - m):
            b, _ = popitem(last=False)
            if evicted is not None:
                evicted.append(True)
            self._evict(b)
            out.append(b)
            if events is not None:
                events.append((ALLOCATED, b))
        return out

    def _evict(self, block_id: int) -> None:
        block_hash = self.block_hashes[block_id]
        holders = self.cached_block_hash_to_block[block_hash]
        del holders[block_id]
        if not holders:
            del self.cached_block_hash_to_block[block_hash]
        if self.events is not None:
            self.events.append((REMOVED, block_id))
        self.block_hashes[block_id] = None
        self._num_hashed -= 1

    def touch(self, blocks: list[Block]) -> None:
        """Add a reference to each block (a prefix-cache hit or a fork); free ones leave the queue.

        Only blocks in use or holding a hash are touched (a free block without one is never hit)."""
        self.touch_ids([b.block_id for b in blocks])

    def touch_ids(self, block_ids) -> None:
        cached, extra = self._free_cached, self._extra_refs
        for b in block_ids:
            if b in cached:
                del cached[b]
                self.num_free_blocks -= 1
                self.num_free_cached -= 1
            else:
                extra[b] = extra.get(b, 0) + 1
                self.num_extra_refs += 1

    def free_blocks(self, blocks) -> None:
        """Drop one reference from each block, in the given order, as vLLM's BlockPool.free_blocks does:
        unreferenced blocks holding a cached prefix join the back of the queue (LRU eviction), the others
        go to the front, in the given order (reused first).

        Callers pass a request's blocks tail first, so that its prefix blocks,
        the likeliest to be hit again, are evicted last.
        """
        self.free_ids([b.block_id for b in blocks])

    def free_table(self, block_ids: list[int]) -> None:
        """Free a block table tail first: `free_ids(block_ids[::-1])`, without the reversed copy when nothing is
        shared or cached (the blocks then go to the front of the queue as they are listed)."""
        if not self._extra_refs and not self._num_hashed and self.events is None:
            self._version += 1
            self._free_uncached.extend(block_ids)  # free_ids' extend(reversed(tail first))
            self.num_free_blocks += len(block_ids)
            return
        self.free_ids(block_ids[::-1])

    def free_ids(self, block_ids: list[int]) -> None:
        """`free_blocks`, by block ids (a list, in the given order)."""
        self._version += 1
        events = self.events
        if not self._extra_refs and not self._num_hashed:  # nothing shared, nothing cached: all to the front
            if events is not None:
                events.extend([(FREED, b) for b in block_ids])
            self._free_uncached.extend(reversed(block_ids))
            self.num_free_blocks += len(block_ids)
            return
        extra, hashes, cached = self._extra_refs, self.block_hashes, self._free_cached
        to_front = []
        for b in block_ids:
            e = extra.get(b)
            if e:
                if e == 1:
                    del extra[b]
                else:
                    extra[b] = e - 1
                self.num_extra_refs -= 1
                continue
            if hashes[b] is not None:
                cached[b] = None
            else:
                to_front.append(b)
            if events is not None:
                events.append((FREED, b))
        to_front.reverse()
        self._free_uncached.extend(to_front)
        self.num_free_cached = len(cached)
        self.num_free_blocks = len(self._free_uncached) + self.num_free_cached

    def cache_block(self, block: Block, block_hash: bytes) -> bool:
        """Register a full block's content hash; False if the block has one already. Two blocks may hold
        the same content (computed before either was cached): both are indexed, as in vLLM, so the
        content stays findable until the last copy is evicted."""
        return self.cache_block_id(block.block_id, block_hash)

    def cache_block_id(self, block_id: int, block_hash: bytes) -> bool:
        if self.block_hashes[block_id] is not None:
            return False
        self.block_hashes[block_id] = block_hash
        self._num_hashed += 1
        self.cached_block_hash_to_block.setdefault(block_hash, {})[block_id] = self.blocks[block_id]
        if self.events is not None:
            self.events.append((STORED, block_id))
        return True
