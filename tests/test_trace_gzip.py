"""gzip-compressed traces: recognised by content, read as the plain file is, the size ceiling counted on the
decompressed bytes while decompressing, corrupt files a TraceError naming the file."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trace_formats import SAMPLES
from test_trace_fuzz import mutated
from test_trace_roundtrip import frames

from pagesim.cli import main
from pagesim.traces import TraceError, load, load_trace, write_trace
from pagesim.traces.text import MAX_TRACE_MB_VAR, max_trace_bytes

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
VIDUR_HEADER = b"arrived_at,num_prefill_tokens,num_decode_tokens\n"


def same_trace(a, b) -> None:
    pd.testing.assert_frame_equal(a.df, b.df)
    assert (a.name, a.hash_block_size, str(a.summary)) == (b.name, b.hash_block_size, str(b.summary))


def outcome(path, fmt: str = "auto"):
    """The loaded trace, or the error's (line, field, expected, got): everything but the file name."""
    try:
        return load_trace(path, fmt)
    except TraceError as err:
        assert err.file == str(path)
        return (err.row, err.field, err.expected, err.got)


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("name", ["t.gz", "t.txt"])  # the content decides, not the extension
def test_gzip_of_every_format_loads_equal_to_the_plain_file(tmp_path, sample, name):
    fmt, text = SAMPLES[sample]
    (tmp_path / "plain").mkdir()
    plain = tmp_path / "plain" / "t.txt"
    plain.write_text(text)
    packed = tmp_path / name
    packed.write_bytes(gzip.compress(text.encode()))
    auto = load_trace(packed)
    assert auto.summary.format == fmt
    same_trace(auto, load_trace(plain))
    same_trace(load_trace(packed, fmt), load_trace(plain, fmt))


@pytest.mark.parametrize("sample", ["azure2023", "azure2024", "burstgpt1", "burstgpt2", "vidur"])
def test_gzip_csv_takes_the_fast_reader(tmp_path, sample, monkeypatch):
    """The fast CSV reader reads the decompressed stream: the careful path is never asked."""
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(SAMPLES[sample][1].encode()))
    fast = load_trace(path)
    monkeypatch.setattr(load, "read_text", lambda p: pytest.fail("the careful path read the file"))
    same_trace(load_trace(path), fast)


