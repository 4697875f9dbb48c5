"""The calibration's workloads, run through the real scheduler and loop with a stand-in executor (no GPU).

What the fit needs of them: decode-only steps at every CUDA-graph batch size of each context (the decode
grid grows its batch through the sizes, prefilling each sequence once), and decode steps whose rows read
shared blocks (decode_shared_tokens), saved with the rows as the profile's sharing terms expect.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from engine.calibration import (ADVANCE_TOKENS, DECODE_STEPS_PER_SIZE, STEADY_DECODE_STEPS, TIMED_LARGE_STEPS,
                                TIMED_WHOLE, NoTime, calibration_peak_blocks, calibration_workloads, run_calibration)
from pagesim.config import Config
from pagesim.cost.graphs import GRAPH_BATCH_SIZES, mixed_graph_token_sizes

CONFIG = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=40000, max_num_seqs=256, max_num_batched_tokens=8192)


@pytest.fixture(scope="module")
def workloads():
    return dict(calibration_workloads(8192))


@pytest.mark.parametrize("c", [512, 4096])
def test_the_decode_grid_decodes_at_every_graph_size(workloads, c):
    rows = run_calibration(NoTime(), CONFIG, workloads=[(f"decode-c{c}", workloads[f"decode-c{c}"])])
    decode_only = rows[rows["num_prefill_tokens"] == 0]["num_decode_seqs"].value_counts()
    sizes = [b for b in GRAPH_BATCH_SIZES if b * c <= 256 * 1024]
    for b in sizes:
        assert decode_only.get(b, 0) >= DECODE_STEPS_PER_SIZE, f"context {c}: {decode_only.get(b, 0)} decode steps of {b}"
    # the steps that only build context are advanced, not timed: the first TIMED_LARGE_STEPS large ones are kept
    large = rows["num_prefill_tokens"] >= ADVANCE_TOKENS
    assert large.sum() == TIMED_LARGE_STEPS
    assert (rows["decode_shared_tokens"] == 0).all() and rows["prefix_cache_hits"].sum() == 0


@pytest.mark.parametrize("name", ["decode-c4096", "skew-b127-s1024-l6144", "mixed-b8-p2048"])
def test_advancing_context_building_steps_changes_no_timed_step(workloads, name, monkeypatch):
    """With every step timed, the same workload plans the same steps: the rows kept are those steps, unchanged, and
    the ones left out are large prefills after the first TIMED_LARGE_STEPS (none in the families timed whole).
    Every sequence is prefilled once: the workload's prompt tokens, no more."""
    import engine.calibration as calibration

    rows = run_calibration(NoTime(), CONFIG, workloads=[(name, workloads[name])])
    monkeypatch.setattr(calibration, "ADVANCE_TOKENS", 10**9)
    every = run_calibration(NoTime(), CONFIG, workloads=[(name, workloads[name])])
    assert every["num_prefill_tokens"].sum() == sum(g[0] * g[1] for g in workloads[name])
    kept = every[every["step"].isin(rows["step"])]
    features = [c for c in rows.columns if c not in ("time_s", "duration_s", "exec_s", "started_unix")]
    pd.testing.assert_frame_equal(kept[features].reset_index(drop=True), rows[features].reset_index(drop=True))
    left_out = every[~every["step"].isin(rows["step"])]
    if name.startswith(TIMED_WHOLE):
        assert left_out.empty
    else:
        assert len(left_out) > 0 and (left_out["num_prefill_tokens"] >= ADVANCE_TOKENS).all()
        first_large = every[every["num_prefill_tokens"] >= ADVANCE_TOKENS]["step"].iloc[:TIMED_LARGE_STEPS]
        assert first_large.isin(rows["step"]).all()


@pytest.mark.parametrize("name, b, p, g", [("shared-b16-p1024-c1024", 16, 1024, 1),
                                           ("shared-b32-p2048-c512-g2", 32, 2048, 2)])
