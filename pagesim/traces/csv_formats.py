"""CSV trace formats: Azure LLM inference (2023, 2024), BurstGPT, Vidur.

Every reader maps the file's columns onto schema names and leaves validation
to `schema.to_frame`, which reports errors under the file's own column names.
The header is the first non-blank line; data rows are one per line after it
(quoted line breaks inside a cell would shift the line numbers in messages).
Wholly blank lines are dropped and counted.

Large files: `fast_columns` reads the needed columns typed, with pyarrow's
streaming reader in 16 MB blocks (no Python object per cell; one thread, as
read-ahead threads piled up batches on a busy machine: 880 MB peak once). It gives up
(returns None) at the first thing that is not plainly valid, and the careful
string-based path below then reads the file again to report where and why.
"""

from __future__ import annotations

import csv
import io
import itertools
import mmap
import os
import re
import warnings

import numpy as np
import pandas as pd

from pagesim.traces.errors import EMPTY, Described, TraceError
from pagesim.traces.schema import MAX_INT, MAX_TIME, Parsed, Rows, numbers, offsets
from pagesim.traces.text import is_gzip, open_trace, read_head

AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")
VIDUR = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
HEADERS = {"azure": AZURE, "burstgpt": BURSTGPT, "vidur": VIDUR}
BLOCK_BYTES = 16 << 20  # the fast reader's chunk of file


def fast_columns(path: str, fmt: str) -> dict[str, np.ndarray] | None:
    """The format's three columns, typed, when every row is plainly valid; else None (use the careful path).

    Plainly valid: header first, no blank line, no empty cell, whole-number token counts in [1, MAX_INT]
    (BurstGPT: also 0, a failed request), numeric times below MAX_TIME (Azure: ISO timestamps, all with
    or all without a zone offset).
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    head = read_head(path)
    try:
        header = next(_csv_rows(head, path), []) if head is not None else None
    except TraceError:  # a field beyond the csv module's limit: the careful path names it
        return None
    if header is None or _repeated(header, fmt):
        return None  # pyarrow would read the first of two same-named columns: the careful path says which
    time_col, *count_cols = HEADERS[fmt]
    time_types = [pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")] if fmt == "azure" else [pa.float64()]
    for time_type in time_types:
        # counts as doubles, made int64 below: pyarrow's integer parser also reads hexadecimal ('0x10'), which the
        # careful path (pandas' to_numeric) refuses, and its double parser does not
        types = {time_col: time_type} | {c: pa.float64() for c in count_cols}
        options = pacsv.ConvertOptions(column_types=types, include_columns=list(HEADERS[fmt]))
        chunks: dict[str, list[np.ndarray]] = {name: [] for name in HEADERS[fmt]}
        # a gzip file decompressed as read, within the ceiling, its line ends noted as read (_LineEnds); a plain
        # file read by pyarrow itself and scanned for them apart (_lone_cr): read through Python, its bytes made the
        # simulation after it run 1.8% more instructions (bench/sim_instructions.py, Azure conv; the C allocator's
        # state after a file-sized block)
        source = open_trace(path) if is_gzip(path) else path
        ends = _LineEnds(source) if source is not path else None
        try:
            with pacsv.open_csv(ends or source, read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES, use_threads=False),
                                parse_options=pacsv.ParseOptions(ignore_empty_lines=False), convert_options=options) as reader:
                for batch in reader:
                    for name in HEADERS[fmt]:
                        column = batch.column(name)
                        if column.null_count:
                            return None
                        values = column.to_numpy()
                        count = name in count_cols  # whole numbers, made int64 (their range is checked below)
                        if count and not ((values == np.floor(values)) & (np.abs(values) <= MAX_INT)).all():
                            return None
                        chunks[name].append(np.array(values, dtype=np.int64 if count else None))  # a copy: the
                        # batch's buffers go back
                    del batch, column
                    pa.default_memory_pool().release_unused()  # arrow's allocator keeps freed blocks otherwise
            if (ends.lone_cr and ends.lf) if ends else _lone_cr(path):  # pyarrow broke a row at the CR: the
                return None  # careful path names its line
            break
        except (pa.ArrowException, OSError, ValueError):
            if getattr(source, "error", None):  # corrupt, or past the ceiling once decompressed
                raise source.error from None
            continue
        finally:
            if source is not path:
                source.close()
    else:
        return None
    if not chunks[time_col]:
        return None
    out = {name: np.concatenate(chunks.pop(name)) for name in HEADERS[fmt]}  # one column's chunks freed at a time
    for name in count_cols:
        low = 0 if (fmt == "burstgpt" and name == "Response tokens") else 1
        if out[name].min() < low or out[name].max() > MAX_INT:
            return None
    if fmt == "azure":  # seconds since the earliest, as pandas' Timedelta.total_seconds computes them
        ns = out[time_col].view(np.int64)
        ns -= ns.min()
        seconds = np.empty(len(ns))
        for i in range(0, len(ns), 1 << 20):  # in slices: pandas' total_seconds makes several temporaries
            seconds[i : i + (1 << 20)] = pd.TimedeltaIndex(ns[i : i + (1 << 20)].view("timedelta64[ns]")).total_seconds()
        out[time_col] = seconds
        del ns
    elif not (np.abs(out[time_col]) < MAX_TIME).all() or out[time_col].min() < 0:  # offsets (Vidur, BurstGPT)
        return None
    return out


class _LineEnds(io.RawIOBase):
    """A file's bytes as pyarrow reads them, noting whether they hold an LF, and a CR alone (not before an LF) short of
    the end (_LONE_CR_BYTES, read after read): in a file of LF lines such a CR is refused by the careful path
    (_check_lone_cr), where pyarrow would break the line there."""

    def __init__(self, raw: io.RawIOBase):
        self.raw, self.lf, self.lone_cr, self._cr_at_end = raw, False, False, False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:  # what pyarrow calls: the raw file's bytes, not copied
        data = self.raw.read(size) if size >= 0 else self.raw.readall()
        if data:
            if self._cr_at_end and data[0] != 0x0A:
                self.lone_cr = True
            self._cr_at_end = data[-1] == 0x0D  # (whether an LF follows it: the next read's first byte)
            self.lf = self.lf or b"\n" in data
            self.lone_cr = self.lone_cr or _LONE_CR_BYTES.search(data) is not None
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)


def _lone_cr(path: str) -> bool:
    """Whether a plain file holds an LF and a CR alone (not before an LF) short of its end, as _LineEnds notes of the
    bytes it passes on; scanned in place (mmap), never copied into Python."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(b"\n") >= 0 and _LONE_CR_BYTES.search(m) is not None


