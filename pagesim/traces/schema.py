"""The trace schema every loader produces and every consumer may rely on.

One row per request, sorted by arrival, index 0..n-1:

    request_id        str        unique
    arrival_time_s    float      first = 0, non-decreasing
    prompt_len        int        >= 1
    output_len        int        >= 1
    prefix_hash_ids   list[int]  optional; one id per *full* hash_block_size-token
                                 block of the prompt (len == prompt_len // hash_block_size);
                                 equal ids at equal positions mean equal prefixes
    prompt_token_ids  list[int]  optional; len == prompt_len
    n                 int        optional; >= 1 parallel samples
    priority          int        optional

Optional columns are either present for every row or absent from the frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pandas.api.types import infer_dtype

from pagesim.options import plural
from pagesim.traces.errors import EMPTY, Described, TraceError

REQUIRED = ("request_id", "arrival_time_s", "prompt_len", "output_len")
OPTIONAL = ("prefix_hash_ids", "prompt_token_ids", "n", "priority")
COLUMNS = REQUIRED + OPTIONAL
MAX_INT = 2**31 - 1  # lengths, n and priority stay far below this
INT64 = (-(2**63), 2**63 - 1)  # token and hash ids
MAX_TIME = 1e15  # arrival times, in the file's unit; keeps differences and rescaling finite


@dataclass(slots=True)
class LoadSummary:
    """What happened while loading: rows read from the file, requests kept, what was dropped and why."""

    rows_read: int
    rows_kept: int
    dropped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    format: str = ""
    span_s: float = 0.0

    def report(self) -> str:
        """Rows read and kept, and what was dropped: the lines a command that goes on to run prints (its warnings
        go where a run's warnings go: stderr and summary.json, run_warnings.emit)."""
        out = [f"{self.format}: {plural(self.rows_read, 'row')} read, {plural(self.rows_kept, 'request')} kept, "
               f"span {self.span_s:.3f} s"]
        out += [f"  dropped {count}: {reason}" for reason, count in self.dropped.items()]
        return "\n".join(out)

    def __str__(self) -> str:
        return "\n".join([self.report()] + [f"  warning: {text}" for text in self.warnings])


@dataclass(slots=True)
class Trace:
    df: pd.DataFrame
    name: str
    summary: LoadSummary
    hash_block_size: int | None = None  # tokens per prefix_hash_ids entry; None without hash ids


@dataclass(slots=True)
class Rows:
    """The file rows of a frame come from: row i was read at 1-based line `lines[i]`."""

    file: str
    lines: np.ndarray

    def error(self, i: int, field: str | None, expected: str, got: object) -> TraceError:
        return TraceError(self.file, int(self.lines[i]), field, expected, got)


@dataclass(slots=True)
class Parsed:
    """A format reader's output: raw values under schema names, in file order, not yet validated."""

    columns: dict[str, pd.Series]  # schema name -> raw values (strings, JSON values, numbers)
    rows: Rows
    rows_read: int
    fields: dict[str, str] = field(default_factory=dict)  # schema name -> the file's name for it
    time_unit_s: float = 1.0  # seconds per unit of the arrival column
    hash_block_size: int | None = None
    name: str | None = None  # the trace's own name, when the file records one
    rate_applied: bool = False  # arrivals were synthesized at the requested rate (ShareGPT)
    partial_last_hash: bool = False  # hash ids also cover the last, partial block (Mooncake)
    dropped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def numbers(values: pd.Series) -> pd.Series:
    """Values as float64; anything that is not a number (bools and containers included) becomes NaN."""
    if values.dtype == object:
        values = values.map(lambda v: None if isinstance(v, (bool, list, dict, tuple, np.ndarray)) else v)
    return pd.to_numeric(values, errors="coerce").astype("float64")


NUMBER_KINDS = {"arrival_time_s": "an arrival time", "prompt_len": "a positive integer", "output_len": "a positive integer",
                "n": "a positive integer", "priority": "an integer"}


NO_STRINGS = ("integer", "floating", "mixed-integer-float", "boolean", "empty")  # infer_dtype's kinds without a str


def json_numbers(columns: dict[str, pd.Series], rows: Rows, fields: dict[str, str] | None = None) -> None:
    """A JSON reader's numeric columns hold JSON numbers: a string ("123") is refused at its line, as a string id or a
    string in a hash-id list is (a CSV cell is text, a JSON value says what it is). `fields`: schema name -> key."""
    for name, kind in NUMBER_KINDS.items():
        values = columns.get(name)
        if values is None or infer_dtype(values, skipna=True) in NO_STRINGS:  # (C speed: a column of numbers)
            continue
        strings = np.fromiter((type(v) is str for v in values), bool, len(values))
        if strings.any():
            i = int(np.flatnonzero(strings)[0])
            raise rows.error(i, (fields or {}).get(name, name), f"{kind} as a JSON number, not a string", values.iloc[i])


def offsets(values: pd.Series, rows: Rows, field: str, unit: str = "seconds") -> None:
    """Arrivals recorded as offsets from the trace's start (Vidur, Mooncake, pagesim): a negative one is a broken file,
    not a shift to undo, refused at its line (-0 is 0)."""
    negative = (numbers(values) < 0).to_numpy()
    if negative.any():
        i = int(np.flatnonzero(negative)[0])
        raise rows.error(i, field, f"a non-negative offset in {unit} from the trace start", values.iloc[i])


def _got(values: pd.Series, i: int) -> object:
    value = values.iloc[i]
    return EMPTY if value is None else value  # a NaN is shown as nan: an empty cell or JSON null is None


def ints(values: pd.Series, rows: Rows, field: str, positive: bool = True) -> np.ndarray:
    """Integer-valued entries (|x| <= MAX_INT) as int64; raises at the first one that is empty, not an
    integer, or (when `positive`) below 1."""
    if values.dtype == np.int64:  # already integers (the fast CSV reader): check the range without copies
        num = values.to_numpy()
        if len(num) and num.min() >= (1 if positive else -MAX_INT) and num.max() <= MAX_INT:
            return num
    num = numbers(values).to_numpy()
    with np.errstate(invalid="ignore"):
        ok = (num == np.floor(num)) & (num >= (1 if positive else -MAX_INT)) & (num <= MAX_INT)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        kind = "a positive integer" if positive else "an integer"
        if num[i] == np.floor(num[i]) and abs(num[i]) > MAX_INT:  # an integer, but beyond the limit
            kind += f" up to {MAX_INT:,}" if positive else f" from {-MAX_INT:,} to {MAX_INT:,}"
        raise rows.error(i, field, kind, _got(values, i))
    return num.astype(np.int64)


def floats(values: pd.Series, rows: Rows, field: str) -> np.ndarray:
    """Numbers as float64; raises at the first entry that is empty, not a number, or not below MAX_TIME in size."""
    num = values.to_numpy() if values.dtype == np.float64 else numbers(values).to_numpy()
    with np.errstate(invalid="ignore"):
        ok = np.abs(num) < MAX_TIME
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise rows.error(i, field, f"a number (of magnitude below {MAX_TIME:g})", _got(values, i))
    return num


def int_lists(values: pd.Series, rows: Rows, field: str, sizes: np.ndarray, per: str, also: np.ndarray | None = None) -> list:
    """Lists of int64 ids; row i must hold `sizes[i]` ids, one `per` unit (or `also[i]`, then cut to `sizes[i]`)."""
    out = []
    for i, value in enumerate(values):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (list, tuple)) or not _int64s(value):
            raise rows.error(i, field, "a list of integers", _got(values, i))
        if len(value) != sizes[i] and (also is None or len(value) != also[i]):
            count = plural(sizes[i], "id") if also is None or also[i] == sizes[i] else f"{sizes[i]} or {also[i]} ids"
            extra = "" if also is None or also[i] == sizes[i] else ", and optionally one more for its partial last block"
            raise rows.error(i, field, f"{count}, one per {per}{extra}", Described(f"{len(value)}"))
        out.append([int(x) for x in value[: sizes[i]]])
    return out


