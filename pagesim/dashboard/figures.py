"""Figure builders: DataFrames in, plotly Figures out; no Streamlit, no simulation.

Memory words follow pagesim/accounting.py (and the README): every KV slot is used, reserved, internal
fragmentation, external fragmentation, cached or free. Long step tables are
reduced to at most `max_points` time buckets for drawing (duration-weighted
means, so a bucket shows the memory state averaged over the time it covers).
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pagesim.dashboard.palette import MORE_RUNS, PREEMPTION, QUEUES, STATES, WAITING_FREE, run_color
from pagesim.specs import GIB
from pagesim.results import with_memory_fractions

MAX_POINTS = 1000  # about one point per pixel of a wide chart

# Drawing order of the stacked memory area, bottom to top, with labels and colours (palette.STATES).
MEMORY_LAYERS = STATES
LATENCIES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}


# ---- step tables over time -------------------------------------------------------------------------
def time_buckets(steps: pd.DataFrame, columns, max_points: int = MAX_POINTS, sums=()) -> pd.DataFrame:
    """Steps reduced to at most max_points equal time buckets: `columns` as duration-weighted means,
    `sums` as sums, `time_s` as the bucket's first step time. Short tables come back unchanged but for the gaps: where
    the engine sat idle longer than a bucket's time (gaps), a row of NaN at the idle period's start and one at its
    end (before the next step's row), so a line drawn through the table breaks there (plotly's connectgaps is off)
    and a stacked area drops to nothing for the gap (its NaN count as 0), rather than join the steps on either side."""
    columns, sums = list(columns), list(sums)
    out = _buckets(steps, columns, max_points, sums)
    starts, ends = gaps(steps, max_points)
    if not len(starts):
        return out
    breaks = pd.DataFrame({"time_s": np.concatenate([starts, ends]), **{c: np.nan for c in [*columns, *sums]}})
    # at one instant: a gap's end before the step that ends it, a gap's start after the step it follows
    order = np.concatenate([np.ones(len(out)), np.full(len(starts), 2.0), np.zeros(len(ends))])
    both = pd.concat([out, breaks], ignore_index=True)
    return both.iloc[np.lexsort((order, both["time_s"].to_numpy()))].reset_index(drop=True)


def gaps(steps: pd.DataFrame, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the step table's idle periods longer than its span / max_points (a bucket's time: about a
    pixel of a wide chart): from a step's end to the next step's start, times with no step to draw."""
    if len(steps) < 2 or "duration_s" not in steps:
        return np.empty(0), np.empty(0)
    t = steps["time_s"].to_numpy(dtype="float64")
    end = t + steps["duration_s"].to_numpy(dtype="float64")
    idle = t[1:] - end[:-1] > (end[-1] - t[0]) / max_points
    return end[:-1][idle], t[1:][idle]


def _buckets(steps: pd.DataFrame, columns: list, max_points: int, sums: list) -> pd.DataFrame:
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


# A chart title's lines: plotly draws a title on one line, cut off at the chart's edge, so a title is wrapped here at
# TITLE_CHARS characters (plotly's 17-px title font, ~7.3 px each: ~265 px, within the chart of a 320-px-wide phone,
# where a title of 60 characters lost its last third) and starts at the chart's left edge; each further line takes
# TITLE_LINE_PX more of the top margin.
TITLE_CHARS = 36
TITLE_LINE_PX = 22


def wrap_title(text: str) -> str:
    """`text`'s first line (up to a <br>: a header's <sup> lines are its own) wrapped at TITLE_CHARS on spaces."""
    head, sep, rest = text.partition("<br>")
    return "<br>".join(textwrap.wrap(head, TITLE_CHARS, break_long_words=False, break_on_hyphens=False) or [head]) + sep + rest