_LONE_CR_BYTES = re.compile(rb"\r(?!\n|\Z)")


def read_fast(path: str, fmt: str) -> Parsed | None:
    """`fast_columns` as a reader's Parsed (BurstGPT's failed requests dropped and counted), or None."""
    out = fast_columns(path, fmt)
    if out is None:
        return None
    n = len(out[HEADERS[fmt][0]])
    keep, dropped = slice(None), {}
    if fmt == "burstgpt":
        failed = out["Response tokens"] == 0
        if failed.any():
            keep, dropped = ~failed, {"failed request (Response tokens = 0)": int(failed.sum())}
    names = ("arrival_time_s", "prompt_len", "output_len")
    columns = {name: pd.Series(out[col][keep]) for name, col in zip(names, HEADERS[fmt])}
    rows = Rows(path, np.arange(2, n + 2)[keep])
    return Parsed(columns, rows, n, fields=dict(zip(names, HEADERS[fmt])), dropped=dropped)


def read_csv(text: str, file: str, fmt: str) -> tuple[pd.DataFrame, Rows, int, dict[str, int]]:
    """All cells as strings (empty cells NaN), the rows' line numbers, rows read, and blank lines dropped."""
    body = text.lstrip()  # from the header: pandas would count a stray CR before it as a line, or as none
    skip = text.count("\n", 0, len(text) - len(body))  # blank lines before the header
    _check_lone_cr(body, file, skip)
    header = next(_csv_rows(body, file, skip + 1), [])
    _check_header(header, file, skip + 1, fmt)  # before the rows: a file of another format is no ragged row
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", pd.errors.ParserWarning)
            df = pd.read_csv(
                io.StringIO(body), dtype=str, keep_default_na=False, na_values=[""],
                skip_blank_lines=False, index_col=False,
            )
        for w in caught:
            if issubclass(w.category, pd.errors.ParserWarning):  # the first row has more fields than the header:
                _check_extra_fields(body, file, skip)  # pandas drops them (a later such row is a ParserError)
            else:
                warnings.warn(w.message, w.category, stacklevel=2)
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
    _check_header(list(df.columns), file, skip + 1, fmt)  # (as pandas read it)
    blank = df.isna().all(axis=1).to_numpy()
    _check_short_rows(df, blank, body, file, skip, fmt)
    dropped = {"blank line": int(blank.sum())} if blank.any() else {}
    rows = Rows(file, np.arange(skip + 2, skip + len(df) + 2)[~blank])
    df = df[~blank].reset_index(drop=True).astype(object)
    # rows read counts the blank lines it drops, so that read = kept + dropped in the load summary
    return df.where(df.notna(), None), rows, len(blank), dropped  # an empty cell is None: NaN is a value ('nan')


