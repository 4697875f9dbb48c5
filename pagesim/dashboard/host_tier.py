"""The host (CPU) tier behind the GPU prefix cache (--kv-offloading-size): occupancy, hits and traffic.

Everything comes from a run's step table (pagesim.recorder): `num_store_blocks` (GPU -> host copies
during the step), `num_load_blocks` (host -> GPU), `prefix_cache_queries`, `prefix_cache_hits` (tokens
found on either tier) and `prefix_cache_host_hits` (of those, found on the host). The host tier's
occupancy follows from the stores: a host block is freed only to make room for a new store
(pagesim.kv_offload: LRU eviction, or the store is dropped), so the blocks holding a prefix are the
blocks stored so far, up to the tier's size. Which host block holds which prefix is not recorded, so the
host block map groups its cells by state. Steps in, plotly figures out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pagesim.dashboard.block_map import colorscale
from pagesim.dashboard.figures import end_time, header, mark_time, time_buckets, time_label
from pagesim.dashboard.palette import HIT_TIERS, HOST_STATES
from pagesim.specs import GIB

HOST_MAP_WIDTH = 32
MAX_HOST_BLOCKS_DRAWN = 32 * 24  # rows about as many as a GPU map of a few thousand blocks
HIT_BUCKETS = 120  # hit rates per time bucket (a step's few lookups are too noisy to read)


def occupancy(steps: pd.DataFrame, num_host_blocks: int) -> pd.DataFrame:
    """Per step: host blocks holding a prefix (`held`), of which `storing` (being copied GPU -> host in
    the step) and `loading` (being read host -> GPU), `cached` (ready, idle) and `free`."""
    stores = steps["num_store_blocks"].to_numpy(dtype=np.int64)
    held = np.minimum(np.cumsum(stores), num_host_blocks)
    storing = np.minimum(stores, held)
    loading = np.minimum(steps["num_load_blocks"].to_numpy(dtype=np.int64), held - storing)
    return pd.DataFrame({"time_s": steps["time_s"].to_numpy(), "held": held, "storing": storing, "loading": loading,
                         "cached": held - storing - loading, "free": num_host_blocks - held})


def at_time(steps: pd.DataFrame, time_s: float | None) -> int:
    """The index of the step running at `time_s` (the last step when None or past the end)."""
    if time_s is None or not len(steps):
        return len(steps) - 1
    return int(max(np.searchsorted(steps["time_s"].to_numpy(), time_s, side="right") - 1, 0))


def host_block_map(steps: pd.DataFrame, num_host_blocks: int, block_bytes: int, time_s: float | None = None,
                   width: int = HOST_MAP_WIDTH, max_blocks: int = MAX_HOST_BLOCKS_DRAWN, *,
                   time_text: str | None = None) -> go.Figure:
    """The host tier's blocks at `time_s` as cells, `width` per row, grouped by state: being stored, being
    loaded from, cached (ready), free. At most about `max_blocks` cells are drawn: a cell then stands for
    several blocks (each state's count rounded up to whole cells). time_text: `time_s` as the title writes it."""
    row = occupancy(steps, num_host_blocks).iloc[at_time(steps, time_s)] if len(steps) else None
    counts = {k: int(row[k]) if row is not None else 0 for k in HOST_STATES if k != "free"}
    counts["free"] = num_host_blocks - sum(counts.values())
    scale = max(1, -(-num_host_blocks // max_blocks))  # blocks per cell
    drawn = [-(-counts[k] // scale) for k in HOST_STATES]
    codes = np.repeat(np.arange(len(HOST_STATES), dtype=float), drawn)
    rows = max(1, -(-len(codes) // width))
    z = np.concatenate([codes, np.full(rows * width - len(codes), np.nan)]).reshape(-1, width)
    labels = [f"{HOST_STATES[k][0]}: {counts[k]:,}" for k in HOST_STATES]
    hover = [f"{label} blocks ({counts[k] * block_bytes / GIB:.2f} GiB)" for k, label in zip(HOST_STATES, labels)]
    text = np.array([hover[int(c)] if c == c else "" for c in z.ravel()], dtype=object).reshape(z.shape)
    colors = [HOST_STATES[k][1] for k in HOST_STATES]
    fig = go.Figure(go.Heatmap(z=z, text=text, hoverinfo="text", colorscale=colorscale(colors), zmin=-0.5,
                               zmax=len(colors) - 0.5, showscale=False, xgap=1, ygap=1, name="host blocks"))
    for k, label in zip(HOST_STATES, labels):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=label, marker=dict(
            symbol="square", size=12, color=HOST_STATES[k][1], line=dict(width=1, color="#999"))))
    fig.update_yaxes(autorange="reversed", showticklabels=False, ticks="", showgrid=False, zeroline=False)
    fig.update_xaxes(showticklabels=False, ticks="", showgrid=False, zeroline=False)
    when = "" if time_s is None else f" at t = {time_text or time_label(time_s)}"
    each = "" if scale == 1 else f", a cell per {scale:,} blocks"
    height = 240 + max(rows, 4) * 14
    header(fig, f"Host tier{when}<br><sup>{num_host_blocks:,} blocks = {num_host_blocks * block_bytes / GIB:.2f} GiB"
                f"<br>grouped by state{each}</sup>", height, top=180)
    fig.update_layout(plot_bgcolor="white", margin=dict(l=20, r=20, b=20),
                      legend=dict(orientation="v", y=1.0 - 75 / height))
    return fig


def hits_by_tier(steps: pd.DataFrame, max_points: int = HIT_BUCKETS) -> pd.DataFrame:
    """Per time bucket: prompt tokens looked up in the prefix cache and the shares found on the GPU
    (`gpu`), on the host (`host`) and computed (`miss`); NaN where nothing was looked up."""
    b = time_buckets(steps, [], max_points, sums=("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_host_hits"))
    q = b["prefix_cache_queries"].to_numpy(dtype="float64")
    share = lambda x: np.divide(x, q, out=np.full(len(q), np.nan), where=q > 0)  # noqa: E731
    host = b["prefix_cache_host_hits"].to_numpy(dtype="float64")
    hits = b["prefix_cache_hits"].to_numpy(dtype="float64")
    return pd.DataFrame({"time_s": b["time_s"], "queries": q, "gpu": share(hits - host), "host": share(host),
                         "miss": share(q - hits)})


def host_tier_over_time(steps: pd.DataFrame, num_host_blocks: int, block_bytes: int, *,
                        time_s: float | None = None, max_points: int = HIT_BUCKETS) -> go.Figure:
    """Three panels on one time axis: the prefix-cache hit rate by tier (GPU hit, host hit, miss; shares
    of the prompt tokens looked up), the bytes moved per direction (cumulative GiB: GPU -> host stores,
    host -> GPU loads) and the host tier in use (GiB, against its size)."""
    hits = hits_by_tier(steps, max_points)
    total = {k: steps[c].sum() for k, c in (("q", "prefix_cache_queries"), ("h", "prefix_cache_hits"),
                                            ("host", "prefix_cache_host_hits"))}
    rate = (lambda x: f"{x / total['q']:.1%}") if total["q"] else (lambda x: "–")
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.09, subplot_titles=[
        f"prefix-cache hits by tier (% of prompt tokens looked up; whole run: GPU {rate(total['h'] - total['host'])}, "
        f"host {rate(total['host'])})",
        "bytes moved (cumulative GiB)", f"host tier in use (GiB of {num_host_blocks * block_bytes / GIB:.2f})"])
    for key in HIT_TIERS:
        label, color = HIT_TIERS[key]
        fig.add_trace(go.Scatter(x=hits["time_s"], y=hits[key] * 100, name=label, stackgroup="hits", mode="lines",
                                 line=dict(width=0.5, color=color), fillcolor=color, legendgroup=label,
                                 hovertemplate=f"{label}: %{{y:.1f}}%<extra></extra>"), row=1, col=1)
    gib = block_bytes / GIB
    b = time_buckets(steps, [], max(max_points * 4, 400), sums=("num_store_blocks", "num_load_blocks"))
    for column, label, color, dash in (("num_store_blocks", "stored GPU → host", HOST_STATES["storing"][1], "solid"),
                                       ("num_load_blocks", "loaded host → GPU", HOST_STATES["loading"][1], "solid")):
        moved = b[column].cumsum() * gib
        fig.add_trace(go.Scatter(x=b["time_s"], y=moved, name=f"{label} ({moved.iloc[-1] if len(moved) else 0:,.1f} GiB)",
                                 mode="lines", line=dict(color=_darker(color), width=2, dash=dash),
                                 hovertemplate=f"{label}: %{{y:.2f}} GiB<extra></extra>"), row=2, col=1)
    occ = occupancy(steps, num_host_blocks)
    step = max(1, len(occ) // (max_points * 4))
    o = occ.iloc[::step]
    fig.add_trace(go.Scatter(x=o["time_s"], y=o["held"] * gib, name="host tier in use", mode="lines",
                             line=dict(color=_darker(HOST_STATES["cached"][1]), width=2), fill="tozeroy",
                             fillcolor=HOST_STATES["cached"][1], hovertemplate="%{y:.2f} GiB<extra></extra>"), row=3, col=1)
    fig.add_hline(y=num_host_blocks * gib, line=dict(color="#212121", width=1, dash="dash"), row=3, col=1)
    fig.update_yaxes(title_text="%", range=[0, 100], row=1, col=1)
    fig.update_yaxes(title_text="GiB", row=2, col=1)
    fig.update_yaxes(title_text="GiB", rangemode="tozero", row=3, col=1)
    fig.update_xaxes(title_text="time (s)", row=3, col=1)
    for row in (1, 2, 3):
        mark_time(fig, row, time_s, end_time(steps))
    return header(fig, "Host tier over time (paged)", 720, top=110)


def _darker(color: str, amount: float = 0.35) -> str:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c * (1 - amount)):02x}" for c in (r, g, b))
