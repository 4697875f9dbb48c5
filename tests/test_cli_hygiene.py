"""Command-line hygiene (issue #11), through the real CLI: `python -m pagesim ...` as a subprocess.

Every bad input ends with exit code 2, one `error:` line that names the flag or the file, and no
traceback; output paths are checked before any work; warnings are printed once and recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parent.parent


def pagesim(*args, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pagesim", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout)


def one_error(done: subprocess.CompletedProcess) -> str:
    """The single error line of a failed command (argparse's `prog: error: ...` or pagesim's `error: ...`)."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:") or ": error:" in line]
    assert len(errors) == 1, done.stderr
    return errors[0]


def azure_csv(path: Path, n: int = 20, prompt: int = 300) -> Path:
    rows = [f"2023-11-16 18:15:{10 + i * 0.5:08.5f},{prompt + 7 * i},{20 + i}" for i in range(n)]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path


def own_trace(path: Path, prompts: list[int]) -> Path:
    lines = ['{"pagesim_trace": 1, "name": "t", "hash_block_size": null}']
    lines += [json.dumps({"request_id": str(i), "arrival_time_s": 0.1 * i, "prompt_len": p, "output_len": 8})
              for i, p in enumerate(prompts)]
    path.write_text("\n".join(lines) + "\n")
    return path


# ---- 1. output paths, checked before any work ---------------------------------------------------------
def test_existing_output_dir_is_refused_before_the_trace_is_even_read(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    broken = tmp_path / "broken.csv"
    broken.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,1\n")
    line = one_error(pagesim("replay", broken, "--out", out))
    assert line == f"error: --out {out}: directory exists and is not empty; pass --force to write into it, or choose another --out"
    assert (out / "summary.json").read_text() == "{}"


def test_a_command_that_fails_before_writing_leaves_no_empty_out_behind(tmp_path):
    """Was: replay created --out (and its missing parents) before reading the trace, so a missing trace left an
    empty directory behind. Now the directories it created and left empty go when it fails; one that was there stays."""
    missing = tmp_path / "nope.csv"
    line = one_error(pagesim("replay", missing, "--out", tmp_path / "a" / "run"))
    assert line.startswith(f"error: {missing}: expected a readable file")
    assert not (tmp_path / "a").exists()
    (tmp_path / "kept").mkdir()
    one_error(pagesim("replay", missing, "--out", tmp_path / "kept"))
    assert (tmp_path / "kept").is_dir()


def test_output_under_a_file_is_refused_at_once(tmp_path):
    (tmp_path / "f").write_text("x")
    line = one_error(pagesim("replay", azure_csv(tmp_path / "t.csv"), "--out", tmp_path / "f" / "run"))
    assert line == f"error: --out {tmp_path / 'f' / 'run'}: a parent path is a file, not a directory"


def test_force_writes_into_an_existing_dir_and_summary_records_provenance(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "old.txt").write_text("kept")
    done = pagesim("replay", azure_csv(tmp_path / "t.csv"), "--out", out, "--force")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pagesim_version"] == "0.1.0"
    assert summary["command"].startswith("python -m pagesim replay ") and summary["command"].endswith("--force")
    assert summary["git_commit"] is None or len(summary["git_commit"]) == 40
    assert summary["warnings"] == []
    assert (out / "old.txt").read_text() == "kept"
    assert "e+0" not in done.stdout  # numbers printed readably: 1,170 not 1.17e+03


def test_trace_synth_and_convert_check_their_out_file(tmp_path):
    new = tmp_path / "newdir" / "k.jsonl"
    assert pagesim("trace", "synth", "--preset", "kshot", "--num-requests", 5, "--rate", 2, "--out", new).returncode == 0
    line = one_error(pagesim("trace", "synth", "--preset", "kshot", "--num-requests", 5, "--rate", 2, "--out", new))
    assert line == f"error: --out {new}: file exists; pass --force to replace it, or choose another --out"
    line = one_error(pagesim("trace", "convert", azure_csv(tmp_path / "t.csv"), "--out", new))
    assert line.endswith("file exists; pass --force to replace it, or choose another --out")


def test_calibrate_checks_its_out_file_before_looking_for_a_gpu(tmp_path):
    profile = tmp_path / "p.json"
    profile.write_text("{}")
    assert one_error(pagesim("calibrate", "--out", profile)).endswith("file exists; pass --force to replace it, or choose another --out")


# ---- 2. options validated where parsed --------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (["--swap-space", "inf"], "argument --swap-space: expected a finite number, got 'inf'"),
        (["--block-size", "16.5"], "argument --block-size: expected a whole number such as 16, got '16.5'"),
        (["--watermark", "1"], "argument --watermark: expected a fraction in [0, 1), got '1'"),
        (["--num-gpu-blocks", "1000000000"],
         "error: --num-gpu-blocks 1,000,000,000: the simulator holds at most 4,000,000 blocks (~0.8 GB of simulator memory)"),
        (["--preemption-mode", "swap", "--swap-space", "1000000"],
         "error: --swap-space 1,000,000 GiB is 512,000,000 host blocks of 2,097,152 bytes; the simulator holds at most 4,000,000 blocks"),
        (["--time-scale", "1e-320"], "error: --time-scale 1e-320 makes arrival times overflow (the last would arrive at inf s)"),
        (["--rate", "1e-320"], "error: --rate 1e-320 makes arrival times overflow"),
        (["--time-scale", "1e-300"], "error: --time-scale 1e-300 makes the last request arrive at 9.5e+300 s, beyond 1e+09 s, where a double no longer holds a step's "
                                     "microseconds"),
        (["--gpu-memory-utilization", "0.01"], "error: model llama-3-8b (15.0 GiB of weights) leaves no KV-cache memory on h200 "
                                               "at --gpu-memory-utilization 0.01: raise it or pass --num-gpu-blocks"),
        (["--start-s", "5", "--end-s", "2"], "error: --end-s (2.0) must be after --start-s (5.0)"),
    ],
)
def test_bad_option_values_are_one_line_naming_the_flag(tmp_path, args, message):
    line = one_error(pagesim("replay", azure_csv(tmp_path / "t.csv"), *args, "--out", tmp_path / "run"))
    assert message in line