def _check_header(header: list[str], file: str, line: int, fmt: str) -> None:
    """The format's columns, each once, in the header at `line`; a JSON trace is named as such."""
    if header and header[0].lstrip().startswith(("{", "[")):
        raise TraceError(file, line, None, f"a CSV header with {', '.join(HEADERS[fmt])} ({fmt} format; a JSON trace is "
                         "mooncake, pagesim or sharegpt: pass its format, or auto)", Described("JSON"))
    repeated = _repeated(header, fmt)  # pandas renames a repeated name (X, X.1): the header's own names tell
    if repeated:
        at = [str(i + 1) for i, name in enumerate(header) if name.strip() == repeated]
        raise TraceError(file, line, repeated, "each column named once in the header",
                         Described(f"it in columns {', '.join(at[:-1])} and {at[-1]}"))
    names = {name.strip() for name in header}
    for column in HEADERS[fmt]:
        if column not in names:  # a --format naming another CSV format than the file's: say which the file is
            other = next((name for name, columns in HEADERS.items() if name != fmt and set(columns) <= names), None)
            got = (Described(f"the {other} header (pass --format {other}, or auto)"),) if other else ()
            raise TraceError(file, line, column, f"a column named {column!r} in the header ({fmt} format: {', '.join(HEADERS[fmt])})",
                             *got)


def _csv_rows(text: str, file: str, line: int = 1):
    """The csv module's rows of `text`, its lines broken as pandas and pyarrow break them: at LF, CRLF and a lone CR
    (which the csv module refuses inside a line: 'new-line character seen in unquoted field'). A field beyond the
    module's size limit is a TraceError naming its line (`text` starts at `line`)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        yield from reader
    except csv.Error as exc:  # 'field larger than field limit (131072)'
        raise TraceError(file, line + max(reader.line_num - 1, 0), None,
                         f"CSV fields of at most {csv.field_size_limit():,} characters (the csv module's limit)",
                         Described("a longer one")) from None


def _check_lone_cr(body: str, file: str, skip: int) -> None:
    """In a file whose lines end in LF (or CR LF), a carriage return (CR) alone, outside quotes, is refused at its
    line and column: pandas and pyarrow would break the row there, reporting the wrong line and field (or none).
    A file whose lines all end in a lone CR has none left (read_text made them LF). `body` starts at line skip + 1."""
    if "\r" not in body or "\n" not in body:
        return
    end = len(body.rstrip())  # a CR after the last row ends it: harmless
    for found in _LONE_CR.finditer(body, 0, end):
        at = found.start()
        start = body.rfind("\n", 0, at) + 1
        if body.count('"', start, at) % 2:  # inside a quoted cell: pandas keeps it in the cell
            continue
        stop = body.find("\n", at)
        line = body[start:at] + "\x00" + body[at + 1 : stop if stop >= 0 else len(body)]  # no NUL in the text
        number = skip + body.count("\n", 0, at) + 1
        cells = next(_csv_rows(line.replace("\r", ""), file, number), [])  # (read_text refused it)
        header = next(_csv_rows(body[: body.find("\n")].replace("\r", ""), file, skip + 1), [])
        column = next(i for i, cell in enumerate(cells) if "\x00" in cell)
        raise TraceError(file, number, header[column].strip() if column < len(header) and start > 0 else None,
                         "no carriage return (CR) inside a row: the file's lines end in LF, and a CR would break the "
                         "row in two", cells[column].replace("\x00", "\r"))


_LONE_CR = re.compile("\r(?!\n)")


def _repeated(header: list[str], fmt: str) -> str | None:
    """The first of the format's columns that the header names more than once (which of them is meant?), or None."""
    names = [name.strip() for name in header]
    return next((c for c in HEADERS[fmt] if names.count(c) > 1), None)


