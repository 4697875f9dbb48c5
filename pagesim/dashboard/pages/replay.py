"""Replay: one trace through the paged KV cache and the contiguous reserve-ahead baselines, side by side."""

from __future__ import annotations

import io
import math

import pandas as pd
import streamlit as st

from pagesim.dashboard import block_map, cached, data, figures, first_chart, host_tier, serving, tables, trace_chart, widgets
from pagesim.dashboard.widgets import URL
from pagesim.errors import UserError
from pagesim.metrics import own_requests
from pagesim.specs import GIB
from pagesim.traces.stats import trace_stats

PREFIX = "replay"
VIEWS = ("Memory", "Serving (vLLM metrics)", "Latency and requests")
PLAY = f"{PREFIX}.play"
SNAPSHOT = f"{PREFIX}.snapshot"
KEPT_SNAPSHOT = f"{PREFIX}.snapshot_kept"  # the slider's last position, kept while another page is open
FRAME_S = 1.5  # seconds between frames while playing
HEADLINE_COLUMNS = 6  # headline figures in a row per run
# every URL setting of the page, by suffix (widgets.url_notice names any other as ignored)
URL_KEYS = (*widgets.TRACE_SOURCE_KEYS, *widgets.CONFIG_KEYS, "baselines", "view", "shared_time", "colour_by",
            "slo_ttft", "slo_tpot", "slo_itl", "gantt_run", "gantt_window")
RUNS_KEY = f"{PREFIX}.runs_key"  # what the runs on the page were simulated from: the key of their cached figures


def chart(name: str, params, build) -> None:
    """st.plotly_chart of a figure cached by what it shows: the runs on the page and `params`."""
    fig = cached.once(name, f"{st.session_state[RUNS_KEY]}|{params}", build)
    st.plotly_chart(fig, key=f"{PREFIX}.{name}")


def render() -> None:
    st.title("Replay")
    with widgets.url_settings(PREFIX, skip=(SNAPSHOT,), known=URL_KEYS):  # the snapshot parameter has its own message
        render_page()


def render_page() -> None:
    st.caption("One trace through paged attention and the contiguous (reserve-ahead) baselines that paging "
               "replaced, on the same simulated GPU. Memory words: **used** slots hold live K/V; **reserved** slots "
               "are allocated for tokens still to come; **internal fragmentation** is allocated but never to be "
               "filled; **external fragmentation** is free but in pieces too small for the next request. "
               "Every setting is in the page's URL: bookmark it to come back to this scenario.")
    loaded = widgets.trace_source(PREFIX)
    if loaded is not None:
        show_trace(*loaded)  # the first chart, before anything else is drawn or simulated
        if not first_chart.wait_for_first_chart():
            return  # a new session: the engine settings, runs and heavy charts follow once the browser has drawn it
    config = widgets.config_sidebar(PREFIX)
    baselines = st.sidebar.multiselect(
        "Contiguous baselines (reserve policy)", data.BASELINES, default=["max"], bind=URL, key=f"{PREFIX}.baselines",
        help="max: reserve max_model_len per request; pow2: the next power of two of prompt + max output; "
             "oracle: exactly prompt + true output")
    if loaded is None or config is None:
        return
    trace, trace_key = loaded
    slot = st.empty()
    try:
        with slot.container():
            runs = cached.replay(trace_key, cached.config_key(config), tuple(baselines), data.NUM_SNAPSHOTS, trace)
    except UserError as exc:
        slot.empty()
        st.error(str(exc))
        return
    slot.empty()
    st.session_state[RUNS_KEY] = f"{trace_key}|{cached.config_key(config)}|{','.join(baselines)}"
    rejection_banner(runs, config.resolved_max_model_len)
    config_banner(config, trace, baselines)
    headline(runs, config)
    memory_tab, serving_tab, latency_tab = st.tabs(VIEWS, bind=URL, key=f"{PREFIX}.view")
    if memory_tab.open:
        with memory_tab:
            shared = st.toggle("Same time axis for every run", False, bind=URL, key=f"{PREFIX}.shared_time",
                               help="off: each run on its own time axis, so a baseline that drains for minutes "
                                    "does not squeeze the others")
            playing = st.session_state.get(PLAY, False)
            st.fragment(time_section, run_every=FRAME_S if playing else None)(runs, config, shared, playing)
    if serving_tab.open:
        with serving_tab:
            serving_view(runs, config, trace)
    if latency_tab.open:
        with latency_tab:
            chart("latency", "", lambda: figures.latency_cdfs({name: run.result.requests for name, run in runs.items()}))
            request_table(runs)


