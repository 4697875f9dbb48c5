"""Run files on disk: what `replay` and `live` write, and the one reader every consumer uses.

    DIR/summary.json       config, trace, per-run summaries, provenance
    DIR/steps.parquet      one row per step of every run (zstd); `run` is categorical
    DIR/requests.parquet   one row per request of every run, typed: the source of truth; each preemption's
                           step time (`preempted_at`), re-admission step time (`resumed_at`), both list<double>,
                           and `swapped_out` (list<bool>), null for a request never preempted

Columns that follow from others are not stored; `read_steps` / `read_requests`
derive them (the memory fractions, `kv_cache_usage`, `blocks_free`, `free`,
`cached`, a `step` equal to the row number, and the latencies `ttft_s`,
`tpot_s`, `e2e_s`). `time_s` is stored as `idle_before_s`, the idle time
before each step (0.0 for nearly all), and rebuilt bit for bit; a start that no
gap added to the end of the step before can give (a gap longer than the time before
it can miss by an ulp) is stored as its own start time, negated (sign bit set). The writer drops a derivable column only when the derivation
reproduces it exactly, so reading a run back gives the frames the simulator
made. Integer columns have fixed narrow types (int32; int64 for sums that can
outgrow it). Each parquet file's metadata holds the provenance (`pagesim` key):
schema version, config, per-run geometry, trace fingerprint, git commit; the
same goes in summary.json.

Older runs with requests.csv (committed results/live/*) are read too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pagesim.accounting import CATEGORIES
from pagesim.outputs import git_commit, json_text

SCHEMA_VERSION = 2  # 1: steps.parquet with every column + requests.csv
METADATA_KEY = b"pagesim"
COMPRESSION = "zstd"
WIDE_COLUMNS = {"prefill_attn_pairs", "prefill_context_tokens", "decode_context_tokens"}  # sums: int64
FLOAT_COLUMNS = {"time_s", "duration_s", "arrival_time_s", "first_scheduled_s", "first_token_s", "finish_s"}
STRING_COLUMNS = ("request_id", "parent_id")
CATEGORY_COLUMNS = ("run", "state", "reason")
# Per-request lists (recorder.LIST_COLUMNS), null for a request never preempted.
LIST_TYPES = {"preempted_at": pa.list_(pa.float64()), "resumed_at": pa.list_(pa.float64()),
              "swapped_out": pa.list_(pa.bool_())}
LATENCIES = ("ttft_s", "tpot_s", "e2e_s")


# ---- derived columns -------------------------------------------------------------------------
def _run_codes(df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    run = df["run"] if isinstance(df["run"].dtype, pd.CategoricalDtype) else df["run"].astype("category")
    return run.cat.codes.to_numpy(), [str(c) for c in run.cat.categories]


def _geometry(df: pd.DataFrame, runs: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (num_gpu_blocks, block_size) from the per-run geometry in the metadata."""
    if "run" not in df or not runs:
        raise ValueError("steps without run geometry")
    codes, names = _run_codes(df)
    blocks = np.array([runs[n]["num_gpu_blocks"] for n in names], dtype=np.int64)[codes]
    bs = np.array([runs[n]["block_size"] for n in names], dtype=np.int64)[codes]
    return blocks, bs


def _step_numbers(df: pd.DataFrame) -> np.ndarray:
    """Row number within each run (runs are stored one after the other)."""
    if "run" not in df:
        return np.arange(len(df))
    codes, _ = _run_codes(df)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else np.zeros(0, dtype=np.int64)
    if len(starts) != len(np.unique(codes)):  # a run split in pieces: count the general way
        return df.groupby("run", observed=True, sort=False).cumcount().to_numpy()
    lengths = np.diff(np.r_[starts, len(codes)])
    return np.arange(len(codes)) - np.repeat(starts, lengths)