def test_shared_prefix_workloads_record_the_repeated_reads(workloads, name, b, p, g):
    rows = run_calibration(NoTime(), CONFIG, workloads=[(name, workloads[name])])
    full = rows[(rows["num_prefill_tokens"] == 0) & (rows["num_decode_seqs"] == b)]
    assert len(full) >= 10
    # b rows over g prefixes of p tokens: every row but the first of each prefix reads the prefix again
    assert (full["decode_shared_tokens"] == (b - g) * p).all(), full["decode_shared_tokens"].unique()
    assert rows["prefix_cache_hits"].sum() == (b - g) * p  # the later requests hit the whole prefix
    # each later request's prefill chunk reads its prefix's p tokens of full blocks, which the group's first request
    # (decoding by then) reads too: p per chunk (a prompt split over two steps reads the prefix in both); the first
    # requests computing the prefixes read nothing another row holds
    pre = rows[rows["num_prefill_tokens"] > 0]
    first = pre["step"] == pre["step"].min()
    assert (pre.loc[first, "prefill_shared_tokens"] == 0).all()
    assert (pre.loc[~first, "prefill_shared_tokens"] == pre.loc[~first, "num_prefill_seqs"] * p).all()
    assert (rows.loc[rows["num_prefill_tokens"] == 0, "prefill_shared_tokens"] == 0).all()


@pytest.mark.parametrize("b", [8, 32])
def test_kshot_workloads_time_short_chunks_over_a_prefix_the_decode_rows_read(workloads, b):
    """k = 1, 2, 4, 8 prompts released at once after a cached 1,536-token prefix of the running decode batch: one
    graph mixed step each, its k chunks (16-256 tokens each) all prefix hits, each reading its whole prefix, which
    b decode rows read too (the k-shot windows' steps, which no other workload makes)."""
    rows = run_calibration(NoTime(), CONFIG, workloads=[(f"kshot-b{b}-p1536", workloads[f"kshot-b{b}-p1536"])])
    arrivals = rows[(rows["num_prefill_tokens"] > 0) & (rows["num_decode_seqs"] == b)]
    assert sorted(arrivals["num_prefill_seqs"].tolist()) == sorted([1, 2, 4, 8] * 3)
    per_chunk = arrivals["num_prefill_tokens"] / arrivals["num_prefill_seqs"]
    assert sorted(set(per_chunk)) == [16, 64, 256]
    assert (arrivals["prefill_shared_tokens"] == arrivals["num_prefill_seqs"] * 1536).all()
    assert (arrivals["prefix_cache_hits"] == arrivals["num_prefill_seqs"] * 1536).all()
    assert (arrivals["decode_shared_tokens"] == (b - 4) * 1536).all()  # 4 prefixes, each computed once


def test_live_calibrate_refuses_a_cache_too_small_to_calibrate_in(tmp_path, capsys):
    """`live --calibrate` calibrates in the run's own KV cache: with 600 blocks only the small prefills fit, too
    few to fit a profile. It says so, and the way out, before loading a model or running anything."""
    from pagesim.cli import main

    rc = main(["live", "traces/kshot-shared-prefix-500.jsonl", "--allow-cpu", "--limit", "4", "--num-gpu-blocks", "600",
               "--calibrate", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    every = calibration_workloads(8192)
    fit = sum(peak <= 0.9 * 600 for peak in calibration_peak_blocks("llama-3-8b", 16, 8192, 256, 8192).values())
    assert 0 < fit < len(every) / 2
    assert rc == 2 and f"--calibrate: only {fit} of the {len(every)} calibration workloads fit a KV cache of 600 blocks" in err, err
    assert "--profile P.json" in err and not (tmp_path / "run" / "profile.json").exists()


def test_calibration_peaks_are_the_blocks_the_workloads_need():
    """A workload that releases its prompts one at a time needs a fraction of its tokens' blocks at once: in a cache
    one block above its peak it makes the steps it makes in an unlimited one, in one 10% below they change. With the
    buckets up to 4096 tokens, their workloads' tokens would need more than 4,096 blocks at once, yet they fit such a
    cache."""
    from engine.calibration import calibration_workloads_that_fit

    peaks = calibration_peak_blocks("llama-3-8b", 16, 8192, 256, 8192)
    name = "buckets-b4-c512"
    groups = dict(calibration_workloads(8192))[name]
    assert 16 * peaks[name] < sum(g[0] * (g[1] + g[2]) for g in groups) / 4
    features = ["num_prefill_tokens", "num_prefill_seqs", "num_decode_seqs", "decode_context_tokens"]

    def steps(blocks):  # + 1: vLLM's null block
        cfg = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=blocks + 1, watermark=0.0)
        return run_calibration(NoTime(), cfg, workloads=[(name, groups)])[features]

    unlimited = steps(40000)
    pd.testing.assert_frame_equal(steps(peaks[name] + 1), unlimited)
    smaller = steps(int(0.9 * peaks[name]))
    assert len(smaller) != len(unlimited) or not smaller.equals(unlimited)
    fit = {name for name, _ in calibration_workloads_that_fit(Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=4096))}
    assert {"buckets-b4-c512", "buckets-b24-c1024", "prefix-b4-c512-p2048", "multi-b8-c512"} <= fit


