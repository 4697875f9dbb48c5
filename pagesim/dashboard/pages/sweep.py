"""Sweep: one trace over a grid of block sizes, memory sizes, preemption modes and prefix caching."""

from __future__ import annotations

import json

import streamlit as st

from pagesim.dashboard import cached, figures, sweep, widgets
from pagesim.dashboard.widgets import URL
from pagesim.errors import UserError

PREFIX = "sweep"
RAN = f"{PREFIX}.ran"  # the grid last run: the results shown are for it
GIB_OPTIONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
DEFAULT_GIB = 1.0  # 512 blocks of 16 tokens for Llama-3-8B: tight enough that block size moves latency too


def render() -> None:
    st.title("Sweep")
    st.caption("The same trace over a grid of configurations, each simulated in its own process. The default is the "
               "PagedAttention paper's block-size study (Kwon et al., SOSP 2023, §7.2): block sizes 8–256 on a "
               "ShareGPT-like trace at equal KV memory. Larger blocks leave more of each request's last block "
               "empty, so less of the allocated memory holds token states.")
    finished = st.sidebar.file_uploader("Open a finished sweep (results.parquet of `python -m pagesim sweep`)",
                                        type=["parquet"], key=f"{PREFIX}.results")
    if finished is not None:
        show_finished(finished)
        return
    loaded = widgets.trace_source(PREFIX, default_limit=0)  # the whole trace (Replay keeps its first 500)
    base = widgets.config_sidebar(PREFIX, memory=False, block_size=False, preemption=False, prefix_caching=False)
    grid = grid_form()
    if loaded is None or base is None:
        return
    trace, trace_key = loaded
    if RAN not in st.session_state:
        st.session_state[RAN] = grid  # the first view runs the grid it opens with (defaults or the URL's)
    ran = st.session_state[RAN]
    if ran != grid:
        st.warning("The grid in the sidebar has changed: press **Run sweep** to simulate it. The results below "
                   "are still those of the grid last run.", icon=":material/pending:")
    grid = ran
    try:
        points = sweep.grid_points(base, grid)
    except UserError as exc:
        st.error(str(exc))
        return
    st.markdown(f"Trace **{trace.name}**: {len(trace.df):,} requests · {len(points)} "
                f"configurations · KV memory as GiB of K/V per configuration (num_gpu_blocks = GiB / block bytes)")
    slot = st.empty()
    with slot.container():
        results = cached.run_sweep(trace_key, cached.config_key(base), json.dumps(grid), trace)
    slot.empty()
    varied = [k for k, v in grid.items() if len(v) > 1]
    x = st.selectbox("x axis", varied or list(grid), key=f"{PREFIX}.x")
    series = [k for k in varied if k != x]
    st.plotly_chart(figures.sweep_lines(results, x, series), key=f"{PREFIX}.figure")
    finding(results)
    st.dataframe(results, hide_index=True)
    st.download_button("sweep.csv", lambda: results.to_csv(index=False), file_name="sweep.csv", mime="text/csv",
                       key=f"{PREFIX}.dl")


def show_finished(file) -> None:
    """A results.parquet from `python -m pagesim sweep` (pagesim.sweep): its table, and the lines against a column."""
    import io

    import pandas as pd

    try:
        results = pd.read_parquet(io.BytesIO(file.getvalue()))
        params = list(results.columns[: list(results.columns).index("config_id")])
    except (ValueError, OSError):
        st.error(f"{file.name}: not a results.parquet of `python -m pagesim sweep` (no config_id column)")
        return
    ok = results[results["status"] == "ok"].rename(columns={f"{m}_s_p50": f"{m}_p50_s" for m in ("ttft", "e2e")})
    st.markdown(f"**{len(results):,}** configurations, {len(results) - len(ok):,} failed")
    varied = [c for c in params if ok[c].nunique() > 1] or params
    if len(ok) and varied:
        x = st.selectbox("x axis", varied, key=f"{PREFIX}.finished_x")
        series = st.multiselect("lines by", [c for c in varied if c != x], key=f"{PREFIX}.finished_series")
        st.plotly_chart(figures.sweep_lines(ok, x, series), key=f"{PREFIX}.finished_figure")
    st.dataframe(results, hide_index=True)


def grid_form() -> dict[str, list]:
    """The grid, from the sidebar: edits show a "press Run" notice, and only Run sweep simulates them
    (the grid the page opens with runs at once)."""
    sb = st.sidebar
    sb.subheader("Grid")
    block_sizes = sb.pills("block_size", sweep.BLOCK_SIZES, selection_mode="multi", default=list(sweep.BLOCK_SIZES),
                           bind=URL, key=f"{PREFIX}.block_sizes")
    gib = sb.pills("KV-cache size (GiB)", GIB_OPTIONS, selection_mode="multi", default=[DEFAULT_GIB], bind=URL,
                   key=f"{PREFIX}.gib", format_func=lambda g: f"{g:g}")
    modes = sb.pills("preemption_mode", ["recompute", "swap"], selection_mode="multi", default=["recompute"],
                     bind=URL, key=f"{PREFIX}.modes")
    caching = sb.pills("enable_prefix_caching", [False, True], selection_mode="multi", default=[False], bind=URL,
                       key=f"{PREFIX}.caching", format_func=lambda v: "on" if v else "off")
    layouts = sb.pills("KV layout", sweep.LAYOUTS, selection_mode="multi", default=["paged"], bind=URL,
                       key=f"{PREFIX}.layouts", help="paged, or a contiguous reserve-ahead baseline")
    grid = {"block_size": sorted(block_sizes), "kv_cache_gib": sorted(gib), "preemption_mode": list(modes),
            "enable_prefix_caching": list(caching), "layout": list(layouts)}
    if sb.button("Run sweep", type="primary", key=f"{PREFIX}.run"):
        st.session_state[RAN] = grid
    return grid


def finding(results) -> None:
    """One sentence on the block-size trade-off, when block size was swept for paged attention."""
    paged = results[results["layout"] == "paged"] if "layout" in results else results
    if paged["block_size"].nunique() < 2:
        return
    first = paged.groupby("block_size")["token_state_fraction"].mean()
    lo, hi = first.index.min(), first.index.max()
    st.caption(f"Paged token-state fraction: {first[lo]:.1%} at block size {lo}, {first[hi]:.1%} at {hi} "
               f"(mean over the other swept parameters).")


if __name__ == "__main__":
    render()