def _derive_step_column(name: str, df: pd.DataFrame, runs: dict):
    """The value of a derivable step column from the stored ones (None if its inputs are missing)."""
    blocks, bs = _geometry(df, runs)
    if name == "step":
        return _step_numbers(df)
    if name == "blocks_free":
        return blocks - df["blocks_used"].to_numpy(np.int64) - df["blocks_cached"].to_numpy(np.int64)
    if name == "cached":
        return df["blocks_cached"].to_numpy(np.int64) * bs
    if name == "free":
        others = sum(df[c].to_numpy(np.int64) for c in CATEGORIES if c != "free")
        return blocks * bs - others
    return None


STEP_DERIVED = ("step", "blocks_free", "cached", "free")
IDLE = "idle_before_s"  # stored in place of time_s: 0.0 for all but the steps after an idle gap


def idle_before(time_s: np.ndarray, duration_s: np.ndarray, prev_end: float) -> np.ndarray:
    """g with time_s[i] == (time_s[i-1] + duration_s[i-1]) + g[i] exactly in float64 (prev_end before row 0).

    g is the idle time before each step; time_s is rebuilt from it by `times_from_idle`. Where no such g
    exists, g[i] is -time_s[i] (its sign bit set: `times_from_idle` starts over from time_s[i] there). A sum
    can miss every double when the gap is longer than the time before it: 0.5727610622006171 + g is never
    1.9114773291415086, whose last bit no sum of a double in [0.5, 1) and one in [1, 2) rounds to (the
    exact sums one ulp either side of it are ties, and ties round to even). A negative gap (a step starting
    before the one before it ended) is stored as a start too, so a set sign bit means a start.
    """
    prev = np.concatenate(([prev_end], time_s[:-1] + duration_s[:-1]))
    g = time_s - prev
    for _ in range(4):  # the difference is exact unless the gap is longer than the time before it
        off = (prev + g) != time_s
        if not off.any():
            break
        g[off] = np.nextafter(g[off], np.where((prev + g)[off] < time_s[off], np.inf, -np.inf))
    starts = ((prev + g) != time_s) | np.signbit(g)
    if starts.any():
        if np.signbit(time_s[starts]).any() or np.isnan(time_s[starts]).any():
            raise AssertionError("step start times cannot be stored as idle gaps exactly")
        g[starts] = -time_s[starts]
    return g


def times_from_idle(idle_s: np.ndarray, duration_s: np.ndarray, start: float = 0.0) -> np.ndarray:
    """time_s from the idle gaps: ((start + g0) + d0) + g1 ..., added one at a time (cumsum is sequential); a
    gap with its sign bit set is the step's own start, negated (`idle_before`), from which the sums go on."""
    restarts = np.flatnonzero(np.signbit(idle_s))
    if not len(restarts):
        return _times_from_gaps(idle_s, duration_s, start)
    out = np.empty(len(idle_s))
    bounds = ([0] if restarts[0] else []) + restarts.tolist() + [len(idle_s)]
    for a, b in zip(bounds[:-1], bounds[1:]):  # every piece but a first one without a start begins at one
        gaps = idle_s[a:b]
        if np.signbit(gaps[0]):
            gaps = gaps.copy()
            gaps[0], start = -gaps[0], 0.0  # 0.0 + time == time
        out[a:b] = _times_from_gaps(gaps, duration_s[a:b], start)
    return out


def _times_from_gaps(idle_s: np.ndarray, duration_s: np.ndarray, start: float) -> np.ndarray:
    inter = np.empty(2 * len(idle_s))
    inter[0::2], inter[1::2] = idle_s, duration_s
    if len(inter):
        inter[0] = start + inter[0]
    return np.cumsum(inter, out=inter)[0::2]


def _run_segments(df: pd.DataFrame) -> list[slice]:
    if "run" not in df or not len(df):
        return [slice(0, len(df))]
    return _run_segments_of(_run_codes(df)[0])


def _clock_segments(codes: np.ndarray, replica: np.ndarray | None) -> list[slice]:
    """Row ranges of one run on one replica: the steps whose start times follow one another (a multi-replica
    run stores its replicas' steps one replica after the other, each from its own first step)."""
    if replica is None or not len(codes):
        return _run_segments_of(codes)
    replica = np.asarray(replica, dtype=np.int64)
    return _run_segments_of(codes.astype(np.int64) * (int(replica.max()) + 1) + replica)


