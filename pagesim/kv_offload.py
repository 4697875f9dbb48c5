"""The host (CPU) tier behind the GPU prefix cache, after vLLM's native KV offloading.

vLLM (v1, `kv_offloading_size` with the native backend: OffloadingConnector + LRUOffloadingManager)
keeps a host block pool indexed by block hash, with its own LRU. This class is that manager, in GPU
blocks (vLLM's offloaded block size may be a multiple of the GPU's; here it equals it):

- stored: full prompt blocks, once each (a hash already on the host is not stored again), on compute:
  the step that fills a block prepares its store; the copy (GPU -> host) runs during the next step,
  overlapped with its compute, and the block becomes loadable when that step ends;
- evicted: least recently used first, among host blocks that are ready and not being loaded; when
  no block can be evicted the store is dropped (vLLM's prepare_store returning None);
- looked up after the GPU: a request's hits are its leading GPU-cached blocks, then the host blocks
  that continue the run (`lookup`); every block a request hits, on either tier, is touched;
- loaded: a host hit gets a fresh GPU block at admission; the copy (host -> GPU) runs in the step
  that admits the request, before its remaining prefill (vLLM instead parks the request in
  WAITING_FOR_REMOTE_KVS for at least one step while the load runs asynchronously; see the README).

Block states (checked by tests/test_kv_offload.py): a host block id is free, or holds one hash in
`blocks` (ready, or in flight: being stored, or ready and being loaded); a hash is in at most one block.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class HostBlock:
    block_id: int
    block_hash: bytes
    ready: bool = False  # False while its store is in flight
    ref_cnt: int = 0  # loads in flight from this block


@dataclass(slots=True)
class OffloadStats:
    """Blocks moved per direction and what the tier did, since the start of the run."""

    stored_blocks: int = 0  # GPU -> host copies issued
    loaded_blocks: int = 0  # host -> GPU copies issued
    evicted_blocks: int = 0
    dropped_stores: int = 0  # stores refused: no host block could be evicted


@dataclass(slots=True)
class HostKVCache:
    num_blocks: int
    blocks: OrderedDict = field(default_factory=OrderedDict)  # hash -> HostBlock, least recently used first
    free_ids: list[int] = field(default_factory=list)
    stats: OffloadStats = field(default_factory=OffloadStats)
    # Transfers prepared since the last plan was made, and those of the plan being executed:
    # (pair, host block); pairs are (gpu, host) for stores and (host, gpu) for loads.
    _pending_stores: list = field(default_factory=list)
    _pending_loads: list = field(default_factory=list)
    _issued_stores: list = field(default_factory=list)
    _issued_loads: list = field(default_factory=list)

    def __post_init__(self):
        self.free_ids = list(range(self.num_blocks - 1, -1, -1))  # pop() gives the lowest id

    # ---- questions ---------------------------------------------------------------------
    def lookup(self, hashes) -> int:
        """How many of `hashes`, from the first, are ready on the host."""
        n = 0
        for h in hashes:
            b = self.blocks.get(h)
            if b is None or not b.ready:
                break
            n += 1
        return n

    def contains(self, block_hash: bytes) -> bool:
        return block_hash in self.blocks

    @property
    def num_in_flight(self) -> int:
        """Host blocks being stored, or being loaded from (each counted once)."""
        return sum(1 for b in self.blocks.values() if not b.ready or b.ref_cnt)

    @property
    def num_cached(self) -> int:
        """Host blocks holding a block hash (ready or in flight)."""
        return len(self.blocks)

    # ---- commands ----------------------------------------------------------------------
    def touch(self, hashes) -> None:
        """Mark as most recently used, the request's first block the most (vLLM touches in reverse, so a prefix's
        leading blocks, which more requests share, are evicted last)."""
        for h in reversed(list(hashes)):
            if h in self.blocks:
                self.blocks.move_to_end(h)

    def load(self, hashes, gpu_block_ids) -> None:
        """Copy ready host blocks `hashes` into GPU blocks `gpu_block_ids` in the next step."""
        for h, g in zip(hashes, gpu_block_ids, strict=True):
            b = self.blocks[h]
            assert b.ready, "only ready host blocks can be loaded"
            b.ref_cnt += 1
            self._pending_loads.append(((b.block_id, g), b))
        self.stats.loaded_blocks += len(gpu_block_ids)

    def store(self, gpu_block_id: int, block_hash: bytes) -> bool:
        """Prepare the copy of a full GPU block to the host; False if it is already there or no room."""
        if block_hash in self.blocks:
            return False
        if not self.free_ids and not self._evict_one():
            self.stats.dropped_stores += 1
            return False
        b = HostBlock(self.free_ids.pop(), block_hash)
        self.blocks[block_hash] = b
        self._pending_stores.append(((gpu_block_id, b.block_id), b))
        self.stats.stored_blocks += 1
        return True

    def _evict_one(self) -> bool:
        for h, b in self.blocks.items():  # least recently used first
            if b.ready and not b.ref_cnt:
                del self.blocks[h]
                self.free_ids.append(b.block_id)
                self.stats.evicted_blocks += 1
                return True
        return False

    def has_pending_transfers(self) -> bool:
        """Whether the next plan's take_transfers changes anything: copies prepared since the last plan (the
        next plan carries them), or the last plan's copies, which it completes (stored blocks become loadable)."""
        return bool(self._pending_stores or self._pending_loads or self._issued_stores or self._issued_loads)

    def take_transfers(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(loads (host, gpu), stores (gpu, host)) for the plan being made.

        The previous plan's step has ended, so its transfers are complete: its stored blocks become
        loadable and the blocks it loaded from become evictable again.
        """
        for _, b in self._issued_stores:
            b.ready = True
        for _, b in self._issued_loads:
            b.ref_cnt -= 1
        self._issued_loads, self._pending_loads = self._pending_loads, []
        self._issued_stores, self._pending_stores = self._pending_stores, []
        return [p for p, _ in self._issued_loads], [p for p, _ in self._issued_stores]