def show_trace(trace, trace_key: str) -> None:
    """The trace's load summary and shape: Vega-Lite charts (trace_chart), drawn before the simulations
    run and before the plotly bundle of the heavy charts has loaded."""
    stats = cached.once("trace_stats", trace_key, lambda: trace_stats(trace))
    rate = f"{stats['rate']:.2f} req/s" if stats["rate"] else "all at once"
    with st.expander(f"Trace **{trace.name}**: {stats['rows']:,} request{'s' if stats['rows'] != 1 else ''} over "
                     f"{stats['span_s']:.1f} s ({rate}); "
                     f"prompt mean {stats['prompt_len']['mean']:,.0f}, output mean {stats['output_len']['mean']:,.0f} tokens",
                     expanded=bool(trace.summary.warnings)):
        st.text(str(trace.summary))
    specs = cached.once("trace_specs", trace_key, lambda: trace_chart.trace_overview(trace.df))
    for i, (col, spec) in enumerate(zip(st.columns(len(specs)), specs)):
        col.vega_lite_chart(spec=spec, width="stretch", key=f"{PREFIX}.trace.{i}")


def rejection_banner(runs: dict[str, data.Run], max_model_len: int) -> None:
    """A warning per distinct rejection story: "1,015 of 2,000 requests rejected: prompt reaches
    max_model_len 8,192 (no room for an output token)" (naming the runs when they differ)."""
    stories: dict[tuple[str, str], list[str]] = {}
    for name, run in runs.items():
        requests = own_requests(run.result.requests)  # the trace's requests, not their parallel samples
        for count, why in tables.rejections(requests, max_model_len):
            stories.setdefault((f"**{count:,} of {len(requests):,} requests rejected**: {why}", why), []).append(name)
    for (text, why), names in stories.items():
        who = "" if len(names) == len(runs) else f" ({', '.join(names)})"
        st.warning(f"{text}{who}. They are not in the latencies; {_rejection_advice(why, names)}",
                   icon=":material/block:")


def config_banner(config, trace, baselines) -> None:
    """The warnings `python -m pagesim replay` prints for these settings (run_warnings: prefix caching on a trace
    without content to share, outputs cut at max_model_len, a host tier of less than one block, the baselines
    running without a prefix cache), in the sidebar's names, so a 0% hit rate or a short output is not a mystery."""
    from pagesim.run_warnings import baseline_warnings, config_warnings

    for text in config_warnings(config, trace) + baseline_warnings(config, baselines):
        st.warning(widgets.in_page_words(text) + ".", icon=":material/warning:")


def _rejection_advice(why: str, names: list[str]) -> str:
    """What in the sidebar serves requests rejected for `why` in runs `names`: a larger max_model_len only helps
    prompts that reach it; a request larger than the whole cache needs more KV cache (or, for contiguous max,
    whose reservation is max_model_len, a smaller max_model_len)."""
    if "max_model_len" in why:
        return "raise max_model_len in the sidebar to serve them."
    if "KV blocks" in why:
        text = "raise the KV-cache size in the sidebar to serve them"
        if "contiguous-max" in names:
            text += " (contiguous-max reserves max_model_len tokens per request: a lower max_model_len also helps it)"
        return text + "."
    if "parallel samples" in why:
        return "raise max_num_seqs in the sidebar to serve them."
    return "raise max_model_len or the KV-cache size in the sidebar to serve them."


