"""Calibration: the `profile` cost model fitted to the GPU executor's own step times.

`python -m pagesim calibrate` runs synthetic workloads (calibration_workloads: decode batches grown through the
CUDA-graph sizes, single prompts, prompts arriving into running decodes, shared prefixes, ...) through the live
loop on the wall clock, as live mode runs a trace (engine.live: the executor, its warm-up, the stitched durations
and the device readings), one row per timed step with its features and duration (run_calibration). It fits the
profile to those rows with whole workloads held out in turn (fit_and_write) and saves the rows beside the profile
(CALIBRATION_ROWS_SUFFIX), so `calibrate --refit` can fit them again without a GPU. `live --calibrate` does the
same on the run's own executor and cache before the run (run_profile), with the workloads that fit that cache.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import re
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from engine.live import (DeviceReadings, environment, make_executor, process_age_s, stitch_durations, warm_up,
                         without_prefix_caching)
from pagesim.config import Config
from pagesim.cost.features import StepFeatures, prefill_grid, shared_tokens
from pagesim.cost.graphs import GRAPH_BATCH_SIZES, MIXED_GRAPH_TOKEN_SIZES
from pagesim.cost.profile import CALIBRATION_ROWS_SUFFIX, MAKESPAN_COLUMN, WALK_COLUMNS, FitRowsError
from pagesim.errors import UserError
from pagesim.loop import Arrivals, Hooks, WallClock, drive, run
from pagesim.options import non_negative_float, positive_int
from pagesim.outputs import prepare_output_file
from pagesim.recorder import FEATURE_COLUMNS, Recorder
from pagesim.request import Request
from pagesim.scheduler import Scheduler
from pagesim.utils import cdiv, frozen_heap, paused_gc

DECODE_STEPS_PER_SIZE = 10  # decode steps the calibration's decode grid times at each batch size
STEADY_DECODE_STEPS = 64  # decode steps of each steady-* workload after its prefill
# Most calibration workloads prefill their sequences only to decode over them: of a workload's steps that prefill at
# least ADVANCE_TOKENS tokens, the first TIMED_LARGE_STEPS are timed and the rest advanced without being computed
# (GPUExecutor.advance) and left out of the rows; the families that time large steps on purpose are timed whole.
ADVANCE_TOKENS = 4096
TIMED_LARGE_STEPS = 3
TIMED_WHOLE = ("prefill-", "eager-", "mixed-")


class ContextBuilding:
    """One calibration workload's executor: runs each step on `executor`, or advances it (module constants above);
    `advanced` holds the step ids it advanced."""

    def __init__(self, executor, timed_whole: bool):
        self.executor, self.timed_whole = executor, timed_whole
        self.large = 0
        self.advanced: set[int] = set()

    def execute(self, plan) -> float:
        if plan.num_prefill_tokens >= ADVANCE_TOKENS and not self.timed_whole:
            self.large += 1
            if self.large > TIMED_LARGE_STEPS:
                self.advanced.add(plan.step_id)
                return self.executor.advance(plan)
        return self.executor.execute(plan)


def _shared_prefix_rows(b: int, g: int, p: int, c: int, out: int, first: int) -> list[tuple[int, ...]]:
    """b decode rows over g shared prefixes of p tokens, each row p + c prompt tokens and `out` output tokens after
    step `first`: the first request of each prefix released at the start (it computes the prefix, decoding until
    the others are done), the other b - g spread over the prefixes and released before step `first`."""
    groups: list[tuple[int, ...]] = []
    for j in range(g):
        groups += [(1, p + c, out + first, 0, p, j), ((b - g) // g + (j < (b - g) % g), p + c, out, first, p, j)]
    return groups


def calibration_workloads(max_model_len: int) -> list[tuple[str, list[tuple[int, ...]]]]:
    """Synthetic workloads as (name, [(count, prompt_len, output_len[, release_step[, prefix_len, prefix_id]]), ...]).

    A group is released before the workload's step `release_step` (0, the default: at the start);
    with prefix_len, its requests' first prefix_len prompt tokens are one shared prefix per prefix_id
    (the same content; the workload runs with prefix caching, so later requests hit it).
    Decode grid: per context 128..4096, a batch that grows through the CUDA-graph sizes 1, 2, 4, ...,
    up to 256 sequences (capped at 256k cached tokens): the sequences that take it to the next size
    are released once it has decoded DECODE_STEPS_PER_SIZE steps at this one, so each sequence is
    prefilled once for every batch size; prefill grid: single prompts 16..8192
    tokens; mixed: long prompts arriving into running decodes (chunked prefill packs them with the
    decode tokens); skew: b short sequences (128 or 1024 tokens) decoding with one long one (2k-6k),
    b + 1 = 16..128 rows, so that the longest sequence and the total context vary apart (the decode
    kernel's time follows the longest sequence once it stops splitting sequences, profile.py); arrive:
    small prompts (64-512 tokens) released one at a time into a running decode batch (some with a long
    sequence in it): small eager mixed steps; shared: b sequences reading g shared prefixes of p tokens
    plus c tokens of their own (decode rows that read the same blocks: decode_shared_tokens), the g
    first ones released ahead to compute the prefixes; spread: b sequences whose contexts are spread
    evenly from lo to hi tokens (a serving batch: neither uniform nor one long among short ones; without
    them the fit cannot tell how many sequences saturate memory, the profile's max_context_lanes); served:
    b sequences with contexts spread log-uniformly and outputs of different lengths, so the batch shrinks
    through the sizes between the graph sizes, as served batches do; steady: b spread contexts decoding
    STEADY_DECODE_STEPS steps after their prefill (decode steps long past a prefill, as a window's mostly are);
    buckets: prompts released one at a time into a small decode batch, sized so that each step lands in a mixed-step token bucket (graph
    mixed steps, 16..4096 tokens), two of each; eager: the same, with steps of 4.3k-8.1k tokens (eager mixed
    steps above the largest bucket, up to the budget); prefix: the buckets' steps
    with a cached prefix of 2k-4k tokens before each chunk (prefix-cache hits); multi: 2, 4 or 8 prompts released
    together into a small decode batch, from scratch and after a cached prefix (graph mixed steps with several
    prefill sequences, as recomputes after preemption make); kshot: k = 1..8 short prompts at once after a cached
    prefix that a decode batch reads too (graph mixed steps of a k-shot window).
    """
    out = []
    budget = 8192  # the calibration's max_num_batched_tokens: the batch is prefilled in ceil(tokens / budget) steps
    for b in (15, 31, 63, 127):
        for short in (128, 1024):
            for long in (2048, 4096, 6144):
                if long + 24 <= max_model_len:
                    out.append((f"skew-b{b}-s{short}-l{long}", [(1, long, 24), (b, short, 24)]))
    for b, c, long in ((8, 1024, 0), (32, 512, 0), (32, 512, 4096), (64, 1024, 0), (63, 256, 6144), (128, 512, 0),
                       (127, 512, 4096), (200, 256, 0)):
        if max(c, long) + 48 > max_model_len:
            continue
        first = -(-(b * c + long) // budget) + 2  # a couple of decode-only steps before the first arrival
        groups = ([(1, long, 48)] if long else []) + [(b, c, 48)]
        groups += [(1, p, 3, first + 4 * i) for i, p in enumerate((64, 128, 256, 512) * 2)]
        out.append((f"arrive-b{b}-c{c}" + (f"-l{long}" if long else ""), groups))
    # Prompts released one at a time into a small running decode batch, so that each lands in a step of a chosen
    # packed size, twice: buckets, one in each mixed-step token bucket (16..4096 tokens: graph mixed steps); eager,
    # steps above the largest bucket up to the budget (4.3k-8.1k tokens: eager mixed steps); prefix, bucket-sized
    # prompt suffixes after a cached prefix of `pre` tokens (computed by a first request at the start): chunks that
    # attend to far more keys than their own, as prefix-cache hits do (each prompt as long as the window allows).
    largest = MIXED_GRAPH_TOKEN_SIZES[-1]
    for kind, totals, shapes in (
            ("buckets", MIXED_GRAPH_TOKEN_SIZES, ((4, 512, 0), (24, 1024, 0))),
            ("eager", [round(largest * f) for f in (1.05, 1.15, 1.25, 1.35, 1.5, 1.65, 1.8, 1.98)],
             ((4, 512, 0), (24, 1024, 0))),
            ("prefix", MIXED_GRAPH_TOKEN_SIZES, ((4, 512, 2048), (16, 1024, 4096)))):
        for b, c, pre in shapes:
            if max(c, pre + 16) + 48 > max_model_len:
                continue
            first = -(-(b * c + pre) // budget) + 2
            prompts = [max(1, t - b - 2) for t in totals if b + 2 < t <= max_model_len - 2 - pre and t <= budget] * 2
            shared = (pre, 0) if pre else ()
            out.append((f"{kind}-b{b}-c{c}" + (f"-p{pre}" if pre else ""), [(b, c, 3 * len(prompts) + 12)]
                        + ([(1, pre + 16, 2, 0, pre, 0)] if pre else [])
                        + [(1, pre + p, 2, first + 3 * i, *shared) for i, p in enumerate(prompts)]))
    # Several prompts released in the same step into a small running decode batch: graph mixed steps with 2-8
    # prefill sequences (as recomputed requests make after preemptions; the workloads above release one at a time),
    # from scratch (in every bucket from 64 tokens) and after a cached prefix (in the buckets up to 2048 tokens; the
    # larger ones have their prefix-hit rows from prefix-*, and the calibration's time stays within its target).
    for b, c, pre in ((8, 512, 0), (8, 512, 2048)):
        if max(c, pre + 16) + 48 > max_model_len:
            continue
        first = -(-(b * c + pre) // budget) + 2
        releases = [(k, (t - b - 2) // k) for k in (2, 4, 8) for t in MIXED_GRAPH_TOKEN_SIZES[2:]
                    if t - b - 2 >= k and t <= (2048 if pre else largest) and pre + (t - b - 2) // k + 2 <= max_model_len]
        shared = (pre, 0) if pre else ()
        out.append((f"multi-b{b}-c{c}" + (f"-p{pre}" if pre else ""), [(b, c, 3 * len(releases) + 12)]
                    + ([(1, pre + 16, 2, 0, pre, 0)] if pre else [])
                    + [(k, pre + p, 2, first + 3 * i, *shared) for i, (k, p) in enumerate(releases)]))
    for c in (128, 512, 1024, 2048, 4096):
        sizes = [b for b in GRAPH_BATCH_SIZES if b * c <= 256 * 1024]
        release, levels = 0, []
        for smaller, b in zip([0] + sizes, sizes):
            levels.append((b - smaller, release))
            # the new sequences' prefill (decode rows take their share of the budget), then the decode steps
            release += -(-(b - smaller) * c // (budget - smaller)) + 1 + DECODE_STEPS_PER_SIZE
        if c + release <= max_model_len:  # every sequence decodes until the last size's steps are done
            out.append((f"decode-c{c}", [(n, c, release - r, r) for n, r in levels]))
    for p in (16, 64, 256, 1024, 2048, 4096, 8000):
        if p + 2 <= max_model_len:
            out.append((f"prefill-{p}", [(1, p, 2)] * 3))
    for b, p in ((8, 2048), (32, 1024), (64, 4096), (128, 512)):
        if p + 48 <= max_model_len:
            out.append((f"mixed-b{b}-p{p}", [(b, 256, 48), (4, p, 4)]))
    # Long context (a model with a long window): chunked prefills over long contexts, long decodes.
    for p in (16384, 30000):
        if p + 2 <= max_model_len:
            out.append((f"prefill-{p}", [(1, p, 2)]))
    for b, c in ((4, 16384), (16, 12288)):
        if c + 24 <= max_model_len:
            out.append((f"decode-b{b}-c{c}", [(b, c, 24)]))
    if 24576 + 24 <= max_model_len:
        out.append(("skew-b31-s1024-l24576", [(1, 24576, 24), (31, 1024, 24)]))
    for b, lo, hi in ((8, 256, 4096), (16, 256, 4096), (32, 256, 4096), (8, 1024, 8192), (16, 1024, 8192),
                      (4, 4096, 24576)):
        if hi + 24 <= max_model_len:
            out.append((f"spread-b{b}-{lo}-{hi}", [(1, lo + (hi - lo) * i // (b - 1), 24) for i in range(b)]))
    for b, p, c, g in ((8, 4096, 256, 1), (16, 1024, 1024, 1), (16, 512, 2048, 1), (32, 2048, 512, 2), (64, 1024, 256, 1),
                       (32, 8192, 512, 1), (64, 4096, 1024, 4), (128, 2048, 256, 8), (4, 16384, 256, 1),
                       (8, 12288, 1024, 2),
                       # k-shot-like: 8-32 rows over 4 prefixes of ~1.5k tokens, a third to two thirds of reads repeats
                       (8, 1536, 512, 4), (16, 1536, 512, 4), (24, 1536, 768, 4), (32, 1536, 384, 4)):
        if p + c + 64 > max_model_len:
            continue
        first = -(-g * (p + c) // budget) + 1  # the g prefixes computed (whole prompts of their first requests)
        out.append((f"shared-b{b}-p{p}-c{c}" + (f"-g{g}" if g > 1 else ""), _shared_prefix_rows(b, g, p, c, 24, first)))
    # Arrivals over shared prefixes (round 46): b rows decoding over g = 4 prefixes of 1,536 tokens, then k = 1..8
    # requests at once with a prefix of theirs and a short suffix (16-256 tokens): graph mixed steps of k
    # one-tile chunks that hit a prefix the decode rows read, as every k-shot step is (the shared and multi workloads'
    # chunks read a prefix no decode row reads, or come one at a time: docs/cost-model-history.md, round 46).
    g, p, c = 4, 1536, 512
    releases = [(k, s) for s in (16, 64, 256) for k in (1, 2, 4, 8)]
    for b in (8, 16, 32):
        if p + c + 3 * len(releases) + 64 > max_model_len:
            continue
        first = -(-g * (p + c) // budget) + 1  # the g prefixes computed (whole prompts of their first requests)
        groups = _shared_prefix_rows(b, g, p, c, 3 * len(releases) + 12, first)  # the rows outlast the releases
        groups += [(k, p + s, 2, first + 3 + 3 * i, p, i % g) for i, (k, s) in enumerate(releases)]
        out.append((f"kshot-b{b}-p{p}", groups))
    # Served-like: b sequences whose contexts spread log-uniformly over 256..6144 tokens in a scrambled order and
    # whose outputs end at different steps, so the batch shrinks through sizes between the graph sizes
    # (live batches are rarely a graph size, nor uniform, nor one long among short ones).
    for b in (6, 12, 24, 48):
        hi = min(6144, max_model_len - 40)
        frac = [(i * 0.6180339887) % 1 for i in range(b)]
        out.append((f"served-b{b}", [(1, round(256 * (hi / 256) ** f), 8 + (i * 7) % 25) for i, f in enumerate(frac)]))
    # Steady: b sequences with contexts spread log-uniformly over 256..4096 tokens decoding STEADY_DECODE_STEPS steps
    # after one prefill. A decode step runs slower for several steps after a step with prefill tokens (2-7% right
    # after, ~1% ten steps on, in calibrations and windows alike: docs/accuracy-history.md, round 18), and a serving
    # window's decode steps are mostly tens of steps past one; the decode grid's are at most DECODE_STEPS_PER_SIZE.
    for b in (4, 12, 24, 48):
        hi = min(4096, max_model_len - STEADY_DECODE_STEPS - 2)
        frac = [(i * 0.6180339887) % 1 for i in range(b)]
        out.append((f"steady-b{b}", [(1, round(256 * (hi / 256) ** f), STEADY_DECODE_STEPS) for f in frac]))
    return out


SAVE_EVERY_S = 10.0  # run_calibration hands its rows so far to on_workload at most this often (and after the last)


def run_calibration(executor, config: Config, progress=None, workloads=None, on_workload=None,
                    advance: bool = True, rest: float = 0.0, save_every_s: float = SAVE_EVERY_S) -> pd.DataFrame:
    """Run every calibration workload through the live loop; one row per step with its features and duration.

    `on_workload(rows so far)` is called after a workload when `save_every_s` have passed since the last call, and
    after the last workload (calibrate saves them as it goes, so an interrupted calibration can be refitted; saving
    after every workload rewrote the growing gzipped CSV 78 times: 7 s of a calibration on a 2-core CPU). With `advance`
    (ContextBuilding), the large steps after each workload's first TIMED_LARGE_STEPS are advanced and have no row;
    without it every step is run and has its row, as in calibrations made before round 9. The garbage collector
    runs between workloads only, on that workload's objects (the set-up is frozen out of it: frozen_heap).
    `rest` (calibrate --rest): after each timed step the GPU idles `rest` times the step's duration (left out of
    the step's own duration), so the calibration's mean power comes down to a serving engine's (bench/NOTES.md,
    "Calibration under the power cap"). Each row's `started_unix` is its workload's WallClock.started_unix.
    """
    frames = []
    if workloads is None:
        workloads = calibration_workloads(config.resolved_max_model_len)
    first_seq = 0
    last_save = time.perf_counter()
    with frozen_heap():
        for w, (name, groups) in enumerate(workloads):
            requests = _workload_requests(w, groups, first_seq, config.block_size)
            first_seq += len(requests)
            timed_whole = not advance or name.startswith(TIMED_WHOLE)
            sharing = any(len(g) > 4 for g in groups)  # a workload with shared prefixes: prefix caching on
            gc.collect()  # a fraction of a ms (frozen_heap); no collection pauses a timed step (paused_gc)
            with paused_gc():
                frames.append(_workload_rows(executor, config, requests, timed_whole, sharing, rest).assign(workload=name))
            if on_workload is not None and (w == len(workloads) - 1
                                            or time.perf_counter() - last_save >= save_every_s):
                on_workload(pd.concat(frames, ignore_index=True))
                last_save = time.perf_counter()
            if progress is not None:
                progress(1)
    return pd.concat(frames, ignore_index=True)


def run_calibration_with_bar(executor, config: Config, workloads, **options) -> pd.DataFrame:
    """run_calibration behind calibrate's progress bar, a workload a tick: pagesim.progress.counted, as replay's and
    live's bars (redrawn at most every 0.5 s, rarely to a log; TQDM_DISABLE=1 turns it off)."""
    from pagesim.progress import counted

    with counted(None, len(workloads), "calibrate", "workload") as bar:
        return run_calibration(executor, config, progress=bar.update, workloads=workloads, **options)


def _workload_requests(w: int, groups, first_seq: int, bs: int) -> list[tuple[int, Request]]:
    """Workload w's requests as (release step, request), in release order, numbered on from first_seq."""
    pending, seq = [], first_seq
    for count, p, o, *rest in groups:
        release, prefix, prefix_id = (list(rest) + [0, 0, 0])[:3]
        # a shared prefix: the same hash ids (so the same tokens and prefix-cache keys) in every request of it
        hashes = tuple(range((w * 64 + prefix_id) << 20, ((w * 64 + prefix_id) << 20) + prefix // bs)) or None
        for _ in range(count):
            seq += 1
            pending.append((release, Request(f"cal-{seq}", 0.0, p, o, seq_no=seq, prefix_hash_ids=hashes,
                                             hash_block_size=bs if hashes else None)))
    pending.sort(key=lambda x: x[0])
    return pending


def _workload_rows(executor, config: Config, pending: list[tuple[int, Request]], timed_whole: bool,
                   sharing: bool, rest: float = 0.0) -> pd.DataFrame:
    """One workload through the live loop: its timed steps' rows (advanced steps left out, ContextBuilding), each
    step followed by `rest` times its duration of idle GPU (run_calibration), taken out of its stitched duration;
    `gpu_time_s` is each step's device time (GPUExecutor.last_gpu_time_s), so a calibration's steps and a live run's
    can be told apart into device and host time, and `sm_clock_mhz` the SM clock while it ran (last_sm_clock_mhz)."""
    bs = config.block_size
    sched = Scheduler(without_prefix_caching(config).replace(enable_prefix_caching=sharing))
    tables: dict[int, tuple] = {}  # step -> its decode rows' and prefill chunks' block tables, as planned
    walks: dict[int, tuple[int, int, int]] = {}  # step -> its prefill programs' walks and the kernel's makespan
    # (not recorded columns); the makespan by the executor's prefill kernel (NoTime's: the Triton kernel's rule)
    grid = prefill_grid(config.model, config.gpu, getattr(executor, "prefill_kernel", None))

    def planned(plan):  # inside the timed step: copies only (C speed), counted after the run
        tables[plan.step_id] = ([s.request.block_ids[:] for s in plan.scheduled if s.is_decode],
                                [s.request.block_ids[:] for s in plan.scheduled if not s.is_decode])

    def features_of(plan):  # the recorder's own call, keeping what it does not record
        f = StepFeatures.from_plan(plan, prefill_grid=grid)
        walks[plan.step_id] = (f.prefill_tile_walks, f.prefill_longest_walk, f.prefill_makespan)
        return f

    rested: dict[int, float] = {}  # step -> the idle time after it (rest)
    readings = DeviceReadings(executor)

    def stepped(plan, duration, outcome):  # after the step's recording, before the next step's schedule
        if plan.step_id not in context.advanced:
            readings.take(plan.step_id)
            if rest > 0:
                t0 = time.perf_counter()
                time.sleep(rest * duration)
                rested[plan.step_id] = time.perf_counter() - t0

    rec = Recorder(sched, features_of)
    context = ContextBuilding(executor, timed_whole)
    clock = WallClock()
    # Released before their step; an idle engine takes the next group at once (no step is ever empty).
    run(drive(sched, context, rec, Arrivals(pending, by_step=True), clock,
              hooks=Hooks(plan=planned if sharing else None, step=stepped)))
    steps = stitch_durations(rec.steps_frame(), set())
    steps["duration_s"] -= steps["step"].map(rested).fillna(0.0)
    readings.add_to(steps)  # as in a live run's steps
    steps["started_unix"] = clock.started_unix
    shared = {step: shared_tokens(d, p, bs) for step, (d, p) in tables.items()}
    for i, col in enumerate(("decode_shared_tokens", "prefill_shared_tokens")):
        steps[col] = steps["step"].map({k: v[i] for k, v in shared.items()}).fillna(0).astype(np.int64)
    for i, col in enumerate((*WALK_COLUMNS, MAKESPAN_COLUMN)):
        steps[col] = steps["step"].map({k: v[i] for k, v in walks.items()}).fillna(0).astype(np.int64)
    steps = steps.iloc[:-1]  # the last step has no successor to stitch to
    return steps[~steps["step"].isin(context.advanced)]


# what a calibration's rows hold beside the recorder's columns (StepFeatures): the prefill programs' walks and the
# prefill chunks' reads of shared blocks; rows saved before them get them by replay (with_replayed_walks)
REPLAYED_COLUMNS = (*WALK_COLUMNS, "prefill_shared_tokens")


class NoTime:
    """A stand-in executor: calibration workloads replayed for their plans only (each step 'takes' no time)."""

    def execute(self, plan) -> float:
        return 0.0

    advance = execute


class UnreplayableRows(UserError):
    """Calibration rows whose workloads this version cannot replay (a workload renamed or reshaped since they were
    timed), so their prefill walks cannot be filled in; the message says which row or workload (the bench scripts
    stop on it; `calibrate --refit` fits without the walks, with a warning)."""


def with_replayed_walks(rows: pd.DataFrame, config: Config, source: str) -> pd.DataFrame:
    """Calibration rows saved before the prefill walks (or the prefill chunks' shared reads) were kept, with
    REPLAYED_COLUMNS filled in by replaying their
    workloads through the scheduler without a GPU (releases go by step, so the plans do not depend on time);
    every row must meet its replayed step with the same recorded features, else UnreplayableRows."""
    if all(c in rows for c in REPLAYED_COLUMNS) or "workload" not in rows:
        return rows
    named = dict(calibration_workloads(config.resolved_max_model_len))
    wanted = list(dict.fromkeys(rows["workload"].astype(str)))
    unknown = [w for w in wanted if w not in named]
    if unknown:
        raise UnreplayableRows(f"{source}: workload {unknown[0]!r} is not one of this version's calibration "
                               "workloads, so the prefill walks cannot be filled in by replaying it")
    # every step replayed: rows saved before round 9 have a row for each (an advancing calibration's rows are a subset)
    replayed = run_calibration(NoTime(), config, workloads=[(w, named[w]) for w in wanted], advance=False)
    keys = ["workload", "step"]
    aligned = [c for c in FEATURE_COLUMNS if c in rows]  # every recorded feature the saved rows have
    merged = rows.drop(columns=[c for c in REPLAYED_COLUMNS if c in rows]).merge(
        replayed[keys + aligned + list(REPLAYED_COLUMNS)], on=keys, how="left", suffixes=("", "_replayed"),
        validate="one_to_one")
    for c in aligned:
        bad = merged[c + "_replayed"].isna() | (merged[c] != merged[c + "_replayed"])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UnreplayableRows(f"{source}: row {i} (workload {merged.at[i, 'workload']}, step "
                                   f"{merged.at[i, 'step']}) does not match its replayed step ({c}), so the prefill walks "
                                   "cannot be filled in by replaying it")
    return merged.drop(columns=[c + "_replayed" for c in aligned]).astype({c: np.int64 for c in REPLAYED_COLUMNS})


def check_calibration_rows(rows: pd.DataFrame, file: str) -> None:
    """--refit's rows before the fit: the columns it reads present, their counts whole numbers from 0 to MAX_INT and every
    duration_s a positive number of seconds; else a TraceError naming the file's line and column (line 1: header)."""
    from pagesim.cost.profile import INPUT_COLUMNS, OPTIONAL_COLUMNS, PREFILL_CONTEXT
    from pagesim.traces.errors import EMPTY, Described, TraceError
    from pagesim.traces.schema import MAX_INT, numbers

    missing = [c for c in (*INPUT_COLUMNS, "duration_s") if c not in rows]
    if missing:
        raise TraceError(file, 1, None, f"a header of calibration steps; it lacks {', '.join(missing)}")
    if not len(rows):
        raise TraceError(file, None, None, "calibration steps", Described("a header and no rows"))
    counts = [c for c in (*INPUT_COLUMNS, *OPTIONAL_COLUMNS, PREFILL_CONTEXT, "num_swap_out_blocks",
                          "num_swap_in_blocks", "num_copy_blocks") if c in rows]
    for c in (*counts, "duration_s"):
        num = numbers(rows[c]).to_numpy()
        with np.errstate(invalid="ignore"):
            whole = (num >= 0) & (num == np.floor(num))
            ok = (num > 0) if c == "duration_s" else whole & (num <= MAX_INT)  # a step's count fits the engine's int32
            ok &= np.isfinite(num)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            value = rows[c].iloc[i]
            value = value.item() if hasattr(value, "item") else value
            expected = ("a positive number of seconds" if c == "duration_s" else
                        f"a whole number from 0 to {MAX_INT:,}" if whole[i] else "a whole number of at least 0")
            raise TraceError(file, i + 2, c, expected, EMPTY if pd.isna(value) else value)


def fit_and_write(rows: pd.DataFrame, config: Config, out: Path, extras: dict, command: str,
                  mixed_graph_token_sizes: tuple[int, ...] = (), phases: dict | None = None,
                  decode_programs_per_sm: tuple[int, ...] = ()) -> dict:
    """Fit the profile cost model to calibration steps (workloads held out in turn) and write it to out.

    mixed_graph_token_sizes: the token buckets whose mixed steps the calibrating executor replayed from
    CUDA graphs (GPUExecutor.mixed_graphs); those steps get their own coefficients. phases: the calibration's
    phases so far in seconds; the fit's is added (fit_s), and the profile records them as calibration_phases with
    calibration_wall_s, the command's wall time from its process's start to the profile written (process_age_s).
    decode_programs_per_sm: the decode launches' resident programs per SM whose rounds the graph steps are fitted
    with (calibrate --decode-rounds: decode_split.DECODE_PROGRAMS_PER_SM; a refit, its rows' profile's), () for none."""
    from pagesim.cost.profile import fit_profile

    t_fit = time.perf_counter()
    model, report = fit_profile(rows, config.model, config.gpu, holdout="workload", max_num_seqs=config.max_num_seqs,
                                mixed_graph_token_sizes=mixed_graph_token_sizes, workers=None,
                                prefill_kernel=extras.get("prefill_kernel"),
                                decode_programs_per_sm=decode_programs_per_sm)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.to_json(out)
    profile = json.loads(out.read_text())
    if config.kv_cache_dtype != "auto":  # timed with that cache: make_cost_model checks it against a run's config
        profile["kv_cache_dtype"] = config.kv_cache_dtype
    swap = extras.get("swap_bandwidth")
    if swap:  # the measured host-link figure replaces the datasheet's (engine.kernels.swap.measure_swap_bandwidth)
        profile["coefficients"]["swap_s_per_byte"] = 0.5 * (1 / swap["swap_out_bytes_per_s"] + 1 / swap["swap_in_bytes_per_s"])
    profile.update(report=report, **extras, command=command)
    if phases is not None:
        phases["fit_s"] = time.perf_counter() - t_fit
        profile.update(calibration_phases=phases, calibration_wall_s=process_age_s())
    out.write_text(json.dumps(profile, indent=2) + "\n")
    return report


def fit_summary(report: dict, out: Path) -> str:
    """What calibrate prints of its fit (fit_and_write's report, kept whole in the profile under `report`): the
    held-out error overall and by step kind, the knee, the longest walk's lanes, the rounds of the decode kernel's
    programs (when the graph steps were fitted with them), the clock share, and the file."""
    def pct(v) -> str:
        return f"{100 * v:.1f}%"

    kinds = ", ".join(f"{kind} {pct(k['mape'])} ({k['n']:,} steps)" for kind, k in report["by_kind"].items() if k)
    clock = report.get("sm_clock")
    lanes = report["max_context_lanes"]
    return "\n".join([
        f"held-out MAPE {pct(report['mape'])} (whole workloads, {report['folds']} folds of {report['n_workloads']}): "
        + kinds,
        f"knee {report['knee_tokens']} tokens, " + (f"{lanes} context lanes" if lanes else "no longest-walk term")
        + (", decode programs in rounds of {} / {} per SM (split / unsplit)".format(*report["decode_programs_per_sm"])
           if report.get("decode_programs_per_sm") else "")
        + ", " + (f"clock share {clock['sensitivity']:g} (steps priced at {clock['reference_mhz']:.0f} MHz)" if clock
                  else "no clock share (the rows have no SM clocks)"),
        f"wrote {out} (the full fit report under 'report')"])


@functools.lru_cache(maxsize=8)
def calibration_peak_blocks(model: str, block_size: int, max_model_len: int, max_num_seqs: int,
                            max_num_batched_tokens: int, allow_long_max_model_len: bool = False) -> dict[str, int]:
    """Each calibration workload's peak of KV blocks in use, from its plans (replayed without a GPU, with a cache
    large enough for all its requests at once): most workloads release their prompts one at a time, each finishing
    before the next few, so they need far less than all their tokens."""
    every = calibration_workloads(max_model_len)
    need = max(sum(g[0] * cdiv(g[1] + g[2], block_size) for g in groups) for _, groups in every)
    config = Config(model=model, block_size=block_size, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                    max_num_batched_tokens=max_num_batched_tokens, num_gpu_blocks=need + 1,
                    allow_long_max_model_len=allow_long_max_model_len)
    return {name: int(run_calibration(NoTime(), config, workloads=[(name, groups)])["blocks_used"].max())
            for name, groups in every}


def calibration_workloads_that_fit(config: Config) -> list:
    """The calibration workloads whose peak of KV blocks in use (calibration_peak_blocks) fits 90% of the config's
    KV cache (`live --calibrate` calibrates with the run's own executor and cache); refuses a cache that leaves out
    the decode grid or half the grid."""

    every = calibration_workloads(config.resolved_max_model_len)
    peaks = calibration_peak_blocks(config.model, config.block_size, config.resolved_max_model_len,
                                    config.max_num_seqs, config.max_num_batched_tokens, config.allow_long_max_model_len)
    fit = [(name, groups) for name, groups in every if peaks[name] <= 0.9 * config.resolved_num_gpu_blocks]
    if len(fit) < len(every) / 2 or not any(name.startswith("decode-c") for name, _ in fit):
        raise UserError(f"--calibrate: only {len(fit)} of the {len(every)} calibration workloads fit a KV cache of "
                        f"{config.resolved_num_gpu_blocks} blocks (--num-gpu-blocks), too few to fit a profile; "
                        f"calibrate on this GPU first (python -m pagesim calibrate --model {config.model} --out P.json) "
                        "and pass --profile P.json")
    return fit


def calibration_warnings(config: Config, fit: list) -> list[str]:
    """`live --calibrate` on a cache that leaves calibration workloads out: the profile misses their steps."""
    every = calibration_workloads(config.resolved_max_model_len)
    if len(fit) == len(every):
        return []
    return [f"--calibrate: {len(fit)} of the {len(every)} calibration workloads fit a KV cache of "
            f"{config.resolved_num_gpu_blocks} blocks (--num-gpu-blocks); the profile is fitted without the other "
            f"{len(every) - len(fit)} (the largest: long prompts, eager steps), so steps like theirs are priced least "
            f"certainly; for a full profile run `python -m pagesim calibrate --model {config.model} --out P.json` on "
            "this GPU and pass --profile P.json"]


def run_profile(args, executor, config: Config, out_dir: Path) -> dict | None:
    """The profile this run is validated with, copied into the run directory as profile.json.

    --calibrate fits it here, on this GPU, with this executor, before the run (calibration_s is
    recorded); --profile copies a profile fitted earlier (on this machine, ideally in the same call).
    """
    import shutil

    from engine.kernels.swap import measure_swap_bandwidth

    target = out_dir / "profile.json"
    if getattr(args, "calibrate", False):
        t0 = time.perf_counter()
        phases = {"before_s": process_age_s()}  # the command's start-up, trace and executor before the calibration
        workloads = calibration_workloads_that_fit(config)
        warm_up(executor, config)
        cal = without_prefix_caching(config).replace(preemption_mode="recompute")
        t1 = time.perf_counter()
        rows = run_calibration_with_bar(executor, cal, workloads)  # calibrate's bar, a workload a tick
        rows.to_csv(out_dir / f"profile{CALIBRATION_ROWS_SUFFIX}", index=False)
        t2 = time.perf_counter()
        swap = measure_swap_bandwidth(executor.kv_cache)
        phases.update(warmup_s=t1 - t0, workloads_s=t2 - t1, swap_bandwidth_s=time.perf_counter() - t2)
        fit_and_write(rows, cal, target, {"environment": environment(), "prefill_kernel": executor.prefill_kernel,
                                          "config": cal.to_dict(),
                                          "workloads": [w for w, _ in workloads], "swap_bandwidth": swap},
                      "live --calibrate", mixed_graph_token_sizes=tuple(sorted(executor.mixed_graphs)), phases=phases)
        return {"path": target.name, "source": "live --calibrate", "calibration_s": time.perf_counter() - t0,
                "calibration_workloads": len(workloads), "calibration_phases": phases}
    if getattr(args, "profile", None):  # read and checked by live() before the model was loaded
        shutil.copyfile(args.profile, target)
        return {"path": target.name, "source": str(args.profile)}
    return None


CALIBRATE_DEFAULTS = {"block_size": 16, "num_gpu_blocks": None, "max_num_batched_tokens": 8192, "rest": 0.0}
# What a profile is labelled with (make_cost_model checks a run's config against them), when no flag or record says.
# The flags default to None so that --refit can tell them omitted: it then takes the rows' own profile's values.
LABEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Config) if f.name in ("model", "gpu", "kv_cache_dtype")}
LABEL_FLAGS = {key: "--" + key.replace("_", "-") for key in LABEL_DEFAULTS}


def companion_profile(rows_path: Path) -> Path | None:
    """The profile JSON a calibration wrote beside its rows: P.steps.csv.gz (or plain P.steps.csv) -> P.json, so
    also `live --calibrate`'s DIR/profile.steps.csv.gz -> DIR/profile.json; None for rows named otherwise."""
    name = rows_path.name
    for suffix in (CALIBRATION_ROWS_SUFFIX, CALIBRATION_ROWS_SUFFIX.removesuffix(".gz")):
        if name.endswith(suffix) and len(name) > len(suffix):
            return rows_path.with_name(name[:-len(suffix)] + ".json")
    return None


def profile_json(path: Path) -> dict | None:
    """A profile JSON's contents (its "kind" is "profile"), or None when `path` is not a readable one."""
    try:
        d = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return d if isinstance(d, dict) and d.get("kind") == "profile" else None


MEASUREMENT_RECORDS = ("environment", "prefill_kernel", "config", "workloads", "swap_bandwidth", "calibration_s",
                       "calibration_rest")


def measurement_records(path: Path | None) -> tuple[dict, tuple[int, ...], tuple[int, ...]] | None:
    """What a refit keeps of the profile its rows were measured for (`--out` when it holds one, else the rows' own):
    (its records of the measurement: MEASUREMENT_RECORDS, the measured `config` with its block size and max_num_seqs
    among them, the swap link and the prefill kernel; the engine's mixed-step token buckets; the form its graph steps
    were fitted in, programs_per_sm_of). None when `path` is None or not a readable profile JSON."""
    d = profile_json(path) if path is not None else None
    if d is None:
        return None
    return ({k: d[k] for k in MEASUREMENT_RECORDS if k in d},
            tuple(int(t) for t in d.get("mixed_graph_token_sizes", ())), programs_per_sm_of(d))


def rounds_per_sm(kv_cache_dtype: str, which: str) -> tuple[int, ...]:
    """--decode-rounds: the resident programs per SM of the decode launches they were measured on (a model-dtype
    cache's; decode_split.DECODE_PROGRAMS_PER_SM). An fp8 cache's launches (other tiles and warps) are not measured."""
    from pagesim.cost.decode_split import DECODE_PROGRAMS_PER_SM

    if kv_cache_dtype != "auto":
        raise UserError(f"--decode-rounds: {which} is {kv_cache_dtype}; the rounds are measured for the model-dtype "
                        "cache's decode launches (kv_cache_dtype auto) only")
    return DECODE_PROGRAMS_PER_SM


def programs_per_sm_of(profile: dict) -> tuple[int, ...]:
    """A profile JSON's decode_programs_per_sm (its graph steps' form: () for a profile fitted without rounds of
    programs), so that a refit of its rows fits them as it was fitted."""
    per_sm = profile.get("decode_programs_per_sm")
    return tuple(int(k) for k in per_sm) if isinstance(per_sm, list) else ()


def recorded_labels(path: Path) -> dict[str, str] | None:
    """What a profile JSON says was timed: model, gpu and kv_cache_dtype from its measurement's `config` (calibrate
    and live --calibrate record it), else its own labels (none for kv_cache_dtype: the model's dtype, auto).
    None when `path` is not a readable profile JSON."""
    d = profile_json(path)
    if d is None:
        return None
    measured = d["config"] if isinstance(d.get("config"), dict) else {}
    labels = {key: measured.get(key) or d.get(key) for key in LABEL_DEFAULTS}
    labels["kv_cache_dtype"] = labels["kv_cache_dtype"] or "auto"
    return {key: str(value) for key, value in labels.items() if value}


def refit_labels(args, rows_path: Path) -> tuple[dict, dict, str | None]:
    """--refit: (labels, where each came from, the warning to give) for the model, gpu and kv_cache_dtype flags.

    The rows' own profile (companion_profile) records what was timed: a flag that disagrees with it is refused
    (labelling llama-3-8b's steps as llama-3-70b's gives a 70B profile several times too fast, which replay's
    profile-vs-config check cannot see), and an omitted flag takes its value. Without that profile the labels are
    the flags' (None where omitted: calibrate fills them in from --out's records or LABEL_DEFAULTS), with a warning
    that they cannot be checked."""

    given = {key: getattr(args, key, None) for key in LABEL_DEFAULTS}
    companion = companion_profile(rows_path)
    recorded = recorded_labels(companion) if companion is not None and companion.is_file() else None
    if recorded is None:
        why = ("its name does not end in " + CALIBRATION_ROWS_SUFFIX if companion is None
               else f"{companion} beside them is not a readable profile JSON" if companion.exists()
               else f"no {companion} beside them")
        return given, {k: LABEL_FLAGS[k] for k, v in given.items() if v is not None}, (
            f"--refit {rows_path}: the profile of these rows is unknown ({why}), so the refitted profile's model, GPU "
            "and KV-cache dtype come from --model/--gpu/--kv-cache-dtype (or their defaults) and cannot be checked "
            "against what was timed")
    wrong = [k for k, v in given.items() if v is not None and k in recorded and v.lower() != recorded[k].lower()]
    if wrong:
        flags = ", ".join(f"{LABEL_FLAGS[k]} {given[k]}" for k in wrong)
        timed = ", ".join(f"{k} {recorded[k]}" for k in wrong)
        raise UserError(f"{flags}: the --refit rows were timed with {timed} (their profile {companion} records "
                        f"{'them' if len(wrong) > 1 else 'it'}); a refitted profile is labelled with what was timed: "
                        f"drop {' and '.join(LABEL_FLAGS[k] for k in wrong)} or pass "
                        + " ".join(f"{LABEL_FLAGS[k]} {recorded[k]}" for k in wrong))
    labels = {k: recorded[k] if k in recorded else given[k] for k in LABEL_DEFAULTS}  # the record's spelling
    return labels, {k: LABEL_FLAGS[k] if given[k] is not None else str(companion)
                    for k in LABEL_DEFAULTS if labels[k] is not None}, None


def calibrate(args) -> int:
    """`python -m pagesim calibrate --model M --out PROFILE.json`, or `--refit ROWS.csv` to refit saved steps.

    Both fit with whole calibration workloads held out in turn (fit_profile(holdout="workload")): the
    report's errors are those of models that never saw the step's workload. --refit needs no GPU: it
    refits the rows a calibration saved (PROFILE.steps.csv.gz) and keeps the measurement's environment,
    config and workloads from the profile already at --out (replacing it takes --force, as every --out),
    so the committed profile is reproducible. The refitted profile is labelled with the model, GPU and KV-cache
    dtype that the rows' own profile (P.json beside P.steps.csv.gz) records: a --model/--gpu/--kv-cache-dtype that
    disagrees is refused, an omitted one is taken from it; rows without that profile are labelled from the flags
    (or their defaults), with a warning that the labels cannot be checked (refit_labels).
    """
    import sys

    from pagesim.errors import not_a_file

    max_num_seqs = 256  # calibration times every CUDA-graph decode size, 1..256
    command = "python -m pagesim " + " ".join(args.argv)
    out = prepare_output_file(args.out, args.force)  # --refit over an existing profile too: it is replaced
    if not args.refit:  # a calibration also writes its rows beside the profile
        prepare_output_file(out.with_suffix(CALIBRATION_ROWS_SUFFIX), args.force)

    def write(rows, config, extras: dict, mixed_sizes=(), phases=None, per_sm=()) -> None:
        print(fit_summary(fit_and_write(rows, config, out, extras, command, mixed_sizes, phases, per_sm), out))

    if args.refit:
        timing = [f for f in ("block_size", "num_gpu_blocks", "max_num_batched_tokens", "rest")
                  if getattr(args, f) != CALIBRATE_DEFAULTS[f]]
        if timing:  # options of the timing, which --refit does not redo
            raise UserError(f"{', '.join('--' + f.replace('_', '-') for f in timing)}: options of a calibration's "
                            "timing; --refit refits rows timed already, so drop them")
        rows_path = Path(args.refit)
        if rows_path.resolve() == out.resolve():
            raise UserError(f"--out {args.out} is the --refit rows file itself; --out names the profile JSON to write")
        found = not_a_file(rows_path)
        if found:
            raise UserError(f"--refit {rows_path}: {found}; expected the *.steps.csv.gz a calibration saved")
        labels, sources, warning = refit_labels(args, rows_path)  # checked before the rows are read
        try:
            rows = pd.read_csv(rows_path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            ragged = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
            why = (f"line {ragged[2]} has {ragged[3]} comma-separated fields where the header has {ragged[1]}" if ragged
                   else " ".join(str(e).split()))  # pandas' own words, on one line (its C parser ends them in "\n")
            raise UserError(f"--refit {rows_path}: not a CSV of calibration steps ({why}); expected the *.steps.csv.gz "
                            "a calibration saved") from None
        except (OSError, EOFError, zlib.error) as e:  # *.gz that is not gzip (BadGzipFile), or cut short
            raise UserError(f"--refit {rows_path}: cannot read it as {'gzipped ' if rows_path.suffix == '.gz' else ''}"
                            f"CSV ({e}); expected the *.steps.csv.gz a calibration saved") from None
        check_calibration_rows(rows, str(rows_path))
        # How the rows were timed (the measured config, the engine's mixed-step buckets, the host link...): from the
        # profile at --out, which the refit replaces, else from the rows' own profile, as the labels are; without it
        # a refit of a graph-mixed calibration priced its graph mixed steps as eager ones (r22c: held-out 2.97% ->
        # 3.56%) and its profile recorded no block size
        records = measurement_records(out) or measurement_records(companion_profile(rows_path))
        extras, mixed_sizes, per_sm = records or ({}, (), ())
        measured = extras.get("config") or {}
        # An omitted flag that the rows' profile did not settle: --out's records for the dtype (which carry over
        # with them), else the default.
        if labels["kv_cache_dtype"] is None and measured.get("kv_cache_dtype"):
            labels["kv_cache_dtype"], sources["kv_cache_dtype"] = measured["kv_cache_dtype"], f"--out {out}"
        for key, default in LABEL_DEFAULTS.items():
            if labels[key] is None:
                labels[key], sources[key] = default, "default"
        model, gpu, kv_dtype = labels["model"], labels["gpu"], labels["kv_cache_dtype"]
        if getattr(args, "decode_rounds", False):
            per_sm = rounds_per_sm(kv_dtype, f"the --refit rows' kv_cache_dtype ({sources['kv_cache_dtype']})")
        if measured:  # the records that carry over must be of what the profile is labelled
            if (measured.get("model", model), measured.get("gpu", gpu)) != (model, gpu):
                raise UserError(f"--out {out} holds a profile of {measured.get('model')} on {measured.get('gpu')}, "
                                f"not {model} on {gpu}; pass the matching --model/--gpu or another --out")
            if measured.get("kv_cache_dtype", kv_dtype) != kv_dtype:
                raise UserError(f"--out {out} holds a profile timed with kv_cache_dtype {measured['kv_cache_dtype']}, "
                                f"not {kv_dtype} ({sources['kv_cache_dtype']}); pass the matching --kv-cache-dtype "
                                "or another --out")
            max_num_seqs = measured.get("max_num_seqs", max_num_seqs)

        def warn(message: str) -> None:  # on stderr and in the profile
            print(f"warning: {message}", file=sys.stderr)
            extras.setdefault("warnings", []).append(message)

        if warning is not None:
            warn(warning + ": " + ", ".join(f"{k} {labels[k]} ({sources[k]})" for k in LABEL_DEFAULTS))
        if "workloads" not in extras and "workload" in rows:
            extras["workloads"] = list(dict.fromkeys(rows["workload"].astype(str)))
        if extras.get("config"):  # rows saved before the prefill walks were kept: replayed from the measured config
            try:
                rows = with_replayed_walks(rows, Config.from_dict(extras["config"]), f"--refit {rows_path}")
            except UnreplayableRows as exc:  # rows of a calibration this version's workloads no longer match
                warn(f"{exc}: the profile is fitted without them ({', '.join(REPLAYED_COLUMNS)}: their terms priced "
                     "at 0); recalibrate with this version for them")
        try:
            write(rows, Config(model=model, gpu=gpu, max_num_seqs=max_num_seqs, num_gpu_blocks=1,
                               kv_cache_dtype=kv_dtype), extras, mixed_sizes, per_sm=per_sm)
        except FitRowsError as exc:  # the fit's "calibration rows: too few ... to fit": which rows, the file's
            raise UserError(f"--refit {rows_path}: {exc.args[0]}") from None
        return 0

    for key, default in LABEL_DEFAULTS.items():  # a calibration labels its profile with what it times (the GPU:
        if key != "gpu" and getattr(args, key, None) is None:  # the device's spec, below)
            setattr(args, key, default)
    per_sm = rounds_per_sm(args.kv_cache_dtype, "--kv-cache-dtype") if getattr(args, "decode_rounds", False) else ()

    import torch

    from engine.device_gpu import device_gpu
    from engine.kernels.swap import measure_swap_bandwidth

    t_start = time.perf_counter()
    phases = {"startup_s": process_age_s()}  # imports and argument checks before the calibration's clock
    if not torch.cuda.is_available():
        raise UserError("calibration needs a CUDA GPU (torch.cuda.is_available() is False); "
                        "--refit ROWS.csv refits saved calibration steps without one")
    args.gpu, device_warnings = device_gpu(args.gpu, "calibrate")
    for warning in device_warnings:
        print(f"warning: {warning}", file=sys.stderr)
    config = Config(model=args.model, gpu=args.gpu, block_size=args.block_size,
                    num_gpu_blocks=args.num_gpu_blocks, max_num_seqs=max_num_seqs,
                    max_num_batched_tokens=args.max_num_batched_tokens, kv_cache_dtype=args.kv_cache_dtype)
    executor = make_executor(config)
    config = executor.config
    t_exec = time.perf_counter()
    warm_up(executor, config)
    t_warm = time.perf_counter()
    workloads = calibration_workloads(config.resolved_max_model_len)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows_path = out.with_suffix(CALIBRATION_ROWS_SUFFIX)

    def save(rows_so_far: pd.DataFrame) -> None:  # every SAVE_EVERY_S, so an interrupted calibration can be refitted
        rows_so_far.to_csv(rows_path, index=False)

    rows = run_calibration_with_bar(executor, config, workloads, on_workload=save, rest=args.rest)
    # rows_path now holds every row (on_workload's last call), before the fit, so a failed fit can be refitted
    t_fit = time.perf_counter()
    swap = measure_swap_bandwidth(executor.kv_cache)
    phases.update(executor_s=t_exec - t_start, warmup_s=t_warm - t_exec, workloads_s=t_fit - t_warm,
                  swap_bandwidth_s=time.perf_counter() - t_fit)
    # calibration_s: the executor, warm-up and workloads (as recorded since round 3); calibration_wall_s (written
    # with the profile): the whole command, start-up, swap measurement and fit included
    write(rows, config, {"environment": environment(), "prefill_kernel": executor.prefill_kernel,
                         "config": config.to_dict(),
                         "workloads": [w for w, _ in workloads], "swap_bandwidth": swap,
                         "calibration_s": t_fit - t_start, "calibration_rest": args.rest,
                         **({"warnings": device_warnings} if device_warnings else {})},
          tuple(sorted(executor.mixed_graphs)), phases, per_sm)
    return 0


def register(sub) -> None:
    c = sub.add_parser("calibrate", help="time the GPU executor on a grid of steps and fit a profile cost model")
    c.add_argument("--model", default=None,
                   help=f"the model to time (default: {LABEL_DEFAULTS['model']}; with --refit, the rows' own profile's)")
    c.add_argument("--gpu", default=None,
                   help="the GPU it runs on (default: the device's spec, engine.device_gpu; with --refit, the rows' "
                        f"own profile's, else {LABEL_DEFAULTS['gpu']})")
    c.add_argument("--block-size", type=positive_int, default=CALIBRATE_DEFAULTS["block_size"],
                   help="tokens per KV-cache block while timing")
    c.add_argument("--num-gpu-blocks", type=positive_int, default=CALIBRATE_DEFAULTS["num_gpu_blocks"],
                   help="GPU KV-cache blocks while timing (default: what 0.9 of the GPU's memory leaves beside the weights)")
    c.add_argument("--max-num-batched-tokens", type=positive_int, default=CALIBRATE_DEFAULTS["max_num_batched_tokens"],
                   help="most tokens per timed step")
    c.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default=None,
                   help="the engine's KV cache dtype while timing (the profile records it; runs must match; default: "
                        f"{LABEL_DEFAULTS['kv_cache_dtype']}; with --refit, the rows' own profile's)")
    c.add_argument("--rest", type=non_negative_float, default=CALIBRATE_DEFAULTS["rest"], metavar="FRACTION",
                   help="idle the GPU for FRACTION x each timed step's duration after it (not timed), so the "
                        "calibration runs at a serving engine's power and clocks, not under the power cap (default 0)")
    c.add_argument("--out", required=True, help="the profile JSON to write")
    c.add_argument("--force", action="store_true", help="replace --out if it exists")
    c.add_argument("--refit", metavar="ROWS.csv", default=None,
                   help="refit the profile from calibration steps saved earlier (PROFILE.steps.csv.gz); no GPU needed")
    c.add_argument("--decode-rounds", action="store_true",
                   help="price graph decode steps by the rounds of the decode kernel's programs over the SMs (README, "
                        "Cost models; more accurate above 64 decode rows, the model-dtype cache only; default: the "
                        "form before them; with --refit, the rows' own profile's form unless given)")
    c.set_defaults(func=calibrate)
