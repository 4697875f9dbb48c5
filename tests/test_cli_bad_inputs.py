"""Bad inputs to every subcommand, as a new user types them: one `error:` line naming the flag or the file (and
its line and field), exit code 2, no traceback, nothing overwritten without --force, checked before any work.

The helpers (`pagesim` runs the real CLI in a subprocess, `one_error` asserts the single error line) are
test_cli_hygiene's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.test_cli_hygiene import REPO, azure_csv, one_error, own_trace, pagesim

STEPS = REPO / "results" / "profiles" / "h200-llama-3-8b.steps.csv.gz"  # a committed calibration's rows


# ---- calibrate --refit ----------------------------------------------------------------------------------
def test_refit_refuses_to_replace_an_existing_profile_without_force(tmp_path):
    profile = tmp_path / "p.json"
    profile.write_text('{"kept": true}')
    line = one_error(pagesim("calibrate", "--refit", STEPS, "--out", profile))
    assert line == f"error: --out {profile}: file exists; pass --force to replace it, or choose another --out"
    assert profile.read_text() == '{"kept": true}'


def test_refit_of_a_gz_file_that_is_not_gzip_is_one_line(tmp_path):
    fake = tmp_path / "x.steps.csv.gz"
    fake.write_text("num_prefill_tokens,duration_s\n1,0.5\n")
    line = one_error(pagesim("calibrate", "--refit", fake, "--out", tmp_path / "p.json"))
    assert line.startswith(f"error: --refit {fake}: cannot read it as gzipped CSV (Not a gzipped file")
    assert line.endswith("expected the *.steps.csv.gz a calibration saved")
    cut = tmp_path / "cut.steps.csv.gz"
    cut.write_bytes(STEPS.read_bytes()[:200])
    assert "cannot read it as gzipped CSV" in one_error(pagesim("calibrate", "--refit", cut, "--out", tmp_path / "p.json"))
    assert not (tmp_path / "p.json").exists()


def test_refit_of_a_file_that_is_not_csv_rows_is_one_line_naming_what_was_expected(tmp_path):
    """Was: 'error: --refit README.md: not a CSV of calibration steps (Error tokenizing data. C error: Expected 1 fields
    in line 4, saw 3' and ')' on a line of its own (pandas' message, ending in a newline)."""
    readme = REPO / "README.md"
    line = one_error(pagesim("calibrate", "--refit", readme, "--out", tmp_path / "p.json"))
    assert line.startswith(f"error: --refit {readme}: not a CSV of calibration steps (line ")
    assert "comma-separated fields where the header has" in line and "C error" not in line
    assert line.endswith("); expected the *.steps.csv.gz a calibration saved")
    quoted = tmp_path / "quoted.csv"
    quoted.write_text('a,b\n"x,1\n')  # an unbalanced quote: pandas' own words, on one line
    line = one_error(pagesim("calibrate", "--refit", quoted, "--out", tmp_path / "p.json"))
    assert line.startswith(f"error: --refit {quoted}: not a CSV of calibration steps (")
    assert line.endswith("); expected the *.steps.csv.gz a calibration saved")
    assert not (tmp_path / "p.json").exists()


def test_refit_rows_are_checked_naming_the_line_and_column(tmp_path):
    rows = pd.read_csv(STEPS).head(50).astype(object)
    cases = [("num_decode_seqs", 7, None, "expected a whole number of at least 0, got an empty value"),
             ("num_prefill_tokens", 3, "abc", "expected a whole number of at least 0, got 'abc'"),
             ("decode_context_tokens", 9, -4, "expected a whole number of at least 0, got -4"),
             ("duration_s", 5, 0, "expected a positive number of seconds, got 0.0"),
             # absurd but finite counts: was fitted without a word (a 1e15-token step)
             ("num_prefill_tokens", 4, 1e15, "expected a whole number from 0 to 2,147,483,647, got 1000000000000000.0"),
             ("num_decode_seqs", 6, 1e300, "expected a whole number from 0 to 2,147,483,647, got 1e+300"),
             ("num_decode_seqs", 10, 2.5, "expected a whole number of at least 0, got 2.5")]
    for column, i, value, expected in cases:
        bad = rows.copy()
        bad.loc[i, column] = value
        path = tmp_path / f"{column}.csv"
        bad.to_csv(path, index=False)
        line = one_error(pagesim("calibrate", "--refit", path, "--out", tmp_path / "p.json"))
        assert line == f"error: {path}, line {i + 2}, field '{column}': {expected}"
    rows.drop(columns=["duration_s"]).to_csv(tmp_path / "no-duration.csv", index=False)
    line = one_error(pagesim("calibrate", "--refit", tmp_path / "no-duration.csv", "--out", tmp_path / "p.json"))
    assert line == f"error: {tmp_path / 'no-duration.csv'}, line 1: expected a header of calibration steps; it lacks duration_s"
    rows.head(0).to_csv(tmp_path / "header.csv", index=False)
    line = one_error(pagesim("calibrate", "--refit", tmp_path / "header.csv", "--out", tmp_path / "p.json"))
    assert line == f"error: {tmp_path / 'header.csv'}: expected calibration steps, got a header and no rows"
    line = one_error(pagesim("calibrate", "--refit", tmp_path, "--out", tmp_path / "p.json"))
    assert line == f"error: --refit {tmp_path}: a directory; expected the *.steps.csv.gz a calibration saved"
    assert not (tmp_path / "p.json").exists()


def test_refit_rows_too_few_to_fit_name_the_rows_file(tmp_path):
    """Was: 'error: calibration rows: 6 usable decode-only (CUDA-graph) steps to fit, need at least 26', naming no file."""
    rows = pd.read_csv(STEPS)
    few, one = tmp_path / "few.csv", tmp_path / "one.csv"
    rows.head(30).to_csv(few, index=False)
    rows.assign(workload="w").to_csv(one, index=False)
    line = one_error(pagesim("calibrate", "--refit", few, "--out", tmp_path / "p.json"))
    assert line == f"error: --refit {few}: 6 usable decode-only (CUDA-graph) steps to fit, need at least 26"
    line = one_error(pagesim("calibrate", "--refit", one, "--out", tmp_path / "p.json"))
    assert line == f"error: --refit {one}: 1 workload(s); holding out whole workloads needs at least 2"
    assert not (tmp_path / "p.json").exists()


def test_calibrate_integer_options_must_be_positive(tmp_path):
    line = one_error(pagesim("calibrate", "--block-size", "0", "--out", tmp_path / "p.json"))
    assert line.endswith("argument --block-size: expected a positive integer, got '0'")


# ---- output paths that cannot be written ------------------------------------------------------------------
def test_out_on_a_pseudo_file_system_is_refused_before_any_work(tmp_path):
    for args in (["trace", "synth", "--preset", "sharegpt", "--num-requests", 5, "--rate", 1],
                 ["trace", "convert", azure_csv(tmp_path / "t.csv")]):
        line = one_error(pagesim(*args, "--out", "/proc/x"))
        # root: the file cannot be created; anyone else: /proc is not writable
        assert line in ("error: --out /proc/x: cannot create the file (No such file or directory)",
                        "error: --out /proc/x: not writable"), line
    line = one_error(pagesim("replay", azure_csv(tmp_path / "t.csv"), "--out", "/proc/self", "--force"))
    assert line.startswith("error: --out /proc/self: ") and ("cannot create files" in line or "not writable" in line)


# ---- trace synth ----------------------------------------------------------------------------------------
def test_trace_synth_refuses_a_request_count_it_cannot_hold_in_memory(tmp_path):
    out = tmp_path / "big.jsonl"
    line = one_error(pagesim("trace", "synth", "--preset", "sharegpt", "--num-requests", 100_000_000, "--rate", 1,
                             "--out", out, timeout=60))
    assert line == ("error: --num-requests 100,000,000: a sharegpt trace is built in memory at about 600 bytes per "
                    "request; at most 13,333,333 requests (~8 GB) are allowed")
    line = one_error(pagesim("trace", "synth", "--preset", "multiturn", "--num-requests", 1_000_000, "--rate", 1,
                             "--out", out, timeout=60))
    assert "at most 666,666 requests" in line
    assert not out.exists()


# ---- plan ---------------------------------------------------------------------------------------------
PLAN = ["plan", REPO / "traces" / "multiturn-300.jsonl", "--limit", 40, "--slo", "ttft_p99=0.5", "--max-gpus", 1,
        "--grid", "max_num_seqs=4", "--grid", "max_num_batched_tokens=2048", "--grid", "block_size=16",
        "--backend", "local", "--num-cpus", 1]


def test_plan_refuses_to_rewrite_a_finished_plan_without_force(tmp_path):
    out = tmp_path / "plan"
    assert pagesim(*PLAN, "--out", out).returncode == 0
    (out / "plan.json").write_text('{"kept": true}')
    line = one_error(pagesim(*PLAN, "--out", out))
    assert line == (f"error: --out {out}: holds a finished plan (plan.json); pass --force to plan again into it, "
                    "or choose another --out")
    assert (out / "plan.json").read_text() == '{"kept": true}'
    assert pagesim(*PLAN, "--out", out, "--force").returncode == 0
    assert json.loads((out / "plan.json").read_text())["evaluated"] == 1


def test_plan_and_sweep_counts_must_be_positive(tmp_path):
    trace = own_trace(tmp_path / "t.jsonl", [10, 20])
    assert one_error(pagesim("plan", trace, "--slo", "ttft_p99=1", "--max-gpus", 0, "--out", tmp_path / "p")).endswith(
        "argument --max-gpus: expected a positive integer of at most 8,000 (tensor parallelism of up to 8 GPUs times "
        "at most 1,000 replicas), got '0'")
    assert one_error(pagesim("sweep", trace, "--grid", "block_size=16", "--num-cpus", -1, "--out", tmp_path / "s")).endswith(
        "argument --num-cpus: expected a positive integer, got '-1'")


# ---- found on a pass over every subcommand -------------------------------------------------------------
def broken_csv(path: Path) -> Path:
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,1\n")
    return path


def test_a_bad_cost_model_is_refused_before_the_trace_is_read(tmp_path):
    broken = broken_csv(tmp_path / "broken.csv")
    line = one_error(pagesim("replay", broken, "--cost-model", tmp_path, "--out", tmp_path / "run"))
    assert line == (f"error: cost model '{tmp_path}': a directory; expected 'roofline' or a profile JSON "
                    "(written by `calibrate` or `live --calibrate`)")
    line = one_error(pagesim("replay", broken, "--cost-model", "/dev/zero", "--out", tmp_path / "run"))
    assert "cost model '/dev/zero': a device or pipe" in line  # not read forever
    for command in (["sweep", broken, "--grid", "block_size=16"], ["plan", broken, "--slo", "ttft_p99=1"]):
        line = one_error(pagesim(*command, "--cost-model", tmp_path, "--backend", "local", "--out", tmp_path / "s"))
        assert f"cost model '{tmp_path}': a directory" in line  # not one error row per configuration
    assert not (tmp_path / "run").exists() and not (tmp_path / "s").exists()


def test_options_a_command_does_not_use_are_refused(tmp_path):
    broken = broken_csv(tmp_path / "broken.csv")
    line = one_error(pagesim("sweep", broken, "--grid", "block_size=16", "--baseline", "max", "--out", tmp_path / "s"))
    assert line == "error: --baseline does not apply to sweep: sweep the layout instead, e.g. --grid layout=paged,max"
    line = one_error(pagesim("plan", broken, "--slo", "ttft_p99=1", "--baseline", "max", "--out", tmp_path / "s"))
    assert line == "error: --baseline does not apply to plan"
    line = one_error(pagesim("parity", broken, "--cost-model", tmp_path, "--out", tmp_path / "s"))
    assert line == "error: --cost-model does not apply to parity (it compares the schedules step by step, not their times)"
    for value, says in (("0", "expected a positive number, got '0'"), ("inf", "expected a finite number, got 'inf'")):
        assert one_error(pagesim("parity", broken, "--step-s", value, "--out", tmp_path / "s")).endswith(
            f"argument --step-s: {says}")
    assert not (tmp_path / "s").exists()


def test_validate_refuses_the_run_itself_as_its_replicate(tmp_path):
    run = REPO / "results" / "live" / "azure-code-600-660"
    line = one_error(pagesim("validate", run, "--replicate", f"{run}/", "--out", tmp_path / "v"))
    assert line == (f"error: --replicate {run}/: is the run itself; expected another live recording of the same "
                    "window (their distance is the engine's run-to-run spread)")
    assert not (tmp_path / "v").exists()


def test_grid_values_are_checked_and_repeated_ones_run_once():
    import argparse

    import pytest

    from pagesim.errors import UserError
    from pagesim.replay import add_cluster_options, add_run_options
    from pagesim.sweep import parse_grid

    parser = argparse.ArgumentParser()
    add_run_options(parser)
    add_cluster_options(parser)
    with pytest.raises(UserError, match=r"^--grid 'kv_cache_gib=1,-1': '-1' is not a positive number of GiB"):
        parse_grid(["kv_cache_gib=1,-1"], parser)
    assert parse_grid(["block_size=16,32,16"], parser) == [{"block_size": 16}, {"block_size": 32}]


def test_trace_synth_options_out_of_range_are_one_line(tmp_path):
    synth = ["trace", "synth", "--preset", "sharegpt", "--num-requests", 5, "--rate", 1]
    for flags, says in ((["--seed", "-1"], "argument --seed: expected a non-negative integer, got '-1'"),
                        (["--arrival", "gamma", "--cv", "1e-300"],
                         "error: --cv must be in [0.01, 100] (1: Poisson; larger: burstier), got 1e-300"),
                        (["--arrival", "gamma", "--cv", "1e300"], "error: --cv must be in [0.01, 100]"),
                        (["--priority-levels", "5000000000"],
                         "error: --priority-levels must be 0 (no priority column) or positive up to 2,147,483,648"),
                        (["--hash-block-size", "32"],  # sharegpt carries no prefix hash ids: the option did nothing
                         "error: --hash-block-size 32: only presets with prefix hash ids (kshot, multiturn) use it, "
                         "and sharegpt traces carry none; drop it")):
        assert says in one_error(pagesim(*synth, *flags, "--out", tmp_path / "s.jsonl"))
    # was: "kshot-5, field 'prefix_hash_ids': expected a positive hash_block_size ...", naming no flag
    line = one_error(pagesim(*synth[:3], "kshot", *synth[4:], "--hash-block-size", 99999999999, "--out", tmp_path / "s.jsonl"))
    assert line == "error: --hash-block-size must be a positive integer up to 2,147,483,647, got 99,999,999,999"
    assert not (tmp_path / "s.jsonl").exists()


def test_an_empty_out_is_refused(tmp_path):
    assert one_error(pagesim("replay", azure_csv(tmp_path / "t.csv"), "--out", "")) == "error: --out is empty; expected a path"
    line = one_error(pagesim("trace", "synth", "--preset", "sharegpt", "--num-requests", 5, "--rate", 1, "--out", " "))
    assert line == "error: --out is empty; expected a path"
    # sweep and plan: were "--out .: directory exists and is not empty", and from an empty directory they wrote there
    trace = azure_csv(tmp_path / "t.csv")
    for command in (["sweep", trace, "--grid", "block_size=16"], ["plan", trace, "--slo", "ttft_p99=1"]):
        assert one_error(pagesim(*command, "--backend", "local", "--out", "")) == "error: --out is empty; expected a path"


def test_a_csv_whose_first_row_has_more_fields_than_the_header_is_ragged(tmp_path):
    extra = tmp_path / "extra.csv"
    extra.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5,7\n2023-11-16 18:15:47,10,5,7\n")
    line = one_error(pagesim("trace", "info", extra))
    assert line == f"error: {extra}, line 2: expected as many comma-separated fields as the header has"
    trailing = tmp_path / "trailing.csv"  # a trailing comma on every row is an empty extra field: read as before
    trailing.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5,\n2023-11-16 18:15:47,10,5,\n")
    done = pagesim("trace", "info", trailing)
    assert done.returncode == 0 and "2 requests kept" in done.stdout


def test_live_checks_its_profile_and_unused_options_before_loading_a_model(tmp_path):
    live = ["live", REPO / "traces" / "kshot-shared-prefix-500.jsonl", "--allow-cpu", "--limit", 4, "--model", "toy",
            "--num-gpu-blocks", 64, "--out", tmp_path / "run"]
    for flags, line in ((["--baseline", "max", "--baseline", "pow2"],
                         "error: live runs one engine: pass at most one --baseline, got max, pow2"),
                        (["--cost-model", tmp_path / "p.json"],
                         "error: --cost-model does not apply to live (it times the engine); pass --profile PROFILE.json "
                         "or --calibrate for the profile the run is validated with"),
                        (["--profile", tmp_path],
                         f"error: --profile {tmp_path}: a directory; expected a profile JSON from `python -m pagesim calibrate`")):
        assert one_error(pagesim(*live, *flags)) == line
    (tmp_path / "p.json").write_text("{")
    assert one_error(pagesim(*live, "--profile", tmp_path / "p.json")).startswith(f"error: profile {tmp_path / 'p.json'}: not valid JSON")
    assert not (tmp_path / "run").exists()


def test_refit_refuses_the_options_of_a_timing_it_does_not_redo(tmp_path):
    line = one_error(pagesim("calibrate", "--refit", STEPS, "--rest", 0.5, "--block-size", 32, "--out", tmp_path / "p.json"))
    assert line == ("error: --block-size, --rest: options of a calibration's timing; --refit refits rows timed already, "
                    "so drop them")
    assert not (tmp_path / "p.json").exists()


def test_options_that_cannot_act_as_named_are_warned_once_and_recorded(tmp_path):
    trace = azure_csv(tmp_path / "t.csv")
    cases = [(["--policy", "priority"], "--policy priority, but the trace has no priority field: every request has "
                                        "priority 0, so it schedules as fcfs (trace synth --priority-levels K adds one)"),
             (["--router", "prefix-aware"], "--router prefix-aware has no effect with --replicas 1: there is one engine "
                                            "to send requests to"),
             (["--replicas", 2, "--router", "prefix-aware"], "--router prefix-aware without --enable-prefix-caching: no "
                                                              "replica caches a prefix, so it routes as least-outstanding-tokens")]
    for i, (flags, warning) in enumerate(cases):
        done = pagesim("replay", trace, *flags, "--out", tmp_path / f"r{i}")
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("warning: ") == 1 and f"warning: {warning}" in done.stderr
        assert json.loads((tmp_path / f"r{i}" / "summary.json").read_text())["warnings"] == [warning]


def test_plan_refuses_a_grid_over_the_deployments_it_searches(tmp_path):
    for text in ("tensor_parallel_size=2", "max-gpus=2"):
        line = one_error(pagesim("plan", broken_csv(tmp_path / "b.csv"), "--slo", "ttft_p99=1", "--grid", text,
                                 "--out", tmp_path / "p"))
        assert line == (f"error: --grid '{text}': plan searches the deployments itself (tensor_parallel_size in 1, 2, 4, "
                        "8 times replicas, within --max-gpus); drop this --grid")
    assert not (tmp_path / "p").exists()


def test_a_trace_whose_every_row_is_dropped_says_why(tmp_path):
    failed = tmp_path / "burst.csv"
    failed.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                      "5,ChatGPT,10,0,10,Conversation log\n6,ChatGPT,12,0,12,Conversation log\n")
    line = one_error(pagesim("trace", "info", failed))
    assert line == (f"error: {failed}: expected at least one request, got none (2 dropped: failed request "
                    "(Response tokens = 0))")


def test_calibrate_refuses_to_replace_the_rows_beside_its_profile_without_force(tmp_path):
    rows = tmp_path / "p.steps.csv.gz"
    rows.write_bytes(b"kept")
    line = one_error(pagesim("calibrate", "--out", tmp_path / "p.json"))  # before looking for a GPU
    assert line == f"error: --out {rows}: file exists; pass --force to replace it, or choose another --out"
    assert rows.read_bytes() == b"kept" and not (tmp_path / "p.json").exists()


def test_pagesim_records_without_their_header_line_say_so(tmp_path):
    bare = tmp_path / "bare.jsonl"
    bare.write_text('{"request_id": "0", "arrival_time_s": 0, "prompt_len": 10, "output_len": 4}\n')
    line = one_error(pagesim("trace", "info", bare))
    assert line == (f'error: {bare}, line 1: expected a first line {{"pagesim_trace": 1, "name": NAME, "hash_block_size": '
                    'null or B} before pagesim-format records, got a record')


def test_refit_refuses_to_write_its_profile_over_its_own_rows(tmp_path):
    rows = tmp_path / "s.steps.csv.gz"
    rows.write_bytes(STEPS.read_bytes())
    line = one_error(pagesim("calibrate", "--refit", rows, "--out", rows, "--force"))
    assert line == f"error: --out {rows} is the --refit rows file itself; --out names the profile JSON to write"
    assert rows.read_bytes() == STEPS.read_bytes()


def test_rate_and_time_scale_together_are_refused_naming_both_flags(tmp_path):
    """--rate sets the mean arrival rate itself, so a --time-scale beside it did nothing, silently; now refused."""
    line = one_error(pagesim("replay", azure_csv(tmp_path / "conv.csv"), "--rate", "5", "--time-scale", "3",
                             "--out", tmp_path / "r"))
    assert line == ("error: --rate 5.0 sets the mean arrival rate itself, so --time-scale 3.0 would have no effect; "
                    "pass one of them")
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())  # nothing written (an empty --out may stay)


def test_trace_synth_refuses_an_empty_name(tmp_path):
    """An empty --name wrote a trace named '' (every run of it then named '' in summary.json and the dashboard)."""
    for name in ("", "  "):
        line = one_error(pagesim("trace", "synth", "--preset", "sharegpt", "--num-requests", "10", "--rate", "1",
                                 "--name", name, "--out", tmp_path / "t.jsonl"))
        assert line.endswith(f"argument --name: expected a non-empty name, got {name!r}")
    assert not (tmp_path / "t.jsonl").exists()


def test_a_swept_cost_model_that_cannot_be_read_is_refused_before_any_work(tmp_path):
    """--grid cost_model=BAD made one error row per configuration with it, after the others had run; now one error
    line naming the grid value, and nothing written."""
    line = one_error(pagesim("sweep", azure_csv(tmp_path / "conv.csv"), "--grid", f"cost_model=roofline,{tmp_path / 'no.json'}",
                             "--out", tmp_path / "s"))
    assert line.startswith(f"error: --grid cost_model={tmp_path / 'no.json'}: cost model ") and "no such file" in line
    assert not (tmp_path / "s").exists()


# ---- options that a grid or plan's search would replace without a word -----------------------------------------
def test_sweep_refuses_an_option_its_grid_also_sets(tmp_path):
    """Was: --block-size 32 with --grid block_size=16,64 ran 16 and 64, the typed 32 silently dropped; and
    --grid kv_cache_gib with --num-gpu-blocks (or a num_gpu_blocks axis) kept the GiB, its rows saying otherwise."""
    broken = broken_csv(tmp_path / "broken.csv")  # refused before the trace is read
    sweep = ["sweep", broken, "--backend", "local", "--out", tmp_path / "s"]
    line = one_error(pagesim(*sweep, "--block-size", 32, "--grid", "block_size=16,64"))
    assert line == ("error: --block-size 32 and --grid block_size=16,64 both set block_size: the grid's values would "
                    "replace the option; drop one of them")
    line = one_error(pagesim(*sweep, "--no-enable-chunked-prefill", "--grid", "enable_chunked_prefill=true,false"))
    assert line.startswith("error: --no-enable-chunked-prefill and --grid enable_chunked_prefill=true,false both set")
    line = one_error(pagesim(*sweep, "--num-gpu-blocks", 100, "--grid", "kv_cache_gib=1,2"))
    assert line == ("error: --grid kv_cache_gib=... and --num-gpu-blocks 100 both size the KV cache (one would be "
                    "ignored); pass one of them")
    line = one_error(pagesim(*sweep, "--grid", "kv_cache_gib=1", "--grid", "num_gpu_blocks=100"))
    assert "--grid num_gpu_blocks=... and --grid kv_cache_gib=... both size the KV cache" in line
    assert not (tmp_path / "s").exists()


def test_plan_refuses_an_option_its_search_would_replace(tmp_path):
    """Was: plan --block-size 32 --max-num-seqs 64 --tensor-parallel-size 2 searched block 16/32, 128/256 seats
    and tp 1/2/4/8, recommending a block size of 16 to a user who had fixed 32."""
    broken = broken_csv(tmp_path / "broken.csv")
    plan = ["plan", broken, "--slo", "ttft_p99=1", "--backend", "local", "--out", tmp_path / "p"]
    line = one_error(pagesim(*plan, "--block-size", 32))
    assert line == ("error: --block-size 32: plan searches block_size over 16, 32 itself, which would replace it; "
                    "to fix it, pass --grid block_size=32 instead")
    line = one_error(pagesim(*plan, "--max-num-seqs", 64, "--grid", "max_num_seqs=128"))
    assert line.startswith("error: --max-num-seqs 64: plan searches max_num_seqs over 128 itself")
    line = one_error(pagesim(*plan, "--tensor-parallel-size", 2))
    assert line.startswith("error: --tensor-parallel-size 2: plan searches the deployments itself")
    assert not (tmp_path / "p").exists()
    # the same value typed and searched is no conflict: it runs (on a valid trace)
    trace = own_trace(tmp_path / "t.jsonl", [10, 20])
    done = pagesim("plan", trace, "--slo", "ttft_p99=1", "--max-gpus", 1, "--block-size", 32, "--grid", "block_size=32",
                   "--grid", "max_num_seqs=4", "--grid", "max_num_batched_tokens=2048", "--backend", "local",
                   "--num-cpus", 1, "--out", tmp_path / "ok")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "ok" / "plan.json").read_text())["recommendation"]["block_size"] == 32


def test_a_rate_on_arrivals_all_at_once_names_the_flag(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,8\n0,20,8\n")  # both at 0 s
    line = one_error(pagesim("replay", trace, "--rate", 5, "--out", tmp_path / "r"))
    assert line == (f"error: {trace}: expected arrivals spread over time, to rescale them to --rate 5, "
                    "got all at once; drop --rate")


# ---- found on a new-user hunt over trace, replay and validate ----------------------------------------------
def test_trace_synth_refuses_a_multiturn_rate_whose_warm_up_it_cannot_build(tmp_path):
    """Was: --preset multiturn --rate 1e300 never ended (a conversation's gap no longer moved the warm-up's clock), and
    --rate 1000 took 75 s and 2 GB for 10 requests: the 200 s warm-up is built whatever --num-requests is."""
    out = tmp_path / "t.jsonl"
    for rate in ("1e300", "1000.5"):
        line = one_error(pagesim("trace", "synth", "--preset", "multiturn", "--num-requests", 10, "--rate", rate,
                                 "--out", out, timeout=60))
        assert line.startswith(f"error: --rate {float(rate):,g}: a multiturn trace builds every conversation started in "
                               "the 200 s before its first request")
        assert line.endswith("at most 1,000 req/s are allowed (replay's --time-scale compresses a trace further)")
    assert not out.exists()
    done = pagesim("trace", "synth", "--preset", "sharegpt", "--num-requests", 10, "--rate", "1e300", "--out", out)
    assert done.returncode == 0, done.stderr  # the other presets build no warm-up: any rate is quick


def test_a_trace_spanning_beyond_what_a_double_resolves_names_the_line(tmp_path):
    """Was: a Vidur row at 1e14 s replayed with every latency of the late requests reading 0 (TTFT, E2E), silently;
    --time-scale and --rate refused the same arrivals (`_check_arrivals`), the file's own times did not."""
    trace = tmp_path / "far.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1e14,10,5\n2,10,5\n")
    line = one_error(pagesim("replay", trace, "--out", tmp_path / "r"))
    assert line == (f"error: {trace}, line 3, field 'arrived_at': expected an arrival at most 1e+09 s after the first, "
                    "where a double still holds a step's microseconds (every latency would read 0; --start-s, --end-s "
                    "or --time-scale make a longer trace shorter), got 1e+14 s after it")
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
    done = pagesim("replay", trace, "--end-s", 100, "--out", tmp_path / "w")  # a window without the far row runs
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "w" / "summary.json").read_text())["runs"]["paged"]["num_finished"] == 2
    assert pagesim("trace", "info", trace).returncode == 0  # the file itself is a valid trace


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path):
    """Was: pandas renamed the second ContextTokens to ContextTokens.1 (and pyarrow read the first), so the check
    for a repeated column never fired and the trace loaded with the first column's values, silently."""
    for text, blank in (("2023-11-16 18:15:46.1,10,5,999\n2023-11-16 18:15:47.1,20,5,888\n", ""),  # the fast reader's
                        ("2023-11-16 18:15:46.1,10,5,999\n\n2023-11-16 18:15:47.1,20,5,888\n", "blank")):  # careful
        trace = tmp_path / f"dup{blank}.csv"
        trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n" + text)
        line = one_error(pagesim("trace", "info", trace))
        assert line == (f"error: {trace}, line 1, field 'ContextTokens': expected each column named once in the "
                        "header, got it in columns 2 and 4")
    extra = tmp_path / "extra.csv"  # a repeated column the format does not read is no question: read as before
    extra.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,note,note\n0,10,5,a,b\n1,10,5,c,d\n")
    done = pagesim("trace", "info", extra)
    assert done.returncode == 0 and "2 requests kept" in done.stdout, done.stderr


