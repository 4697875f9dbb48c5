"""Cached wrappers around the dashboard's expensive calls.

Traces and replay runs are read-only results kept in st.cache_resource: the same objects are handed to
every rerun and session (immutable by convention: nothing may modify them), where st.cache_data would
unpickle a copy on every rerun (tens of MB for a replay with baselines). Result files stay in
st.cache_data. (Sweeps are not cached here: their rows live in a sweep directory, pagesim.dashboard.sweep.)

Keys: a trace is keyed by its source (file path and modification time, upload
bytes, or generator arguments); a run by the trace's content fingerprint and
the config as JSON. Trace objects themselves travel in `_trace` arguments,
which Streamlit does not hash.

Progress bars are created *inside* the cached functions: Streamlit records the
elements a cached function draws and replays them on a cache hit, and it can
only replay elements the function created itself. Callers wrap the call in a
placeholder and empty it afterwards, so neither the bar nor its replay stays on
the page.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import streamlit as st

from pagesim.config import Config
from pagesim.dashboard import data
from pagesim.dashboard.kernel_results import load_kernel_result
from pagesim.dashboard.live_runs import LiveRun, commit_times, extract_run_zip, load_live_run, run_card, run_commit
from pagesim.traces import Trace, load_trace
from pagesim.traces.load import MAX_ARRIVAL_S
from pagesim.traces.synth import synthesize


@st.cache_resource(show_spinner=False, max_entries=32)
def bundled_trace(path: str, mtime: float, limit: int | None) -> tuple[Trace, str]:
    trace = load_trace(path, limit=limit, max_span_s=MAX_ARRIVAL_S)  # as replay loads it: latencies stay resolvable
    return trace, data.trace_fingerprint(trace)


@st.cache_resource(show_spinner=False, max_entries=8)
def uploaded_trace(name: str, content: bytes, format: str, limit: int | None, rate: float | None) -> tuple[Trace, str]:
    trace = data.load_upload(name, content, format=format, limit=limit, rate=rate)
    return trace, data.trace_fingerprint(trace)


@st.cache_resource(show_spinner=False, max_entries=32)
def synthetic_trace(preset: str, num_requests: int, rate: float, arrival: str, cv: float, seed: int) -> tuple[Trace, str]:
    trace = synthesize(preset, num_requests=num_requests, rate=rate, arrival=arrival, cv=cv, seed=seed)
    return trace, data.trace_fingerprint(trace)


def config_key(config: Config) -> str:
    return json.dumps(config.to_dict(), sort_keys=True, default=str)


@st.cache_resource(show_spinner=False, max_entries=8)
def replay(trace_key: str, config_json: str, baselines: tuple[str, ...], num_snapshots: int,
           _trace: Trace) -> dict[str, data.Run]:
    """data.replay, cached by (trace fingerprint, config, baselines)."""
    bar = st.progress(0.0, text="simulating")
    config = Config.from_dict(json.loads(config_json))
    return data.replay(_trace, config, baselines, num_snapshots=num_snapshots,
                       progress=lambda fraction, text: bar.progress(min(fraction, 1.0), text=text))


@st.cache_resource(show_spinner=False, max_entries=64)
def once(name: str, key: str, _build):
    """What `_build()` returns (a figure, a trace's statistics), built once per (name, key): key names
    everything it is drawn from (the trace's fingerprint, the config, the baselines, the view's
    settings), so a new session or a rerun of the same view gets it ready-made. Read-only, like the runs."""
    return _build()


@st.cache_data(show_spinner=False, max_entries=8)
def live_run(path: str, mtime: float) -> LiveRun:
    return load_live_run(Path(path))


@st.cache_data(show_spinner=False, max_entries=1024)
def live_run_card(path: str, mtime: float) -> str:
    """The GPU a committed run was recorded on (live_runs.run_card), read once per summary.json."""
    return run_card(Path(path))


@st.cache_data(show_spinner=False, max_entries=1024)
def live_run_commit(path: str, mtime: float) -> str | None:
    """The git commit a committed run was recorded at (live_runs.run_commit), read once per summary.json."""
    return run_commit(Path(path))


@st.cache_data(show_spinner=False, max_entries=4, ttl=60)
def live_commit_times(root: str) -> dict[str, int]:
    """live_runs.commit_times of the runs' checkout, read again after a minute (a run committed meanwhile)."""
    return commit_times(Path(root))


@st.cache_data(show_spinner=False, max_entries=4)
def zipped_live_run(name: str, content: bytes) -> LiveRun:
    """A run directory uploaded as a zip, read from a temporary folder and named after the zip."""
    with tempfile.TemporaryDirectory(prefix="pagesim-live-") as tmp:
        run = load_live_run(extract_run_zip(content, Path(tmp)))
    run.path = Path(Path(name).stem)
    return run


@st.cache_data(show_spinner=False, max_entries=8)
def kernel_result(path: str, mtime: float) -> dict:
    return load_kernel_result(Path(path))