def add_derived_step_columns(df: pd.DataFrame, runs: dict) -> pd.DataFrame:
    """The fractions of the whole cache per category and vLLM's kv_cache_usage (blocks in use / all)."""
    blocks, bs = _geometry(df, runs)
    total = blocks * bs
    for c in CATEGORIES:
        df[f"{c}_frac"] = df[c].to_numpy() / total
    df["kv_cache_usage"] = df["blocks_used"].to_numpy() / blocks
    return df


def with_memory_fractions(steps: pd.DataFrame) -> pd.DataFrame:
    """`steps` with each memory category's fraction of the cache (`{category}_frac`) where it lacks them (a
    simulator's in-memory step table keeps the counts alone). The six categories sum to every slot of the cache
    in every row, so the fractions need no run geometry: each row's counts over their sum."""
    missing = [c for c in CATEGORIES if f"{c}_frac" not in steps]
    if not missing:
        return steps
    counts = {c: steps[c].to_numpy(dtype=np.float64) for c in CATEGORIES}
    total = sum(counts.values())
    total[total == 0] = 1.0  # no row of a cache has 0 slots; an empty table stays empty
    return steps.assign(**{f"{c}_frac": counts[c] / total for c in missing})


def add_latencies(df: pd.DataFrame) -> pd.DataFrame:
    """ttft_s, tpot_s, e2e_s from the request times (NaN where they do not apply), as the recorder computes them."""
    finished = (df["state"] == "finished").to_numpy()
    first, finish, arrival = (df[c].to_numpy(np.float64) for c in ("first_token_s", "finish_s", "arrival_time_s"))
    out = df["output_len"].to_numpy(np.int64)
    df["ttft_s"] = first - arrival
    df["tpot_s"] = np.where(finished & (out > 1), (finish - first) / np.maximum(out - 1, 1), np.nan)
    df["e2e_s"] = np.where(finished, finish - arrival, np.nan)
    return df


# ---- writing -----------------------------------------------------------------------------------
def _typed(df: pd.DataFrame) -> pd.DataFrame:
    out = {}
    for c in df.columns:
        v = df[c]
        if c in CATEGORY_COLUMNS:
            out[c] = v.astype("category")
        elif c in STRING_COLUMNS:
            out[c] = v.astype(str)
        elif c in FLOAT_COLUMNS or v.dtype.kind == "f":
            out[c] = v.astype(np.float64)
        elif v.dtype.kind in "iub":
            if c not in WIDE_COLUMNS and len(v) and (v.max() > np.iinfo(np.int32).max or v.min() < np.iinfo(np.int32).min):
                raise OverflowError(f"column {c} holds {v.max()}, beyond the int32 the file format gives it")
            out[c] = v.astype(np.int64 if c in WIDE_COLUMNS else np.int32)
        else:
            out[c] = v
    return pd.DataFrame(out, copy=False)


def write_options(schema: pa.Schema) -> dict:
    """zstd; floats byte-stream-split and integers delta-packed (about a third smaller than plain zstd
    on step tables, whose counts change little from one step to the next)."""
    encodings = {}
    for f in schema:
        if pa.types.is_floating(f.type):
            encodings[f.name] = "BYTE_STREAM_SPLIT"
        elif pa.types.is_integer(f.type):
            encodings[f.name] = "DELTA_BINARY_PACKED"
    dictionary = [f.name for f in schema if f.name not in encodings]
    return {"compression": COMPRESSION, "use_dictionary": dictionary, "column_encoding": encodings}


def _table(df: pd.DataFrame, metadata: dict) -> pa.Table:
    table = pa.Table.from_pandas(df, preserve_index=False)
    lists = [i for i, f in enumerate(table.schema) if f.name in LIST_TYPES and f.type != LIST_TYPES[f.name]]
    if lists:  # all-null (nobody preempted) or mixed columns get their declared type
        schema = table.schema
        for i in lists:
            schema = schema.set(i, pa.field(schema.field(i).name, LIST_TYPES[schema.field(i).name]))
        table = table.cast(schema)
    return table.replace_schema_metadata({**(table.schema.metadata or {}), METADATA_KEY: json.dumps(metadata)})