def test_config_checks_integer_options_as_integers():
    from pagesim.config import Config
    from pagesim.errors import UserError

    for bad in (16.5, True, "16"):
        with pytest.raises(UserError, match=r"^invalid config: block_size must be an integer, got") as e:
            Config(block_size=bad)
        assert "\n" not in str(e.value)
    assert Config(block_size=16).block_size == 16


# ---- 3. trace reading: size ceiling, devices -------------------------------------------------------
def test_an_empty_trace_path_is_named_as_such():
    """Was: `error: : expected a readable file, got 'No such file or directory'` (the empty name shown as nothing)."""
    assert one_error(pagesim("trace", "info", "")) == "error: trace path is empty; expected a path"
    assert one_error(pagesim("replay", " ", "--out", "x")) == "error: trace path is empty; expected a path"


def test_dev_zero_is_refused_at_once():
    line = one_error(pagesim("trace", "info", "/dev/zero", timeout=60))
    assert line == "error: /dev/zero: expected a regular file (save a device's or a pipe's output to a file first), got a device or pipe"
    assert "regular file" in one_error(pagesim("trace", "info", "/dev/zero", "--format", "azure", timeout=60))


def test_size_ceiling_names_the_limit_and_how_to_raise_it(tmp_path):
    trace = azure_csv(tmp_path / "t.csv")
    line = one_error(pagesim("trace", "info", trace, env={"PAGESIM_MAX_TRACE_MB": "0.0001"}))
    assert line == (f"error: {trace}: expected a trace file of at most 0.0001 MB (set PAGESIM_MAX_TRACE_MB to raise the limit), "
                    f"got {trace.stat().st_size / 1e6:.3g} MB")


# ---- 4. warnings, printed once and recorded ---------------------------------------------------------
def test_config_warnings_are_printed_once_and_recorded(tmp_path):
    out = tmp_path / "run"
    done = pagesim("replay", azure_csv(tmp_path / "t.csv"), "--enable-prefix-caching", "--preemption-mode", "swap",
                   "--swap-space", "0", "--max-model-len", "100000", "--allow-long-max-model-len", "--baseline", "max",
                   "--out", out)
    assert done.returncode == 0, done.stderr
    warnings = json.loads((out / "summary.json").read_text())["warnings"]
    assert [w.split(" ")[0] for w in warnings] == ["--enable-prefix-caching", "--preemption-mode", "--max-model-len",
                                                   "--enable-prefix-caching"]
    assert "neither prefix_hash_ids nor prompt_token_ids" in warnings[0]
    assert "nothing can be swapped out" in warnings[1]
    assert "larger than llama-3-8b's window (8,192 tokens)" in warnings[2]
    assert warnings[3].startswith("--enable-prefix-caching applies to the paged run only: the contiguous baselines "
                                  "(max) reserve whole sequences")
    for w in warnings:
        assert done.stderr.count(f"warning: {w}") == 1


