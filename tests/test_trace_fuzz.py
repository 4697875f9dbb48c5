"""Fuzzing load_trace: random bytes and mutated valid files of every format give a valid Trace or a
TraceError that points inside the file; never another exception."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trace_formats import SAMPLES, assert_schema

from pagesim.traces import TraceError, load_trace

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TOKENS = ["", ",", "\n", "\r\n", '"', "{", "}", "[", "]", ":", "-1", "0", "1e400", "nan", "null", "true", "\x00", "\ufeff",
          "\\ud800", "2023-11-16 18:15:46.6805900", '"hash_ids": [1]', "99999999999999999999999", " ", "\t", "é"]


def check(path, data: bytes, fmt: str = "auto") -> None:
    path.write_bytes(data)
    try:
        trace = load_trace(path, fmt)
    except TraceError as err:
        assert err.file == str(path)
        lines = data.count(b"\n" if b"\n" in data else b"\r") + 1  # a text without LF has its lines end in lone CRs
        assert err.row is None or 1 <= err.row <= lines, (err.row, lines, str(err))
        assert err.field is None or isinstance(err.field, str)
        assert str(err).startswith(str(path))
        return
    assert_schema(trace)
    assert np.isfinite(trace.df["arrival_time_s"]).all()


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_load_or_raise_trace_error(tmp_path, data):
    check(tmp_path / "fuzz", data)


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(SAMPLES)))
    fmt, text = SAMPLES[name]
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "truncate", "duplicate line"]))
        piece = draw(st.sampled_from(TOKENS) | st.text(max_size=5))
        if kind == "insert":
            text = text[:at] + piece + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 20)) :]
        elif kind == "replace":
            text = text[:at] + piece + text[at + len(piece) :]
        elif kind == "truncate":
            text = text[:at]
        else:
            lines = text.split("\n")
            i = draw(st.integers(0, len(lines) - 1))
            text = "\n".join(lines[: i + 1] + lines[i:])
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=4)) + data[at:]
    return fmt, data


@FUZZ
@given(case=mutated(), explicit=st.booleans())
def test_mutated_valid_files_load_or_raise_trace_error(tmp_path, case, explicit):
    fmt, data = case
    check(tmp_path / "fuzz", data, fmt if explicit else "auto")