def test_live_calibrate_warns_when_the_cache_leaves_workloads_out():
    """With 4,096 blocks more than half the workloads fit, so `live --calibrate` goes ahead, and says which share
    its profile was fitted without (printed once, recorded in summary.json by `live`)."""
    from engine.calibration import calibration_warnings, calibration_workloads_that_fit

    every = calibration_workloads(8192)
    small = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=4096)
    fit = calibration_workloads_that_fit(small)
    assert len(every) / 2 <= len(fit) < len(every)
    (text,) = calibration_warnings(small, fit)
    assert f"{len(fit)} of the {len(every)} calibration workloads fit a KV cache of 4096 blocks" in text
    assert "--profile P.json" in text
    full = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=40000)
    assert calibration_warnings(full, calibration_workloads_that_fit(full)) == []


def test_spread_workloads_decode_batches_of_unequal_contexts(workloads):
    rows = run_calibration(NoTime(), CONFIG, workloads=[("spread-b16-256-4096", workloads["spread-b16-256-4096"])])
    full = rows[(rows["num_prefill_tokens"] == 0) & (rows["num_decode_seqs"] == 16)]
    assert len(full) >= 10
    # 16 contexts from 256 to 4096: the longest is 1.88x the mean, unlike the uniform decode grid (1.0)
    ratio = full["max_decode_context"] * 16 / full["decode_context_tokens"]
    assert ((ratio > 1.8) & (ratio < 1.95)).all(), ratio.unique()


def test_served_workloads_shrink_through_sizes_between_the_graph_sizes(workloads):
    """A served-like batch: contexts spread (the longest well above the mean), and as outputs end the batch
    decodes at sizes that are not graph sizes, as live batches do (the decode grid's are graph sizes only)."""
    rows = run_calibration(NoTime(), CONFIG, workloads=[("served-b12", workloads["served-b12"])])
    decode = rows[(rows["num_prefill_tokens"] == 0) & (rows["num_decode_seqs"] > 0)]
    sizes = set(decode["num_decode_seqs"])
    assert {12, 11, 9, 7, 6, 5, 3} <= sizes, sorted(sizes)
    spread = decode["max_decode_context"] * decode["num_decode_seqs"] / decode["decode_context_tokens"]
    assert (spread[decode["num_decode_seqs"] == 12] > 1.5).all()


