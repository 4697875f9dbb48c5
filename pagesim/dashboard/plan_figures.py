"""The Plan page's figure: GPUs against goodput for every candidate, the frontier on top (no Streamlit)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from pagesim.dashboard.figures import titled


def pareto_figure(candidates: pd.DataFrame, pareto: pd.DataFrame, recommendation: dict | None = None) -> go.Figure:
    """Each candidate a point (green: meets every SLO; grey: misses one); the best per GPU count joined."""
    fig = go.Figure()
    ok = candidates[candidates["status"] == "ok"]
    for met, name, color in ((True, "meets the SLOs", "#2ca02c"), (False, "misses an SLO", "#9e9e9e")):
        part = ok[ok["slo_met"].astype(bool) == met]
        fig.add_trace(go.Scatter(
            x=part["num_gpus"], y=part["goodput"], mode="markers", name=name, marker={"color": color, "size": 9},
            customdata=part[["config_id", "tensor_parallel_size", "replicas", "router", "slo_attainment"]],
            hovertemplate="%{x} GPUs: TP %{customdata[1]} x %{customdata[2]} replicas, %{customdata[3]}<br>"
                          "goodput %{y:.3g} req/s, attainment %{customdata[4]:.1%}<br>%{customdata[0]}"
                          "<extra></extra>"))
    if len(pareto):
        fig.add_trace(go.Scatter(x=pareto["num_gpus"], y=pareto["goodput"], mode="lines", name="best per GPU count",
                                 line={"color": "#4c78a8"}))
    if recommendation is not None:
        fig.add_trace(go.Scatter(x=[recommendation["num_gpus"]], y=[recommendation["goodput"]], mode="markers",
                                 name="recommendation", marker={"symbol": "star", "size": 18, "color": "#f2b701"}))
    fig.update_layout(xaxis_title="GPUs", yaxis_title="goodput (req/s)", xaxis={"dtick": 1})
    fig.update_layout(height=420 + titled(fig, "GPUs against goodput (requests/s that met every SLO)", top=100))
    return fig
