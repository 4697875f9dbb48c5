"""Shared test helpers: invariant checks for the KV-cache managers and a scheduler driver.

`check_paged` / `check_contiguous` / `check_scheduler` assert the bookkeeping
invariants the core promises (block_pool.py, kv_paged.py, kv_contiguous.py,
accounting.py), each failure message saying what went wrong in domain words.
`drive` runs schedule()/finish_step() with a unit step time until every request
has ended, checking the invariants after every half step, and returns what each
step did.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pagesim.accounting import request_slots
from pagesim.block_hash import request_block_hashes
from pagesim.config import Config
from pagesim.loop import Arrivals, Hooks, VirtualClock, run
from pagesim.loop import drive as loop_drive
from pagesim.kv_contiguous import ContiguousKVCacheManager, FirstFitAllocator
from pagesim.kv_paged import PagedKVCacheManager
from pagesim.utils import cdiv
from pagesim.request import Request, RequestStatus
from pagesim.scheduler import Scheduler, StepOutcome, StepPlan
from pagesim.specs import GIB, get_model


def swap_space_for(num_cpu_blocks: int, model: str, block_size: int) -> float:
    """The `swap_space` (GiB) that gives exactly `num_cpu_blocks` CPU blocks (half a block of slack against rounding)."""
    block_bytes = get_model(model).kv_bytes_per_block(block_size)
    return (num_cpu_blocks + 0.5) * block_bytes / GIB if num_cpu_blocks else 0.0


# ---- the paged manager -------------------------------------------------------------------------
def live_tokens_in_block(request: Request, index: int, block_size: int) -> int:
    """Slots of block `index` of the request's table that hold its computed tokens."""
    return max(0, min(block_size, request.num_computed_tokens - index * block_size))


def check_paged(kv: PagedKVCacheManager, holders: list[Request], swapped: list[Request] = (), head: Request | None = None):
    """Pool, sharing, hash index, CPU pool and accounting invariants; `holders` are all requests holding GPU blocks."""
    pool = kv.pool
    bs = kv.block_size
    n = kv.num_gpu_blocks  # blocks that hold KV; block 0 is the null block
    assert len(pool.blocks) == n + 1
    # Block tables: no block twice in one table; ref_cnt = number of tables holding the block.
    tables = Counter()
    for r in holders:
        assert len(set(r.block_ids)) == len(r.block_ids), f"{r.request_id} holds a block twice: {r.block_ids}"
        assert all(1 <= b <= n for b in r.block_ids), f"{r.request_id} holds a block id out of range: {r.block_ids}"
        tables.update(r.block_ids)
    for b in pool.blocks:
        assert b.ref_cnt == tables[b.block_id], (
            f"block {b.block_id} has ref_cnt {b.ref_cnt} but {tables[b.block_id]} block tables hold it"
        )
    # A block in two tables is shared: full of every holder's known tokens (hashed blocks are shared as soon as
    # they are allocated for the step that fills them, as in vLLM).
    for r in holders:
        for i, bid in enumerate(r.block_ids):
            if tables[bid] > 1:
                assert min(bs, r.num_tokens - i * bs) == bs, (
                    f"block {bid} is shared by {tables[bid]} tables but is not full in {r.request_id} "
                    f"(index {i}, {r.num_computed_tokens} tokens computed, block_size {bs})"
                )
    # Free queue <-> ref_cnt 0; free + in use = total.
    free_ids = set(pool.free_queue)
    assert len(free_ids) == len(pool.free_queue)
    for bid, block in pool.free_queue.items():
        assert block is pool.blocks[bid]
    zero = {b.block_id for b in pool.blocks[1:] if b.ref_cnt == 0}
    assert free_ids == zero, f"free queue {sorted(free_ids)} differs from unreferenced blocks {sorted(zero)}"
    assert pool.blocks[0].ref_cnt == 0 and 0 not in free_ids, "the null block 0 was handed out"
    assert all(b.ref_cnt >= 0 for b in pool.blocks), "negative reference count"
    in_use = sum(1 for b in pool.blocks if b.ref_cnt > 0)
    assert pool.num_free_blocks + in_use == n, "free + used blocks != num_gpu_blocks (all but the null block)"
    assert pool.num_used_blocks == in_use
    # Hash index.
    for h, copies in pool.cached_block_hash_to_block.items():
        assert copies, f"hash {h} indexed with no block"
        for block in copies.values():
            assert block.block_hash == h, f"hash index maps {h} to block {block.block_id} holding {block.block_hash}"
    hashed = [b for b in pool.blocks if b.block_hash is not None]
    for b in hashed:
        assert b.block_id in pool.cached_block_hash_to_block.get(b.block_hash, {}), f"block {b.block_id}'s hash is not indexed"
    assert len(hashed) == sum(len(v) for v in pool.cached_block_hash_to_block.values())
    if not kv.enable_caching:
        assert not hashed, "a block got a hash with prefix caching off"
    assert pool.num_free_cached == sum(1 for b in hashed if b.ref_cnt == 0), "num_free_cached is wrong"
    assert pool.num_extra_refs == sum(b.ref_cnt - 1 for b in pool.blocks if b.ref_cnt > 0), "num_extra_refs is wrong"
    # A hashed block is full in every table holding it (only full blocks are hashed).
    for r in holders:
        for i, bid in enumerate(r.block_ids):
            if pool.blocks[bid].block_hash is not None:
                assert min(bs, r.num_tokens - i * bs) == bs, (
                    f"block {bid} has a hash but is not full in {r.request_id} (index {i})"
                )
    # CPU pool: free + held = total, no block twice.
    held_cpu = [c for r in swapped for c in r.cpu_block_ids]
    all_cpu = held_cpu + list(kv.free_cpu_blocks)
    assert sorted(all_cpu) == list(range(kv.num_cpu_blocks)), (
        f"CPU blocks leaked or doubled: held {sorted(held_cpu)}, free {sorted(kv.free_cpu_blocks)}, "
        f"total {kv.num_cpu_blocks}"
    )
    # Accounting: categories non-negative, summing to the total (checked by MemoryAccounting itself),
    # `used` equal to an independent count over physical blocks, allocated = blocks in use.
    acc = kv.accounting(holders, head)
    # the internal fragmentation the manager keeps as tables change equals a full pass over the holders' tables
    assert acc.internal_fragmentation == request_slots(holders, bs)[1], "the kept internal fragmentation drifted"
    fill = {}
    for r in holders:
        for i, bid in enumerate(r.block_ids):
            fill[bid] = max(fill.get(bid, 0), live_tokens_in_block(r, i, bs))
    # Between a step's allocation and its forward pass a hit can share a block its first holder has not computed
    # yet (vLLM caches blocks when allocated); accounting is read after the step, when every holder has.
    settled = all(live_tokens_in_block(r, i, bs) == bs for r in holders
                  for i, bid in enumerate(r.block_ids) if tables[bid] > 1)
    if settled:
        assert acc.used == sum(fill.values()), (
            f"accounting says {acc.used} slots used, the blocks hold {sum(fill.values())}")
    assert acc.allocated == in_use * bs
    assert acc.cached == pool.num_free_cached * bs
    assert acc.free + acc.cached == pool.num_free_blocks * bs
    assert acc.external_fragmentation == 0
    return acc


