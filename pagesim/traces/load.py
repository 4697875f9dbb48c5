"""load_trace: any supported file -> a validated Trace, with a summary of what was read and dropped."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.errors import OptionError, UserError
from pagesim.options import readable
from pagesim.traces.csv_formats import HEADERS, read_azure, read_burstgpt, read_fast, read_vidur
from pagesim.traces.detect import detect
from pagesim.traces.errors import Described, TraceError
from pagesim.traces.mooncake import read_mooncake
from pagesim.traces.own_format import read_pagesim
from pagesim.traces.schema import LoadSummary, Trace, by_arrival, to_frame
from pagesim.traces.sharegpt import SHAREGPT_RATE, read_sharegpt
from pagesim.traces.text import check_trace_file, is_gzip, read_head, read_text

READERS = {
    "azure": read_azure,
    "burstgpt": read_burstgpt,
    "mooncake": read_mooncake,
    "vidur": read_vidur,
    "pagesim": read_pagesim,
    "sharegpt": read_sharegpt,
}
FORMATS = ("auto", *READERS)
TRACE_FILE_HELP = "trace file (Azure, BurstGPT, Mooncake, Vidur, ShareGPT or pagesim format)"  # every command's


def load_trace(
    path: str | Path,
    format: str = "auto",
    *,
    limit: int | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    time_scale: float = 1.0,
    rate: float | None = None,
    seed: int = 0,
    max_span_s: float | None = None,
) -> Trace:
    """Read, validate and normalise a trace file (see schema.py for what the result guarantees).

    Steps, in order: keep arrivals in [start_s, end_s) seconds after the first arrival and re-base so the
    first kept request arrives at 0; keep the first `limit` requests; divide arrival times by `time_scale`
    (2.0 replays twice as fast); if `rate` is given, rescale arrival times so rows / span = `rate` req/s.
    For ShareGPT, which has no arrival times, `rate` (default SHAREGPT_RATE) and `seed` drive the Poisson
    arrivals instead. `max_span_s` (the simulating commands pass MAX_ARRIVAL_S): a kept arrival later than that,
    in seconds after the first, is a TraceError naming its line. Raises TraceError for bad files, UserError for bad
    options.
    """
    _check_options(format, limit, start_s, end_s, time_scale, rate)
    file = str(path)
    check_trace_file(path)  # before any read: devices, pipes and oversize files are refused
    fmt = _format(path, file) if format == "auto" else _named_format(path, file, format)
    parsed = read_fast(file, fmt) if fmt in HEADERS else None
    if parsed is None:
        text = read_text(path)
        if fmt == "sharegpt":
            parsed = read_sharegpt(text, file, rate or SHAREGPT_RATE, seed)
        else:
            parsed = READERS[fmt](text, file)
        del text
    if len(parsed.rows.lines) == 0:
        dropped = "; ".join(f"{n:,} dropped: {why}" for why, n in parsed.dropped.items())
        raise TraceError(file, None, None, "at least one request", Described(f"none ({dropped})" if dropped else "none"))
    df = to_frame(parsed)
    parsed.columns.clear()  # the frame holds what is needed; the raw columns go
    t = df["arrival_time_s"].to_numpy()
    far = max_span_s is not None and len(t) and t.max() - t.min() > max_span_s
    ids_in_file = df["request_id"] if far else None  # in file order: to name the line of an arrival beyond max_span_s
    del t
    df, warnings = by_arrival(df, parsed.rows)
    dropped = dict(parsed.dropped)
    df = _window(df, start_s, end_s, limit, dropped, file)
    rescale = rate is not None and not parsed.rate_applied
    if time_scale != 1 or rescale:
        recorded = df["arrival_time_s"].to_numpy()
        with np.errstate(over="ignore", under="ignore"):
            scaled = recorded / time_scale
        if rescale:
            span = scaled[-1]
            if span <= 0:
                raise TraceError(file, None, None, f"arrivals spread over time, to rescale them to --rate {rate:g}",
                                 Described("all at once; drop --rate"))
            with np.errstate(over="ignore", invalid="ignore"):
                scaled = scaled * (len(df) / span / rate)
        _check_arrivals(recorded, scaled, time_scale, rate if rescale else None)
        df["arrival_time_s"] = scaled
    elif ids_in_file is not None and df["arrival_time_s"].iloc[-1] > max_span_s:
        times = df["arrival_time_s"].to_numpy()
        if parsed.rate_applied:  # ShareGPT: the arrivals are drawn at --rate, not read from the file
            _check_arrivals(times, times, 1.0, rate)
        i = int(np.searchsorted(times, max_span_s, side="right"))
        line = parsed.rows.lines[np.flatnonzero(ids_in_file.to_numpy() == df["request_id"].iloc[i])[0]]
        raise TraceError(file, int(line), parsed.fields.get("arrival_time_s", "arrival_time_s"),
                         f"an arrival at most {max_span_s:.0e} s after the first, where a double still holds a "
                         "step's microseconds (every latency would read 0; --start-s, --end-s or --time-scale make "
                         "a longer trace shorter)", Described(f"{times[i]:.3g} s after it"))
    del ids_in_file
    summary = LoadSummary(
        parsed.rows_read, len(df), dropped, parsed.warnings + warnings, fmt, float(df["arrival_time_s"].iloc[-1])
    )
    block = parsed.hash_block_size if "prefix_hash_ids" in df else None
    return Trace(df, parsed.name or _stem(path), summary, block)


def _stem(path: str | Path) -> str:
    """The file's name without its extension; a gzip file's without `.gz` too (conv.csv.gz -> conv)."""
    name = Path(path).name
    if name.lower().endswith(".gz") and is_gzip(path):
        name = name[:-3]
    return Path(name).stem


def _format(path: str | Path, file: str) -> str:
    """The detected format, from the file's first lines (the whole file when those do not tell)."""
    head = read_head(path)
    if head is not None:
        try:
            return detect(head, file)
        except TraceError:
            pass
    return detect(read_text(path), file)