def _int64s(values: list | tuple) -> bool:
    if not values:
        return True
    if set(map(type, values)) <= {int}:  # the common case, checked at C speed
        return INT64[0] <= min(values) and max(values) <= INT64[1]
    return all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and INT64[0] <= x <= INT64[1] for x in values)


def to_frame(p: Parsed) -> pd.DataFrame:
    """Validate a reader's raw columns and build the schema frame (file order, times not yet re-based)."""
    c, rows = p.columns, p.rows
    name = lambda key: p.fields.get(key, key)  # noqa: E731
    n = len(rows.lines)
    if "request_id" in c:
        ids = pd.Series(_request_ids(c["request_id"], rows, name("request_id")), dtype="str")
    else:  # row numbers: unique by construction
        import pyarrow as pa
        import pyarrow.compute as pc

        ids = pd.Series(pc.cast(pa.array(np.arange(n)), pa.string()), dtype="str")
    df = pd.DataFrame(
        {
            "request_id": ids,
            "arrival_time_s": _times(floats(c["arrival_time_s"], rows, name("arrival_time_s")), p.time_unit_s),
            "prompt_len": ints(c["prompt_len"], rows, name("prompt_len")),
            "output_len": ints(c["output_len"], rows, name("output_len")),
        },
        copy=False,
    )
    if "prefix_hash_ids" in c:
        if not (isinstance(p.hash_block_size, (int, np.integer)) and 1 <= p.hash_block_size <= MAX_INT):
            raise TraceError(rows.file, None, name("prefix_hash_ids"), "a positive hash_block_size for the prefix hash ids", p.hash_block_size)
        full, partial = np.divmod(df["prompt_len"].to_numpy(), p.hash_block_size)
        also = full + (partial > 0) if p.partial_last_hash else None
        per = f"full {p.hash_block_size}-token block of the prompt"
        df["prefix_hash_ids"] = int_lists(c["prefix_hash_ids"], rows, name("prefix_hash_ids"), full, per, also)
    if "prompt_token_ids" in c:
        sizes = df["prompt_len"].to_numpy()
        df["prompt_token_ids"] = int_lists(c["prompt_token_ids"], rows, name("prompt_token_ids"), sizes, "prompt token")
    if "n" in c:
        df["n"] = ints(c["n"], rows, name("n"))
    if "priority" in c:
        df["priority"] = ints(c["priority"], rows, name("priority"), positive=False)
    return df


