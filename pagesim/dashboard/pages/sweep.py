"""Sweep: one trace over a grid of block sizes, memory sizes, preemption modes and prefix caching."""

from __future__ import annotations

import streamlit as st

from pagesim.dashboard import figures, sweep, widgets
from pagesim.dashboard.widgets import URL
from pagesim.errors import OptionError, UserError

PREFIX = "sweep"
INJECTED_RESULTS = f"{PREFIX}.injected_results"
RAN = f"{PREFIX}.ran"  # the grid last run: the results shown are for it
GIB_OPTIONS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
DEFAULT_GIB = 1.0  # 512 blocks of 16 tokens for Llama-3-8B: tight enough that block size moves latency too
BACKENDS = ("local processes", "Ray")
GRID_SWEPT = ("block_size", "memory_mode", "kv_cache_gib", "num_gpu_blocks", "gpu_memory_utilization", "prefix_caching",
              "kv_offloading_size", "preemption")  # config_sidebar's controls the page leaves out (memory=False, ...)
# every URL setting of the page, by suffix (widgets.url_notice names any other as ignored)
# (config_sidebar's without those the grid sweeps: sweep.block_size=32 is ignored, the grid's block_sizes is not)
URL_KEYS = (*widgets.TRACE_SOURCE_KEYS, *(k for k in widgets.CONFIG_KEYS if k not in GRID_SWEPT), "block_sizes", "gib",
            "modes", "caching", "layouts", "backend", "address")
STREAM_S = 0.5  # the table so far is redrawn at most this often while a sweep runs


def render() -> None:
    st.title("Sweep")
    with widgets.url_settings(PREFIX, known=URL_KEYS):
        render_page()


def render_page() -> None:
    st.caption("The same trace over a grid of configurations, each one task of `python -m pagesim sweep`'s runner "
               "(pagesim.sweep), in local processes or on Ray. The default is the PagedAttention paper's block-size "
               "study (Kwon et al., SOSP 2023, §7.2): block sizes 8–256 on a ShareGPT-like trace at equal KV "
               "memory. Larger blocks leave more of each request's last block empty, so less of the allocated "
               "memory holds token states.")
    finished = st.sidebar.file_uploader("Open a finished sweep (results.parquet of `python -m pagesim sweep`)",
                                        type=["parquet"], key=f"{PREFIX}.results")
    # (file name, bytes) under INJECTED_RESULTS: the test seam of widgets.INJECTED_UPLOAD, for this uploader
    finished = (finished.name, finished.getvalue()) if finished is not None else st.session_state.get(INJECTED_RESULTS)
    if finished is not None:
        show_finished(*finished)
        return
    loaded = widgets.trace_source(PREFIX, default_limit=0)  # the whole trace (Replay keeps its first 500)
    base = widgets.config_sidebar(PREFIX, memory=False, block_size=False, preemption=False, prefix_caching=False)
    grid = grid_form()
    backend, address = backend_form()
    if loaded is None or base is None:
        return
    trace, trace_key = loaded
    if RAN not in st.session_state:
        st.session_state[RAN] = grid  # the first view runs the grid it opens with (defaults or the URL's)
    ran = st.session_state[RAN]
    if ran != grid:
        st.warning("The grid in the sidebar has changed: press **Run sweep** to simulate it. The results below "
                   "are still those of the grid last run.", icon=":material/pending:")
    grid = dict(ran)
    swap_space = grid.pop("swap_space", None)  # with swap in the grid: the swap points' own parameter, not an axis
    try:
        points = sweep.grid_points(grid, swap_space)
    except UserError as exc:
        st.error(str(exc))
        return
    refused = swap_space_refused(base, grid["block_size"], swap_space)
    if refused:
        st.error(refused)
        return
    options = sweep.base_options(base)
    out = sweep.results_dir(trace_key, options, points)
    st.markdown(f"Trace **{trace.name}**: {len(trace.df):,} requests · {len(points)} "
                f"configurations · KV memory as GiB of K/V per configuration (num_gpu_blocks = GiB / block bytes)"
                + (f" · swap_space {swap_space:g} GiB" if swap_space is not None else ""))
    results = run(trace, options, points, out, backend, address)
    if results is None:
        return
    rows = sweep.rows_of(results, points)  # the directory may hold the swap rows of another swap_space too
    cli_warnings(rows)
    results = sweep.table(rows)
    ok = results[results["status"] == "ok"]
    failed = results[results["status"] != "ok"]
    if len(failed):
        st.warning(f"{len(failed)} of {len(results)} configurations failed (their rows say why); first: "
                   f"{failed['error'].iloc[0]}")
    unserved = ok[ok["num_rejected"] >= len(trace.df)] if "num_rejected" in ok else ok.iloc[:0]
    if len(unserved):  # status ok, but no figure to draw: their lines would be missing without a word
        varied = [k for k, v in grid.items() if len(v) > 1] or list(grid)
        which = "; ".join(", ".join(f"{k} {row[k]:g}" if isinstance(row[k], float) else f"{k} {row[k]}" for k in varied)
                          for _, row in unserved.iterrows())
        st.warning(f"{len(unserved)} of {len(results)} configurations rejected every request, so they have no point "
                   f"on the charts ({which}): each request needed more KV blocks than the cache holds (contiguous-max "
                   f"reserves max_model_len tokens per request: choose a larger KV-cache size) or reached "
                   f"max_model_len (raise it in the sidebar). Their rows' num_rejected column counts them; Replay "
                   f"names each request's reason.")
    served = ok.drop(unserved.index)  # the configurations with figures to draw
    if len(served):
        varied = [k for k, v in grid.items() if len(v) > 1]
        x = st.selectbox("x axis", varied or list(grid), key=f"{PREFIX}.x")
        series = [k for k in varied if k != x]
        st.plotly_chart(figures.sweep_lines(served, x, series), key=f"{PREFIX}.figure")
        finding(served)
    st.dataframe(results, hide_index=True)
    kept = ", with the swap rows of every swap_space run on this grid" if swap_space is not None else ""
    st.caption(f"Rows kept in `{out / 'results.parquet'}`{kept}; the results.parquet download holds this grid's, in "
               f"`python -m pagesim sweep`'s format (reopen it above).")
    c1, c2 = st.columns(2)
    c1.download_button("sweep.csv", lambda: results.to_csv(index=False), file_name="sweep.csv", mime="text/csv",
                       key=f"{PREFIX}.dl")
    c2.download_button("results.parquet", lambda: rows.to_parquet(index=False), file_name="results.parquet",
                       key=f"{PREFIX}.dl_parquet")


