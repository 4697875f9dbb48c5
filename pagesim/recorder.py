"""The recorder: per-step and per-request tables and block snapshots, from either executor.

Steps are recorded one at a time (`record_step`) or, for the simulator's exact
fast path, as a run of identical decode steps (`record_decode_run`) whose
per-step rows are computed in bulk; both give the same rows.

Memory figures are taken at the end of each step (after finished requests have
released their blocks); `num_running` is the batch the step ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pagesim.accounting import CATEGORIES
from pagesim.request import Request, RequestStatus
from pagesim.scheduler import DecodeRun, Scheduler, StepPlan

FEATURE_COLUMNS = (
    "num_prefill_tokens",
    "num_prefill_seqs",
    "prefill_attn_pairs",
    "prefill_context_tokens",
    "num_decode_seqs",
    "decode_context_tokens",
    "num_swap_out_blocks",
    "num_swap_in_blocks",
    "num_copy_blocks",
)
STEP_COLUMNS = (
    ("step", "time_s", "duration_s", "num_running", "num_waiting", "num_swapped")
    + FEATURE_COLUMNS
    + ("num_preemptions", "blocks_used", "blocks_cached", "blocks_free", "prefix_cache_queries", "prefix_cache_hits")
    + CATEGORIES
)
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
)


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
    def __init__(self, scheduler: Scheduler, features_of):
        """`features_of(plan)` gives the step's StepFeatures (the cost model's view of the step)."""
        self.sched = scheduler
        self.features_of = features_of
        self.rows: list[tuple] = []
        self.chunks: list[dict[str, np.ndarray]] = []
        self.snapshots: list[BlockSnapshot] = []
        self._queries = 0
        self._hits = 0

    # ---- steps ------------------------------------------------------------------
    def _prefix_deltas(self) -> tuple[int, int]:
        kv = self.sched.kv
        dq, dh = kv.prefix_cache_queries - self._queries, kv.prefix_cache_hits - self._hits
        self._queries, self._hits = kv.prefix_cache_queries, kv.prefix_cache_hits
        return dq, dh

    def memory_state(self) -> tuple:
        s = self.sched
        kv = s.kv
        head = s.swapped[0] if s.swapped else (s.waiting[0] if s.waiting else None)
        acc = kv.accounting(s.running, head)
        bs = kv.block_size
        allocated_blocks, cached_blocks = acc.allocated // bs, acc.cached // bs
        return (allocated_blocks, cached_blocks, kv.num_gpu_blocks - allocated_blocks - cached_blocks) + tuple(
            getattr(acc, c) for c in CATEGORIES
        )

    def record_step(self, start: float, duration: float, plan: StepPlan, num_running: int) -> None:
        s = self.sched
        f = self.features_of(plan)
        memory = self.memory_state()
        self.rows.append(
            (plan.step_id, start, duration, num_running, len(s.waiting), len(s.swapped))
            + tuple(getattr(f, c) for c in FEATURE_COLUMNS)
            + (len(plan.preempted),)
            + memory[:3]
            + self._prefix_deltas()
            + memory[3:]
        )

    def record_decode_run(self, first_step: int, starts: np.ndarray, durations: np.ndarray, run: DecodeRun, before: tuple) -> None:
        """Rows for a decode run; `before` is `memory_state()` taken just before the run was applied."""
        self._flush_rows()
        k, n = run.k, run.num_seqs
        s = self.sched
        kv = s.kv
        bs = kv.block_size
        j = np.arange(1, k + 1)
        zeros = np.zeros(k, dtype=np.int64)
        blocks_used0, cached0, _, used0, _, internal0, external0, _, _ = before
        if run.blocks_per_step:
            blocks_used = blocks_used0 + np.cumsum(run.blocks_per_step)
            cached_blocks = cached0 - np.cumsum(run.evicted_per_step)
            internal = internal0 + np.cumsum(run.internal_delta_per_step)
        else:
            blocks_used = np.full(k, blocks_used0)
            cached_blocks = np.full(k, cached0)
            internal = np.full(k, internal0)
        used = used0 + n * j
        allocated = blocks_used * bs
        cols = {
            "step": first_step + np.arange(k),
            "time_s": starts,
            "duration_s": durations,
            "num_running": np.full(k, n),
            "num_waiting": np.full(k, len(s.waiting)),
            "num_swapped": np.full(k, len(s.swapped)),
            "num_decode_seqs": np.full(k, n),
            "decode_context_tokens": run.context_start + n * j,
            "num_preemptions": zeros,
            "blocks_used": blocks_used,
            "blocks_cached": cached_blocks,
            "blocks_free": kv.num_gpu_blocks - blocks_used - cached_blocks,
            "used": used,
            "reserved": allocated - used - internal,
            "internal_fragmentation": internal,
            "external_fragmentation": np.full(k, external0),
            "cached": cached_blocks * bs,
        }
        cols["free"] = kv.num_gpu_blocks * bs - allocated - cols["external_fragmentation"] - cols["cached"]
        for c in STEP_COLUMNS:
            cols.setdefault(c, zeros)
        # The last step may finish requests: its memory is read from the state.
        last = self.memory_state()
        for c, v in zip(("blocks_used", "blocks_cached", "blocks_free") + CATEGORIES, last):
            cols[c] = cols[c].copy()
            cols[c][-1] = v
        dq, dh = self._prefix_deltas()
        cols["prefix_cache_queries"], cols["prefix_cache_hits"] = zeros.copy(), zeros.copy()
        cols["prefix_cache_queries"][-1], cols["prefix_cache_hits"][-1] = dq, dh
        self.chunks.append(cols)

    def _flush_rows(self) -> None:
        if self.rows:
            arr = list(zip(*self.rows))
            self.chunks.append({c: np.asarray(v) for c, v in zip(STEP_COLUMNS, arr)})
            self.rows = []

    def steps_frame(self) -> pd.DataFrame:
        self._flush_rows()
        if not self.chunks:
            return pd.DataFrame({c: pd.Series(dtype="float64") for c in STEP_COLUMNS})
        df = pd.DataFrame({c: np.concatenate([ch[c] for ch in self.chunks]) for c in STEP_COLUMNS})
        total = self.sched.kv.num_gpu_blocks * self.sched.kv.block_size
        for c in CATEGORIES:
            df[f"{c}_frac"] = df[c] / total
        df["kv_cache_usage"] = df["blocks_used"] / self.sched.kv.num_gpu_blocks
        return df

    # ---- snapshots ---------------------------------------------------------------
    def snapshot(self, time_s: float) -> None:
        s = self.sched
        kv = s.kv
        num_blocks, bs = kv.num_gpu_blocks, kv.block_size
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
        if hasattr(kv, "pool"):
            for b in kv.pool.free_queue.values():
                if b.block_hash is not None:
                    cached[b.block_id] = True
        self.snapshots.append(BlockSnapshot(time_s, ids, owner, fill, ref, cached))

    # ---- requests ----------------------------------------------------------------
    def requests_frame(self, requests: list[Request]) -> pd.DataFrame:
        rows = []
        for r in requests:
            finished = r.status == RequestStatus.FINISHED
            ttft = r.first_token_time - r.arrival_time if r.first_token_time is not None else np.nan
            e2e = r.finish_time - r.arrival_time if finished else np.nan
            tpot = (
                (r.finish_time - r.first_token_time) / (r.output_len - 1)
                if finished and r.output_len > 1
                else np.nan
            )
            rows.append(
                (
                    r.request_id,
                    r.parent_id or "",
                    r.arrival_time,
                    r.prompt_len,
                    r.output_len,
                    _nan(r.first_scheduled_time),
                    _nan(r.first_token_time),
                    _nan(r.finish_time),
                    ttft,
                    tpot,
                    e2e,
                    r.num_preemptions,
                    r.num_prefix_hit_tokens,
                    "finished" if finished else ("rejected" if r.status == RequestStatus.REJECTED else "unfinished"),
                    r.reject_reason or "",
                )
            )
        return pd.DataFrame.from_records(rows, columns=list(REQUEST_COLUMNS))


def _nan(v):
    return np.nan if v is None else v