def test_a_trace_whose_lines_end_in_a_lone_cr_reads_as_its_lf_twin(tmp_path):
    """Was: a CSV saved with classic Mac line endings (Excel's "CSV (Macintosh)") was refused as 'expected a known trace
    format', quoting its own, known, header: detection looked for the first LF."""
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46.1,10,5", "2023-11-16 18:15:47.1,20,6"]
    cr, lf = tmp_path / "cr.csv", tmp_path / "lf.csv"
    cr.write_bytes("\r".join(rows + [""]).encode())
    lf.write_bytes("\n".join(rows + [""]).encode())
    done = pagesim("trace", "info", cr)
    assert done.returncode == 0, done.stderr
    assert done.stdout.replace("trace cr", "trace lf") == pagesim("trace", "info", lf).stdout
    rows[2] = "2023-11-16 18:15:47.1,x,6"
    cr.write_bytes("\r".join(rows + [""]).encode())
    assert one_error(pagesim("trace", "info", cr)) == (f"error: {cr}, line 3, field 'ContextTokens': expected a positive "
                                                       "integer, got 'x'")
    cr.write_bytes("\r".join(rows[:2] + ["2023-11-16 18:15:47.1,20,6\xff", ""]).encode("latin-1"))  # not UTF-8 on line 3
    assert one_error(pagesim("trace", "info", cr)).startswith(f"error: {cr}, line 3: expected UTF-8 text")