def test_swap_space_without_swap_mode_is_a_warning_printed_once_and_recorded(tmp_path):
    out = tmp_path / "run"
    done = pagesim("replay", azure_csv(tmp_path / "t.csv"), "--swap-space", "8", "--baseline", "max", "--out", out)
    assert done.returncode == 0, done.stderr
    warnings = json.loads((out / "summary.json").read_text())["warnings"]
    assert warnings == ["--swap-space 8 GiB has no effect with --preemption-mode recompute: a preempted request's "
                        "blocks are freed and recomputed, never swapped (--preemption-mode swap uses it)"]
    assert done.stderr.count("warning: --swap-space 8 GiB") == 1


def test_a_tpot_slo_on_outputs_of_one_token_is_a_warning_printed_once_and_recorded(tmp_path):
    """Was: the SLO read 'met' (no request has a TPOT, so none can miss it) and goodput counted every request, without a
    word: a plan with it picks the smallest deployment whatever the TPOT target."""
    trace = tmp_path / "t.jsonl"
    lines = ['{"pagesim_trace": 1, "name": "t", "hash_block_size": null}']
    lines += [json.dumps({"request_id": str(i), "arrival_time_s": 0.1 * i, "prompt_len": 50, "output_len": 1})
              for i in range(5)]
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    done = pagesim("replay", trace, "--slo", "tpot_p99=0.05", "--baseline", "max", "--out", out)
    assert done.returncode == 0, done.stderr
    warnings = json.loads((out / "summary.json").read_text())["warnings"]
    assert warnings == ["--slo tpot_p99=0.05: no request of the trace has two output tokens within max_model_len 8,192 "
                        "(--max-model-len), so none has a TPOT (the time between them): the SLO holds for every request "
                        "and judges nothing (ttft or e2e SLOs do)"]
    assert done.stderr.count("warning: --slo tpot_p99=0.05") == 1


def test_swap_space_typed_at_its_default_without_swap_mode_warns_too(tmp_path):
    """`--swap-space 4` is typed though 4 GiB is the default: as argparse tells it (cli.typed_dests, every default
    suppressed), it warns like any other value, once and in summary.json; an abbreviated flag too; not typed, no
    warning. Was: told by comparing with the dataclass's default, so a typed 4 was silently ignored."""
    text = ("--swap-space 4 GiB has no effect with --preemption-mode recompute: a preempted request's blocks are freed "
            "and recomputed, never swapped (--preemption-mode swap uses it)")
    trace = azure_csv(tmp_path / "t.csv")
    for name, flags in (("typed", ["--swap-space", "4"]), ("abbreviated", ["--swap-sp=4"]), ("not-typed", [])):
        done = pagesim("replay", trace, *flags, "--out", tmp_path / name)
        assert done.returncode == 0, done.stderr
        warnings = json.loads((tmp_path / name / "summary.json").read_text())["warnings"]
        assert warnings == ([] if name == "not-typed" else [text]), name
        assert done.stderr.count("warning: --swap-space") == (0 if name == "not-typed" else 1), name


def test_an_option_typed_at_its_default_counts_as_typed_against_a_grid(tmp_path):
    """The same rule (cli.typed_dests) for sweep: `--block-size 16` is typed though 16 is the default, so a grid over
    block_size would replace it without a word: refused like `--block-size 32` is. Was: let through."""
    line = one_error(pagesim("sweep", azure_csv(tmp_path / "t.csv"), "--block-size", "16", "--grid", "block_size=32,64",
                             "--backend", "local", "--out", tmp_path / "s"))
    assert line.startswith("error: --block-size 16 and --grid block_size=32,64 both set block_size"), line
    assert not (tmp_path / "s").exists()


def test_a_host_tier_smaller_than_a_block_and_one_the_baselines_lack_are_warnings(tmp_path):
    out = tmp_path / "run"
    done = pagesim("replay", own_trace(tmp_path / "t.jsonl", [100] * 4), "--enable-prefix-caching",
                   "--kv-offloading-size", "0.001", "--baseline", "max", "--baseline", "oracle", "--out", out)
    assert done.returncode == 0, done.stderr
    warnings = json.loads((out / "summary.json").read_text())["warnings"]
    assert any(w.startswith("--kv-offloading-size 0.001 GiB holds no host block") and w.endswith("the host tier is off")
               for w in warnings), warnings
    assert any(w.startswith("--enable-prefix-caching and --kv-offloading-size apply to the paged run only: the "
                            "contiguous baselines (max, oracle)") for w in warnings), warnings
    assert json.loads((out / "summary.json").read_text())["config"]["num_offload_blocks"] == 0


