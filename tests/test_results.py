"""Run files (issue #10 items 9, 10): typed Parquet read back gives the same frames and the same summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pagesim.config import Config
from pagesim.metrics import prefix_cache_kwargs, summarize, summarize_run
from pagesim.replay import run_configs, write_run_dir
from pagesim.results import (SCHEMA_VERSION, parquet_metadata, read_requests, read_run, read_steps, requests_path,
                             with_memory_fractions)
from pagesim.simulator import simulate
from pagesim.traces import load_trace, trace_from_frame

ROOT = Path(__file__).resolve().parent.parent
LIVE = ROOT / "results" / "live"


def _write(tmp_path, trace, config, baselines=("max", "oracle")):
    results, summaries = {}, {}
    for cfg in run_configs(config, baselines):
        r = simulate(trace, cfg)
        results[cfg.run_name], summaries[cfg.run_name] = r, summarize_run(r)
    write_run_dir(tmp_path, config, trace, results, summaries)
    return results, summaries


def assert_same_steps(read: pd.DataFrame, kept: pd.DataFrame) -> None:
    """A run's steps read back equal the simulator's kept table, whose memory fractions are derived from its counts
    (with_memory_fractions) where read_steps derives them from the run geometry: the same numbers."""
    assert not {c for c in read if c.endswith("_frac")} & set(kept), "the kept table holds counts, not fractions"
    kept = with_memory_fractions(kept)
    assert set(read) == set(kept)
    pd.testing.assert_frame_equal(read, kept[list(read.columns)], check_dtype=False, check_exact=True)


def test_a_run_read_back_gives_the_same_frames_and_summary(tmp_path):
    trace = load_trace(ROOT / "traces" / "kshot-shared-prefix-500.jsonl", limit=200)
    results, summaries = _write(tmp_path, trace, Config(enable_prefix_caching=True, num_gpu_blocks=2000))
    summary, steps, requests = read_run(tmp_path)
    assert summary["runs"] == json.loads(json.dumps(summaries))
    for name, r in results.items():
        s = steps[steps["run"] == name].drop(columns="run").reset_index(drop=True)
        q = requests[requests["run"] == name].drop(columns="run").reset_index(drop=True)
        assert_same_steps(s, r.steps)
        pd.testing.assert_frame_equal(q, r.requests, check_dtype=False)
        again = summarize(s, q, leaked_blocks=r.leaked_blocks, sim_wall_s=r.sim_wall_s,
                          block_bytes=r.config.block_bytes, **prefix_cache_kwargs(r.prefix_cache))
        assert again == summaries[name], f"summary of {name} changed on the round trip"


def test_ids_that_look_like_numbers_and_empty_fields_survive(tmp_path):
    """ShareGPT-like ids ("1.10"), empty parent ids and empty reasons read back as written, not as floats/NaN."""
    df = pd.DataFrame({"request_id": ["1.10", "1.2", "007"], "arrival_time_s": [0.0, 0.1, 0.2],
                       "prompt_len": [20, 30, 40], "output_len": [5, 1, 3]})
    trace = trace_from_frame(df, "ids")
    _write(tmp_path, trace, Config(num_gpu_blocks=64), baselines=())
    req = read_requests(requests_path(tmp_path))
    assert list(req["request_id"]) == ["1.10", "1.2", "007"]
    assert (req["parent_id"] == "").all() and (req["reason"] == "").all()
    summary = summarize(read_run(tmp_path)[1], req, leaked_blocks=0, sim_wall_s=0, prefix_cache_queries=0,
                        prefix_cache_hits=0)
    assert summary["num_requests"] == 3 and summary["num_finished"] == 3


def test_files_are_compact_typed_and_carry_provenance(tmp_path):
    trace = load_trace(ROOT / "traces" / "sharegpt-poisson-1k.jsonl", limit=100)
    _write(tmp_path, trace, Config(num_gpu_blocks=1000))
    schema = pq.read_schema(tmp_path / "steps.parquet")
    meta = parquet_metadata(tmp_path / "steps.parquet")
    assert meta["schema_version"] == SCHEMA_VERSION and meta["config"]["num_gpu_blocks"] == 1000
    assert len(meta["trace_fingerprint"]) == 16 and "git_commit" in meta
    assert pq.ParquetFile(tmp_path / "steps.parquet").metadata.row_group(0).column(0).compression == "ZSTD"
    types = {f.name: str(f.type) for f in schema}
    assert types["run"].startswith("dictionary")
    assert not {"kv_cache_usage", "used_frac", "blocks_free", "free", "step"} & set(types), "derivable columns stored"
    assert "int64" not in {types[c] for c in ("num_running", "blocks_used", "used", "num_preemptions")}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["provenance"]["trace_fingerprint"] == meta["trace_fingerprint"]
    assert summary["provenance"]["schema_version"] == SCHEMA_VERSION


def test_a_cache_of_more_than_2_31_slots_reads_back(tmp_path):
    """Was: replay wrote such a run (free slots beyond int32), and read_steps failed on it with an OverflowError (the
    Python int of the cache's slots cast to the int32 slot columns), so neither read_run nor the dashboard opened it."""
    trace = load_trace(ROOT / "traces" / "sharegpt-poisson-1k.jsonl", limit=5)
    config = Config(model="llama-3.1-8b", block_size=1024, num_gpu_blocks=2_100_000)  # 2.15e9 slots
    results, _ = _write(tmp_path, trace, config, baselines=())
    steps = read_run(tmp_path)[1].drop(columns="run")
    assert steps["free"].max() > 2**31
    assert_same_steps(steps, results["paged"].steps)


def test_trace_fingerprint_is_the_same_in_another_process(tmp_path):
    trace = load_trace(ROOT / "traces" / "sharegpt-poisson-1k.jsonl", limit=50)
    _write(tmp_path, trace, Config(num_gpu_blocks=1000), baselines=())
    code = ("from pagesim.results import trace_fingerprint; from pagesim.traces import load_trace; "
            f"print(trace_fingerprint(load_trace({str(ROOT / 'traces' / 'sharegpt-poisson-1k.jsonl')!r}, limit=50)))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                           env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    assert other.stdout.strip() == parquet_metadata(tmp_path / "steps.parquet")["trace_fingerprint"]


@pytest.mark.parametrize("run", sorted(p.parent.name for p in LIVE.glob("*/requests.csv")))
def test_committed_runs_with_requests_csv_still_read(run):
    req = read_requests(requests_path(LIVE / run))
    assert req["request_id"].map(type).eq(str).all() and not req["parent_id"].isna().any()
    assert (req["state"] == "finished").sum() > 0


def test_steps_streamed_in_small_chunks_equal_the_whole_table(tmp_path, monkeypatch):
    """Chunks of 7 steps, to disk (replay's streaming) and in memory, give the table recorded whole."""
    import pagesim.recorder
    from pagesim.replay import simulate_runs

    trace = load_trace(ROOT / "traces" / "kshot-shared-prefix-500.jsonl", limit=120)
    config = Config(enable_prefix_caching=True, num_gpu_blocks=1500)
    whole = {c.run_name: simulate(trace, c) for c in run_configs(config, ["max"])}
    monkeypatch.setattr(pagesim.recorder, "CHUNK_STEPS", 7)
    monkeypatch.setattr(pagesim.recorder, "KEPT_CHUNK_STEPS", 7)
    results, summaries = simulate_runs(trace, config, ["max"], "roofline", tmp_path)
    write_run_dir(tmp_path, config, trace, results, summaries, steps_written=True)
    _, steps, _ = read_run(tmp_path)
    for name, r in whole.items():
        assert len(r.steps) > 50
        assert_same_steps(steps[steps["run"] == name].drop(columns="run").reset_index(drop=True), r.steps)
        in_memory = simulate(trace, r.config)
        pd.testing.assert_frame_equal(in_memory.steps, r.steps, check_dtype=False)
        expected = summarize_run(r)
        assert {k: v for k, v in summaries[name].items() if k not in ("sim_wall_s", "cost_model", "num_gpus", "num_replicas")} == \
            {k: v for k, v in expected.items() if k != "sim_wall_s"}


@pytest.mark.parametrize("chunk_steps", [7, 1 << 14])
def test_steps_merged_by_sorting_equal_the_tiled_expansion(monkeypatch, chunk_steps):
    """The recorder's merge for chunks whose runs and rows do not tile their steps (the runs expanded apart, their
    steps from their own first steps, then all sorted by step), taken for every chunk: the same table as the
    expansion in step order, under memory pressure and prefix caching (evictions, cached blocks)."""
    import pagesim.recorder

    trace = load_trace(ROOT / "traces" / "kshot-shared-prefix-500.jsonl", limit=150)
    config = Config(enable_prefix_caching=True, num_gpu_blocks=600)
    monkeypatch.setattr(pagesim.recorder, "KEPT_CHUNK_STEPS", chunk_steps)
    tiled = simulate(trace, config)
    monkeypatch.setattr(pagesim.recorder, "_tiles", lambda *args: False)
    merged = simulate(trace, config)
    assert tiled.extra["fast_path_steps"] > len(tiled.steps) // 2
    pd.testing.assert_frame_equal(merged.steps, tiled.steps, check_exact=True)


def test_columns_that_are_zero_or_asked_for_alone_read_back_as_recorded(tmp_path):
    """A run without prefix caching or swaps has all-zero columns (read as zeros without decoding them), and
    asking for a few columns (derived ones included) reads only what they need and gives the same values."""
    trace = load_trace(ROOT / "traces" / "sharegpt-poisson-1k.jsonl", limit=150)
    results, _ = _write(tmp_path, trace, Config(num_gpu_blocks=400), baselines=("max",))
    steps = read_run(tmp_path)[1]
    assert (steps["prefix_cache_queries"] == 0).all() and (steps["reserved"] > 0).any()
    for name, r in results.items():
        s = steps[steps["run"] == name].drop(columns="run").reset_index(drop=True)
        assert_same_steps(s, r.steps)
    for cols in (["time_s", "free_frac", "kv_cache_usage"], ["cached_frac", "free", "step", "run"], ["num_running"],
                 ["blocks_free", "cached", "external_fragmentation_frac"]):
        pd.testing.assert_frame_equal(read_steps(tmp_path / "steps.parquet", columns=cols), steps[cols],
                                      check_dtype=False)


def test_kept_step_table_grows_and_widens_a_column_without_losing_rows(monkeypatch):
    """The recorder's kept table: chunks appended past its first room (doubled, rows kept) and a value beyond
    int32 in a later chunk (that column becomes int64 with the earlier rows intact; the others stay int32)."""
    import numpy as np

    from pagesim.recorder import STEP_COLUMNS, _StepTable

    monkeypatch.setattr(_StepTable, "ROOM", 4)
    table = _StepTable()
    chunks = []
    for i, size in enumerate((3, 5, 9)):
        chunk = {c: np.arange(size, dtype=np.int64) + 100 * i for c in STEP_COLUMNS}
        if i == 2:
            chunk["blocks_used"][4] = 2**31 + 7
        table.append(chunk)
        chunks.append(chunk)
    cols = table.columns()
    for c in STEP_COLUMNS:
        assert np.array_equal(cols[c], np.concatenate([ch[c] for ch in chunks])), c
    assert cols["blocks_used"].dtype == np.int64 and cols["num_running"].dtype == np.int32
    assert cols["time_s"].dtype == np.float64


@pytest.mark.parametrize("count", [0, 1, 5000, 1 << 20])
def test_kept_table_arrays_are_zeroed_writable_and_outlive_pickling(count):
    """_table_array (the kept table's own mapping, off huge pages): zeros of the asked dtype and length, writable,
    and a pickle round trip (a sweep's results cross processes) gives the same values in ordinary memory."""
    import pickle

    import numpy as np

    from pagesim.recorder import _table_array

    for dtype in (np.int32, np.int64, np.float64):
        a = _table_array(count, dtype)
        assert a.dtype == dtype and a.shape == (count,) and not a.any()
        if count:
            a[-1] = 7
            a[count // 2] = 3
        back = pickle.loads(pickle.dumps(a))
        assert np.array_equal(back, a) and back.dtype == dtype


def test_a_multi_replica_run_is_written_and_read_back_exactly(tmp_path):
    """Each replica's steps start from its own first step: their times are stored per (run, replica), not as one
    clock running backwards at the second replica (`replay --replicas 2` used to stop at writing its steps)."""
    from pagesim.replay import simulate_run

    trace = load_trace(ROOT / "traces" / "multiturn-300.jsonl", limit=100)
    config = Config(num_gpu_blocks=2000)
    result, summary = simulate_run(trace, config, replicas=2)
    write_run_dir(tmp_path, config, trace, {config.run_name: result}, {config.run_name: summary})
    steps = read_steps(tmp_path / "steps.parquet")
    assert_same_steps(steps.drop(columns="run"), result.steps)
    times = read_steps(tmp_path / "steps.parquet", columns=["time_s"])["time_s"]
    assert times.to_numpy().tolist() == result.steps["time_s"].tolist()
    assert set(steps["replica"]) == {0, 1}


# ---- runs that record no step, strict JSON, interrupted runs --------------------------------------
def _replay(*argv):
    from pagesim.cli import main

    return main(["replay", "traces/sharegpt-poisson-1k.jsonl", "--limit", "20", *map(str, argv)])


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_run_whose_every_request_is_rejected_reads_back_with_an_empty_step_table(tmp_path, replicas, capsys):
    out = tmp_path / "run"
    assert _replay("--num-gpu-blocks", 1, "--replicas", replicas, "--out", out) == 0
    table = capsys.readouterr().out
    assert "None" not in table and "NaN" not in table, table  # a figure a run cannot give reads "-"
    summary, steps, requests = read_run(out)
    assert len(steps) == 0 and isinstance(steps["run"].dtype, pd.CategoricalDtype) and list(summary["runs"]) == ["paged"]
    assert (requests["state"] == "rejected").all() and (requests["reason"] != "").all()


def test_force_over_an_earlier_run_leaves_none_of_its_steps(tmp_path):
    out = tmp_path / "run"
    assert _replay("--baseline", "max", "--out", out) == 0
    assert len(read_run(out)[1]) > 0
    assert _replay("--num-gpu-blocks", 1, "--out", out, "--force") == 0
    summary, steps, _ = read_run(out)
    assert len(steps) == 0 and list(summary["runs"]) == ["paged"]


def test_summary_json_is_strict_json_when_an_slo_percentile_falls_on_a_rejected_request(tmp_path):
    out = tmp_path / "run"
    assert _replay("--num-gpu-blocks", 1, "--slo", "ttft_p99=1", "--out", out) == 0

    def refuse(constant):
        raise ValueError(f"summary.json holds {constant}, which is not JSON")

    summary = json.loads((out / "summary.json").read_text(), parse_constant=refuse)
    run = summary["runs"]["paged"]
    assert run["slo_ttft_p99_s"] is None and run["slo_ttft_p99_met"] is False


def test_an_interrupted_replay_says_so_in_one_line_and_leaves_no_part_of_a_step_table(tmp_path, monkeypatch, capsys):
    import contextlib

    import pagesim.progress

    real = pagesim.progress.sim_progress

    @contextlib.contextmanager
    def interrupt_the_baseline(span, desc, file=None):
        if desc != "paged":  # the paged run's steps are on disk by now
            assert (tmp_path / "run" / "steps.parquet").stat().st_size > 0
            raise KeyboardInterrupt
        with real(span, desc, file) as progress:
            yield progress

    monkeypatch.setattr(pagesim.progress, "sim_progress", interrupt_the_baseline)
    assert _replay("--baseline", "max", "--out", tmp_path / "run") == 130
    err = capsys.readouterr().err
    assert "interrupted: replay stopped before it finished" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # no part of a step table, and then no empty directory it made


def _sparse_trace(n: int = 40, seed: int = 0):
    """Short requests arriving further and further apart (each gap longer than the time before it), and between
    each two of them one rejected on arrival (its prompt is beyond max_model_len 256): the engine's clock waits to
    the rejected one's arrival, then on to the next, so a step starts at an arrival that the end of the step
    recorded before it plus one gap need not reach."""
    import random

    rng = random.Random(seed)
    arrivals = [0.0] + [0.01 * 1.5 ** k * (1 + rng.random() / 3) for k in range(n - 1)]
    df = pd.DataFrame({"request_id": [str(i) for i in range(n)], "arrival_time_s": arrivals,
                       "prompt_len": [rng.randint(1, 40) if i % 2 == 0 else 500 for i in range(n)],
                       "output_len": [rng.randint(1, 3) for _ in range(n)]})
    return trace_from_frame(df, "sparse")


def test_steps_after_idle_gaps_longer_than_the_time_before_them_read_back_exactly(tmp_path):
    """A step that starts at an arrival after a long idle gap can start where no double added to the end of the
    step before lands (0.5727610622006171 + g is never 1.9114773291415086): such a start is stored as a start,
    so the run is written (streamed and whole) and read back bit for bit instead of failing with an AssertionError
    at the end of the replay (Azure code, --rate 0.5, the first 500 requests, a100-80gb, block 256, found so)."""
    from pagesim.replay import simulate_runs
    from pagesim.results import IDLE, idle_before

    trace = _sparse_trace()
    config = Config(num_gpu_blocks=400, max_model_len=256)
    whole = simulate(trace, config)
    t, d = whole.steps["time_s"].to_numpy(), whole.steps["duration_s"].to_numpy()
    stored = idle_before(t, d, 0.0)
    assert (stored < 0).any(), "no start here needs storing as a start: the test proves nothing"
    streamed = tmp_path / "streamed"
    streamed.mkdir()
    results, summaries = simulate_runs(trace, config, [], "roofline", streamed)
    write_run_dir(streamed, config, trace, results, summaries, steps_written=True)
    kept = tmp_path / "kept"
    write_run_dir(kept, config, trace, {"paged": whole}, {"paged": summarize_run(whole)})
    for directory in (streamed, kept):
        assert (pq.read_table(directory / "steps.parquet").column(IDLE).to_numpy() < 0).any()
        steps = read_steps(directory / "steps.parquet").drop(columns="run")
        assert_same_steps(steps, whole.steps)


def test_idle_gaps_give_back_every_step_start_bit_for_bit():
    """Property: for any non-overlapping steps (starts at any double at or after the end of the step before),
    times_from_idle(idle_before(...)) gives the starts bit for bit, whole or in chunks (a streamed table's
    row groups, each from the end of the chunk before); a gap with its sign bit set is a stored start."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pagesim.results import idle_before, times_from_idle

    finite = dict(allow_nan=False, allow_infinity=False)

    @settings(max_examples=400, deadline=None)
    @given(st.floats(0, 1e6, **finite), st.lists(st.tuples(st.floats(0, 1e4, **finite), st.floats(0, 5, **finite),
                                                           st.booleans()), min_size=1, max_size=40),
           st.integers(1, 40))
    def check(first, rows, chunk):
        starts, durations, now = [], [], first
        for gap, duration, idle in rows:
            now = now + (gap if idle else 0.0)
            starts.append(now)
            durations.append(duration)
            now = now + duration
        t, d = np.array(starts), np.array(durations)
        g = idle_before(t, d, 0.0)
        assert np.array_equal(times_from_idle(g, d, 0.0), t)
        prev, parts = 0.0, []
        for a in range(0, len(t), chunk):
            part = idle_before(t[a:a + chunk], d[a:a + chunk], prev)
            parts.append(times_from_idle(part, d[a:a + chunk], prev))
            prev = float(t[a:a + chunk][-1] + d[a:a + chunk][-1])
        assert np.array_equal(np.concatenate(parts), t)

    check()
    # the case found: no double g makes 0.5727610622006171 + g equal 1.9114773291415086
    t, d = np.array([0.5643726111298307, 1.9114773291415086]), np.array([0.008388451070786335, 0.01])
    assert t[0] + d[0] == 0.5727610622006171
    g = idle_before(t, d, 0.0)
    assert np.signbit(g[1]) and np.array_equal(times_from_idle(g, d, 0.0), t)