def _check_extra_fields(body: str, file: str, skip: int) -> None:
    """The first data row's fields beyond the header's must be empty (a trailing comma), as the careful path reads
    every other row: a value there is a ragged row, not data to drop. `body` starts at the header, line skip + 1."""
    header, first = (list(itertools.islice(_csv_rows(body, file, skip + 1), 2)) + [[], []])[:2]
    if any(field.strip() for field in first[len(header):]):
        raise TraceError(file, skip + 2, None, "as many comma-separated fields as the header has")


def _check_short_rows(df: pd.DataFrame, blank: np.ndarray, body: str, file: str, skip: int, fmt: str) -> None:
    """A data row with fewer fields than the header, lacking one of the format's columns, is refused as such: pandas
    fills the missing fields in as empty cells, which read as 'got an empty value' for the first of them. A field
    that is there but empty ('a,b,') is left to the column's check. `body` starts at the header, line skip + 1."""
    furthest = max(list(df.columns).index(column) for column in HEADERS[fmt])
    # a row missing any of the format's columns misses the furthest, its missing fields being the last ones
    suspects = np.flatnonzero(df.iloc[:, furthest].isna().to_numpy() & ~blank)
    if not len(suspects):
        return
    rows = _csv_rows(body, file, skip + 1)  # row for row as pandas read them (blank lines are rows: [])
    next(rows, None)  # the header
    at = -1
    for i in suspects:
        fields = next(itertools.islice(rows, i - at - 1, None), None)
        at = i
        if fields is not None and len(fields) <= furthest:
            raise TraceError(file, skip + 2 + int(i), None, f"{len(df.columns)} comma-separated fields as the header has",
                             Described(str(len(fields))))


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
    offsets(df["Timestamp"], rows, "Timestamp")  # seconds from the trace's start, as Vidur's arrived_at
    failed = (numbers(df["Response tokens"]) == 0).to_numpy()
    if failed.any():
        dropped["failed request (Response tokens = 0)"] = int(failed.sum())
        df, rows = df[~failed].reset_index(drop=True), Rows(file, rows.lines[~failed])
    columns = {"arrival_time_s": df["Timestamp"], "prompt_len": df["Request tokens"], "output_len": df["Response tokens"]}
    return Parsed(columns, rows, read, fields=dict(zip(("arrival_time_s", "prompt_len", "output_len"), BURSTGPT)), dropped=dropped)


def read_vidur(text: str, file: str) -> Parsed:
    """Vidur's processed traces (e.g. splitwise_conv.csv): `arrived_at` in seconds, prefill and decode token counts."""
    df, rows, read, dropped = read_csv(text, file, "vidur")
    offsets(df["arrived_at"], rows, "arrived_at")
    columns = {"arrival_time_s": df["arrived_at"], "prompt_len": df["num_prefill_tokens"], "output_len": df["num_decode_tokens"]}
    return Parsed(columns, rows, read, fields=dict(zip(("arrival_time_s", "prompt_len", "output_len"), VIDUR)), dropped=dropped)