def test_max_model_len_beyond_the_window_is_refused_unless_allowed(tmp_path):
    line = one_error(pagesim("replay", azure_csv(tmp_path / "t.csv"), "--max-model-len", "100000", "--out", tmp_path / "run"))
    assert line.startswith("error: --max-model-len 100000 exceeds llama-3-8b's window of 8,192 positions")
    assert "--allow-long-max-model-len" in line
    assert not (tmp_path / "run" / "summary.json").exists()


def test_every_request_rejected_is_a_warning(tmp_path):
    out = tmp_path / "run"
    done = pagesim("replay", azure_csv(tmp_path / "t.csv"), "--max-model-len", "100", "--out", out)
    assert done.returncode == 0, done.stderr
    warnings = json.loads((out / "summary.json").read_text())["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("paged: every request (20) was rejected; most often (20): figures differ by request; the first: prompt of ")
    assert warnings[0].endswith("tokens leaves no room for an output token within max_model_len 100")
    assert done.stderr.count("warning: paged: every request") == 1


def test_more_than_a_tenth_rejected_is_a_warning_with_the_top_reason(tmp_path):
    out = tmp_path / "run"
    done = pagesim("replay", own_trace(tmp_path / "t.jsonl", [100] * 7 + [5000] * 3), "--max-model-len", "4096", "--out", out)
    assert done.returncode == 0, done.stderr
    warnings = json.loads((out / "summary.json").read_text())["warnings"]
    assert len(warnings) == 1
    assert warnings[0].startswith("paged: 3 of 10 requests (30.0%) were rejected; most often (3): prompt of 5000 tokens")


# ---- 5. messages, help, usage -----------------------------------------------------------------------
def test_config_errors_name_the_flags(tmp_path):
    trace = azure_csv(tmp_path / "t.csv")
    line = one_error(pagesim("replay", trace, "--block-size", "100000", "--out", tmp_path / "run"))
    assert line == "error: --block-size 100,000 is larger than llama-3-8b's whole window (8,192 tokens)"
    line = one_error(pagesim("replay", trace, "--no-enable-chunked-prefill", "--max-num-batched-tokens", "100", "--out", tmp_path / "r"))
    assert line == "error: without chunked prefill, --max-num-batched-tokens must be at least --max-model-len (100 < 8192)"


def test_unknown_flag_after_replay_prints_replays_usage(tmp_path):
    done = pagesim("replay", azure_csv(tmp_path / "t.csv"), "--out", tmp_path / "run", "--bogus")
    assert one_error(done) == "python -m pagesim replay: error: unrecognized arguments: --bogus"
    assert done.stderr.startswith("usage: python -m pagesim replay")


def test_help_shows_defaults_and_one_format_list():
    replay = pagesim("replay", "--help").stdout
    assert "(default: 16)" in replay and "(default: 8192)" in replay and "(default: None)" not in replay
    formats = "{auto,azure,burstgpt,mooncake,vidur,pagesim,sharegpt}"
    assert formats in replay and formats in pagesim("trace", "info", "--help").stdout
    assert "convert" in pagesim("trace", "--help").stdout


def test_every_option_of_every_command_says_what_it_is():
    """`--help` lists every option with what it does (and its default, where it has one). Was: calibrate's
    --block-size, --num-gpu-blocks and --max-num-batched-tokens, plan's --backend, and trace info/convert's FILE listed
    bare, with no help and so no default."""
    import argparse

    from pagesim.cli import _commands, build_parser

    bare = [f"{command.prog} {action.option_strings or action.dest}" for command in _commands(build_parser())
            for action in command._actions if not action.help and action.help is not argparse.SUPPRESS]
    assert bare == []
    calibrate = pagesim("calibrate", "--help").stdout
    assert "(default: 16)" in calibrate and "(default: 8192)" in calibrate


def test_trace_convert_and_synth_refuse_an_out_named_for_another_format(tmp_path):
    """`--out t.csv` would get JSON lines under a CSV name (a spreadsheet opens garbage, a later `--format azure`
    refuses it): refused before any work, naming what is written. .jsonl, .jsonl.gz, .gz and no suffix are written.
    Was: t.csv written as pagesim JSON lines without a word."""
    trace = azure_csv(tmp_path / "t.csv")
    for name in ("out.csv", "out.json", "out.CSV.gz", "out.parquet"):
        for args in (["trace", "convert", trace], ["trace", "synth", "--preset", "sharegpt", "--num-requests", 5, "--rate", 1]):
            line = one_error(pagesim(*args, "--out", tmp_path / "new" / name))
            suffix = name.split(".")[1].lower()
            assert line == (f"error: --out {tmp_path / 'new' / name}: expected a FILE.jsonl (or FILE.jsonl.gz) name: the "
                            f"trace is written in pagesim's own format, JSON lines, not .{suffix}"), line
    assert not (tmp_path / "new").exists()
    for name in ("a.jsonl", "b.JSONL.gz", "c.gz", "d"):
        assert pagesim("trace", "convert", trace, "--out", tmp_path / name).returncode == 0, name


def test_trace_convert_writes_the_own_format(tmp_path):
    out = tmp_path / "t.jsonl"
    done = pagesim("trace", "convert", azure_csv(tmp_path / "t.csv"), "--out", out)
    assert done.returncode == 0, done.stderr
    from pagesim.traces import load_trace

    converted, original = load_trace(out), load_trace(tmp_path / "t.csv")
    assert converted.summary.format == "pagesim"
    assert converted.df.equals(original.df)


# ---- 6. negative offsets ----------------------------------------------------------------------------
def test_negative_offsets_are_errors_naming_the_line(tmp_path):
    vidur = tmp_path / "v.csv"
    vidur.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n-4.5,396,109\n")
    line = one_error(pagesim("trace", "info", vidur))
    assert line == f"error: {vidur}, line 3, field 'arrived_at': expected a non-negative offset in seconds from the trace start, got '-4.5'"
    own = tmp_path / "o.jsonl"
    own.write_text('{"pagesim_trace": 1}\n{"request_id": "a", "arrival_time_s": -1, "prompt_len": 3, "output_len": 2}\n')
    line = one_error(pagesim("trace", "info", own))
    assert line == f"error: {own}, line 2, field 'arrival_time_s': expected a non-negative offset in seconds from the trace start, got -1"
    # Mooncake's timestamps are offsets too (in ms): a negative one was sorted to the front and the trace re-based on it
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                        '{"timestamp": -5, "input_length": 10, "output_length": 5}\n')
    line = one_error(pagesim("trace", "info", mooncake))
    assert line == f"error: {mooncake}, line 2, field 'timestamp': expected a non-negative offset in milliseconds from the trace start, got -5"