def _named_format(path: str | Path, file: str, fmt: str) -> str:
    """`fmt` as given; a JSON format given a CSV trace of a known format is refused at its header, as a CSV format given
    a JSON trace is (csv_formats), not as invalid JSON at column 1."""
    head = read_head(path) if fmt not in HEADERS else None
    if head is not None and not head.lstrip().startswith(("{", "[")):
        try:
            found = detect(head, file)
        except TraceError:
            return fmt
        if found in HEADERS:
            line = head.count("\n", 0, len(head) - len(head.lstrip())) + 1
            raise TraceError(file, line, None, f"JSON ({fmt} format; a CSV trace is azure, burstgpt or vidur: pass its "
                             "format, or auto)", Described(f"a CSV header of the {found} format"))
    return fmt


def _window(df: pd.DataFrame, start_s, end_s, limit, dropped: dict[str, int], file: str) -> pd.DataFrame:
    t = df["arrival_time_s"].to_numpy()
    before = t < start_s if start_s is not None else np.zeros(len(t), bool)
    after = t >= end_s if end_s is not None else np.zeros(len(t), bool)
    for reason, mask in ((f"arrives before start_s={start_s}", before), (f"arrives at or after end_s={end_s}", after)):
        if mask.any():
            dropped[reason] = int(mask.sum())
    if before.any() or after.any():  # (a copy of the frame only when rows go)
        df = df[~(before | after)]
    if len(df) == 0:
        window = f"[{start_s if start_s is not None else 0:g}, {'end' if end_s is None else f'{end_s:g}'})"
        span = f"[{t.min():.6g}, {t.max():.6g}] s" if len(t) else "nothing"
        raise TraceError(file, None, None, f"at least one request arriving in the window {window} s (--start-s, "
                                           f"--end-s); the trace's arrivals span {span} ({readable(len(t))} requests)")
    if limit is not None and len(df) > limit:
        dropped[f"beyond limit={limit}"] = len(df) - limit
        df = df.iloc[:limit]
    df = df.reset_index(drop=True)
    if df["arrival_time_s"].iloc[0] != 0:
        df["arrival_time_s"] = df["arrival_time_s"] - df["arrival_time_s"].iloc[0]
    return df


MAX_ARRIVAL_S = 1e9  # ~32 years: a double then still resolves ~0.1 us (2**-52 of it), far below a step's time


def _check_arrivals(recorded: np.ndarray, scaled: np.ndarray, time_scale: float, rate: float | None) -> None:
    """Rescaled arrivals must stay finite and keep every gap (no overflow to inf, no underflow to equal times)."""
    parts = ([] if time_scale == 1 and rate is not None else ["{time_scale} " + readable(time_scale)])
    parts += [] if rate is None else ["{rate} " + readable(rate)]
    what, verb = " with ".join(parts), "makes"
    if not np.isfinite(scaled).all():
        raise OptionError(f"{what} {verb} arrival times overflow (the last would arrive at {readable(scaled[-1])} s); "
                          "choose a value nearer 1 req/s or 1x")
    if len(scaled) and scaled[-1] > MAX_ARRIVAL_S:
        raise OptionError(f"{what} {verb} the last request arrive at {scaled[-1]:.3g} s, beyond "
                          f"{MAX_ARRIVAL_S:.0e} s, where a double no longer holds a step's microseconds (every "
                          "latency would read 0); choose a value nearer 1 req/s or 1x")
    with np.errstate(invalid="ignore"):
        lost = (np.diff(recorded) > 0) & (np.diff(scaled) <= 0)
    if lost.any():
        raise OptionError(f"{what} {verb} {int(lost.sum()):,} arrivals fall on the same instant as the one before them; "
                          "choose a value nearer 1 req/s or 1x")


def _check_options(format, limit, start_s, end_s, time_scale, rate) -> None:
    positive = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0  # noqa: E731
    if format not in FORMATS:
        raise OptionError(f"unknown trace {{format}} {format!r}; expected one of {', '.join(FORMATS)}")
    if limit is not None and not (isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1):
        raise OptionError(f"{{limit}} must be a positive integer, got {limit!r}")
    for name, value in (("start_s", start_s), ("end_s", end_s)):
        if value is not None and not (positive(value) or value == 0):
            raise OptionError(f"{{{name}}} must be a non-negative number of seconds, got {value!r}")
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise OptionError(f"{{end_s}} ({end_s}) must be after {{start_s}} ({start_s})")
    if not positive(time_scale):
        raise OptionError(f"{{time_scale}} must be a positive number, got {time_scale!r}")
    if rate is not None and not positive(rate):
        raise OptionError(f"{{rate}} must be a positive number of requests per second, got {rate!r}")
    if rate is not None and time_scale != 1:
        raise OptionError(f"{{rate}} {rate!r} sets the mean arrival rate itself, so {{time_scale}} {time_scale!r} would have "
                          "no effect; pass one of them")