# ---- the contiguous manager ----------------------------------------------------------------------
def check_extents(alloc: FirstFitAllocator, runs: list[tuple[int, int]], what: str = "GPU") -> None:
    """Free extents sorted, coalesced, inside the space; free + `runs` (start, length) tile the space exactly."""
    starts, lengths = alloc.starts, alloc.lengths
    assert len(starts) == len(lengths)
    assert all(length > 0 for length in lengths), f"{what}: empty free extent {list(zip(starts, lengths))}"
    for i in range(len(starts) - 1):
        end = starts[i] + lengths[i]
        assert end < starts[i + 1], (
            f"{what}: free extents overlap, are unsorted or not coalesced: {list(zip(starts, lengths))}"
        )
    assert alloc.num_free == sum(lengths), f"{what}: num_free {alloc.num_free} != sum of free extents {sum(lengths)}"
    cover = [0] * alloc.size
    for start, length in list(zip(starts, lengths)) + list(runs):
        assert 0 <= start and start + length <= alloc.size, f"{what}: extent ({start}, {length}) out of range"
        for j in range(start, start + length):
            cover[j] += 1
    assert all(c == 1 for c in cover), (
        f"{what}: free extents and allocated runs do not tile the space exactly: free "
        f"{list(zip(starts, lengths))}, allocated {sorted(runs)}"
    )


def run_of(ids: list[int], who: str) -> tuple[int, int]:
    assert ids == list(range(ids[0], ids[0] + len(ids))), f"{who}'s blocks are not one contiguous run: {ids}"
    return ids[0], len(ids)


def check_contiguous(kv: ContiguousKVCacheManager, holders: list[Request], swapped: list[Request] = (), head=None):
    bs = kv.block_size
    runs = [run_of(r.block_ids, r.request_id) for r in holders if r.block_ids]
    for r in holders:
        if r.block_ids:
            assert len(r.block_ids) >= cdiv(r.num_computed_tokens, bs)
    check_extents(kv.allocator, runs, "GPU")
    cpu_runs = [run_of(r.cpu_block_ids, r.request_id) for r in swapped if r.cpu_block_ids]
    check_extents(kv.cpu, cpu_runs, "CPU")
    acc = kv.accounting(holders, head)
    assert acc.used == sum(r.num_computed_tokens for r in holders)
    assert acc.internal_fragmentation == request_slots(holders, bs)[1], "the kept internal fragmentation drifted"
    assert acc.allocated == sum(len(r.block_ids) for r in holders) * bs
    assert acc.cached == 0
    return acc


