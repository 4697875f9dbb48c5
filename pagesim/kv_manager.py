"""The KV-cache manager interface: every question and command the scheduler and the recorder use.

Two layouts implement it: `PagedKVCacheManager` (kv_paged.py, block tables over
a shared pool with prefix caching) and `ContiguousKVCacheManager`
(kv_contiguous.py, one reserved run per request). The scheduler never asks
which one it has; a new layout or eviction policy is a change to one file.

Conventions shared by both:
- a request's GPU block table is `request.block_ids`, its CPU blocks (when
  swapped out) `request.cpu_block_ids`; a table grows in place (append,
  extend) or is replaced by a new list (freed, swapped in, forked), never
  changed in place before its end (the engine keeps each table's array form
  from step to step by this: engine.executor._Tokens.block_row);
- `can_*` methods are pure questions; the command of the same name makes the
  change only when the question says yes, and returns False/None (changing
  nothing) otherwise;
- `admission=True` keeps `watermark` of the cache free for the growth of
  running requests, unless none is running.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol

from pagesim.accounting import MemoryAccounting
from pagesim.request import Request


@dataclass(slots=True)
class PrefixCacheStats:
    """Prefix-cache lookups at admission, in tokens (vLLM's queries/hits, split like its preempted_* counters).

    A first admission (a request, not a forked sample, never preempted) looks up
    its prompt: `queries` += prompt_len, `hits` += prompt tokens found (at most
    prompt_len - 1). Every other admission (after a recompute preemption, or a
    sample whose fork found no free block) looks up the tokens it must
    recompute, prompt plus those generated so far: `recompute_queries`,
    `recompute_hits`. So `hit_rate` is comparable across configurations and
    with a trace's ideal, and is not inflated by a request hitting its own blocks.
    """

    queries: int = 0
    hits: int = 0
    recompute_queries: int = 0
    recompute_hits: int = 0
    host_hits: int = 0  # of `hits`, tokens found in the host tier (kv_offloading_size); the rest hit the GPU

    def record(self, request: Request, num_hit_tokens: int, num_host_hit_tokens: int = 0) -> None:
        if request.num_preemptions == 0 and request.parent_id is None:
            self.queries += request.num_tokens
            self.hits += num_hit_tokens
            self.host_hits += num_host_hit_tokens
            request.num_prefix_hit_tokens = num_hit_tokens
        else:
            self.recompute_queries += request.num_tokens
            self.recompute_hits += num_hit_tokens

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None

    @property
    def recompute_hit_rate(self) -> float | None:
        return self.recompute_hits / self.recompute_queries if self.recompute_queries else None


# The block allocations of a run of decode steps, by the step (0-based in the run) that made each:
#   (first_steps: one per request that takes blocks in the run, the step of its first (non-decreasing);
#    num_blocks: blocks allocated in all;
#    evicted_steps: one per allocated block that held a cached prefix (evicted to be reused);
#    internal_steps: one per request's last block allocated (it reaches past the final length) ...
#    internal_slots: ... and the internal fragmentation that block adds).
# A decoding request takes a block every block_size steps, so the run's blocks are given by the step of each
# request's first one: it takes the next ones block_size, 2 * block_size, ... steps later while the run lasts
# (`block_steps`). A plain tuple, unpacked by its one reader (Recorder.record_decode_run), not a class: an instance
# of a class costs ~1.9k instructions on Python 3.11, a tuple ~0.5k (~30k runs take blocks in a replay).
DecodeBlocks = tuple[list[int], int, list[int], list[int], list[int]]
NO_DECODE_BLOCKS: DecodeBlocks = ([], 0, [], [], [])  # read-only


def block_steps(first_steps: list[int], k: int, block_size: int) -> list[int]:
    """The step of each block of a run of k steps whose requests take their first in `first_steps`
    (DecodeBlocks), in allocation order: by step, the requests in first_steps' order within a step."""
    steps = list(first_steps)
    for period in range(block_size, k, block_size):
        steps += [j + period for j in first_steps if j + period < k]
    return steps


def num_block_steps(first_steps: list[int], k: int, block_size: int) -> int:
    """len(block_steps(first_steps, k, block_size)) without the list (first_steps is non-decreasing)."""
    n = len(first_steps)
    for period in range(block_size, k, block_size):
        n += bisect_left(first_steps, k - period)  # those with j + period < k
    return n


class KVCacheManager(Protocol):
    block_size: int
    num_gpu_blocks: int
    prefix_cache_stats: PrefixCacheStats
    events: list[tuple] | None  # block events when recording was asked for
    caches_full_blocks: bool  # False when cache_full_blocks is always a no-op (the hot loops then skip the check)
    grows_by_block: bool  # True when a decoding request takes a block as its table fills; False: reserved ahead

    # ---- admission --------------------------------------------------------------------------
    def rejection_reason(self, request: Request) -> str | None:
        """Why the request can never run in this cache (None if it can)."""

    def get_computed_blocks(self, request: Request) -> tuple[list, int]:
        """Prefix-cache hits: (blocks, tokens) of the longest cached run of the request's leading blocks."""

    def can_allocate(self, request: Request, num_new_tokens: int, computed_blocks=(), num_computed_from_cache: int = 0,
                     admission: bool = False, num_running: int = 1) -> bool:
        """Whether `allocate_slots` with the same arguments would succeed now."""

    def allocate_slots(self, request: Request, num_new_tokens: int, computed_blocks=(),
                       num_computed_from_cache: int = 0, admission: bool = False, num_running: int = 1,
                       checked: bool = False) -> bool:
        """Room for `num_new_tokens` more tokens (hits count as computed); False and no change if short.
        `checked`: can_allocate has just said yes to the same arguments (a manager may then skip its check)."""

    def cache_full_blocks(self, request: Request, old_computed: int) -> None:
        """Register blocks that became full since `old_computed` tokens were computed.

        A no-op unless a block became full (old_computed // block_size < num_computed_tokens // block_size):
        the scheduler's hot loops (finish_step, the fast path's decode runs) skip the call otherwise."""

    def free(self, request: Request) -> None:
        """Release the request's GPU blocks."""

    # ---- parallel sampling and swapping ------------------------------------------------------
    def fork(self, parent: Request, child: Request) -> list[tuple[int, int]] | None:
        """Give the child the parent's computed tokens; (src, dst) block copies, or None if short."""

    def swap_out(self, request: Request) -> list[tuple[int, int]] | None:
        """Move the request's blocks to the CPU pool; (gpu, cpu) pairs, or None if the CPU pool is short."""

    def can_swap_in(self, request: Request, num_new_tokens: int, num_running: int) -> bool:
        """Whether `swap_in` with the same arguments would succeed now."""

    def swap_in(self, request: Request, num_new_tokens: int, num_running: int) -> list[tuple[int, int]] | None:
        """Bring a swapped request back with room for its next tokens; (cpu, gpu) pairs, or None if short."""

    def free_swapped(self, request: Request) -> None:
        """Release a swapped-out request's CPU blocks."""

    def take_transfers(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Host-tier copies for the plan being made: (loads (host, gpu), stores (gpu, host)); empty without a tier."""

    def has_pending_transfers(self) -> bool:
        """Whether the next plan's take_transfers changes anything: copies to issue (stores of the blocks the
        last step filled) or the last step's copies to complete."""

    # ---- runs of decode steps (the simulator's exact fast path) -------------------------------
    def max_decode_steps(self, running: list[Request], limit: int) -> int:
        """Largest k <= limit such that k decode steps of every running request find their blocks."""

    def allocate_decode_steps(self, running: list[Request], k: int,
                              needy: tuple[list[int], list[Request]] | None = None, fewest_left: int = 0) -> DecodeBlocks:
        """Allocate k decode steps' blocks exactly as k single steps would (requires k <= max_decode_steps).
        `needy`, when the caller knows it (no prefix caching; the scheduler's block-need index): (the step within
        the run, the request) of every block a manager that grows tables by block takes, as two lists, in the
        step-by-step order. `fewest_left`: the fewest output tokens any of `running` has left (0: not known)."""

    def allocate_decode_step(self, running: list[Request], needy: list[Request] | None = None) -> bool:
        """Room for the next token of each of `running` (all decoding), in their order, as allocate_slots(r, 1)
        for each in turn would make it (the same blocks taken, the blocks this step fills cached); False and no
        change when the free blocks do not cover them all (the caller then takes them one by one). `needy`, when
        the caller knows it (no prefix caching): those of them whose block tables end at their next token's slot."""

    # ---- state ------------------------------------------------------------------------------
    def num_shared_refs(self) -> int:
        """Block-table entries beyond the first of each GPU block, summed (0 when no block is shared; a prefix-cache
        hit or a fork shares one). Only running requests hold GPU blocks, so a step whose rows are all the running
        requests, all decoding, reads this many blocks a second time (StepFeatures.decode_shared_tokens), and no
        step reads a block twice when it is 0."""

    def shared_refs(self) -> Mapping[int, int]:
        """The GPU blocks that more than one block table holds: block id -> its table entries beyond the first
        (num_shared_refs is their sum). The manager's own counts, not a copy: to be read before its next change,
        never written. With them, a step whose rows are all the running requests reads the decode rows' shared
        blocks without a pass over their tables (StepFeatures.from_plan's `sharing`)."""

    def num_held_blocks(self) -> int:
        """GPU plus CPU blocks held by requests (0 once every request has ended)."""

    def cached_block_ids(self) -> Iterable[int]:
        """Free GPU blocks that still hold a reusable prefix."""

    def accounting(self, running: list[Request], head: Request | None = None, used: int | None = None) -> MemoryAccounting:
        """Slots per memory category; `running` are all the requests holding GPU blocks (their used tokens are
        summed, unless the caller has the sum: `used`; the internal fragmentation of the tables handed out is
        kept by the manager as they change), `head` is the next request to admit."""

    def memory_values(self, running: list[Request], head: Request | None = None,
                      used: int | None = None) -> tuple[int, int, int, int, int, int, int, int, int]:
        """The GPU blocks held, cached and free, then accounting()'s categories in CATEGORIES' order, as a plain
        tuple, unchecked (the recorder's memory columns, once per recorded step; accounting() checks the categories)."""
