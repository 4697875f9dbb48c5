"""Figure builders: DataFrames in, plotly Figures out; no Streamlit, no simulation.

Memory words follow pagesim/accounting.py (and the README): every KV slot is used, reserved, internal
fragmentation, external fragmentation, cached or free. Long step tables are
reduced to at most `max_points` time buckets for drawing (duration-weighted
means, so a bucket shows the memory state averaged over the time it covers).
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pagesim.accounting import CATEGORIES

MAX_POINTS = 1000  # about one point per pixel of a wide chart

# Drawing order of the stacked memory area, bottom to top, with labels and colours.
MEMORY_LAYERS = {
    "used": ("used", "#2ca02c"),
    "reserved": ("reserved", "#f2b701"),
    "internal_fragmentation": ("internal fragmentation", "#e8743b"),
    "external_fragmentation": ("external fragmentation", "#c0392b"),
    "cached": ("cached", "#4c78a8"),
    "free": ("free", "#dcdcdc"),
}
assert set(MEMORY_LAYERS) == set(CATEGORIES)
REQUEST_LINES = {"num_running": ("running", "#1f77b4"), "num_waiting": ("waiting", "#ff7f0e"),
                 "num_swapped": ("swapped", "#9467bd")}
RUN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
LATENCIES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}


# ---- the trace -------------------------------------------------------------------------------------------
def trace_overview(trace: pd.DataFrame, bins: int = 60) -> go.Figure:
    """Arrivals per second over the trace, and the prompt and output length distributions (token counts)."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=["arrivals (req/s)", "prompt length (tokens)",
                                                        "output length (tokens)"], horizontal_spacing=0.06)
    t = trace["arrival_time_s"].to_numpy(dtype="float64")
    span = float(t.max()) if len(t) else 0.0
    width = max(span / bins, 1e-9)
    counts, edges = np.histogram(t, bins=bins, range=(0.0, max(span, 1e-9)))
    fig.add_trace(go.Bar(x=edges[:-1], y=counts / width, width=width, name="arrivals", marker_color="#4c78a8",
                         hovertemplate="t=%{x:.1f} s<br>%{y:.2f} req/s<extra></extra>"), row=1, col=1)
    for col, (column, color) in enumerate((("prompt_len", "#54a24b"), ("output_len", "#e45756")), 2):
        fig.add_trace(go.Histogram(x=trace[column], nbinsx=bins, name=column, marker_color=color), row=1, col=col)
    fig.update_xaxes(title_text="time (s)", row=1, col=1)
    fig.update_layout(height=240, showlegend=False, bargap=0, margin=dict(t=40, b=40, l=50, r=20))
    return fig


# ---- step tables over time -------------------------------------------------------------------------
def time_buckets(steps: pd.DataFrame, columns, max_points: int = MAX_POINTS, sums=()) -> pd.DataFrame:
    """Steps reduced to at most max_points equal time buckets: `columns` as duration-weighted means,
    `sums` as sums, `time_s` as the bucket's first step time. Short tables come back unchanged."""
    columns, sums = list(columns), list(sums)
    if len(steps) <= max_points:
        return steps[["time_s", *columns, *sums]].reset_index(drop=True)
    t = steps["time_s"].to_numpy()
    t0, t1 = t[0], t[-1]
    bucket = np.minimum(((t - t0) / (t1 - t0 or 1.0) * max_points).astype(np.int64), max_points - 1)
    w = np.maximum(steps["duration_s"].to_numpy(dtype="float64"), 1e-12)
    frame = pd.DataFrame({"bucket": bucket, "w": w, "time_s": t})
    for c in columns:
        frame[c] = steps[c].to_numpy(dtype="float64") * w
    for c in sums:
        frame[c] = steps[c].to_numpy()
    g = frame.groupby("bucket", sort=True)
    out = g[[*columns, *sums]].sum()
    out[columns] = out[columns].div(g["w"].sum(), axis=0)
    out.insert(0, "time_s", g["time_s"].min())
    return out.reset_index(drop=True)