# ---- the scheduler ----------------------------------------------------------------------------------
def check_scheduler(s: Scheduler):
    """Queues hold the right states; only running requests hold GPU blocks, only swapped ones CPU blocks."""
    for r in s.waiting:
        assert r.status == RequestStatus.WAITING and not r.block_ids and not r.cpu_block_ids, (
            f"waiting request {r.request_id} holds blocks or has status {r.status!r}"
        )
        assert r.num_computed_tokens == 0
    for r in s.swapped:
        assert r.status == RequestStatus.SWAPPED and not r.block_ids, f"swapped {r.request_id} holds GPU blocks"
    for r in s.running:
        assert r.status == RequestStatus.RUNNING, f"running request {r.request_id} has status {r.status!r}"
        assert r.num_computed_tokens <= r.final_kv_len
    for r in s.finished:
        assert r.status == RequestStatus.FINISHED and not r.block_ids and not r.cpu_block_ids
    ids = [r.request_id for r in list(s.waiting) + s.running + list(s.swapped)]
    assert len(ids) == len(set(ids)), f"a request is in two queues: {sorted(ids)}"
    head = s.waiting[0] if s.waiting else None
    if isinstance(s.kv, PagedKVCacheManager):
        return check_paged(s.kv, s.running, list(s.swapped), head)
    return check_contiguous(s.kv, s.running, list(s.swapped), head)


def check_plan(s: Scheduler, plan: StepPlan, running_before: list[str]) -> None:
    """A plan within its budgets, with block tables that cover its tokens (checked right after schedule())."""
    cfg: Config = s.config
    bs = s.kv.block_size
    group = list(plan.decode_group)  # the fast path's decodes without a ScheduledRequest: one token each
    total = len(group) + sum(x.num_new_tokens for x in plan.scheduled)
    assert total <= cfg.max_num_batched_tokens, f"step {plan.step_id} computes {total} tokens > budget"
    assert total == plan.num_tokens
    seqs = group + [x.request for x in plan.scheduled]
    assert len(seqs) <= cfg.max_num_seqs, f"step {plan.step_id} runs {len(seqs)} sequences > max_num_seqs"
    running = s.running
    assert len(running) <= cfg.max_num_seqs, f"{len(running)} running requests > max_num_seqs {cfg.max_num_seqs}"
    ids = [r.request_id for r in group] + [x.request_id for x in plan.scheduled]
    assert len(ids) == len(set(ids)), f"step {plan.step_id} schedules a request twice"
    running_ids = {r.request_id for r in s.running}
    assert [r.request_id for r in s.running[: len(group)]] == ids[: len(group)], "the group is not the leading running"
    if group:
        assert plan.decode_group_computed == sum(r.num_computed_tokens for r in group)
        assert plan.decode_group_max_computed == max(r.num_computed_tokens for r in group)
    for r in group:
        assert r.is_decoding and len(r.block_ids) * bs >= r.num_tokens, f"{r.request_id} in the group cannot decode"
    for x in plan.scheduled:
        r = x.request
        assert x.request_id in running_ids
        assert x.num_new_tokens >= 1
        assert x.num_computed_tokens == r.num_computed_tokens
        assert x.num_computed_tokens + x.num_new_tokens <= r.num_tokens
        assert len(r.block_ids) * bs >= x.num_computed_tokens + x.num_new_tokens, (
            f"{r.request_id}'s block table ({len(r.block_ids)} blocks) does not cover its tokens"
        )
        if not cfg.enable_chunked_prefill:
            assert x.num_computed_tokens + x.num_new_tokens == r.num_tokens, (
                f"without chunked prefill, step {plan.step_id} splits {r.request_id}'s prompt"
            )
        assert x.is_decode == (x.num_new_tokens == 1 and r.num_output_tokens > 0 and x.num_computed_tokens == r.num_tokens - 1)
    # Victims: the most recently admitted running requests, newest first.
    assert list(plan.preempted) == running_before[::-1][: len(plan.preempted)], (
        f"step {plan.step_id} preempted {plan.preempted}, not the newest of {running_before}"
    )
    for cpu, gpu in plan.blocks_to_swap_in:
        assert any(gpu in r.block_ids for r in s.running)


@dataclass
class Step:
    plan: StepPlan
    outcome: StepOutcome
    time: float
    running_before: list[str]
    scheduled: list[tuple[str, int, int, bool, tuple[int, ...]]]  # id, computed, new, is_decode, block table
    accounting: object = None  # MemoryAccounting at the end of the step
    waiting_after: list[str] = field(default_factory=list)


