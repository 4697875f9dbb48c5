"""`python -m pagesim trace info` and `trace synth`, through pagesim.cli.main."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_trace_formats import SAMPLES

from pagesim.cli import main
from pagesim.traces import load_trace


def test_info_prints_stats_and_summary(tmp_path, capsys):
    path = tmp_path / "b.csv"
    path.write_text(SAMPLES["burstgpt1"][1])
    assert main(["trace", "info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rows 2, span 113.000 s, rate 0.018 req/s" in out
    assert "prompt_len  mean 444.5  p50 444.5" in out
    assert "prefix sharing: no hash ids" in out
    assert "burstgpt: 3 rows read, 2 requests kept" in out
    assert "dropped 1: failed request (Response tokens = 0)" in out


def test_load_counts_agree_with_their_nouns(tmp_path, capsys):
    """Was: "pagesim: 1 rows read, 1 requests kept", "1 rows arrive earlier than the row before them" and "expected 1
    ids, one per ..." for a count of one."""
    from pagesim.traces.errors import TraceError

    head = '{"pagesim_trace": 1, "name": "one", "hash_block_size": 4}\n'
    row = '{{"request_id": "{}", "arrival_time_s": {}, "prompt_len": 4, "output_len": 2{}}}\n'
    one = tmp_path / "one.jsonl"
    one.write_text(head + row.format("a", 0.0, ""))
    assert main(["trace", "info", str(one)]) == 0
    assert "pagesim: 1 row read, 1 request kept, span 0.000 s" in capsys.readouterr().out
    late = tmp_path / "late.jsonl"
    late.write_text(head + row.format("a", 1.0, "") + row.format("b", 0.5, "") + row.format("c", 2.0, ""))
    (warning,) = load_trace(late).summary.warnings
    assert f"{late}: 1 row arrives earlier than the row before it (first at line 3)" in warning
    assert "3 rows read, 3 requests kept" in load_trace(late).summary.report()
    later = tmp_path / "later.jsonl"
    later.write_text(head + row.format("a", 1.0, "") + row.format("b", 0.5, "") + row.format("c", 0.2, ""))
    assert "2 rows arrive earlier than the row before them" in load_trace(later).summary.warnings[0]
    ids = tmp_path / "ids.jsonl"
    ids.write_text(head + row.format("a", 0.0, ', "prefix_hash_ids": [1, 2]'))
    try:
        load_trace(ids)
    except TraceError as err:
        assert err.expected.startswith("1 id, one per "), err.expected
    else:
        raise AssertionError("two hash ids for one block loaded")


def test_info_shows_a_huge_rate_in_a_few_digits(tmp_path, capsys):
    """Was: a trace synthesized at --rate 1e300 (arrivals ~1e-301 s apart) printed its rate as a 300-digit number."""
    out = tmp_path / "fast.jsonl"
    assert main(["trace", "synth", "--preset", "sharegpt", "--num-requests", "5", "--rate", "1e300", "--out", str(out)]) == 0
    rate_line = capsys.readouterr().out.splitlines()[1]
    assert rate_line.startswith("rows 5, span 0.000 s, rate ") and rate_line.endswith("e+300 req/s")
    assert len(rate_line) < 60, rate_line


def test_synth_writes_an_own_format_trace_that_info_reads(tmp_path, capsys):
    out = tmp_path / "k.jsonl"
    argv = ["trace", "synth", "--preset", "kshot", "--num-requests", "50", "--rate", "4", "--arrival", "gamma", "--cv", "2", "--seed", "9", "--out", str(out)]
    assert main(argv) == 0
    trace = load_trace(out)
    assert (len(trace.df), trace.name, trace.hash_block_size) == (50, "kshot-50", 16)
    capsys.readouterr()
    assert main(["trace", "info", str(out), "--format", "pagesim"]) == 0
    info = capsys.readouterr().out
    assert "rows 50" in info and "of prompt blocks seen in an earlier request (16 tokens per block)" in info


def test_user_errors_print_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,x,1\n")
    assert main(["trace", "info", str(path)]) == 2
    assert capsys.readouterr().err == f"error: {path}, line 2, field 'ContextTokens': expected a positive integer, got 'x'\n"


def test_python_dash_m_pagesim_trace_info_works(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(SAMPLES["mooncake"][1])
    done = subprocess.run([sys.executable, "-m", "pagesim", "trace", "info", str(path)], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert "rows 3" in done.stdout and "(512 tokens per block)" in done.stdout
