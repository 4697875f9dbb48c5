"""The Sweep page's grid, run by pagesim.sweep.run_sweep: the code of `python -m pagesim sweep`.

The page's config (a Config from the sidebar) becomes the sweep's fixed replay options and its grid the
sweep's points; each point is one task (local processes or Ray), and the rows go to a results.parquet in a
directory named after everything they depend on (trace fingerprint, fixed options, points; the swap points'
swap_space is their own parameter, so another value runs them alone), so a view seen before opens at once and an
interrupted one resumes where it stopped.

Memory is swept as KV-cache GiB (`kv_cache_gib`), not as a block count, so that configurations with
different block sizes get the same bytes: num_gpu_blocks = floor(GiB / bytes per block). The default sweep
is the PagedAttention paper's block-size study (Kwon et al., SOSP 2023, §7.2 and Fig. 18b): block sizes
8..256 on a ShareGPT-like trace; larger blocks leave more of each request's last block empty, so the share
of allocated KV memory holding token states falls.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import tempfile
from pathlib import Path

import pandas as pd

from pagesim.config import Config
from pagesim.errors import UserError
from pagesim.sweep import blocks_for_gib  # noqa: F401 - the sidebar's memory form uses it from here

BLOCK_SIZES = (8, 16, 32, 64, 128, 256)
LAYOUTS = ("paged", "contiguous-max", "contiguous-pow2", "contiguous-oracle")
PARAMETERS = ("block_size", "kv_cache_gib", "preemption_mode", "enable_prefix_caching", "layout")
# Summary figures shown per grid point (pagesim.sweep's names; latencies renamed ttft_s_p50 -> ttft_p50_s).
FIGURES = ("token_state_fraction", "internal_fragmentation_fraction", "reserved_fraction",
           "external_fragmentation_fraction", "request_throughput", "output_token_throughput", "num_preemptions",
           "mean_num_running", "peak_num_running", "num_rejected", "prefix_cache_hit_rate", "mean_kv_cache_usage",
           "makespan_s", "sim_wall_s")
LATENCIES = ("ttft", "tpot", "e2e")
CACHE_ENV = "PAGESIM_SWEEP_DIR"  # where the page's sweep directories go (default: <tmp>/pagesim-sweeps)


def grid_points(grid: dict[str, list], swap_space: float | None = None) -> list[dict]:
    """The grid's points in grid order, as pagesim.sweep parameters (layout "contiguous-max" -> "max").

    grid keys: block_size, kv_cache_gib, preemption_mode, enable_prefix_caching, layout ("paged" or
    "contiguous-<policy>"). `swap_space`: a parameter of the swap points only (as `--grid swap_space=` gives it), so
    a recompute point, whose run does not depend on it, keeps its config_id and row whatever it is."""
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
        if "layout" in params:
            params["layout"] = params["layout"].removeprefix("contiguous-")
        if swap_space is not None and params.get("preemption_mode") == "swap":
            params["swap_space"] = swap_space
        points.append(params)
    return points


def base_options(config: Config) -> dict:
    """The sweep's fixed options: `python -m pagesim sweep`'s defaults, with every setting of `config`."""
    from pagesim.cli import command_parser
    from pagesim.sweep import NOT_SWEPT

    sub = command_parser("sweep")
    base = {k: v for k, v in vars(sub.parse_args(["trace", "--out", "unused"])).items()
            if k not in NOT_SWEPT or k == "slo"}
    for field in dataclasses.fields(Config):
        if field.name in base:
            base[field.name] = getattr(config, field.name)
    return base


def results_dir(trace_key: str, base: dict, points: list[dict]) -> Path:
    """The sweep directory of these points of this trace under these options (its name hashes all three, but for the
    swap points' swap_space: the grid's directory keeps the rows of every swap_space run on it, so a new one runs the
    swap points alone; rows_of picks a grid's rows)."""
    points = [{k: v for k, v in p.items() if k != "swap_space"} for p in points]
    key = json.dumps({"trace": trace_key, "base": base, "points": points}, sort_keys=True, default=str)
    root = Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "pagesim-sweeps")
    return root / hashlib.sha1(key.encode()).hexdigest()[:16]


RAY: dict = {}  # {"address": ...}: what this server's Ray connection was made with (None: a local instance)


