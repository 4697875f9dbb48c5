"""The contiguous (reserve-ahead) baseline that paging replaced, with the paged manager's interface.

At admission a request receives one contiguous run of blocks, sized by policy:

- `max`: max_model_len tokens (what systems did before knowing the output length);
- `pow2`: the next power of two of prompt + output (over-reserves by less than 2x);
- `oracle`: prompt + true output (a baseline that knows the future).

Runs are placed first-fit over one address space of `num_gpu_blocks` blocks, so
external fragmentation emerges from the arrival order rather than being
assumed. The unit is one block of `block_size` slots, so the GPU engine can run
the baseline on the paged kernels: its block table is a run of consecutive ids
(the rounding adds at most block_size - 1 slots of internal fragmentation).
Prefix caching does not apply to this baseline.
"""

from __future__ import annotations

import bisect

from pagesim.accounting import MemoryAccounting, internal_slots, num_computed
from pagesim.config import Config
from pagesim.kv_manager import NO_DECODE_BLOCKS, DecodeBlocks, PrefixCacheStats
from pagesim.request import Request
from pagesim.utils import cdiv


class FirstFitAllocator:
    """Free extents of one address space, kept sorted by start and coalesced."""

    def __init__(self, size: int):
        self.size = size
        self.starts = [0] if size else []
        self.lengths = [size] if size else []
        self.num_free = size

    def allocate(self, n: int) -> int | None:
        for i, length in enumerate(self.lengths):
            if length >= n:
                start = self.starts[i]
                if length == n:
                    del self.starts[i], self.lengths[i]
                else:
                    self.starts[i] += n
                    self.lengths[i] -= n
                self.num_free -= n
                return start
        return None

    def free(self, start: int, n: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        if i > 0 and self.starts[i - 1] + self.lengths[i - 1] == start:  # merge with the left neighbour
            i -= 1
            self.lengths[i] += n
        else:
            self.starts.insert(i, start)
            self.lengths.insert(i, n)
        if i + 1 < len(self.starts) and self.starts[i] + self.lengths[i] == self.starts[i + 1]:
            self.lengths[i] += self.lengths.pop(i + 1)
            del self.starts[i + 1]
        self.num_free += n

    @property
    def largest_extent(self) -> int:
        return max(self.lengths, default=0)

    def free_in_extents_shorter_than(self, n: int) -> int:
        return sum(length for length in self.lengths if length < n)


class ContiguousKVCacheManager:
    """Implements pagesim.kv_manager.KVCacheManager with one contiguous run of blocks per request."""

    def __init__(self, config: Config, record_events: bool = False):
        self.block_size = config.block_size
        self.num_gpu_blocks = config.resolved_num_gpu_blocks
        self.policy = config.reserve_policy
        self.max_model_len = config.resolved_max_model_len
        self.allocator = FirstFitAllocator(self.num_gpu_blocks)
        self.num_internal_slots = 0  # internal_slots summed over the runs handed out, kept as they change
        self.cpu = FirstFitAllocator(config.num_cpu_blocks if config.preemption_mode == "swap" else 0)
        self.watermark_blocks = int(config.watermark * self.num_gpu_blocks)
        self.prefix_cache_stats = PrefixCacheStats()  # stays empty: no prefix caching here
        self.caches_full_blocks = False  # KVCacheManager: cache_full_blocks is a no-op
        self.grows_by_block = False  # KVCacheManager: a request's run is reserved whole on admission
        self.events = [] if record_events else None

    def reserve_tokens(self, request: Request) -> int:
        if self.policy == "max":
            return self.max_model_len
        final = request.prompt_len + request.output_len
        if self.policy == "pow2":
            return 1 << (final - 1).bit_length()
        return final

    def run_blocks(self, request: Request) -> int:
        return cdiv(self.reserve_tokens(request), self.block_size)

    def rejection_reason(self, request: Request) -> str | None:
        need = self.run_blocks(request)
        if need > self.num_gpu_blocks:
            return (
                f"the {self.policy} policy reserves {need} contiguous KV blocks but the cache has only "
                f"{self.num_gpu_blocks} blocks"
            )
        return None

    def get_computed_blocks(self, request: Request) -> tuple[list, int]:
        return [], 0

    def _can_place(self, n: int, admission: bool, num_running: int) -> bool:
        if admission and num_running > 0 and self.allocator.num_free - n < self.watermark_blocks:
            return False
        return self.allocator.largest_extent >= n

    def _place(self, request: Request, n: int, admission: bool, num_running: int) -> bool:
        if admission and num_running > 0 and self.allocator.num_free - n < self.watermark_blocks:
            return False
        start = self.allocator.allocate(n)
        if start is None:
            return False
        request.block_ids = list(range(start, start + n))
        self.num_internal_slots += internal_slots(request, self.block_size)
        if self.events is not None:
            self.events.append(("allocated_run", start, n))
        return True

    def can_allocate(self, request: Request, num_new_tokens: int, computed_blocks=(), num_computed_from_cache: int = 0,
                     admission: bool = False, num_running: int = 1) -> bool:
        return bool(request.block_ids) or self._can_place(self.run_blocks(request), admission, num_running)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        computed_blocks=(),
        num_computed_from_cache: int = 0,
        admission: bool = False,
        num_running: int = 1,
        checked: bool = False,
    ) -> bool:
        """Reserve the request's whole run on first call; later calls always fit inside it. (`checked`: placing the
        run is the check; nothing to skip.)"""
        if not request.block_ids:
            return self._place(request, self.run_blocks(request), admission, num_running)
        assert request.num_computed_tokens + num_new_tokens <= len(request.block_ids) * self.block_size
        return True

    def cache_full_blocks(self, request: Request, old_computed: int) -> None:
        return None

    def free(self, request: Request) -> None:
        if request.block_ids:
            self.num_internal_slots -= internal_slots(request, self.block_size)
            self.allocator.free(request.block_ids[0], len(request.block_ids))
            if self.events is not None:
                self.events.append(("freed_run", request.block_ids[0], len(request.block_ids)))
        request.block_ids = []

    def fork(self, parent: Request, child: Request) -> list[tuple[int, int]] | None:
        """Give the child its own run and copy the parent's computed blocks into it."""
        if not self._place(child, len(parent.block_ids), admission=False, num_running=1):
            return None
        n = cdiv(parent.num_computed_tokens, self.block_size)
        return list(zip(parent.block_ids[:n], child.block_ids[:n]))

    def swap_out(self, request: Request) -> list[tuple[int, int]] | None:
        n = cdiv(request.num_computed_tokens, self.block_size)
        start = self.cpu.allocate(n) if n else None
        if n and start is None:
            return None
        cpu = list(range(start, start + n)) if n else []
        mapping = list(zip(request.block_ids[:n], cpu))
        request.cpu_block_ids = cpu
        self.free(request)
        return mapping

    def can_swap_in(self, request: Request, num_new_tokens: int, num_running: int) -> bool:
        return self._can_place(self.run_blocks(request), admission=True, num_running=num_running)

    def swap_in(self, request: Request, num_new_tokens: int, num_running: int) -> list[tuple[int, int]] | None:
        if not self._place(request, self.run_blocks(request), admission=True, num_running=num_running):
            return None
        mapping = list(zip(request.cpu_block_ids, request.block_ids))
        self.free_swapped(request)
        return mapping

    def free_swapped(self, request: Request) -> None:
        if request.cpu_block_ids:
            self.cpu.free(request.cpu_block_ids[0], len(request.cpu_block_ids))
        request.cpu_block_ids = []

    def take_transfers(self) -> tuple[list, list]:
        return [], []  # no host tier: offloading is a prefix-cache tier, and this layout has no prefix cache

    def has_pending_transfers(self) -> bool:
        return False

    def max_decode_steps(self, running: list[Request], limit: int) -> int:
        return limit  # decode steps grow inside the reserved runs

    def allocate_decode_steps(self, running: list[Request], k: int, needy=None, fewest_left: int = 0) -> DecodeBlocks:
        return NO_DECODE_BLOCKS  # decode steps grow inside the reserved runs

    def allocate_decode_step(self, running: list[Request], needy=None) -> bool:
        return True  # decode steps grow inside the reserved runs

    def num_shared_refs(self) -> int:
        return 0  # a fork's child gets its own run, copied (fork); no prefix cache

    def shared_refs(self) -> dict[int, int]:
        return {}  # (num_shared_refs)

    def num_held_blocks(self) -> int:
        return (self.num_gpu_blocks - self.allocator.num_free) + (self.cpu.size - self.cpu.num_free)

    def cached_block_ids(self) -> list[int]:
        return []

    def external_fragmentation(self, head: Request | None) -> int:
        """Free slots in extents too small for the run the head of the queue needs (0 with no head)."""
        if head is None or head.block_ids:
            return 0
        return self.allocator.free_in_extents_shorter_than(self.run_blocks(head)) * self.block_size

    def accounting(self, running: list[Request], head: Request | None = None, used: int | None = None) -> MemoryAccounting:
        return MemoryAccounting(*self.memory_values(running, head, used)[3:],
                                total=self.num_gpu_blocks * self.block_size)

    def memory_values(self, running: list[Request], head: Request | None = None,
                      used: int | None = None) -> tuple[int, int, int, int, int, int, int, int, int]:
        bs = self.block_size
        used = num_computed(running) if used is None else used
        internal = self.num_internal_slots
        free = self.allocator.num_free
        held = self.num_gpu_blocks - free
        external = self.external_fragmentation(head)
        # MEMORY_COLUMNS (recorder.py); a reservation has no prefix cache: no cached blocks, no cached slots
        return held, 0, free, used, held * bs - used - internal, internal, external, free * bs - external, 0
