"""The serving view a vLLM user knows from its metrics: every run's KV-cache usage and queues on one
chart, latency histograms against the SLO thresholds typed on the page, and a per-request timeline.

Names follow vLLM's metrics (kv_cache_usage_perc, num_requests_running / waiting / swapped, TTFT,
TPOT, ITL). ITL here is per decode token from the step table: in continuous batching every running
request gets one token per step, so a step of duration d adds num_decode_seqs inter-token gaps of d
(the wait of a preempted request is not among them: its gap is in its E2E, not here).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pagesim.dashboard.figures import MAX_POINTS, header, duration_label, log_time_axis, time_buckets, titled
from pagesim.dashboard.palette import PREEMPTION, QUEUES, SLO, run_color
from pagesim.metrics import own_requests

SLO_METRICS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL"}
# Request phases in the timeline; a preemption is drawn over them in the palette's PREEMPTION (near black).
PHASES = {"queued": "#bdbdbd", "prefill": "#ffb300", "decode": "#5c6bc0"}


def kv_cache_usage(steps_by_run: dict[str, pd.DataFrame], max_points: int = MAX_POINTS, *,
                   time_s: float | None = None) -> go.Figure:
    """kv_cache_usage_perc of every run on one chart (blocks in use / all blocks)."""
    fig = go.Figure()
    for i, (run, steps) in enumerate(steps_by_run.items()):
        b = time_buckets(steps, ["kv_cache_usage"], max_points)
        fig.add_trace(go.Scatter(x=b["time_s"], y=b["kv_cache_usage"] * 100, name=run, mode="lines",
                                 line=dict(color=run_color(run, i), width=1.5),
                                 hovertemplate=f"{run}<br>%{{y:.1f}}% at t=%{{x:.2f}} s<extra></extra>"))
    if time_s is not None:
        fig.add_vline(x=time_s, line=dict(color="#212121", width=1, dash="dot"))
    fig.update_layout(xaxis_title="time (s)", yaxis_title="% of blocks", yaxis_range=[0, 101], margin=dict(b=40, l=60, r=20))
    fig.update_layout(height=320 + titled(fig, "KV-cache usage (kv_cache_usage_perc)"))
    return fig


def queues(steps_by_run: dict[str, pd.DataFrame], max_points: int = MAX_POINTS, *,
           time_s: float | None = None) -> go.Figure:
    """num_requests_running / waiting / swapped of every run on one chart: colour by run, dash by queue."""
    fig = go.Figure()
    for i, (run, steps) in enumerate(steps_by_run.items()):
        b = time_buckets(steps, list(QUEUES), max_points)
        for c, (label, _, dash) in QUEUES.items():
            if c == "num_swapped" and not b[c].any():
                continue
            fig.add_trace(go.Scatter(x=b["time_s"], y=b[c], name=f"{run}: {label}", mode="lines",
                                     line=dict(color=run_color(run, i), width=1.5, dash=dash)))
    if time_s is not None:
        fig.add_vline(x=time_s, line=dict(color="#212121", width=1, dash="dot"))
    fig.update_layout(xaxis_title="time (s)", yaxis_title="requests", margin=dict(b=40, l=60, r=20),
                      yaxis_rangemode="tozero")
    fig.update_layout(height=340 + titled(fig, "Requests running, waiting and swapped (num_requests_*)"))
    return fig


def itl_samples(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(step durations, how many decode tokens each produced): ITL samples as values with weights."""
    decode = steps[steps["num_decode_seqs"] > 0]
    return decode["duration_s"].to_numpy(dtype="float64"), decode["num_decode_seqs"].to_numpy(dtype="float64")