def steps_for_disk(steps: pd.DataFrame, runs: dict) -> tuple[pd.DataFrame, list[str]]:
    """The stored columns (derived ones dropped where the derivation is exact) and the names dropped."""
    derived = [c for c in [f"{c}_frac" for c in CATEGORIES] + ["kv_cache_usage"] if c in steps]
    if derived:
        again = add_derived_step_columns(steps[["run", "blocks_used"] + list(CATEGORIES)].copy(), runs)
        wrong = [c for c in derived if not np.array_equal(again[c].to_numpy(), steps[c].to_numpy(), equal_nan=True)]
        if wrong:
            raise AssertionError(f"step columns {wrong} do not follow from the run geometry {runs}")
    steps = steps.drop(columns=derived)
    dropped = []
    for c in STEP_DERIVED:
        if c in steps:
            value = _derive_step_column(c, steps, runs)
            if value is not None and np.array_equal(steps[c].to_numpy(), value):
                dropped.append(c)
    if "time_s" in steps and "duration_s" in steps:
        t, d = steps["time_s"].to_numpy(np.float64), steps["duration_s"].to_numpy(np.float64)
        segments = _clock_segments(_run_codes(steps)[0], steps.get("replica")) if "run" in steps and len(steps) \
            else _run_segments(steps)
        steps = steps.assign(**{IDLE: np.concatenate([idle_before(t[seg], d[seg], 0.0)
                                                      for seg in segments] or [np.zeros(0)])})
        dropped.append("time_s")
    return _typed(steps.drop(columns=dropped)), dropped


def requests_for_disk(requests: pd.DataFrame) -> pd.DataFrame:
    derived = add_latencies(requests[[c for c in requests.columns if c not in LATENCIES]].copy())
    exact = all(c not in requests or np.array_equal(requests[c].to_numpy(np.float64), derived[c].to_numpy(),
                                                    equal_nan=True) for c in LATENCIES)
    if not exact:
        raise AssertionError("request latencies do not follow from the request times")
    return _typed(requests.drop(columns=[c for c in LATENCIES if c in requests]))