def test_validate_of_a_damaged_run_directory_names_the_file(tmp_path):
    """Was: a run directory with a cut-short summary.json, an empty releases.csv, a steps.parquet that is not Parquet
    or a releases.csv without release_step ended validate in a traceback (JSONDecodeError, EmptyDataError,
    ArrowInvalid, KeyError)."""
    import shutil

    source = REPO / "results" / "live" / "pair-conv-paged"
    cases = [("summary.json", b'{"config": {', "cannot read summary.json (Expecting property name enclosed in double "
                                               "quotes: line 1 column 13 (char 12))"),
             ("summary.json", b'{"runs": {}}', "summary.json holds no live run (expected its config and runs.live)"),
             ("summary.json", b'[1, 2]', "summary.json holds no live run (expected its config and runs.live)"),
             ("releases.csv", b"", "cannot read releases.csv (No columns to parse from file)"),
             ("steps.parquet", b"PAR1 not parquet", "cannot read steps.parquet (Parquet magic bytes not found in footer"),
             ("releases.csv", b"request_id,arrival_time_s,released_s\n1,0.0,0.1\n", "releases.csv lacks the column "
                                                                                   "release_step")]
    for i, (name, content, says) in enumerate(cases):
        run = tmp_path / f"run{i}"
        shutil.copytree(source, run, ignore=shutil.ignore_patterns("validation"))
        (run / name).write_bytes(content)
        line = one_error(pagesim("validate", run, "--out", tmp_path / f"v{i}"))
        assert line.startswith(f"error: {run}: {says}"), line
        assert not (tmp_path / f"v{i}").exists()
    line = one_error(pagesim("validate", source, "--replicate", run, "--out", tmp_path / "v"))
    assert line.startswith(f"error: --replicate {run}: releases.csv lacks the column release_step")