def _ratio(value, base, higher_is_better: bool) -> dict:
    """st.metric delta arguments for value against the paged run's: "×0.09" (of paged's), red when worse."""
    if value is None or base is None or not base:
        return {}
    r = value / base
    if abs(r - 1) < 0.005:
        return dict(delta="same as paged", delta_arrow="off", delta_color="gray")
    better = (r > 1) == higher_is_better
    return dict(delta=f"×{r:,.0f}" if r >= 100 else f"×{r:.2g}", delta_arrow="up" if r > 1 else "down",
                delta_color="green" if better else "red")


def headline(runs: dict[str, data.Run], config) -> None:
    """Per run, one row of headline numbers, each baseline's against paged (×ratio)."""
    if "paged" in runs and len(runs) > 1:
        st.caption("Below each baseline's number: its ratio to paged's (×0.28 = 0.28 times paged's), red where "
                   "the baseline is worse.")
    base = runs.get("paged")
    base = base.summary if base is not None else None
    swap = config.preemption_mode == "swap"
    caching = config.enable_prefix_caching
    figures_shown = [  # (label, summary -> value, text, higher is better, help)
        ("Throughput (req/s)", lambda x: x.get("request_throughput"), lambda v: f"{v:.2f}", True, None),
        ("TTFT p50", lambda x: x["ttft_s"]["p50"], figures.duration_label, False, None),
        ("TPOT p50", lambda x: x["tpot_s"]["p50"], figures.duration_label, False, None),
        ("Token states", lambda x: x.get("token_state_fraction"), lambda v: f"{v:.1%}", True,
         "of the KV memory allocated, the share holding token states (used / allocated slots), time-weighted"),
        ("Preemptions", lambda x: x.get("num_preemptions"), lambda v: f"{v:,}", False, None),
        ("Rejected", lambda x: x.get("num_rejected"), lambda v: f"{v:,}", False, None),
    ]
    if caching:
        figures_shown.append(("Prefix-cache hit rate", tables.prefix_cache_hit_rate, lambda v: f"{v:.1%}", True,
                              "prompt tokens found in the prefix cache / prompt tokens looked up"))
    for name, run in runs.items():
        s = run.summary
        against = base if base is not None and name != "paged" else None
        shown = [(label, get(s), text, get(against) if against is not None else None, higher, help)
                 for label, get, text, higher, help in figures_shown]
        if swap:  # no ratio: the contiguous baselines reserve ahead and never swap
            shown.append(("Peak CPU swap (GiB)", _peak_swap_gib(run, config), lambda v: f"{v:.2f}", None, False,
                          f"of swap_space {config.swap_space:g} GiB"))
        # At most HEADLINE_COLUMNS figures a row, then another row: more columns cut the figures short ("77.…")
        # at a laptop's width.
        for start in range(0, len(shown), HEADLINE_COLUMNS):
            cols = st.columns([1.1] + [1] * HEADLINE_COLUMNS)
            if start == 0:
                cols[0].markdown(f"**{name}**  \n{s.get('num_finished', 0):,} finished  \n"
                                 f"makespan {figures.duration_label(s.get('makespan_s'))}")
            for col, (label, value, text, ref, higher, help) in zip(cols[1:], shown[start:start + HEADLINE_COLUMNS]):
                col.metric(label, "–" if value is None else text(value), help=help,
                           **(_ratio(value, ref, higher) if against is not None else {}))
    expander = st.expander("All headline figures as a table", key=f"{PREFIX}.headline_table", on_change="rerun")
    if not expander.open:
        return  # built only when opened: a table's script bundle is not loaded before the first charts
    with expander:
        widgets.headline_dataframe(tables.headline_table({name: run.summary for name, run in runs.items()}))


def _peak_swap_gib(run: data.Run, config) -> float:
    steps = run.result.steps
    held = (steps["num_swap_out_blocks"] - steps["num_swap_in_blocks"]).cumsum()
    return float(held.max() if len(held) else 0) * config.block_bytes / GIB


