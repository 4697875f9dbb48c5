"""`python -m pagesim validate DIR`: how accurately the simulator predicts a live GPU run (CPU is enough).

Three levels, each written to DIR/validation/validation.json (or --out) and printed. The cost model
is the profile the run recorded (DIR/profile.json) unless --cost-model names another; a run that
recorded none needs --cost-model (never a silent fallback to the roofline). Existing validation
files are never overwritten without --force.

- step level: the cost model's prediction for every recorded live step (its
  features as the scheduler planned it) against the measured duration: MAPE and
  p90 absolute percentage error. Feature columns a run was recorded without
  (max_decode_context, added after the first H200 runs) are taken from the
  lockstep replay's plans, which are the live run's plans (checked step by step);
- decisions, in lockstep mode: the scheduler re-run with each request released
  at the step where the live run released it; per step, the batch, the block
  usage, the memory categories, the preemptions and the recorded step features
  are compared with the live run, and the steps that differ are counted (the
  scheduler is deterministic, so any difference is a bug or a config mismatch);
- request level: a free-running simulation (arrivals at the trace's times,
  step times from the cost model) against the live run: TTFT, TPOT and
  end-to-end latency p50/p90/p99, makespan, throughput and preemptions, each
  as live, simulated and relative error; with --replicate DIR2 (another
  recording of the same window) also the second recording's figures and how
  far the two lie apart, against which each simulation error is marked. Also the
  level sensitivity (free simulations at levels within 1% of the model's: which
  percentiles timing moves across their whole target) and, with --ensemble N,
  jittered free simulations and the prediction the live-mode targets judge: the
  free simulation's figures, the ensemble's median for the timing-sensitive ones.

Step level is also reported by step kind (graph decode, graph mixed, mixed, prefill, swap), with the ten worst
steps and their features. Request level adds inter-token latency (ITL) percentiles.

Also writes validation_steps.parquet (measured vs predicted per step and its kind, with the features only the
lockstep replay gives; read it with read_validation_steps, which joins the run's own columns back by step),
sim_steps.parquet (written as a run's steps.parquet: read it with results.read_steps) and sim_requests.csv
(the free-running simulation).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
from pyarrow import ArrowException

from pagesim.accounting import CATEGORIES
from pagesim.config import Config
from pagesim.cost import make_cost_model
from pagesim.cost.features import StepFeatures, steps_since_prefill
from pagesim.cost.governor import Throttle
from pagesim.cost.jitter import JitteredCostModel, ScaledCostModel, check_sigma
from pagesim.cost.host_share import HOST_COLUMNS, decode_host_shares, run_decode_split
from pagesim.cost.graphs import runs_decode_graph, runs_mixed_graph
from pagesim.cost.profile import OPTIONAL_COLUMNS, calibration_rows_beside
from pagesim.errors import UserError
from pagesim.live_targets import PERCENTILES as TARGET_PERCENTILES
from pagesim.run_warnings import emit, profile_warnings
from pagesim.loop import Arrivals, Hooks, VirtualClock, drive
from pagesim.loop import run as run_loop
from pagesim.metrics import percentiles, summarize_run
from pagesim.outputs import json_text
from pagesim.options import non_negative_int
from pagesim.outputs import git_commit, prepare_output_dir
from pagesim.progress import counted
from pagesim.recorder import FEATURE_COLUMNS
from pagesim.request import requests_from_trace
from pagesim.results import SCHEMA_VERSION, arrivals_path, read_requests, read_steps, requests_path, run_geometry, write_steps
from pagesim.scheduler import Scheduler

REQUEST_METRICS = [(f"{m}_{p}", m, p) for m in ("ttft_s", "tpot_s", "e2e_s") for p in ("p50", "p90", "p99")]
PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}
VALIDATION_FILES = ("validation.json", "validation_steps.parquet", "sim_steps.parquet", "sim_requests.csv")
RUN_FILES = ("summary.json", "steps.parquet", "requests.parquet", "releases.csv", "batches.parquet", "arrivals.jsonl")
# Files a run may hold in another form: requests.csv (runs before schema 2), arrivals.jsonl.gz (committed runs).
ALTERNATIVES = {"requests.parquet": requests_path, "arrivals.jsonl": arrivals_path}


def load_run(run_dir: str | Path, flag: str = "") -> dict:
    """A live run's files; `flag` (e.g. '--replicate') names the option the directory came from in errors."""
    d = Path(run_dir)
    where = f"{flag} {d}" if flag else str(d)
    if not d.is_dir():
        what = "is a file, not a directory" if d.exists() else "no such directory"
        raise UserError(f"{where}: {what}; expected a live run directory (the output of `python -m pagesim live`)")
    missing = [f for f in RUN_FILES if not (ALTERNATIVES[f](d) if f in ALTERNATIVES else d / f).exists()]
    if missing:
        raise UserError(f"{where}: not a live run directory (missing {', '.join(missing)}); "
                        "expected the output of `python -m pagesim live`")
    summary = read_run_file(d / "summary.json", where, read_json)
    summary = summary if isinstance(summary, dict) else {}  # a JSON list or number holds no run either
    runs = summary.get("runs")
    if not (isinstance(summary.get("config"), dict) and isinstance(runs, dict) and isinstance(runs.get("live"), dict)):
        raise UserError(f"{where}: summary.json holds no live run (expected its config and runs.live); expected the "
                        "output of `python -m pagesim live`")
    try:
        config = Config.from_dict(summary["config"])
    except UserError as exc:
        raise UserError(f"{where}: summary.json's config: {exc}") from None
    run = {
        "dir": d,
        "summary": summary,
        "config": config,
        "steps": read_run_file(d / "steps.parquet", where, read_steps),
        "requests": read_run_file(requests_path(d), where, read_requests),
        "releases": read_run_file(d / "releases.csv", where, lambda p: pd.read_csv(p, dtype={"request_id": str})),
        "batches": read_run_file(d / "batches.parquet", where, lambda p: pd.read_parquet(p).fillna("")),
    }
    files = {"steps": "steps.parquet", "requests": requests_path(d).name, "releases": "releases.csv",
             "batches": "batches.parquet"}
    for name, columns in RUN_COLUMNS.items():
        check_columns(where, files[name], run[name], columns)
    from pagesim.traces import load_trace

    run["trace"] = load_trace(arrivals_path(d))  # its errors name the file and line
    check_releases(where, run["releases"], run["trace"].df["request_id"], arrivals_path(d).name)
    check_steps(where, run, files["requests"])
    return run