def test_a_lone_cr_in_a_csv_with_lf_line_endings_is_no_traceback(tmp_path):
    """Was: a CR before the header of an LF file (a stray Mac line ending) ended trace info in a traceback from the csv
    module ('new-line character seen in unquoted field'); now it is whitespace before the header, skipped as blank
    lines before a header are, and lines are counted at LF as before. Blank lines before the header were counted twice
    in the line of a ragged row or an open quote."""
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46.1,10,5", "2023-11-16 18:15:47.1,20,6"]
    lf, cr = tmp_path / "lf.csv", tmp_path / "cr.csv"
    lf.write_text("\n".join(rows) + "\n")
    cr.write_text("\r" + "\n".join(rows) + "\n")
    done = pagesim("trace", "info", cr)
    assert done.returncode == 0, done.stderr
    assert done.stdout.replace("trace cr", "trace lf") == pagesim("trace", "info", lf).stdout
    cr.write_text("\r" + "\n".join(rows[:2] + ["2023-11-16 18:15:47.1,x,6"]) + "\n")
    assert one_error(pagesim("trace", "info", cr)) == (f"error: {cr}, line 3, field 'ContextTokens': expected a positive "
                                                       "integer, got 'x'")
    # blank lines before the header: a ragged row or an open quote was named with the blank lines counted twice
    blank = tmp_path / "blank.csv"
    blank.write_text("\n\n" + "\n".join(rows + ["2023-11-16 18:15:48.1,30,7,9"]) + "\n")
    assert one_error(pagesim("trace", "info", blank)) == (f"error: {blank}, line 6: expected as many comma-separated "
                                                          "fields as the header has")
    blank.write_text("\n\n" + "\n".join(rows[:2] + ['2023-11-16 18:15:47.1,"20,6'] + rows[2:]) + "\n")
    assert one_error(pagesim("trace", "info", blank)) == f"error: {blank}, line 5: expected CSV with balanced quotes"


