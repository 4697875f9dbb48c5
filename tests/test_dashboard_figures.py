"""The dashboard without Streamlit: figure builders, tables, trace and result loaders, and the sweep.

Figures are checked by what they draw (trace names, counts, values), on small real runs of the
simulator and on hand-made frames where an exact expectation is needed.
"""

from __future__ import annotations

import io
import shutil
import zipfile

import numpy as np
import pandas as pd
import pytest

from pagesim.accounting import CATEGORIES
from pagesim.config import Config
from pagesim.dashboard import (block_map, data, figures, host_tier, kernel_results, live_runs, palette, serving, sweep,
                                 tables, trace_chart)
from pagesim.errors import UserError
from pagesim.recorder import BlockSnapshot
from pagesim.specs import GIB
from pagesim.traces import TraceError, load_trace
from pagesim.traces.synth import synthesize
from tests.dashboard_fixtures import kernel_result, write_kernel_result, write_live_run
from tests.test_app import title_of

BLOCKS = 600  # above max_model_len / block_size = 512, so the max baseline admits one request at a time
CATEGORY_LABELS = ["used", "reserved", "internal fragmentation", "external fragmentation", "cached",
                   "free while requests wait", "free"]
N = len(CATEGORY_LABELS)


@pytest.fixture(scope="module")
def runs():
    """Paged and the max baseline on a small ShareGPT-like trace, tight enough to preempt and queue."""
    trace = synthesize("sharegpt", num_requests=120, rate=20.0, seed=3)
    return data.replay(trace, Config(num_gpu_blocks=BLOCKS), ["max"], num_snapshots=10)


def steps_of(runs):
    return {name: run.result.steps for name, run in runs.items()}


# ---- the trace -------------------------------------------------------------------------------------------
def test_trace_overview_shows_arrival_rate_and_length_distributions():
    """Three Vega-Lite specs (the first chart a session draws): arrival rate, prompt and output lengths,
    binned here, in the palette's trace colour."""
    trace = synthesize("sharegpt", num_requests=400, rate=8.0, seed=0)
    specs = trace_chart.trace_overview(trace.df, num_bins=20)
    assert [s["title"] for s in specs] == ["arrivals (req/s)", "prompt length (tokens)", "output length (tokens)"]
    assert {s["mark"]["color"] for s in specs} == {palette.TRACE}
    rows = [next(iter(s["datasets"].values())) for s in specs]
    assert [len(r) for r in rows] == [20, 20, 20]
    span = trace.df["arrival_time_s"].max()
    assert sum(r["value"] for r in rows[0]) * span / 20 == pytest.approx(400)  # req/s x bin width = requests
    assert sum(r["value"] for r in rows[1]) == 400 and rows[1][0]["start"] == trace.df["prompt_len"].min()
    assert rows[2][-1]["end"] == trace.df["output_len"].max()


def test_trace_overview_of_requests_all_arriving_at_once_shows_requests_not_a_rate():
    """Was: a trace whose requests all arrive at t = 0 (one request, say) has no span, and the arrivals panel showed
    60,000,000,000 req/s (the requests over a bin of 1e-9 s / 60)."""
    frame = pd.DataFrame({"request_id": ["a", "b", "c"], "arrival_time_s": [0.0] * 3, "prompt_len": [10, 20, 30],
                          "output_len": [5, 5, 5]})
    specs = trace_chart.trace_overview(frame, num_bins=20)
    assert specs[0]["title"] == "arrivals (all at t = 0)" and specs[0]["encoding"]["y"]["title"] == "requests"
    assert [r["value"] for r in next(iter(specs[0]["datasets"].values()))] == [3.0]


# ---- memory and requests over time -----------------------------------------------------------------
def test_memory_figure_stacks_the_six_categories_in_one_panel_per_run(runs):
    fig = figures.memory_over_time(steps_of(runs))
    assert [t.name for t in fig.data] == CATEGORY_LABELS * 2
    assert {t.stackgroup for t in fig.data[:N]} == {"memory-1"} and {t.stackgroup for t in fig.data[N:]} == {"memory-2"}
    assert [t.showlegend for t in fig.data] == [True] * N + [False] * N  # one legend entry per category
    assert fig.data[N].xaxis == "x2" and fig.layout.xaxis.matches == "x2"  # panels share the time axis
    assert [a.text for a in fig.layout.annotations] == ["paged", "contiguous-max"]


def test_memory_figure_stacks_to_the_whole_cache_at_every_point(runs):
    fig = figures.memory_over_time(steps_of(runs))
    for run in range(2):
        total = sum(np.asarray(t.y, dtype=float) for t in fig.data[N * run: N * run + N])
        assert np.allclose(total, 100.0), "memory categories must add up to 100% of KV slots"


def test_free_memory_while_requests_wait_is_its_own_layer(runs):
    """The max baseline queues requests with memory free (its next reservation and the watermark do not
    fit): that free memory is drawn apart, and the watermark is drawn as a line."""
    fig = figures.memory_over_time(steps_of(runs), max_points=10**7, watermark=0.01)
    waiting = {run: np.asarray(fig.data[N * i + N - 2].y, dtype=float) for i, run in enumerate(runs)}
    steps = steps_of(runs)["contiguous-max"]
    queued = steps["num_waiting"].to_numpy() > 0
    assert queued.any() and np.allclose(waiting["contiguous-max"][~queued], 0)
    free = steps["free"].to_numpy() / steps[list(CATEGORIES)].to_numpy().sum(axis=1)  # the cache's free fraction
    assert np.allclose(waiting["contiguous-max"][queued], free[queued] * 100)
    assert any(a.text and "watermark: 1%" in a.text for a in fig.layout.annotations)


def test_runs_can_have_their_own_time_axes_and_the_slider_time_is_marked(runs):
    steps = steps_of(runs)
    end = {run: float(s["time_s"].iloc[-1] + s["duration_s"].iloc[-1]) for run, s in steps.items()}
    assert end["contiguous-max"] > end["paged"]
    t = (end["paged"] + end["contiguous-max"]) / 2  # after paged finished, while the baseline still runs
    for build in (figures.memory_over_time, figures.requests_over_time):
        own = build(steps, time_s=t, shared_time=False)
        assert own.layout.xaxis.matches is None, "per-run time axes are independent"
        marks = [sh for sh in own.layout.shapes if sh.type == "line" and sh.x0 == sh.x1]
        assert [m.x0 for m in marks] == [t], "one marker, only in the run still running at t"
        assert marks[0].xref.startswith("x2") or marks[0].xref.startswith("x3")