def test_an_arrival_of_minus_zero_reads_zero(tmp_path):
    """Was: a Vidur "-0" or a pagesim -0.0 arrival, which the rule (>= 0) accepts, stayed -0.0: trace info printed
    "span -0.000 s" and trace convert wrote "arrival_time_s":-0.0; a typed option of -0 (--swap-space -0) was -0.0 in
    summary.json."""
    import math

    from pagesim.options import non_negative_float

    vidur = tmp_path / "v.csv"
    vidur.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n-0,374,44\n-0.0,396,109\n")
    done = pagesim("trace", "info", vidur)
    assert done.returncode == 0 and "span 0.000 s" in done.stdout and "-0" not in done.stdout, done.stdout
    out = tmp_path / "v.jsonl"
    assert pagesim("trace", "convert", vidur, "--out", out).returncode == 0
    assert '"arrival_time_s":0.0' in out.read_text() and "-0" not in out.read_text()
    own = tmp_path / "o.jsonl"
    own.write_text('{"pagesim_trace": 1}\n{"request_id": "a", "arrival_time_s": -0.0, "prompt_len": 3, "output_len": 2}\n')
    done = pagesim("trace", "info", own)
    assert done.returncode == 0 and "span 0.000 s" in done.stdout, done.stdout
    assert math.copysign(1, non_negative_float("-0")) == 1