def test_validate_of_a_run_whose_releases_do_not_match_its_arrivals_names_the_request(tmp_path):
    """Was: a releases.csv cut short, or with a text where a time is, ended validate in a traceback (KeyError, ValueError
    from float()); an arrivals file cut short ended it in 'steps without a replayed plan; cannot fill in ...', naming
    neither the run nor the file; a file given as DIR was 'no such directory'."""
    import gzip
    import shutil

    source = REPO / "results" / "live" / "pair-conv-paged"
    releases = (source / "releases.csv").read_text().splitlines(keepends=True)
    arrivals = gzip.decompress((source / "arrivals.jsonl.gz").read_bytes()).decode().splitlines(keepends=True)
    first, second = releases[1].split(",")[0], releases[2].split(",")[0]
    cases = [("releases.csv", releases[:3], f"releases.csv has no row for request '{releases[3].split(',')[0]}' of "
                                            f"arrivals.jsonl.gz ({len(releases) - 3} of its {len(releases) - 1} "
                                            "requests lack one)"),
             ("releases.csv", [releases[0], releases[1].replace(",0.0,", ",0.0x,"), *releases[2:]],
              f"releases.csv, the row of request '{first}', field 'arrival_time_s': expected a number of seconds of "
              "at least 0, got '0.0x'"),
             ("releases.csv", [releases[0], releases[1], releases[2].rsplit(",", 1)[0] + ",1.5\n", *releases[3:]],
              f"releases.csv, the row of request '{second}', field 'release_step': expected a step number (a whole "
              "number of at least 0), got 1.5"),
             ("releases.csv", [*releases, releases[1]], f"releases.csv has two rows for request '{first}'"),
             ("arrivals.jsonl.gz", arrivals[:3], f"arrivals.jsonl.gz lacks request '{releases[3].split(',')[0]}' of "
                                                 f"releases.csv ({len(releases) - 3} of its {len(releases) - 1} "
                                                 "released requests are not in it)")]
    for i, (name, lines, says) in enumerate(cases):
        run = tmp_path / f"run{i}"
        shutil.copytree(source, run, ignore=shutil.ignore_patterns("validation"))
        content = "".join(lines).encode()
        (run / name).write_bytes(gzip.compress(content) if name.endswith(".gz") else content)
        line = one_error(pagesim("validate", run, "--out", tmp_path / f"v{i}"))
        assert line.startswith(f"error: {run}: {says}"), line
        assert not (tmp_path / f"v{i}").exists()
    file = tmp_path / "run0" / "releases.csv"
    assert one_error(pagesim("validate", file)) == (f"error: {file}: is a file, not a directory; expected a live run "
                                                    "directory (the output of `python -m pagesim live`)")


