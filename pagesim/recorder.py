"""The recorder: per-step and per-request tables and block snapshots, from either executor.

Steps are recorded one at a time (`record_step`) or, for the simulator's exact
fast path, as a run of identical decode steps (`record_decode_run`) whose
per-step rows are computed in bulk; both give the same rows.

Memory figures are taken at the end of each step (after finished requests have
released their blocks); `num_running` is the batch the step ran.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from operator import attrgetter
from struct import Struct
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pagesim.accounting import CATEGORIES
from pagesim.request import Request, RequestStatus
from pagesim.scheduler import Scheduler, StepPlan

if TYPE_CHECKING:
    from pagesim.kv_manager import DecodeBlocks

FEATURE_COLUMNS = (
    "num_prefill_tokens",
    "num_prefill_seqs",
    "prefill_attn_pairs",
    "prefill_context_tokens",
    "num_decode_seqs",
    "decode_context_tokens",
    "max_decode_context",
    "num_swap_out_blocks",
    "num_swap_in_blocks",
    "num_copy_blocks",
    "num_load_blocks",
    "num_store_blocks",
)
STEP_COLUMNS = (
    ("step", "time_s", "duration_s", "num_running", "num_waiting", "num_swapped")
    + FEATURE_COLUMNS
    + ("num_preemptions", "blocks_used", "blocks_cached", "blocks_free", "prefix_cache_queries", "prefix_cache_hits",
       "prefix_cache_host_hits")
    + CATEGORIES
)
# The order in which a recorded step's values are kept (Recorder.rows): the parts as record_step has them.
MEMORY_COLUMNS = ("blocks_used", "blocks_cached", "blocks_free") + CATEGORIES  # Recorder.memory_state()'s values
PREFIX_COLUMNS = ("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_host_hits")
ROW_COLUMNS = STEP_COLUMNS[:6] + FEATURE_COLUMNS + ("num_preemptions",) + MEMORY_COLUMNS + PREFIX_COLUMNS
assert sorted(ROW_COLUMNS) == sorted(STEP_COLUMNS)
ROW_INDEX = {c: i for i, c in enumerate(ROW_COLUMNS)}
# In-memory types of the step columns (int64 where sums can outgrow int32; the rest int32).
NARROW = {c: np.int32 for c in STEP_COLUMNS} | {
    "time_s": np.float64, "duration_s": np.float64,
    "prefill_attn_pairs": np.int64, "prefill_context_tokens": np.int64, "decode_context_tokens": np.int64,
}
FLOAT_COLUMNS = ("time_s", "duration_s")
CHUNK_STEPS = 1 << 16  # steps per chunk handed to a sink (one Parquet row group each)
# ... and per chunk of a kept table: a chunk's temporary columns (8 bytes a step) are then small enough for the C
# library to hand the same memory out again from chunk to chunk, where 65,536-step ones were mapped fresh (page faults)
# for every chunk: ~40k page faults fewer on Azure conv, for ~0.5% more instructions (more, smaller numpy calls).
KEPT_CHUNK_STEPS = 1 << 14
NO_PREFIX_DELTAS = (0, 0, 0)
RUN_FIELDS = 7 + 9 + 9 + 3  # values kept per decode run (Recorder._runs_columns)
# The records, packed by struct (one call a record; array.extend/fromlist parse each item as a function argument,
# ~5x dearer), kept as bytes and joined at the flush (Recorder.rows).
# A row's integers as int64 (a double costs a conversion per int), its two times as doubles (read back by _row_values).
assert ROW_COLUMNS[:3] == ("step",) + FLOAT_COLUMNS
_ROW = Struct(f"q2d{len(ROW_COLUMNS) - 3}q").pack
_RUN = Struct(f"{RUN_FIELDS}q").pack
assert FEATURE_COLUMNS[4:7] == ("num_decode_seqs", "decode_context_tokens", "max_decode_context")  # record_decode_run
# A step's StepFeatures values in FEATURE_COLUMNS' order, by a function made from the names: its attribute loads are
# specialized (slots), ~500 instructions a step where attrgetter of the 12 names took ~2,400.
_features_tuple = eval(f"lambda f: ({''.join(f'f.{c}, ' for c in FEATURE_COLUMNS)})")
# How Recorder._runs_columns expands a chunk's decode runs and rows, segment by segment (a run or a row): the step
# columns made from a run's field (Recorder.runs' values) and a row's own value, and those 0 in every run's steps.
SEGMENT_FIELDS = {"step": 0, "num_running": 2, "num_decode_seqs": 2, "decode_context_tokens": 3, "max_decode_context": 6,
                  "blocks_used": 7, "blocks_cached": 8, "used": 10, "internal_fragmentation": 12, "num_waiting": 4,
                  "num_swapped": 5, "external_fragmentation": 13}
ROW_ONLY_COLUMNS = FEATURE_COLUMNS[:4] + FEATURE_COLUMNS[7:] + ("num_preemptions",) + PREFIX_COLUMNS
SEGMENT_INDEX = {c: i for i, c in enumerate(SEGMENT_FIELDS)}
_SEGMENT_RUN_FIELDS = np.array(list(SEGMENT_FIELDS.values()))
_SEGMENT_ROW_COLUMNS = np.array([ROW_INDEX[c] for c in SEGMENT_FIELDS])
REQUEST_COLUMNS = (
    "request_id",
    "parent_id",
    "arrival_time_s",
    "prompt_len",
    "output_len",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "num_preemptions",
    "prefix_hit_tokens",
    "state",
    "reason",
    "preempted_at",
    "resumed_at",
    "swapped_out",
)
# Per-request lists, null for a request never preempted: the start time of each preemption's step, of the
# step that took the request back in, and whether the preemption swapped its blocks out (else recompute).
LIST_COLUMNS = ("preempted_at", "resumed_at", "swapped_out")


@dataclass(slots=True)
class BlockSnapshot:
    """Who holds each physical block at `time_s`.

    owner[i]: index into `request_ids` of the request whose block table holds
    block i first (-1: nobody); fill[i]: slots of it holding live tokens;
    ref_cnt[i]: how many block tables hold it (> 1: a shared prefix block);
    cached[i]: free but still holding a reusable prefix (paged only).
    """

    time_s: float
    request_ids: list[str]
    owner: np.ndarray
    fill: np.ndarray
    ref_cnt: np.ndarray
    cached: np.ndarray

    def to_frame(self) -> pd.DataFrame:
        ids = np.array(self.request_ids + [""], dtype=object)
        return pd.DataFrame(
            {
                "block_id": np.arange(len(self.owner)),
                "request_id": ids[self.owner],
                "fill": self.fill,
                "ref_cnt": self.ref_cnt,
                "cached": self.cached,
            }
        )


class Recorder:
    def __init__(self, scheduler: Scheduler, features_of, sink=None, chunk_steps: int | None = None):
        """`features_of(plan)` gives the step's StepFeatures (the cost model's view of the step).

        Every `chunk_steps` steps (CHUNK_STEPS with a sink, else KEPT_CHUNK_STEPS) the rows so far become one
        chunk of columns (numpy arrays, in step order): handed to `sink(columns)` when given (e.g. a Parquet
        writer), else written into the kept table (columns that grow) until steps_frame().
        """
        self.sched = scheduler
        self.features_of = features_of
        self.sink = sink
        if chunk_steps is None:
            chunk_steps = CHUNK_STEPS if sink is not None else KEPT_CHUNK_STEPS
        self.chunk_steps = chunk_steps
        self.table = _StepTable() if sink is None else None  # the steps so far, when they are kept
        self.first_step = 0  # of the rows and runs not yet in a chunk
        self.num_steps = 0  # recorded so far
        # Kept packed, not as lists of Python numbers: a chunk's values are converted while they are fresh, and
        # the chunk is turned into columns without chasing (and then freeing) ~10^6 objects. Each record's packed
        # bytes are kept as they are and joined once at the flush (_joined): appending them to typed arrays grew
        # and copied each array's buffer ~90 times a chunk (1.6% of a replay's instructions in realloc's copies).
        self.rows: list[bytes] = []  # ROW_COLUMNS' values of each recorded step (_ROW: int64 but the two times)
        self.runs: list[bytes] = []  # RUN_FIELDS values of each decode run (_runs_columns), kept compact (record_decode_run)
        # The runs' steps' start times and durations (packed), and their block allocations (DecodeBlocks' four lists,
        # a few ints a run: the ints themselves, in one list per kind), run after run.
        self.run_starts: list[bytes] = []
        self.run_durations: list[bytes] = []
        self.run_blocks = _block_lists()
        self._memory_cache: tuple | None = None
        self._last_chunk: dict | None = None  # the columns of the last chunk put in the table (flush)
        self.snapshots: list[BlockSnapshot] = []
        self._queries = 0
        self._hits = 0
        self._host_hits = 0

    # ---- steps ------------------------------------------------------------------
    def _prefix_deltas(self) -> tuple[int, int, int]:
        """First-admission prefix-cache queries, hits and host-tier hits (tokens) since the last recorded step."""
        stats = self.sched.kv.prefix_cache_stats
        dq, dh, dhost = stats.queries - self._queries, stats.hits - self._hits, stats.host_hits - self._host_hits
        self._queries, self._hits, self._host_hits = stats.queries, stats.hits, stats.host_hits
        return dq, dh, dhost

    def memory_state(self) -> tuple:
        """(blocks used, blocks cached, blocks free) + the accounting categories, now.

        Between two recorded steps only arrivals happen, which can change the
        head of the queue (and so external fragmentation) but nothing else: the
        state recorded with the last step is reused when the head is the same.
        """
        s = self.sched
        head = s.swapped[0] if s.swapped else (s.waiting[0] if s.waiting else None)  # the queue head (or None)
        cache = self._memory_cache
        if cache is not None and cache[0] is head:
            return cache[1]
        summary = s.decode_summary  # with the running requests' num_computed_tokens summed (None when stale)
        memory = s.kv.memory_values(s.running, head, None if summary is None else summary.total_computed)
        self._memory_cache = (head, memory)
        return memory

    def record_step(self, start: float, duration: float, plan: StepPlan, num_running: int) -> None:
        s = self.sched
        features = _features_tuple(self.features_of(plan))
        self._memory_cache = None  # the step changed the state
        memory = self.memory_state()
        stats = s.kv.prefix_cache_stats
        if stats.queries != self._queries or stats.hits != self._hits or stats.host_hits != self._host_hits:
            deltas = self._prefix_deltas()
        else:
            deltas = NO_PREFIX_DELTAS
        step = plan.step_id
        self.rows.append(_ROW(step, start, duration, num_running, len(s.waiting), len(s.swapped), *features,
                              len(plan.preempted), *memory, *deltas))  # in ROW_COLUMNS' order
        self.num_steps = step + 1
        if self.num_steps - self.first_step >= self.chunk_steps:
            self.flush()

    def record_decode_run(self, first_step: int, starts: list[float] | np.ndarray, durations: list[float] | np.ndarray,
                          n: int, context_start: int, max_context_start: int, b: DecodeBlocks, finished: list,
                          before: tuple) -> tuple:
        """Rows for a run of k = len(starts) decode steps of n requests, kept compactly and expanded in bulk by
        steps_frame(): `context_start` and `max_context_start` are the sum and the max of their
        num_computed_tokens before it, `b` the blocks it took, `finished` the requests that finished in its last
        step; `before` is `memory_state()` taken just before the run was applied.

        Every row follows the run's formulas (memory changes only by the blocks the run took) but the last one's
        memory, which is kept with the run: the state after it when it finished requests (they freed their
        blocks), else the formulas' own value, which is also the state now. Returns that state (memory_state()
        now, for a run that goes on).
        """
        k = len(starts)
        s = self.sched
        first_steps, num_blocks, evicted_steps, internal_steps, internal_slots = b
        num_evicted, num_internal = len(evicted_steps), len(internal_steps)
        if finished:
            self._memory_cache = None
            after = self.memory_state()
        else:  # memory_state() now, from the state before the run (as _runs_columns expands the run's rows)
            kv = s.kv
            bs, total = kv.block_size, kv.num_gpu_blocks
            blocks_used, cached_blocks = before[0] + num_blocks, before[1] - num_evicted
            used, external = before[3] + n * k, before[6]
            internal = before[5] + sum(internal_slots) if num_internal else before[5]
            allocated, cached = blocks_used * bs, cached_blocks * bs
            after = (blocks_used, cached_blocks, total - blocks_used - cached_blocks, used, allocated - used - internal,
                     internal, external, total * bs - allocated - external - cached, cached)
            self._memory_cache = (s.swapped[0] if s.swapped else (s.waiting[0] if s.waiting else None), after)  # head
        # No prefix-cache deltas kept: only admissions count (allocate_slots), a run admits nobody, and the step before
        # it took the deltas so far (0 in every step of a run).
        self.runs.append(_RUN(first_step, k, n, context_start, len(s.waiting), len(s.swapped), max_context_start,
                              *before, *after, len(first_steps), num_evicted, num_internal))
        if type(starts) is list:
            pack_doubles = _DOUBLES[k]
            self.run_starts.append(pack_doubles(*starts))
            self.run_durations.append(pack_doubles(*durations))
        else:  # float64 arrays (a long run's times, on arrays)
            self.run_starts.append(starts.tobytes())
            self.run_durations.append(durations.tobytes())
        if num_blocks:  # a few ints each: extended (a pack per list costs more than converting them at the flush)
            lists = self.run_blocks
            lists[0].extend(first_steps)
            if num_evicted:
                lists[1].extend(evicted_steps)
            if num_internal:
                lists[2].extend(internal_steps)
                lists[3].extend(internal_slots)
        self.num_steps = first_step + k
        if self.num_steps - self.first_step >= self.chunk_steps:
            self.flush()
        return after

    def _runs_columns(self, meta: np.ndarray, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Expand the compact decode runs into one row per step, vectorised over all runs (the columns that are 0 in
        every row of a decode run, the prefill and transfer features among them, are left out): in run order, or,
        with `rows` (recorded single steps: ROW_COLUMNS' values, in step order), the rows too, each as a run of one
        step, all in step order, when they tile the chunk's steps (each once, in order: the caller checks)."""
        kv = self.sched.kv
        bs = kv.block_size
        # meta, a row per run: first step, k, n, context, waiting, swapped, max context; memory_state()'s 3 + 6 values
        # before the run and after its last step; then how many first block steps, evicted blocks and
        # internal-fragmentation entries the run has in run_blocks
        num_runs, K = len(meta), meta[:, 1]
        if rows is None:
            seg_len, is_run = K, np.ones(num_runs, dtype=np.int64)
        else:  # segments: the runs and the rows (one step each), in step order
            order = np.argsort(np.concatenate([meta[:, 0], rows[:, ROW_INDEX["step"]]]), kind="stable")
            seg_len = np.concatenate([K, np.ones(len(rows), dtype=np.int64)])[order]
            is_run = (order < num_runs).astype(np.int64)

        if rows is None:
            def seg(column):
                """Each run's value of `column` (SEGMENT_FIELDS)."""
                return meta[:, SEGMENT_FIELDS[column]]
        else:  # every column's segment values at once, put in step order by one gather
            segments = np.concatenate([meta[:, _SEGMENT_RUN_FIELDS], rows[:, _SEGMENT_ROW_COLUMNS]])[order]

            def seg(column):
                """Each segment's value of `column`: the run's (SEGMENT_FIELDS), the row's own."""
                return segments[:, SEGMENT_INDEX[column]]

        # Each column is made with as few passes over the chunk's rows as may be (a pass costs about as much as the
        # arithmetic of a column): a segment value repeated, then the per-row terms added in place.
        rep = lambda v: v.repeat(seg_len)  # noqa: E731
        seg_start = np.cumsum(seg_len) - seg_len  # each segment's first row
        total = int(seg_len.sum())
        run_start = seg_start[is_run.astype(bool)] if rows is not None else seg_start  # the runs' first rows, in order
        step_before = seg("step") - is_run  # the step before a run's first, a row's own
        if rows is not None:  # j, 1-based step within its run (0 for a row), from the steps: the chunk's, in order
            step = np.arange(self.first_step, self.first_step + total)
            j = step - rep(step_before)
        else:
            j = np.arange(total)
            j -= rep(seg_start - is_run)
            step = rep(step_before)
            step += j

        def running_sums(per_row):
            """per_row's running sum over the rows (in place), and its sum before each segment's first row: a
            segment's rows' running sums from its first row are the first less the second (repeated)."""
            first = per_row[seg_start]
            np.cumsum(per_row, out=per_row)
            return per_row, per_row[seg_start] - first

        first_steps, evicted_steps, internal_steps, internal_slots = self.run_blocks
        n = rep(seg("num_running"))
        nj = n * j
        # each request's block steps in a run from its first (DecodeBlocks): j, j + block_size, ... < k
        firsts = _ints(first_steps) + np.repeat(run_start, meta[:, 25])  # rows
        counts = (np.repeat(run_start + K, meta[:, 25]) - firsts + bs - 1) // bs  # >= 1 each
        ends = np.cumsum(counts)
        # each block's row: its request's first, less the blocks before it times block_size, plus its own index's
        places = np.repeat(firsts - (ends - counts) * bs, counts)
        places += np.arange(0, int(ends[-1]) * bs if len(ends) else 0, bs)
        # each column from its segment's value and a running sum within the segment: the base less the sum before
        # the segment repeated, added to the running sum
        blocks_used, before = running_sums(np.bincount(places, minlength=total))
        blocks_used += rep(seg("blocks_used") - before)
        cached_before = seg("blocks_cached")
        if evicted_steps:
            evicted = _ints(evicted_steps) + np.repeat(run_start, meta[:, 26])
            sums, before = running_sums(np.bincount(evicted, minlength=total))
            cached_blocks = rep(cached_before + before)
            cached_blocks -= sums
        else:
            cached_blocks = rep(cached_before) if cached_before.any() else None  # None: 0 in every row
        places = _ints(internal_steps) + np.repeat(run_start, meta[:, 27])
        # weights: as doubles, exactly
        internal, before = running_sums(np.bincount(places, _ints(internal_slots), minlength=total).astype(np.int64))
        internal += rep(seg("internal_fragmentation") - before)
        used = rep(seg("used"))
        used += nj
        cols = {"step": step}
        if rows is None:
            cols["time_s"] = _joined(self.run_starts, np.float64)  # read-only: copied where they are kept
            cols["duration_s"] = _joined(self.run_durations, np.float64)
        else:  # the runs' steps' times among the rows'
            in_runs = rep(is_run.astype(bool))
            row_places = seg_start[is_run == 0]
            for c, parts in (("time_s", self.run_starts), ("duration_s", self.run_durations)):
                out = cols[c] = np.empty(total, dtype=np.float64)
                out[in_runs] = _joined(parts, np.float64)
                out[row_places] = _row_values(rows, c)
        # the columns that hold their segment's value in each of its rows: the row's own, the run's field ...
        for c in ("num_waiting", "num_swapped", "external_fragmentation"):
            values = seg(c)
            if values.any():
                cols[c] = rep(values)
        if rows is not None:  # ... or 0: the rows' values put in the rows' places (rows are recorded in step order)
            for c in ROW_ONLY_COLUMNS:
                values = rows[:, ROW_INDEX[c]]
                if values.any():
                    cols[c] = np.zeros(total, dtype=np.int64)
                    cols[c][row_places] = values
        context = rep(seg("decode_context_tokens"))
        context += nj
        max_context = rep(seg("max_decode_context"))
        max_context += j
        reserved = blocks_used * bs  # allocated
        reserved -= used
        reserved -= internal
        blocks_free = kv.num_gpu_blocks - blocks_used
        if cached_blocks is not None:
            blocks_free -= cached_blocks
            cols["blocks_cached"] = cached_blocks
            cols["cached"] = cached_blocks * bs
        free = blocks_free * bs  # all the slots less the allocated and the cached
        if "external_fragmentation" in cols:
            free -= cols["external_fragmentation"]
        cols.update({
            "num_running": n,
            "num_decode_seqs": rep(seg("num_decode_seqs")),
            "decode_context_tokens": context,
            "max_decode_context": max_context,
            "blocks_used": blocks_used,
            "blocks_free": blocks_free,
            "used": used,
            "reserved": reserved,
            "internal_fragmentation": internal,
            "free": free,
        })
        last = run_start + K - 1  # each run's last row: its memory as kept (its prefix-cache deltas are 0)
        for field, c in enumerate(MEMORY_COLUMNS, 16):
            if c not in cols:  # 0 in every row unless a run's last one is not
                if not meta[:, field].any():
                    continue
                cols[c] = np.zeros(total, dtype=np.int64)
            cols[c][last] = meta[:, field]
        return {c: cols[c] for c in STEP_COLUMNS if c in cols}

    def flush(self) -> None:
        """Turn the rows and runs recorded since the last flush (steps first_step.. num_steps-1) into a chunk."""
        if self.num_steps == self.first_step:
            return
        cols = self._columns()
        if self.table is not None:
            self.table.append(cols)
            # Held until the next flush: freed now, their memory would go back to the system and the next chunk's
            # columns would fault it in again (Azure conv: ~28k page faults a replay, twice the rest).
            self._last_chunk = cols
        self.rows, self.runs, self.run_starts, self.run_durations = [], [], [], []
        self.run_blocks = _block_lists()
        self.first_step = self.num_steps
        if self.sink is not None:
            count = len(cols["step"])
            self.sink({c: cols[c] if c in cols else np.zeros(count, dtype=np.float64 if c in FLOAT_COLUMNS else np.int64)
                       for c in STEP_COLUMNS})

    def steps_frame(self) -> pd.DataFrame | None:
        """One row per step, in step order, with vLLM's kv_cache_usage (which summaries read); None when the steps
        went to a sink. The memory categories' fractions of the cache follow from their counts and are derived
        where they are drawn (results.with_memory_fractions), as on reading a steps.parquet."""
        self.flush()
        if self.sink is not None:
            return None
        cols, self.table = self.table.columns(), _StepTable()
        used = cols["blocks_used"]  # the division written into a table array (_table_array: no huge pages)
        cols["kv_cache_usage"] = np.divide(used, self.sched.kv.num_gpu_blocks, out=_table_array(len(used), np.float64))
        # The columns are the table's own arrays: hand them over rather than copy them into consolidated
        # blocks (a second copy of a table this size costs as much again in page faults), all at once (a
        # column set on a frame costs ~0.1 ms).
        return pd.DataFrame(cols, copy=False)

    def _columns(self) -> dict[str, np.ndarray]:
        """The rows and expanded decode runs since the last flush, as columns in step order. A column that is 0 in
        every one of these steps is left out (`step` is always there): not written, nor its memory touched."""
        rows = _joined(self.rows, np.int64).reshape(-1, len(ROW_COLUMNS)) if self.rows else None
        if not self.runs:
            return _row_columns(rows) if rows is not None else {"step": np.zeros(0, dtype=np.int64)}
        meta = _joined(self.runs, np.int64).reshape(-1, RUN_FIELDS)
        if rows is None:  # runs alone: in run order, each from its own first step
            return self._runs_columns(meta)
        if _tiles(meta[:, 0], meta[:, 1], rows[:, ROW_INDEX["step"]], self.first_step, self.num_steps):
            # Steps are numbered first_step..num_steps-1, each once, the runs in order: each row goes straight to
            # its place, the runs expanded around the rows (no merge)
            return self._runs_columns(meta, rows)
        cols, runs = _row_columns(rows), self._runs_columns(meta)
        num_rows, num_run_rows = len(cols["step"]), len(runs["step"])
        cols = {c: np.concatenate([cols[c] if c in cols else np.zeros(num_rows, dtype=np.int64),
                                   runs[c] if c in runs else np.zeros(num_run_rows, dtype=np.int64)])
                for c in STEP_COLUMNS if c in cols or c in runs}
        order = np.argsort(cols["step"], kind="stable")
        return {c: v[order] for c, v in cols.items()}

    # ---- snapshots ---------------------------------------------------------------
    def snapshot(self, time_s: float) -> None:
        s = self.sched
        kv = s.kv
        # Every physical block, by id: paged block 0 is vLLM's null block (never owned, never cached), so the
        # map has one more block than the manager's usable num_gpu_blocks.
        num_blocks, bs = s.config.resolved_num_gpu_blocks, kv.block_size
        owner = np.full(num_blocks, -1, dtype=np.int32)
        fill = np.zeros(num_blocks, dtype=np.int16)
        ref = np.zeros(num_blocks, dtype=np.int16)
        ids = []
        for idx, r in enumerate(s.running):
            ids.append(r.request_id)
            table = np.asarray(r.block_ids, dtype=np.int64)
            if not len(table):
                continue
            filled = np.clip(r.num_computed_tokens - np.arange(len(table)) * bs, 0, bs)
            fresh = owner[table] < 0
            owner[table[fresh]] = idx
            fill[table] = np.maximum(fill[table], filled)
            np.add.at(ref, table, 1)
        cached = np.zeros(num_blocks, dtype=bool)
        cached[np.asarray(kv.cached_block_ids(), dtype=np.int64)] = True
        self.snapshots.append(BlockSnapshot(time_s, ids, owner, fill, ref, cached))

    # ---- requests ----------------------------------------------------------------
    def requests_frame(self, requests: list[Request]) -> pd.DataFrame:
        """One row per request, built column by column (a million requests' rows as tuples of Python floats
        would cost ~400 MB more at the end of a replay)."""
        n = len(requests)

        def floats(name: str) -> np.ndarray:  # None -> NaN (numpy's conversion of None to a float)
            return np.array(list(map(attrgetter(name), requests)), dtype=np.float64)

        def ints(name: str) -> np.ndarray:
            return np.fromiter(map(attrgetter(name), requests), np.int64, n)

        status = np.fromiter(map(attrgetter("status"), requests), np.int64, n)
        finished = status == RequestStatus.FINISHED
        arrival, first, finish = floats("arrival_time"), floats("first_token_time"), floats("finish_time")
        output_len = ints("output_len")
        names = {RequestStatus.FINISHED: "finished", RequestStatus.REJECTED: "rejected"}
        cols = {
            "request_id": [r.request_id for r in requests],
            "parent_id": [r.parent_id or "" for r in requests],
            "arrival_time_s": arrival,
            "prompt_len": ints("prompt_len"),
            "output_len": output_len,
            "first_scheduled_s": floats("first_scheduled_time"),
            "first_token_s": first,
            "finish_s": finish,
            "ttft_s": first - arrival,
            "tpot_s": np.where(finished & (output_len > 1), (finish - first) / np.maximum(output_len - 1, 1), np.nan),
            "e2e_s": np.where(finished, finish - arrival, np.nan),
            "num_preemptions": ints("num_preemptions"),
            "prefix_hit_tokens": ints("num_prefix_hit_tokens"),
            "state": [names.get(s, "unfinished") for s in status.tolist()],
            "reason": [r.reject_reason or "" for r in requests],
        }
        cols.update({c: [None] * n for c in LIST_COLUMNS})
        assert tuple(cols) == REQUEST_COLUMNS
        df = pd.DataFrame(cols, copy=False)
        self._add_preemptions(df, requests)
        return df

    def _add_preemptions(self, df: pd.DataFrame, requests: list[Request]) -> None:
        """Fill the LIST_COLUMNS of the preempted requests from the scheduler's preemption log."""
        log = self.sched.preemption_log
        if not log:
            return
        row = {id(r): i for i, r in enumerate(requests) if r.num_preemptions}
        cols = {c: df[c].to_numpy(dtype=object, copy=True) for c in LIST_COLUMNS}
        for req, t, event in log:
            i = row.get(id(req))
            if i is None:
                continue
            if cols["preempted_at"][i] is None:
                cols["preempted_at"][i], cols["resumed_at"][i], cols["swapped_out"][i] = [], [], []
            if event == 2:
                cols["resumed_at"][i].append(_nan(t))
            else:
                cols["preempted_at"][i].append(_nan(t))
                cols["swapped_out"][i].append(event == 1)
        for c, v in cols.items():
            df[c] = v