def check_steps(where: str, run: dict, requests_file: str) -> None:
    """A UserError naming the run and the files when they do not hold one run's records: a step of steps.parquet
    without its batch in batches.parquet, a request released before no recorded step though it finished, or a request
    of the arrivals that requests.parquet lacks (its figures would be of the rest, silently)."""
    steps = run["steps"]["step"]
    batches = run["batches"]["step"]
    unbatched = steps[~steps.isin(batches)]
    if len(unbatched):
        raise UserError(f"{where}: batches.parquet has no row for step {int(unbatched.iloc[0])} of steps.parquet "
                        f"({len(unbatched)} of its {len(steps)} steps lack one); expected the files `python -m "
                        "pagesim live` writes, from one run")
    req = run["requests"]
    own = req[req["parent_id"] == ""]
    ids = run["trace"].df["request_id"]
    unrecorded = ids[~ids.isin(own["request_id"])]
    if len(unrecorded):
        raise UserError(f"{where}: {requests_file} has no row for request {unrecorded.iloc[0]!r} of the arrivals "
                        f"({len(unrecorded)} of their {len(ids)} requests lack one); expected the files `python -m "
                        "pagesim live` writes, from one run")
    finished = own.loc[own["state"] == "finished", "request_id"]
    release = run["releases"].set_index("request_id")["release_step"].reindex(finished)
    stray = release[~release.isin(steps)]
    if len(stray):
        raise UserError(f"{where}: releases.csv, the row of request {stray.index[0]!r}, field 'release_step': expected "
                        f"a step of steps.parquet (it finished), got {stray.iloc[0]:g}; steps.parquet's steps run "
                        f"{int(steps.min())}-{int(steps.max())}; expected the files `python -m pagesim live` writes, "
                        "from one run")


def check_releases(where: str, releases: pd.DataFrame, trace_ids: pd.Series, arrivals: str) -> None:
    """A UserError naming the run, releases.csv, the request and the field, for a release time or step that is not a
    number of at least 0 (a step: whole), a request released twice, a request of the arrivals file (`trace_ids`)
    never released or a released one the arrivals file lacks: validate looks each request's release up."""
    ids = releases["request_id"]
    for column, whole in (("arrival_time_s", False), ("released_s", False), ("release_step", True)):
        values = pd.to_numeric(releases[column], errors="coerce").to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(values) & (values >= 0) & ((values == np.floor(values)) if whole else True)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            kind = "a step number (a whole number of at least 0)" if whole else "a number of seconds of at least 0"
            got = releases[column].iloc[i]
            got = "an empty cell" if pd.isna(got) else repr(got) if isinstance(got, str) else f"{got:g}"
            raise UserError(f"{where}: releases.csv, the row of request {ids.iloc[i]!r}, field '{column}': expected "
                            f"{kind}, got {got}; expected the files `python -m pagesim live` writes")
    twice = ids[ids.duplicated()]
    if len(twice):
        raise UserError(f"{where}: releases.csv has two rows for request {twice.iloc[0]!r}; expected one row per "
                        "request, as `python -m pagesim live` writes it")
    unreleased = trace_ids[~trace_ids.isin(ids)]
    if len(unreleased):
        raise UserError(f"{where}: releases.csv has no row for request {unreleased.iloc[0]!r} of {arrivals} "
                        f"({len(unreleased)} of its {len(trace_ids)} requests lack one); expected the files "
                        "`python -m pagesim live` writes, from one run")
    unknown = ids[~ids.isin(trace_ids)]
    if len(unknown):
        raise UserError(f"{where}: {arrivals} lacks request {unknown.iloc[0]!r} of releases.csv ({len(unknown)} of "
                        f"its {len(ids)} released requests are not in it); expected the files `python -m pagesim "
                        "live` writes, from one run")


def check_columns(where: str, file: str, frame: pd.DataFrame, columns, writer: str = "live") -> None:
    """A UserError naming the run and the file when `frame` (read from `file`, which `python -m pagesim WRITER`
    writes) lacks some of `columns`."""
    lacks = [c for c in columns if c not in frame]
    if lacks:
        raise UserError(f"{where}: {file} lacks the column{'s' if len(lacks) > 1 else ''} {', '.join(lacks)}; "
                        f"expected the files `python -m pagesim {writer}` writes")


# The columns validate reads of each run file (the step features a run lacks are filled in from the lockstep replay).
RUN_COLUMNS = {"steps": ("step", "time_s", "duration_s", "num_prefill_tokens", "num_decode_seqs", "num_preemptions",
                         "blocks_used", "num_running", *CATEGORIES),
               "requests": ("request_id", "parent_id", "state", "arrival_time_s", "first_token_s", "finish_s",
                            "output_len"),
               "releases": ("request_id", "arrival_time_s", "released_s", "release_step"),
               "batches": ("step", "scheduled", "preempted")}


def read_json(path: Path):
    """A JSON file's value (for read_run_file)."""
    return json.loads(path.read_text())


def read_run_file(path: Path, where: str, reader, writer: str = "live", advice: str = ""):
    """reader(path), or a UserError naming the run and the file that cannot be read (damaged, cut short, empty) and
    the command that writes it (`writer`: live, or validate for the files under validation/), then `advice`."""
    try:
        return reader(path)
    except UserError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, ArrowException) as exc:  # damaged, cut short, empty
        problem = " ".join(str(exc).split())[:100] or type(exc).__name__
        raise UserError(f"{where}: cannot read {path.name} ({problem}); expected the files `python -m pagesim {writer}` "
                        f"writes{advice}") from None


def _requests(run: dict, released_times: bool = False):
    """The live run's requests, fresh, in trace order, with the trace's (or the released) arrival times."""
    reqs = requests_from_trace(run["trace"])  # load_run read and checked it
    rel = run["releases"].set_index("request_id")
    col = "released_s" if released_times else "arrival_time_s"
    for r in reqs:
        r.arrival_time = float(rel.at[r.request_id, col])
    return reqs


# What the cost model sees of a step: the recorded FEATURE_COLUMNS, and the reads of shared blocks and the prefill
# programs' walks, which are never recorded (StepFeatures) and come from the lockstep replay's plans.
STEP_FEATURES = FEATURE_COLUMNS + OPTIONAL_COLUMNS
# validation_steps.parquet stores these and the STEP_FEATURES the run's steps.parquet lacks; time_s and the other
# features are the run's own (read_validation_steps joins them back by step), ape follows from the two times.
VALIDATION_STEP_STORED = ("step", "kind", "measured_s", "predicted_s")
VALIDATION_STEP_COLUMNS = ("step", "time_s", *STEP_FEATURES, "measured_s", "predicted_s", "ape", "kind")


