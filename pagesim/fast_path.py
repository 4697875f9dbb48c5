"""The simulator's exact fast path: k identical pure-decode steps applied at once.

Between events the simulator need not step: when every running request is
decoding and the heads of the swapped and waiting queues cannot be admitted,
the next k steps are identical decode steps of the same batch. `decode_run_limit`
(`plan_decode_run`) certifies k, and `decode_run` applies the steps at once with
the cost model's vectorised durations, exactly as k schedule()/finish_step()
pairs would (the KV-cache manager takes the blocks in the step-by-step order),
stopping before the step that would start at or after `cut` (the next arrival
or snapshot); when requests finish in a run's last step before the cut it asks
again and goes on with the smaller batch in the same call. Per-request results,
step tables and block decisions equal step-by-step simulation
(tests/test_fast_path.py).

Both read the running requests' counters from the scheduler's DecodeSummary when the last step or
run left one (it advanced every running request and learnt them), else in one pass."""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

import numpy as np

from pagesim.kv_manager import DecodeBlocks
from pagesim.request import Request
from pagesim.scheduler import (DEADLINES_MIN, NO_LIMIT, Scheduler, decode_deadlines, finish_deadline, next_summary,
                               summary_block_needs, take_block_needs, without)

NO_RUN = (0, 0, 0)
NOBODY: list[Request] = []  # read-only: a run that finished nobody
SHORT_RUN = 32  # runs are timed over a window of this many steps first, on Python floats
FUSED_RUN = 1024  # ... or up to this many by a cost model that times them itself (decode_run_until: floats, or arrays)


def decode_run_limit(sched: Scheduler) -> int:
    """How many next steps are certainly identical pure-decode steps (plan_decode_run's k)."""
    return plan_decode_run(sched)[0]


def plan_decode_run(sched: Scheduler) -> tuple[int, int, int]:
    """(k, sum, max of the running requests' num_computed_tokens): k, how many next steps are certainly
    identical pure-decode steps of the same running set.

    0 unless every running request is decoding and will be scheduled, no fork
    copy nor host-tier copy is pending (the stores of the blocks the last step
    filled ride on the next step, which is then no plain decode step, and the
    step after it makes them loadable), and the head of the swapped (else
    waiting) queue would not be admitted now (`Scheduler.admission`, the question
    schedule() asks; the head then stays blocked: free memory only shrinks and
    the batch stays the same). The limit is the fewest remaining output tokens of
    a running request (the step in which one finishes is the run's last) and the
    most steps whose block allocations all succeed (`max_decode_steps`, so nobody
    is preempted).
    The caller also stops the run at the next arrival. Fewer than 2 steps is no run: k = 0
    (and the sums are not made).
    """
    running = sched.running
    n = len(running)
    budget = sched.config.max_num_batched_tokens - n
    if not n or sched.pending_copies or budget < 0 or sched.kv.has_pending_transfers():
        return NO_RUN
    if sched.swapped or sched.waiting:  # asked first: after an arrival it answers at once, without the pass below
        head = sched.swapped[0] if sched.swapped else sched.waiting[0]
        if budget > 0 and sched.admission(head, budget, n, swapped=bool(sched.swapped)) is not None:
            return NO_RUN
    summary = sched.decode_summary  # None when stale (Scheduler.decode_summary)
    if summary is not None:  # learnt as the last step or run advanced them
        limit, total, longest = summary.fewest_left, summary.total_computed, summary.max_computed
    else:
        limit = NO_LIMIT
        total = longest = 0
        for r in reversed(running):  # the newest first: the one most likely still prefilling
            out, computed = r.num_output_tokens, r.num_computed_tokens
            if not out or computed != r.prompt_len + out - 1:  # not decoding (Request.is_decoding)
                return NO_RUN
            left = r.output_len - out
            if left < limit:
                limit = left
            total += computed
            if computed > longest:
                longest = computed
    if limit < 2:  # a run of one step is no run: schedule() takes it
        return NO_RUN
    return sched.kv.max_decode_steps(running, limit), total, longest


def _time_run(cost_model, n: int, total: int, k: int, longest: int, shared: int, after: tuple[int, int], now: float,
              cut: float, window: int) -> tuple[int, list[float], list[float], float]:
    """(steps, their start times, their durations, end) of a decode run cut before `cut`, from decode_run_times,
    over a window of `window` steps first (0: none); `after`: the first step's (steps_since_prefill,
    last_prefill_tokens) (StepPlan)."""
    # Time a short window first: most runs are cut by an arrival within it. Start times are added one at a
    # time, as a step-by-step clock would (times[j]: start of step j; accumulate and cumsum are sequential).
    window = k if k <= window else window
    durations = cost_model.decode_run_times(n, total, window, longest, shared, *after).tolist() if window else []
    times = list(accumulate(durations, initial=now))
    m = bisect_left(times, cut, 0, window)  # steps starting before cut (starts are non-decreasing)
    if window and (m < window or window == k or times[window] >= cut):
        m = m or 1  # the first step always
        starts, durations, end = times[:m], durations[:m], times[m]
    else:  # not cut within the window: time the whole run
        full = cost_model.decode_run_times(n, total, k, longest, shared, *after)
        times = np.cumsum(np.concatenate(([now], full)))
        m = max(int(np.searchsorted(times[:k], cut, side="left")), 1)  # > window (the first step always)
        starts, durations, end = times[:m].tolist(), full[:m].tolist(), float(times[m])
    return m, starts, durations, end


