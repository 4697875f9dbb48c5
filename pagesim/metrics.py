"""Run summaries: the figures `summary.json`, the CLI table and the dashboard show.

Names follow vLLM's metrics where the meaning is the same (kv_cache_usage,
num_preemptions, prefix-cache queries and hits). Memory fractions are
time-weighted by step duration:

- token_state_fraction = sum(used * dt) / sum(allocated * dt), PagedAttention's
  share of allocated KV memory that holds token states;
- reserved_fraction, internal_fragmentation_fraction: the same over allocated;
- external_fragmentation_fraction: external fragmentation over the whole cache.

Prefix caching (token counts, see pagesim.kv_manager.PrefixCacheStats):

- prefix_cache_hit_rate = prompt tokens served from the cache at requests'
  first admission / their prompt tokens (prefix_cache_hits / prefix_cache_queries).
  Comparable across configurations and with a trace's ideal (`trace info`);
- prefix_cache_recompute_hit_rate = tokens served from the cache when requests
  are admitted again after a recompute preemption / the tokens they had to
  recompute then (prompt + generated so far).
Both are None when nothing was looked up (prefix caching off, or no preemption).
- with a host tier (kv_offloading_size), prefix_cache_hit_rate stays the total over tiers and splits into
  prefix_cache_gpu_hit_rate + prefix_cache_host_hit_rate (hits found on the GPU / loaded from the host,
  over the same queries); offload_load_bytes / offload_store_bytes: host -> GPU and GPU -> host traffic.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

LATENCY_KEYS = ("p50", "p90", "p99", "mean")


def percentiles(values) -> dict[str, float | None]:
    v = pd.Series(values, dtype="float64").dropna().to_numpy()
    if not len(v):
        return {k: None for k in LATENCY_KEYS}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(v.mean())}


def own_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """The trace's requests of a requests frame: a parallel-sampling (n > 1) request's own row, not the samples forked
    from it (their parent_id names it), which are counted with their request."""
    return requests[requests["parent_id"] == ""] if "parent_id" in requests else requests


def _weighted(numerator: pd.Series, denominator: pd.Series, dt: pd.Series) -> float | None:
    den = float((denominator * dt).sum())
    return float((numerator * dt).sum()) / den if den > 0 else None


def summarize(steps: pd.DataFrame, requests: pd.DataFrame, *, leaked_blocks: int, sim_wall_s: float,
              prefix_cache_queries: int, prefix_cache_hits: int, prefix_cache_recompute_queries: int = 0,
              prefix_cache_recompute_hits: int = 0, prefix_cache_host_hits: int = 0,
              block_bytes: int | None = None) -> dict:
    finished = requests[requests["state"] == "finished"]
    own = own_requests(requests)
    start = float(requests["arrival_time_s"].min()) if len(requests) else 0.0
    end = float(finished["finish_s"].max()) if len(finished) else start
    makespan = end - start
    dt = steps["duration_s"] if len(steps) else pd.Series(dtype="float64")
    allocated = steps["used"] + steps["reserved"] + steps["internal_fragmentation"]
    total = steps[["used", "reserved", "internal_fragmentation", "external_fragmentation", "free", "cached"]].sum(axis=1)
    weights = dt.where(dt > 0, 0.0)
    busy = float(weights.sum())
    return {
        "num_requests": int(len(own)),
        "num_finished": int((own["state"] == "finished").sum()),
        "num_rejected": int((own["state"] == "rejected").sum()),
        "num_samples": int(len(finished)),
        "makespan_s": makespan,
        "request_throughput": len(own_requests(finished)) / makespan if makespan > 0 else None,
        "output_token_throughput": float(finished["output_len"].sum()) / makespan if makespan > 0 else None,
        "ttft_s": percentiles(finished["ttft_s"]),
        "tpot_s": percentiles(finished["tpot_s"]),
        "e2e_s": percentiles(finished["e2e_s"]),
        "num_preemptions": int(steps["num_preemptions"].sum()) if len(steps) else 0,
        "mean_kv_cache_usage": float((steps["kv_cache_usage"] * weights).sum() / busy) if busy else None,
        "token_state_fraction": _weighted(steps["used"], allocated, weights),
        "reserved_fraction": _weighted(steps["reserved"], allocated, weights),
        "internal_fragmentation_fraction": _weighted(steps["internal_fragmentation"], allocated, weights),
        "external_fragmentation_fraction": _weighted(steps["external_fragmentation"], total, weights),
        "peak_num_running": int(steps["num_running"].max()) if len(steps) else 0,
        "mean_num_running": float((steps["num_running"] * weights).sum() / busy) if busy else 0.0,
        "prefix_cache_queries": int(prefix_cache_queries),
        "prefix_cache_hits": int(prefix_cache_hits),
        "prefix_cache_hit_rate": prefix_cache_hits / prefix_cache_queries if prefix_cache_queries else None,
        "prefix_cache_host_hits": int(prefix_cache_host_hits),
        "prefix_cache_gpu_hit_rate": ((prefix_cache_hits - prefix_cache_host_hits) / prefix_cache_queries
                                      if prefix_cache_queries else None),
        "prefix_cache_host_hit_rate": prefix_cache_host_hits / prefix_cache_queries if prefix_cache_queries else None,
        "offload_load_bytes": _moved(steps, "num_load_blocks", block_bytes),
        "offload_store_bytes": _moved(steps, "num_store_blocks", block_bytes),
        "prefix_cache_recompute_queries": int(prefix_cache_recompute_queries),
        "prefix_cache_recompute_hits": int(prefix_cache_recompute_hits),
        "prefix_cache_recompute_hit_rate": (prefix_cache_recompute_hits / prefix_cache_recompute_queries
                                            if prefix_cache_recompute_queries else None),
        "leaked_blocks": int(leaked_blocks),
        "num_steps": int(len(steps)),
        "busy_s": busy,
        "sim_wall_s": sim_wall_s,
    }


def _moved(steps: pd.DataFrame, column: str, block_bytes: int | None) -> int | None:
    if block_bytes is None or column not in steps:
        return None
    return int(steps[column].sum()) * block_bytes


def summarize_run(result) -> dict:
    """Summary of a simulator RunResult (or anything with the same fields)."""
    return summarize(
        result.steps,
        result.requests,
        leaked_blocks=result.leaked_blocks,
        sim_wall_s=result.sim_wall_s,
        block_bytes=result.config.block_bytes,
        **prefix_cache_kwargs(result.prefix_cache),
    )


def prefix_cache_kwargs(stats) -> dict[str, int]:
    """summarize()'s prefix-cache arguments from a PrefixCacheStats."""
    return {
        "prefix_cache_queries": stats.queries,
        "prefix_cache_hits": stats.hits,
        "prefix_cache_recompute_queries": stats.recompute_queries,
        "prefix_cache_recompute_hits": stats.recompute_hits,
        "prefix_cache_host_hits": stats.host_hits,
    }