def write_validation_steps(path: Path, table: pd.DataFrame, run_columns) -> None:
    """step_level's table without what the run's steps.parquet (columns `run_columns`) already holds."""
    keep = list(VALIDATION_STEP_STORED) + [c for c in STEP_FEATURES if c not in set(run_columns) and c in table]
    table[keep].to_parquet(path, index=False, compression="zstd")


def read_validation_steps(path: str | Path, run_steps: pd.DataFrame) -> pd.DataFrame:
    """A validation_steps.parquet as step_level made it (VALIDATION_STEP_COLUMNS): the stored columns, then time_s
    and the features from the run's own steps (`run_steps`, its steps.parquet as read_steps reads it, which the
    caller holds already) by step, and ape. Files written whole (before round 14) are returned as they are."""
    v = pd.read_parquet(path)
    if "time_s" in v:
        return v
    joined = [c for c in ("time_s", *STEP_FEATURES) if c not in v and c in run_steps]
    v = v.merge(run_steps[["step", *joined]], on="step", how="left", validate="one_to_one")
    if v["time_s"].isna().any():
        raise UserError(f"{path}: step {int(v.loc[v['time_s'].isna(), 'step'].iloc[0])} is not one of the run's "
                        "steps; expected the validation of that run")
    v["ape"] = np.abs(v["predicted_s"] / v["measured_s"] - 1)
    return v[[c for c in VALIDATION_STEP_COLUMNS if c in v]]  # a validation made before a feature existed lacks it


def with_replayed_features(steps: pd.DataFrame, replayed: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The live steps with the STEP_FEATURES they lack filled in from the lockstep replay's plans."""
    missing = [c for c in STEP_FEATURES if c not in steps]
    if not missing:
        return steps, []
    filled = steps.merge(replayed[["step", *missing]], on="step", how="left", validate="one_to_one")
    if filled[missing].isna().any().any():
        raise UserError(f"steps without a replayed plan; cannot fill in {', '.join(missing)}")
    return filled.astype({c: np.int64 for c in missing}), missing


STEP_KINDS = ("graph decode", "graph mixed", "mixed", "prefill", "swap")


def step_kinds(steps: pd.DataFrame, max_graph_batch: int, max_mixed_graph_tokens: int = 0) -> np.ndarray:
    """How each step ran: swap (blocks moved to or from the CPU), graph mixed (prefill tokens, or decodes
    beyond the largest decode graph, in at most max_mixed_graph_tokens tokens: piecewise CUDA graphs padded
    to a token bucket, with or without decode rows), prefill (prefill tokens only, eager), mixed (prefill
    and decode tokens, eager), graph decode (decode only, at most max_graph_batch sequences: a CUDA
    graph replay); a decode-only step beyond the largest graph and the token buckets is 'eager decode'."""
    swap = (steps["num_swap_out_blocks"] + steps["num_swap_in_blocks"]) > 0
    pre, dec = steps["num_prefill_tokens"] > 0, steps["num_decode_seqs"] > 0
    graph_decode = runs_decode_graph(steps["num_prefill_tokens"], steps["num_decode_seqs"], max_graph_batch)
    graph_mixed = runs_mixed_graph(steps["num_prefill_tokens"], steps["num_decode_seqs"], max_graph_batch,
                                   max_mixed_graph_tokens)
    return np.select([swap, graph_mixed, pre & dec, pre, graph_decode],
                     ["swap", "graph mixed", "mixed", "prefill", "graph decode"], "eager decode")


def step_level(steps: pd.DataFrame, cost_model, max_graph_batch: int = 256,
               max_mixed_graph_tokens: int = 0) -> tuple[dict, pd.DataFrame]:
    worked = ((steps["num_prefill_tokens"] + steps["num_decode_seqs"]) > 0).to_numpy()
    rows = steps[worked]
    # as the scheduler stamped the plans (the steps in order, as a run records them)
    since, last_tokens = (a[worked] for a in steps_since_prefill(steps["step"], steps["num_prefill_tokens"]))
    features = [StepFeatures(**{c: int(v) for c, v in zip(STEP_FEATURES, vals)}, steps_since_prefill=int(k),
                             last_prefill_tokens=int(t))
                for k, t, vals in zip(since, last_tokens, rows[list(STEP_FEATURES)].itertuples(index=False))]
    predicted = np.array([cost_model.step_time(f) for f in features])
    if cost_model.governor is not None:  # as the simulator prices them: at the load of the steps before, in live's time
        throttle = Throttle(cost_model.governor)
        predicted = np.array([throttle.price(start, t, f)
                              for start, t, f in zip(rows["time_s"].tolist(), predicted.tolist(), features)])
    measured = rows["duration_s"].to_numpy(dtype=np.float64)
    ape = np.abs(predicted / measured - 1)
    table = rows[["step", "time_s"] + list(STEP_FEATURES)].assign(measured_s=measured, predicted_s=predicted,
                                                                     ape=ape, kind=step_kinds(rows, max_graph_batch,
                                                                                              max_mixed_graph_tokens))
    by_kind = {}
    for kind, group in table.groupby("kind"):
        by_kind[kind] = {"n_steps": int(len(group)), "mape": float(group["ape"].mean()),
                         "p90_ape": float(np.percentile(group["ape"], 90)),
                         "measured_total_s": float(group["measured_s"].sum()),
                         "predicted_total_s": float(group["predicted_s"].sum())}
    slow = predicted > 0
    worst = table.assign(ratio=np.where(slow, measured / np.where(slow, predicted, 1), np.inf)).nlargest(10, "ape")
    report = {
        "mape": float(ape.mean()) if len(ape) else None,
        "p90_ape": float(np.percentile(ape, 90)) if len(ape) else None,
        "n_steps": int(len(ape)),
        "measured_total_s": float(measured.sum()),
        "predicted_total_s": float(predicted.sum()),
        "by_kind": by_kind,
        "max_measured_over_predicted": float((measured / predicted).max()) if len(ape) and slow.all() else None,
        "n_steps_over_2x_prediction": int((measured > 2 * predicted).sum()),
        "worst_steps": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                        for row in worst.drop(columns=["ratio"]).to_dict("records")],
    }
    return report, table