def swap_space_refused(base, block_sizes: list[int], swap_space: float | None) -> str | None:
    """Why the grid's swap points cannot take `swap_space` (more host blocks than the simulator holds), in the sidebar's
    words as Replay says it (widgets.config_error), at the grid's smallest block size (where a GiB is the most blocks);
    None when they can. Was: every swap row failed with the CLI's "FlagError: --swap-space ..."."""
    if swap_space is None or not block_sizes:
        return None
    geometry = base.replace(block_size=min(block_sizes), num_gpu_blocks=1)  # (the block count does not matter here)
    try:
        geometry.replace(preemption_mode="swap", swap_space=swap_space)
    except OptionError as exc:
        smallest = " (the grid's smallest)" if len(set(block_sizes)) > 1 else ""
        return f"Swap points at block_size {geometry.block_size}{smallest}: {widgets.config_error(exc, geometry)}"
    return None


def cli_warnings(results, own_rejections: bool = True) -> None:
    """The warnings `python -m pagesim sweep` prints for these rows (each kind once, with how many configurations it
    concerns: prefix caching swept on a trace without content to share, outputs cut at max_model_len, many requests
    rejected, a TPOT SLO of `--slo` that no request can be judged by), in the sidebar's names; a configuration that
    rejected every request has the page's own warning (`own_rejections`: the page's own sweep)."""
    from pagesim.sweep import summarize_warnings

    if "warnings" not in results:
        return
    for k, text in summarize_warnings(results["warnings"]):
        if not own_rejections or "every request (" not in text:
            st.warning(f"In {k} of {len(results)} configurations: {widgets.in_page_words(text)}.",
                       icon=":material/warning:")