def connect_ray(address: str | None) -> None:
    """Start a local Ray instance (address None) or connect to the cluster at `address`, once per server: Ray keeps one
    connection per process, so an address typed after it started would be ignored (the sweep would run where Ray
    already is); that raises UserError instead, saying what to do."""
    import ray

    from pagesim.sweep import start_ray

    if ray.is_initialized():
        if "address" in RAY and RAY["address"] != address:
            now = "a local instance" if RAY["address"] is None else f"the cluster at {RAY['address']}"
            wanted = "a local instance" if address is None else f"the cluster at {address}"
            raise UserError(f"Ray is already running in this dashboard's server, on {now}, and a server keeps one Ray "
                            f"connection: to run on {wanted}, restart `streamlit run app.py`; to run on {now}, set the "
                            f"Ray address back to {RAY['address'] or 'empty'}.")
        return
    start_ray(address)
    RAY["address"] = address


def run(trace, base: dict, points: list[dict], out: Path, *, backend: str = "local", address: str | None = None,
        on_row=None) -> pd.DataFrame:
    """pagesim.sweep.run_sweep of the points not yet in out/results.parquet; the whole table."""
    from pagesim.sweep import run_sweep

    return run_sweep(trace, base, points, out, backend=backend, address=address, progress=False, on_row=on_row)


def rows_of(results: pd.DataFrame, points: list[dict]) -> pd.DataFrame:
    """The rows of `points` in `results` (a sweep directory's table, which may hold other swap_space's swap rows), in
    grid order, as results.parquet has them with the points' parameters first: a parameter only some points have
    (swap_space) follows the figures in a table whose first row lacks it."""
    from pagesim.sweep import config_id

    if not len(results):
        return results.copy()
    order = {config_id(p): i for i, p in enumerate(points)}
    df = results[results["config_id"].isin(order)]
    df = df.iloc[df["config_id"].map(order).argsort()].reset_index(drop=True)
    params = [k for k in dict.fromkeys(k for p in points for k in p) if k in df]
    return df[params + [c for c in df.columns if c not in params]]


# options a row also records among its figures, whatever was swept: the resolved block count, and a multi-replica
# run's router
SUMMARY_OPTIONS = ("num_gpu_blocks", "router")


@functools.cache
def sweepable() -> frozenset[str]:
    """The names a sweep's parameters may have: `python -m pagesim sweep --grid`'s (pagesim.sweep.sweepable)."""
    from pagesim.cli import command_parser
    from pagesim.sweep import sweepable as grid_names

    return frozenset(grid_names(command_parser("sweep")))


def parameters(results: pd.DataFrame) -> list[str]:
    """The swept parameters of a sweep's table: its columns before config_id (run_config writes each row's parameters
    first), and a parameter only some points have wherever it sits: results.parquet's columns are its first row's, then
    each later row's new ones, so the swap points' swap_space follows the figures when a recompute row came first. A
    column after config_id is a parameter by its name (a sweepable option's), but for an option a row records among
    its figures (SUMMARY_OPTIONS)."""
    cols = list(results.columns)
    if "config_id" not in cols:
        return []
    at = cols.index("config_id")
    return cols[:at] + [c for c in cols[at + 1:] if c in sweepable() and c not in SUMMARY_OPTIONS]


def table(results: pd.DataFrame, points: list[dict] | None = None) -> pd.DataFrame:
    """The rows to show: in grid order (when `points` is given), the swept parameters, the figures, then
    status, error and config_id; layouts by run name (contiguous-max), latencies as ttft_p50_s."""
    df = results.copy() if points is None else rows_of(results, points)
    if "layout" in df:
        df["layout"] = df["layout"].map(lambda v: v if v == "paged" or str(v).startswith("contiguous-")
                                        else f"contiguous-{v}")
    df = df.rename(columns={f"{m}_s_{p}": f"{m}_{p}_s" for m in LATENCIES for p in ("p50", "p99")})
    if "num_gpu_blocks" in df and "block_size" in df:
        df["kv_cache_tokens"] = df["num_gpu_blocks"] * df["block_size"]
    params = parameters(df)
    figures = [c for c in (*FIGURES, *(f"{m}_{p}_s" for m in LATENCIES for p in ("p50", "p99")), "num_gpu_blocks",
                           "kv_cache_tokens") if c in df]
    tail = [c for c in ("status", "error", "config_id") if c in df]
    return df[params + figures + tail]
