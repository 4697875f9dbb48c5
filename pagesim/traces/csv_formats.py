"""CSV trace formats: Azure LLM inference (2023, 2024), BurstGPT, Vidur.

Every reader maps the file's columns onto schema names and leaves validation
to `schema.to_frame`, which reports errors under the file's own column names.
The header is the first non-blank line; data rows are one per line after it
(quoted line breaks inside a cell would shift the line numbers in messages).
Wholly blank lines are dropped and counted.
"""

from __future__ import annotations

import io
import re
import warnings

import numpy as np
import pandas as pd

from pagesim.traces.errors import EMPTY, TraceError
from pagesim.traces.schema import Parsed, Rows, numbers

AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")
VIDUR = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
HEADERS = {"azure": AZURE, "burstgpt": BURSTGPT, "vidur": VIDUR}


def read_csv(text: str, file: str, fmt: str) -> tuple[pd.DataFrame, Rows, int, dict[str, int]]:
    """All cells as strings (empty cells NaN), the rows' line numbers, rows read, and blank lines dropped."""
    skip = text.count("\n", 0, len(text) - len(text.lstrip()))  # blank lines before the header
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pd.errors.ParserWarning)  # extra trailing fields are ignored
            df = pd.read_csv(
                io.StringIO(text), dtype=str, keep_default_na=False, na_values=[""],
                skip_blank_lines=False, index_col=False, skiprows=skip,
            )
    except pd.errors.ParserError as exc:
        found = re.search(r"fields in line (\d+)", str(exc))
        if found:
            raise TraceError(file, int(found[1]) + skip, None, "as many comma-separated fields as the header has") from None
        found = re.search(r"string starting at row (\d+)", str(exc))
        raise TraceError(file, int(found[1]) + 1 + skip if found else None, None, "CSV with balanced quotes") from None
    except (pd.errors.EmptyDataError, ValueError) as exc:
        raise TraceError(file, None, None, f"CSV text ({fmt} format)", str(exc)[:60]) from None
    df.columns = [str(c).strip() for c in df.columns]
    if df.columns.duplicated().any():
        raise TraceError(file, skip + 1, df.columns[df.columns.duplicated()][0], "each column named once in the header")
    for column in HEADERS[fmt]:
        if column not in df.columns:
            raise TraceError(file, skip + 1, column, f"a column named {column!r} in the header ({fmt} format: {', '.join(HEADERS[fmt])})")
    blank = df.isna().all(axis=1).to_numpy()
    dropped = {"blank line": int(blank.sum())} if blank.any() else {}
    rows = Rows(file, np.arange(skip + 2, skip + len(df) + 2)[~blank])
    return df[~blank].reset_index(drop=True), rows, len(df) - int(blank.sum()), dropped


def read_azure(text: str, file: str) -> Parsed:
    """Azure LLM inference traces: TIMESTAMP as in 2023 ("2023-11-16 18:15:46.6805900") or 2024 ("...00.009930+00:00").

    Timestamps without an offset are read as UTC; arrival times are seconds since the earliest.
    """
    df, rows, read, dropped = read_csv(text, file, "azure")
    stamps = pd.to_datetime(df["TIMESTAMP"], format="ISO8601", utc=True, errors="coerce")
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if len(bad):
        got = df["TIMESTAMP"].iloc[bad[0]]
        raise rows.error(bad[0], "TIMESTAMP", 'a timestamp like "2023-11-16 18:15:46.6805900"', EMPTY if pd.isna(got) else got)
    seconds = (stamps - stamps.min()).dt.total_seconds()
    columns = {"arrival_time_s": seconds, "prompt_len": df["ContextTokens"], "output_len": df["GeneratedTokens"]}
    return Parsed(columns, rows, read, fields=dict(zip(("arrival_time_s", "prompt_len", "output_len"), AZURE)), dropped=dropped)


def read_burstgpt(text: str, file: str) -> Parsed:
    """BurstGPT (Wang et al. 2024): `Timestamp` in seconds; both releases (with or without `Session ID`, `Elapsed time`).

    Rows with zero `Response tokens` are failed requests: dropped and counted.
    """
    df, rows, read, dropped = read_csv(text, file, "burstgpt")
    failed = (numbers(df["Response tokens"]) == 0).to_numpy()
    if failed.any():
        dropped["failed request (Response tokens = 0)"] = int(failed.sum())
        df, rows = df[~failed].reset_index(drop=True), Rows(file, rows.lines[~failed])
    columns = {"arrival_time_s": df["Timestamp"], "prompt_len": df["Request tokens"], "output_len": df["Response tokens"]}
    return Parsed(columns, rows, read, fields=dict(zip(("arrival_time_s", "prompt_len", "output_len"), BURSTGPT)), dropped=dropped)


def read_vidur(text: str, file: str) -> Parsed:
    """Vidur's processed traces (e.g. splitwise_conv.csv): `arrived_at` in seconds, prefill and decode token counts."""
    df, rows, read, dropped = read_csv(text, file, "vidur")
    columns = {"arrival_time_s": df["arrived_at"], "prompt_len": df["num_prefill_tokens"], "output_len": df["num_decode_tokens"]}
    return Parsed(columns, rows, read, fields=dict(zip(("arrival_time_s", "prompt_len", "output_len"), VIDUR)), dropped=dropped)