def test_trace_messages_say_nan_and_name_minified_sharegpt_items(tmp_path):
    from pagesim.traces import TraceError, load_trace

    own = tmp_path / "n.jsonl"
    own.write_text('{"pagesim_trace": 1}\n{"request_id": "a", "arrival_time_s": 0, "prompt_len": NaN, "output_len": 2}\n')
    with pytest.raises(TraceError, match=r"line 2, field 'prompt_len': expected a positive integer, got nan$"):
        load_trace(own)
    minified = tmp_path / "s.json"
    minified.write_text('[{"id": "a", "conversations": []}, {"id": "x7f", "conversations": [{"from": "robot", "value": "hi"}]}]')
    with pytest.raises(TraceError, match=r"""line 1, field "\[1\] \(id 'x7f'\) conversations\[0\]\.from": expected one of"""):
        load_trace(minified)
    minified.write_text('[{"id": "a", "conversations": [{"from": "human", "value": "unterminated')
    with pytest.raises(TraceError, match=r"expected valid JSON \(Unterminated string starting at column \d+\)$"):
        load_trace(minified)


def test_outputs_cut_at_max_model_len_are_counted_in_a_warning(tmp_path):
    from pagesim.traces import load_trace

    df = load_trace("traces/sharegpt-poisson-1k.jsonl").df.head(200)
    limit = 256
    cut = (df["prompt_len"] < limit) & (df["prompt_len"] + df["output_len"] > limit)
    out = tmp_path / "run"
    done = pagesim("replay", "traces/sharegpt-poisson-1k.jsonl", "--limit", "200", "--max-model-len", limit, "--out", out)
    assert done.returncode == 0, done.stderr
    warnings = json.loads((out / "summary.json").read_text())["warnings"]
    cut_warnings = [w for w in warnings if "outputs are cut" in w]
    assert len(cut_warnings) == 1 and cut_warnings[0].startswith(f"{int(cut.sum())} of 200 requests")
    requests = pd.read_parquet(out / "requests.parquet").set_index("request_id")
    for rid, row in df[cut].set_index("request_id").iterrows():  # the cut ones finish with the cut length
        assert requests.at[str(rid), "output_len"] == limit - row["prompt_len"]


def test_a_reader_that_goes_away_gets_no_traceback():
    read, write = os.pipe()
    os.close(read)  # every write to stdout now fails with EPIPE (Python ignores SIGPIPE): BrokenPipeError
    try:
        done = subprocess.run([sys.executable, "-m", "pagesim", "trace", "info", "traces/sharegpt-poisson-1k.jsonl"],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, cwd=REPO)
    finally:
        os.close(write)
    assert done.returncode == 141 and "Traceback" not in done.stderr, done.stderr


def test_a_given_cache_that_does_not_fit_beside_the_weights_is_warned_of(tmp_path):
    from pagesim.config import Config
    from pagesim.run_warnings import config_warnings
    from pagesim.traces import load_trace

    trace = load_trace(str(azure_csv(tmp_path / "t.csv")))
    fits = Config(num_gpu_blocks=60_000)  # llama-3-8b on an H200: 117 GiB of K/V beside 15 GiB of weights
    assert not [w for w in config_warnings(fits, trace) if "holds this deployment" in w]
    (warning,) = [w for w in config_warnings(Config(num_gpu_blocks=70_000), trace) if "holds this deployment" in w]
    assert warning.startswith("the KV cache's 70,000 blocks (--num-gpu-blocks; 136.7 GiB a GPU) and llama-3-8b's weights")
    assert not [w for w in config_warnings(Config(num_gpu_blocks=70_000, tensor_parallel_size=2), trace)
                if "holds this deployment" in w]  # half of each block and of the weights on each of two GPUs


def test_a_load_warning_goes_to_stderr_and_summary_json_like_every_run_warning(tmp_path):
    trace = azure_csv(tmp_path / "t.csv")
    lines = trace.read_text().splitlines()
    lines[3], lines[4] = lines[4], lines[3]  # one row earlier than the row before it: sorted, with a warning
    trace.write_text("\n".join(lines) + "\n")
    done = pagesim("replay", trace, "--out", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    (warning,) = [w for w in json.loads((tmp_path / "run" / "summary.json").read_text())["warnings"]
                  if "arrives earlier than the row before it" in w]
    assert warning.startswith(f"{trace}: 1 row arrives earlier")
    assert done.stderr.count(f"warning: {warning}") == 1
    assert "warning:" not in done.stdout  # it was printed on stdout, inside the load summary, and not recorded
    swept = pagesim("sweep", trace, "--grid", "max_num_seqs=4", "--backend", "local", "--out", tmp_path / "sweep")
    assert swept.returncode == 0, swept.stderr
    assert swept.stderr.count(f"warning: {warning}") == 1 and "arrives earlier" not in swept.stdout