@SETTINGS
@given(trace=frames(), level=st.integers(0, 9), members=st.integers(1, 3))
def test_gzip_of_any_own_format_trace_reads_back_equal(tmp_path, trace, level, members):
    """Any trace written in the own format, gzipped at any level (in one or several gzip members, as `cat a.gz b.gz`
    makes), reads back as the plain file does."""
    plain = tmp_path / "t.jsonl"
    write_trace(trace, plain)
    data = plain.read_bytes()
    cuts = sorted({0, len(data), *(len(data) * k // members for k in range(1, members))})
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(b"".join(gzip.compress(data[a:b], level) for a, b in zip(cuts, cuts[1:])))
    same_trace(load_trace(packed), load_trace(plain))


@SETTINGS
@given(case=mutated(), explicit=st.booleans())
def test_gzip_of_a_damaged_file_gives_the_same_trace_or_the_same_error(tmp_path, case, explicit):
    """Mutated files of every format: the gzip file gives what the plain one gives, the same trace or an error at
    the same line and field, expecting and finding the same."""
    fmt, data = case
    fmt = fmt if explicit else "auto"
    if data.startswith(b"\x1f\x8b"):
        return
    path = tmp_path / "fuzz"  # one path for both, as messages and warnings name the file
    path.write_bytes(data)
    plain = outcome(path, fmt)
    path.write_bytes(gzip.compress(data))
    packed = outcome(path, fmt)
    if isinstance(plain, tuple):
        assert packed == plain
    else:
        same_trace(packed, plain)


def test_errors_in_a_gzip_file_name_its_line_and_field(tmp_path):
    rows = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "2023-11-16 18:15:46.6805900,374,44\n" * 15
    path = tmp_path / "conv.csv.gz"
    path.write_bytes(gzip.compress((rows + "2023-11-16 18:15:47.0,abc,44\n").encode()))
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(info.value) == f"{path}, line 17, field 'ContextTokens': expected a positive integer, got 'abc'"


def ceiling(monkeypatch, mb: str) -> int:
    monkeypatch.setenv(MAX_TRACE_MB_VAR, mb)
    return max_trace_bytes()


def bomb(kind: str) -> bytes:
    """A gzip file of under 0.2 MB holding a valid trace of 64 MB (a Vidur CSV, or Mooncake JSON lines)."""
    body = VIDUR_HEADER + b"0.0,1,1\n" * 8_000_000 if kind == "csv" else b'{"timestamp": 0, "input_length": 1, "output_length": 1}\n' * 1_200_000
    return gzip.compress(body)


# Loads a small trace of the same kind first (the readers' imports and first allocations), then the file, in a fresh
# process: how much its peak resident memory grew over the second load, and the error it raised. (Measured by the
# process's peak, not tracemalloc: pyarrow's I/O thread releases the reader's Python error object after the load
# returns, and CPython 3.11's tracemalloc crashes the process when a thread without a Python thread state allocates
# while it traces: a segfault in CI, 2026-12-06.)
PEAK_GROWTH = """
import resource, sys
from pagesim.traces import TraceError, load_trace
load_trace(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_trace(sys.argv[1])
    print("loaded")
except TraceError as err:
    print(err)
print(1024 * (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before))
"""


@pytest.mark.parametrize("kind", ["csv", "jsonl"])  # the fast CSV reader's stream, and the careful path's read
def test_a_small_file_inflating_past_the_ceiling_is_refused_while_decompressing(tmp_path, monkeypatch, kind):
    path, small = tmp_path / "bomb.gz", tmp_path / "small.gz"
    path.write_bytes(bomb(kind))
    small.write_bytes(gzip.compress(gzip.decompress(bomb(kind))[:4096].rsplit(b"\n", 1)[0] + b"\n"))
    assert path.stat().st_size < 0.2e6
    limit = ceiling(monkeypatch, "2")
    done = subprocess.run([sys.executable, "-c", PEAK_GROWTH, str(path), str(small)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, check=True)
    message, growth = done.stdout.strip().splitlines()
    assert message == (f"{path}: expected a trace file of at most 2 MB (set {MAX_TRACE_MB_VAR} to raise the limit), "
                       "got more than 2 MB once decompressed")
    peak = int(growth)
    assert peak < 20 * limit, f"{peak / 1e6:.0f} MB more held: the file was inflated whole before the ceiling was checked"


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_the_ceiling_counts_decompressed_bytes_exactly(tmp_path, monkeypatch, kind):
    limit = ceiling(monkeypatch, "0.003")
    one = VIDUR_HEADER + b"0.0,1,1\n" if kind == "csv" else b'{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
    body = one + b"\n" * (limit - len(one))  # blank lines: dropped and counted, after the fast reader gives up
    path = tmp_path / "t.gz"
    path.write_bytes(gzip.compress(body))
    assert len(load_trace(path).df) == 1
    path.write_bytes(gzip.compress(body + b"\n"))
    with pytest.raises(TraceError, match="once decompressed"):
        load_trace(path)


def corrupt_error(path, data: bytes) -> TraceError:
    path.write_bytes(data)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    err = info.value
    assert err.file == str(path) and str(err).startswith(f"{path}: expected a complete gzip file, got ")
    assert (err.row, err.field) == (None, None)
    return err


PACKED = gzip.compress(SAMPLES["vidur"][1].encode() + b"1.0,374,44\n" * 40)


@SETTINGS
@given(cut=st.integers(2, len(PACKED) - 1))
def test_a_truncated_gzip_file_is_a_trace_error_naming_the_file(tmp_path, cut):
    corrupt_error(tmp_path / "t.csv.gz", PACKED[:cut])


def test_corrupt_gzip_files_say_what_is_wrong(tmp_path):
    path = tmp_path / "t.gz"
    assert "ends early" in str(corrupt_error(path, PACKED[: len(PACKED) // 2]))
    assert "CRC check failed" in str(corrupt_error(path, PACKED[:-8] + b"\0\0\0\0" + PACKED[-4:]))
    assert "Error -3" in str(corrupt_error(path, PACKED[:10] + b"\xff" * 8 + PACKED[18:]))
    assert "compression method" in str(corrupt_error(path, b"\x1f\x8b\x09" + PACKED[3:]))


@SETTINGS
@given(data=st.binary(max_size=300), at=st.integers(10, 400), flips=st.binary(min_size=1, max_size=4))
def test_random_and_damaged_gzip_data_loads_or_raises_trace_error(tmp_path, data, at, flips):
    """After the magic bytes, anything: random bytes, or a valid file with bytes overwritten, gives a trace or a
    TraceError naming the file, never another exception."""
    path = tmp_path / "fuzz"
    for content in (b"\x1f\x8b" + data, PACKED[:at] + flips + PACKED[at + len(flips):]):
        path.write_bytes(content)
        try:
            load_trace(path)
        except TraceError as err:
            assert err.file == str(path) and str(err).startswith(str(path))


def test_trace_info_convert_and_replay_take_gzip_files(tmp_path, capsys):
    fmt, text = SAMPLES["azure2023"]
    packed = tmp_path / "conv.csv.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    assert main(["trace", "info", str(packed)]) == 0
    assert "trace conv\n" in capsys.readouterr().out
    out = tmp_path / "conv.jsonl"
    assert main(["trace", "convert", str(packed), "--out", str(out)]) == 0
    (tmp_path / "conv.csv").write_text(text)
    pd.testing.assert_frame_equal(load_trace(out).df, load_trace(tmp_path / "conv.csv").df)
    assert main(["replay", str(packed), "--num-gpu-blocks", "800", "--out", str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["runs"]["paged"]["num_finished"] == 3
    capsys.readouterr()
    (tmp_path / "cut.gz").write_bytes(packed.read_bytes()[:-5])
    assert main(["trace", "info", str(tmp_path / "cut.gz")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {tmp_path / 'cut.gz'}: expected a complete gzip file, "
                                                            "got the data ends early (a truncated file?)"]


def test_convert_to_a_gz_name_writes_gzip_that_reads_back_the_same(tmp_path, capsys):
    """Was: `trace convert --out x.jsonl.gz` wrote plain text under a .gz name."""
    src = tmp_path / "t.jsonl"
    write_trace(load_trace(str(Path(__file__).resolve().parent.parent / "traces" / "multiturn-300.jsonl"), limit=40), src)
    assert main(["trace", "convert", str(src), "--out", str(tmp_path / "t.jsonl.gz")]) == 0
    assert main(["trace", "convert", str(src), "--out", str(tmp_path / "again.jsonl.gz")]) == 0
    packed = (tmp_path / "t.jsonl.gz").read_bytes()
    assert packed[:2] == b"\x1f\x8b" and gzip.decompress(packed) == src.read_bytes()
    assert (tmp_path / "again.jsonl.gz").read_bytes() == packed  # no timestamp in the header: same trace, same bytes
    same_trace(load_trace(str(tmp_path / "t.jsonl.gz")), load_trace(str(src)))