INT32_MAX, INT32_MIN = np.iinfo(np.int32).max, np.iinfo(np.int32).min


class _StepTable:
    """The recorded steps, kept: one array per step column, chunk after chunk appended in step order.

    Each column has room for more rows than it holds (room doubles when it runs out, the rows so far copied
    once), so a chunk is copied in place and the table is never concatenated at the end: the memory of rows
    not yet written is not touched (not resident). A column is int32 (NARROW) until a value does not fit, then
    int64 from then on (the rows so far widened). A column that is 0 in every row so far (left out of the chunks)
    has no array: it is made of zeros, whose memory is never touched, when a chunk first has a value in it or at
    the end (`columns`).
    """

    ROOM = 1 << 20  # rows of the first allocation (memory is touched only as rows are written)

    def __init__(self):
        self.cols: dict[str, np.ndarray] = {}
        self.num_rows = 0

    def append(self, chunk: dict[str, np.ndarray]) -> None:
        """Append a chunk of rows: its columns (`step` among them); a column it leaves out is 0 in every row."""
        start, count = self.num_rows, len(chunk[STEP_COLUMNS[0]])
        end = start + count
        for c in STEP_COLUMNS:
            v, col = chunk.get(c), self.cols.get(c)
            if v is None and col is None:  # 0 so far
                continue
            dtype = NARROW[c] if col is None else col.dtype
            if v is not None and dtype == np.int32 and count and (v.max() > INT32_MAX or v.min() < INT32_MIN):
                dtype = np.dtype(np.int64)
            if col is None or len(col) < end or col.dtype != dtype:
                room = self.ROOM if col is None else len(col)
                while room < end:
                    room *= 2
                grown = _table_array(room, dtype)  # zeros, not touched: the rows before are zeros when col is None
                if col is not None:
                    grown[:start] = col[:start]
                self.cols[c] = col = grown
            col[start:end] = 0 if v is None else v
        self.num_rows = end

    def zero_columns(self) -> set[str]:
        """The columns that are 0 in every row."""
        return set(STEP_COLUMNS) - set(self.cols)

    def columns(self) -> dict[str, np.ndarray]:
        """Every column's rows (views), in STEP_COLUMNS' order."""
        n = self.num_rows
        return {c: self.cols[c][:n] if c in self.cols else np.zeros(n, dtype=NARROW[c]) for c in STEP_COLUMNS}


