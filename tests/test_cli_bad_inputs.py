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


def test_refit_rows_are_checked_naming_the_line_and_column(tmp_path):
    rows = pd.read_csv(STEPS).head(50).astype(object)
    cases = [("num_decode_seqs", 7, None, "expected a whole number of at least 0, got an empty value"),
             ("num_prefill_tokens", 3, "abc", "expected a whole number of at least 0, got 'abc'"),
             ("decode_context_tokens", 9, -4, "expected a whole number of at least 0, got -4"),
             ("duration_s", 5, 0, "expected a positive number of seconds, got 0.0")]
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
        "argument --max-gpus: expected a positive integer, got '0'")
    assert one_error(pagesim("sweep", trace, "--grid", "block_size=16", "--num-cpus", -1, "--out", tmp_path / "s")).endswith(
        "argument --num-cpus: expected a positive integer, got '-1'")