def clock_report(steps: pd.DataFrame, cost_model) -> dict | None:
    """The SM clock the run's steps ran at (sm_clock_mhz, recorded since round 17) against the clock the profile prices
    steps at (fit.sm_clock): a run held below it, at the power cap, runs slower than predicted by about
    sensitivity x (reference / clock - 1). None for a run without clocks."""
    if "sm_clock_mhz" not in steps:
        return None
    c = steps["sm_clock_mhz"].dropna()
    if c.empty:
        return None
    out = {"run_median_mhz": float(c.median()), "run_p10_mhz": float(c.quantile(0.1))}
    priced = (getattr(cost_model, "fit", None) or {}).get("sm_clock")
    if priced:
        s, ref = float(priced["sensitivity"]), float(priced["reference_mhz"])
        out.update(profile_reference_mhz=ref, profile_sensitivity=s,
                   expected_slowdown_at_median=s * (ref / out["run_median_mhz"] - 1))
    return out


def decode_host_report(step_table: pd.DataFrame, run_steps: pd.DataFrame, spec: str, cost_model,
                       max_graph_batch: int) -> dict | None:
    """The run's graph decode level (measured / predicted, summed) split into its device part and the host's
    (pagesim.cost.host_share.run_decode_split): the run's share of those steps spent off the device or queueing their
    work against its profile's calibration's, as the fit recorded it (round 48 on) or from the calibration rows saved
    beside the profile (`calibration_source` says which; None for neither, or rows that cannot be read, which the
    source then names), whose graph decode steps are those of at most `max_graph_batch` sequences, as the run's. None
    for a run without device times (the CPU)."""
    calibration = (getattr(cost_model, "fit", None) or {}).get("decode_host")
    source = "the profile's fit" if calibration is not None else None
    rows = calibration_rows_beside(spec) if calibration is None else None  # none beside 'roofline'
    if rows is not None:
        try:
            calibration = decode_host_shares(pd.read_csv(rows, usecols=lambda c: c in HOST_COLUMNS),
                                             max_graph_batch)
            source = str(rows) if calibration is not None else None
        except (OSError, ValueError, EOFError) as e:  # a damaged file beside the profile: the split goes without it
            source = f"unreadable: {rows}: {e}"
    out = run_decode_split(step_table, run_steps, calibration)
    if out is not None:
        out["calibration_source"] = source
    return out


