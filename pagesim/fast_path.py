"""The simulator's exact fast path: k identical pure-decode steps applied at once.

Between events the simulator need not step: when every running request is
decoding and the heads of the swapped and waiting queues cannot be admitted,
the next k steps are identical decode steps of the same batch. `decode_run_limit`
certifies k, `run_decode_steps` applies the k steps exactly as k
schedule()/finish_step() pairs would (the KV-cache manager takes the blocks in
the step-by-step order), and `decode_run` does both with the cost model's
vectorised durations, stopping before the step that would start at or after
`cut` (the next arrival or snapshot). Per-request results, step tables and
block decisions equal step-by-step simulation (tests/test_fast_path.py).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from pagesim.cost.features import shared_decode_tokens
from pagesim.scheduler import Scheduler, StepOutcome

SHORT_RUN = 32  # runs are timed over a window of this many steps first, on Python floats


def _starts_before(cut: float, now: float, durations: np.ndarray) -> tuple[list[float], np.ndarray, float]:
    """Start times of the steps (with these durations, from `now`) that start before `cut`, the first always;
    their durations and the end of the last. Added one at a time, as a step-by-step clock would."""
    times = list(accumulate(durations.tolist(), initial=now))  # times[j]: start of step j; sequential sums
    k = max(1, bisect_left(times, cut, 0, len(durations)))  # starts are non-decreasing
    return times[:k], durations[:k], times[k]


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


def decode_run_limit(sched: Scheduler) -> int:
    """How many next steps are certainly identical pure-decode steps of the same running set.

    0 unless every running request is decoding and will be scheduled, no fork
    copy is pending, and the head of the swapped (else waiting) queue would not
    be admitted now (`Scheduler.admission`, the question schedule() asks; the
    head then stays blocked: free memory only shrinks and the batch stays the
    same). The limit is the fewest remaining output tokens of a running request
    (the step in which one finishes is the run's last) and the most steps whose
    block allocations all succeed (`max_decode_steps`, so nobody is preempted).
    The caller also stops the run at the next arrival. Fewer than 2 steps is no run: 0.
    """
    running = sched.running
    n = len(running)
    budget = sched.config.max_num_batched_tokens - n
    if not n or sched.pending_copies or budget < 0:
        return 0
    limit = 1 << 62
    for r in reversed(running):  # the newest first: the one most likely still prefilling
        out = r.num_output_tokens
        if not out or r.num_computed_tokens != r.prompt_len + out - 1:  # not decoding (Request.is_decoding)
            return 0
        left = r.output_len - out
        if left < limit:
            limit = left
    if limit < 2:  # a run of one step is no run: schedule() takes it
        return 0
    if sched.swapped or sched.waiting:
        head = sched.swapped[0] if sched.swapped else sched.waiting[0]
        if budget > 0 and sched.admission(head, budget, n, swapped=bool(sched.swapped)) is not None:
            return 0
    return sched.kv.max_decode_steps(running, limit)


def run_decode_steps(sched: Scheduler, k: int, end: float, context: list[int] | None = None) -> DecodeRun:
    """Apply k pure-decode steps at once, the last ending at `end`. Requires k <= decode_run_limit().

    `context`: the running requests' num_computed_tokens, when the caller has them.
    """
    kv = sched.kv
    running = sched.running
    if context is None:
        context = [r.num_computed_tokens for r in running]
    run = DecodeRun(k=k, num_seqs=len(running), context_start=sum(context), max_context_start=max(context, default=0))
    blocks = kv.allocate_decode_steps(running, k)
    run.blocks_per_step = blocks.blocks_per_step
    run.evicted_per_step = blocks.evicted_per_step
    run.internal_delta_per_step = blocks.internal_delta_per_step
    sched.step_id += k
    outcome = StepOutcome()
    for r in running:
        old = r.num_computed_tokens
        r.num_computed_tokens = old + k
        kv.cache_full_blocks(r, old)
        r.num_output_tokens += k
        if r.num_output_tokens >= r.output_len:
            sched.finish_request(r, end, outcome)
    if outcome.finished:
        done = {id(r) for r in outcome.finished}
        sched.running = [r for r in running if id(r) not in done]
    run.outcome = outcome
    return run


def decode_run(sched: Scheduler, recorder, cost_model, k: int, now: float, cut: float) -> tuple[int, float]:
    """Apply and record up to k decode steps from `now`, none but the first starting at or after `cut`.

    Returns (steps applied, end time of the last).
    """
    context = [r.num_computed_tokens for r in sched.running]
    n, total, longest = len(context), sum(context), max(context, default=0)
    # reads of shared blocks, for a cost model that prices them: the same in every step (a run's new blocks are its own)
    shared = (shared_decode_tokens([r.block_ids for r in sched.running], sched.kv.block_size)
              if cost_model.prices_sharing else 0)
    if k > SHORT_RUN:  # time a short window first: most runs are cut by an arrival within it
        starts, durations, end = _starts_before(cut, now, cost_model.decode_run_times(n, total, SHORT_RUN, longest,
                                                                                        shared))
        if len(starts) == SHORT_RUN and end < cut:  # not cut within the window: time the whole run
            starts = None
    else:
        starts, durations, end = _starts_before(cut, now, cost_model.decode_run_times(n, total, k, longest, shared))
    if starts is None:
        durations = cost_model.decode_run_times(n, total, k, longest, shared)
        # times[j] = now + d0 + ... + d(j-1), added one at a time as a step-by-step clock would (cumsum is sequential)
        times = np.cumsum(np.concatenate(([now], durations)))
        k = max(1, int(np.searchsorted(times[:k], cut, side="left")))  # steps starting before cut; the first always
        starts, durations, end = times[:k], durations[:k], float(times[k])
    k = len(starts)
    before = recorder.memory_state()
    first_step = sched.step_id
    run = run_decode_steps(sched, k, end, context)
    recorder.record_decode_run(first_step, starts, durations, run, before)
    return k, end