def decode_run(sched: Scheduler, recorder, cost_model, k: int, now: float, cut: float,
               context: tuple[int, int] | None = None) -> tuple[int, float]:
    """Apply and record up to k decode steps (k <= decode_run_limit()) from `now`, none but the first starting at
    or after `cut`, at once, exactly as that many schedule()/finish_step() pairs would (the KV-cache manager takes
    their blocks in the step-by-step order; the requests due in the last one finish at its end); then,
    when requests finished in the last of them and the scheduler still certifies a run (plan_decode_run, asked
    after their blocks are freed: the queue heads stay blocked), go on with the smaller batch in the same call,
    up to `cut`: what the driver loop's next turns would do (nothing is due before `cut`). Each part is recorded
    as a run of its own; the memory after one part's last step is the next part's memory before it.

    `context`: the running requests' (sum, max) of num_computed_tokens (plan_decode_run's), when the caller
    has them. Returns (steps applied, end time of the last).
    """
    if context is None:
        computed = [r.num_computed_tokens for r in sched.running]
        context = (sum(computed), max(computed, default=0))
    until = None if cost_model.prices_sharing else getattr(cost_model, "decode_run_until", None)
    before = recorder.memory_state()
    record = recorder.record_decode_run
    kv = sched.kv
    caching, cache_full_blocks, bs = kv.caches_full_blocks, kv.cache_full_blocks, kv.block_size
    steps = 0
    while True:
        n, (total, longest) = len(sched.running), context
        timed = until(n, total, k, now, cut, FUSED_RUN) if until is not None else None
        if timed is not None:  # the roofline's one pass over the steps that start before cut
            starts, durations, end = timed
            m = len(starts)
        else:
            # reads of shared blocks, for a cost model that prices them: the same in every step (a run's new
            # blocks are its own); every running request is a decode row, so the manager's shared refs
            shared = kv.num_shared_refs() * bs if cost_model.prices_sharing else 0
            after = sched.since_prefill(sched.step_id)  # the run's first step's (StepPlan)
            m, starts, durations, end = _time_run(cost_model, n, total, k, longest, shared, after, now, cut,
                                                  0 if until is not None else SHORT_RUN)
        # The m steps applied at once, the last ending at `end`, exactly as m schedule()/finish_step() pairs would
        # apply them: the blocks they take (by step), the requests that finish in the last one.
        running, summary, first = sched.running, sched.decode_summary, sched.step_id  # summary: None when stale
        needs = summary_block_needs(summary, running, first, kv) if summary is not None else None
        needy = take_block_needs(needs, first, m, kv.block_size) if needs is not None else None
        blocks = kv.allocate_decode_steps(running, m, needy, summary.fewest_left if summary is not None else 0)
        sched.step_id = step_id = first + m
        if summary is not None and not kv.caches_full_blocks and (summary.fewest_left > m or n >= DEADLINES_MIN):
            # No block needs registering: each request only counts its m tokens, the ones due in the last step
            # finish (found by the summary's deadline index; nobody when the fewest left is > m), and the summary
            # follows from the last one (every running request m tokens further).
            fewest, total_after, longest_after = summary.fewest_left - m, total + n * m, longest + m
            deadlines = summary.deadlines
            if fewest <= 0 and deadlines is None:
                deadlines = decode_deadlines(running, first)
            for r in running:
                r.num_computed_tokens += m
                r.num_output_tokens += m
            if fewest > 0:  # nobody finished: the same running list and indexes, the counters moved
                finished = NOBODY
            else:  # == 0: the part stops at the first step in which a request finishes
                finished = []
                total_after, max_left = finish_deadline(sched, deadlines, step_id - 1, total_after, longest_after, end,
                                                        finished)
                sched.running = running = without(running, finished)
                fewest = min(deadlines) - step_id + 1 if deadlines else NO_LIMIT
                if max_left:
                    longest_after = max([r.num_computed_tokens for r in running], default=0)
            sched.decode_summary = next_summary(summary, step_id, running, fewest, total_after, longest_after,
                                                deadlines, needs)
        else:
            finished = []
            fewest, total_after, longest_after = NO_LIMIT, 0, 0  # the decode summary of those that go on running
            for r in running:
                old = r.num_computed_tokens
                r.num_computed_tokens = computed = old + m
                if caching and computed // bs != old // bs:  # a block became full (else there is nothing to register)
                    cache_full_blocks(r, old)
                r.num_output_tokens = out = r.num_output_tokens + m
                left = r.output_len - out
                if left <= 0:
                    sched.finish_request(r, end, finished)
                    continue
                if left < fewest:
                    fewest = left
                total_after += computed
                if computed > longest_after:
                    longest_after = computed
            if finished:
                sched.running = without(running, finished)
            sched.decode_summary = next_summary(summary, step_id, sched.running, fewest, total_after, longest_after,
                                                block_needs=needs)
        before = record(first, starts, durations, n, total, longest, blocks, finished, before)
        steps += m
        if not finished or end >= cut:
            return steps, end
        k, total, longest = plan_decode_run(sched)
        if k < 2:
            return steps, end
        context, now = (total, longest), end