def trace_fingerprint(trace) -> str:
    """sha256 (first 16 hex digits) of the trace's requests, independent of process and PYTHONHASHSEED."""
    df = trace.df
    h = hashlib.sha256()
    for c in df.columns:
        v = df[c]
        h.update(c.encode())
        h.update(pd.util.hash_pandas_object(v.astype(str) if v.dtype == object else v, index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def provenance(config_dict: dict, trace, runs: dict) -> dict:
    return {"schema_version": SCHEMA_VERSION, "git_commit": git_commit(), "trace_fingerprint": trace_fingerprint(trace),
            "config": config_dict, "runs": runs}


def run_geometry(config, results: dict) -> dict:
    """{run name: {num_gpu_blocks (the KV manager's usable blocks), block_size}}, from each result's config
    (else the shared one)."""
    out = {}
    for name, r in results.items():
        cfg = getattr(r, "config", None) or config
        out[name] = {"num_gpu_blocks": int(cfg.usable_gpu_blocks), "block_size": int(cfg.block_size)}
    return out


def write_run_files(out: Path, config, trace, results: dict, summary: dict, steps_written: bool = False) -> None:
    """summary.json (with provenance), steps.parquet and requests.parquet for a set of named runs.

    steps_written: steps.parquet is already there (a StepsWriter streamed it during the runs).
    """
    out.mkdir(parents=True, exist_ok=True)
    runs = run_geometry(config, results)
    meta = provenance(config.to_dict(), trace, runs)
    summary = {**summary, "provenance": {k: v for k, v in meta.items() if k != "config"}}
    (out / "summary.json").write_text(json_text(summary))
    if not steps_written:
        steps = pd.concat([r.steps.assign(run=name) for name, r in results.items()], ignore_index=True)
        steps["run"] = pd.Categorical(steps["run"], categories=list(results))  # every run's name, rows or none
        write_steps(out / "steps.parquet", steps, runs, meta)
    reqs = pd.concat([r.requests.assign(run=name) for name, r in results.items()], ignore_index=True)
    table = _table(requests_for_disk(reqs), meta)
    pq.write_table(table, out / "requests.parquet", **write_options(table.schema))


def write_steps(path: Path, steps: pd.DataFrame, runs: dict, metadata: dict) -> None:
    """A step table with a `run` column as a steps.parquet: the columns that follow exactly from others (and from
    `runs`, the run geometry) are left out and read_steps derives them; `metadata` goes into the file's metadata."""
    steps, dropped = steps_for_disk(steps, runs)
    table = _table(steps, {**metadata, "runs": runs, "derived": dropped})
    pq.write_table(table, path, **write_options(table.schema))


SUMMARY_STEP_COLUMNS = ("duration_s", "num_running", "num_preemptions", "blocks_used", "num_load_blocks", "num_store_blocks") + CATEGORIES


class StepsWriter:
    """steps.parquet written while the runs go: each chunk of steps a Recorder hands over (`sink(name)`) is
    a row group, with the derived columns left out (checked exact, chunk by chunk). The columns the
    run summary needs are kept (`summary_steps(name)`), the rest is only on disk."""

    def __init__(self, path: Path, config, trace, runs: dict):
        self.path, self.runs = Path(path), runs
        self.meta = {**provenance(config.to_dict(), trace, runs), "derived": list(STEP_DERIVED) + ["time_s"]}
        self.prev_end = dict.fromkeys(runs, 0.0)  # end of each run's last written step
        self.categories = list(runs)
        self.writer: pq.ParquetWriter | None = None
        self.kept: dict[str, list[dict[str, np.ndarray]]] = {name: [] for name in runs}
        self.written: dict[str, int] = dict.fromkeys(runs, 0)

    def sink(self, name: str):
        return lambda columns: self.write(name, columns)

    def write(self, name: str, columns: dict[str, np.ndarray]) -> None:
        df = self._frame(name, columns)
        first = self.written[name]
        if not np.array_equal(df["step"].to_numpy(), np.arange(first, first + len(df))):
            raise AssertionError(f"run {name}: steps {first}.. are not numbered in order")
        for c in STEP_DERIVED[1:]:
            if not np.array_equal(df[c].to_numpy(), _derive_step_column(c, df, self.runs)):
                raise AssertionError(f"run {name}: column {c} does not follow from the others")
        self.kept[name].append({c: _narrow_copy(df[c].to_numpy()) for c in SUMMARY_STEP_COLUMNS})
        self._append(name, df)

    def _frame(self, name: str, columns: dict[str, np.ndarray]) -> pd.DataFrame:
        df = pd.DataFrame(columns, copy=False)
        df["run"] = pd.Categorical.from_codes(np.full(len(df), self.categories.index(name), dtype=np.int8),
                                              categories=self.categories)
        return df

    def _append(self, name: str, df: pd.DataFrame) -> None:
        """One row group: the idle time before each step added, the derived columns and time_s left out."""
        first = self.written[name]
        t, d = df["time_s"].to_numpy(np.float64), df["duration_s"].to_numpy(np.float64)
        df[IDLE] = idle_before(t, d, self.prev_end[name])
        if len(df):
            self.prev_end[name] = float(t[-1] + d[-1])
        df = _typed(df.drop(columns=list(STEP_DERIVED) + ["time_s"]))
        table = _table(df, self.meta)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema, **write_options(table.schema))
        self.writer.write_table(table)
        self.written[name] = first + len(df)

    def summary_steps(self, name: str) -> pd.DataFrame:
        """The run's steps with the columns summarize() reads (kv_cache_usage derived)."""
        chunks = self.kept.pop(name)
        cols = {c: np.concatenate([ch[c] for ch in chunks]) if chunks else np.zeros(0, dtype=np.int64)
                for c in SUMMARY_STEP_COLUMNS}
        df = pd.DataFrame(cols, copy=False)
        df["kv_cache_usage"] = df["blocks_used"].to_numpy() / self.runs[name]["num_gpu_blocks"]
        return df

    def close(self) -> None:
        """Finish the file; with no step recorded (every request rejected), a table of no rows, with the schema."""
        if self.writer is None and self.categories:
            from pagesim.recorder import FLOAT_COLUMNS as STEP_FLOATS, STEP_COLUMNS

            name = self.categories[0]
            self._append(name, self._frame(name, {c: np.zeros(0, dtype=np.float64 if c in STEP_FLOATS else np.int64)
                                                  for c in STEP_COLUMNS}))
        if self.writer is not None:
            self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
            return
        # The runs stopped (an error, Ctrl-C): a part of a step table is not a result; take it away.
        if self.writer is not None:
            self.writer.close()
        self.path.unlink(missing_ok=True)


def _narrow_copy(v: np.ndarray) -> np.ndarray:
    if v.dtype.kind in "iu" and (not len(v) or (v.min() >= np.iinfo(np.int32).min and v.max() <= np.iinfo(np.int32).max)):
        return v.astype(np.int32)
    return v.copy()


# ---- reading -----------------------------------------------------------------------------------
def parquet_metadata(path: Path) -> dict:
    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[METADATA_KEY]) if METADATA_KEY in meta else {}