def test_long_step_tables_are_downsampled_to_time_buckets(runs):
    steps = runs["contiguous-max"].result.steps
    assert len(steps) > 300
    fig = figures.memory_over_time({"contiguous-max": steps}, max_points=300)
    assert all(len(t.x) <= 300 for t in fig.data)


def test_time_buckets_are_duration_weighted_means_and_short_tables_pass_through():
    steps = pd.DataFrame({"time_s": [0.0, 1.0, 1.5, 3.0], "duration_s": [1.0, 0.5, 1.5, 1.0],
                          "num_running": [2.0, 4.0, 8.0, 1.0], "num_preemptions": [0, 1, 2, 0]})
    assert figures.time_buckets(steps, ["num_running"], max_points=10).equals(steps[["time_s", "num_running"]])
    b = figures.time_buckets(steps, ["num_running"], max_points=2, sums=["num_preemptions"])
    # bucket 0 = t in [0, 1.5): steps 0 and 1; bucket 1: steps 2 and 3
    assert b["time_s"].tolist() == [0.0, 1.5]
    assert b["num_running"].tolist() == pytest.approx([(2 * 1 + 4 * 0.5) / 1.5, (8 * 1.5 + 1 * 1) / 2.5])
    assert b["num_preemptions"].tolist() == [1, 2]


def test_time_series_break_their_lines_where_the_engine_sat_idle(runs):
    """An idle period (no step from one step's end to the next step's start, longer than a bucket's time) is a gap in
    every time-series chart: NaN rows at its start and end, so plotly breaks the line (connectgaps off) and a stacked
    area drops out, instead of a straight line across the idle time. Back-to-back steps draw unbroken. Was: the
    points on either side of an idle minute joined by a line."""
    from pagesim.dashboard import serving

    steps = steps_of(runs)["paged"].iloc[:40].copy()
    shift = np.where(np.arange(len(steps)) >= 20, 60.0, 0.0)  # a minute idle after the 20th step
    steps["time_s"] = steps["time_s"] + shift
    gap_start = float(steps["time_s"].iloc[19] + steps["duration_s"].iloc[19])
    gap_end = float(steps["time_s"].iloc[20])
    for max_points in (1000, 10):  # the table itself and its time buckets
        b = figures.time_buckets(steps, ["num_running"], max_points, sums=["num_preemptions"])
        nan = b[b["num_running"].isna()]
        assert nan["time_s"].tolist() == [gap_start, gap_end] and nan["num_preemptions"].isna().all(), max_points
        after = b.index[b["time_s"] == gap_end]
        assert b.loc[after, "num_running"].isna().tolist() == [True, False], "the gap's end comes before its step"
    built = [figures.memory_over_time({"paged": steps}), figures.requests_over_time({"paged": steps}),
             serving.kv_cache_usage({"paged": steps}), serving.queues({"paged": steps}),
             figures.live_vs_sim_over_time(steps, steps)]
    for fig in built:
        for trace in fig.data:
            x, y = np.asarray(trace.x, dtype=float), np.asarray(trace.y, dtype=float)
            assert np.isnan(y[(x == gap_start)]).all() and np.isnan(y[x > gap_start][0]), (title_of(fig), trace.name)
            assert not trace.connectgaps
    back_to_back = steps_of(runs)["paged"].iloc[:20]
    assert not figures.time_buckets(back_to_back, ["num_running"])["num_running"].isna().any()


def test_requests_figure_marks_the_steps_that_preempted(runs):
    steps = steps_of(runs)
    assert steps["paged"]["num_preemptions"].sum() > 0, "the fixture should preempt"
    total = steps["paged"]["num_preemptions"].sum()
    whole = figures.requests_over_time(steps, max_points=10**7)
    assert [t.name for t in whole.data] == ["running", "waiting", "swapped", "preemptions (cumulative)"] * 2
    cumulative = np.asarray(whole.data[3].y, dtype=float)
    assert cumulative[-1] == total and np.all(np.diff(cumulative) >= 0)
    bucketed = figures.requests_over_time(steps, max_points=100).data[3]
    assert len(bucketed.x) <= 100 and bucketed.y[-1] == total  # buckets lose no preemption
    assert whole.layout.annotations[0].text == f"paged: {total:,} preemptions"


# ---- block map (block_map.py) ---
def frame(request_id, fill, ref_cnt, cached):
    return pd.DataFrame({"block_id": range(len(request_id)), "request_id": request_id, "fill": fill,
                         "ref_cnt": ref_cnt, "cached": cached})


def test_block_codes_tell_free_cached_shared_owned_and_reserved_apart():
    f = frame(["", "", "a", "a", "a", "b"], [0, 0, 16, 16, 0, 5], [0, 0, 2, 1, 1, 1],
              [False, True, False, False, False, False])
    codes, colors = block_map.block_codes(f)
    assert codes[0] == 0 and codes[1] == 1 and codes[2] == 2  # free, cached, shared prefix
    assert codes[3] >= 3 and codes[4] == codes[3] + 1  # a's filled block, a's reserved-ahead block (pale)
    assert codes[5] >= 3 and colors[codes[5]] != colors[codes[3]]
    again, again_colors = block_map.block_codes(frame(["b", "a"], [3, 3], [1, 1], [False, False]))
    assert again_colors[again[1]] == colors[codes[3]], "a request keeps its colour from one snapshot to the next"
    by_state, state_colors = block_map.block_codes(f, "state")
    assert [state_colors[c] for c in by_state] == [block_map.FREE, block_map.CACHED, palette.SHARED, block_map.USED,
                                                   block_map.RESERVED, block_map.USED]


def test_requests_that_run_together_get_different_colours():
    colors = [palette.request_color(i) for i in range(300)]
    for start in range(0, 300 - 32):
        assert len(set(colors[start:start + 32])) == 32
    assert block_map.block_codes(frame(["7", "8"], [1, 1], [1, 1], [False, False]))[1][3] == palette.request_color(7)


def test_state_colours_are_the_same_everywhere_and_unlike_run_colours():
    states = {color for _, color in palette.STATES.values()}
    assert {block_map.FREE, block_map.CACHED, block_map.USED, block_map.RESERVED} <= states
    assert not states & set(palette.MORE_RUNS) and not states & set(palette.RUNS.values())
    assert palette.run_color("contiguous-max") != palette.run_color("paged")


