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
        # Block 0 is vLLM's null block (vllm/v1/core/block_pool.py BlockPool.__init__): never allocated,
        # so `num_blocks` blocks hold num_blocks - 1 blocks of KV.
        self.free_queue: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in self.blocks[1:])
        self.cached_block_hash_to_block: dict[bytes, dict[int, Block]] = {}  # hash -> holders, first inserted first
        self.num_free_cached = 0  # blocks in the free queue that still hold a hash
        self.num_extra_refs = 0  # sum over blocks in use of (ref_cnt - 1): sharing
        self.events: list[tuple] | None = [] if record_events else None

    # ---- queries -----------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_usable_blocks(self) -> int:
        """Blocks that can hold KV: all but the null block."""
        return self.num_blocks - 1

    @property
    def num_used_blocks(self) -> int:
        """Blocks held by requests (the null block is neither used nor free)."""
        return self.num_blocks - 1 - len(self.free_queue)

    def get_cached_block(self, block_hash: bytes) -> Block | None:
        """The first cached block holding this content (vLLM's BlockHashToBlockMap.get_one_block)."""
        holders = self.cached_block_hash_to_block.get(block_hash)
        return next(iter(holders.values())) if holders else None

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
        holders = self.cached_block_hash_to_block[block.block_hash]
        del holders[block.block_id]
        if not holders:
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
        """Drop one reference from each block, in the given order, as vLLM's BlockPool.free_blocks does:
        unreferenced blocks holding a cached prefix join the back of the queue (LRU eviction), the others
        go to the front, in the given order (reused first).

        Callers pass a request's blocks tail first, so that its prefix blocks,
        the likeliest to be hit again, are evicted last.
        """
        free_queue, events = self.free_queue, self.events
        to_front = []
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is not None:
                    free_queue[block.block_id] = block
                    self.num_free_cached += 1
                else:
                    to_front.append(block)
                if events is not None:
                    events.append((FREED, block.block_id))
            else:
                self.num_extra_refs -= 1
        for block in reversed(to_front):
            free_queue[block.block_id] = block
            free_queue.move_to_end(block.block_id, last=False)

    def cache_block(self, block: Block, block_hash: bytes) -> bool:
        """Register a full block's content hash; False if the block has one already. Two blocks may hold
        the same content (computed before either was cached): both are indexed, as in vLLM, so the
        content stays findable until the last copy is evicted."""
        if block.block_hash is not None:
            return False
        block.block_hash = block_hash
        self.cached_block_hash_to_block.setdefault(block_hash, {})[block.block_id] = block
        if self.events is not None:
            self.events.append((STORED, block.block_id))
        return True
