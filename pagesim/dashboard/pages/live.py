"""Sim vs Live: a live GPU run against the simulator's prediction of the same trace."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pagesim import live_targets
from pagesim.dashboard import cached, figures, tables, widgets
from pagesim.dashboard.widgets import URL
from pagesim.dashboard.live_runs import (RUN_FILES, VALIDATION_FILES, LiveRun, card, find_live_runs, is_validated,
                                        live_root, newest_run)
from pagesim.errors import UserError
from pagesim.metrics import summarize

PREFIX = "live"


def render() -> None:
    st.title("Sim vs Live")
    with widgets.url_settings(PREFIX, known=("card", "run", "partner", "metric")):
        render_page()


def render_page() -> None:
    st.caption("A trace replayed on a real GPU by the live engine (`python -m pagesim live`) and checked with "
               "`python -m pagesim validate`: the cost model's step durations against the measured ones, the "
               "scheduler's decisions in lockstep, and a free-running simulation's latencies against the live run's.")
    run = choose_run()
    if run is None:
        return
    describe(run)
    other = choose_partner(run)
    if other is not None:
        side_by_side(run, other)
    if run.validated:
        show_validation(run)
    else:
        st.warning(f"{run.name} has not been validated yet: run `python -m pagesim validate {run.path}` to compare "
                   f"it with the simulator (it writes {', '.join(VALIDATION_FILES)}). The live run alone:")
        show_live_only(run)


NONE = "(none)"
ANY_CARD = "any GPU"
PARTNER_FOR = f"{PREFIX}.partner_for"  # the run the partner was last chosen for


def choose_partner(run: LiveRun) -> LiveRun | None:
    """A second committed live run to show beside the first (the paged / contiguous-max pair)."""
    others = [p for p in find_live_runs() if p.name != run.name]
    if not others:
        return None
    names = [NONE, *(p.name for p in others)]
    paired = _pair_of(run.name, names)
    key = f"{PREFIX}.partner"
    if st.session_state.get(PARTNER_FOR, run.name) != run.name or st.session_state.get(key, paired) not in names:
        st.session_state[key] = paired  # another run was chosen: its own partner, not the last run's
    st.session_state[PARTNER_FOR] = run.name
    # the default only while the session holds no value (Streamlit warns when a widget gets both)
    default = {} if key in st.session_state else {"index": names.index(paired)}
    name = st.sidebar.selectbox("Side by side with", names, bind=URL, key=key, **default,
                                help="another live run of the same trace, e.g. the contiguous baseline of a paged run")
    if name == NONE:
        return None
    path = next(p for p in others if p.name == name)
    try:
        return cached.live_run(str(path), max(f.stat().st_mtime for f in path.iterdir()))
    except UserError as exc:
        st.error(str(exc))
        return None


PAIR_LAYOUTS = ("-paged", "-contiguous-max")


def _pair_of(name: str, names: list[str]) -> str:
    """pair-X-paged[-ROUND] and pair-X-contiguous-max[-ROUND] go together by default (the same round's two
    layouts: pair-conv-paged-r14 with pair-conv-contiguous-max-r14); other runs stand alone."""
    if name.startswith("pair-"):
        for layout, other_layout in (PAIR_LAYOUTS, PAIR_LAYOUTS[::-1]):
            other = name.replace(layout, other_layout, 1)
            if layout in name and other in names:
                return other
    return NONE


def side_by_side(run: LiveRun, other: LiveRun) -> None:
    cards = card(run.summary), card(other.summary)
    st.subheader(f"Side by side: {run.name} ({cards[0]}) and {other.name} ({cards[1]}), both live")
    if cards[0] != cards[1]:
        st.warning(f"{run.name} was recorded on an {cards[0]} and {other.name} on an {cards[1]}: their step times and "
                   "latencies differ by the GPU as well as by the runs' settings. The same round's partner (same card) "
                   "is chosen by default.", icon=":material/memory:")
    steps = {run.name: run.steps, other.name: other.steps}
    requests = {run.name: run.requests, other.name: other.requests}
    cols = st.columns(2)
    for col, (name, s) in zip(cols, steps.items()):
        col.plotly_chart(figures.memory_over_time({name: s}), key=f"{PREFIX}.pair_memory_{name}")
    st.plotly_chart(figures.latency_cdfs(requests), key=f"{PREFIX}.pair_cdf")
    widgets.headline_dataframe(tables.headline_table({r.name: r.summary.get("runs", {}).get("live", {}) for r in (run, other)}))


def choose_run() -> LiveRun | None:
    sb = st.sidebar
    sb.subheader("Live run")
    runs = find_live_runs()
    upload = sb.file_uploader("…or upload a run directory as a .zip", type=["zip"], key=f"{PREFIX}.upload")
    try:
        if upload is not None:
            return cached.zipped_live_run(upload.name, upload.getvalue())
        if not runs:
            st.info(f"No live GPU runs are committed yet: {live_root()} holds no run directory. A run directory "
                    f"comes from `python -m pagesim live TRACE --out results/live/NAME` on a GPU machine "
                    f"({', '.join(RUN_FILES)}), then `python -m pagesim validate results/live/NAME` "
                    f"({', '.join(VALIDATION_FILES)}). You can also upload one as a zip in the sidebar.")
            return None
        cards = {p.name: cached.live_run_card(str(p), (p / "summary.json").stat().st_mtime) for p in runs}
        shown = sb.radio("Recorded on", [ANY_CARD, *sorted(set(cards.values()))], horizontal=True, bind=URL,
                         key=f"{PREFIX}.card", help="the GPU of each run's summary.json (rounds 31 and 34's -rNNh runs "
                                                    "on an H100, the others on an H200)")
        runs = [p for p in runs if shown in (ANY_CARD, cards[p.name])]
        labels = {p.name: p.name + ("" if is_validated(p) else " (not validated)") for p in runs}
        key = f"{PREFIX}.run"
        # opens on the newest run (live_runs.newest_run: by the date of the commit it was recorded at), not the list's
        # first, which is the oldest by name; only while the session holds no choice (Streamlit warns at both)
        default = {} if key in st.session_state else {"index": list(labels).index(newest_run(
            runs, {p.name: cached.live_run_commit(str(p), (p / "summary.json").stat().st_mtime) for p in runs},
            cached.live_commit_times(str(live_root()))).name)}
        name = sb.selectbox(f"Run (results/live/, {len(runs)})", list(labels), format_func=labels.get, bind=URL,
                            key=key, help="opens on the newest run: the one recorded at the latest commit", **default)
        sb.caption(f"{name}: recorded on an {cards[name]}")
        path = next(p for p in runs if p.name == name)
        return cached.live_run(str(path), max(f.stat().st_mtime for f in path.iterdir()))
    except UserError as exc:
        st.error(str(exc))
        return None


def describe(run: LiveRun) -> None:
    s = run.summary
    trace, config = s.get("trace", {}), s.get("config", {})
    hardware = s.get("environment", s.get("hardware", {}))
    span, blocks = trace.get("span_s"), config.get("resolved_num_gpu_blocks", config.get("num_gpu_blocks"))
    # a summary.json without them (an older run, a hand-made zip) shows "?", not a formatting traceback
    span = f"{span:.0f} s" if isinstance(span, (int, float)) else "? s"
    blocks = f"{blocks:,}" if isinstance(blocks, int) else "?"
    st.markdown(f"**{run.name}**: trace {trace.get('name', '?')} ({trace.get('rows', '?')} requests, "
                f"{span}) · {config.get('model', '?')} on "
                f"{hardware.get('gpu', config.get('gpu', '?'))} · block_size {config.get('block_size', '?')} · "
                f"{blocks} GPU blocks · "
                f"{s.get('run_name', config.get('kv_layout', ''))}")
    for text in s.get("warnings") or []:  # what `python -m pagesim live` printed as it ran (summary.json's warnings)
        st.warning(f"The live run warned: {text}", icon=":material/warning:")
    with st.expander("Config, trace, hardware and software"):
        st.json({k: v for k, v in s.items() if k != "runs"}, expanded=False)


def show_validation(run: LiveRun) -> None:
    st.subheader("Validation")
    v = run.validation
    for text in v.get("warnings", []):  # e.g. a profile timed on another prefill kernel than the run's
        st.warning(text)
    targets = live_targets.target_table(v)
    st.markdown("Targets of live mode: " + live_targets.verdict_line(targets))
    cols = st.columns(2)
    with cols[0]:
        st.dataframe(targets, hide_index=True, height="content")
    with cols[1]:
        st.markdown("Step level and decisions (lockstep)")
        st.dataframe(tables.step_level_table(v), hide_index=True, height="content")
        kind = v.get("cost_model", {}).get("kind")
        if kind:
            st.caption(f"cost model: {kind}" + (f" ({v['cost_model']['source']})" if v["cost_model"].get("source") else ""))
    # the whole width: with the lockstep, ensemble and replicate columns it is 12-15 columns wide, and in half the
    # page the ensemble's band and "live in band" sat beyond its right edge
    st.markdown("Request level (free-running simulation)")
    st.dataframe(tables.request_level_table(v), hide_index=True, height="content",
                 column_config={"relative error": st.column_config.NumberColumn(format="percent"),
                                "live": st.column_config.NumberColumn(format="%.4g"),
                                "simulated": st.column_config.NumberColumn(format="%.4g"),
                                tables.LOCKSTEP_COLUMNS[0]: st.column_config.NumberColumn(format="%.4g"),
                                tables.LOCKSTEP_COLUMNS[1]: st.column_config.NumberColumn(format="percent"),
                                "ensemble median": st.column_config.NumberColumn(format="%.4g"),
                                "ensemble error": st.column_config.NumberColumn(format="percent"),
                                "band low": st.column_config.NumberColumn(format="%.4g"),
                                "band high": st.column_config.NumberColumn(format="%.4g"),
                                "replicate live": st.column_config.NumberColumn(format="%.4g"),
                                "live vs live": st.column_config.NumberColumn(format="percent"),
                                tables.SENSITIVITY_COLUMN: st.column_config.NumberColumn(format="%.1f")})
    ens = v.get("request_level_ensemble")
    if ens:
        st.caption(f"ensemble: the median of {ens['n']} free simulations whose step times vary as the GPU's do "
                   f"(log-normal sigma {ens['step_sigma']:g} per step, {ens['level_sigma']:g} per run); band: "
                   f"their p{ens['band_percentiles'][0]:g}-p{ens['band_percentiles'][1]:g}")
    sens = v.get("request_level_sensitivity")
    if sens and "span_points" in sens:
        flagged = ", ".join(sens["timing_sensitive"]) or "none"
        levels = sens["levels"]
        st.caption(f"{tables.SENSITIVITY_COLUMN}: how far the figure moves, in points of the model's own, over "
                   f"{len(levels)} free simulations with every predicted step time times {min(levels):g} to "
                   f"{max(levels):g}; timing-sensitive (a span wider than the target: "
                   f"{', '.join(f'{200 * t:g} points for {p}' for p, t in live_targets.PERCENTILES.items())}): "
                   f"{flagged}: there one free simulation is one draw, and the ensemble's median is the prediction "
                   "(the targets above judge it where the validation ran an ensemble)")
    if v.get("live_repeatability"):
        st.caption(f"replicate: {v['live_repeatability']['replicate']} (another recording of this window: "
                   "an error within 'live vs live' cannot be told from the engine's own run-to-run spread)")

    st.subheader("Step durations")
    cols = st.columns(2)
    with cols[0]:
        st.plotly_chart(figures.step_time_scatter(run.validation_steps), key=f"{PREFIX}.scatter")
    with cols[1]:
        st.plotly_chart(figures.step_error_histogram(run.validation_steps), key=f"{PREFIX}.hist")

    if v.get("step_level", {}).get("worst_steps"):
        st.markdown("The ten worst steps (absolute percentage error) and their features")
        st.dataframe(tables.worst_steps_table(v), hide_index=True,
                     column_config={"APE": st.column_config.NumberColumn(format="percent"),
                                    "measured (ms)": st.column_config.NumberColumn(format="%.3f"),
                                    "predicted (ms)": st.column_config.NumberColumn(format="%.3f")})

    st.subheader("Memory and running requests")
    st.plotly_chart(figures.live_vs_sim_over_time(run.steps, run.sim_steps), key=f"{PREFIX}.time")

    st.subheader("Request latencies")
    st.plotly_chart(figures.latency_cdfs({"live": run.requests, "simulated": run.sim_requests},
                                         run.validation.get("request_level_ensemble", {}).get("metrics")),
                    key=f"{PREFIX}.cdf")
    metric = st.radio("Per request", list(figures.LATENCIES), format_func=figures.LATENCIES.get, horizontal=True,
                      index=2, bind=URL, key=f"{PREFIX}.metric")
    st.plotly_chart(figures.request_latency_scatter(run.requests, run.sim_requests, metric), key=f"{PREFIX}.per_request")
    summaries = {"live": run.summary.get("runs", {}).get("live", {}), "simulated": simulated_summary(run)}
    widgets.headline_dataframe(tables.headline_table(summaries))


def show_live_only(run: LiveRun) -> None:
    st.plotly_chart(figures.memory_over_time({"live": run.steps}), key=f"{PREFIX}.memory")
    st.plotly_chart(figures.requests_over_time({"live": run.steps}), key=f"{PREFIX}.requests")
    st.plotly_chart(figures.latency_cdfs({"live": run.requests}), key=f"{PREFIX}.cdf")
    widgets.headline_dataframe(tables.headline_table({"live": run.summary.get("runs", {}).get("live", {})}))


def simulated_summary(run: LiveRun) -> dict:
    steps = run.sim_steps
    return summarize(steps, run.sim_requests, leaked_blocks=0, sim_wall_s=float("nan"),
                     prefix_cache_queries=int(steps["prefix_cache_queries"].sum()),
                     prefix_cache_hits=int(steps["prefix_cache_hits"].sum()))


if __name__ == "__main__":
    render()
