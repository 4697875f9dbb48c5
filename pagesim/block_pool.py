"""The physical KV blocks of the GPU cache: free queue, reference counts, prefix-cache index.

Invariants (checked by tests/test_kv_paged_properties.py):
- a block is in the free queue exactly when its ref_cnt is 0;
- the free queue is in eviction order: blocks are taken from the front and
  freed blocks are appended at the back (least recently used first);
- a block keeps its hash after it is freed, so it can still be hit, until it is
  taken from the free queue for new content (then its hash is evicted);
- `cached_block_hash_to_block` maps each hash to exactly one block holding it,
  and every block with a hash is in the map.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

# Block event kinds, consumed by recorders.
ALLOCATED, FREED, STORED, REMOVED = "allocated", "freed", "stored", "removed"


@dataclass(slots=True, eq=False)
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: bytes | None = None  # prefix-cache key (block_hash.py) while the block holds a cached full block


class BlockPool:
    """`num_blocks` blocks; a free queue in LRU order with O(1) removal from the middle.

    The free queue is an OrderedDict (a hash map over a doubly linked list):
    popping the front, appending at the back and removing a touched block from
    the middle are all O(1).
    """

    def __init__(self, num_blocks: int, record_events: bool = False):
        self.num_blocks = num_blocks
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in self.blocks)
        self.cached_block_hash_to_block: dict[bytes, Block] = {}
        self.num_free_cached = 0  # blocks in the free queue that still hold a hash
        self.num_extra_refs = 0  # sum over blocks in use of (ref_cnt - 1): sharing
        self.events: list[tuple] | None = [] if record_events else None

    # ---- queries -----------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def get_cached_block(self, block_hash: bytes) -> Block | None:
        return self.cached_block_hash_to_block.get(block_hash)

    def cached_free_blocks(self) -> list[Block]:
        """Free blocks that still hold a cached prefix."""
        return [b for b in self.free_queue.values() if b.block_hash is not None]

    # ---- allocation ----------------------------------------------------------
    def get_new_blocks(self, n: int, evicted: list[bool] | None = None) -> list[Block]:
        """Take `n` blocks in eviction order: least recently freed first (caller checked there are enough).

        A taken block that still held a cached prefix loses it (is evicted);
        with `evicted`, one flag per block taken says whether it was.
        """
        if n > len(self.free_queue):
            raise ValueError(f"asked for {n} blocks with {len(self.free_queue)} free")
        out = []
        popitem = self.free_queue.popitem
        events = self.events
        for _ in range(n):
            _, block = popitem(last=False)
            if evicted is not None:
                evicted.append(block.block_hash is not None)
            if block.block_hash is not None:
                self._evict(block)
            block.ref_cnt = 1
            out.append(block)
            if events is not None:
                events.append((ALLOCATED, block.block_id))
        return out

    def _evict(self, block: Block) -> None:
        del self.cached_block_hash_to_block[block.block_hash]
        if self.events is not None:
            self.events.append((REMOVED, block.block_id))
        block.block_hash = None
        self.num_free_cached -= 1

    def touch(self, blocks: list[Block]) -> None:
        """Add a reference to each block (a prefix-cache hit or a fork); free ones leave the queue."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self.free_queue[block.block_id]
                if block.block_hash is not None:
                    self.num_free_cached -= 1
            else:
                self.num_extra_refs += 1
            block.ref_cnt += 1

    def free_blocks(self, blocks) -> None:
        """Drop one reference from each block, in the given order; unreferenced ones join the back of the queue.

        Callers pass a request's blocks tail first, so that its prefix blocks,
        the likeliest to be hit again, are evicted last.
        """
        free_queue, events = self.free_queue, self.events
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                free_queue[block.block_id] = block
                if block.block_hash is not None:
                    self.num_free_cached += 1
                if events is not None:
                    events.append((FREED, block.block_id))
            else:
                self.num_extra_refs -= 1

    def cache_block(self, block: Block, block_hash: bytes) -> bool:
        """Register a full block's content hash; False if another block already holds that content."""
        if block.block_hash is not None or block_hash in self.cached_block_hash_to_block:
            return False
        block.block_hash = block_hash
        self.cached_block_hash_to_block[block_hash] = block
        if self.events is not None:
            self.events.append((STORED, block.block_id))
        return True