def titled(fig: go.Figure, text: str, top: int = 60) -> int:
    """The figure's title (wrap_title), at the top left of the chart, and `top` px of margin above the plot plus a
    line's for each line the wrapping added; returns those added px."""
    wrapped = wrap_title(text)
    extra = TITLE_LINE_PX * (wrapped.count("<br>") - text.count("<br>"))
    fig.update_layout(margin_t=top + extra,
                      title=dict(text=wrapped, x=0.0, xanchor="left", xref="container", y=1.0, yanchor="top",
                                 yref="container", pad=dict(t=12 + extra // 2, l=8)))  # (plotly sets a title of
    # k lines anchored at its top k/2 lines too high: its first line was cut at the chart's top edge)
    return extra


def header(fig: go.Figure, title: str, height: int, top: int = 100) -> go.Figure:
    """Title at the top left (titled: wrapped to fit a phone's width), the legend on the line below it, then the
    subplots (whose titles need the rest of the `top` margin)."""
    fig.update_layout(margin=dict(b=40, l=60, r=20))
    extra = titled(fig, title, top)
    height += extra
    fig.update_layout(height=height, legend=dict(orientation="h", x=0.0, xanchor="left", y=1.0 - (40 + extra) / height,
                                                 yanchor="top", yref="container"))
    return fig


def _panels(names, title: str, row_height: int = 220, shared_time: bool = True) -> go.Figure:
    """One row per run. shared_time=False gives each run its own time axis, so a baseline that drains
    for minutes does not squeeze a run that finished early into a sliver of the width."""
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=shared_time,
                        vertical_spacing=_spacing(len(names), shared_time), subplot_titles=list(names))
    header(fig, title, 110 + row_height * len(names))
    for row in range(1, len(names) + 1):
        if row == len(names) or not shared_time:
            fig.update_xaxes(title_text="time (s)", row=row, col=1)
    return fig


def _spacing(rows: int, shared_time: bool) -> float:
    """Room between panels: with a time axis under each panel, its title needs about 75 px."""
    if rows < 2:
        return 0
    return 0.06 if shared_time else min(90 / (220 * rows), 0.3)


def mark_time(fig: go.Figure, row: int, time_s: float | None, end_s: float) -> None:
    """A vertical line at the block map's time in one run's panel (none past the run's end, so the
    marker never stretches the run's own time axis)."""
    if time_s is not None and time_s <= end_s:
        fig.add_vline(x=time_s, line=dict(color="#212121", width=1, dash="dot"), row=row, col=1)


def waiting_free(steps: pd.DataFrame) -> np.ndarray:
    """The free fraction of the cache at steps where requests wait (0 elsewhere): memory left idle
    because the next admission does not fit in it together with the watermark kept free."""
    free = with_memory_fractions(steps)["free_frac"].to_numpy(dtype="float64")
    return np.where(steps["num_waiting"].to_numpy() > 0, free, 0.0)


def memory_over_time(steps_by_run: dict[str, pd.DataFrame], max_points: int = MAX_POINTS, *,
                     time_s: float | None = None, shared_time: bool = True,
                     watermark: float | None = None) -> go.Figure:
    """One stacked-area panel per run: each memory category as % of the KV cache. Free memory while
    requests wait is drawn apart ("free while requests wait"); `watermark` (a fraction of the cache)
    is drawn as a line; `time_s` as a dotted marker."""
    fig = _panels(steps_by_run, "KV-cache memory over time (% of slots)", shared_time=shared_time)
    layers = {**{c: v for c, v in MEMORY_LAYERS.items() if c != "free"},
              "waiting_free": ("free while requests wait", WAITING_FREE), "free": MEMORY_LAYERS["free"]}
    for row, (run, steps) in enumerate(steps_by_run.items(), 1):
        steps = with_memory_fractions(steps)
        steps = steps.assign(waiting_free_frac=waiting_free(steps))
        steps = steps.assign(free_frac=steps["free_frac"] - steps["waiting_free_frac"])
        b = time_buckets(steps, [f"{c}_frac" for c in layers], max_points)
        for c, (label, color) in layers.items():
            fig.add_trace(
                go.Scatter(x=b["time_s"], y=b[f"{c}_frac"] * 100, name=label, legendgroup=label, showlegend=row == 1,
                           stackgroup=f"memory-{row}", mode="lines", line=dict(width=0, color=color),
                           fillcolor=color, hovertemplate=f"{run}<br>{label}: %{{y:.1f}}%<br>t=%{{x:.2f}} s<extra></extra>"),
                row=row, col=1)
        fig.update_yaxes(range=[0, 100], title_text="% of KV slots", row=row, col=1)
        if watermark:
            fig.add_hline(y=100 - watermark * 100, line=dict(color="#616161", width=1, dash="dash"), row=row, col=1,
                          annotation_text=f"watermark: {watermark:.0%} kept free at admission" if row == 1 else None,
                          annotation_position="bottom left", annotation_font_size=10)
        mark_time(fig, row, time_s, end_time(steps))
    return fig


def end_time(steps: pd.DataFrame) -> float:
    """When the run's last step ends (0 with no steps)."""
    if not len(steps):
        return 0.0
    return float(steps["time_s"].iloc[-1] + steps["duration_s"].iloc[-1])


def requests_over_time(steps_by_run: dict[str, pd.DataFrame], max_points: int = MAX_POINTS, *,
                       time_s: float | None = None, shared_time: bool = True) -> go.Figure:
    """Running, waiting and swapped requests per run, and the cumulative count of preemptions on a
    right-hand axis (its total in the panel title)."""
    titles = [f"{run}: {int(steps['num_preemptions'].sum()):,} preemptions" for run, steps in steps_by_run.items()]
    fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=shared_time, subplot_titles=titles,
                        vertical_spacing=_spacing(len(titles), shared_time),
                        specs=[[{"secondary_y": True}]] * len(titles))
    header(fig, "Requests over time", 110 + 220 * len(titles))
    for row, (run, steps) in enumerate(steps_by_run.items(), 1):
        steps = steps.assign(preemptions_total=steps["num_preemptions"].cumsum())
        b = time_buckets(steps, list(QUEUES), max_points, sums=["num_preemptions"])
        for c, (label, color, dash) in QUEUES.items():
            fig.add_trace(go.Scatter(x=b["time_s"], y=b[c], name=label, legendgroup=label, showlegend=row == 1,
                                     mode="lines", line=dict(color=color, width=1.5, dash=dash)), row=row, col=1)
        fig.add_trace(go.Scatter(x=b["time_s"], y=b["num_preemptions"].cumsum(), name="preemptions (cumulative)",
                                 legendgroup="preemptions", showlegend=row == 1, mode="lines",
                                 line=dict(color=PREEMPTION, width=1, shape="hv"), opacity=0.45,
                                 hovertemplate="%{y:,} preemptions by t=%{x:.2f} s<extra></extra>"),
                      row=row, col=1, secondary_y=True)
        fig.update_yaxes(title_text="requests", rangemode="tozero", row=row, col=1, secondary_y=False)
        total = int(steps["num_preemptions"].sum())
        fig.update_yaxes(title_text="preemptions", range=[0, max(total, 1) * 1.05], tickformat=",d",
                         dtick=max(1, -(-total // 4)), showgrid=False,
                         row=row, col=1, secondary_y=True)
        if row == len(titles) or not shared_time:
            fig.update_xaxes(title_text="time (s)", row=row, col=1)
        mark_time(fig, row, time_s, end_time(steps))
    return fig


def swap_over_time(steps_by_run: dict[str, pd.DataFrame], block_bytes: int, swap_space_gib: float,
                   max_points: int = MAX_POINTS, *, time_s: float | None = None) -> go.Figure:
    """CPU swap space in use (GiB) per run: blocks swapped out minus blocks swapped back in."""
    fig = go.Figure()
    for i, (run, steps) in enumerate(steps_by_run.items()):
        held = (steps["num_swap_out_blocks"] - steps["num_swap_in_blocks"]).cumsum() * block_bytes / GIB
        b = time_buckets(steps.assign(swap_gib=held), ["swap_gib"], max_points)
        fig.add_trace(go.Scatter(x=b["time_s"], y=b["swap_gib"], name=run, mode="lines",
                                 line=dict(color=run_color(run, i), shape="hv"),
                                 hovertemplate=f"{run}<br>%{{y:.2f}} GiB at t=%{{x:.2f}} s<extra></extra>"))
    fig.add_hline(y=swap_space_gib, line=dict(color="#616161", dash="dash"),
                  annotation_text=f"swap_space {swap_space_gib:g} GiB", annotation_position="top left")
    if time_s is not None:
        fig.add_vline(x=time_s, line=dict(color="#212121", width=1, dash="dot"))
    fig.update_layout(xaxis_title="time (s)", yaxis_title="GiB", height=300, margin=dict(b=40, l=60, r=20),
                      yaxis_rangemode="tozero")
    fig.update_layout(height=300 + titled(fig, "CPU swap space in use (preemption_mode swap)"))
    return fig


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


def duration_label(seconds: float) -> str:
    """A duration for a person: ms below a second ("7 ms", "0.38 ms"), else seconds ("84.9 s")."""
    if seconds is None or not np.isfinite(seconds):
        return "–"
    if seconds < 1:
        ms = seconds * 1e3
        return f"{ms:.2g} ms" if ms < 10 else f"{ms:.0f} ms"
    if abs(seconds - round(seconds)) < 1e-9:
        return f"{seconds:,.0f} s"  # axis ticks: 1 s, 10 s
    return f"{seconds:,.1f} s"


def time_label(seconds: float, step: float | None = None) -> str:
    """An instant on a run's clock, "62.4 s": to the tenth of a second, or finer where instants `step` apart would
    read the same (the time slider over a trace whose arrivals span less than a few seconds: "0.0013 s" and
    "0.0026 s", not "0.0 s" twice); without `step`, fine enough to show two digits of a time under 0.1 s."""
    import math

    if step is not None:
        decimals = 1 if not 0 < step < 0.1 else math.floor(-math.log10(step)) + 1
    else:
        decimals = 1 if not 0 < abs(seconds) < 0.1 else math.floor(-math.log10(abs(seconds))) + 2
    return f"{seconds:.{min(decimals, 9)}f} s"


DECADES = [10.0 ** k for k in range(-6, 5)]


def log_time_axis(fig: go.Figure, values, *, row=None, col=None, axis: str = "x") -> None:
    """A log axis of durations in seconds labelled once per decade in ms or s (1 ms, 10 ms, ..., 1 s, 10 s)."""
    v = pd.Series(np.asarray(values, dtype="float64").ravel()).dropna()
    v = v[v > 0]
    lo, hi = (float(v.min()), float(v.max())) if len(v) else (1e-3, 1.0)
    ticks = [d for d in DECADES if lo / 10 < d <= hi * 10] or [1e-3, 1.0]
    if hi / lo < 300:  # two decades or less: label 2x and 5x too
        ticks = sorted(t * m for t in ticks for m in (1, 2, 5) if lo / 2 <= t * m <= hi * 2)
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    narrow = {"range": [np.log10(ticks[0]), np.log10(ticks[-1])]} if hi / lo < 10 and len(ticks) > 1 else {}
    update(type="log", tickvals=ticks, ticktext=[duration_label(t) for t in ticks], row=row, col=col, **narrow)


ENSEMBLE_PERCENTILES = (50, 90, 99)


def latency_cdfs(requests_by_run: dict[str, pd.DataFrame], ensemble: dict | None = None) -> go.Figure:
    """CDFs of TTFT, TPOT and E2E of the finished requests, one line per run (log time axes labelled in
    ms and s). `ensemble`: validation.json's request_level_ensemble metrics; each of its p50 / p90 / p99 is drawn
    at its level as the ensemble's median with its band as a horizontal bar, so a CDF that crosses the level inside
    the bar lies in the band."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(LATENCIES.values()), horizontal_spacing=0.06)
    for i, (run, req) in enumerate(requests_by_run.items()):
        color = run_color(run, i)
        finished = req[req["state"] == "finished"] if "state" in req else req
        for col, (metric, label) in enumerate(LATENCIES.items(), 1):
            x, y = ecdf(finished[metric])
            fig.add_trace(go.Scatter(x=x, y=y, name=run, legendgroup=run, showlegend=col == 1, mode="lines",
                                     line=dict(color=color, shape="hv"),
                                     customdata=[duration_label(v) for v in x],
                                     hovertemplate=f"{run}<br>{label} %{{customdata}}<br>%{{y:.1%}} of requests<extra></extra>"),
                          row=1, col=col)
    shown = False
    for col, metric in enumerate(LATENCIES, 1):
        points = [(p, (ensemble or {}).get(f"{metric}_p{p}") or {}) for p in ENSEMBLE_PERCENTILES]
        points = [(p, e) for p, e in points if e.get("median") is not None]
        if not points:
            continue
        fig.add_trace(go.Scatter(
            x=[e["median"] for _, e in points], y=[p / 100 for p, _ in points], mode="markers",
            name="ensemble median, p5-p95 band", legendgroup="ensemble", showlegend=not shown,
            marker=dict(color="black", symbol="diamond", size=7),
            error_x=dict(type="data", symmetric=False, array=[e["high"] - e["median"] for _, e in points],
                         arrayminus=[e["median"] - e["low"] for _, e in points], color="black", thickness=1.5),
            customdata=[[f"p{p}", duration_label(e["median"]), duration_label(e["low"]), duration_label(e["high"])]
                        for p, e in points],
            hovertemplate="ensemble %{customdata[0]}: %{customdata[1]} (band %{customdata[2]} - %{customdata[3]})"
                          "<extra></extra>"), row=1, col=col)
        shown = True
    for col, metric in enumerate(LATENCIES, 1):
        values = pd.concat([r[metric] for r in requests_by_run.values()]) if requests_by_run else []
        log_time_axis(fig, values, row=1, col=col)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    header(fig, "Latency CDFs (finished requests)" + (": the ensemble's percentiles as bands" if shown else ""), 400)
    return fig


# ---- sweep ---------------------------------------------------------------------------------------------
SWEEP_PANELS = {
    "token_state_fraction": "token-state fraction (used / allocated)",
    "output_token_throughput": "output throughput (tok/s)",
    "ttft_p50_s": "TTFT p50",
    "e2e_p50_s": "E2E p50",
}
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "cross"]


def sweep_lines(results: pd.DataFrame, x: str, series: list[str] | tuple = ()) -> go.Figure:
    """Sweep results against the swept parameter `x`: one line per combination of the `series` columns,
    coloured by layout (a run's colour) and dashed by the other settings; latencies on log axes."""
    fig = make_subplots(rows=2, cols=2, subplot_titles=list(SWEEP_PANELS.values()), horizontal_spacing=0.1,
                        vertical_spacing=0.2)
    series = list(series)
    # One line per combination of the series' values, a missing value one of them (None): a parameter only some points
    # have (the swap points' swap_space) leaves the others' rows empty (dropna=False keeps them as a group of their own).
    groups = [(tuple(None if pd.isna(v) else v for v in (key if isinstance(key, tuple) else (key,))), g)
              for key, g in (results.groupby(series, sort=False, dropna=False) if series else [((), results)])]
    keys = [key for key, _ in groups]
    colored = "layout" if "layout" in series else (series[0] if series else None)
    color_values = list(dict.fromkeys(key[series.index(colored)] for key in keys)) if colored else []
    styled = [s for s in series if s != colored]
    style_values = list(dict.fromkeys(tuple(key[series.index(s)] for s in styled) for key in keys)) if styled else [()]
    for key, g in groups:
        params = dict(zip(series, key))
        layouts = g["layout"].unique() if "layout" in g else ["paged"]
        name = (", ".join(str(v) if s == "layout" else f"{s}={v}" for s, v in params.items() if v is not None)
                or (str(layouts[0]) if len(layouts) == 1 else "every configuration"))  # one line through them all
        ci = color_values.index(params[colored]) if colored else 0
        color = run_color(str(params[colored]), ci) if colored == "layout" else run_color("", ci)
        si = style_values.index(tuple(params[s] for s in styled)) if styled else 0
        g = g.sort_values(x)
        for j, (metric, label) in enumerate(SWEEP_PANELS.items()):
            # a configuration that rejected every request has no figure (None): "–", not a format error
            values = ([duration_label(v) for v in g[metric]] if metric.endswith("_s") else
                      [f"{v:.4g}" if pd.notna(v) else "–" for v in g[metric]])
            fig.add_trace(go.Scatter(x=g[x], y=g[metric], name=name, legendgroup=name, showlegend=j == 0,
                                     mode="lines+markers", customdata=values,
                                     line=dict(color=color, dash=DASHES[si % len(DASHES)]),
                                     marker=dict(symbol=SYMBOLS[si % len(SYMBOLS)]),
                                     hovertemplate=f"{name}<br>{x}=%{{x}}<br>{label}: %{{customdata}}<extra></extra>"),
                          row=j // 2 + 1, col=j % 2 + 1)
    log_x = x == "block_size" or (pd.api.types.is_numeric_dtype(results[x]) and results[x].min() > 0
                                  and results[x].max() / results[x].min() >= 16)
    for r in (1, 2):
        for c in (1, 2):
            fig.update_xaxes(title_text=x, row=r, col=c, **(dict(type="log", tickvals=sorted(results[x].unique()))
                                                               if log_x else {}))
    log_time_axis(fig, results["ttft_p50_s"], row=2, col=1, axis="y")
    log_time_axis(fig, results["e2e_p50_s"], row=2, col=2, axis="y")
    header(fig, f"Sweep over {x}", 700, top=110)
    fig.update_layout(legend=dict(font=dict(size=11)))
    return fig


# ---- live vs simulated ---------------------------------------------------------------------------------
def step_time_scatter(validation_steps: pd.DataFrame, max_points: int = 20000) -> go.Figure:
    """Measured (x) vs predicted (y) step durations on log axes (ms and s), with the y = x line."""
    v = validation_steps
    if len(v) > max_points:
        v = v.iloc[np.linspace(0, len(v) - 1, max_points).round().astype(int)]
    v = v[(v["measured_s"] > 0) & (v["predicted_s"] > 0)]
    both = v[["measured_s", "predicted_s"]].to_numpy()
    lo, hi = (float(both.min()), float(both.max())) if len(v) else (1e-3, 1.0)
    fig = go.Figure([
        go.Scattergl(x=v["measured_s"], y=v["predicted_s"], mode="markers", name="steps",
                     marker=dict(size=4, opacity=0.5, color=run_color("simulated")), customdata=v["step"],
                     hovertemplate="step %{customdata}<br>measured %{x:.4g} s<br>predicted %{y:.4g} s<extra></extra>"),
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(color="#555", dash="dash")),
    ])
    log_time_axis(fig, both, axis="x")
    log_time_axis(fig, both, axis="y")
    fig.update_layout(xaxis_title="measured", yaxis_title="predicted", margin=dict(b=40, l=60, r=20))
    fig.update_layout(height=420 + titled(fig, "Step duration: measured on the GPU vs predicted by the cost model"))
    return fig


def step_error_histogram(validation_steps: pd.DataFrame) -> go.Figure:
    """Histogram of the signed relative error of predicted step durations, in %."""
    v = validation_steps[validation_steps["measured_s"] > 0]
    err = (v["predicted_s"] - v["measured_s"]) / v["measured_s"] * 100
    fig = go.Figure(go.Histogram(x=err, nbinsx=60, name="steps", marker_color="#4c78a8"))
    fig.add_vline(x=0, line=dict(color="#555", dash="dash"))
    fig.update_layout(xaxis_title="%", yaxis_title="steps", margin=dict(b=40, l=60, r=20))
    fig.update_layout(height=420 + titled(fig, "Step duration error (predicted − measured) / measured"))
    return fig


def live_vs_sim_over_time(live_steps: pd.DataFrame, sim_steps: pd.DataFrame, max_points: int = MAX_POINTS) -> go.Figure:
    """KV-cache usage and running requests over time, live and simulated overlaid."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=["KV-cache usage (% of blocks)", "running requests"])
    for name, steps in (("live", live_steps), ("simulated", sim_steps)):
        color = run_color(name)
        b = time_buckets(steps, ["kv_cache_usage", "num_running"], max_points)
        fig.add_trace(go.Scatter(x=b["time_s"], y=b["kv_cache_usage"] * 100, name=name, legendgroup=name,
                                 mode="lines", line=dict(color=color)), row=1, col=1)
        fig.add_trace(go.Scatter(x=b["time_s"], y=b["num_running"], name=name, legendgroup=name, showlegend=False,
                                 mode="lines", line=dict(color=color)), row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    header(fig, "Live vs simulated over time", 540)
    return fig


def request_latency_scatter(live: pd.DataFrame, sim: pd.DataFrame, metric: str = "e2e_s") -> go.Figure:
    """Per request: live (x) vs simulated (y) latency, joined on request_id, with the y = x line (log axes)."""
    j = live[["request_id", metric]].merge(sim[["request_id", metric]], on="request_id", suffixes=("_live", "_sim"))
    j = j.dropna()
    j = j[(j[f"{metric}_live"] > 0) & (j[f"{metric}_sim"] > 0)]
    both = j[[f"{metric}_live", f"{metric}_sim"]].to_numpy()
    lo, hi = (float(both.min()), float(both.max())) if len(j) else (1e-3, 1.0)
    label = LATENCIES.get(metric, metric)
    fig = go.Figure([
        go.Scattergl(x=j[f"{metric}_live"], y=j[f"{metric}_sim"], mode="markers", name="requests",
                     marker=dict(size=5, opacity=0.6, color=run_color("simulated")),
                     customdata=np.stack([j["request_id"].astype(str), [duration_label(v) for v in j[f"{metric}_live"]],
                                          [duration_label(v) for v in j[f"{metric}_sim"]]], axis=-1) if len(j) else None,
                     hovertemplate="request %{customdata[0]}<br>live %{customdata[1]}<br>simulated %{customdata[2]}"
                                   "<extra></extra>"),
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(color="#555", dash="dash")),
    ])
    log_time_axis(fig, both, axis="x")
    log_time_axis(fig, both, axis="y")
    fig.update_layout(xaxis_title="live", yaxis_title="simulated", margin=dict(b=40, l=60, r=20))
    fig.update_layout(height=420 + titled(fig, f"{label} per request: live vs simulated"))
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
                             marker_color=MORE_RUNS[list(KERNEL_METHODS).index(m)],
                             hovertemplate=f"{KERNEL_METHODS[m]}<br>%{{x}}<br>%{{y:.2f}} TB/s<extra></extra>"))
    if copy_tb_per_s:
        fig.add_hline(y=copy_tb_per_s, line=dict(color="#555", dash="dash"),
                      annotation_text=f"device-to-device copy {copy_tb_per_s:.2f} TB/s", annotation_position="top left")
    fig.update_layout(barmode="group", yaxis_title="TB/s", xaxis_title="batch × context", margin=dict(b=40, l=60, r=20))
    fig.update_layout(height=460 + titled(fig, f"Decode attention: K/V bytes read per second ({mode} timings)"))
    return fig


def prefill_flops_bars(prefill: pd.DataFrame, matmul_tflop_per_s: float | None = None) -> go.Figure:
    """Bars of causal prefill attention TFLOP/s per method (kernel_results.prefill_frame)."""
    rows, mode = _primary(prefill)
    order = [m for m in KERNEL_METHODS if m in set(rows["method"])]
    p = rows.set_index("method").reindex(order)
    fig = go.Figure(go.Bar(x=[KERNEL_METHODS[m] for m in order], y=p["tflop_per_s"], name="prefill",
                           marker_color=[MORE_RUNS[list(KERNEL_METHODS).index(m)] for m in order],
                           hovertemplate="%{x}<br>%{y:.0f} TFLOP/s<extra></extra>"))
    if matmul_tflop_per_s:
        fig.add_hline(y=matmul_tflop_per_s, line=dict(color="#555", dash="dash"),
                      annotation_text=f"bf16 matmul {matmul_tflop_per_s:.0f} TFLOP/s", annotation_position="top left")
    tokens = int(prefill["tokens"].iloc[0]) if "tokens" in prefill and len(prefill) else None
    fig.update_layout(yaxis_title="TFLOP/s", margin=dict(b=40, l=60, r=20))
    fig.update_layout(height=420 + titled(fig, f"Prefill attention{f' ({tokens} tokens, causal)' if tokens else ''}: "
                                               f"TFLOP/s ({mode} timings)"))
    return fig
