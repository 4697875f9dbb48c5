"""The fast CSV reader (pyarrow, chunked) gives exactly what the careful string-based path gives."""

from __future__ import annotations

import pytest
from conftest import AZURE_DIR
from test_trace_formats import SAMPLES

from pagesim.traces import load, load_trace
from pagesim.traces.csv_formats import read_fast


def both_paths(path, monkeypatch):
    fast = load_trace(path)
    with monkeypatch.context() as m:
        m.setattr(load, "read_fast", lambda file, fmt: None)
        careful = load_trace(path)
    return fast, careful


@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv"])
def test_azure_traces_read_fast_equal_the_careful_path(name, monkeypatch):
    path = AZURE_DIR / name
    if not path.exists():
        pytest.skip("shared Azure traces not present")
    assert read_fast(str(path), "azure") is not None
    fast, careful = both_paths(path, monkeypatch)
    assert fast.df.equals(careful.df)
    assert str(fast.summary) == str(careful.summary)


@pytest.mark.parametrize("sample", ["azure2023", "azure2024", "burstgpt1", "burstgpt2", "vidur"])
def test_samples_read_fast_equal_the_careful_path(sample, tmp_path, monkeypatch):
    if sample not in SAMPLES:
        pytest.skip(f"no sample {sample}")
    path = tmp_path / "t.csv"
    path.write_text(SAMPLES[sample][1])
    fast, careful = both_paths(path, monkeypatch)
    assert fast.df.equals(careful.df)
    assert str(fast.summary) == str(careful.summary)


def test_files_the_fast_reader_cannot_vouch_for_go_the_careful_way(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n\n4.3,396,109\n")
    assert read_fast(str(path), "vidur") is None  # a blank line: counted by the careful path
    assert load_trace(path).summary.dropped == {"blank line": 1}
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.3,396.5,109\n")
    assert read_fast(str(path), "vidur") is None


@pytest.mark.parametrize("sample, column, value", [("vidur", 1, "0x10"), ("azure2023", 1, "0X1F"),
                                                   ("burstgpt1", 3, "0x0"), ("vidur", 2, "1e1"), ("vidur", 1, "2.0")])
def test_a_count_either_path_reads_the_same_way(sample, column, value, tmp_path, monkeypatch):
    """Was: pyarrow's integer parser reads hexadecimal, so '0x10' was 16 tokens by the fast path and an error naming
    the line by the careful path (the one any irregular row elsewhere in the file sends it to)."""
    from pagesim.traces.errors import TraceError

    lines = SAMPLES[sample][1].splitlines()
    cells = lines[2].split(",")
    cells[column] = value
    lines[2] = ",".join(cells)
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    outcomes = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(load, "read_fast", lambda file, fmt: None)
            try:
                outcomes.append(load_trace(path).df)
            except TraceError as exc:
                outcomes.append(str(exc))
    if isinstance(outcomes[1], str):
        assert outcomes[0] == outcomes[1] and ", line 3, field " in outcomes[1]
    else:
        assert outcomes[0].equals(outcomes[1])