def latency_samples(requests: pd.DataFrame, steps: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    if metric == "itl_s":
        return itl_samples(steps)
    finished = requests[requests["state"] == "finished"]
    v = finished[metric].dropna().to_numpy(dtype="float64")
    return v, np.ones_like(v)


def attainment(requests: pd.DataFrame, steps: pd.DataFrame, slo: dict[str, float]) -> dict[str, float | None]:
    """Share of samples within each threshold (ITL: share of decode tokens); "all": the share of the trace's requests
    (a parallel-sampling request's own row, not its extra samples: as pagesim.slo.evaluate, so goodput agrees with
    `replay --slo`) that finished within both the TTFT and TPOT thresholds (rejected ones miss), and "num_met": their
    count."""
    out = {}
    for metric, limit in slo.items():
        v, w = latency_samples(requests, steps, metric)
        out[metric] = float(w[v <= limit].sum() / w.sum()) if w.sum() else None
    own = own_requests(requests)
    finished = own[own["state"] == "finished"]
    ok = np.ones(len(finished), dtype=bool)
    for metric in ("ttft_s", "tpot_s"):
        if metric in slo:
            ok &= finished[metric].fillna(0).to_numpy() <= slo[metric]
    out["all"] = float(ok.sum() / len(own)) if len(own) else None
    out["num_met"] = int(ok.sum())
    return out


def latency_histograms(requests_by_run: dict[str, pd.DataFrame], steps_by_run: dict[str, pd.DataFrame],
                       slo: dict[str, float], bins: int = 40) -> go.Figure:
    """TTFT, TPOT and ITL histograms per run on log-spaced bins, with each SLO threshold as a line and
    the share within it in the legend."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(SLO_METRICS.values()), horizontal_spacing=0.06)
    for col, (metric, label) in enumerate(SLO_METRICS.items(), 1):
        samples = {run: latency_samples(requests_by_run[run], steps_by_run[run], metric) for run in requests_by_run}
        values = np.concatenate([v for v, _ in samples.values()]) if samples else np.array([])
        values = values[values > 0]
        if not len(values):
            continue
        edges = np.geomspace(values.min() * 0.99, values.max() * 1.01, bins + 1)
        for i, (run, (v, w)) in enumerate(samples.items()):
            counts, _ = np.histogram(v, bins=edges, weights=w)
            share = counts / counts.sum() if counts.sum() else counts
            centers = np.sqrt(edges[:-1] * edges[1:])
            fig.add_trace(go.Scatter(x=centers, y=share * 100, name=run, legendgroup=run, showlegend=col == 1,
                                     mode="lines", line=dict(color=run_color(run, i), shape="hvh"),
                                     customdata=[f"{duration_label(a)}–{duration_label(b)}" for a, b in zip(edges[:-1], edges[1:])],
                                     hovertemplate=f"{run}<br>{label} %{{customdata}}<br>%{{y:.1f}}%<extra></extra>"),
                          row=1, col=col)
        log_time_axis(fig, np.append(values, slo.get(metric, values[0])), row=1, col=col)  # the SLO line in view
        if metric in slo:
            fig.add_vline(x=slo[metric], line=dict(color=SLO, width=2, dash="dash"), row=1, col=col,
                          annotation_text=f"SLO {duration_label(slo[metric])}", annotation_position="top right")
    fig.update_yaxes(title_text="% of samples", rangemode="tozero", row=1, col=1)
    header(fig, "Latency histograms (finished requests; ITL per decode token), SLOs dashed", 420)
    return fig


def preempted_intervals(requests: pd.DataFrame, labels) -> dict[bool, tuple[list, list, list]]:
    """{swapped out?: (label, start, end) lists}: each preemption of the requests, from the step that
    preempted it to the step that took it back (requests.parquet's preempted_at, resumed_at, swapped_out)."""
    out = {False: ([], [], []), True: ([], [], [])}
    if "preempted_at" not in requests:
        return out
    for label, pre, res, swp in zip(labels, requests["preempted_at"], requests["resumed_at"], requests["swapped_out"]):
        if pre is None or (isinstance(pre, float) and pre != pre):
            continue
        for k, start in enumerate(pre):
            end = res[k] if k < len(res) else np.nan
            lists = out[bool(swp[k])]
            lists[0].append(label)
            lists[1].append(float(start))
            lists[2].append(float(end))
    return out


def gantt(requests: pd.DataFrame, start_s: float, end_s: float, max_requests: int = 200) -> go.Figure:
    """One bar per request arriving in [start_s, end_s) (the first max_requests): queued (arrival to first
    scheduled), prefill (to first token), decode (to finish), and over them each preemption, from the step
    that preempted the request to the one that took it back (swapped out: hatched). Run files written
    before the intervals were recorded show a preempted request by its count and a black outline."""
    r = requests[(requests["arrival_time_s"] >= start_s) & (requests["arrival_time_s"] < end_s)]
    arrived = len(r)
    r = r.sort_values("arrival_time_s").head(max_requests)
    labels = [f"{rid} ({n}× preempted)" if n else str(rid) for rid, n in zip(r["request_id"], r["num_preemptions"])]
    finish = r["finish_s"].fillna(r["arrival_time_s"])
    scheduled = r["first_scheduled_s"].fillna(finish)
    first = r["first_token_s"].fillna(finish)
    recorded = "preempted_at" in r
    outline = np.where((r["num_preemptions"].to_numpy() > 0) & (not recorded), 1.5, 0)
    fig = go.Figure()
    for phase, begin, stop in (("queued", r["arrival_time_s"], scheduled), ("prefill", scheduled, first),
                               ("decode", first, finish)):
        fig.add_trace(go.Bar(y=labels, x=(stop - begin).to_numpy(), base=begin.to_numpy(), orientation="h", name=phase,
                             marker=dict(color=PHASES[phase], line=dict(color="#000", width=outline)),
                             customdata=[duration_label(d) for d in (stop - begin)],
                             hovertemplate=f"request %{{y}}<br>{phase} %{{customdata}} from t=%{{base:.2f}} s<extra></extra>"))
    for swapped, (ys, starts, ends) in preempted_intervals(r, labels).items():
        if not ys:
            continue
        widths = np.subtract(ends, starts)
        name = "preempted (swapped out)" if swapped else "preempted"
        fig.add_trace(go.Bar(y=ys, x=widths, base=starts, orientation="h", name=name,
                             marker=dict(color=PREEMPTION, line=dict(width=0), pattern_shape="/" if swapped else "",
                                         pattern_fgcolor="#ffffff"),
                             customdata=[duration_label(d) for d in widths],
                             hovertemplate=f"request %{{y}}<br>{name} %{{customdata}} from t=%{{base:.2f}} s"
                                           f"<extra></extra>"))
    rejected = r[r["state"] == "rejected"]
    if len(rejected):
        fig.add_trace(go.Scatter(y=[lbl for lbl, s in zip(labels, r["state"]) if s == "rejected"],
                                 x=rejected["arrival_time_s"], mode="markers", name="rejected",
                                 marker=dict(symbol="x", color="#d32f2f", size=8), customdata=rejected["reason"],
                                 hovertemplate="rejected: %{customdata}<extra></extra>"))
    shown = (f"{len(r)} shown" if len(r) == arrived else
             f"the first {len(r):,} of {arrived:,} shown; narrow the window for the rest")
    header(fig, f"Requests arriving in {start_s:.1f}–{end_s:.1f} s ({shown}): queued, prefill, decode, "
                f"preempted", min(160 + 14 * max(len(r), 5), 2400), top=90)
    fig.update_layout(barmode="overlay", xaxis_title="time (s)", bargap=0.25,
                      yaxis=dict(autorange="reversed", title="request", type="category"))
    return fig