def run(trace, options: dict, points: list[dict], out, backend: str, address: str | None):
    """The sweep's whole table: rows stream into the page as configurations finish (a progress bar and the
    table so far), and the finished table is returned. None after st.error if the backend cannot start."""
    import time

    import pandas as pd

    bar, live = st.empty(), st.empty()
    rows: list[dict] = []
    last = [0.0]

    def on_row(row: dict, done: int, total: int) -> None:
        rows.append(row)
        failed = sum(r["status"] != "ok" for r in rows)
        bar.progress(done / total, text=f"{done} of {total} configurations" + (f" ({failed} failed)" if failed else ""))
        if time.monotonic() - last[0] >= STREAM_S or done == total:
            live.dataframe(sweep.table(pd.DataFrame(rows), points), hide_index=True)
            last[0] = time.monotonic()

    if backend == "Ray":
        try:
            with st.spinner("starting Ray"):
                sweep.connect_ray(address or None)
        except UserError as exc:  # connected elsewhere already
            st.error(str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - Ray's own errors (a bad address, no GCS there) in one line
            st.error(f"Ray could not start{' at ' + address if address else ''}: "
                     f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return None
    bar.progress(0.0, text="starting " + ("Ray tasks" if backend == "Ray" else "worker processes"))
    results = sweep.run(trace, options, points, out, backend="ray" if backend == "Ray" else "local",
                        address=address or None, on_row=on_row)
    bar.empty()
    live.empty()
    return results


def backend_form() -> tuple[str, str]:
    """Where the grid runs: local processes (default), or Ray when it is installed (a local instance, or
    the cluster at an address)."""
    import importlib.util

    sb = st.sidebar
    sb.subheader("Run on")
    has_ray = importlib.util.find_spec("ray") is not None
    backend = sb.radio("Backend", BACKENDS if has_ray else BACKENDS[:1], bind=URL, key=f"{PREFIX}.backend",
                       horizontal=True, help="local processes, or one Ray task per configuration" +
                       ("" if has_ray else " (Ray is not installed)"))
    address = ""
    if backend == "Ray":
        address = sb.text_input("Ray address (empty: a local instance)", "", bind=URL, key=f"{PREFIX}.address",
                                placeholder="ray://head:10001 or auto").strip()
    return backend, address


def show_finished(name: str, content: bytes) -> None:
    """A results.parquet from `python -m pagesim sweep` (pagesim.sweep): its table, and the lines against a column,
    one line per combination of the other swept columns (as the page's own sweep draws them)."""
    import io

    import pandas as pd

    try:
        results = pd.read_parquet(io.BytesIO(content))
    except (ValueError, OSError) as exc:  # not Parquet: empty, a CSV, gzipped, cut short
        why = " ".join(str(exc).split())[:100] or type(exc).__name__
        st.error(f"{name}: cannot read it as Parquet ({why}); expected the results.parquet `python -m pagesim sweep` "
                 "writes, as it is (not zipped or gzipped)")
        return
    try:
        if "config_id" not in results:
            raise KeyError("config_id")
        params = sweep.parameters(results)  # swap_space too, after the figures in a directory's own file
        ok = sweep.table(results[results["status"] == "ok"])
    except (ValueError, OSError, KeyError):
        st.error(f"{name}: not a results.parquet of `python -m pagesim sweep` (no config_id and status columns)")
        return
    lacking = [c for c in figures.SWEEP_PANELS if c not in ok] if len(ok) else []
    if lacking:
        st.error(f"{name}: not a results.parquet of `python -m pagesim sweep`: its rows lack {', '.join(lacking)}")
        return
    st.markdown(f"**{len(results):,}** configurations, {len(results) - len(ok):,} failed")
    cli_warnings(results, own_rejections=False)  # (this view has no warning of its own for them)
    varied = [c for c in params if ok[c].nunique() > 1] or params
    if len(ok) and varied:
        x = st.selectbox("x axis", varied, key=f"{PREFIX}.finished_x")
        others = [c for c in varied if c != x]
        # every other swept column by default: without one, a line would join configurations of different layouts or
        # memory sizes (and be named "paged" whatever their layout)
        series = st.multiselect("lines by", others, default=others, key=f"{PREFIX}.finished_series")
        st.plotly_chart(figures.sweep_lines(ok, x, series), key=f"{PREFIX}.finished_figure")
    st.dataframe(results, hide_index=True)


def grid_form() -> dict:
    """The grid, from the sidebar: edits show a "press Run" notice, and only Run sweep simulates them
    (the grid the page opens with runs at once). With swap among the modes, also the swap points' swap_space
    (a number, under "swap_space"; the axes are lists)."""
    sb = st.sidebar
    sb.subheader("Grid")
    block_sizes = sb.pills("block_size", sweep.BLOCK_SIZES, selection_mode="multi", default=list(sweep.BLOCK_SIZES),
                           bind=URL, key=f"{PREFIX}.block_sizes")
    gib = sb.pills("KV-cache size (GiB)", GIB_OPTIONS, selection_mode="multi", default=[DEFAULT_GIB], bind=URL,
                   key=f"{PREFIX}.gib", format_func=lambda g: f"{g:g}")
    modes = sb.pills("preemption_mode", ["recompute", "swap"], selection_mode="multi", default=["recompute"],
                     bind=URL, key=f"{PREFIX}.modes")
    swap_space = widgets.swap_space(PREFIX) if "swap" in modes else None
    caching = sb.pills("enable_prefix_caching", [False, True], selection_mode="multi", default=[False], bind=URL,
                       key=f"{PREFIX}.caching", format_func=lambda v: "on" if v else "off")
    layouts = sb.pills("KV layout", sweep.LAYOUTS, selection_mode="multi", default=["paged"], bind=URL,
                       key=f"{PREFIX}.layouts", help="paged, or a contiguous reserve-ahead baseline")
    grid = {"block_size": sorted(block_sizes), "kv_cache_gib": sorted(gib), "preemption_mode": list(modes),
            "enable_prefix_caching": list(caching), "layout": list(layouts)}
    if swap_space is not None:
        grid["swap_space"] = swap_space
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