def lockstep(run: dict, prefill_grid: tuple[int, int, int] | None = None) -> tuple[dict, pd.DataFrame]:
    """Re-run the scheduler with the live run's release steps; compare every step's decisions.

    Returns the report and the replayed plans' features (step + STEP_FEATURES, one row per step; prefill_makespan
    with `prefill_grid`, the cost model's, else 0).
    """
    config: Config = run["config"]
    sched = Scheduler(config)
    reqs = _requests(run)
    release_step = run["releases"].set_index("request_id")["release_step"]
    pending = sorted(reqs, key=lambda r: (int(release_step[r.request_id]), r.seq_no))
    steps = run["steps"].set_index("step")
    batches = run["batches"].set_index("step")
    compared = ["blocks_used", "num_running", *CATEGORIES]
    recorded = [c for c in FEATURE_COLUMNS if c in steps.columns]
    features = []
    differing, first = 0, None
    preempt_live = preempt_sim = 0
    replayed = set()
    num_running = 0

    def planned(plan) -> None:
        nonlocal num_running
        f = StepFeatures.from_plan(plan, config.block_size, prefill_grid)
        features.append((plan.step_id, *(getattr(f, c) for c in STEP_FEATURES)))
        num_running = len(sched.running)

    def stepped(plan, duration, outcome) -> None:
        nonlocal differing, first, preempt_live, preempt_sim
        step = plan.step_id
        replayed.add(step)
        preempt_sim += len(plan.preempted)
        if step not in steps.index:
            diffs = ["extra step"]
        else:
            head = sched.swapped[0] if sched.swapped else (sched.waiting[0] if sched.waiting else None)
            acc = sched.kv.accounting(sched.running, head)
            sim = {"blocks_used": acc.allocated // sched.kv.block_size, "num_running": num_running, **acc.as_dict()}
            live_row = steps.loc[step]
            diffs = [c for c in compared if int(live_row[c]) != int(sim[c])]
            if " ".join(s.request_id for s in plan.scheduled) != batches.at[step, "scheduled"]:
                diffs.append("scheduled")
            if " ".join(plan.preempted) != batches.at[step, "preempted"]:
                diffs.append("preempted")
            f = features[-1]
            if any(int(live_row[c]) != f[1 + FEATURE_COLUMNS.index(c)] for c in recorded):
                diffs.append("features")
        if diffs:
            differing += 1
            if first is None:
                first = {"step": int(step), "fields": diffs}

    # The recorded step durations stand in for the executor (decisions do not depend on them).
    executor = _RecordedDurations(steps["duration_s"])
    arrivals = Arrivals([(int(release_step[r.request_id]), r) for r in pending], by_step=True)
    run_loop(drive(sched, executor, None, arrivals, VirtualClock(), hooks=Hooks(plan=planned, step=stepped)))
    preempt_live = int(steps["num_preemptions"].sum())
    for step in steps.index:
        if step not in replayed:  # the replay ended before the live run did
            differing += 1
            if first is None:
                first = {"step": int(step), "fields": ["missing step"]}
    report = {
        "n_steps_compared": int(len(steps)),
        "n_steps_differing": differing,
        "first_difference": first,
        "preemptions_live": preempt_live,
        "preemptions_sim": preempt_sim,
        "compared": compared + ["scheduled", "preempted", "features"],
    }
    return report, pd.DataFrame(features, columns=["step", *STEP_FEATURES])


def itl_samples(steps: pd.DataFrame) -> np.ndarray:
    """Inter-token latencies: each decode token's gap from its sequence's previous token, which is the
    duration of the step that produced it (a decoding sequence runs in every step until it finishes or
    is preempted); one sample per decoding sequence per step."""
    return np.repeat(steps["duration_s"].to_numpy(dtype=np.float64), steps["num_decode_seqs"].to_numpy(dtype=np.int64))


def _percentile(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if len(x) else None


class _RecordedDurations:
    def __init__(self, durations: pd.Series):
        self.durations = durations

    def execute(self, plan) -> float:
        return float(self.durations.get(plan.step_id, 0.0))


RUN_METRICS = ("makespan_s", "request_throughput", "output_token_throughput", "num_preemptions", "mean_num_running")


def run_metrics(summary: dict, steps: pd.DataFrame) -> dict[str, float | None]:
    """The request-level figures of one run (its summarize_run summary and its step table), by report name."""
    out = {name: summary[metric][p] for name, metric, p in REQUEST_METRICS}
    itl = itl_samples(steps)
    out.update({f"itl_s_{p}": _percentile(itl, q) for p, q in PERCENTILES.items()})
    out.update({key: summary[key] for key in RUN_METRICS})
    return out


def rel_error(value, reference) -> float | None:
    """(value - reference) / reference; None without both, or with a reference of 0."""
    return (value - reference) / reference if reference not in (None, 0) and value is not None else None


TIMED_LOCKSTEP_METRICS = [name for name, _, _ in REQUEST_METRICS] + ["makespan_s"]


def timed_lockstep(run: dict, step_table: pd.DataFrame) -> dict:
    """Request-level figures of the live run's own decisions with the predicted step times: each request's live
    first-token and finish times moved by the predicted minus the measured duration of every step from the one it
    was released before up to that token's step (the steps it waited and ran through; step_level's table, a step
    without tokens keeping its live time). The free simulation's figures (request_level) also carry the schedule's
    divergence: in a preemption-heavy window a small change of step times changes which requests a preemption hits
    and who waits behind it; these carry the step times alone. With the measured times they are live's."""
    steps = run["steps"]
    live_s = steps["duration_s"].to_numpy(dtype=np.float64)
    predicted = steps["step"].map(dict(zip(step_table["step"].tolist(), step_table["predicted_s"].tolist())))
    moved = np.concatenate(([0.0], np.cumsum(predicted.fillna(steps["duration_s"]).to_numpy(np.float64) - live_s)))
    ends = steps["time_s"].to_numpy(dtype=np.float64) + live_s
    position = pd.Series(np.arange(len(steps)), index=steps["step"])
    req = run["requests"]
    done = req[req["state"] == "finished"]
    released = run["releases"].set_index("request_id")["release_step"]
    own = done["parent_id"].where(done["parent_id"] != "", done["request_id"])  # a forked sample: its request's
    start = position.reindex(own.map(released).astype(np.int64)).to_numpy()

    def shifted(times: pd.Series) -> np.ndarray:  # a token's time, moved by the steps up to the one that made it
        t = times.to_numpy(dtype=np.float64)
        at = np.minimum(np.searchsorted(ends, t - 1e-9), len(ends) - 1)  # the step whose end it is
        return t + moved[at + 1] - moved[start]

    first, finish = shifted(done["first_token_s"]), shifted(done["finish_s"])
    arrival = done["arrival_time_s"].to_numpy(dtype=np.float64)
    out_len = done["output_len"].to_numpy()
    latencies = {"ttft_s": first - arrival, "e2e_s": finish - arrival,
                 "tpot_s": np.where(out_len > 1, (finish - first) / np.maximum(out_len - 1, 1), np.nan)}
    replay = {f"{m}_{p}": percentiles(latencies[m])[p] for m in ("ttft_s", "tpot_s", "e2e_s") for p in PERCENTILES}
    replay["makespan_s"] = float(finish.max() - req["arrival_time_s"].min()) if len(done) else None
    live = run_metrics(run["summary"]["runs"]["live"], run["steps"])
    return {k: {"live": live[k], "replay": replay[k], "rel_error": rel_error(replay[k], live[k])}
            for k in TIMED_LOCKSTEP_METRICS}


def live_simulation(run: dict, cost_model, fast_path: bool = True, released_times: bool = False, on_release=None):
    """The free-running simulation of a loaded live run's requests (load_run), not yet run: at their trace arrival
    times or, with `released_times`, when live released them (`on_release`: Simulation's)."""
    from pagesim.simulator import Simulation

    return Simulation(_requests(run, released_times), run["config"], cost_model, fast_path=fast_path,
                      on_release=on_release)


def free_figures(run: dict, cost_model, fast_path: bool = True):
    """The free simulation of the run's requests with `cost_model`: its request-level figures (run_metrics) and its
    result."""
    result = live_simulation(run, cost_model, fast_path=fast_path).run("sim")
    return run_metrics(summarize_run(result), result.steps), result


def request_level(run: dict, cost_model) -> tuple[dict, object]:
    simulated, sim = free_figures(run, cost_model)
    live = run_metrics(run["summary"]["runs"]["live"], run["steps"])
    return {k: {"live": live[k], "sim": simulated[k], "rel_error": rel_error(simulated[k], live[k])} for k in live}, sim


ENSEMBLE_STEP_SIGMA = 0.015  # validate --step-jitter's default (pagesim.cost.jitter; README, round 19)
ENSEMBLE_LEVEL_SIGMA = 0.015  # validate --level-jitter's default
MAX_ENSEMBLE = 1000  # validate --ensemble's ceiling (a free simulation of a committed window takes ~0.5 s)
AUTO_ENSEMBLE = 16  # validate's ensemble when --ensemble is not given and a percentile is timing-sensitive
ENSEMBLE_BAND = (5.0, 95.0)  # the percentiles of the ensemble's figures reported as its band


SENSITIVITY_LEVELS = (0.99, 0.995, 0.9975, 1.0025, 1.005, 1.01)  # request_level_sensitivity's levels beside 1.0


def level_spans(requests_report: dict, by_level: dict[float, dict]) -> dict:
    """request_level_sensitivity's figures from the free simulation's request-level figures at each level
    (`by_level`: level -> run_metrics; the model's own, 1.0, is request_level's `sim` in `requests_report`): per
    figure its error against live at each level and their span in points of the model's own figure (live's figure
    is not needed for it: which figures are timing-sensitive is known before live is compared); `timing_sensitive`
    the percentiles whose span is wider than their target (twice its tolerance, pagesim.live_targets: 10 points for
    p50 and p90, 20 for p99)."""
    levels = sorted({*by_level, 1.0})
    errors, spans = {}, {}
    for name, v in requests_report.items():
        at = [v["sim"] if level == 1.0 else by_level[level][name] for level in levels]
        errs = [rel_error(a, v["live"]) for a in at]
        errors[name] = None if None in errs else errs
        spans[name] = None if None in at or not v["sim"] else 100 * (max(at) - min(at)) / abs(v["sim"])
    sensitive = [n for n, span in spans.items() if span is not None
                 and span > 200 * TARGET_PERCENTILES.get(n.rpartition("_")[2], float("inf"))]
    return {"levels": levels, "errors": errors, "span_points": spans, "timing_sensitive": sensitive}


def request_level_sensitivity(run: dict, cost_model, requests_report: dict, levels=SENSITIVITY_LEVELS) -> dict:
    """How far the free simulation's request-level figures move with the cost model's level within 1% of it: more
    free simulations with every step time times each of `levels` (ScaledCostModel, on the fast path), beside the
    run's own (`requests_report`, request_level's); per figure its error at each level and their span (level_spans).
    A timing-sensitive percentile spans more than its whole target: a model right to 1% can land anywhere in it by
    timing alone (which requests wait behind a preemption, which side of a step boundary a burst of arrivals falls),
    so its deterministic figure is one draw and the ensemble's median the prediction (request_level_prediction). Levels
    between 0.99 and 1.01 as well: a figure can jump and come back inside them (Azure code's TTFT p90, round 38's
    recording: -5.5% at 0.99, +5.2% at 0.995, -8.9% at 0.9975, -1.5% at 1.01; docs/accuracy-history.md, round 40)."""
    by_level = {level: free_figures(run, ScaledCostModel(cost_model, level))[0] for level in levels}
    return level_spans(requests_report, by_level)


def request_level_prediction(requests_report: dict, sensitivity: dict, ensemble: dict) -> dict:
    """The simulator's prediction of each request-level figure: the free simulation's figure (request_level), but for
    the percentiles `sensitivity` names timing-sensitive the ensemble's median (request_level_ensemble): where a
    change of every step time within 1% moves a percentile across its whole target, one deterministic simulation is one
    draw of the schedule and the median of jittered ones is the better prediction (docs/accuracy-history.md, rounds
    19 and 40). Chosen by the simulations alone (the span is in points of the model's own figure), never by which is
    nearer live. Per figure: live's, the prediction, its error and where it comes from."""
    sensitive, medians = set(sensitivity["timing_sensitive"]), ensemble["metrics"]
    out = {}
    for name, v in requests_report.items():
        median = medians.get(name, {}).get("median")
        use_median = name in sensitive and median is not None
        value = median if use_median else v["sim"]
        out[name] = {"live": v["live"], "predicted": value, "rel_error": rel_error(value, v["live"]),
                     "from": "ensemble median" if use_median else "free simulation"}
    return out


def request_level_ensemble(run: dict, cost_model, n: int, step_sigma: float = ENSEMBLE_STEP_SIGMA,
                           level_sigma: float = ENSEMBLE_LEVEL_SIGMA, seed: int = 0) -> dict:
    """n free simulations of the run with jittered step times (JitteredCostModel, seeds seed..seed+n-1, step by
    step): per request-level figure, the median of the n, the band between ENSEMBLE_BAND's percentiles, the
    median's error against live and whether live's figure lies in the band. A deterministic simulation is one draw
    of a timing-sensitive schedule; the median is the ensemble's prediction and the band its spread."""
    live = run_metrics(run["summary"]["runs"]["live"], run["steps"])
    draws = []
    for i in counted(range(n), n, "ensemble", "sim"):
        draws.append(free_figures(run, JitteredCostModel(cost_model, seed + i, step_sigma, level_sigma),
                                  fast_path=False)[0])
    metrics = {}
    for name, value in live.items():
        values = np.array([d[name] for d in draws if d[name] is not None], dtype=np.float64)
        if not len(values):
            metrics[name] = {"live": value, "median": None, "low": None, "high": None, "rel_error": None,
                             "live_in_band": None}
            continue
        median = float(np.median(values))
        low, high = (float(v) for v in np.percentile(values, ENSEMBLE_BAND))
        metrics[name] = {"live": value, "median": median, "low": low, "high": high,
                         "rel_error": rel_error(median, value),
                         "live_in_band": None if value is None else bool(low <= value <= high)}
    return {"n": n, "step_sigma": step_sigma, "level_sigma": level_sigma, "seed": seed,
            "band_percentiles": list(ENSEMBLE_BAND), "metrics": metrics}


def check_same_window(run: dict, other: dict) -> None:
    """Refuse a replicate that is not a recording of the same requests under the same configuration."""
    differ = [f.name for f in dataclasses.fields(Config)
              if getattr(run["config"], f.name) != getattr(other["config"], f.name)]
    mine, theirs = (r["releases"][["request_id", "arrival_time_s"]].sort_values("request_id").to_numpy().tolist()
                    for r in (run, other))
    if mine != theirs:
        differ.append("the requests or their arrival times (releases.csv)")
    if differ:
        raise UserError(f"--replicate {other['dir']}: not a recording of the same window as {run['dir']} "
                        f"(differs in {', '.join(differ)}); expected a live run of the same trace window and options")


def live_repeatability(run: dict, other: dict, requests_report: dict) -> dict:
    """The replicate's live figures beside the run's: how far two recordings of one window lie apart, and whether
    each simulation error is within that distance (an error no larger than it cannot be told from the engine's own
    run-to-run spread)."""
    theirs = run_metrics(other["summary"]["runs"]["live"], other["steps"])
    out = {}
    for name, v in requests_report.items():
        spread = rel_error(theirs[name], v["live"])
        out[name] = {"live": v["live"], "replicate_live": theirs[name], "live_rel_diff": spread,
                     "sim_rel_error": v["rel_error"],
                     "sim_within_live_spread": None if spread is None or v["rel_error"] is None
                     else abs(v["rel_error"]) <= abs(spread)}
    return {"replicate": str(other["dir"]), "metrics": out}


def default_cost_model(run: dict) -> str:
    """The profile the live run recorded (DIR/profile.json, from `live --calibrate` or `--profile`)."""
    recorded = run["summary"].get("profile")
    if recorded and (run["dir"] / recorded["path"]).is_file():
        return str(run["dir"] / recorded["path"])
    raise UserError(f"{run['dir']}: the run recorded no profile (it was made without `live --calibrate` or "
                    "`--profile`); pass --cost-model PROFILE.json, or --cost-model roofline to use the analytic model")


def prefill_kernel_warnings(run: dict, cost) -> list[str]:
    """The prefill kernel the profile was calibrated with (its describe()'s `prefill_kernel`) against the one the run's
    prefills ran (executors and profiles record it since round 29): a profile timed on another kernel prices the run's
    prefill and mixed steps for that kernel. Nothing to say for a run without the record, or for a cost model that is
    not a measured profile."""
    ran = (run["summary"].get("executor") or {}).get("prefill_kernel")
    described = cost.describe()
    if ran is None or described.get("kind") != "profile":
        return []
    timed, source = described.get("prefill_kernel"), described.get("source")
    if timed == ran:
        return []
    recalibrate = ("calibrate on this engine (`python -m pagesim calibrate`, or record with `live --calibrate`) for "
                   "step times of its own kernels")
    if timed is None:
        return [f"profile {source} does not record which prefill kernel it timed (calibrated before round 29; rounds "
                f"before 28 ran the Triton kernel, _prefill_kernel, on every GPU), and this run's prefills ran {ran}: if "
                f"they differ, its prefill and mixed steps are priced for the other kernel; {recalibrate}"]
    return [f"profile {source} was calibrated with prefill kernel {timed}, and this run's prefills ran {ran}: its "
            f"prefill and mixed steps are priced for the other kernel; {recalibrate}"]


def validate(run_dir: str | Path, cost_model_spec: str | None = None, out: str | Path | None = None,
             force: bool = False, replicate: str | Path | None = None, ensemble: int | None = None,
             step_sigma: float | None = None, level_sigma: float | None = None) -> dict:
    """Validate a live run; files go to `out` (default DIR/validation/), which must not already hold a
    validation unless `force`. `replicate`: another live recording of the same window, whose request-level
    figures are reported beside the run's (live_repeatability). `ensemble`: that many jittered free simulations
    (request_level_ensemble, with `step_sigma` and `level_sigma`, ENSEMBLE_*_SIGMA when None); 0 for none; None
    (the default) for AUTO_ENSEMBLE of them when a percentile is timing-sensitive or a sigma is given, else none: the
    prediction the live-mode targets judge needs the ensemble's median for the timing-sensitive percentiles."""
    if ensemble is not None and (isinstance(ensemble, bool) or not isinstance(ensemble, int) or ensemble == 1
                                 or ensemble < 0 or ensemble > MAX_ENSEMBLE):
        raise UserError(f"--ensemble {ensemble!r}: expected 0 (none) or a whole number of simulations from 2 (a band "
                        f"needs two) to {MAX_ENSEMBLE:,}")
    sigma_given = step_sigma is not None or level_sigma is not None
    if ensemble == 0 and sigma_given:
        given = [f for f, v in (("--step-jitter", step_sigma), ("--level-jitter", level_sigma)) if v is not None]
        raise UserError(f"{' and '.join(given)} {'shape' if len(given) > 1 else 'shapes'} the ensemble's simulations, "
                        "and --ensemble 0 asks for none: drop it or give N >= 2")
    step_sigma = check_sigma(ENSEMBLE_STEP_SIGMA if step_sigma is None else step_sigma, "--step-jitter")
    level_sigma = check_sigma(ENSEMBLE_LEVEL_SIGMA if level_sigma is None else level_sigma, "--level-jitter")
    run = load_run(run_dir)
    other = load_run(replicate, "--replicate") if replicate is not None else None
    if other is not None:
        if Path(other["dir"]).resolve() == Path(run["dir"]).resolve():
            raise UserError(f"--replicate {replicate}: is the run itself; expected another live recording of the "
                            "same window (their distance is the engine's run-to-run spread)")
        check_same_window(run, other)
    spec = cost_model_spec or default_cost_model(run)
    cost = make_cost_model(spec, run["config"])
    out_dir = prepare_output_dir(out if out is not None else run["dir"] / "validation", force)
    decisions, replayed = lockstep(run, cost.prefill_grid)
    steps, filled = with_replayed_features(run["steps"], replayed)
    max_graph = max(getattr(cost, "graph_batch_sizes", ()) or (run["config"].max_num_seqs,))
    # the token buckets the live engine replayed mixed steps at (its summary's executor record; none before it had them)
    mixed_sizes = (run["summary"].get("executor") or {}).get("mixed_graph_token_sizes") or [0]
    steps_report, step_table = step_level(steps, cost, max_graph, max(mixed_sizes))
    steps_report["features_from_replay"] = filled
    clock = clock_report(run["steps"], cost)
    if clock is not None:
        steps_report["sm_clock"] = clock
    host = decode_host_report(step_table, run["steps"], spec, cost, max_graph)
    if host is not None:
        steps_report["decode_host"] = host
    requests_report, sim = request_level(run, cost)
    timed = timed_lockstep(run, step_table)
    report = {
        "run": str(run_dir),
        "cost_model": cost.describe(),
        "cost_model_path": spec,
        "warnings": prefill_kernel_warnings(run, cost) + profile_warnings(run["config"], cost, "profile"),
        "step_level": steps_report,
        "decisions": decisions,
        "request_level": requests_report,
        "request_level_timed_lockstep": timed,
        "request_level_sensitivity": request_level_sensitivity(run, cost, requests_report),
        "warm": {k: run["summary"]["runs"]["live"].get(k) for k in (
            "warmup_s", "compilations_during_run", "graph_captures_during_run", "gc_collections_during_run")},
    }
    if ensemble is None:  # the prediction of a timing-sensitive percentile is the ensemble's median
        ensemble = AUTO_ENSEMBLE if report["request_level_sensitivity"]["timing_sensitive"] or sigma_given else 0
    if ensemble:
        report["request_level_ensemble"] = request_level_ensemble(run, cost, ensemble, step_sigma, level_sigma)
        report["request_level_prediction"] = request_level_prediction(
            requests_report, report["request_level_sensitivity"], report["request_level_ensemble"])
    if other is not None:
        report["live_repeatability"] = live_repeatability(run, other, requests_report)
    (out_dir / "validation.json").write_text(json_text(report))
    write_validation_steps(out_dir / "validation_steps.parquet", step_table, run["steps"].columns)
    write_steps(out_dir / "sim_steps.parquet", sim.steps.assign(run="sim"), run_geometry(run["config"], {"sim": sim}),
                {"schema_version": SCHEMA_VERSION, "git_commit": git_commit()})
    sim.requests.assign(run="sim").to_csv(out_dir / "sim_requests.csv", index=False)
    report["out_dir"] = str(out_dir)
    return report


def format_report(report: dict) -> str:
    s, d = report["step_level"], report["decisions"]
    lines = [
        f"validation of {report['run']} with cost model {report['cost_model'].get('kind')}",
        f"step level ({s['n_steps']} steps): MAPE {_pct(s['mape'])}, p90 APE {_pct(s['p90_ape'])}"
        + (f" ({', '.join(s['features_from_replay'])} from the lockstep replay)" if s.get("features_from_replay") else ""),
        "  by kind: " + ", ".join(f"{k} {_pct(v['mape'])} ({v['n_steps']})" for k, v in s.get("by_kind", {}).items()),
        f"  steps slower than 2x their prediction: {s.get('n_steps_over_2x_prediction')}",
        *_clock_lines(s.get("sm_clock")),
        *_host_lines(s.get("decode_host")),
        f"decisions (lockstep): {d['n_steps_differing']} of {d['n_steps_compared']} steps differ; "
        f"preemptions live {d['preemptions_live']}, sim {d['preemptions_sim']}",
        f"{'request level':<24}{'live':>12}{'sim':>12}{'error':>9}{'lockstep':>12}{'error':>9}"
        + (f"{'ensemble':>12}{'error':>9}{'band':>24}" if "request_level_ensemble" in report else "")
        + (f"{'replicate':>12}{'live-live':>10}" if "live_repeatability" in report else ""),
    ]
    again = report.get("live_repeatability", {}).get("metrics", {})
    timed = report.get("request_level_timed_lockstep", {})
    ens = report.get("request_level_ensemble", {})
    for name, v in report["request_level"].items():
        line = f"{name:<24}{_num(v['live']):>12}{_num(v['sim']):>12}{_pct(v['rel_error']):>9}"
        t = timed.get(name)
        line += f"{_num(t['replay']):>12}{_pct(t['rel_error']):>9}" if t else " " * 21
        if ens:
            e = ens["metrics"].get(name, {})
            inside = e.get("live_in_band")
            band = f"{_num(e.get('low'))}-{_num(e.get('high'))}" + ("" if inside is None else " in" if inside else " out")
            line += f"{_num(e.get('median')):>12}{_pct(e.get('rel_error')):>9}{band:>24}"
        if name in again:
            line += f"{_num(again[name]['replicate_live']):>12}{_pct(again[name]['live_rel_diff']):>10}"
        lines.append(line)
    if timed:
        lines.append("lockstep: the live run's own decisions, each step taking its predicted time (timed_lockstep)")
    sens = report.get("request_level_sensitivity")
    if sens:
        spread = [f"{n} {sens['span_points'][n]:.1f}" for n in sens["timing_sensitive"]]
        lines.append(f"timing-sensitive (points of its own figure spanned at {min(sens['levels']):g}-"
                     f"{max(sens['levels']):g} of the model's level, more than the target's width): "
                     + (", ".join(spread) + ": their free-simulation figures are one draw of a schedule that timing "
                        "moves" if spread else "none"))
    prediction = report.get("request_level_prediction")
    if prediction:
        medians = [f"{n} {_num(v['predicted'])} ({_pct(v['rel_error'])})" for n, v in prediction.items()
                   if v["from"] == "ensemble median"]
        but = ", but the ensemble's median for the timing-sensitive " + ", ".join(medians) if medians else ""
        lines.append("prediction: the free simulation's figures" + but)
    elif sens and sens["timing_sensitive"]:  # --ensemble 0
        lines.append("prediction: the free simulation's figures; for the timing-sensitive ones run without "
                     "--ensemble 0 (their prediction is the ensemble's median)")
    if ens:
        inside = [v["live_in_band"] for v in ens["metrics"].values() if v["live_in_band"] is not None]
        lines.append(f"ensemble: the median of {ens['n']} free simulations with jittered step times (log-normal sigma "
                     f"{ens['step_sigma']:g} per step, {ens['level_sigma']:g} per run); band: their "
                     f"p{ens['band_percentiles'][0]:g}-p{ens['band_percentiles'][1]:g}; live inside it for "
                     f"{sum(inside)} of {len(inside)} figures")
    if again:
        lines.append(f"simulation errors within the two recordings' distance: "
                     f"{sum(bool(v['sim_within_live_spread']) for v in again.values())} of {len(again)} "
                     f"(replicate {report['live_repeatability']['replicate']})")
    return "\n".join(lines)


def _clock_lines(clock: dict | None) -> list[str]:
    if not clock:
        return []
    line = f"  SM clock: the run's steps at {clock['run_median_mhz']:.0f} MHz median (p10 {clock['run_p10_mhz']:.0f})"
    if "profile_reference_mhz" not in clock:
        return [line + "; the profile was fitted without clocks"]
    line += (f"; the profile prices steps at {clock['profile_reference_mhz']:.0f} MHz "
             f"(clock share {clock['profile_sensitivity']:g})")
    slow = clock["expected_slowdown_at_median"]
    if slow > 0.005:
        line += f": at its median clock a step takes ~{_pct(slow)} longer than predicted (power-capped)"
    return [line]


def _host_lines(host: dict | None) -> list[str]:
    if not host:
        return []
    what = "off the device or queueing its work" if host["queueing_counted"] else "off the device"
    line = f"  graph decode: measured {host['level']:.3f} of the prediction; {what} {_pct(host['run_host_share'])} of its time"
    if host.get("device") is None:
        why = host.get("calibration_source") or "the profile has none recorded and no calibration rows beside it"
        return [line + f" (the calibration's share unknown: {why})"]
    return [line + f" against the calibration's {_pct(host['calibration_host_share'])}: device part "
            f"{host['device']:.3f} x host part {host['host']:.3f}"]


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%" if v < 0 else f"{100 * v:.1f}%"


def _num(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def main(args) -> int:
    report = validate(args.run_dir, args.cost_model, args.out, args.force, args.replicate, args.ensemble,
                      args.step_jitter, args.level_jitter)
    emit(report["warnings"], [])
    print(format_report(report))
    print(f"wrote {report['out_dir']}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare a live GPU run with the simulator's prediction of it")
    p.add_argument("run_dir", help="a directory written by `python -m pagesim live`")
    p.add_argument("--cost-model", default=None,
                   help="a profile JSON or 'roofline' (default: the profile the run recorded, DIR/profile.json)")
    p.add_argument("--out", default=None, help="where to write the validation files (default: DIR/validation/)")
    p.add_argument("--force", action="store_true", help="overwrite an existing validation in the output directory")
    p.add_argument("--replicate", default=None, metavar="DIR2",
                   help="another live recording of the same window (same requests and options): its request-level "
                        "figures are reported beside the run's, with the simulation errors no larger than the two "
                        "recordings' distance marked (validation.json's live_repeatability)")
    p.add_argument("--ensemble", type=non_negative_int, default=None, metavar="N",
                   help="also run N (2 to 1,000) free simulations with jittered step times (step by step) and report "
                        "their median and p5-p95 band for each request-level figure (validation.json's "
                        "request_level_ensemble); the median is then the prediction of the timing-sensitive "
                        "percentiles, which the live-mode targets judge (request_level_prediction); default: "
                        f"{AUTO_ENSEMBLE} when a percentile is timing-sensitive (or a jitter is given), else none; "
                        "0: none")
    p.add_argument("--step-jitter", type=float, default=None, metavar="SIGMA",
                   help=f"log-normal sigma of each step's time factor in the ensemble (default {ENSEMBLE_STEP_SIGMA})")
    p.add_argument("--level-jitter", type=float, default=None, metavar="SIGMA",
                   help=f"log-normal sigma of each simulation's level, one factor on all its steps (default "
                        f"{ENSEMBLE_LEVEL_SIGMA})")
    p.set_defaults(func=main)
