"""Replay: one trace through the paged KV cache and the contiguous reserve-ahead baselines, side by side."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pagesim.dashboard import cached, data, figures, tables, widgets
from pagesim.errors import UserError
from pagesim.traces.stats import trace_stats

PREFIX = "replay"


def render() -> None:
    st.title("Replay")
    st.caption("One trace through paged attention and the contiguous (reserve-ahead) baselines that paging "
               "replaced, on the same simulated GPU. Memory words: **used** slots hold live K/V; **reserved** slots "
               "are allocated for tokens still to come; **internal fragmentation** is allocated but never to be "
               "filled; **external fragmentation** is free but in pieces too small for the next request.")
    loaded = widgets.trace_source(PREFIX)
    config = widgets.config_sidebar(PREFIX)
    baselines = st.sidebar.multiselect(
        "Contiguous baselines (reserve policy)", data.BASELINES, default=["max"], key=f"{PREFIX}.baselines",
        help="max: reserve max_model_len per request; pow2: the next power of two of prompt + max output; "
             "oracle: exactly prompt + true output")
    if loaded is None or config is None:
        return
    trace, trace_key = loaded
    show_trace(trace)
    slot = st.empty()
    try:
        with slot.container():
            runs = cached.replay(trace_key, cached.config_key(config), tuple(baselines), data.NUM_SNAPSHOTS, trace)
    except UserError as exc:
        slot.empty()
        st.error(str(exc))
        return
    slot.empty()
    headline(runs)
    steps = {name: run.result.steps for name, run in runs.items()}
    st.subheader("Memory over time")
    st.plotly_chart(figures.memory_over_time(steps), key=f"{PREFIX}.memory")
    st.subheader("Requests over time")
    st.plotly_chart(figures.requests_over_time(steps), key=f"{PREFIX}.requests")
    block_map(runs, config.block_size)
    st.subheader("Latency")
    st.plotly_chart(figures.latency_cdfs({name: run.result.requests for name, run in runs.items()}),
                    key=f"{PREFIX}.latency")
    request_table(runs)


def show_trace(trace) -> None:
    """The trace's load summary and shape. Drawn before the simulations run, so the browser loads the
    charting library while the server simulates."""
    stats = trace_stats(trace)
    rate = f"{stats['rate']:.2f} req/s" if stats["rate"] else "all at once"
    with st.expander(f"Trace **{trace.name}**: {stats['rows']:,} requests over {stats['span_s']:.1f} s ({rate}); "
                     f"prompt mean {stats['prompt_len']['mean']:.0f}, output mean {stats['output_len']['mean']:.0f} tokens",
                     expanded=bool(trace.summary.warnings)):
        st.text(str(trace.summary))
    st.plotly_chart(figures.trace_overview(trace.df), key=f"{PREFIX}.trace")


def headline(runs: dict[str, data.Run]) -> None:
    table = tables.headline_table({name: run.summary for name, run in runs.items()})
    cols = st.columns(len(runs))
    for col, (name, run) in zip(cols, runs.items()):
        s = run.summary
        with col:
            st.markdown(f"**{name}**")
            tsf = s["token_state_fraction"]
            st.metric("KV memory holding token states", "–" if tsf is None else f"{tsf:.1%}")
            thr = s["request_throughput"]
            st.metric("Throughput", "–" if thr is None else f"{thr:.2f} req/s")
            ttft = s["ttft_s"]["p50"]
            st.metric("TTFT p50", "–" if ttft is None else (f"{ttft * 1e3:.0f} ms" if ttft < 1 else f"{ttft:,.1f} s"))
    st.dataframe(table, column_config={
        c: st.column_config.NumberColumn(format="%.3f" if "fraction" in c or "fragmentation" in c else "%.4g")
        for c in table.columns})


@st.fragment
def block_map(runs: dict[str, data.Run], block_size: int) -> None:
    """The block map with its time slider; a fragment, so scrubbing reruns only this section."""
    st.subheader("Block map")
    first = next(iter(runs.values())).result.snapshots
    if not first:
        st.info("No block snapshots were recorded for this run.")
        return
    times = [s.time_s for s in first]
    i = st.select_slider("Snapshot time", options=list(range(len(times))), value=len(times) // 2,
                         format_func=lambda k: f"{times[k]:.1f} s", key=f"{PREFIX}.snapshot")
    frames = {name: run.result.snapshots[i].to_frame() for name, run in runs.items() if len(run.result.snapshots) > i}
    st.plotly_chart(figures.block_maps(frames, block_size, times[i]), key=f"{PREFIX}.blocks")
    st.caption("Each cell is one physical KV block of the GPU cache, in block-id order. Paged attention scatters a "
               "request's blocks anywhere; the contiguous baseline needs one run of consecutive blocks per request, "
               "so free gaps between runs (external fragmentation) and pale reserved tails show where memory goes.")


def request_table(runs: dict[str, data.Run]) -> None:
    st.subheader("Requests")
    requests = pd.concat([run.result.requests.assign(run=name) for name, run in runs.items()], ignore_index=True)
    st.dataframe(requests[["run", "request_id", "arrival_time_s", "prompt_len", "output_len", "ttft_s", "tpot_s",
                           "e2e_s", "num_preemptions", "state", "reason"]], height=320, hide_index=True)
    cols = st.columns(3)
    cols[0].download_button(
        "steps.csv", lambda: pd.concat([r.result.steps.assign(run=n) for n, r in runs.items()]).to_csv(index=False),
        file_name="steps.csv", mime="text/csv", key=f"{PREFIX}.dl_steps")
    cols[1].download_button("requests.csv", lambda: requests.to_csv(index=False), file_name="requests.csv",
                            mime="text/csv", key=f"{PREFIX}.dl_requests")
    cols[2].download_button(
        "summary.csv", lambda: tables.summary_frame({n: r.summary for n, r in runs.items()}).to_csv(),
        file_name="summary.csv", mime="text/csv", key=f"{PREFIX}.dl_summary")


if __name__ == "__main__":
    render()
