"""The sweep runner: grid parsing, error rows, streaming and resume, on local processes and on Ray."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest

from pagesim.errors import UserError
from pagesim.sweep import config_id, parse_grid, run_config, run_sweep

TRACES = Path(__file__).resolve().parent.parent / "traces"


@pytest.fixture(scope="module")
def trace():
    from pagesim.traces import load_trace

    return load_trace(str(TRACES / "multiturn-300.jsonl"), "auto", limit=30)


@pytest.fixture(scope="module")
def parser():
    from pagesim.cli import command_parser

    return command_parser("sweep")


@pytest.fixture(scope="module")
def base(parser):
    args = parser.parse_args(["t.jsonl", "--out", "x", "--slo", "ttft_p99=1"])
    from pagesim.sweep import NOT_SWEPT

    return {k: v for k, v in vars(args).items() if k not in NOT_SWEPT or k == "slo"}


def test_grid_is_the_cross_product_with_typed_values(parser):
    points = parse_grid(["block_size=16,32", "--enable-prefix-caching=true,false", "router=round-robin",
                         "layout=paged,pow2", "kv_cache_gib=0.5"], parser)
    assert len(points) == 2 * 2 * 1 * 2
    assert points[0] == {"block_size": 16, "enable_prefix_caching": True, "router": "round-robin",
                         "layout": "paged", "kv_cache_gib": 0.5}
    assert len({config_id(p) for p in points}) == len(points)


@pytest.mark.parametrize("text, message", [
    ("block_size", "expected NAME=V1,V2"),
    ("limit=1,2", "cannot sweep 'limit'"),
    ("colour=red", "cannot sweep 'colour'"),
    ("block_size=16,big", "block_size: expected a whole number"),
    ("max_num_seqs=0", "max_num_seqs: expected"),
    ("router=random", "'random' is not one of"),
    ("enable_prefix_caching=maybe", "not true or false"),
])
def test_bad_grid_is_a_one_line_error_naming_the_flag(parser, text, message):
    with pytest.raises(UserError, match=message):
        parse_grid([text], parser)


def test_a_failing_configuration_is_an_error_row(trace, base):
    row = run_config(trace, base, {"max_num_seqs": 0})
    assert row["status"] == "error" and "--max-num-seqs must be at least 1" in row["error"]
    ok = run_config(trace, base, {"max_num_seqs": 8, "replicas": 2})
    assert ok["status"] == "ok" and ok["num_finished"] + ok["num_rejected"] == 30
    assert ok["num_gpus"] == 2 and 0 <= ok["slo_attainment"] <= 1


def test_a_row_carries_its_configuration_warnings(trace, base):
    """multiturn-300 has prefix hash ids: prefix caching means something for the paged row, nothing for a baseline."""
    paged = run_config(trace, base, {"enable_prefix_caching": True, "layout": "paged"})
    baseline = run_config(trace, base, {"enable_prefix_caching": True, "layout": "max"})
    assert paged["status"] == baseline["status"] == "ok"
    assert paged["warnings"] == ""
    assert baseline["warnings"].startswith("--enable-prefix-caching applies to the paged run only: the contiguous "
                                           "baselines (max)")


def test_local_sweep_streams_rows_and_resumes_after_an_interruption(trace, base, parser, tmp_path):
    points = parse_grid(["kv_cache_gib=0.00001,1,2", "block_size=16,32"], parser)  # 10 KiB: not one block

    def stop_after_two(row, done, total):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(trace, base, points, tmp_path, backend="local", num_cpus=1, progress=False, on_row=stop_after_two)
    first = pd.read_parquet(tmp_path / "results.parquet")
    assert len(first) == 2, "rows finished before the interruption must be on disk"
    seen = []
    df = run_sweep(trace, base, points, tmp_path, backend="local", num_cpus=2, progress=False,
                   on_row=lambda row, done, total: seen.append(row["config_id"]))
    assert len(seen) == 4 and not set(seen) & set(first["config_id"]), "the resume re-ran a finished configuration"
    assert sorted(df["config_id"]) == sorted(config_id(p) for p in points)
    assert (df.loc[df["kv_cache_gib"] < 1, "status"] == "error").all()
    assert df.loc[df["kv_cache_gib"] < 1, "error"].str.contains("GiB holds no KV block").all()
    assert (df.loc[df["kv_cache_gib"] >= 1, "status"] == "ok").all()


def test_resume_with_other_fixed_options_is_refused(trace, base, tmp_path):
    run_sweep(trace, base, [{"max_num_seqs": 8}], tmp_path, backend="local", num_cpus=1, progress=False)
    with pytest.raises(UserError, match=r"other fixed options \(model\)"):
        run_sweep(trace, {**base, "model": "llama-2-7b"}, [{"max_num_seqs": 8}], tmp_path, backend="local",
                  progress=False)


def test_resume_names_a_fixed_option_the_directory_has_and_this_sweep_lacks(trace, base, tmp_path):
    """A plan's directory records plan's own fixed option (max_gpus), which a sweep has none of: a sweep into it (or a
    plan into a sweep's) is refused naming that option. Was: the difference was looked for among this sweep's options
    only, and the refusal blamed "the trace's requests: another window, --limit, --time-scale or --rate", all equal."""
    run_sweep(trace, {**base, "max_gpus": 8}, [{"max_num_seqs": 8}], tmp_path, backend="local", num_cpus=1,
              progress=False)
    with pytest.raises(UserError, match=r"other fixed options \(max_gpus\)"):
        run_sweep(trace, base, [{"max_num_seqs": 8}], tmp_path, backend="local", progress=False)
    with pytest.raises(UserError, match=r"other fixed options \(max_gpus\)"):  # and the other way round
        other = tmp_path / "other"
        run_sweep(trace, base, [{"max_num_seqs": 8}], other, backend="local", num_cpus=1, progress=False)
        run_sweep(trace, {**base, "max_gpus": 8}, [{"max_num_seqs": 8}], other, backend="local", progress=False)


def test_force_resumes_the_same_sweep_and_says_it_does_not_start_another_over(trace, base, tmp_path):
    run_sweep(trace, base, [{"max_num_seqs": 8}], tmp_path, backend="local", num_cpus=1, progress=False)
    df = run_sweep(trace, {**base, "force": True}, [{"max_num_seqs": 8}], tmp_path, backend="local", progress=False)
    assert len(df) == 1, "--force is no fixed option: the same sweep resumes"
    with pytest.raises(UserError, match=r"--force does not start a sweep over"):
        run_sweep(trace, {**base, "force": True, "model": "llama-2-7b"}, [{"max_num_seqs": 8}], tmp_path,
                  backend="local", progress=False)


def test_resume_over_other_arrivals_of_as_many_requests_is_refused(trace, base, tmp_path):
    """Was: the same trace at another --time-scale (or --rate, or window) has the same name and row count, and the
    resume reported the old arrivals' rows as the new sweep's."""
    run_sweep(trace, base, [{"max_num_seqs": 8}], tmp_path, backend="local", num_cpus=1, progress=False)
    faster = type(trace)(trace.df.assign(arrival_time_s=trace.df["arrival_time_s"] / 4), trace.name, trace.summary,
                         trace.hash_block_size)
    with pytest.raises(UserError, match=r"other fixed options \(the trace's requests: another window, --limit, "
                                        r"--time-scale or --rate\)"):
        run_sweep(faster, base, [{"max_num_seqs": 8}], tmp_path, backend="local", progress=False)
    manifest = json.loads((tmp_path / "sweep.json").read_text())
    del manifest["trace_fingerprint"]  # a sweep written before the fingerprint was recorded still resumes
    (tmp_path / "sweep.json").write_text(json.dumps(manifest))
    assert len(run_sweep(trace, base, [{"max_num_seqs": 8}], tmp_path, backend="local", progress=False)) == 1


def test_a_row_carries_the_warning_of_a_tpot_slo_no_request_can_be_judged_by(trace, base):
    """As replay warns of it (run_warnings.slo_warnings); plan's rows are sweep's."""
    row = run_config(trace, {**base, "slo": ["tpot_p99=0.05"]}, {"max_model_len": 1024})
    assert row["status"] == "ok", row["error"]
    assert "tpot_p99" not in row["warnings"], "the trace's outputs run past one token"
    one = type(trace)(trace.df.assign(output_len=1), trace.name, trace.summary, trace.hash_block_size)
    row = run_config(one, {**base, "slo": ["tpot_p99=0.05"]}, {"max_model_len": 1024})
    assert "--slo tpot_p99=0.05: no request of the trace has two output tokens" in row["warnings"]


def test_a_row_carries_the_warnings_replay_prints_after_the_run_too(trace, base):
    """Was: only the warnings known before the run; a configuration rejecting every request (or a router with one
    replica) said nothing, while replay warns of both."""
    row = run_config(trace, base, {"max_model_len": 1})
    assert row["status"] == "ok" and row["num_rejected"] == 30
    assert "paged: every request (30) was rejected" in row["warnings"]
    row = run_config(trace, base, {"router": "prefix-aware", "replicas": 1})
    assert row["warnings"] == ("--router prefix-aware has no effect with --replicas 1: there is one engine to send "
                               "requests to")


def test_warnings_that_differ_only_in_figures_are_printed_once():
    from pagesim.sweep import summarize_warnings

    column = pd.Series(["paged: 30 of 40 requests (75.0%) were rejected; x", "",
                        "paged: 20 of 40 requests (50.0%) were rejected; x\nsame", "same"])
    assert summarize_warnings(column) == [
        (2, "paged: 30 of 40 requests (75.0%) were rejected; x (figures differ by configuration: "
            "each row's own in its warnings column)"),
        (2, "same")]


def test_sweep_progress_to_a_log_redraws_on_a_timer(trace, base, tmp_path, monkeypatch):
    """Was: a redraw per finished configuration (tqdm's 0.1 s default), ~1,000 lines for the README's sweep."""
    import io
    import time

    from pagesim.progress import NON_TTY_INTERVAL_S

    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    points = [{"max_num_seqs": k} for k in range(1, 13)]

    def slow(row, done, total):
        time.sleep(0.15)  # slower than tqdm's default redraw interval

    t0 = time.perf_counter()
    run_sweep(trace, base, points, tmp_path, backend="local", num_cpus=1, on_row=slow)
    elapsed = time.perf_counter() - t0
    redraws = sum(1 for part in log.getvalue().replace("\r", "\n").split("\n") if part.strip())
    assert redraws <= 3 + elapsed / NON_TTY_INTERVAL_S, log.getvalue()


def test_ray_sweep_runs_tasks_keeps_error_rows_and_resumes(ray_local, trace, base, parser, tmp_path):
    points = parse_grid(["kv_cache_gib=0.00001,1", "replicas=1,2"], parser)
    df = run_sweep(trace, base, points[:3], tmp_path, backend="ray", progress=False)
    assert len(df) == 3 and set(df["status"]) == {"ok", "error"}
    seen = []
    df = run_sweep(trace, base, points, tmp_path, backend="ray", progress=False,
                   on_row=lambda row, done, total: seen.append(row["config_id"]))
    assert seen == [config_id(points[3])]
    assert len(df) == 4
    assert ray_local.is_initialized(), "the sweep must not shut down a Ray instance it did not start"


def test_sweep_refuses_a_non_empty_directory_that_holds_no_sweep(tmp_path, capsys):
    from pagesim.cli import main

    (tmp_path / "notes.txt").write_text("mine")
    rc = main(["sweep", str(TRACES / "multiturn-300.jsonl"), "--grid", "block_size=16", "--backend", "local",
               "--out", str(tmp_path)])
    assert rc == 2 and "directory exists and is not empty" in capsys.readouterr().err


def test_a_sweep_of_one_configuration_says_so_in_the_singular(tmp_path, capsys):
    from pagesim.cli import main

    rc = main(["sweep", str(TRACES / "multiturn-300.jsonl"), "--limit", "20", "--grid", "block_size=16", "--backend",
               "local", "--out", str(tmp_path / "one")])
    out = capsys.readouterr().out
    assert rc == 0 and "1 configuration in " in out and "(0 errors)" in out, out


def test_kv_cache_gib_sizes_the_cache_of_a_model_the_default_utilization_leaves_no_room_for(trace, base):
    # llama-3-70b's 131.4 GiB of weights on an H200 (140.4 GiB): at the default utilization 0.9 no KV memory is left,
    # but a cache of 4 GiB fits beside them, as --num-gpu-blocks would give it; 16 GiB would not, which is warned of.
    fits = run_config(trace, {**base, "model": "llama-3-70b"}, {"kv_cache_gib": 4})
    assert fits["status"] == "ok", fits.get("error")
    assert fits["num_gpu_blocks"] == int(4 * 2**30 // (80 * 2 * 8 * 128 * 16 * 2))  # 80 layers, K and V, 8 KV heads
    assert fits["warnings"] == ""
    too_big = run_config(trace, {**base, "model": "llama-3-70b"}, {"kv_cache_gib": 16})
    assert too_big["status"] == "ok"
    assert "exceed one h200's 140.4 GiB: no such GPU holds this deployment" in too_big["warnings"]


def test_a_kv_cache_gib_beyond_the_simulators_blocks_is_an_error_row_in_the_grids_words(trace, base):
    """Was: kv_cache_gib=1e308 made the row 'ValueError: cannot convert float NaN to integer' (its bytes overflow a
    double), and kv_cache_gib=1e6 'FlagError: --num-gpu-blocks 512,000,000: ...', a flag no one typed. Both bounds of
    kv_cache_gib are checked in one place (sweep.blocks_for_gib), an OptionError like the too-small one's, not by
    catching Config's --num-gpu-blocks FlagError and rewording it (round 35)."""
    limit = "the simulator holds at most 4,000,000 blocks (~0.8 GB of simulator memory)"
    advice = "expected at most 7,812.5 GiB at this block_size, or a larger block_size"
    for gib, count in ((1e6, "512,000,000"), (1e308, "5.12e+310")):
        row = run_config(trace, {**base, "model": "llama-3-8b"}, {"kv_cache_gib": gib})
        assert row["status"] == "error"
        assert row["error"] == (f"OptionError: kv_cache_gib {gib:g} GiB is {count} blocks of 16 tokens for llama-3-8b "
                                f"(2 MiB each); {limit}: {advice}")
    small = run_config(trace, {**base, "model": "llama-3-8b"}, {"kv_cache_gib": 1e-5})["error"]
    assert small.startswith("OptionError: kv_cache_gib 1e-05 GiB holds no KV block of 16 tokens for llama-3-8b (2 MiB each)")


def test_grid_values_are_deduplicated_and_switches_read_in_any_case(parser):
    points = parse_grid(["block-size=16,16,32", "enable_prefix_caching=True,FALSE,on"], parser)
    assert points == [{"block_size": 16, "enable_prefix_caching": True}, {"block_size": 16, "enable_prefix_caching": False},
                      {"block_size": 32, "enable_prefix_caching": True}, {"block_size": 32, "enable_prefix_caching": False}]
    assert parse_grid(["--max-num-seqs=8"], parser) == [{"max_num_seqs": 8}]
    with pytest.raises(UserError, match="--grid block_size given twice"):
        parse_grid(["block_size=16", "block_size=32"], parser)


def test_summarize_warnings_counts_each_kind_once_most_common_first_and_skips_empty_rows():
    from pagesim.sweep import summarize_warnings

    column = pd.Series(["a: 1,024 of 2,048 requests\nb", "", None, "b", "a: 12 of 20 requests", "b", ""])
    assert summarize_warnings(column) == [
        (3, "b"),
        (2, "a: 1,024 of 2,048 requests (figures differ by configuration: each row's own in its warnings column)")]
    assert summarize_warnings(pd.Series(["", None, ""])) == []


def sweep_args(parser, *argv):
    return parser.parse_args(["t.jsonl", "--out", "x", *map(str, argv)])


def test_the_kv_cache_is_sized_one_way_a_typed_option_equal_to_its_axis_is_harmless(parser):
    from pagesim.sweep import check_grid_against_options

    def check(argv, grid):
        points = parse_grid(grid, parser)
        check_grid_against_options(sweep_args(parser, *argv), parser, {k: [p[k] for p in points] for k in points[0]})

    check([], ["kv_cache_gib=1,2"])
    check(["--num-gpu-blocks", 100], ["block_size=16,32"])
    check(["--num-gpu-blocks", 100], ["num_gpu_blocks=100"])  # the typed value is the axis': nothing is lost
    check(["--block-size", 16], ["block_size=16"])
    with pytest.raises(UserError, match=r"^--grid kv_cache_gib=\.\.\. and --num-gpu-blocks 100 both size the KV cache"):
        check(["--num-gpu-blocks", 100], ["kv_cache_gib=1"])
    with pytest.raises(UserError, match=r"^--grid kv_cache_gib=\.\.\. and --gpu-memory-utilization 0.5 both size"):
        check(["--gpu-memory-utilization", 0.5], ["kv_cache_gib=1"])
    with pytest.raises(UserError, match=r"^--grid num_gpu_blocks=\.\.\. and --gpu-memory-utilization 0.5 both"):
        check(["--gpu-memory-utilization", 0.5], ["num_gpu_blocks=100,200"])
    with pytest.raises(UserError, match=r"^--block-size 32 and --grid block_size=16 both set block_size"):
        check(["--block-size", 32], ["block_size=16"])


def test_typed_options_are_those_set_to_other_than_their_default(parser):
    from pagesim.sweep import typed_options

    args = sweep_args(parser, "--block-size", 32, "--max-num-seqs", 256, "--no-enable-chunked-prefill")
    keys = ["block_size", "max_num_seqs", "enable_chunked_prefill", "enable_prefix_caching", "num_gpu_blocks"]
    assert typed_options(args, parser, keys) == {"block_size": "--block-size 32",
                                                 "enable_chunked_prefill": "--no-enable-chunked-prefill"}


def test_a_kv_cache_gib_too_small_for_one_block_is_an_error():
    from pagesim.config import Config
    from pagesim.sweep import blocks_for_gib

    config = Config(model="toy", block_size=4, num_gpu_blocks=1)
    assert blocks_for_gib(config, 3 * config.block_bytes / 2**30) == 3
    assert blocks_for_gib(config, 1 * config.block_bytes / 2**30) == 1
    with pytest.raises(UserError, match="GiB holds no KV block of 4 tokens for toy"):
        blocks_for_gib(config, 0.9 * config.block_bytes / 2**30)


# ---- --backend, --address, --num-cpus: one definition for sweep and plan -------------------------------------------
BACKEND_COMMANDS = {"sweep": ["--grid", "block_size=16"], "plan": ["--slo", "ttft_p99=1"]}  # each one's least to run


def backend_command(command: str, flags: list[str], out: Path) -> list[str]:
    return [command, str(TRACES / "multiturn-300.jsonl"), "--limit", "5", *BACKEND_COMMANDS[command], *flags,
            "--out", str(out)]


@pytest.mark.parametrize("command", BACKEND_COMMANDS)
def test_sweep_and_plan_define_their_backend_options_alike(command):
    """Each subcommand's --backend, --address and --num-cpus are add_backend_options' own: flags, choices, default,
    type, help. Fails when one subcommand defines (or changes) one of them apart from the other."""
    from pagesim.cli import command_parser
    from pagesim.sweep import BACKEND_OPTIONS, add_backend_options

    def described(parser):
        return {a.dest: (tuple(a.option_strings), a.choices and tuple(a.choices), a.default, a.type, a.nargs, a.help)
                for a in parser._actions if a.dest in BACKEND_OPTIONS}

    reference = argparse.ArgumentParser()
    add_backend_options(reference)
    assert described(command_parser(command)) == described(reference)
    assert set(described(reference)) == set(BACKEND_OPTIONS)


@pytest.mark.parametrize("command", BACKEND_COMMANDS)
@pytest.mark.parametrize("flags, expected", [
    (["--backend", "slurm"], "argument --backend: invalid choice: 'slurm' (choose from 'ray', 'local')"),
    (["--num-cpus", "0"], "argument --num-cpus: expected a positive integer, got '0'"),
    (["--num-cpus", "two"], "argument --num-cpus: expected a whole number such as 16, got 'two'"),
    (["--address"], "argument --address: expected one argument"),
    (["--backend", "local", "--address", "10.0.0.1:6379"], "--address 10.0.0.1:6379 names a Ray cluster, but "
     "--backend local runs the {command} in local processes; drop --address, or --backend local"),
    (["--address", "10.0.0.1:6379", "--num-cpus", "2"], "--num-cpus 2 sizes the local Ray instance, but --address "
     "10.0.0.1:6379 runs the {command} on that cluster's CPUs; drop --num-cpus, or --address"),
])
def test_sweep_and_plan_refuse_the_same_backend_options_in_the_same_words(command, flags, expected, tmp_path,
                                                                          monkeypatch, capsys):
    """The same bad --backend/--address/--num-cpus is refused by both subcommands with one `error:` line, exit 2, the
    same words but for the command's name, before any work (nothing run, no --out made)."""
    import pagesim.sweep
    from pagesim.cli import main

    monkeypatch.setattr(pagesim.sweep, "run_sweep", lambda *a, **k: pytest.fail("a refused command ran"))
    try:
        rc = main(backend_command(command, flags, tmp_path / "out"))
    except SystemExit as exc:  # argparse's refusal, under the subcommand's usage
        rc = exc.code
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2
    assert line.endswith("error: " + expected.format(command=command)), line
    assert line.startswith("error: " if "{command}" in expected else f"python -m pagesim {command}: error: "), line
    assert not (tmp_path / "out").exists()


class _Reached(Exception):
    pass


@pytest.mark.parametrize("command", BACKEND_COMMANDS)
@pytest.mark.parametrize("flags, passed", [
    ([], {"backend": "ray", "address": None, "num_cpus": None}),
    (["--backend", "local", "--num-cpus", "3"], {"backend": "local", "address": None, "num_cpus": 3}),
    (["--backend", "ray", "--num-cpus", "1"], {"backend": "ray", "address": None, "num_cpus": 1}),
    (["--address", "10.0.0.1:6379"], {"backend": "ray", "address": "10.0.0.1:6379", "num_cpus": None}),
])
def test_sweep_and_plan_accept_the_same_backend_options_and_pass_them_to_run_sweep(command, flags, passed, tmp_path,
                                                                                   monkeypatch, capsys):
    """What both subcommands accept reaches run_sweep as the same keyword arguments, and never the configurations'
    fixed options (base, sweep.json's): another --num-cpus or --address resumes the same sweep."""
    import pagesim.sweep
    from pagesim.cli import main
    from pagesim.sweep import BACKEND_OPTIONS

    def reached(trace, base, points, out, **kwargs):
        raise _Reached(base, kwargs)

    monkeypatch.setattr(pagesim.sweep, "run_sweep", reached)
    with pytest.raises(_Reached) as got:
        main(backend_command(command, flags, tmp_path / "out"))
    base, kwargs = got.value.args
    assert {k: kwargs[k] for k in BACKEND_OPTIONS} == passed
    assert not set(BACKEND_OPTIONS) & set(base)


def test_a_grid_whose_every_configuration_the_config_checks_refuse_is_an_error_before_any_work(tmp_path, capsys):
    """Was: each configuration became an error row only when it ran, so the whole sweep ran (Ray's start-up included)
    for nothing. The trace here does not exist: the refusal comes before it is read, and no --out is made."""
    from pagesim.cli import main

    rc = main(["sweep", str(tmp_path / "no-such.jsonl"), "--grid", "kv_offloading_size=4", "--grid", "block_size=8,16",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1 and len(err.splitlines()) == 1, err
    assert err == ("error: every configuration of the sweep (kv_offloading_size=4 block_size=8,16) is refused by the "
                   "config checks, so none would run: --kv-offloading-size needs --enable-prefix-caching: the host tier "
                   "is keyed by prefix-cache block hashes\n")
    assert not (tmp_path / "out").exists()


def test_configurations_the_config_checks_refuse_are_warned_of_up_front_and_kept_as_error_rows(tmp_path, capsys):
    from pagesim.cli import main

    argv = ["sweep", str(TRACES / "multiturn-300.jsonl"), "--limit", "20", "--grid", "block_size=16,100000",
            "--grid", "max_num_seqs=4,8", "--backend", "local", "--num-cpus", "2", "--out", str(tmp_path / "s")]
    warning = ("warning (2 of 4 configurations): refused by the config checks before the sweep ran, so error rows "
               "(block_size=100000): --block-size 100,000 is larger than llama-3-8b's whole window (8,192 tokens)")
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err.count(warning) == 1 and captured.err.index(warning) < captured.err.index("sweep:"), captured.err
    df = pd.read_parquet(tmp_path / "s" / "results.parquet")
    refused = df[df["block_size"] == 100000]
    assert len(df) == 4 and set(refused["status"]) == {"error"} and set(df[df["block_size"] == 16]["status"]) == {"ok"}
    assert set(refused["error"]) == {"FlagError: --block-size 100,000 is larger than llama-3-8b's whole window "
                                     "(8,192 tokens)"}  # today's error rows
    assert set(refused["warnings"]) == {warning.removeprefix("warning (2 of 4 configurations): ")}
    assert "(2 errors)" in captured.out
    assert main(argv) == 0  # the resume: nothing left to run, the same warning once
    captured = capsys.readouterr()
    assert captured.err.count(warning) == 1 and "4 configurations in" in captured.out
    assert len(pd.read_parquet(tmp_path / "s" / "results.parquet")) == 4


def test_refused_configurations_are_named_by_the_values_that_tell_them_apart(base):
    from pagesim.sweep import check_points

    grid = [{"block_size": b, "max_num_seqs": m} for b in (16, 100000) for m in (4, 8)]
    notes, line = check_points(base, grid)
    assert line.startswith("(2 of 4 configurations): refused by the config checks before the sweep ran, so error rows "
                           "(block_size=100000): ")
    assert set(notes) == {config_id(p) for p in grid[2:]}
    assert check_points(base, grid[:2]) == ({}, None)
    mixed = [{"block_size": 100000, "max_num_seqs": 4}, {"block_size": 16, "max_num_seqs": 0}, *grid[:2]]
    notes, line = check_points(base, mixed[:3])  # not a product: each refused one by both values
    assert "(block_size=100000 max_num_seqs=4, block_size=16 max_num_seqs=0): " in line
    assert line.endswith("(the first of 2 reasons; each row's error gives its own)")