class _DoublePackers(dict):
    """{count: pack(*values) -> bytes of `count` doubles}: a struct made once per count, found by a C-level lookup
    per record (a copy, where array.fromlist parses each item)."""

    def __missing__(self, count: int):
        pack = Struct(f"{count}d").pack
        if count <= 1024:  # long runs are rare: no struct kept for each length
            self[count] = pack
        return pack


_DOUBLES = _DoublePackers()


def _table_array(count: int, dtype) -> np.ndarray:
    """np.zeros(count, dtype) for the kept table (its memory touched only as rows are written), in an anonymous
    mapping of its own kept off transparent huge pages. numpy asks the kernel for huge pages for arrays of 4 MiB or
    more; on the Firecracker (KVM) guest this was measured on, a huge page's first touch took ~5.6 ms at times (cold
    host memory: ~2.8 ms a MiB, where 4 KiB pages took ~0.4-0.5 ms a MiB), so Azure conv's table appends took
    36-194 ms a replay with the hint and ~50 ms steady without (fresh processes, same session)."""
    dtype = np.dtype(dtype)
    buffer = mmap.mmap(-1, max(count * dtype.itemsize, 1))  # zero pages, mapped on first touch
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # (Linux; with THP 'always' the mapping would take huge pages unasked)
        buffer.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buffer, dtype=dtype, count=count)