def _header(fig: go.Figure, title: str, height: int, top: int = 100) -> go.Figure:
    """Title on the first line at the top left, the legend on the line below it, then the subplots
    (whose titles need the rest of the `top` margin)."""
    fig.update_layout(
        height=height, margin=dict(t=top, b=40, l=60, r=20),
        title=dict(text=title, x=0.0, xanchor="left", xref="paper", y=1.0, yanchor="top", yref="container",
                   pad=dict(t=12)),
        legend=dict(orientation="h", x=0.0, xanchor="left", y=1.0 - 40 / height, yanchor="top", yref="container"))
    return fig


def _panels(names, title: str, row_height: int = 220) -> go.Figure:
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.06 if len(names) > 1 else 0,
                        subplot_titles=list(names))
    _header(fig, title, 110 + row_height * len(names))
    fig.update_xaxes(title_text="time (s)", row=len(names), col=1)
    return fig


def memory_over_time(steps_by_run: dict[str, pd.DataFrame], max_points: int = MAX_POINTS) -> go.Figure:
    """One stacked-area panel per run (shared time axis): each memory category as % of the KV cache."""
    fig = _panels(steps_by_run, "KV-cache memory over time (% of slots)")
    for row, (run, steps) in enumerate(steps_by_run.items(), 1):
        frac = [f"{c}_frac" for c in MEMORY_LAYERS]
        b = time_buckets(steps, frac, max_points)
        for c, (label, color) in MEMORY_LAYERS.items():
            fig.add_trace(
                go.Scatter(x=b["time_s"], y=b[f"{c}_frac"] * 100, name=label, legendgroup=label, showlegend=row == 1,
                           stackgroup=f"memory-{row}", mode="lines", line=dict(width=0, color=color),
                           fillcolor=color, hovertemplate=f"{run}<br>{label}: %{{y:.1f}}%<br>t=%{{x:.2f}} s<extra></extra>"),
                row=row, col=1)
        fig.update_yaxes(range=[0, 100], title_text="% of KV slots", row=row, col=1)
    return fig


def requests_over_time(steps_by_run: dict[str, pd.DataFrame], max_points: int = MAX_POINTS) -> go.Figure:
    """Running, waiting and swapped requests per run, with steps that preempted marked (x)."""
    fig = _panels(steps_by_run, "Requests over time")
    for row, (run, steps) in enumerate(steps_by_run.items(), 1):
        b = time_buckets(steps, list(REQUEST_LINES), max_points, sums=["num_preemptions"])
        for c, (label, color) in REQUEST_LINES.items():
            fig.add_trace(go.Scatter(x=b["time_s"], y=b[c], name=label, legendgroup=label, showlegend=row == 1,
                                     mode="lines", line=dict(color=color, width=1.5)), row=row, col=1)
        hit = b[b["num_preemptions"] > 0]
        fig.add_trace(go.Scatter(x=hit["time_s"], y=hit["num_running"], name="preemptions", legendgroup="preemptions",
                                 showlegend=row == 1, mode="markers",
                                 marker=dict(symbol="x", size=7, color="#c0392b"), customdata=hit["num_preemptions"],
                                 hovertemplate="%{customdata} preempted<br>t=%{x:.2f} s<extra></extra>"),
                      row=row, col=1)
        fig.update_yaxes(title_text="requests", rangemode="tozero", row=row, col=1)
    return fig


# ---- block map -----------------------------------------------------------------------------------------
BLOCK_MAP_WIDTH = 64
MAX_BLOCKS_DRAWN = 64 * 128
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#393b79",
           "#637939", "#843c39", "#7b4173", "#e6550d", "#31a354", "#3182bd", "#a55194"]  # no greys, no gold
FREE, CACHED, SHARED = "#f4f4f4", "#555555", "#ffd700"
BLOCK_LEGEND = {"free": FREE, "cached prefix (free, reusable)": CACHED, "shared prefix (ref_cnt > 1)": SHARED,
                "owned by a request (one colour each)": PALETTE[0],
                "reserved ahead (allocated, no tokens yet)": "#c6dbef"}