def test_block_map_draws_one_grid_per_run_64_wide_with_a_legend(runs):
    snaps = {name: run.result.snapshots[5].to_frame() for name, run in runs.items()}
    fig = block_map.block_maps(snaps, block_size=16, time_s=runs["paged"].result.snapshots[5].time_s)
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    assert [t.name for t in heatmaps] == ["blocks: paged", "blocks: contiguous-max"]
    for h in heatmaps:
        z = np.asarray(h.z, dtype=float)
        assert z.shape == (-(-BLOCKS // 64), 64)
        assert np.isnan(z).sum() == z.size - BLOCKS  # padding after the last block only
    assert [t.name for t in fig.data if t.type == "scatter"] == list(block_map.REQUEST_LEGEND)
    owned = (snaps["contiguous-max"]["request_id"] != "").sum()
    z = np.asarray(heatmaps[1].z, dtype=float).ravel()
    assert (z[~np.isnan(z)] >= 3).sum() == owned


def test_contiguous_block_map_shows_each_request_as_one_run_of_blocks(runs):
    f = runs["contiguous-max"].result.snapshots[5].to_frame()
    owned = f[f["request_id"] != ""]
    assert len(owned)
    for _, blocks in owned.groupby("request_id"):
        ids = blocks["block_id"].to_numpy()
        assert (np.diff(ids) == 1).all()


def test_block_map_caps_the_blocks_drawn():
    n = 1000
    snap = BlockSnapshot(0.0, ["r"], np.zeros(n, dtype=np.int32), np.full(n, 16, dtype=np.int16),
                         np.ones(n, dtype=np.int16), np.zeros(n, dtype=bool))
    fig = block_map.block_maps({"paged": snap.to_frame()}, 16, max_blocks=256)
    assert np.asarray(fig.data[0].z).shape == (4, 64)
    assert "first 256 drawn" in fig.layout.annotations[0].text


def test_shared_and_cached_blocks_appear_with_prefix_caching():
    trace = synthesize("kshot", num_requests=60, rate=20.0, seed=0)
    result = data.replay(trace, Config(num_gpu_blocks=800, enable_prefix_caching=True), [], num_snapshots=8)
    codes = np.concatenate([block_map.block_codes(s.to_frame())[0] for s in result["paged"].result.snapshots])
    assert (codes == 2).any(), "shared prefix blocks (ref_cnt > 1) must get their own colour"
    assert (codes == 1).any(), "free blocks holding a cached prefix must get their own colour"


# ---- latencies -----------------------------------------------------------------------------------------
def test_latency_cdfs_have_one_line_per_run_and_metric(runs):
    fig = figures.latency_cdfs({n: r.result.requests for n, r in runs.items()})
    assert [t.name for t in fig.data] == ["paged"] * 3 + ["contiguous-max"] * 3
    assert [t.xaxis for t in fig.data[:3]] == ["x", "x2", "x3"]
    for t in fig.data:
        assert t.y[-1] == pytest.approx(1.0) and np.all(np.diff(t.x) >= 0)
    finished = runs["paged"].result.requests.query("state == 'finished'")
    assert len(fig.data[0].x) == finished["ttft_s"].notna().sum()


def test_ecdf_thins_long_samples_but_keeps_the_extremes():
    x, p = figures.ecdf(np.arange(10_000)[::-1], max_points=100)
    assert len(x) == 100 and x[0] == 0 and x[-1] == 9999 and p[-1] == 1.0


# ---- sweep ---------------------------------------------------------------------------------------------
def test_token_state_fraction_falls_as_block_size_grows_on_the_sharegpt_like_trace(tmp_path):
    """PagedAttention (SOSP 2023, §7.2): on ShareGPT-like lengths larger blocks waste more of each
    request's last block. The default sweep, run directly on the bundled trace (grid helpers: test_sweep_page.py)."""
    trace = load_trace(data.default_trace_path())
    assert "sharegpt" in trace.name
    points = sweep.grid_points({"block_size": [16, 32, 64, 128, 256], "kv_cache_gib": [1.0]})
    result = sweep.table(sweep.run(trace, sweep.base_options(Config()), points, tmp_path), points)
    tsf = result.set_index("block_size")["token_state_fraction"]
    assert tsf.is_monotonic_decreasing and tsf.is_unique, f"token-state fraction by block size:\n{tsf}"
    assert tsf[16] > 0.95 and tsf[256] < 0.9


def test_sweep_figure_has_a_line_per_series_in_each_panel():
    results = pd.DataFrame({"block_size": [16, 32, 16, 32], "preemption_mode": ["recompute"] * 2 + ["swap"] * 2,
                            **{k: [0.9, 0.8, 0.85, 0.75] for k in figures.SWEEP_PANELS}})
    fig = figures.sweep_lines(results, "block_size", ["preemption_mode"])
    assert [t.name for t in fig.data] == ["preemption_mode=recompute"] * 4 + ["preemption_mode=swap"] * 4
    assert list(fig.data[0].x) == [16, 32]
    assert fig.layout.xaxis.type == "log"
    assert fig.layout.yaxis3.type == "log" and fig.layout.yaxis4.type == "log", "latencies on log axes"


def test_sweep_lines_are_coloured_by_layout_and_dashed_by_the_other_setting():
    results = pd.DataFrame({"block_size": [16, 32] * 4, "layout": ["paged"] * 4 + ["contiguous-max"] * 4,
                            "preemption_mode": (["recompute"] * 2 + ["swap"] * 2) * 2,
                            **{k: [0.9, 0.8, 0.85, 0.75, 0.5, 0.4, 0.45, 0.35] for k in figures.SWEEP_PANELS}})
    fig = figures.sweep_lines(results, "block_size", ["layout", "preemption_mode"])
    first = {t.name: t for t in fig.data if t.showlegend}
    assert list(first) == ["paged, preemption_mode=recompute", "paged, preemption_mode=swap",
                           "contiguous-max, preemption_mode=recompute", "contiguous-max, preemption_mode=swap"]
    colors = [t.line.color for t in first.values()]
    dashes = [t.line.dash for t in first.values()]
    assert colors == [palette.run_color("paged")] * 2 + [palette.run_color("contiguous-max")] * 2
    assert dashes[0] == dashes[2] != dashes[1] == dashes[3]
    assert len({(c, d) for c, d in zip(colors, dashes)}) == 4, "no two series look alike"


def test_durations_read_in_ms_below_a_second_and_log_ticks_once_per_decade():
    assert [figures.duration_label(v) for v in (0.00038, 0.0066, 0.084, 0.5, 84.94)] == \
        ["0.38 ms", "6.6 ms", "84 ms", "500 ms", "84.9 s"]
    fig = figures.latency_cdfs({"paged": pd.DataFrame({"state": ["finished"] * 3, "ttft_s": [0.003, 0.05, 2.0],
                                                       "tpot_s": [0.004] * 3, "e2e_s": [1.0, 2.0, 3.0]})})
    assert list(fig.layout.xaxis.ticktext) == ["1 ms", "10 ms", "100 ms", "1 s", "10 s"]
    assert fig.layout.xaxis.type == "log"


# ---- tables --------------------------------------------------------------------------------------------
def test_headline_table_has_the_figures_the_replay_page_promises(runs):
    table = tables.headline_table({n: r.summary for n, r in runs.items()})
    assert list(table.index) == ["paged", "contiguous-max"]
    for column in ("throughput (req/s)", "TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)", "TPOT p99 (ms)",
                   "E2E p50 (ms)", "E2E p99 (ms)", "preemptions", "token-state fraction", "peak running",
                   "mean running"):
        assert column in table
    s = runs["paged"].summary
    assert table.at["paged", "TTFT p99 (ms)"] == pytest.approx(s["ttft_s"]["p99"] * 1e3)
    assert table.at["paged", "token-state fraction"] > table.at["contiguous-max", "token-state fraction"]


def test_summary_frame_flattens_every_figure(runs):
    f = tables.summary_frame({n: r.summary for n, r in runs.items()})
    assert "ttft_s.p99" in f and "leaked_blocks" in f and list(f.index) == ["paged", "contiguous-max"]


# ---- traces --------------------------------------------------------------------------------------------
BAD_AZURE = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,abc,12\n"


def test_a_malformed_upload_names_the_uploaded_file_row_and_field():
    with pytest.raises(TraceError) as err:
        data.load_upload("conv.csv", BAD_AZURE)
    message = str(err.value)
    assert message.startswith("conv.csv, line 3, field 'ContextTokens': expected"), message
    assert "pagesim-upload" not in message, "the temporary folder must not leak into the message"


def test_an_upload_loads_under_its_own_name():
    good = BAD_AZURE.replace(b"abc", b"100")
    trace = data.load_upload("../../etc/conv.csv", good)
    assert trace.name == "conv" and len(trace.df) == 2


def test_trace_fingerprint_follows_content():
    a, b = synthesize("sharegpt", num_requests=50, seed=1), synthesize("sharegpt", num_requests=50, seed=1)
    assert data.trace_fingerprint(a) == data.trace_fingerprint(b)
    b.df.loc[3, "output_len"] += 1
    assert data.trace_fingerprint(a) != data.trace_fingerprint(b)
    k = synthesize("kshot", num_requests=20, seed=1)  # list-valued prefix_hash_ids column
    assert len(data.trace_fingerprint(k)) == 16


def test_the_sharegpt_like_bundled_trace_comes_first():
    paths = data.bundled_traces()
    assert paths and paths[0] == data.default_trace_path()


def test_replay_reports_progress_up_to_done():
    seen = []
    data.replay(synthesize("sharegpt", num_requests=30, seed=2), Config(num_gpu_blocks=200), ["oracle"],
                num_snapshots=4, progress=lambda f, text: seen.append((f, text)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(seen) < 200
    assert any("contiguous-oracle (2/2)" in t for _, t in seen)


# ---- live runs -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live_dir(tmp_path_factory):
    return write_live_run(tmp_path_factory.mktemp("live") / "fixture-run")


def test_live_run_directory_loads_with_string_ids(live_dir):
    run = live_runs.load_live_run(live_dir)
    assert run.name == "fixture-run" and len(run.validation_steps) == len(run.steps)
    assert (run.requests["parent_id"] == "").all() and run.requests["request_id"].dtype != np.int64
    assert live_runs.find_live_runs(live_dir.parent) == [live_dir]


def test_live_run_missing_files_are_named(live_dir, tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(UserError, match="missing steps.parquet, requests.parquet"):
        live_runs.load_live_run(tmp_path)


def test_a_live_run_not_yet_validated_loads_without_its_validation_and_lists_last(live_dir, tmp_path):
    fresh, done = tmp_path / "a-fresh", tmp_path / "b-done"
    fresh.mkdir()
    for f in live_runs.RUN_FILES:
        shutil.copy(live_dir / f, fresh / f)
    shutil.copytree(live_dir, done)
    run = live_runs.load_live_run(fresh)
    assert not run.validated and run.sim_steps is None and len(run.steps)
    assert live_runs.load_live_run(done).validated
    assert live_runs.find_live_runs(tmp_path) == [done, fresh]


def test_live_run_zip_is_extracted_and_unsafe_zips_refused(live_dir, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in live_dir.iterdir():
            z.write(f, f"fixture-run/{f.name}")
    root = live_runs.extract_run_zip(buf.getvalue(), tmp_path / "a")
    assert root.name == "fixture-run" and live_runs.load_live_run(root).summary["runs"]["live"]
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("../outside/summary.json", "{}")
    with pytest.raises(UserError, match="outside its folder"):
        live_runs.extract_run_zip(evil.getvalue(), tmp_path / "b")
    with pytest.raises(UserError, match="not a zip"):
        live_runs.extract_run_zip(b"hello", tmp_path / "c")


def test_live_figures_draw_measured_against_predicted(live_dir):
    run = live_runs.load_live_run(live_dir)
    scatter = figures.step_time_scatter(run.validation_steps)
    assert [t.name for t in scatter.data] == ["steps", "y = x"]
    assert len(scatter.data[0].x) == len(run.validation_steps)
    assert scatter.data[1].x[0] == scatter.data[1].y[0] and scatter.data[1].x[1] == scatter.data[1].y[1]
    assert scatter.layout.xaxis.type == "log" and scatter.layout.yaxis.type == "log"
    hist = figures.step_error_histogram(run.validation_steps)
    assert hist.data[0].type == "histogram" and len(hist.data[0].x) == len(run.validation_steps)
    over_time = figures.live_vs_sim_over_time(run.steps, run.sim_steps)
    assert [t.name for t in over_time.data] == ["live", "live", "simulated", "simulated"]
    per_request = figures.request_latency_scatter(run.requests, run.sim_requests, "e2e_s")
    assert len(per_request.data[0].x) == (run.requests["state"] == "finished").sum()
    assert per_request.layout.xaxis.type == "log" and "ms" in " ".join(per_request.layout.xaxis.ticktext)


@pytest.mark.parametrize("path", live_runs.find_live_runs(live_runs.LIVE_DIR), ids=lambda p: p.name)
def test_committed_live_runs_draw(path):
    run = live_runs.load_live_run(path)
    assert run.validated, f"{path} has no validation files"
    figures.step_time_scatter(run.validation_steps)
    figures.step_error_histogram(run.validation_steps)
    over_time = figures.live_vs_sim_over_time(run.steps, run.sim_steps)
    assert all(len(t.x) for t in over_time.data)
    cdfs = figures.latency_cdfs({"live": run.requests, "simulated": run.sim_requests})
    assert all(len(t.x) for t in cdfs.data)
    assert len(tables.request_level_table(run.validation)) and len(tables.step_level_table(run.validation))


def test_validation_tables(live_dir):
    v = live_runs.load_live_run(live_dir).validation
    steps = tables.step_level_table(v)
    assert steps["figure"].tolist()[:3] == ["steps compared", "step duration MAPE", "step duration p90 APE"]
    assert steps["value"].iloc[5] is not None
    req = tables.request_level_table(v)
    assert req["metric"].tolist() == ["TTFT p50 (ms)", "TTFT p99 (ms)", "E2E p50 (ms)", "E2E p99 (ms)"]
    assert req["live"].iloc[0] == pytest.approx(v["request_level"]["ttft_s_p50"]["live"] * 1e3)


def test_the_step_table_shows_the_graph_decode_level_split_when_validate_made_it():
    split = {"level": 0.981, "run_host_share": 0.034, "calibration_host_share": 0.048, "device": 0.995, "host": 0.986}
    rows = dict(tables.step_level_table({"step_level": {"decode_host": split}}).values.tolist())
    assert rows["graph decode: measured / predicted"] == "0.981"
    assert rows["graph decode: host share, live / calibration"] == "3.4% / 4.8%"
    assert rows["graph decode: device part x host part"] == "0.995 x 0.986"
    unknown = {"level": 1.003, "run_host_share": 0.02, "calibration_host_share": None}  # a profile without its rows
    rows = dict(tables.step_level_table({"step_level": {"decode_host": unknown}}).values.tolist())
    assert rows["graph decode: host share, live / calibration"] == "2.0% / unknown"
    assert "graph decode: device part x host part" not in rows
    assert not any("graph decode" in f for f in tables.step_level_table({"step_level": {}})["figure"])


# ---- kernels -------------------------------------------------------------------------------------------
def test_kernel_frames_and_bars_follow_the_bench_schema(tmp_path):
    result = kernel_results.load_kernel_result(write_kernel_result(tmp_path))
    decode = kernel_results.decode_frame(result)
    per_shape = sum(len(v) for v in result["decode"][0]["timings"].values())
    assert len(decode) == 4 * per_shape
    assert set(decode["shape"]) == {"B=1, ctx=32768", "B=16, ctx=4096", "B=64, ctx=4096", "B=256, ctx=1024"}
    assert decode.query("method == 'sdpa'")["vs_sdpa"].eq(1.0).all()
    ours = decode.query("method == 'ours' and mode == 'graph'")
    assert ours["tb_per_s"].tolist() == pytest.approx([4.3 * 0.95] * 4)
    assert kernel_results.primary_mode(decode) == "graph"
    fig = figures.decode_bandwidth_bars(decode, result["ceilings"]["copy_tb_per_s"])
    assert [t.name for t in fig.data] == ["paged (ours)", "paged (ours, tuned config)", "FlashInfer paged",
                                          "gather + SDPA (naive paged)", "SDPA on contiguous K/V (ceiling)"]
    assert all(list(t.x) == list(dict.fromkeys(decode["shape"])) for t in fig.data)
    assert list(fig.data[-1].y) == pytest.approx([4.3] * 4)  # the ceiling bars, graph timings
    assert fig.layout.barmode == "group" and fig.layout.shapes[0].y0 == 4.3 and "graph" in title_of(fig)
    prefill = kernel_results.prefill_frame(result)
    pfig = figures.prefill_flops_bars(prefill, 780.0)
    assert list(pfig.data[0].x) == ["paged (ours)", "SDPA on contiguous K/V (ceiling)"]
    assert list(pfig.data[0].y) == pytest.approx([310, 500])
    table = kernel_results.measurements_table(result)
    assert table["kind"].tolist().count("prefill") == 4 and len(table) == len(decode) + 4
    assert kernel_results.sdpa_backends(result)["B=1, ctx=32768"] == "cudnn"


def test_bare_kernel_times_read_as_eager():
    result = {"decode": [{"batch": 2, "context": 64, "kv_bytes": 10**6, "times_s": {"ours": 1e-6, "sdpa": 5e-7}}]}
    decode = kernel_results.decode_frame(result)
    assert decode["mode"].tolist() == ["eager", "eager"] and decode["tb_per_s"].tolist() == pytest.approx([1.0, 2.0])
    assert decode["vs_sdpa"].tolist() == pytest.approx([0.5, 1.0])
    assert [t.name for t in figures.decode_bandwidth_bars(decode).data] == ["paged (ours)",
                                                                             "SDPA on contiguous K/V (ceiling)"]


@pytest.mark.parametrize("path", kernel_results.find_kernel_results(kernel_results.RESULTS_DIR), ids=lambda p: p.name)
def test_committed_kernel_results_draw(path):
    result = kernel_results.load_kernel_result(path)
    decode = kernel_results.decode_frame(result)
    fig = figures.decode_bandwidth_bars(decode, result.get("ceilings", {}).get("copy_tb_per_s"))
    names = [t.name for t in fig.data]
    assert "paged (ours)" in names and "SDPA on contiguous K/V (ceiling)" in names
    assert all(np.isfinite(np.asarray(t.y, dtype=float)).all() for t in fig.data)


def test_kernel_results_are_found_newest_first_and_bad_files_named(tmp_path):
    write_kernel_result(tmp_path, "kernels-h200-2026-11-28.json")
    write_kernel_result(tmp_path, "kernels-h200-2026-11-29.json")
    (tmp_path / "sim-speed.json").write_text('{"bench": "sim_speed"}')  # another benchmark's result: not listed
    assert [p.name for p in kernel_results.find_kernel_results(tmp_path)] == ["kernels-h200-2026-11-29.json",
                                                                                "kernels-h200-2026-11-28.json"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu": "x"}')
    with pytest.raises(UserError, match="bad.json: not a bench.kernels result"):
        kernel_results.load_kernel_result(bad)
    assert kernel_result()["decode"][0]["batch"] == 1


# ---- time slider, rejections, memory in GiB ------------------------------------------------------------
def test_snapshots_reach_past_the_last_arrival_until_each_run_ends(runs):
    """The slider covers the longest run: a baseline draining its queue after the last arrival can be
    inspected, and each run keeps one snapshot after its end (its empty final state), not a pile of them."""
    trace = synthesize("sharegpt", num_requests=120, rate=20.0, seed=3)
    last_arrival = float(trace.df["arrival_time_s"].max())
    times = data.snapshot_times(trace, 10)
    assert times[9] == pytest.approx(last_arrival) and times[-1] == pytest.approx(last_arrival * data.DRAIN_REACH)
    paged, baseline = (runs[n].result for n in ("paged", "contiguous-max"))
    end = float(baseline.steps["time_s"].iloc[-1] + baseline.steps["duration_s"].iloc[-1])
    assert end > 2 * last_arrival, "the fixture's max baseline drains long after the last arrival"
    assert baseline.snapshots[-2].time_s > last_arrival and baseline.snapshots[-1].time_s == pytest.approx(end)
    assert len(paged.snapshots) < len(baseline.snapshots)
    assert (baseline.snapshots[-1].to_frame()["request_id"] == "").all(), "the final snapshot is empty"


def test_rejections_are_grouped_by_reason():
    requests = pd.DataFrame({"state": ["rejected", "finished", "rejected", "rejected"],
                             "reason": ["prompt of 9000 tokens leaves no room for an output token within max_model_len 8192", "",
                                        "prompt of 12000 tokens leaves no room for an output token within max_model_len 8192",
                                        "needs 900 KV blocks for 14400 tokens but the cache has only 512 blocks"]})
    assert tables.rejections(requests, 8192) == [(2, "prompt reaches max_model_len 8,192 (no room for an output token)"),
                                                 (1, "needs more KV blocks than the whole cache holds")]
    assert tables.rejections(requests.iloc[[1]], 8192) == []


def test_prefix_cache_hit_rate_is_read_under_either_key():
    assert tables.prefix_cache_hit_rate({"prefix_cache_hit_rate": 0.4}) == 0.4
    assert tables.prefix_cache_hit_rate({"prefix_hit_rate": 0.3}) == 0.3
    assert tables.prefix_cache_hit_rate({"prefix_cache_hit_rate": None}) is None


def test_memory_in_gib_holds_bytes_fixed_across_block_sizes():
    base = Config()
    assert sweep.blocks_for_gib(base, 4.0) == 2048
    big = base.replace(block_size=128)
    assert sweep.blocks_for_gib(big, 4.0) == 256
    assert sweep.blocks_for_gib(big, 4.0) * big.block_bytes == 2048 * base.block_bytes
    with pytest.raises(UserError, match="holds no KV block of 128 tokens"):
        sweep.blocks_for_gib(big, 0.001)


def test_swap_usage_rises_with_swap_outs_and_returns_to_zero():
    trace = synthesize("sharegpt", num_requests=120, rate=20.0, seed=3)
    config = Config(num_gpu_blocks=BLOCKS, preemption_mode="swap")
    run = data.replay(trace, config, [], num_snapshots=0)["paged"]
    steps = run.result.steps
    assert steps["num_swap_out_blocks"].sum() > 0, "the fixture should swap"
    fig = figures.swap_over_time({"paged": steps}, config.block_bytes, config.swap_space, max_points=10**7)
    y = np.asarray(fig.data[0].y, dtype=float)
    assert y.max() == pytest.approx(
        (steps["num_swap_out_blocks"] - steps["num_swap_in_blocks"]).cumsum().max() * config.block_bytes / GIB)
    assert y.min() >= 0 and y[-1] == pytest.approx(0)


# ---- the serving (vLLM metrics) view ---------------------------------------------------------------------
def test_kv_usage_and_queues_of_every_run_share_one_chart(runs):
    steps = steps_of(runs)
    usage = serving.kv_cache_usage(steps, time_s=1.0)
    assert [t.name for t in usage.data] == ["paged", "contiguous-max"]
    assert [t.line.color for t in usage.data] == [palette.run_color("paged"), palette.run_color("contiguous-max")]
    assert max(max(t.y) for t in usage.data) <= 100 and [s.x0 for s in usage.layout.shapes] == [1.0]
    queues = serving.queues(steps)
    names = [t.name for t in queues.data]
    assert {"paged: running", "paged: waiting", "contiguous-max: running", "contiguous-max: waiting"} <= set(names)


def test_latency_histograms_draw_the_slo_thresholds_and_attainment_counts_them(runs):
    requests = {n: r.result.requests for n, r in runs.items()}
    steps = steps_of(runs)
    slo = {"ttft_s": 0.5, "tpot_s": 0.05, "itl_s": 0.1}
    fig = serving.latency_histograms(requests, steps, slo)
    assert [t.name for t in fig.data] == ["paged", "contiguous-max"] * 3  # TTFT, TPOT, ITL
    assert sorted(s.x0 for s in fig.layout.shapes) == sorted(slo.values())
    for axis, limit in zip(("xaxis", "xaxis2", "xaxis3"), slo.values()):
        assert max(fig.layout[axis].tickvals) >= limit, "each SLO line is inside its axis"
    for t in fig.data:
        assert sum(t.y) == pytest.approx(100)
    paged = requests["paged"]
    a = serving.attainment(paged, steps["paged"], slo)
    finished = paged[paged["state"] == "finished"]
    assert a["ttft_s"] == pytest.approx((finished["ttft_s"] <= 0.5).mean())
    both = ((finished["ttft_s"] <= 0.5) & (finished["tpot_s"].fillna(0) <= 0.05)).sum()
    assert a["all"] == pytest.approx(both / len(paged))
    durations, tokens = serving.itl_samples(steps["paged"])
    assert tokens.sum() == steps["paged"]["num_decode_seqs"].sum()
    assert a["itl_s"] == pytest.approx(tokens[durations <= 0.1].sum() / tokens.sum())


def test_gantt_draws_queued_prefill_and_decode_for_the_window(runs):
    requests = runs["contiguous-max"].result.requests
    fig = serving.gantt(requests, 0.0, 2.0)
    inside = requests[requests["arrival_time_s"] < 2.0]
    assert [t.name for t in fig.data[:3]] == ["queued", "prefill", "decode"]
    assert len(fig.data[0].y) == len(inside)
    queued = np.asarray(fig.data[0].x, dtype=float)
    assert queued == pytest.approx((inside["first_scheduled_s"] - inside["arrival_time_s"]).to_numpy())
    ends = np.asarray(fig.data[2].base, dtype=float) + np.asarray(fig.data[2].x, dtype=float)
    assert ends == pytest.approx(inside["finish_s"].to_numpy())


def test_gantt_draws_each_preemption_from_the_preempting_step_to_the_readmission(runs):
    requests = runs["paged"].result.requests
    preempted = requests[requests["num_preemptions"] > 0]
    assert len(preempted), "the fixture should preempt"
    start, stop = float(preempted["arrival_time_s"].min()), float(preempted["arrival_time_s"].max()) + 1e-6
    fig = serving.gantt(requests, start, stop)
    bars = {t.name: t for t in fig.data}
    assert "preempted" in bars and "preempted (swapped out)" not in bars
    assert fig.layout.showlegend is not False and bars["preempted"].showlegend is not False
    assert bars["preempted"].marker.color == palette.PREEMPTION
    shown = requests[(requests["arrival_time_s"] >= start) & (requests["arrival_time_s"] < stop)]
    shown = shown.sort_values("arrival_time_s")
    expected = [(p, r) for pre, res in zip(shown["preempted_at"].dropna(), shown["resumed_at"].dropna())
                for p, r in zip(pre, res)]
    assert len(expected) == shown["num_preemptions"].sum()
    got = list(zip(bars["preempted"].base, np.add(bars["preempted"].base, bars["preempted"].x)))
    assert np.ravel(got) == pytest.approx(np.ravel(expected))
    assert all(w > 0 for w in bars["preempted"].x)


def test_gantt_hatches_swapped_out_intervals_and_reads_older_files_without_intervals():
    trace = synthesize("sharegpt", num_requests=120, rate=20.0, seed=3)
    swap = data.replay(trace, Config(num_gpu_blocks=BLOCKS, preemption_mode="swap", swap_space=1.0), [],
                       num_snapshots=0)["paged"].result.requests
    fig = serving.gantt(swap, 0.0, 10.0)
    bars = {t.name: t for t in fig.data}
    assert bars["preempted (swapped out)"].marker.pattern.shape == "/"
    old = swap.drop(columns=["preempted_at", "resumed_at", "swapped_out"])
    assert [t.name for t in serving.gantt(old, 0.0, 10.0).data][:3] == ["queued", "prefill", "decode"]
    assert not any(t.name.startswith("preempted") for t in serving.gantt(old, 0.0, 10.0).data)


# ---- the host tier (kv_offloading_size) ------------------------------------------------------------------
@pytest.fixture(scope="module")
def offload_run():
    """A prefix-heavy trace on 0.5 GiB of GPU KV with a 1 GiB host tier: the tier fills and evicts."""
    config = Config(enable_prefix_caching=True, kv_offloading_size=1.0)
    config = config.replace(num_gpu_blocks=sweep.blocks_for_gib(config, 0.5))
    run = data.replay(synthesize("kshot", num_requests=150, rate=10.0, seed=0), config, ())["paged"]
    assert run.result.steps["num_store_blocks"].sum() > config.num_offload_blocks, "the tier must fill and evict"
    return run, config


def test_host_occupancy_is_the_blocks_stored_so_far_up_to_the_tiers_size():
    """What host_tier.occupancy assumes, checked on pagesim.kv_offload itself: host blocks are freed only to
    make room for a store, so those holding a prefix after each step are min(stored so far, size)."""
    from pagesim.kv_offload import HostKVCache

    host = HostKVCache(num_blocks=5)
    rng = np.random.default_rng(0)
    issued, counter = [], 0
    for step in range(40):
        for _ in range(int(rng.integers(0, 3))):
            counter += 1
            host.store(counter, counter.to_bytes(4, "little"))  # a new hash each time
        if step % 7 == 3 and host.blocks:  # a load pins a ready block for a step
            ready = [h for h, b in host.blocks.items() if b.ready][:1]
            host.load(ready, [0] * len(ready))
        _, stores = host.take_transfers()
        issued.append(len(stores))
        held = host_tier.occupancy(pd.DataFrame({"time_s": np.arange(len(issued), dtype=float),
                                                 "num_store_blocks": issued, "num_load_blocks": 0}), 5)
        assert held["held"].iloc[-1] == host.num_cached
    assert sum(issued) > 5, "the test must evict"


def test_host_tier_over_time_splits_hits_by_tier_and_counts_the_bytes(offload_run):
    run, config = offload_run
    steps, summary = run.result.steps, run.summary
    hits = host_tier.hits_by_tier(steps)
    looked_up = hits["queries"] > 0
    assert np.allclose(hits.loc[looked_up, ["gpu", "host", "miss"]].sum(axis=1), 1.0)
    whole = (hits["host"] * hits["queries"]).sum() / hits["queries"].sum()
    assert whole == pytest.approx(summary["prefix_cache_host_hit_rate"]) and whole > 0.1
    fig = host_tier.host_tier_over_time(steps, config.num_offload_blocks, config.block_bytes, time_s=5.0)
    names = [t.name for t in fig.data]
    assert names[:3] == ["GPU hit", "host hit", "miss (computed)"]
    stored, loaded = fig.data[3], fig.data[4]
    assert stored.name.startswith("stored GPU → host") and loaded.name.startswith("loaded host → GPU")
    assert stored.y[-1] == pytest.approx(summary["offload_store_bytes"] / GIB)
    assert loaded.y[-1] == pytest.approx(summary["offload_load_bytes"] / GIB)
    in_use = fig.data[5].y
    assert max(in_use) == pytest.approx(config.num_offload_blocks * config.block_bytes / GIB), "the tier fills up"
    assert len(fig.layout.shapes) == 1 + 3, "the tier's size, and the slider's time on each panel"


def test_host_block_map_groups_the_tiers_blocks_by_state(offload_run):
    run, config = offload_run
    steps = run.result.steps
    k = int(np.argmax(steps["num_store_blocks"].to_numpy() > 0))  # a step with a store in flight
    t = float(steps["time_s"].iloc[k])
    fig = host_tier.host_block_map(steps, config.num_offload_blocks, config.block_bytes, t)
    z = np.asarray(fig.data[0].z, dtype=float).ravel()
    occ = host_tier.occupancy(steps, config.num_offload_blocks).iloc[k]
    counts = [int((z == code).sum()) for code in range(4)]
    assert counts == [occ["storing"], occ["loading"], occ["cached"], occ["free"]] and counts[0] > 0
    assert sum(counts) == config.num_offload_blocks
    assert [t.name.split(":")[0] for t in fig.data[1:]] == [label for label, _ in palette.HOST_STATES.values()]
    big = host_tier.host_block_map(steps, 10_000, config.block_bytes, t, max_blocks=1000)
    assert np.isfinite(np.asarray(big.data[0].z, dtype=float)).sum() <= 1000 + 4, "a cell stands for several blocks"


def test_latency_cdfs_draw_the_ensembles_percentiles_as_bands():
    """With validation.json's request_level_ensemble, each latency panel gets the ensemble's p50 / p90 / p99 at
    their levels: the median as the point, the p5-p95 band as an asymmetric horizontal bar; without it, none."""
    rng = np.random.default_rng(0)
    req = pd.DataFrame({"state": ["finished"] * 50, "ttft_s": rng.uniform(0.01, 1, 50),
                        "tpot_s": rng.uniform(0.005, 0.02, 50), "e2e_s": rng.uniform(1, 10, 50)})
    ens = {f"{m}_p{p}": {"median": 0.1 * p, "low": 0.08 * p, "high": 0.13 * p}
           for m in ("ttft_s", "tpot_s", "e2e_s") for p in (50, 90, 99)}
    fig = figures.latency_cdfs({"live": req}, ens)
    bands = [t for t in fig.data if t.legendgroup == "ensemble"]
    assert len(bands) == 3 and sum(bool(t.showlegend) for t in bands) == 1
    for t in bands:
        assert list(t.y) == [0.5, 0.9, 0.99]
        assert list(t.x) == pytest.approx([5.0, 9.0, 9.9])
        assert list(t.error_x.array) == pytest.approx([0.03 * p for p in (50, 90, 99)])
        assert list(t.error_x.arrayminus) == pytest.approx([0.02 * p for p in (50, 90, 99)])
    assert not [t for t in figures.latency_cdfs({"live": req}).data if t.legendgroup == "ensemble"]


def test_time_label_is_fine_enough_for_the_instants_it_tells_apart():
    from pagesim.dashboard.figures import time_label

    assert time_label(62.4) == "62.4 s" and time_label(62.4, 1.4) == "62.4 s" and time_label(0.0) == "0.0 s"
    step = 0.0013
    labels = [time_label(k * step, step) for k in range(50)]
    assert len(set(labels)) == 50, labels
    assert time_label(0.0123) == "0.012 s"


def test_slo_attainment_and_goodput_count_requests_as_replay_slo_does():
    """Was: the Serving view counted a parallel-sampling request's extra samples as requests, so with n > 1 its share
    within the SLOs and its goodput (2.2x) disagreed with `python -m pagesim replay --slo` (pagesim.slo.evaluate)."""
    from pagesim.config import Config
    from pagesim.simulator import simulate
    from pagesim.slo import evaluate, parse_slos
    from pagesim.traces import trace_from_frame

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"request_id": [f"r{i}" for i in range(60)],
                          "arrival_time_s": np.cumsum(rng.exponential(0.2, 60)),
                          "prompt_len": rng.integers(50, 900, 60), "output_len": rng.integers(10, 400, 60),
                          "n": rng.choice([1, 2, 4], 60)})
    result = simulate(trace_from_frame(frame, name="parallel"), Config(num_gpu_blocks=256))
    requests = result.requests
    assert (requests["parent_id"] != "").any(), "the trace has parallel samples"
    a = serving.attainment(requests, result.steps, {"ttft_s": 0.5, "tpot_s": 0.05})
    makespan = float(requests["finish_s"].max())
    cli = evaluate(requests, parse_slos(["ttft_p99=0.5", "tpot_p99=0.05"]), makespan)
    assert a["all"] == pytest.approx(cli["slo_attainment"]) and a["num_met"] == cli["slo_num_met"]


def test_live_targets_missing_from_a_validation_are_not_judged_met():
    """An older validation.json without makespan or the by-kind MAPEs: those targets are left out or shown as not
    judged, never counted as met."""
    from pagesim import live_targets

    table = live_targets.target_table({"step_level": {"mape": 0.04}, "decisions": {"n_steps_differing": 0},
                                       "request_level": {"ttft_s_p99": {"live": 1.0, "sim": 1.08, "rel_error": 0.08}}})
    verdict = dict(zip(table["target"], table["verdict"]))
    assert verdict == {"steps with different decisions (lockstep) = 0": "met", "step duration MAPE <= 3%": "missed",
                       "makespan within 1% (free simulation)": "not judged", "TTFT p99 within 10% (free simulation)": "met"}
    line = live_targets.verdict_line(table)
    assert line.startswith("**2 of 3 targets met**; missed: step duration MAPE <= 3% (4.00%)")
    assert "not judged (not in validation.json): makespan within 1% (free simulation)" in line


def test_live_target_tolerance_of_each_request_level_figure():
    """One home for a request-level figure's tolerance: 1% for the makespan, 5% for TTFT / TPOT / E2E p50 and p90,
    10% for p99; none for figures without a target (ITL, throughput, preemptions)."""
    from pagesim.live_targets import tolerance

    assert [tolerance(n) for n in ("makespan_s", "ttft_s_p50", "tpot_s_p90", "e2e_s_p99")] == [0.01, 0.05, 0.05, 0.10]
    assert [tolerance(n) for n in ("itl_s_p90", "request_throughput", "num_preemptions", "mean_num_running")] == [None] * 4


def test_live_targets_judge_a_timing_sensitive_percentile_on_the_prediction():
    """With request_level_prediction (validate --ensemble N) a percentile is judged on the prediction, the ensemble's
    median where it is timing-sensitive, and its row says so; the others on the free simulation as before."""
    from pagesim import live_targets

    v = {"step_level": {"mape": 0.02}, "decisions": {"n_steps_differing": 0},
         "request_level": {"ttft_s_p90": {"live": 1.0, "sim": 1.13, "rel_error": 0.13},
                           "tpot_s_p90": {"live": 1.0, "sim": 1.02, "rel_error": 0.02}},
         "request_level_prediction": {
             "ttft_s_p90": {"live": 1.0, "predicted": 1.02, "rel_error": 0.02, "from": "ensemble median"},
             "tpot_s_p90": {"live": 1.0, "predicted": 1.02, "rel_error": 0.02, "from": "free simulation"}}}
    rows = dict(zip(live_targets.target_table(v)["target"], zip(live_targets.target_table(v)["this run"],
                                                                   live_targets.target_table(v)["verdict"])))
    assert rows["TTFT p90 within 5% (ensemble median)"] == ("+2.00%", "met")
    assert rows["TPOT p90 within 5% (free simulation)"] == ("+2.00%", "met")
    del v["request_level_prediction"]
    rows = dict(zip(live_targets.target_table(v)["target"], live_targets.target_table(v)["verdict"]))
    assert rows["TTFT p90 within 5% (free simulation)"] == "missed"


@pytest.mark.parametrize("summary, expected", [
    ({"environment": {"gpu": "NVIDIA H100 80GB HBM3"}}, "H100"), ({"environment": {"gpu": "NVIDIA H200"}}, "H200"),
    ({"hardware": {"gpu": "NVIDIA A100-SXM4-80GB"}}, "A100"), ({"hardware": {"gpu": "fixture (no GPU)"}, "config": {"gpu": "h200"}}, "H200"),
    ({}, "?"), ([], "?")])
def test_live_run_card_is_the_gpu_it_was_recorded_on(summary, expected):
    assert live_runs.card(summary) == expected