class UnitSteps:
    """An executor whose every step lasts one unit of time."""

    def execute(self, plan) -> float:
        return 1.0


def drive(
    scheduler: Scheduler,
    requests: list[Request],
    arrivals: list[float] | None = None,
    check: bool = True,
    max_steps: int = 100_000,
) -> list[Step]:
    """Run the scheduler with a unit step time until every request has ended; returns the steps.

    The shared driver loop (pagesim.loop.drive) on a virtual clock: a request
    joins (add_request) at the first step starting at or after its arrival
    time (its own `arrival_time` unless `arrivals` is given); when the
    scheduler is idle the clock jumps to the next arrival. With `check`, every
    invariant is asserted after schedule() and after finish_step(). The loop's
    no-progress guard raises SchedulerStuck when work remains but nothing is scheduled.
    """
    if arrivals is None:
        arrivals = [r.arrival_time for r in requests]
    order = sorted(range(len(requests)), key=lambda i: (arrivals[i], i))
    pending = [(arrivals[i], requests[i]) for i in order]
    steps: list[Step] = []
    clock = VirtualClock()
    seen = {}

    def tick(now: float) -> float:
        seen["running_before"] = [r.request_id for r in scheduler.running]
        return float("inf")

    def planned(plan: StepPlan) -> None:
        if check:
            check_plan(scheduler, plan, seen["running_before"])
            check_scheduler(scheduler)
        seen["time"] = clock.now()
        seen["scheduled"] = [
            (x.request_id, x.num_computed_tokens, x.num_new_tokens, x.is_decode, tuple(x.request.block_ids))
            for x in plan.scheduled
        ]

    def stepped(plan: StepPlan, duration: float, outcome: StepOutcome) -> None:
        acc = check_scheduler(scheduler) if check else None
        steps.append(Step(plan, outcome, seen["time"], seen["running_before"], seen["scheduled"], acc,
                          [r.request_id for r in scheduler.waiting]))
        assert len(steps) <= max_steps, f"no end after {max_steps} steps"

    run(loop_drive(scheduler, UnitSteps(), None, Arrivals(pending), clock,
                   hooks=Hooks(tick=tick, plan=planned, step=stepped)))
    return steps


def assert_all_done(scheduler: Scheduler, requests: list[Request]) -> None:
    """Every request (and every forked sample) ended; no GPU or CPU block is held."""
    for r in requests:
        assert r.is_finished, f"{r.request_id} did not end ({r.status!r})"
    for r in scheduler.finished:
        assert r.num_output_tokens == r.output_len, (
            f"{r.request_id} finished with {r.num_output_tokens} of {r.output_len} output tokens"
        )
    assert not scheduler.running and not scheduler.waiting and not scheduler.swapped
    kv = scheduler.kv
    if isinstance(kv, PagedKVCacheManager):
        assert kv.pool.num_free_blocks == kv.pool.num_usable_blocks, "GPU blocks leaked (all but the null block must be free)"
        assert all(b.ref_cnt == 0 for b in kv.pool.blocks)
        assert kv.pool.num_extra_refs == 0
        assert len(kv.free_cpu_blocks) == kv.num_cpu_blocks, "CPU blocks leaked"
    else:
        assert kv.allocator.num_free == kv.num_gpu_blocks, "GPU blocks leaked"
        assert kv.allocator.starts == [0], f"free space not coalesced back into one extent: {kv.allocator.starts}"
        assert kv.cpu.num_free == kv.cpu.size, "CPU blocks leaked"
    acc = kv.accounting([], None)
    assert acc.used == acc.reserved == acc.internal_fragmentation == 0


def make_requests(specs, start_seq: int = 0, **common) -> list[Request]:
    """Requests from (prompt_len, output_len) pairs or dicts of Request fields; ids r0, r1, ..."""
    out = []
    for i, spec in enumerate(specs):
        fields = dict(spec) if isinstance(spec, dict) else {"prompt_len": spec[0], "output_len": spec[1]}
        fields = {"arrival_time": 0.0, **common, **fields}
        seq = start_seq + i
        out.append(Request(request_id=f"r{seq}", seq_no=seq, **fields))
    return out


def prefix_hits_from_scratch(kv: PagedKVCacheManager, r) -> list[int]:
    """The block ids get_computed_blocks(r) must answer, found from nothing: the longest run of r's leading blocks
    cached (at most num_tokens - 1 tokens), each the first cached copy of its hash."""
    max_blocks = (r.num_tokens - 1) // kv.block_size
    out = []
    for h in request_block_hashes(r, max_blocks, kv.block_size)[:max_blocks]:
        block = kv.pool.get_cached_block(h)
        if block is None:
            break
        out.append(block.block_id)
    return out
