"""The trace overview (arrival rate, prompt and output lengths) as Vega-Lite specs: a session's first chart.

Streamlit draws Vega-Lite charts with a far smaller bundle than its plotly one (vega-embed, ~0.8 MB,
against plotly.js, 4.7 MB, which costs a new session ~1 s to fetch and parse and ~1.3 s to evaluate),
so the Replay page draws its first chart this way while the plotly bundle for the heavy charts loads.
The histograms are binned here (one row per bin), so the browser draws bars and computes nothing.
Built with Altair (Streamlit's own Vega-Lite library); the specs are plain dicts, cached per trace.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from pagesim.dashboard.palette import TRACE

# Panel: (trace column, title, x axis title, y axis title).
PANELS = (
    ("arrival_time_s", "arrivals (req/s)", "time (s)", "req/s"),
    ("prompt_len", "prompt length (tokens)", "tokens", "requests"),
    ("output_len", "output length (tokens)", "tokens", "requests"),
)
AT_ONCE = ("arrivals (all at t = 0)", "requests")  # the arrivals panel's title and y axis when there is no span
HEIGHT = 170


def bins(trace: pd.DataFrame, column: str, num_bins: int = 60) -> pd.DataFrame:
    """One row per bin: start, end, value. Arrivals: requests per second in the bin (over [0, last
    arrival]), or, when every request arrives at t = 0 (no span, so no rate), the requests in one bin of a second;
    lengths: requests in the bin."""
    x = trace[column].to_numpy(dtype="float64")
    if column == "arrival_time_s":
        span = float(x.max()) if len(x) else 0.0
        if span <= 0:  # a rate over a zero span would be requests / 1e-9 s: "60,000,000,000 req/s" for one request
            return pd.DataFrame({"start": [0.0], "end": [1.0], "value": [float(len(x))]})
        counts, edges = np.histogram(x, bins=num_bins, range=(0.0, span))
        value = counts / (span / num_bins)
    else:
        counts, edges = np.histogram(x, bins=num_bins) if len(x) else (np.zeros(num_bins), np.linspace(0, 1, num_bins + 1))
        value = counts
    return pd.DataFrame({"start": edges[:-1], "end": edges[1:], "value": value.astype("float64")})


def trace_overview(trace: pd.DataFrame, num_bins: int = 60) -> list[dict]:
    """Three Vega-Lite specs (arrival rate over time, prompt and output length histograms), in the
    palette's trace colour."""
    specs = []
    at_once = not len(trace) or float(trace["arrival_time_s"].max()) <= 0
    for column, title, x_title, y_title in PANELS:
        frame = bins(trace, column, num_bins)
        if column == "arrival_time_s" and at_once:
            title, y_title = AT_ONCE
        tip = [alt.Tooltip("start:Q", title="from", format=",.1f"), alt.Tooltip("end:Q", title="to", format=",.1f"),
               alt.Tooltip("value:Q", title=y_title, format=",.2f" if y_title == "req/s" else ",d")]
        # rect, not bar: a bar with a ranged x is drawn as a horizontal bar, a dot per bin
        chart = alt.Chart(frame, title=title, height=HEIGHT).mark_rect(color=TRACE).encode(
            x=alt.X("start:Q", title=x_title, scale=alt.Scale(zero=False, nice=False)),
            x2="end:Q", y=alt.Y("value:Q", title=y_title), y2=alt.datum(0), tooltip=tip)
        specs.append(chart.to_dict())
    return specs