def _times(seconds: np.ndarray, unit_s: float) -> np.ndarray:
    """Arrival times in seconds; a -0 (a file's "-0" or -0.0) reads 0, not -0.0 (adding 0.0 makes it +0.0)."""
    return (seconds if unit_s == 1.0 else seconds * unit_s) + 0.0


def _request_ids(values: pd.Series, rows: Rows, field: str) -> list[str]:
    seen: dict[str, int] = {}
    for i, value in enumerate(values):
        if not isinstance(value, str) or not value or not _utf8(value):
            raise rows.error(i, field, "a non-empty string of valid Unicode", _got(values, i))
        if value in seen:
            raise rows.error(i, field, f"a unique request id (also at line {seen[value]})", value)
        seen[value] = int(rows.lines[i])
    return list(values)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from a JSON "\\ud800"
        return False
    return True


def by_arrival(df: pd.DataFrame, rows: Rows) -> tuple[pd.DataFrame, list[str]]:
    """Sort (stably) by arrival and re-base so the first arrival is 0; warns when the file was out of order."""
    t = df["arrival_time_s"].to_numpy()
    warnings = []
    late = np.flatnonzero(np.diff(t) < 0)
    if len(late):
        warnings.append(
            f"{rows.file}: {plural(len(late), 'row')} {'arrives' if len(late) == 1 else 'arrive'} earlier than the row "
            f"before {'it' if len(late) == 1 else 'them'} (first at line "
            f"{int(rows.lines[late[0] + 1])}); sorted by arrival time"
        )
        df = df.iloc[np.argsort(t, kind="stable")].reset_index(drop=True)
    if len(df) and df["arrival_time_s"].iloc[0] != 0:
        df["arrival_time_s"] = df["arrival_time_s"] - df["arrival_time_s"].iloc[0]
    return df, warnings


def trace_from_frame(df: pd.DataFrame, name: str, hash_block_size: int | None = None) -> Trace:
    """Validate a frame built by other code and return it as a Trace (sorted and re-based as the schema says).

    Errors name the frame by `name` and give the 1-based row position as the line.
    """
    if not isinstance(df, pd.DataFrame):
        raise TraceError(name, None, None, "a pandas DataFrame", type(df).__name__)
    for column in df.columns:
        if column not in COLUMNS:
            raise TraceError(name, None, str(column), f"only the schema columns {', '.join(COLUMNS)}")
    for column in REQUIRED:
        if column not in df.columns:
            raise TraceError(name, None, column, "a column of the trace schema")
    if len(df) == 0:
        raise TraceError(name, None, None, "at least one request")
    rows = Rows(name, np.arange(1, len(df) + 1))
    parsed = Parsed({k: df[k].reset_index(drop=True).astype(object) for k in df.columns}, rows, len(df), hash_block_size=hash_block_size)
    frame, warnings = by_arrival(to_frame(parsed), rows)
    span = float(frame["arrival_time_s"].iloc[-1])
    summary = LoadSummary(len(df), len(frame), warnings=warnings, format="frame", span_s=span)
    return Trace(frame, name, summary, hash_block_size if "prefix_hash_ids" in frame else None)