@pytest.mark.parametrize("b", [4, 48])
def test_steady_workloads_decode_long_past_their_prefill(workloads, b):
    """steady-b*: the batch's prefill, then decode-only steps in a row, the whole batch for at least three times as
    many as the decode grid's at one size (a window's decode steps are mostly tens of steps past a prefill; the
    grid's at most DECODE_STEPS_PER_SIZE); only the first of them follows a prefill step."""
    from pagesim.cost.profile import decode_after_prefill

    rows = run_calibration(NoTime(), CONFIG, workloads=[(f"steady-b{b}", workloads[f"steady-b{b}"])], advance=False)
    after = rows.loc[rows.index[rows["num_prefill_tokens"] > 0].max() + 1:]
    assert (after["num_prefill_tokens"] == 0).all() and len(after) >= STEADY_DECODE_STEPS - 8
    assert (after["num_decode_seqs"] == b).sum() >= 3 * DECODE_STEPS_PER_SIZE
    assert decode_after_prefill(after.assign(workload="w")).sum() == 1


@pytest.mark.parametrize("name", ["buckets-b4-c512", "buckets-b24-c1024"])
def test_bucket_workloads_time_prefill_steps_in_every_mixed_graph_token_bucket(workloads, name):
    """Graph mixed steps (prefill tokens, at most 1024 packed tokens) in each token bucket, twice or more."""
    rows = run_calibration(NoTime(), CONFIG, workloads=[(name, workloads[name])])
    pre = rows[rows["num_prefill_tokens"] > 0]
    tokens = pre["num_prefill_tokens"] + pre["num_decode_seqs"]
    sizes = mixed_graph_token_sizes(CONFIG.max_num_batched_tokens)
    bucket = pd.Series([next(t for t in sizes if t >= n) for n in tokens if n <= sizes[-1]]).value_counts()
    b = int(name.split("-b")[1].split("-")[0])
    for t in sizes:
        if t > b + 2:
            assert bucket.get(t, 0) >= 2, f"{name}: {bucket.get(t, 0)} steps in the {t}-token bucket"
    small = pre[(tokens <= sizes[-1]) & (pre["num_prefill_seqs"] == 1)]  # not the running batch's own prefill
    assert (small["num_decode_seqs"] >= b - 1).all()  # packed with the running decodes


@pytest.mark.parametrize("name", ["eager-b4-c512", "eager-b24-c1024"])
def test_eager_workloads_time_mixed_steps_above_the_largest_bucket(workloads, name):
    """Eager mixed steps of 4.3k-8.1k packed tokens (above the largest token bucket, up to the budget), two of each
    size, each packed with the running decodes."""
    rows = run_calibration(NoTime(), CONFIG, workloads=[(name, workloads[name])])
    pre = rows[rows["num_prefill_tokens"] > 0]
    tokens = pre["num_prefill_tokens"] + pre["num_decode_seqs"]
    largest = mixed_graph_token_sizes(CONFIG.max_num_batched_tokens)[-1]
    b = int(name.split("-b")[1].split("-")[0])
    packed = (tokens > largest) & (pre["num_decode_seqs"] >= b - 1)  # not the running batch's own prefill
    eager = tokens[packed].value_counts()
    assert len(eager) == 8 and (eager >= 2).all() and eager.index.min() < 1.1 * largest
    assert 0.95 * CONFIG.max_num_batched_tokens < eager.index.max() <= CONFIG.max_num_batched_tokens


