"""Traces and replay runs for the dashboard, without Streamlit.

The Replay page's default view must render in a few seconds on a 2-core CPU:
the first DEFAULT_LIMIT requests of the bundled ShareGPT-like trace (10 req/s)
on a KV cache capped at DEFAULT_NUM_GPU_BLOCKS blocks. With Llama-3-8B on an H200 at
gpu_memory_utilization 0.9 the cache would hold ~57,000 blocks of 16 tokens and
nothing would ever be short of memory; at 2048 blocks (32,768 token slots,
4 GiB of K/V) paged attention never needs more than about half of it while the
`max` baseline, which reserves max_model_len = 8192 slots per request, fits
only three requests at a time and queues the rest.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.config import Config
from pagesim.metrics import summarize_run
from pagesim.replay import run_configs
from pagesim.simulator import RunResult, simulate
from pagesim.traces import Trace, TraceError, load_trace
from pagesim.traces.load import MAX_ARRIVAL_S

REPO = Path(__file__).resolve().parents[2]
TRACES_DIR = REPO / "traces"
DEFAULT_TRACE = "sharegpt-poisson-1k.jsonl"
DEFAULT_NUM_GPU_BLOCKS = 2048
DEFAULT_LIMIT = 500  # of the bundled trace's 1000: the simulations take half as long
NUM_SNAPSHOTS = 40  # over the trace's arrivals
NUM_DRAIN_SNAPSHOTS = 40  # after the last arrival, spaced geometrically out to DRAIN_REACH x the arrival span
DRAIN_REACH = 50.0
BASELINES = ("max", "pow2", "oracle")


def bundled_traces(folder: Path = TRACES_DIR) -> list[Path]:
    """The traces shipped with pagesim (traces/*.jsonl), the ShareGPT-like default first."""
    paths = sorted(folder.glob("*.jsonl"))
    return sorted(paths, key=lambda p: (p.name != DEFAULT_TRACE, "sharegpt" not in p.name, p.name))


def default_trace_path() -> Path:
    """The bundled ShareGPT-like trace the Replay and Sweep pages open with."""
    return TRACES_DIR / DEFAULT_TRACE


def load_upload(name: str, data: bytes, *, format: str = "auto", limit: int | None = None,
                rate: float | None = None) -> Trace:
    """Load an uploaded file as replay loads a trace file (upload_path: named after the upload). `rate`: load_trace's
    (the arrivals of a file without arrival times; see arrivals_drawn). Raises TraceError or UserError."""
    with upload_path(name, data) as path:
        return load_trace(path, format, limit=limit, rate=rate, max_span_s=MAX_ARRIVAL_S)  # as replay loads it


def upload_content(name: str, data: bytes) -> bytes:
    """An uploaded file's content: decompressed when it is gzip (its magic bytes, whatever its name), by the trace
    readers' own reader (pagesim.traces.text.read_bytes), so within their size ceiling. TraceError naming the upload
    when the gzip data is corrupt or cut short, or decompresses past the ceiling."""
    from pagesim.traces.text import GZIP_MAGIC, read_bytes

    if data[:2] != GZIP_MAGIC:
        return data
    with upload_path(name, data) as path:
        return read_bytes(path)


@contextmanager
def upload_path(name: str, data: bytes) -> Iterator[Path]:
    """The upload written to a temporary folder under its original name, so a trace read from it is named after it
    and a TraceError raised inside reads `NAME, line R, field F: expected ...` (the temporary folder left out)."""
    safe = Path(name).name.strip() or "upload"
    with tempfile.TemporaryDirectory(prefix="pagesim-upload-") as tmp:
        path = Path(tmp) / safe
        path.write_bytes(data)
        try:
            yield path
        except TraceError as exc:
            exc.file = safe
            exc.args = (str(exc).replace(str(path), safe),)
            raise


def arrivals_drawn(trace: Trace) -> bool:
    """Whether the trace's file had no arrival times, so load_trace drew them at a rate (ShareGPT: Poisson arrivals at
    `rate`, `replay --rate`, SHAREGPT_RATE by default): the only trace whose arrivals a page must ask for."""
    return trace.summary.format == "sharegpt"


def trace_fingerprint(trace: Trace) -> str:
    """A content hash of the trace's requests (and name): the cache key of every run on it."""
    h = hashlib.sha256(trace.name.encode())
    h.update(str(trace.hash_block_size).encode())
    for column in trace.df.columns:
        values = trace.df[column]
        h.update(column.encode())
        if values.dtype == object or isinstance(values.dtype, pd.StringDtype):
            h.update("\x1f".join(map(str, values.tolist())).encode())
        else:
            h.update(np.ascontiguousarray(values.to_numpy()).tobytes())
    return h.hexdigest()[:16]


def snapshot_times(trace: Trace, n: int = NUM_SNAPSHOTS, drain: int = NUM_DRAIN_SNAPSHOTS,
                   reach: float = DRAIN_REACH) -> list[float]:
    """The block map's time slider: n instants evenly spaced over the trace's arrivals, then `drain`
    instants spaced geometrically out to `reach` times the arrival span, so that a run still draining
    its queue long after the last arrival can be inspected (a run records no snapshot after its end
    but one: see replay)."""
    span = float(trace.df["arrival_time_s"].max()) if len(trace.df) else 0.0
    if not n:
        return []
    if span <= 0:  # everything arrives at once: no arrival span to scale by
        return [0.0, *np.geomspace(0.05, 0.05 * reach * 20, n + drain - 1).tolist()]
    times = np.linspace(0.0, span, n)
    step = span / max(n - 1, 1)
    after = np.geomspace(span + step, span * reach, drain) if drain else np.array([])
    return [*times.tolist(), *after.tolist()]


def trim_snapshots(snapshots: list, times: list[float]) -> list:
    """The snapshots up to the run's end: the simulator records every instant left after the run ends
    at the end time, so only the first of those is kept (the run's final, empty state)."""
    for i, (snap, t) in enumerate(zip(snapshots, times)):
        if snap.time_s < t - 1e-9:
            return snapshots[:i + 1]
    return snapshots


@dataclass
class Run:
    """One configuration's replay: the simulator's result and its summary (pagesim.metrics)."""

    name: str
    result: RunResult
    summary: dict


def replay(trace: Trace, config: Config, baselines=("max",), *, num_snapshots: int = NUM_SNAPSHOTS,
           progress=None) -> dict[str, Run]:
    """The paged config, then each contiguous baseline, on one trace; keyed by run name.

    progress(fraction, text), if given, is called as the runs advance (fraction of all runs,
    counting each run's progress through the trace's arrival span)."""
    configs = run_configs(config, baselines)
    times = snapshot_times(trace, num_snapshots)
    span = float(trace.df["arrival_time_s"].max()) if len(trace.df) else 0.0
    span = span if span > 0 else 1.0
    runs = {}
    for i, cfg in enumerate(configs):
        name = cfg.run_name
        report = None
        if progress is not None:
            progress(i / len(configs), f"simulating {name} ({i + 1}/{len(configs)})")
            report = _throttled(lambda now, i=i, name=name: progress(
                (i + min(now / span, 1.0)) / len(configs), f"simulating {name} ({i + 1}/{len(configs)})"), span)
        result = simulate(trace, cfg, snapshot_times=times, progress=report)
        result.snapshots = trim_snapshots(result.snapshots, times)
        runs[name] = Run(name, result, summarize_run(result))
    if progress is not None:
        progress(1.0, "done")
    return runs


def _throttled(callback, span: float, levels: int = 50):
    """callback(now), but only when now / span has crossed one of `levels` marks since the last call:
    the simulator reports progress on every step, and each report is a message to the browser."""
    last = [-1]

    def report(now: float) -> None:
        level = min(int(now / span * levels), levels)
        if level != last[0]:
            last[0] = level
            callback(now)

    return report