def test_validate_of_a_run_whose_steps_batches_or_requests_are_cut_short_names_the_file(tmp_path):
    """Was: a batches.parquet or steps.parquet of fewer steps than the run's ended validate in a traceback (KeyError,
    IndexError), and a requests.parquet of fewer requests validated without a word, its lockstep figures those of the
    requests left."""
    import shutil

    import pyarrow.parquet as pq

    source = REPO / "results" / "live" / "pair-conv-paged"
    steps = pq.read_table(source / "steps.parquet").num_rows
    requests = len(pd.read_csv(source / "releases.csv"))
    cases = [("batches.parquet", 100, f"batches.parquet has no row for step 100 of steps.parquet ({steps - 100} of "
                                      f"its {steps} steps lack one)"),
             ("steps.parquet", 20, "releases.csv, the row of request "),
             ("requests.parquet", 10, "requests.parquet has no row for request ")]
    for i, (name, keep, says) in enumerate(cases):
        run = tmp_path / f"run{i}"
        shutil.copytree(source, run, ignore=shutil.ignore_patterns("validation"))
        pq.write_table(pq.read_table(source / name).slice(0, keep), run / name)
        line = one_error(pagesim("validate", run, "--out", tmp_path / f"v{i}"))
        assert line.startswith(f"error: {run}: {says}"), line
        assert not (tmp_path / f"v{i}").exists()
    line = one_error(pagesim("validate", tmp_path / "run1"))
    assert "field 'release_step': expected a step of steps.parquet (it finished), got " in line
    assert line.endswith("steps.parquet's steps run 0-19; expected the files `python -m pagesim live` writes, from one run")
    line = one_error(pagesim("validate", tmp_path / "run2"))
    assert f"of the arrivals ({requests - 10} of their {requests} requests lack one)" in line


def test_sweep_and_plan_refuse_a_ray_address_that_would_be_ignored(tmp_path):
    """Was: --address with --backend local ran local processes, and --num-cpus with --address ran on the cluster's
    CPUs (start_ray passes num_cpus only to a local instance), each without a word."""
    broken = broken_csv(tmp_path / "broken.csv")  # refused before the trace is read
    for command in (["sweep", broken, "--grid", "block_size=16"], ["plan", broken, "--slo", "ttft_p99=1"]):
        name = command[0]
        line = one_error(pagesim(*command, "--backend", "local", "--address", "10.0.0.1:6379", "--out", tmp_path / "s"))
        assert line == (f"error: --address 10.0.0.1:6379 names a Ray cluster, but --backend local runs the {name} in "
                        "local processes; drop --address, or --backend local")
        line = one_error(pagesim(*command, "--address", "10.0.0.1:6379", "--num-cpus", 2, "--out", tmp_path / "s"))
        assert line == (f"error: --num-cpus 2 sizes the local Ray instance, but --address 10.0.0.1:6379 runs the {name} "
                        "on that cluster's CPUs; drop --num-cpus, or --address")
    assert not (tmp_path / "s").exists()
