"""The scheduler: continuous batching over one KV-cache manager, independent of time and of execution.

Each step, in vLLM v1's order:

1. running requests, oldest first, each get their next tokens (1 when
   decoding, a chunk when prefilling) within the token budget; when the cache
   is short, the most recently admitted running request is preempted
   (recompute: its blocks are freed and it rejoins the front of the queue;
   swap: its blocks move to the CPU pool, or it falls back to recompute when
   that pool is full) until the request fits or is itself the victim;
2. if nobody was preempted this step: swapped-out requests come back, oldest first;
3. then waiting requests are admitted first-come-first-served, with their
   prefix-cache hits counted as computed, under `max_num_seqs`, the token
   budget and the admission watermark; the queue stops at the first request
   that does not fit.

A request that can never fit (longer than max_model_len, or than the whole
cache) is rejected when it arrives, with the reason.

`schedule()` returns a StepPlan; `finish_step(plan, now)` applies its outcome.
Same inputs, same decisions: nothing here reads a clock or a random source.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from dataclasses import dataclass, field

from pagesim.config import Config
from pagesim.kv_contiguous import ContiguousKVCacheManager
from pagesim.kv_paged import PagedKVCacheManager, cdiv
from pagesim.request import Request, RequestStatus


@dataclass(slots=True)
class ScheduledRequest:
    request: Request
    num_computed_tokens: int  # tokens already in the cache at the start of the step
    num_new_tokens: int  # tokens computed this step
    is_decode: bool

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def block_ids(self) -> list[int]:
        """The block table (the live list: valid until finish_step)."""
        return self.request.block_ids


@dataclass(slots=True)
class StepPlan:
    step_id: int
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    preempted: list[str] = field(default_factory=list)
    swapped_in: list[str] = field(default_factory=list)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)  # (gpu, cpu)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)  # (cpu, gpu)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)  # (src, dst), before the forward pass
    admitted: list[str] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.blocks_to_swap_out


@dataclass(slots=True)
class StepOutcome:
    finished: list[Request] = field(default_factory=list)
    forked: list[Request] = field(default_factory=list)


def make_kv_manager(config: Config, record_events: bool = False):
    if config.kv_layout == "paged":
        return PagedKVCacheManager(config, record_events)
    return ContiguousKVCacheManager(config, record_events)


class Scheduler:
    def __init__(self, config: Config, record_events: bool = False):
        self.config = config
        self.kv = make_kv_manager(config, record_events)
        self.max_model_len = config.resolved_max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.finished: list[Request] = []
        self.rejected: list[Request] = []
        self.num_preemptions = 0
        self.step_id = 0
        self.pending_copies: list[tuple[int, int]] = []  # from forks, made at the start of the next step
        self.reserved_seats = 0  # running seats held for the samples of admitted requests with n > 1

    # ---- requests in ---------------------------------------------------------------
    def add_request(self, request: Request) -> bool:
        """Queue a request, or reject it at once if it can never run; returns False when rejected."""
        reason = self.rejection_reason(request)
        if reason is not None:
            request.status = RequestStatus.REJECTED
            request.reject_reason = reason
            self.rejected.append(request)
            return False
        request.status = RequestStatus.WAITING
        self.waiting.append(request)
        return True

    def rejection_reason(self, request: Request) -> str | None:
        total = request.prompt_len + request.output_len
        if request.n > self.config.max_num_seqs:
            return f"n = {request.n} parallel samples exceed max_num_seqs {self.config.max_num_seqs}"
        if total > self.max_model_len:
            return f"prompt + output = {total} tokens exceeds max_model_len {self.max_model_len}"
        return self.kv.rejection_reason(request)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.swapped)

    def leaked_blocks(self) -> int:
        """GPU and CPU blocks still held; 0 once every request has ended."""
        kv = self.kv
        if isinstance(kv, PagedKVCacheManager):
            return kv.pool.num_used_blocks + (kv.num_cpu_blocks - len(kv.free_cpu_blocks))
        return (kv.num_gpu_blocks - kv.allocator.num_free) + (kv.cpu.size - kv.cpu.num_free)

    # ---- one step --------------------------------------------------------------------
    def schedule(self, now: float | None = None) -> StepPlan:
        cfg = self.config
        kv = self.kv
        plan = StepPlan(self.step_id)
        self.step_id += 1
        plan.blocks_to_copy, self.pending_copies = self.pending_copies, []
        budget = cfg.max_num_batched_tokens
        chunked = cfg.enable_chunked_prefill
        scheduled = plan.scheduled
        running = self.running

        # 1. Running requests.
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            num_new = req.num_tokens - req.num_computed_tokens
            if num_new > budget:
                if not chunked:
                    i += 1
                    continue
                num_new = budget
            while not kv.allocate_slots(req, num_new):
                victim = running.pop()
                self._preempt(victim, plan)
                if victim is req:
                    break
            else:
                scheduled.append(ScheduledRequest(req, req.num_computed_tokens, num_new, req.is_decoding))
                budget -= num_new
                i += 1
                continue
            break

        if not plan.preempted:
            # 2. Swapped-out requests come back first.
            while self.swapped and budget > 0 and self._has_seats(self.swapped[0]):
                req = self.swapped[0]
                num_new = req.num_tokens - req.num_computed_tokens
                if num_new > budget:
                    if not chunked:
                        break
                    num_new = budget
                mapping = kv.swap_in(req, num_new, len(running))
                if mapping is None:
                    break
                self.swapped.popleft()
                self.reserved_seats += self._seats(req) - 1
                plan.blocks_to_swap_in.extend(mapping)
                plan.swapped_in.append(req.request_id)
                req.status = RequestStatus.RUNNING
                running.append(req)
                scheduled.append(ScheduledRequest(req, req.num_computed_tokens, num_new, req.is_decoding))
                budget -= num_new

            # 3. Waiting requests, first come first served.
            while self.waiting and budget > 0 and not self.swapped and self._has_seats(self.waiting[0]):
                req = self.waiting[0]
                hits, num_hit = kv.get_computed_blocks(req)
                num_new = req.num_tokens - req.num_computed_tokens - num_hit
                if num_new > budget:
                    if not chunked:
                        break
                    num_new = budget
                if not kv.allocate_slots(req, num_new, hits, num_hit, admission=True, num_running=len(running)):
                    break
                self.waiting.popleft()
                self.reserved_seats += self._seats(req) - 1
                req.status = RequestStatus.RUNNING
                running.append(req)
                plan.admitted.append(req.request_id)
                scheduled.append(ScheduledRequest(req, req.num_computed_tokens, num_new, req.is_decoding))
                budget -= num_new

        for s in scheduled:
            if s.is_decode:
                plan.num_decode_tokens += s.num_new_tokens
            else:
                plan.num_prefill_tokens += s.num_new_tokens
            if s.request.first_scheduled_time is None:
                s.request.first_scheduled_time = now
        return plan

    @staticmethod
    def _seats(req: Request) -> int:
        """Running slots a request takes: n for a request whose samples are not forked yet, else 1."""
        return req.n if req.n > 1 and req.parent_id is None and req.first_token_time is None else 1

    def _has_seats(self, req: Request, n_running: int | None = None) -> bool:
        """max_num_seqs counts sequences, including the samples a request will fork."""
        n = len(self.running) if n_running is None else n_running
        return n + self.reserved_seats + self._seats(req) <= self.config.max_num_seqs

    def _preempt(self, req: Request, plan: StepPlan) -> None:
        self.reserved_seats -= self._seats(req) - 1
        self.num_preemptions += 1
        req.num_preemptions += 1
        plan.preempted.append(req.request_id)
        if self.config.preemption_mode == "swap":
            mapping = self.kv.swap_out(req)
            if mapping is not None:
                plan.blocks_to_swap_out.extend(mapping)
                req.status = RequestStatus.SWAPPED
                self.swapped.append(req)
                return
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.status = RequestStatus.WAITING
        self.waiting.appendleft(req)

    def finish_step(self, plan: StepPlan, now: float) -> StepOutcome:
        """Apply a step's outcome at time `now` (the end of the step): tokens computed, tokens sampled."""
        outcome = StepOutcome()
        kv = self.kv
        for s in plan.scheduled:
            req = s.request
            old = req.num_computed_tokens
            req.num_computed_tokens = old + s.num_new_tokens
            kv.cache_full_blocks(req, old)
            if req.num_computed_tokens < req.num_tokens:
                continue  # a prefill chunk that does not reach the end samples nothing
            req.num_output_tokens += 1
            if req.first_token_time is None:
                req.first_token_time = now
                if req.n > 1 and req.parent_id is None:
                    self._fork_samples(req, now, outcome)
            if req.num_output_tokens >= req.output_len:
                self._finish(req, now, outcome)
        if outcome.finished:
            done = {id(r) for r in outcome.finished}
            self.running = [r for r in self.running if id(r) not in done]
        return outcome

    def _finish(self, req: Request, now: float, outcome: StepOutcome) -> None:
        req.status = RequestStatus.FINISHED
        req.finish_time = now
        self.kv.free(req)
        self.finished.append(req)
        outcome.finished.append(req)

    def _fork_samples(self, parent: Request, now: float, outcome: StepOutcome) -> None:
        """Parallel sampling: n - 1 samples share the parent's prompt blocks (the last one copied).

        They take the running seats reserved for them when the parent was admitted.
        """
        self.reserved_seats -= parent.n - 1
        for k in range(1, parent.n):
            child = Request(
                request_id=f"{parent.request_id}#{k}",
                arrival_time=parent.arrival_time,
                prompt_len=parent.prompt_len,
                output_len=parent.output_len,
                seq_no=parent.seq_no,
                prompt_token_ids=parent.prompt_token_ids,
                prefix_hash_ids=parent.prefix_hash_ids,
                hash_block_size=parent.hash_block_size,
                n=1,
                priority=parent.priority,
                parent_id=parent.request_id,
                sample_index=k,
                num_computed_tokens=parent.num_computed_tokens,
                num_output_tokens=parent.num_output_tokens,
                first_scheduled_time=parent.first_scheduled_time,
                first_token_time=now,
            )
            copies = self.kv.fork(parent, child)
            outcome.forked.append(child)
            if child.num_output_tokens >= child.output_len:
                self._finish(child, now, outcome)
                continue
            if copies is None:  # no block for the copy: the sample recomputes its prompt later
                child.num_computed_tokens = 0
                child.status = RequestStatus.WAITING
                self.waiting.appendleft(child)
                continue
            self.pending_copies.extend(copies)
            child.status = RequestStatus.RUNNING
            self.running.append(child)

    # ---- the exact fast path ---------------------------------------------------------
    def decode_run_limit(self) -> int:
        """How many next steps are certainly identical pure-decode steps of the same running set.

        0 unless every running request is decoding and will be scheduled, no
        fork copy is pending, and the heads of the swapped and waiting queues
        cannot be admitted now (they then stay blocked: free memory only
        shrinks and the batch stays the same). The limit is the fewest
        remaining output tokens of a running request (the step in which one
        finishes is the run's last) and the most steps whose block allocations
        all fit in the free blocks (so no allocation fails and nobody is preempted).
        The caller also stops the run at the next arrival.
        """
        running = self.running
        cfg = self.config
        n = len(running)
        if not n or self.pending_copies or n > cfg.max_num_batched_tokens:
            return 0
        limit = 1 << 62
        for r in running:
            if not r.is_decoding:
                return 0
            left = r.output_len - r.num_output_tokens
            if left < limit:
                limit = left
        if (self.swapped or self.waiting) and self._head_could_be_admitted(n):
            return 0
        if isinstance(self.kv, PagedKVCacheManager):
            limit = min(limit, self._steps_fitting_in_free_blocks(limit))
        return limit

    def _head_could_be_admitted(self, n_running: int) -> bool:
        """Whether schedule() would let the head of the swapped (else waiting) queue in now."""
        cfg = self.config
        budget = cfg.max_num_batched_tokens - n_running
        if budget <= 0:
            return False
        if not self._has_seats(self.swapped[0] if self.swapped else self.waiting[0], n_running):
            return False
        kv = self.kv
        head = self.swapped[0] if self.swapped else self.waiting[0]
        hits, num_hit = ([], 0) if self.swapped else kv.get_computed_blocks(head)
        num_new = head.num_tokens - head.num_computed_tokens - num_hit
        if num_new > budget:
            if not cfg.enable_chunked_prefill:
                return False
            num_new = budget
        if isinstance(kv, ContiguousKVCacheManager):
            need = kv.run_blocks(head)
            return kv.allocator.largest_extent >= need and kv.allocator.num_free - need >= kv.watermark_blocks
        if self.swapped:
            need = max(len(head.cpu_block_ids), cdiv(head.num_computed_tokens + num_new, kv.block_size))
        else:
            need = kv.num_blocks_to_allocate(head, num_new, hits, num_hit)
        return need <= kv.num_allocatable_blocks(hits, admission=True, num_running=n_running)

    def _steps_fitting_in_free_blocks(self, limit: int) -> int:
        """Largest k <= limit such that k decode steps of every running request need at most the free blocks."""
        bs = self.kv.block_size
        free = self.kv.pool.num_free_blocks

        def blocks_needed(k: int) -> int:
            total = 0
            for r in self.running:
                extra = cdiv(r.num_computed_tokens + k, bs) - len(r.block_ids)
                if extra > 0:
                    total += extra
            return total

        if blocks_needed(limit) <= free:
            return limit
        lo, hi = 0, limit  # blocks_needed(lo) <= free < blocks_needed(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if blocks_needed(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def run_decode_steps(self, k: int, step_ends: list[float]) -> "DecodeRun":
        """Apply k pure-decode steps at once, exactly as k schedule()/finish_step() pairs would.

        Blocks are taken from the free queue in the order the step-by-step
        path takes them (step by step, running order within a step).
        `step_ends[j]` is the time step j ends. Requires k <= decode_run_limit().
        """
        kv = self.kv
        bs = kv.block_size
        running = self.running
        run = DecodeRun(k=k, num_seqs=len(running), context_start=sum(r.num_computed_tokens for r in running),
                        max_context_start=max((r.num_computed_tokens for r in running), default=0))
        if isinstance(kv, PagedKVCacheManager):
            # (step, running index) of every block allocation, in the order the step-by-step path makes them.
            crossings = sorted(
                (j, idx)
                for idx, r in enumerate(running)
                for j in range(len(r.block_ids) * bs - r.num_computed_tokens, k, bs)
            )
            pool = kv.pool
            blocks_per_step = [0] * k
            evicted_per_step = [0] * k
            internal_delta = [0] * k
            if crossings:
                if pool.num_free_cached:
                    cached = [b.block_hash is not None for b in islice(pool.free_queue.values(), len(crossings))]
                    for (j, _), c in zip(crossings, cached):
                        evicted_per_step[j] += c
                # A request's last block is the only one that can reach past its final length.
                for r in running:
                    last = (r.final_kv_len - 1) // bs  # index of the block holding its last KV slot
                    j = last * bs - r.num_computed_tokens  # the step that allocates it
                    if last >= len(r.block_ids) and j < k:
                        internal_delta[j] += (last + 1) * bs - r.final_kv_len
                for (j, idx), block in zip(crossings, pool.get_new_blocks(len(crossings))):
                    running[idx].block_ids.append(block.block_id)
                    blocks_per_step[j] += 1
            run.blocks_per_step = blocks_per_step
            run.evicted_per_step = evicted_per_step
            run.internal_delta_per_step = internal_delta
        self.step_id += k
        end = step_ends[k - 1]
        outcome = StepOutcome()
        for r in running:
            old = r.num_computed_tokens
            r.num_computed_tokens = old + k
            kv.cache_full_blocks(r, old)
            r.num_output_tokens += k
            if r.num_output_tokens >= r.output_len:
                self._finish(r, end, outcome)
        if outcome.finished:
            done = {id(r) for r in outcome.finished}
            self.running = [r for r in running if id(r) not in done]
        run.outcome = outcome
        return run


@dataclass(slots=True)
class DecodeRun:
    """What a batch of k identical decode steps did, for recorders (per-step lists have length k)."""

    k: int
    num_seqs: int
    context_start: int  # tokens in the cache for the running requests before the first step
    max_context_start: int = 0  # the most any one of them has then (step j, 0-based, reads max + j + 1 for it)
    blocks_per_step: list[int] = field(default_factory=list)
    evicted_per_step: list[int] = field(default_factory=list)
    internal_delta_per_step: list[int] = field(default_factory=list)
    outcome: StepOutcome | None = None
