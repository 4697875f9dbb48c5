"""The scheduler: continuous batching over one KV-cache manager, independent of time and of execution.

Each step, in vLLM v1's order:

1. running requests, oldest first, each get their next tokens (1 when
   decoding, a chunk when prefilling) within the token budget; when the cache
   is short, a victim is preempted (recompute: its blocks are freed and it
   rejoins the waiting queue; swap: its blocks move to the CPU pool, or it
   falls back to recompute when that pool is full) until the request fits or
   is itself the victim. Policy `fcfs`: the victim is the most recently
   admitted running request, and a request that preempted itself ends the
   pass. Policy `priority` (vLLM's): the victim is the running request with
   the largest (priority, arrival_time), the first such in running order; one
   already scheduled this step gives its tokens back to the budget; a request
   that preempted itself lets the pass go on to the next;
2. if nobody was preempted this step: swapped-out requests come back, oldest first;
3. then waiting requests are admitted in queue order (request_queue.py: arrival
   order, a preempted request at the front; or (priority, arrival_time,
   request_id) under `priority`), with their prefix-cache hits counted as
   computed, under `max_num_seqs`, the token budget and the admission
   watermark; the queue stops at the first request that does not fit. No
   running request is preempted to admit a waiting one, under either policy
   (vllm/v1/core/sched/scheduler.py `schedule`).

A request whose prompt reaches max_model_len, or that can never fit in the
whole cache, is rejected when it arrives, with the reason; an output that
would run past max_model_len is cut there (finished for length), as vLLM's
`check_stop` does (vllm/v1/core/sched/utils.py).

`schedule()` returns a StepPlan; `finish_step(plan, now)` applies its outcome.
Same inputs, same decisions: nothing here reads a clock or a random source.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from pagesim.config import Config
from pagesim.kv_contiguous import ContiguousKVCacheManager
from pagesim.kv_manager import KVCacheManager
from pagesim.kv_paged import PagedKVCacheManager
from pagesim.request import FINISHED, REJECTED, RUNNING, SWAPPED, WAITING, Request
from pagesim.request_queue import create_request_queue, priority_key


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
    # The lists schedule() sets, when there are any, default to an empty tuple (no list made per step); those it
    # adds to one by one are made anew with each addition (a step preempts, swaps in or admits a few requests).
    preempted: Sequence[str] = ()
    swapped_in: Sequence[str] = ()
    blocks_to_swap_out: Sequence[tuple[int, int]] = ()  # (gpu, cpu)
    blocks_to_swap_in: Sequence[tuple[int, int]] = ()  # (cpu, gpu)
    blocks_to_copy: Sequence[tuple[int, int]] = ()  # (src, dst), before the forward pass
    # Host (offload) tier: loads before the forward pass; stores of blocks filled by earlier steps, overlapped with it.
    blocks_to_load: Sequence[tuple[int, int]] = ()  # (host, gpu)
    blocks_to_store: Sequence[tuple[int, int]] = ()  # (gpu, host)
    admitted: Sequence[str] = ()
    # The fast path's decode group (Scheduler.group_decodes): running requests, before those of `scheduled`,
    # each decoding its next token this step, with no ScheduledRequest of their own; with the sum and the
    # largest of their num_computed_tokens at the start of the step.
    decode_group: list[Request] = ()
    decode_group_computed: int = 0
    decode_group_max_computed: int = 0
    decode_group_fewest_left: int = 0  # the fewest output tokens any of them has left (0: not known)
    decode_group_summary: DecodeSummary | None = None  # the decode summary it was taken by (it is all running then)
    # Requests that ended since the last non-empty plan: the executor frees their state (vLLM's finished_req_ids).
    finished_req_ids: Sequence[str] = ()
    # Steps since the last step with prefill tokens (1: the step right after it); 0 for a step with prefill tokens
    # or with none before it; and that step's prefill tokens. A decode step runs slower for several steps after a
    # prefill, the more so after a large one (StepFeatures).
    steps_since_prefill: int = 0
    last_prefill_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def is_empty(self) -> bool:
        return (not self.scheduled and not self.decode_group and not self.blocks_to_swap_out and not self.blocks_to_store
                and not self.blocks_to_load)


def clip_to_budget(num_new_tokens: int, budget: int, chunked: bool) -> int:
    """Tokens a request computes this step with `budget` left: all of them, a chunk of `budget` with
    chunked prefill, or 0 (it waits) when they do not fit unchunked."""
    if num_new_tokens <= budget:
        return num_new_tokens
    return budget if chunked else 0


def without(running: list[Request], ended: list[Request]) -> list[Request]:
    """A new list of the running requests but the ended ones (those of them that are running; in order)."""
    running = running.copy()
    for r in ended:
        try:
            running.remove(r)  # by identity (requests compare by identity), scanned in C
        except ValueError:  # a forked sample that ended at its fork never ran
            pass
    return running


NO_LIMIT = 1 << 62


@dataclass(slots=True)
class DecodeSummary:
    """What the fast path needs of the running requests, learnt while advancing them: every one of them decodes
    (Request.is_decoding); the fewest output tokens any has left, the sum and the max of their
    num_computed_tokens. Valid while the scheduler is at `step_id` with this `running` list."""

    step_id: int
    running: list
    fewest_left: int
    total_computed: int
    max_computed: int
    # The running requests by the step in which each samples its last token ({step id: requests, in running
    # order}), so a step or run that finishes some finds them without a pass; None until a finish needs it.
    # Kept with the summary (shared and updated by its successors), as steps advance every request alike.
    deadlines: dict | None = None
    # The running requests by the step in which each takes its next block (decode_block_needs), so a decode group
    # or run finds the requests that need one without a pass; None until one needs it. Kept like `deadlines`.
    block_needs: dict | None = None


def next_summary(previous: DecodeSummary | None, step_id: int, running: list, fewest_left: int, total_computed: int,
                 max_computed: int, deadlines: dict | None = None, block_needs: dict | None = None) -> DecodeSummary:
    """The decode summary a step or run leaves: `previous`, the summary it was taken by (stale now, and held by
    nobody else once replaced), brought up to date in place, or a new one when there was none. In place because a
    class instantiation costs ~1.9k instructions on Python 3.11 (~37k summaries a replay of Azure conv)."""
    if previous is None:
        return DecodeSummary(step_id, running, fewest_left, total_computed, max_computed, deadlines, block_needs)
    previous.step_id, previous.running, previous.fewest_left = step_id, running, fewest_left
    previous.total_computed, previous.max_computed = total_computed, max_computed
    previous.deadlines, previous.block_needs = deadlines, block_needs
    return previous


DEADLINES_MIN = 16  # the deadline index pays from about this many running requests (a plain pass is cheaper below)
BLOCK_NEEDS_MIN = 16  # ... and the block-need index


def decode_deadlines(running: list[Request], next_step: int) -> dict[int, list[Request]]:
    """{step id: requests of `running` that sample their last token in it}, in running order, when all decode one
    token per step from step `next_step` on (DecodeSummary.deadlines)."""
    deadlines: dict[int, list[Request]] = {}
    for r in running:
        key = next_step + r.output_len - r.num_output_tokens - 1
        at = deadlines.get(key)
        if at is None:
            deadlines[key] = [r]
        else:
            at.append(r)
    return deadlines


def decode_block_needs(running: list[Request], next_step: int, block_size: int) -> dict[int, list[Request]] | None:
    """{step id: requests of `running` that take a block in it, in running order}, when all decode one token per
    step from `next_step` on (DecodeSummary.block_needs): a request takes one when its block table ends at the slot
    of the token it computes, `len(block_ids) * block_size - num_computed_tokens` steps from now, then every
    `block_size` steps. None when a table reaches a whole block or more past the next token (no index then: the
    index keeps every key within block_size steps of the next one, which keeps each step's list in running order)."""
    needs: dict[int, list[Request]] = {}
    for r in running:
        needs.setdefault(next_step + len(r.block_ids) * block_size - r.num_computed_tokens, []).append(r)
    return needs if not needs or max(needs) < next_step + block_size else None


def add_block_need(needs: dict, req: Request, next_step: int, block_size: int) -> bool:
    """Put a request that decodes from `next_step` on into the index, after the requests there (it is newer than
    them); False when its table reaches a whole block or more past its next token (the index is then dropped)."""
    room = len(req.block_ids) * block_size - req.num_computed_tokens
    if room >= block_size:
        return False
    needs.setdefault(next_step + room, []).append(req)
    return True


def summary_block_needs(summary: DecodeSummary, running: list[Request], next_step: int, kv) -> dict | None:
    """The block-need index of `running` (the summary's requests, all decoding from `next_step` on) for a decode
    group or run to take its blocks by: the summary's, made now if it has none, where it applies and pays (tables
    that grow by block, no prefix caching, BLOCK_NEEDS_MIN running requests); else None, and the summary drops any
    index it had (blocks taken without it would leave it behind)."""
    if len(running) < BLOCK_NEEDS_MIN or not kv.grows_by_block or kv.caches_full_blocks:
        summary.block_needs = None
        return None
    if summary.block_needs is None:
        summary.block_needs = decode_block_needs(running, next_step, kv.block_size)
    return summary.block_needs


def take_block_needs(needs: dict, first: int, k: int, block_size: int) -> tuple[list[int], list[Request]]:
    """The block allocations of k decode steps from step `first` in the step-by-step order (by step, running order
    within a step): (the step within the run, the request) of each, as two lists; each request is put back
    `block_size` steps after its last one in the run, when it takes its next block. Ended requests (their tables
    freed) leave the index here.

    Each step's list is in running order: it holds the requests put back from the list block_size steps
    before, in its order, and after them the ones that started decoding since, which are newer. Every key is
    within block_size steps of the next step, so the lists due in a run are due again each block_size steps in
    the same order, and a list put back never meets another."""
    if k == 1:  # a single step
        at = needs.pop(first, None)
        live = [r for r in at if r.block_ids] if at else []
        if live:
            needs[first + block_size] = live
        return [0] * len(live), live
    steps: list[int] = []
    requests: list[Request] = []
    end = first + k
    if k <= len(needs):  # a short run: step by step
        due = [(key, at) for key in range(first, end) if (at := needs.pop(key, None))]
    else:  # a long run among few lists: the lists due, by step
        due = [(key, needs.pop(key)) for key in sorted([key for key in needs if key < end])]
    due = [(key, live) for key, at in due if (live := [r for r in at if r.block_ids])]
    while due:  # block_size steps at a time
        later = []
        for key, live in due:
            steps += [key - first] * len(live)
            requests += live
            key += block_size
            if key < end:
                later.append((key, live))
            else:
                needs[key] = live
        due = later
    return steps, requests


def finish_deadline(sched, deadlines: dict, step: int, summary_total: int, summary_max: int, now: float,
                    finished: list[Request]) -> tuple[int, bool]:
    """Finish the requests of `deadlines` due in `step` (their counters already advanced), in running order, into
    `finished` (Scheduler.finish_request); (the total minus their num_computed_tokens, whether one of them held the
    max). For the scheduler and the fast path's runs."""
    total, had_max = summary_total, False
    for r in deadlines.pop(step, ()):
        computed = r.num_computed_tokens
        total -= computed
        if computed == summary_max:
            had_max = True
        sched.finish_request(r, now, finished)
    return total, had_max


@dataclass(slots=True, init=False)
class StepOutcome:
    finished: list[Request]
    forked: list[Request]

    def __init__(self):  # written out: the generated one calls a default factory per list (each step and run part)
        self.finished = []
        self.forked = []


def make_kv_manager(config: Config, record_events: bool = False) -> KVCacheManager:
    """The manager of the configured layout; the scheduler knows it only through the KVCacheManager protocol."""
    if config.kv_layout == "paged":
        return PagedKVCacheManager(config, record_events)
    return ContiguousKVCacheManager(config, record_events)


class Scheduler:
    def __init__(self, config: Config, record_events: bool = False):
        self.config = config
        self.kv: KVCacheManager = make_kv_manager(config, record_events)
        self.max_model_len = config.resolved_max_model_len
        self.waiting = create_request_queue(config.policy)  # head: waiting[0]
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.finished: list[Request] = []
        self.rejected: list[Request] = []
        self.num_preemptions = 0
        # (request, time, event): 0 preempted (recompute), 1 swapped out, 2 resumed; read by the recorder.
        self.preemption_log: list[tuple[Request, float | None, int]] = []
        self.step_id = 0
        self.last_prefill_step = -1  # the last step with prefill tokens (-1: none yet; StepPlan.steps_since_prefill)
        self.last_prefill_tokens = 0  # its prefill tokens
        self.pending_copies: list[tuple[int, int]] = []  # from forks, made at the start of the next step
        self.reserved_seats = 0  # running seats held for the samples of admitted requests with n > 1
        self.finished_req_ids: list[str] = []  # ended since the last non-empty plan, for the executor
        # Part of the simulator's exact fast path (set by the driver loop): schedule() takes the running
        # requests' leading decodes as one group (StepPlan.decode_group) when all of them fit, as the
        # request-by-request pass would schedule them. Off for live mode, lockstep and parity, whose
        # executors and comparisons read every ScheduledRequest.
        self.group_decodes = False
        # Also the fast path's: what the last finish_step (or decode run) learnt of the running requests as it
        # advanced them, valid until the next step or change to `running`: None once stale (schedule() drops it,
        # as the step it schedules changes both; finish_step and decode runs set it anew), so the hot paths read it
        # as it is (decode_summary_now checks it).
        self.decode_summary: DecodeSummary | None = None

    # ---- requests in ---------------------------------------------------------------
    def add_request(self, request: Request) -> bool:
        """Queue a request, or reject it at once if it can never run; returns False when rejected."""
        reason = self.rejection_reason(request)
        if reason is not None:
            request.status = REJECTED
            request.reject_reason = reason
            self.rejected.append(request)
            return False
        request.status = WAITING
        self.waiting.add_request(request)
        return True

    def rejection_reason(self, request: Request) -> str | None:
        """vLLM's front end rejects a prompt that leaves no room for one output token
        (vllm/v1/engine/input_processor.py `_validate_prompt_len`); an output that would run past
        max_model_len is not known in advance and is cut there instead (`add_request`)."""
        if request.n > self.config.max_num_seqs:
            return f"n = {request.n} parallel samples exceed max_num_seqs {self.config.max_num_seqs}"
        if request.prompt_len >= self.max_model_len:
            return (f"prompt of {request.prompt_len} tokens leaves no room for an output token "
                    f"within max_model_len {self.max_model_len}")
        room = self.max_model_len - request.prompt_len
        if room < request.output_len:
            request.output_len = room
        return self.kv.rejection_reason(request)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.swapped)

    def leaked_blocks(self) -> int:
        """GPU and CPU blocks still held; 0 once every request has ended."""
        return self.kv.num_held_blocks()

    # ---- one step --------------------------------------------------------------------
    def decode_summary_now(self) -> DecodeSummary | None:
        """The decode summary when it describes the running requests now, else None."""
        summary = self.decode_summary
        if summary is not None and summary.step_id == self.step_id and summary.running is self.running:
            return summary
        return None

    def schedule(self, now: float | None = None) -> StepPlan:
        cfg = self.config
        kv = self.kv
        summary = self.decode_summary if self.group_decodes else None
        self.decode_summary = None  # stale from here: this step changes the step id and may change `running`
        plan = StepPlan(self.step_id)
        self.step_id += 1
        if self.pending_copies:
            plan.blocks_to_copy, self.pending_copies = self.pending_copies, []
        budget = cfg.max_num_batched_tokens
        chunked = cfg.enable_chunked_prefill
        scheduled = plan.scheduled
        running = self.running
        priority = cfg.policy == "priority"

        # 1. Running requests.
        i = 0
        if self.group_decodes and not priority and running:
            i = self._schedule_decode_group(plan, budget, summary)
            budget -= i
        allocate_slots, schedule_request, new_scheduled = kv.allocate_slots, scheduled.append, ScheduledRequest
        while i < len(running) and budget > 0:
            req = running[i]
            computed, out = req.num_computed_tokens, req.num_output_tokens
            left = req.prompt_len + out - computed  # num_tokens - num_computed_tokens
            num_new = left if left <= budget else clip_to_budget(left, budget, chunked)
            if not num_new:
                i += 1
                continue
            while not allocate_slots(req, num_new):
                if priority:
                    v = max(range(len(running)), key=lambda k: priority_key(running[k])[:2])
                    victim = running.pop(v)
                    if v < i:
                        i -= 1
                    budget += self._unschedule(victim, plan)
                else:
                    victim = running.pop()
                self._preempt(victim, plan, now)
                if victim is req:
                    break
            else:
                # is_decoding: the step computes exactly the last sampled token
                schedule_request(new_scheduled(req, computed, num_new, out > 0 and left == 1))
                budget -= num_new
                i += 1
                continue
            if priority:  # req preempted itself: the requests after it rank higher and may still fit
                continue
            break

        if not plan.preempted:
            # 2. Swapped-out requests come back first.
            while self.swapped and budget > 0:
                req = self.swapped[0]
                admit = self.admission(req, budget, len(running), swapped=True)
                if admit is None:
                    break
                num_new = admit[0]
                mapping = kv.swap_in(req, num_new, len(running))
                self.swapped.popleft()
                self.reserved_seats += self._seats(req) - 1
                plan.blocks_to_swap_in = [*plan.blocks_to_swap_in, *mapping]
                plan.swapped_in = [*plan.swapped_in, req.request_id]
                self.preemption_log.append((req, now, 2))
                req.status = RUNNING
                running.append(req)
                scheduled.append(ScheduledRequest(req, req.num_computed_tokens, num_new, req.is_decoding))
                budget -= num_new

            # 3. Waiting requests, in queue order.
            while self.waiting and budget > 0 and not self.swapped:
                req = self.waiting[0]
                admit = self.admission(req, budget, len(running), swapped=False)
                if admit is None:
                    break
                num_new, hits, num_hit = admit
                kv.allocate_slots(req, num_new, hits, num_hit, admission=True, num_running=len(running), checked=True)
                self.waiting.pop_request()
                self.reserved_seats += self._seats(req) - 1
                req.status = RUNNING
                running.append(req)
                plan.admitted = [*plan.admitted, req.request_id]
                if req.num_preemptions:
                    self.preemption_log.append((req, now, 2))
                scheduled.append(ScheduledRequest(req, req.num_computed_tokens, num_new, req.is_decoding))
                budget -= num_new

        if kv.has_pending_transfers():
            plan.blocks_to_load, plan.blocks_to_store = kv.take_transfers()
        num_decode, num_prefill = len(plan.decode_group), 0
        for s in scheduled:  # one pass: the token counts, and the first scheduling of requests new to a step
            if s.is_decode:
                num_decode += s.num_new_tokens
            else:
                num_prefill += s.num_new_tokens
            if s.request.first_scheduled_time is None:
                s.request.first_scheduled_time = now
        plan.num_decode_tokens, plan.num_prefill_tokens = num_decode, num_prefill
        if num_prefill:
            self.last_prefill_step, self.last_prefill_tokens = plan.step_id, num_prefill
        else:
            plan.steps_since_prefill, plan.last_prefill_tokens = self.since_prefill(plan.step_id)
        if self.finished_req_ids and not plan.is_empty:
            plan.finished_req_ids, self.finished_req_ids = self.finished_req_ids, []
        return plan

    def _schedule_decode_group(self, plan: StepPlan, budget: int, summary: DecodeSummary | None = None) -> int:
        """Schedule the leading running requests that decode (at most `budget`) as plan.decode_group, if
        the cache has a block for each that needs one; returns how many (0: none, the pass takes them).
        `summary`: the decode summary of the running requests, when there is one (no pass over them then).

        The request-by-request pass would give each its one token and its block in the same order, and
        preempt nobody (the blocks suffice for all), so the decisions are the same."""
        running = self.running
        fewest = 0  # not known
        if summary is not None and len(running) <= budget:  # every running request decodes
            n, total, longest, fewest = len(running), summary.total_computed, summary.max_computed, summary.fewest_left
        else:
            n = total = longest = 0
            for r in running if len(running) <= budget else running[:budget]:
                out, computed = r.num_output_tokens, r.num_computed_tokens
                if not out or computed != r.prompt_len + out - 1:  # not decoding (Request.is_decoding)
                    break
                n += 1
                total += computed
                if computed > longest:
                    longest = computed
        if n < 2:
            return 0
        group = running[:n]
        needy = None
        if fewest:  # the group is all of the running requests (the summary's): their block needs from the index
            needs = summary_block_needs(summary, running, plan.step_id, self.kv)
            if needs is not None:
                needy = take_block_needs(needs, plan.step_id, 1, self.kv.block_size)[1]
        if not self.kv.allocate_decode_step(group, needy):
            return 0
        plan.decode_group, plan.decode_group_computed, plan.decode_group_max_computed = group, total, longest
        plan.decode_group_fewest_left, plan.decode_group_summary = fewest, summary if fewest else None
        return n

    def admission(self, req: Request, budget: int, num_running: int, swapped: bool) -> tuple[int, list, int] | None:
        """(tokens to compute, prefix-hit blocks, hit tokens) if `req`, at the head of the swapped
        (`swapped`) or waiting queue, would be let in now with `budget` tokens left and `num_running`
        requests running; None if not. A pure question: schedule() and the fast path both ask it."""
        if not self._has_seats(req, num_running):
            return None
        kv = self.kv
        hits, num_hit = ([], 0) if swapped else kv.get_computed_blocks(req)
        # num_tokens - num_computed_tokens - the hits' tokens (num_tokens written out: a property is a dear call)
        left = req.prompt_len + req.num_output_tokens - req.num_computed_tokens - num_hit
        num_new = left if left <= budget else clip_to_budget(left, budget, self.config.enable_chunked_prefill)
        if not num_new:
            return None
        if swapped:
            ok = kv.can_swap_in(req, num_new, num_running)
        else:
            ok = kv.can_allocate(req, num_new, hits, num_hit, admission=True, num_running=num_running)
        return (num_new, hits, num_hit) if ok else None

    @staticmethod
    def _seats(req: Request) -> int:
        """Running slots a request takes: n for a request whose samples are not forked yet, else 1."""
        return req.n if req.n > 1 and req.parent_id is None and req.first_token_time is None else 1

    def _has_seats(self, req: Request, n_running: int | None = None) -> bool:
        """max_num_seqs counts sequences, including the samples a request will fork."""
        n = len(self.running) if n_running is None else n_running
        return n + self.reserved_seats + self._seats(req) <= self.config.max_num_seqs

    def _preempt(self, req: Request, plan: StepPlan, now: float | None) -> None:
        self.reserved_seats -= self._seats(req) - 1
        self.num_preemptions += 1
        req.num_preemptions += 1
        plan.preempted = [*plan.preempted, req.request_id]
        if self.config.preemption_mode == "swap":
            mapping = self.kv.swap_out(req)
            if mapping is not None:
                plan.blocks_to_swap_out = [*plan.blocks_to_swap_out, *mapping]
                req.status = SWAPPED
                self.swapped.append(req)
                self.preemption_log.append((req, now, 1))
                return
        self.preemption_log.append((req, now, 0))
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.status = WAITING
        self.waiting.prepend_request(req)

    @staticmethod
    def _unschedule(req: Request, plan: StepPlan) -> int:
        """Take `req` out of this step's plan (a priority victim scheduled earlier in the pass); its tokens."""
        for k, s in enumerate(plan.scheduled):
            if s.request is req:
                del plan.scheduled[k]
                return s.num_new_tokens
        return 0

    def since_prefill(self, step_id: int) -> tuple[int, int]:
        """(StepPlan.steps_since_prefill, last_prefill_tokens) of a step without prefill tokens that comes as `step_id`
        after the steps scheduled so far: (0, 0) when none of them had prefill tokens."""
        if self.last_prefill_step < 0:
            return 0, 0
        return step_id - self.last_prefill_step, self.last_prefill_tokens

    def finish_step(self, plan: StepPlan, now: float) -> StepOutcome:
        """Apply a step's outcome at time `now` (the end of the step): tokens computed, tokens sampled."""
        outcome = StepOutcome()
        kv = self.kv
        cache_full_blocks, bs, caching = kv.cache_full_blocks, kv.block_size, kv.caches_full_blocks
        num_running = len(self.running)
        # the decode summary of the requests that go on running (valid if all of them sample this step)
        fewest, total, longest, all_sample = NO_LIMIT, 0, 0, True
        group = plan.decode_group
        deadlines, max_left = None, False
        # the block-need index the group's blocks were taken by, kept for the next summary (block_needs)
        needs = plan.decode_group_summary.block_needs if plan.decode_group_summary is not None else None
        if plan.decode_group_fewest_left and not kv.caches_full_blocks and (
                plan.decode_group_fewest_left > 1 or len(group) >= DEADLINES_MIN):
            # No block needs registering: each request only counts its token, the ones due finish (found by the
            # summary's deadline index; nobody when the fewest left is > 1), and the group's part of the summary
            # follows from the plan's (all of them one token further).
            summary = plan.decode_group_summary
            if plan.decode_group_fewest_left == 1:
                deadlines = summary.deadlines
                if deadlines is None:
                    deadlines = decode_deadlines(group, plan.step_id)
            for req in group:
                req.num_computed_tokens += 1
                req.num_output_tokens += 1
            total, longest = plan.decode_group_computed + len(group), plan.decode_group_max_computed + 1
            if deadlines is None:
                fewest = plan.decode_group_fewest_left - 1
                deadlines = summary.deadlines
            else:
                total, max_left = finish_deadline(self, deadlines, plan.step_id, total, longest, now, outcome.finished)
                fewest = min(deadlines) - self.step_id + 1 if deadlines else NO_LIMIT
            group = ()
        for req in group:  # first in the step's order; each computes and samples one token
            old = req.num_computed_tokens
            req.num_computed_tokens = computed = old + 1
            if caching and computed % bs == 0:  # a block became full (a no-op without caching: KVCacheManager)
                cache_full_blocks(req, old)
            req.num_output_tokens = out = req.num_output_tokens + 1
            left = req.output_len - out
            if left <= 0:
                self.finish_request(req, now, outcome.finished)
                continue
            if left < fewest:
                fewest = left
            total += computed
            if computed > longest:
                longest = computed
        for s in plan.scheduled:
            req = s.request
            old = req.num_computed_tokens
            req.num_computed_tokens = computed = old + s.num_new_tokens
            if caching and computed // bs != old // bs:  # a block became full (else there is nothing to register)
                cache_full_blocks(req, old)
            out = req.num_output_tokens
            if computed < req.prompt_len + out:  # num_tokens
                all_sample = False
                continue  # a prefill chunk that does not reach the end samples nothing
            req.num_output_tokens = out = out + 1
            if req.first_token_time is None:
                req.first_token_time = now
                if req.n > 1 and req.parent_id is None:
                    self._fork_samples(req, now, outcome)
            left = req.output_len - out
            if left <= 0:
                self.finish_request(req, now, outcome.finished)
                continue
            if left < fewest:
                fewest = left
            total += computed
            if computed > longest:
                longest = computed
            if deadlines is not None:  # it decodes from the next step on (unless all_sample ends up False)
                key = self.step_id + left - 1
                at = deadlines.get(key)
                if at is None:
                    deadlines[key] = [req]
                else:
                    at.append(req)
            if needs is not None and not add_block_need(needs, req, self.step_id, bs):
                needs = None
        if outcome.finished:
            self.running = without(self.running, outcome.finished)
        # Every request that goes on running sampled this step (so it decodes next) when the step took each
        # running request once (the decode group and the scheduled ones) and none stopped within its prompt.
        if (self.group_decodes and all_sample and not outcome.forked
                and len(plan.decode_group) + len(plan.scheduled) == num_running):
            if max_left:  # a request with the most tokens finished: the next most, by a pass
                longest = max([r.num_computed_tokens for r in self.running], default=0)
            self.decode_summary = next_summary(plan.decode_group_summary, self.step_id, self.running, fewest, total,
                                               longest, deadlines, needs)
        else:
            self.decode_summary = None
        return outcome

    def finish_request(self, req: Request, now: float, finished: list[Request]) -> None:
        """End a request that sampled its last token at `now`: its blocks freed, and it appended to `finished` (a
        StepOutcome's, or a decode run's list: a plain list, no outcome object made per run)."""
        req.status = FINISHED
        req.finish_time = now
        self.kv.free(req)
        self.finished.append(req)
        self.finished_req_ids.append(req.request_id)
        finished.append(req)

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
                self.finish_request(child, now, outcome.finished)
                continue
            if copies is None:  # no block for the copy: the sample recomputes its prompt later
                child.num_computed_tokens = 0
                child.status = WAITING
                self.waiting.prepend_request(child)
                continue
            self.pending_copies.extend(copies)
            child.status = RUNNING
            self.running.append(child)