def read_steps(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A steps.parquet with every column the simulator produces (derived ones computed here), or only `columns`
    (then only the stored columns they need are read, and only those derived).

    Files written before schema 2 (every column stored) are returned as they are. Reading a large
    table is mostly filling fresh memory, so the reader makes as few bytes as it can: a column
    that the row-group statistics say is 0 everywhere is not decoded (calloc'd zeros, pages never
    touched), a column stored in one piece goes to the frame without a copy, derived counts are
    int32 when they fit, and each derived column is written once, into Arrow's pool (`_empty`).
    """
    path = Path(path)
    meta = parquet_metadata(path)
    if not meta:
        df = pq.read_table(path, columns=columns).to_pandas()
        return df if columns is None else df[list(columns)]
    runs = meta["runs"]
    derived = set(meta.get("derived", [])) | {f"{c}_frac" for c in CATEGORIES} | {"kv_cache_usage"}
    wanted = None
    if columns is not None:
        need = {c for c in columns if c not in derived} | {"run"}
        for c in columns:
            need.update(_DERIVED_FROM.get(c, ()))
        if IDLE in need:  # a multi-replica run's times restart at each replica's first step
            need.add("replica")
        wanted = list(columns)
    pf = pq.ParquetFile(path)
    zero = _zero_columns(pf.metadata)
    names_stored = [c for c in pf.schema_arrow.names if columns is None or c in need]
    table = pf.read(columns=[c for c in names_stored if c not in zero])
    cols: dict[str, object] = {}
    for name in names_stored:
        if name in zero:  # 0 in every row: calloc'd zeros, whose pages are never touched unless written
            cols[name] = np.zeros(pf.metadata.num_rows, dtype=pf.schema_arrow.field(name).type.to_pandas_dtype())
            continue
        col = table.column(name)
        cols[name] = col.to_pandas() if pa.types.is_dictionary(col.type) else _to_numpy(col)
    del table
    if "run" not in cols or not runs:
        raise ValueError("steps without run geometry")
    run = cols["run"]
    codes, names = run.cat.codes.to_numpy(), [str(c) for c in run.cat.categories]
    segments = _run_segments_of(codes)
    seg_geometry = [(seg, runs[names[codes[seg.start]]]) for seg in segments if seg.stop > seg.start]
    n = len(codes)
    want = (lambda c: True) if wanted is None else (lambda c: c in wanted)  # noqa: E731
    if IDLE in cols:
        idle = cols.pop(IDLE)
        if want("time_s"):
            cols["time_s"] = _times_of_segments(idle, cols["duration_s"], _clock_segments(codes, cols.get("replica")))
    small = max((g["num_gpu_blocks"] * g["block_size"] for g in runs.values()), default=0) < 2**31
    itype = np.int32 if small else np.int64

    def per_run(fill, dtype) -> np.ndarray:
        out = _empty(n, dtype)
        for seg, g in seg_geometry:  # the geometry as numpy scalars of itype: a cache of 2**31 slots or more
            # computes in int64 (a Python int would be cast to the int32 columns' type, and overflow)
            fill(out[seg], seg, itype(g["num_gpu_blocks"]), itype(g["block_size"]))
        return out

    for c in meta.get("derived", []):
        if not (want(c) or want(f"{c}_frac")) or c == "time_s":
            continue
        if c == "step" and len(segments) != len(np.unique(codes)):  # a run split in pieces: count the general way
            cols[c] = pd.Series(codes).groupby(codes, sort=False).cumcount().to_numpy()
        elif c == "step":
            cols[c] = _empty(n, np.int32 if n < 2**31 else np.int64)
            for seg in segments:
                cols[c][seg] = np.arange(seg.stop - seg.start)
        elif c == "blocks_free":
            def fill(o, seg, blocks, bs):
                np.subtract(blocks, cols["blocks_used"][seg], out=o)
                o -= cols["blocks_cached"][seg]
            cols[c] = per_run(fill, itype)
        elif c == "cached":
            cols[c] = np.zeros(n, dtype=itype) if "blocks_cached" in zero else \
                per_run(lambda o, seg, blocks, bs: np.multiply(cols["blocks_cached"][seg], bs, out=o), itype)
        elif c == "free":
            def fill(o, seg, blocks, bs):
                np.subtract(blocks * bs, cols["used"][seg], out=o)
                for x in ("reserved", "internal_fragmentation", "external_fragmentation"):
                    o -= cols[x][seg]
                o -= cols["cached"][seg] if "cached" in cols else cols["blocks_cached"][seg] * bs
            cols[c] = per_run(fill, itype)
    for c in CATEGORIES:
        if want(f"{c}_frac") and (c in zero or (c == "cached" and "blocks_cached" in zero)):
            cols[f"{c}_frac"] = np.zeros(n)
        elif want(f"{c}_frac"):
            cols[f"{c}_frac"] = per_run(lambda o, seg, blocks, bs, c=c: np.divide(cols[c][seg], blocks * bs, out=o),
                                        np.float64)
    if want("kv_cache_usage"):
        cols["kv_cache_usage"] = per_run(lambda o, seg, blocks, bs: np.divide(cols["blocks_used"][seg], blocks, out=o),
                                         np.float64)
    if wanted is not None:
        names_out = wanted
    else:
        order = _step_order()
        names_out = [c for c in order if c in cols] + [c for c in cols if c not in order]
    return pd.DataFrame({c: cols[c] for c in names_out}, copy=False)


# Stored columns each derived column is computed from (besides `run`).
_DERIVED_FROM = {"time_s": (IDLE, "duration_s"), "blocks_free": ("blocks_used", "blocks_cached"),
                 "cached": ("blocks_cached",), "free": CATEGORIES[:4] + ("blocks_cached",),
                 "kv_cache_usage": ("blocks_used",)}
_DERIVED_FROM |= {f"{c}_frac": _DERIVED_FROM.get(c, (c,)) for c in CATEGORIES}


def _zero_columns(meta: pq.FileMetaData) -> set[str]:
    """Integer columns whose statistics say 0 in every row group (no swaps, no prefix caching, ...)."""
    out = set()
    for j in range(meta.num_columns):
        chunks = [meta.row_group(r).column(j) for r in range(meta.num_row_groups)]
        if chunks and chunks[0].physical_type in ("INT32", "INT64") and all(
                (st := ch.statistics) is not None and st.has_min_max and st.min == 0 and st.max == 0
                and st.null_count == 0 for ch in chunks):
            out.add(chunks[0].path_in_schema)
    return out


def _to_numpy(col: pa.ChunkedArray) -> np.ndarray:
    """A column as numpy: without a copy when it is one chunk, else one concatenation."""
    arr = col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)
    return arr.to_numpy(zero_copy_only=False)


def _times_of_segments(idle: np.ndarray, duration: np.ndarray, segments: list[slice], block: int = 1 << 16) -> np.ndarray:
    """time_s of every run's steps from the idle gaps, into one array: `times_from_idle` a block of steps at a
    time, each block's first start added to the end of the block before it (the same additions in the same
    order), so the interleaved buffer stays small."""
    out = _empty(len(idle), np.float64)
    for seg in segments:
        end = 0.0
        for a in range(seg.start, seg.stop, block):
            b = min(a + block, seg.stop)
            t = times_from_idle(idle[a:b], duration[a:b], end)
            out[a:b] = t
            end = float(t[-1] + duration[b - 1])
    return out


def _empty(n: int, dtype) -> np.ndarray:
    """An uninitialised column in Arrow's memory pool, like the columns read from the file (numpy's own
    allocations of this size ask for transparent huge pages, whose first touch costs 2-4x more on the VMs
    measured here: bench/sim_speed.py's read of steps.parquet)."""
    dtype = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(n * dtype.itemsize), dtype=dtype)