@pytest.mark.parametrize("name", ["prefix-b4-c512-p2048", "prefix-b16-c1024-p4096"])
def test_prefix_workloads_time_bucket_sized_chunks_after_a_cached_prefix(workloads, name):
    """Graph mixed steps in every token bucket whose chunk reads a cached prefix far longer than itself (prefix-cache
    hits: prefill_attn_pairs of q * pre + q(q+1)/2), twice or more, packed with the running decodes."""
    rows = run_calibration(NoTime(), CONFIG, workloads=[(name, workloads[name])])
    pre = int(name.split("-p")[-1])
    b = int(name.split("-b")[1].split("-")[0])
    sizes = mixed_graph_token_sizes(CONFIG.max_num_batched_tokens)
    chunks = rows[(rows["num_prefill_tokens"] > 0) & (rows["num_decode_seqs"] >= b - 1)]
    tokens = chunks["num_prefill_tokens"] + chunks["num_decode_seqs"]
    hits = chunks[(tokens <= sizes[-1]) & (chunks["prefill_context_tokens"] - chunks["num_prefill_tokens"] >= pre)]
    q = hits["num_prefill_tokens"]
    assert (hits["prefill_attn_pairs"] >= q * pre + q * (q + 1) // 2).all()
    bucket = pd.Series([next(t for t in sizes if t >= n) for n in hits["num_prefill_tokens"] + hits["num_decode_seqs"]])
    for t in sizes:
        if b + 2 < t <= CONFIG.resolved_max_model_len - 2 - pre:  # the prompt (prefix + chunk) fits the window
            assert (bucket == t).sum() >= 2, f"{name}: {(bucket == t).sum()} prefix-hit steps in the {t}-token bucket"


def test_calibration_rows_keep_the_prefill_walks_and_a_refit_replays_them(workloads):
    """The rows carry the prefill programs' walks (not recorded columns); rows saved without them get them back
    from a replay of their workloads, and a row that does not meet its replayed step is refused."""
    from engine.calibration import with_replayed_walks
    from pagesim.cost.features import prefill_walks
    from pagesim.cost.profile import WALK_COLUMNS
    from pagesim.errors import UserError

    names = ["prefix-b4-c512-p2048", "eager-b4-c512", "skew-b31-s1024-l2048"]  # the last has advanced steps
    # rows saved before round 9 (the ones that lack the walks) have every step, advanced ones included
    rows = run_calibration(NoTime(), CONFIG, workloads=[(n, workloads[n]) for n in names], advance=False)
    advancing = run_calibration(NoTime(), CONFIG, workloads=[(n, workloads[n]) for n in names])
    assert len(advancing) < len(rows)
    one = rows[rows["num_prefill_seqs"] == 1]
    q = one["num_prefill_tokens"]
    expected = [prefill_walks(int(ctx - n), int(n)) for ctx, n in zip(one["prefill_context_tokens"], q)]
    assert one["prefill_tile_walks"].tolist() == [w for w, _ in expected] and (one["prefill_longest_walk"] > 1).any()
    # and the kernel's schedule (round 35), by the executor's prefill kernel: NoTime has none, the Triton kernel's rule
    from pagesim.cost.features import prefill_makespan

    assert one["prefill_makespan"].tolist() == [prefill_makespan([(int(ctx - n), int(n))], 32, 132, 0)
                                                for ctx, n in zip(one["prefill_context_tokens"], q)]
    assert (one["prefill_makespan"] >= one["prefill_longest_walk"]).all() and (rows["prefill_makespan"] > 0).any()
    assert (rows.loc[rows["num_prefill_tokens"] == 0, list(WALK_COLUMNS)] == 0).all().all()
    saved = rows.drop(columns=list(WALK_COLUMNS))
    replayed = with_replayed_walks(saved, CONFIG, "rows.csv")
    pd.testing.assert_frame_equal(replayed[rows.columns], rows)
    replayed = with_replayed_walks(advancing.drop(columns=list(WALK_COLUMNS)), CONFIG, "rows.csv")
    pd.testing.assert_frame_equal(replayed[advancing.columns], advancing)
    saved.loc[5, "num_prefill_tokens"] += 1
    with pytest.raises(UserError, match=r"rows.csv: row 5 .* does not match its replayed step"):
        with_replayed_walks(saved, CONFIG, "rows.csv")


@pytest.mark.parametrize("name", ["multi-b8-c512", "multi-b8-c512-p2048"])
def test_multi_workloads_time_graph_mixed_steps_of_several_prefill_sequences(workloads, name):
    """2, 4 and 8 prompts released together: graph mixed steps (at most the largest bucket) of that many prefill
    sequences, packed with the running decodes, in several buckets each; after a cached prefix with the prefix."""
    rows = run_calibration(NoTime(), CONFIG, workloads=[(name, workloads[name])])
    sizes = mixed_graph_token_sizes(CONFIG.max_num_batched_tokens)
    mixed = rows[(rows["num_prefill_tokens"] > 0) & (rows["num_prefill_tokens"] + rows["num_decode_seqs"] <= sizes[-1])]
    for k in (2, 4, 8):
        steps = mixed[(mixed["num_prefill_seqs"] == k) & (mixed["num_decode_seqs"] >= 8)]
        assert len(steps) >= 4, f"{name}: {len(steps)} graph mixed steps of {k} prefill sequences"
        if name.endswith("p2048"):
            assert (steps["prefill_context_tokens"] - steps["num_prefill_tokens"] >= k * 2048).all()


def test_calibration_ab_pairs_the_kept_rows_with_their_timed_steps(workloads, monkeypatch, tmp_path):
    """bench/calibration_ab.py: every row the advancing calibration kept is paired with the same step timed, and the
    rows right after an advanced step are told apart (the bench's A/B of round 9)."""
    import engine.calibration as calibration
    from bench.calibration_ab import main

    pick = [(n, workloads[n]) for n in ("decode-c1024", "shared-b16-p1536-c512-g4")]
    advanced = run_calibration(NoTime(), CONFIG, workloads=pick)
    monkeypatch.setattr(calibration, "ADVANCE_TOKENS", 10**9)
    timed = run_calibration(NoTime(), CONFIG, workloads=pick)
    advanced.to_csv(tmp_path / "a.csv", index=False)
    timed.to_csv(tmp_path / "t.csv", index=False)
    assert main([str(tmp_path / "t.csv"), str(tmp_path / "a.csv"), "--out", str(tmp_path / "ab.json")]) == 0
    rows = __import__("json").loads((tmp_path / "ab.json").read_text())["rows"]
    assert sum(r["rows"] for r in rows) == len(advanced) < len(timed)
    after = [r for r in rows if r["right_after_an_advanced_step"]]
    assert after and all(r["workload_has_advanced_steps"] for r in after)
    assert main([str(tmp_path / "t.csv"), str(tmp_path / "a.csv"), "--out", str(tmp_path / "ab.json")]) == 2


def test_calibration_steps_run_with_the_collector_paused_and_nothing_stays_frozen(workloads):
    """Round 10: a collection inside a timed step stops the host for ~0.1 s in a process holding torch. Calibration
    collects between workloads (cheaply: the set-up is frozen out of collections while it runs) and never during a
    step; afterwards the collector is back on and nothing is left frozen."""
    import gc

    class Watching(NoTime):
        def __init__(self):
            self.enabled = []

        def execute(self, plan) -> float:
            self.enabled.append(gc.isenabled())
            return 0.0

        advance = execute

    ex = Watching()
    run_calibration(ex, CONFIG, workloads=[("decode-c512", workloads["decode-c512"])])
    assert ex.enabled and not any(ex.enabled)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_rest_after_each_timed_step_is_idle_time_not_the_steps(workloads):
    """calibrate --rest: the GPU idles after each timed step for rest x its duration (the calibration's mean power
    comes down to a serving engine's), and that idle time is not in any step's duration; advanced steps get no rest.
    Each row carries its workload's start in Unix time (to match nvidia-smi's samples to steps)."""
    import time

    class Sleeping(NoTime):  # every step takes 2 ms of wall time
        def execute(self, plan) -> float:
            time.sleep(0.002)
            return 0.002

    pick = [("skew-b15-s128-l2048", workloads["skew-b15-s128-l2048"])]
    before = time.time()
    rows = run_calibration(Sleeping(), CONFIG, workloads=pick, rest=2.0)
    span = rows["time_s"].iloc[-1] - rows["time_s"].iloc[0]
    assert span >= 0.006 * (len(rows) - 1)  # each step's 2 ms and its rest of twice that went by
    assert 0.002 <= rows["duration_s"].median() < 0.004  # and the rest is in no duration (the host's own work is)
    assert ((rows["started_unix"] >= before) & (rows["started_unix"] <= time.time())).all()
    assert rows["started_unix"].nunique() == 1


def test_rows_carry_each_timed_steps_device_time_and_sm_clock(workloads):
    """A calibration row has its step's device time and the SM clock read while it ran (as a live run's steps), so
    calibration and serving can be compared at the same clock (bench/decode_bias.py); without them the columns are
    NaN, never a neighbour's value."""

    class Clocked(NoTime):
        def __init__(self):
            self.n = 0
            self.last_gpu_time_s, self.last_sm_clock_mhz = None, None

        def execute(self, plan) -> float:
            self.n += 1
            self.last_gpu_time_s, self.last_sm_clock_mhz = self.n * 1e-3, (1500 + self.n if self.n % 2 else None)
            self.last_queue_host_s = self.n * 1e-5
            return 0.0

    ex = Clocked()
    rows = run_calibration(ex, CONFIG, workloads=[("decode-c128", workloads["decode-c128"])])
    # advancing steps are not executed; every timed step's row holds the values of its own execute() call
    n = (rows["gpu_time_s"] * 1e3).round().astype(int)
    assert n.is_unique and (n > 0).all()
    odd = n % 2 == 1
    assert (rows.loc[odd, "sm_clock_mhz"] == 1500 + n[odd]).all() and rows.loc[~odd, "sm_clock_mhz"].isna().all()
    assert ((rows["queue_host_s"] * 1e5).round().astype(int) == n).all()
    assert run_calibration(NoTime(), CONFIG, workloads=[("decode-c128", workloads["decode-c128"])])[
        ["gpu_time_s", "move_gpu_time_s", "queue_host_s", "sm_clock_mhz"]].isna().all().all()


def test_a_calibration_records_its_phases_and_the_commands_wall_time_fit_included(tmp_path):
    """The calibration target (<= 120 s) is the command's: start-up, swap measurement and fit count too. fit_and_write
    adds the fit's seconds to the phases it is given and writes them with calibration_wall_s, this process's age when
    the profile is written, which is at least the phases' sum."""
    import time

    from engine.calibration import fit_and_write
    from engine.live import process_age_s

    age = process_age_s()
    time.sleep(0.05)
    assert age is not None and 0 < age < process_age_s()
    rows = pd.read_csv("results/profiles/h200-llama-3-8b-2026-12-03-r19.steps.csv.gz")
    sizes = tuple(json.loads(Path("results/profiles/h200-llama-3-8b-2026-12-03-r19.json").read_text())
                  ["mixed_graph_token_sizes"])
    phases = {"startup_s": 0.01, "workloads_s": 0.02}
    fit_and_write(rows, Config(model="llama-3-8b", gpu="h200"), tmp_path / "p.json", {}, "test", sizes, phases)
    written = json.loads((tmp_path / "p.json").read_text())
    assert set(written["calibration_phases"]) == {"startup_s", "workloads_s", "fit_s"} and phases["fit_s"] > 0
    assert written["calibration_wall_s"] >= sum(written["calibration_phases"].values())
    fit_and_write(rows, Config(model="llama-3-8b", gpu="h200"), tmp_path / "q.json", {}, "test", sizes)
    assert "calibration_phases" not in json.loads((tmp_path / "q.json").read_text())  # --refit: no phases to record


def test_rows_so_far_are_handed_on_at_most_every_save_interval_and_after_the_last_workload(workloads):
    """calibrate saves its rows as it goes (an interrupted calibration can be refitted) without rewriting the growing
    file after every workload: on_workload runs when save_every_s have passed, and always after the last workload."""
    pick = [(n, workloads[n]) for n in ("prefill-16", "prefill-64", "prefill-256")]
    seen: list[int] = []
    every = run_calibration(NoTime(), CONFIG, workloads=pick, on_workload=lambda r: seen.append(len(r)), save_every_s=0.0)
    assert len(seen) == 3 and seen == sorted(seen) and seen[-1] == len(every)
    seen.clear()
    rows = run_calibration(NoTime(), CONFIG, workloads=pick, on_workload=lambda r: seen.append(len(r)), save_every_s=1e9)
    assert seen == [len(rows)] and len(rows) == len(every)
