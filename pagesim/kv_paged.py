"""The paged KV-cache manager: block tables over a shared pool, prefix caching, fork, swap.

A request's block table is `request.block_ids`: block i holds its tokens
[i * block_size, (i + 1) * block_size). Blocks are allocated on demand, at most
the current step's tokens ahead.

Invariant: a block with ref_cnt > 1 is always full. Prefix-cache hits share
only full blocks, and `fork` copies the parent's partial last block at once (it
is the only shared block anybody would write: copy-on-write resolved at the
fork), so shared blocks never need a copy later.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import itemgetter

from pagesim.accounting import MemoryAccounting, internal_slots, num_computed
from pagesim.block_hash import request_block_hashes
from pagesim.block_pool import Block, BlockPool
from pagesim.config import Config
from pagesim.kv_manager import NO_DECODE_BLOCKS, DecodeBlocks, PrefixCacheStats, block_steps, num_block_steps
from pagesim.kv_offload import HostKVCache
from pagesim.request import Request
from pagesim.utils import cdiv

_ROOM = itemgetter(0)  # allocate_decode_steps' sort key: a (room, request) pair's room


class PagedKVCacheManager:
    """Implements pagesim.kv_manager.KVCacheManager with block tables over one BlockPool."""

    def __init__(self, config: Config, record_events: bool = False):
        self.block_size = config.block_size
        self.enable_caching = config.enable_prefix_caching
        self.caches_full_blocks = self.enable_caching  # KVCacheManager: cache_full_blocks registers hashes
        self.grows_by_block = True  # KVCacheManager: tables grow a block at a time
        self.pool = BlockPool(config.resolved_num_gpu_blocks, record_events)
        # Blocks that hold KV: all but vLLM's null block (usage, accounting and recorders count these).
        self.num_gpu_blocks = self.pool.num_usable_blocks  # == config.usable_gpu_blocks
        self.watermark_blocks = int(config.watermark * config.resolved_num_gpu_blocks)  # vLLM: of all blocks
        self.num_cpu_blocks = config.num_cpu_blocks if config.preemption_mode == "swap" else 0
        self.free_cpu_blocks = list(range(self.num_cpu_blocks - 1, -1, -1))  # pop() gives the lowest id
        self.prefix_cache_stats = PrefixCacheStats()
        self.num_internal_slots = 0  # internal_slots summed over the block tables handed out, kept as they change
        # The host tier behind the prefix cache (vLLM's native offloading; pagesim/kv_offload.py).
        self.host = HostKVCache(config.num_offload_blocks) if self.enable_caching and config.num_offload_blocks else None

    @property
    def events(self) -> list[tuple] | None:
        """Block events (kind, block_id) when recording was asked for."""
        return self.pool.events

    # ---- admission -----------------------------------------------------------
    def rejection_reason(self, request: Request) -> str | None:
        need = cdiv(request.final_kv_len, self.block_size)
        if need > self.num_gpu_blocks:
            return (
                f"needs {need} KV blocks for {request.final_kv_len} tokens but the cache has only "
                f"{self.num_gpu_blocks} usable blocks ({self.pool.num_blocks} minus the null block)"
            )
        return None

    def get_computed_blocks(self, request: Request) -> tuple[list[Block], int]:
        """Longest run of cached full blocks matching the request's leading tokens.

        At most num_tokens - 1 tokens can hit: the last token is always
        recomputed, so that the step produces logits.
        """
        if not self.enable_caching:
            return [], 0
        bs = self.block_size
        max_blocks = (request.num_tokens - 1) // bs
        hashes = request_block_hashes(request, max_blocks, bs)
        hits: list[Block] = []
        get = self.pool.cached_block_hash_to_block.get
        for h in hashes[:max_blocks]:
            holders = get(h)
            if not holders:
                break
            hits.append(next(iter(holders.values())))  # the first cached copy (BlockPool.get_cached_block)
        num_host = self.host.lookup(hashes[len(hits):max_blocks]) if self.host is not None else 0
        return hits, (len(hits) + num_host) * bs  # host hits: the tokens past the GPU blocks, loaded at admission

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        computed_blocks: list[Block] = (),
        num_computed_from_cache: int = 0,
        admission: bool = False,
        num_running: int = 1,
        checked: bool = False,
    ) -> bool:
        """Give the request room for `num_new_tokens` more tokens; False (and no change) if memory is short.

        `computed_blocks` are prefix-cache hits for a request being admitted;
        they count as computed. On admission, `watermark` of the cache is kept
        free for the growth of running requests (unless none is running).
        `checked`: can_allocate has just said yes to the same arguments (the scheduler's admission), so the
        check is not made again.
        """
        if not admission and not computed_blocks and not num_computed_from_cache:
            # A running request's next tokens (the common case, inlined): the general path below, without hits.
            bs = self.block_size
            held = len(request.block_ids)
            need = -(-(request.num_computed_tokens + num_new_tokens) // bs) - held
            if need > 0:
                if need > self.pool.num_free_blocks:
                    return False
                request.block_ids.extend(self.pool.take(need))
                # a table only grows up to the request's final length, so before growing it had no slot past it
                self.num_internal_slots += internal_slots(request, bs)
            if self.enable_caching:
                self._cache_blocks(request, request.num_computed_tokens // bs,
                                   min(request.num_computed_tokens + num_new_tokens, request.num_tokens) // bs)
            return True
        need = self.num_blocks_to_allocate(request, num_new_tokens, computed_blocks, num_computed_from_cache)
        if not checked:
            check = self._num_blocks_to_admit(request, computed_blocks) if admission else need
            if check > self.num_allocatable_blocks(computed_blocks, admission, num_running):
                return False
        pool = self.pool
        before = internal_slots(request, self.block_size) if request.block_ids else 0  # (none without a table)
        num_host = num_computed_from_cache // self.block_size - len(computed_blocks)  # host-tier hits
        if admission and self.enable_caching:
            self.prefix_cache_stats.record(request, num_computed_from_cache, num_host * self.block_size)
        if computed_blocks:
            hit_ids = [b.block_id for b in computed_blocks]
            pool.touch_ids(hit_ids)
            request.block_ids.extend(hit_ids)
        request.num_computed_tokens += num_computed_from_cache
        if need > 0:
            if request.block_ids:
                request.block_ids.extend(pool.take(need))
            else:  # a table of its own: the taken list itself (no copy)
                request.block_ids = pool.take(need)
        self.num_internal_slots += internal_slots(request, self.block_size) - before
        if self.host is not None and num_computed_from_cache:
            self._load_host_hits(request, len(computed_blocks), num_host)
        # Like vLLM, blocks this step fills are cached when allocated (the step computes them), so a
        # request admitted later in the same step already hits them.
        if self.enable_caching:
            self._cache_blocks(request, request.num_computed_tokens // self.block_size,
                               min(request.num_computed_tokens + num_new_tokens, request.num_tokens) // self.block_size)
        return True

    def _load_host_hits(self, request: Request, first: int, num_host: int) -> None:
        """Blocks first .. first + num_host of the request come from the host tier: load them into the
        fresh GPU blocks just allocated there, which then hold (and are cached under) the same hashes."""
        hashes = request_block_hashes(request, first + num_host, self.block_size)
        self.host.touch(hashes[: first + num_host])
        if not num_host:
            return
        dst = request.block_ids[first : first + num_host]
        self.host.load(hashes[first : first + num_host], dst)
        for i, h in zip(dst, hashes[first : first + num_host]):
            self.pool.cache_block_id(i, h)

    def _num_blocks_to_admit(self, request: Request, computed_blocks=()) -> int:
        """vLLM admits a waiting request only if its whole sequence fits, not just this step's chunk
        (SchedulerConfig.scheduler_reserve_full_isl, on by default; KVCacheManager.allocate_slots)."""
        num_tokens = request.prompt_len + request.num_output_tokens  # (Request.num_tokens: a property is a dear call)
        need = cdiv(num_tokens, self.block_size) - len(request.block_ids) - len(computed_blocks)
        return need if need > 0 else 0

    def can_allocate(self, request: Request, num_new_tokens: int, computed_blocks=(), num_computed_from_cache: int = 0,
                     admission: bool = False, num_running: int = 1) -> bool:
        if admission:
            need = self._num_blocks_to_admit(request, computed_blocks)
        else:
            need = self.num_blocks_to_allocate(request, num_new_tokens, computed_blocks, num_computed_from_cache)
        return need <= self.num_allocatable_blocks(computed_blocks, admission, num_running)

    def num_blocks_to_allocate(self, request, num_new_tokens, computed_blocks=(), num_computed_from_cache=0) -> int:
        total = request.num_computed_tokens + num_computed_from_cache + num_new_tokens
        return cdiv(total, self.block_size) - len(request.block_ids) - len(computed_blocks)

    def num_allocatable_blocks(self, computed_blocks=(), admission: bool = False, num_running: int = 1) -> int:
        """Free blocks a request may take now: hit blocks sitting in the free queue stop being free once
        touched, and admission keeps the watermark free for running requests (unless none runs)."""
        free_hits = self.pool.num_free_among([b.block_id for b in computed_blocks]) if computed_blocks else 0
        available = self.pool.num_free_blocks - free_hits
        if admission and num_running > 0:
            available -= self.watermark_blocks
        return available

    def cache_full_blocks(self, request: Request, old_computed: int) -> None:
        """Register the hashes of blocks that became full since `old_computed` tokens were computed."""
        if not self.enable_caching:
            return
        bs = self.block_size
        first, last = old_computed // bs, request.num_computed_tokens // bs
        self._cache_blocks(request, first, last)
        if self.host is not None and last > first:  # full prompt blocks go to the host tier once each, once computed
            hashes = request_block_hashes(request, last, bs)
            for i in range(first, min(last, request.prompt_len // bs)):
                self.host.store(request.block_ids[i], hashes[i])

    def _cache_blocks(self, request: Request, first: int, last: int) -> None:
        """Register the hashes of the request's blocks first..last-1 (full ones)."""
        if last <= first or not self.enable_caching:
            return
        bs = self.block_size
        hashes = request_block_hashes(request, last, bs)
        cache, ids = self.pool.cache_block_id, request.block_ids
        for i in range(first, last):
            cache(ids[i], hashes[i])

    def take_transfers(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Host-tier copies for the plan being made: (loads (host, gpu), stores (gpu, host))."""
        return self.host.take_transfers() if self.host is not None else ([], [])

    def has_pending_transfers(self) -> bool:
        return self.host is not None and self.host.has_pending_transfers()

    def free(self, request: Request) -> None:
        """Release the request's GPU blocks, tail first (so its prefix is evicted last)."""
        self.num_internal_slots -= internal_slots(request, self.block_size)
        self.pool.free_table(request.block_ids)
        request.block_ids = []

    # ---- parallel sampling ----------------------------------------------------
    def fork(self, parent: Request, child: Request) -> list[tuple[int, int]] | None:
        """Share the parent's full blocks with the child and copy its partial last block.

        Returns the (src, dst) block copies the executor must make before the
        next forward pass, or None (and no change) if no block is free for the copy.
        """
        bs = self.block_size
        num_full = parent.num_computed_tokens // bs
        has_partial = len(parent.block_ids) > num_full
        if has_partial and self.pool.num_free_blocks < 1:
            return None
        shared = parent.block_ids[:num_full]
        self.pool.touch_ids(shared)
        child.block_ids = list(shared)
        child.block_hashes = list(parent.block_hashes[:num_full])
        copies = []
        if has_partial:
            (dst,) = self.pool.take(1)
            copies.append((parent.block_ids[num_full], dst))
            child.block_ids.append(dst)
        self.num_internal_slots += internal_slots(child, bs)
        return copies

    # ---- swapping ----------------------------------------------------------------
    def swap_out(self, request: Request) -> list[tuple[int, int]] | None:
        """Move the request's blocks to the CPU pool; (gpu, cpu) pairs, or None if the CPU pool is short."""
        n = len(request.block_ids)
        if n > len(self.free_cpu_blocks):
            return None
        mapping = [(g, self.free_cpu_blocks.pop()) for g in request.block_ids]
        request.cpu_block_ids = [c for _, c in mapping]
        self.free(request)
        return mapping

    def _swap_in_blocks(self, request: Request, num_new_tokens: int) -> int:
        return max(len(request.cpu_block_ids), cdiv(request.num_computed_tokens + num_new_tokens, self.block_size))

    def can_swap_in(self, request: Request, num_new_tokens: int, num_running: int) -> bool:
        available = self.pool.num_free_blocks - (self.watermark_blocks if num_running > 0 else 0)
        return self._swap_in_blocks(request, num_new_tokens) <= available

    def swap_in(self, request: Request, num_new_tokens: int, num_running: int) -> list[tuple[int, int]] | None:
        """Bring a swapped request back with room for its next tokens; (cpu, gpu) pairs, or None if short."""
        if not self.can_swap_in(request, num_new_tokens, num_running):
            return None
        n = len(request.cpu_block_ids)
        request.block_ids = self.pool.take(self._swap_in_blocks(request, num_new_tokens))
        self.num_internal_slots += internal_slots(request, self.block_size)
        mapping = list(zip(request.cpu_block_ids, request.block_ids[:n]))
        self.free_cpu_blocks.extend(reversed(request.cpu_block_ids))
        request.cpu_block_ids = []
        return mapping

    def free_swapped(self, request: Request) -> None:
        self.free_cpu_blocks.extend(reversed(request.cpu_block_ids))
        request.cpu_block_ids = []

    # ---- runs of decode steps ------------------------------------------------------
    def _decode_blocks_needed(self, running: list[Request], k: int) -> int:
        bs = self.block_size
        total = 0
        for r in running:
            extra = -(-(r.num_computed_tokens + k) // bs) - len(r.block_ids)  # cdiv, inlined
            if extra > 0:
                total += extra
        return total

    def max_decode_steps(self, running: list[Request], limit: int) -> int:
        free = self.pool.num_free_blocks
        # A request needs at most cdiv(limit, block_size) new blocks for `limit` more tokens (its table
        # covers its computed tokens), so with that many free for each the count below is not needed.
        if len(running) * -(-limit // self.block_size) <= free or self._decode_blocks_needed(running, limit) <= free:
            return limit
        lo, hi = 0, limit  # needed(lo) <= free < needed(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._decode_blocks_needed(running, mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def allocate_decode_steps(self, running: list[Request], k: int,
                              needy: tuple[list[int], list[Request]] | None = None, fewest_left: int = 0) -> DecodeBlocks:
        """Blocks are taken in the order the step-by-step path takes them: step by step, running order within a step.
        `fewest_left`: the fewest output tokens any of `running` has left (0: not known)."""
        bs = self.block_size
        if needy is not None:
            return self._allocate_in_order(*needy)
        # (room left in its table, request) of each request that takes a block within the k steps: it takes one in
        # the step its table ends (its room), then every block_size steps. Every table ends within block_size
        # steps (checked below), so from k = block_size on every request takes one.
        if k >= bs:
            rooms = [(len(r.block_ids) * bs - r.num_computed_tokens, r) for r in running]
        else:
            rooms = [(room, r) for r in running if (room := len(r.block_ids) * bs - r.num_computed_tokens) < k]
        if not rooms:
            return NO_DECODE_BLOCKS
        rooms.sort(key=_ROOM)  # by room, then running order (a stable sort): ints compared, not tuples
        if rooms[-1][0] >= bs:  # allocate_slots, swap_in and fork give a table at most the step's tokens ahead
            raise AssertionError(f"a decoding request's block table ends {rooms[-1][0]} slots past its next token")
        # Each block_size steps of the run take the blocks of the same requests in the same (room, index) order,
        # the last such period those of a prefix of them (the rooms are sorted): the i-th of the m requests takes
        # blocks i, i + m, i + 2m, ... of those taken.
        first_steps = [room for room, _ in rooms]
        m, num_blocks = len(first_steps), num_block_steps(first_steps, k, bs)
        pool = self.pool
        evicted = [] if pool.num_free_cached else None  # which blocks held a cached prefix (none can without)
        taken = pool.take(num_blocks, evicted)
        internal_steps, slots = [], []
        # A table reaches past its request's final length only if fewer than block_size - 1 tokens are left after
        # the run: its room after the run (< block_size) then exceeds them (the excess is the `over` below).
        check = fewest_left - k < bs - 1
        for i, (room, r) in enumerate(rooms):
            ids = r.block_ids
            if k > room + bs:
                ids += taken[i::m]
            else:
                ids.append(taken[i])
            if check:
                # slots past the final length (internal_slots, inlined: a call per request and run was ~1.5% of a
                # replay): only the request's last block reaches past it, and the table reached no further than the
                # final length before it grew (allocate_slots)
                over = len(ids) * bs - r.prompt_len - r.output_len + 1
                if over > 0:  # its last block, taken in the last step of the run its room reaches
                    internal_steps.append(room + (k - 1 - room) // bs * bs)
                    slots.append(over)
        if slots:
            self.num_internal_slots += sum(slots)
        if evicted and True in evicted:
            evicted_steps = [j for j, was_cached in zip(block_steps(first_steps, k, bs), evicted) if was_cached]
        else:
            evicted_steps = []
        return first_steps, num_blocks, evicted_steps, internal_steps, slots  # DecodeBlocks

    def _allocate_in_order(self, steps: list[int], requests: list[Request]) -> DecodeBlocks:
        """One block for each request of `requests`, in its order (the step-by-step order), in the run's step of
        `steps` alongside: each request's first in the first block_size steps, its next ones block_size steps apart
        (scheduler.take_block_needs)."""
        if not requests:  # nothing allocated, so no internal fragmentation added either
            return NO_DECODE_BLOCKS
        bs = self.block_size
        evicted: list[bool] = []
        taken = self.pool.take(len(requests), evicted)
        internal_steps, slots = [], []
        for j, r, block in zip(steps, requests, taken):
            r.block_ids.append(block)
            over = internal_slots(r, bs)  # > 0 only for the request's last block (none before it grew)
            if over:
                internal_steps.append(j)
                slots.append(over)
        if slots:
            self.num_internal_slots += sum(slots)
        evicted_steps = [j for j, was_cached in zip(steps, evicted) if was_cached] if True in evicted else []
        return steps[:bisect_left(steps, bs)], len(steps), evicted_steps, internal_steps, slots  # DecodeBlocks

    def allocate_decode_step(self, running: list[Request], needy: list[Request] | None = None) -> bool:
        bs = self.block_size
        # Only these need allocate_slots(r, 1): the requests whose table ends at their next token's slot and, with
        # caching, those whose next token fills a block (allocate_slots caches it). Taken in running order.
        if self.enable_caching:
            todo = [r for r in running
                    if len(r.block_ids) * bs <= r.num_computed_tokens or (r.num_computed_tokens + 1) % bs == 0]
            need = sum(len(r.block_ids) * bs <= r.num_computed_tokens for r in todo)
        else:
            todo = needy
            if todo is None:
                todo = [r for r in running if len(r.block_ids) * bs <= r.num_computed_tokens]
            if len(todo) > self.pool.num_free_blocks:
                return False
            # Without caching, allocate_slots(r, 1) for each in turn (its table ends at its next token's slot, so
            # it takes one block) written out: the blocks in one take, as many single takes would give them.
            if todo:
                internal = 0
                for r, block in zip(todo, self.pool.take(len(todo))):
                    r.block_ids.append(block)
                    internal += internal_slots(r, bs)  # none before it grew (see allocate_slots)
                self.num_internal_slots += internal
            return True
        if need > self.pool.num_free_blocks:
            return False
        for r in todo:  # each finds its block: the free blocks cover them all
            self.allocate_slots(r, 1)
        return True

    # ---- state ------------------------------------------------------------------
    def num_shared_refs(self) -> int:
        return self.pool.num_extra_refs

    def shared_refs(self) -> dict[int, int]:
        return self.pool.extra_refs

    def num_held_blocks(self) -> int:
        return self.pool.num_used_blocks + (self.num_cpu_blocks - len(self.free_cpu_blocks))

    def cached_block_ids(self) -> list[int]:
        return self.pool.cached_free_block_ids()

    def accounting(self, running: list[Request], head: Request | None = None, used: int | None = None) -> MemoryAccounting:
        """Slots per category. `running` are the requests holding GPU blocks."""
        return MemoryAccounting(*self.memory_values(running, head, used)[3:],
                                total=self.num_gpu_blocks * self.block_size)  # the null block holds no KV

    def memory_values(self, running: list[Request], head: Request | None = None,
                      used: int | None = None) -> tuple[int, int, int, int, int, int, int, int, int]:
        bs = self.block_size
        pool = self.pool
        used = (num_computed(running) if used is None else used) - pool.num_extra_refs * bs  # a shared block counts once
        internal = self.num_internal_slots
        free, cached = pool.num_free_blocks, pool.num_free_cached
        held = self.num_gpu_blocks - free
        return (held, cached, free - cached,  # MEMORY_COLUMNS (recorder.py): blocks, then CATEGORIES' slots
                used, held * bs - used - internal, internal, 0, (free - cached) * bs, cached * bs)