def _run_segments_of(codes: np.ndarray) -> list[slice]:
    """Row ranges of constant run code (each run's rows, when runs are stored one after the other)."""
    if not len(codes):
        return [slice(0, 0)]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    return [slice(int(a), int(b)) for a, b in zip(starts, ends)]


def _step_order() -> tuple[str, ...]:
    from pagesim.recorder import STEP_COLUMNS

    return STEP_COLUMNS + tuple(f"{c}_frac" for c in CATEGORIES) + ("kv_cache_usage",)


def read_requests(path: str | Path) -> pd.DataFrame:
    """Requests of a run: requests.parquet, or (older runs) requests.csv with ids and text as strings."""
    path = Path(path)
    if path.suffix == ".csv" or (not path.exists() and path.with_suffix(".csv").exists()):
        df = pd.read_csv(path.with_suffix(".csv"), dtype={c: str for c in STRING_COLUMNS + CATEGORY_COLUMNS},
                         keep_default_na=False, na_values={c: [""] for c in _CSV_NUMERIC})
        return df
    df = pd.read_parquet(path)
    for c in ("state", "reason"):
        if c in df:
            df[c] = df[c].astype(str)
    for c in LIST_TYPES:
        if c in df:  # numpy arrays back to the lists the recorder makes (only the preempted requests have one)
            v = df[c].to_numpy(dtype=object, copy=True)
            for i in np.flatnonzero(pd.notna(v)):
                v[i] = v[i].tolist()
            df[c] = v
    df = add_latencies(df)
    from pagesim.recorder import REQUEST_COLUMNS

    order = [c for c in REQUEST_COLUMNS if c in df] + [c for c in df.columns if c not in REQUEST_COLUMNS]
    return df[order]


_CSV_NUMERIC = ("arrival_time_s", "first_scheduled_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s")


def _present(run_dir: str | Path, *names: str) -> Path:
    """DIR/the first of `names` that exists (the first when none does)."""
    d = Path(run_dir)
    return next((d / name for name in names if (d / name).exists()), d / names[0])


def requests_path(run_dir: str | Path, stem: str = "requests") -> Path:
    """DIR/requests.parquet, or DIR/requests.csv for runs written before schema 2."""
    return _present(run_dir, f"{stem}.parquet", f"{stem}.csv")


def arrivals_path(run_dir: str | Path) -> Path:
    """A live run's released arrivals: DIR/arrivals.jsonl as `live` writes it, or DIR/arrivals.jsonl.gz as
    committed runs store it (load_trace reads either)."""
    return _present(run_dir, "arrivals.jsonl", "arrivals.jsonl.gz")


def read_run(run_dir: str | Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(summary, steps, requests) of a run directory written by `replay` or `live`."""
    d = Path(run_dir)
    return json.loads((d / "summary.json").read_text()), read_steps(d / "steps.parquet"), \
        read_requests(requests_path(d))
