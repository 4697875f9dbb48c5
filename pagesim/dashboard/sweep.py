"""One trace over a grid of configurations, in parallel processes.

Memory is swept as KV-cache GiB (`kv_cache_gib`), not as a block count, so that
configurations with different block sizes get the same bytes: num_gpu_blocks =
floor(GiB / bytes per block). The default sweep is the PagedAttention paper's
block-size study (Kwon et al., SOSP 2023, §7.2 and Fig. 18b): block sizes 8..256
on a ShareGPT-like trace; larger blocks leave more of each request's last block
empty, so the share of allocated KV memory holding token states falls.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed

import pandas as pd

from pagesim.config import Config
from pagesim.errors import UserError
from pagesim.metrics import summarize_run
from pagesim.simulator import simulate
from pagesim.specs import GIB

BLOCK_SIZES = (8, 16, 32, 64, 128, 256)
LAYOUTS = ("paged", "contiguous-max", "contiguous-pow2", "contiguous-oracle")
DEFAULT_KV_CACHE_GIB = 4.0  # 2048 blocks of 16 tokens for Llama-3-8B (128 KiB of K/V per token)
DEFAULT_GRID = {"block_size": list(BLOCK_SIZES)}
PARAMETERS = ("block_size", "kv_cache_gib", "preemption_mode", "enable_prefix_caching", "layout")
# Summary figures kept per grid point (flattened: ttft_p50_s is summary["ttft_s"]["p50"]).
FIGURES = ("token_state_fraction", "internal_fragmentation_fraction", "reserved_fraction",
           "external_fragmentation_fraction", "request_throughput", "output_token_throughput", "num_preemptions",
           "mean_num_running", "peak_num_running", "num_rejected", "prefix_cache_hit_rate", "mean_kv_cache_usage",
           "makespan_s", "sim_wall_s")
LATENCIES = ("ttft_s", "tpot_s", "e2e_s")


def grid_points(base: Config, grid: dict[str, list]) -> list[tuple[dict, Config]]:
    """(parameters, config) for every combination of the grid's values, in grid order.

    grid keys: block_size, kv_cache_gib, preemption_mode, enable_prefix_caching, layout ("paged" or
    "contiguous-<policy>"). Without kv_cache_gib, the base config's num_gpu_blocks (or its
    gpu_memory_utilization) is kept as it is."""
    unknown = set(grid) - set(PARAMETERS)
    if unknown:
        raise UserError(f"cannot sweep {', '.join(sorted(unknown))}; expected some of {', '.join(PARAMETERS)}")
    empty = [k for k, v in grid.items() if not len(v)]
    if empty:
        raise UserError(f"choose at least one value for {', '.join(empty)}")
    keys = list(grid)
    points = []
    for values in itertools.product(*(grid[k] for k in keys)):
        params = dict(zip(keys, values))
        changes = {k: v for k, v in params.items() if k in ("block_size", "preemption_mode", "enable_prefix_caching")}
        layout = params.get("layout", "paged")
        if layout != "paged":
            policy = layout.removeprefix("contiguous-")
            changes.update(kv_layout="contiguous", reserve_policy=policy)
        config = base.replace(**changes)
        if "kv_cache_gib" in params:
            config = config.replace(num_gpu_blocks=blocks_for_gib(config, params["kv_cache_gib"]))
        points.append((params, config))
    return points


def blocks_for_gib(config: Config, gib: float) -> int:
    """How many of the config's KV blocks fit in `gib` GiB of K/V (at least one, or a UserError)."""
    blocks = int(gib * GIB // config.block_bytes)
    if blocks < 1:
        raise UserError(f"{gib:g} GiB holds no KV block of {config.block_size} tokens for {config.model} "
                        f"({config.block_bytes / 2**20:g} MiB each)")
    return blocks


def run_point(trace, config: Config) -> dict:
    """Simulate one grid point; its summary figures, flattened (runs in a worker process)."""
    summary = summarize_run(simulate(trace, config))
    row = {k: summary[k] for k in FIGURES}
    for metric in LATENCIES:
        for p in ("p50", "p99"):
            row[f"{metric.removesuffix('_s')}_{p}_s"] = summary[metric][p]
    row["num_gpu_blocks"] = config.resolved_num_gpu_blocks
    row["kv_cache_tokens"] = config.resolved_num_gpu_blocks * config.block_size
    return row


def run_sweep(trace, base: Config, grid: dict[str, list] | None = None, *, max_workers: int | None = None,
              progress=None) -> pd.DataFrame:
    """One row per grid point: its parameters, then the summary figures (FIGURES, latency p50/p99).

    Points run in a ProcessPoolExecutor of max_workers processes (default os.cpu_count()), started by
    spawn (safe under Streamlit's threads). progress(done, total), if given, is called as points finish."""
    points = grid_points(base, grid or DEFAULT_GRID)
    workers = max(1, min(max_workers or os.cpu_count() or 1, len(points)))
    rows: dict[int, dict] = {}
    if progress is not None:
        progress(0, len(points))
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run_point, trace, config): i for i, (_, config) in enumerate(points)}
        for future in as_completed(futures):
            i = futures[future]
            rows[i] = {**points[i][0], **future.result()}
            if progress is not None:
                progress(len(rows), len(points))
    return pd.DataFrame([rows[i] for i in range(len(points))])