def _lighten(color: str, amount: float = 0.65) -> str:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in (r, g, b))


def _block_colorscale() -> tuple[list, int]:
    """Discrete colorscale over integer codes: 0 free, 1 cached, 2 shared, 3.. owned (palette), then the
    same palette lightened for blocks allocated but not yet holding a token."""
    colors = [FREE, CACHED, SHARED, *PALETTE, *(_lighten(c) for c in PALETTE)]
    n = len(colors)
    scale = []
    for i, c in enumerate(colors):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale, n


def block_codes(blocks: pd.DataFrame) -> np.ndarray:
    """The colour code of each block of a BlockSnapshot frame (see _block_colorscale). A request's
    colour comes from a hash of its id, so it keeps its colour across snapshots and runs."""
    owned = blocks["request_id"].to_numpy() != ""
    palette = np.array([zlib.crc32(r.encode()) % len(PALETTE) for r in blocks["request_id"]], dtype=np.int64)
    codes = np.where(blocks["cached"].to_numpy(), 1, 0)
    codes = np.where(owned, 3 + palette + np.where(blocks["fill"].to_numpy() > 0, 0, len(PALETTE)), codes)
    return np.where(owned & (blocks["ref_cnt"].to_numpy() > 1), 2, codes)


def block_maps(snapshots: dict[str, pd.DataFrame], block_size: int, time_s: float | None = None,
               width: int = BLOCK_MAP_WIDTH, max_blocks: int = MAX_BLOCKS_DRAWN) -> go.Figure:
    """Every physical KV block as a cell, `width` per row, coloured by its owner; one panel per run.

    snapshots: run name -> BlockSnapshot.to_frame(). At most `max_blocks` blocks per run are drawn."""
    scale, n_codes = _block_colorscale()
    names = list(snapshots)
    rows_per_map = [max(1, -(-min(len(f), max_blocks) // width)) for f in snapshots.values()]
    fig = make_subplots(rows=len(names), cols=1, vertical_spacing=0.08 if len(names) > 1 else 0,
                        subplot_titles=[f"{n} ({len(f)} blocks" + (f", first {max_blocks} drawn)" if len(f) > max_blocks else ")")
                                        for n, f in snapshots.items()],
                        row_heights=rows_per_map)
    for row, (run, frame) in enumerate(snapshots.items(), 1):
        f = frame.iloc[:max_blocks]
        cells = rows_per_map[row - 1] * width
        pad = cells - len(f)
        z = np.concatenate([block_codes(f).astype(float), np.full(pad, np.nan)]).reshape(-1, width)
        text = np.concatenate([_hover(f, block_size), np.full(pad, "")]).reshape(-1, width)
        fig.add_trace(go.Heatmap(z=z, text=text, hoverinfo="text", colorscale=scale, zmin=-0.5, zmax=n_codes - 0.5,
                                 showscale=False, xgap=1, ygap=1, name=f"blocks: {run}"), row=row, col=1)
        fig.update_yaxes(autorange="reversed", showticklabels=False, ticks="", showgrid=False, zeroline=False,
                         row=row, col=1)
        fig.update_xaxes(showticklabels=False, ticks="", showgrid=False, zeroline=False, row=row, col=1)
    for label, color in BLOCK_LEGEND.items():
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=label,
                                 marker=dict(symbol="square", size=12, color=color, line=dict(width=1, color="#999"))))
    when = "" if time_s is None else f" at t = {time_s:.1f} s"
    _header(fig, f"Physical KV blocks{when} ({width} per row)",
            140 + sum(max(r, 4) * 14 for r in rows_per_map) + 40 * len(names))
    fig.update_layout(plot_bgcolor="white", margin=dict(l=20, r=20, b=20))
    return fig


def _hover(f: pd.DataFrame, block_size: int) -> np.ndarray:
    rid = f["request_id"].astype(str).to_numpy(dtype=object)
    owner = np.where(rid == "", np.where(f["cached"].to_numpy(), "free, cached prefix", "free"), "request " + rid)
    fill = np.where(rid == "", "", "<br>" + _strings(f["fill"]) + f"/{block_size} slots hold tokens")
    shared = np.where(f["ref_cnt"].to_numpy() > 1, "<br>shared by " + _strings(f["ref_cnt"]) + " requests", "")
    return ("block " + _strings(f["block_id"]) + "<br>" + owner + fill + shared).astype(object)


def _strings(values: pd.Series) -> np.ndarray:
    return values.astype(str).to_numpy(dtype=object)


# ---- latencies -----------------------------------------------------------------------------------------
def ecdf(values, max_points: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, cumulative fraction), thinned to at most max_points (the extremes kept)."""
    v = np.sort(pd.Series(values, dtype="float64").dropna().to_numpy())
    if not len(v):
        return v, v
    p = np.arange(1, len(v) + 1) / len(v)
    if len(v) > max_points:
        keep = np.unique(np.linspace(0, len(v) - 1, max_points).round().astype(int))
        v, p = v[keep], p[keep]
    return v, p


def latency_cdfs(requests_by_run: dict[str, pd.DataFrame]) -> go.Figure:
    """CDFs of TTFT, TPOT and E2E of the finished requests, one line per run (log-scale seconds)."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"{label} (s)" for label in LATENCIES.values()])
    for i, (run, req) in enumerate(requests_by_run.items()):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        finished = req[req["state"] == "finished"] if "state" in req else req
        for col, (metric, label) in enumerate(LATENCIES.items(), 1):
            x, y = ecdf(finished[metric])
            fig.add_trace(go.Scatter(x=x, y=y, name=run, legendgroup=run, showlegend=col == 1, mode="lines",
                                     line=dict(color=color, shape="hv"),
                                     hovertemplate=f"{run}<br>{label} %{{x:.4g}} s<br>%{{y:.1%}} of requests<extra></extra>"),
                          row=1, col=col)
            fig.update_xaxes(type="log", title_text="seconds", row=1, col=col)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    _header(fig, "Latency CDFs (finished requests)", 400)
    return fig


# ---- sweep ---------------------------------------------------------------------------------------------
SWEEP_PANELS = {
    "token_state_fraction": "token-state fraction (used / allocated)",
    "output_token_throughput": "output throughput (tok/s)",
    "ttft_p50_s": "TTFT p50 (s)",
    "e2e_p50_s": "E2E p50 (s)",
}


def sweep_lines(results: pd.DataFrame, x: str, series: list[str] | tuple = ()) -> go.Figure:
    """Sweep results against the swept parameter `x`: one line per combination of the `series` columns."""
    fig = make_subplots(rows=2, cols=2, subplot_titles=list(SWEEP_PANELS.values()), horizontal_spacing=0.1,
                        vertical_spacing=0.2)
    groups = results.groupby(list(series), sort=False) if series else [((), results)]
    for i, (key, g) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        name = ", ".join(f"{s}={v}" for s, v in zip(series, key)) or "paged"
        color = RUN_COLORS[i % len(RUN_COLORS)]
        g = g.sort_values(x)
        for j, (metric, label) in enumerate(SWEEP_PANELS.items()):
            fig.add_trace(go.Scatter(x=g[x], y=g[metric], name=name, legendgroup=name, showlegend=j == 0,
                                     mode="lines+markers", line=dict(color=color),
                                     hovertemplate=f"{name}<br>{x}=%{{x}}<br>{label}: %{{y:.4g}}<extra></extra>"),
                          row=j // 2 + 1, col=j % 2 + 1)
    log_x = x == "block_size" or (pd.api.types.is_numeric_dtype(results[x]) and results[x].min() > 0
                                  and results[x].max() / results[x].min() >= 16)
    for r in (1, 2):
        for c in (1, 2):
            fig.update_xaxes(title_text=x, row=r, col=c, **(dict(type="log", tickvals=sorted(results[x].unique()))
                                                               if log_x else {}))
    _header(fig, f"Sweep over {x}", 680)
    return fig


# ---- live vs simulated ---------------------------------------------------------------------------------
def step_time_scatter(validation_steps: pd.DataFrame, max_points: int = 20000) -> go.Figure:
    """Measured (x) vs predicted (y) step durations in ms, with the y = x line."""
    v = validation_steps
    if len(v) > max_points:
        v = v.iloc[np.linspace(0, len(v) - 1, max_points).round().astype(int)]
    ms_measured, ms_predicted = v["measured_s"] * 1e3, v["predicted_s"] * 1e3
    top = float(max(ms_measured.max(), ms_predicted.max(), 1e-3)) if len(v) else 1.0
    fig = go.Figure([
        go.Scattergl(x=ms_measured, y=ms_predicted, mode="markers", name="steps", marker=dict(size=4, opacity=0.5),
                     customdata=v["step"], hovertemplate="step %{customdata}<br>measured %{x:.3f} ms<br>"
                                                         "predicted %{y:.3f} ms<extra></extra>"),
        go.Scatter(x=[0, top], y=[0, top], mode="lines", name="y = x", line=dict(color="#555", dash="dash")),
    ])
    fig.update_layout(title="Step duration: measured on the GPU vs predicted by the cost model", height=420,
                      xaxis_title="measured (ms)", yaxis_title="predicted (ms)", margin=dict(t=60, b=40, l=60, r=20))
    return fig


def step_error_histogram(validation_steps: pd.DataFrame) -> go.Figure:
    """Histogram of the signed relative error of predicted step durations, in %."""
    v = validation_steps[validation_steps["measured_s"] > 0]
    err = (v["predicted_s"] - v["measured_s"]) / v["measured_s"] * 100
    fig = go.Figure(go.Histogram(x=err, nbinsx=60, name="steps", marker_color="#4c78a8"))
    fig.add_vline(x=0, line=dict(color="#555", dash="dash"))
    fig.update_layout(title="Step duration error (predicted − measured) / measured", xaxis_title="%",
                      yaxis_title="steps", height=420, margin=dict(t=60, b=40, l=60, r=20))
    return fig


def live_vs_sim_over_time(live_steps: pd.DataFrame, sim_steps: pd.DataFrame, max_points: int = MAX_POINTS) -> go.Figure:
    """KV-cache usage and running requests over time, live and simulated overlaid."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=["KV-cache usage (% of blocks)", "running requests"])
    for name, steps, color in (("live", live_steps, RUN_COLORS[0]), ("simulated", sim_steps, RUN_COLORS[1])):
        b = time_buckets(steps, ["kv_cache_usage", "num_running"], max_points)
        fig.add_trace(go.Scatter(x=b["time_s"], y=b["kv_cache_usage"] * 100, name=name, legendgroup=name,
                                 mode="lines", line=dict(color=color)), row=1, col=1)
        fig.add_trace(go.Scatter(x=b["time_s"], y=b["num_running"], name=name, legendgroup=name, showlegend=False,
                                 mode="lines", line=dict(color=color)), row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    _header(fig, "Live vs simulated over time", 540)
    return fig


def request_latency_scatter(live: pd.DataFrame, sim: pd.DataFrame, metric: str = "e2e_s") -> go.Figure:
    """Per request: live (x) vs simulated (y) latency, joined on request_id, with the y = x line."""
    j = live[["request_id", metric]].merge(sim[["request_id", metric]], on="request_id", suffixes=("_live", "_sim"))
    j = j.dropna()
    top = float(j[[f"{metric}_live", f"{metric}_sim"]].max().max()) if len(j) else 1.0
    label = LATENCIES.get(metric, metric)
    fig = go.Figure([
        go.Scattergl(x=j[f"{metric}_live"], y=j[f"{metric}_sim"], mode="markers", name="requests",
                     marker=dict(size=5, opacity=0.6), customdata=j["request_id"],
                     hovertemplate="request %{customdata}<br>live %{x:.4g} s<br>simulated %{y:.4g} s<extra></extra>"),
        go.Scatter(x=[0, top], y=[0, top], mode="lines", name="y = x", line=dict(color="#555", dash="dash")),
    ])
    fig.update_layout(title=f"{label} per request: live vs simulated", xaxis_title="live (s)",
                      yaxis_title="simulated (s)", height=420, margin=dict(t=60, b=40, l=60, r=20))
    return fig


# ---- kernels -------------------------------------------------------------------------------------------
KERNEL_METHODS = {  # the methods the charts show, in order; per-backend variants stay in the table
    "ours": "paged (ours)",
    "ours_best": "paged (ours, tuned config)",
    "flashinfer": "FlashInfer paged",
    "gather_sdpa": "gather + SDPA (naive paged)",
    "sdpa": "SDPA on contiguous K/V (ceiling)",
}


def _primary(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    mode = "graph" if "mode" in frame and (frame["mode"] == "graph").any() else "eager"
    rows = frame[frame["mode"] == mode] if "mode" in frame else frame
    return rows[rows["method"].isin(KERNEL_METHODS)], mode


def decode_bandwidth_bars(decode: pd.DataFrame, copy_tb_per_s: float | None = None) -> go.Figure:
    """Grouped bars of achieved K/V read bandwidth (TB/s) per decode shape and method, CUDA-graph
    times when the results have them.

    decode: kernel_results.decode_frame(...) (shape, method, mode, tb_per_s)."""
    rows, mode = _primary(decode)
    fig = go.Figure()
    shapes = list(dict.fromkeys(decode["shape"]))
    for m in (m for m in KERNEL_METHODS if m in set(rows["method"])):
        d = rows[rows["method"] == m].set_index("shape").reindex(shapes)
        fig.add_trace(go.Bar(x=shapes, y=d["tb_per_s"], name=KERNEL_METHODS[m],
                             marker_color=RUN_COLORS[list(KERNEL_METHODS).index(m)],
                             hovertemplate=f"{KERNEL_METHODS[m]}<br>%{{x}}<br>%{{y:.2f}} TB/s<extra></extra>"))
    if copy_tb_per_s:
        fig.add_hline(y=copy_tb_per_s, line=dict(color="#555", dash="dash"),
                      annotation_text=f"device-to-device copy {copy_tb_per_s:.2f} TB/s", annotation_position="top left")
    fig.update_layout(barmode="group", title=f"Decode attention: K/V bytes read per second ({mode} timings)",
                      yaxis_title="TB/s", xaxis_title="batch × context", height=460,
                      margin=dict(t=60, b=40, l=60, r=20))
    return fig


def prefill_flops_bars(prefill: pd.DataFrame, matmul_tflop_per_s: float | None = None) -> go.Figure:
    """Bars of causal prefill attention TFLOP/s per method (kernel_results.prefill_frame)."""
    rows, mode = _primary(prefill)
    order = [m for m in KERNEL_METHODS if m in set(rows["method"])]
    p = rows.set_index("method").reindex(order)
    fig = go.Figure(go.Bar(x=[KERNEL_METHODS[m] for m in order], y=p["tflop_per_s"], name="prefill",
                           marker_color=[RUN_COLORS[list(KERNEL_METHODS).index(m)] for m in order],
                           hovertemplate="%{x}<br>%{y:.0f} TFLOP/s<extra></extra>"))
    if matmul_tflop_per_s:
        fig.add_hline(y=matmul_tflop_per_s, line=dict(color="#555", dash="dash"),
                      annotation_text=f"bf16 matmul {matmul_tflop_per_s:.0f} TFLOP/s", annotation_position="top left")
    tokens = int(prefill["tokens"].iloc[0]) if "tokens" in prefill and len(prefill) else None
    fig.update_layout(title=f"Prefill attention{f' ({tokens} tokens, causal)' if tokens else ''}: TFLOP/s ({mode} timings)",
                      yaxis_title="TFLOP/s", height=420, margin=dict(t=60, b=40, l=60, r=20))
    return fig