def slider_times(runs: dict[str, data.Run]) -> list[float]:
    """The slider's instants: up to the end of the longest run."""
    longest = max(runs.values(), key=lambda r: len(r.result.snapshots))
    return [s.time_s for s in longest.result.snapshots]


def snapshot_index(times: list[float]) -> int:
    """The time slider's position, an index into `times`: this session's (the slider's, or the one kept while
    another page was open: Streamlit forgets a widget's state when a run does not draw it, and navigation
    drops the URL's parameter), else the URL's `replay.snapshot`
    (the snapshot's number, as the page writes it; a time such as "62.4 s" picks the nearest snapshot),
    else the middle of the arrivals. Clamped to the last snapshot (a shorter run than the last view's)."""
    last = len(times) - 1
    for key in (SNAPSHOT, KEPT_SNAPSHOT):
        if key in st.session_state:
            return min(int(st.session_state[key]), last)
    text = st.query_params.get(SNAPSHOT)
    if text is not None:
        try:
            if text.strip().endswith("s"):
                t = float(text.strip().removesuffix("s"))
                if not math.isfinite(t):  # "nan s" matched no snapshot (every distance NaN) and showed snapshot 0
                    raise ValueError(text)
                return min(range(len(times)), key=lambda k: abs(times[k] - t))
            return max(0, min(int(text), last))
        except ValueError:
            st.warning(f"URL parameter {SNAPSHOT}={text!r} is not a snapshot number (0 to {last}) or a time "
                       f"such as \"12.5 s\"; showing the middle of the arrivals.", icon=":material/link_off:")
    return min(data.NUM_SNAPSHOTS // 2, last)


def time_section(runs: dict[str, data.Run], config, shared_time: bool, played: bool) -> None:
    """The time slider (over the longest run), the memory and request charts marked at its time, and the
    block map at it: a fragment, so scrubbing or playing reruns only this section. `played`: whether
    the page set the fragment to rerun every FRAME_S (Play was on at the last full run)."""
    times = slider_times(runs)
    if not times:
        st.info("No block snapshots were recorded for this run.")
        return
    playing = st.session_state.get(PLAY, False)
    state = st.session_state
    state[SNAPSHOT] = snapshot_index(times)
    if playing:
        if state[SNAPSHOT] + 1 >= len(times):
            state[PLAY] = False
        else:
            state[SNAPSHOT] += 1
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    labels = [figures.time_label(t, min(gaps, default=None)) for t in times]  # distinct even for a sub-second trace
    cols = st.columns([8, 1.3, 2])
    with cols[0]:
        i = st.select_slider("Time (block map and chart markers)", options=list(range(len(times))),
                             format_func=lambda k: labels[k], key=SNAPSHOT)
    state[KEPT_SNAPSHOT] = i
    if st.query_params.get(SNAPSHOT) != str(i):
        st.query_params[SNAPSHOT] = str(i)  # the snapshot's number (not bind=, which would write "62.4 s")
    with cols[1]:
        if st.toggle("Play", key=PLAY, help=f"advance the time every {FRAME_S:g} s") != played:
            st.rerun()  # the whole page: the section's refresh interval starts or stops
    with cols[2]:
        by = st.segmented_control("Colour blocks by", ["request", "state"], default="request", bind=URL,
                                  key=f"{PREFIX}.colour_by", required=True)
    t = times[i]
    steps = {name: run.result.steps for name, run in runs.items()}
    chart("memory", (t, shared_time),
          lambda: figures.memory_over_time(steps, time_s=t, shared_time=shared_time, watermark=config.watermark))
    st.caption(f"**free while requests wait** (grey): free slots at steps where requests are queued: the next "
               f"request's allocation plus the watermark ({config.watermark:.0%} of blocks, kept free when admitting) "
               f"does not fit in them. For contiguous-max one reservation is max_model_len slots, so up to one "
               f"reservation's worth of memory idles while requests wait.")
    chart("requests", (t, shared_time), lambda: figures.requests_over_time(steps, time_s=t, shared_time=shared_time))
    if config.preemption_mode == "swap":
        chart("swap", t, lambda: figures.swap_over_time(steps, config.block_bytes, config.swap_space, time_s=t))
    frames, notes = {}, {}
    for name, run in runs.items():
        snaps = run.result.snapshots
        if not snaps:
            continue
        snap = snaps[min(i, len(snaps) - 1)]
        if i >= len(snaps) - 1 and snap.time_s < t - 1e-9:
            notes[name] = f": finished at {figures.time_label(snap.time_s)}"
        frames[name] = snap
    st.subheader("Block map")
    host = runs.get("paged") if config.num_offload_blocks else None  # the host tier backs the paged prefix cache
    gpu_col, host_col = st.columns([3, 1.3]) if host is not None else (st.container(), None)
    with gpu_col:
        chart("blocks", (i, by), lambda: block_map.block_maps({n: snap.to_frame() for n, snap in frames.items()},
                                                              config.block_size, t, by=by, notes=notes,
                                                              time_text=labels[i]))
    if host is not None:
        with host_col:
            chart("host_blocks", t, lambda: host_tier.host_block_map(host.result.steps, config.num_offload_blocks,
                                                                     config.block_bytes, t, time_text=labels[i]))
    st.caption("Each cell is one physical KV block of the GPU cache, in block-id order. Paged attention scatters a "
               "request's blocks anywhere; the contiguous baseline needs one run of consecutive blocks per request, "
               "so free gaps between runs (external fragmentation) and pale reserved tails show where memory goes. "
               "Hover a cell for its block, request and fill.")
    if host is not None:
        st.caption("**Host tier** (kv_offloading_size): the CPU blocks behind the paged prefix cache. Its blocks "
                   "fill with full prompt blocks as they are computed (stored once each) and are freed only to make "
                   "room for a new store (LRU), so those in use are the blocks stored so far, up to the tier's size; "
                   "which block holds which prefix is not recorded, so the cells are grouped by state.")
        chart("host_time", t, lambda: host_tier.host_tier_over_time(host.result.steps, config.num_offload_blocks,
                                                                    config.block_bytes, time_s=t))


def serving_view(runs: dict[str, data.Run], config, trace) -> None:
    """vLLM's metrics for every run on shared charts, SLO thresholds from the page, and a request timeline."""
    steps = {name: run.result.steps for name, run in runs.items()}
    requests = {name: run.result.requests for name, run in runs.items()}
    times = slider_times(runs)
    t = times[snapshot_index(times)] if times else None
    chart("kv_usage", t, lambda: serving.kv_cache_usage(steps, time_s=t))
    chart("queues", t, lambda: serving.queues(steps, time_s=t))
    st.markdown("**Service-level objectives** (thresholds in ms)")
    cols = st.columns(3)
    slo = {
        "ttft_s": cols[0].number_input("TTFT SLO (ms)", 1.0, 1e7, 500.0, step=100.0, bind=URL, key=f"{PREFIX}.slo_ttft"),
        "tpot_s": cols[1].number_input("TPOT SLO (ms)", 0.1, 1e6, 50.0, step=5.0, bind=URL, key=f"{PREFIX}.slo_tpot"),
        "itl_s": cols[2].number_input("ITL SLO (ms)", 0.1, 1e6, 100.0, step=10.0, bind=URL, key=f"{PREFIX}.slo_itl"),
    }
    slo_banner(config, trace, slo["tpot_s"])
    slo = {k: v / 1e3 for k, v in slo.items()}
    chart("histograms", sorted(slo.items()), lambda: serving.latency_histograms(requests, steps, slo))
    rows = cached.once("attainment", f"{st.session_state[RUNS_KEY]}|{sorted(slo.items())}",
                       lambda: attainment_rows(runs, requests, steps, slo))  # not again on the timeline's widgets
    pct = st.column_config.NumberColumn(format="percent")
    st.dataframe(pd.DataFrame(rows).set_index("run"),
                 column_config={c: pct for c in rows[0] if c not in ("run", "goodput (req/s)")} if rows else None)
    st.caption("Requests within TTFT and TPOT SLOs counts every request of the trace (a rejected one misses; one with "
               "parallel samples counts once, as `replay --slo` does); goodput is those requests per second of "
               "makespan.")
    timeline(runs)


def slo_banner(config, trace, tpot_ms: float) -> None:
    """The warning `replay --slo tpot_...` prints when no request can be judged by a TPOT SLO (run_warnings.tpot_unjudged:
    every output one token, after the cut at max_model_len), named by the page's control: the table below then has no
    TPOT sample, and its requests within TTFT and TPOT SLOs and goodput take no account of the TPOT threshold. Nor has
    it an ITL sample (no step decodes), which the warning adds."""
    from pagesim.run_warnings import tpot_unjudged, tpot_unjudged_warning

    if tpot_unjudged(config, trace):
        text = tpot_unjudged_warning(config, f"**TPOT SLO** {tpot_ms:g} ms")
        st.warning(widgets.in_page_words(text) + ". The **ITL SLO** has no sample either: no step decodes a token.",
                   icon=":material/warning:")


def attainment_rows(runs: dict[str, data.Run], requests, steps, slo: dict[str, float]) -> list[dict]:
    """Per run, the share within each SLO and the goodput: the Serving view's table."""
    rows = []
    for name in runs:
        a = serving.attainment(requests[name], steps[name], slo)
        makespan = runs[name].summary.get("makespan_s") or 0
        good = a["num_met"] / makespan if a["all"] is not None and makespan else None
        rows.append({"run": name, "TTFT within SLO": a["ttft_s"], "TPOT within SLO": a["tpot_s"],
                     "ITL within SLO (tokens)": a["itl_s"], "requests within TTFT and TPOT SLOs": a["all"],
                     "goodput (req/s)": good})
    return rows


def timeline(runs: dict[str, data.Run]) -> None:
    st.markdown("**Per-request timeline**")
    names = list(runs)
    cols = st.columns([2, 5])
    run = cols[0].selectbox("Run", names, bind=URL, key=f"{PREFIX}.gantt_run")
    requests = runs[run].result.requests
    end = float(requests["arrival_time_s"].max()) if len(requests) else 0.0
    start, stop = cols[1].slider("Arrivals in (s)", 0.0, max(end, 0.1), (0.0, min(5.0, max(end, 0.1))), step=0.1,
                                 bind=URL, key=f"{PREFIX}.gantt_window")
    chart("gantt", (run, start, stop), lambda: serving.gantt(requests, start, stop + 1e-9))


def request_table(runs: dict[str, data.Run]) -> None:
    st.subheader("Requests")
    requests = pd.concat([run.result.requests.assign(run=name) for name, run in runs.items()], ignore_index=True)
    shown = requests[["run", "request_id", "arrival_time_s", "prompt_len", "output_len", "ttft_s", "tpot_s",
                      "e2e_s", "num_preemptions", "state", "reason"]]
    for c in ("ttft_s", "tpot_s", "e2e_s"):
        shown = shown.assign(**{c: shown[c] * 1e3}).rename(columns={c: c.removesuffix("_s") + " (ms)"})
    st.dataframe(shown, height=320, hide_index=True)
    cols = st.columns(3)
    cols[0].download_button("steps.parquet", lambda: _parquet(pd.concat([r.result.steps.assign(run=n)
                                                                         for n, r in runs.items()])),
                            file_name="steps.parquet", mime="application/vnd.apache.parquet", on_click="ignore",
                            key=f"{PREFIX}.dl_steps")
    cols[1].download_button("requests.csv", lambda: requests.to_csv(index=False), file_name="requests.csv",
                            mime="text/csv", on_click="ignore", key=f"{PREFIX}.dl_requests")
    cols[2].download_button(
        "summary.csv", lambda: tables.summary_frame({n: r.summary for n, r in runs.items()}).to_csv(),
        file_name="summary.csv", mime="text/csv", on_click="ignore", key=f"{PREFIX}.dl_summary")


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return buf.getvalue()


if __name__ == "__main__":
    render()