def _block_lists() -> tuple[list[int], list[int], list[int], list[int]]:
    """Where decode runs' DecodeBlocks go, list by list, run after run (first_steps, evicted_steps, internal_steps,
    internal_slots)."""
    return [], [], [], []


def _ints(values: list[int]) -> np.ndarray:
    """A list of ints (_block_lists') as a read-only int64 array: packed by struct (~110 instructions an int, where
    np.fromiter and np.array take ~230 and ~300)."""
    return np.frombuffer(Struct(f"{len(values)}q").pack(*values), dtype=np.int64)


def _joined(parts: list[bytes], dtype) -> np.ndarray:
    """Packed records, one after the other, as one read-only array of `dtype`."""
    return np.frombuffer(b"".join(parts), dtype=dtype)


def _row_values(rows: np.ndarray, column: str) -> np.ndarray:
    """A column of recorded single steps (_ROW's records as int64 rows): a view, the times' bits as float64."""
    values = rows[:, ROW_INDEX[column]]
    return values.view(np.float64) if column in FLOAT_COLUMNS else values


def _row_columns(rows: np.ndarray) -> dict[str, np.ndarray]:
    """Recorded single steps (ROW_COLUMNS' values) as columns, those 0 in every row left out (`step` is always there)."""
    return {c: _row_values(rows, c).copy() for c in STEP_COLUMNS if c == "step" or rows[:, ROW_INDEX[c]].any()}


def _tiles(starts: np.ndarray, lengths: np.ndarray, row_steps: np.ndarray, start: int, end: int) -> bool:
    """Whether runs (first steps, lengths; in recorded order) and rows (steps) cover the steps start..end - 1 exactly
    once, the runs in order."""
    if len(starts) > 1 and not (starts[1:] > starts[:-1]).all():
        return False
    firsts = np.concatenate([starts, row_steps.astype(np.int64)])
    lengths = np.concatenate([lengths, np.ones(len(row_steps), dtype=np.int64)])
    order = np.argsort(firsts, kind="stable")
    firsts, ends = firsts[order], firsts[order] + lengths[order]
    return bool(firsts[0] == start and ends[-1] == end and (firsts[1:] == ends[:-1]).all())


def _nan(v):
    return np.nan if v is None else v
