"""Live GPU run directories (results/live/<name>/), as the Sim vs Live page reads them.

A run directory holds the first three files from `python -m pagesim live`, and the
rest once `python -m pagesim validate DIR` has compared it with the simulator:

    summary.json              {"config", "trace", "runs": {"live": summary}, "hardware", "software"}
    steps.parquet             the simulator's step columns (run = "live") + gpu_time_s, move_gpu_time_s, queue_host_s, sm_clock_mhz
    requests.parquet          the simulator's request columns (run = "live"); requests.csv in older runs
    validation.json           {"cost_model", "step_level": {mape, p90_ape, n_steps},
                               "decisions": {n_steps_compared, n_steps_differing, preemptions_live, preemptions_sim},
                               "request_level": {metric: {live, sim, rel_error}}}
    validation_steps.parquet  step, kind, measured_s, predicted_s (+ the run's time_s and features, joined on read)
    sim_steps.parquet         the free-running re-simulation of the same trace (simulator step columns)
    sim_requests.csv          ... and its requests
"""

from __future__ import annotations

import bisect
import io
import json
import os
import re
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pagesim import results
from pagesim.errors import UserError
from pagesim.validate import RUN_COLUMNS, check_columns, read_json, read_run_file, read_validation_steps

REPO = Path(__file__).resolve().parents[2]
LIVE_DIR = REPO / "results" / "live"
LIVE_DIR_ENV = "PAGESIM_LIVE_RUNS"  # another folder of run directories (tests, other checkouts)
RUN_FILES = ("summary.json", "steps.parquet", "requests.parquet")  # written by `python -m pagesim live`
VALIDATION_FILES = ("validation.json", "validation_steps.parquet", "sim_steps.parquet", "sim_requests.csv")  # by validate
FILES = RUN_FILES + VALIDATION_FILES
# The columns the page reads of each table, beyond those validate reads of a live run (RUN_COLUMNS)
STEP_COLUMNS = (*RUN_COLUMNS["steps"], "kv_cache_usage", "num_waiting", "num_swapped")
REQUEST_COLUMNS = (*RUN_COLUMNS["requests"], "ttft_s", "tpot_s", "e2e_s")
VALIDATION_STEP_COLUMNS = ("step", "measured_s", "predicted_s")
_STRING_COLUMNS = {"request_id": str, "parent_id": str, "state": str, "reason": str, "run": str}


@dataclass
class LiveRun:
    """A live run; the validation fields are None until `python -m pagesim validate DIR` has run."""

    path: Path
    summary: dict
    steps: pd.DataFrame
    requests: pd.DataFrame
    validation: dict | None = None
    validation_steps: pd.DataFrame | None = None
    sim_steps: pd.DataFrame | None = None
    sim_requests: pd.DataFrame | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def validated(self) -> bool:
        return self.validation is not None


def live_root() -> Path:
    return Path(os.environ.get(LIVE_DIR_ENV) or LIVE_DIR)


def find_live_runs(root: Path | None = None) -> list[Path]:
    """Run directories (those with a summary.json) under root: validated ones first, then by name."""
    root = live_root() if root is None else root
    runs = sorted(p.parent for p in root.glob("*/summary.json")) if root.is_dir() else []
    return sorted(runs, key=lambda p: not is_validated(p))


def run_commit(path: Path) -> str | None:
    """The git commit a run was recorded at (summary.json's git_commit, as `live` writes it); None when it has none
    or cannot be read."""
    try:
        summary = json.loads((Path(path) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    commit = summary.get("git_commit") if isinstance(summary, dict) else None
    return commit if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{4,40}", commit) else None


def commit_times(root: Path | None = None) -> dict[str, int]:
    """{full sha: committer time (Unix s)} of every commit of the git checkout holding root (the runs' folder), in one
    `git log`; {} outside git (an exported copy): then no run is known to be newer than another."""
    root = live_root() if root is None else Path(root)
    try:
        done = subprocess.run(["git", "log", "--all", "--format=%H %ct"], cwd=root, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    if done.returncode != 0:
        return {}
    return {sha: int(t) for sha, t in (line.split() for line in done.stdout.splitlines() if line.count(" ") == 1)}


def newest_run(paths: list[Path], commits: dict[str, str | None], times: dict[str, int]) -> Path:
    """The run the Sim vs Live page opens on: the most recently recorded one, by the date of the commit it was
    recorded at (commits: run name -> summary.json's git_commit; times: commit_times()), validated runs before
    those not yet validated; runs whose commit is unknown (none recorded, not in this checkout's history) count as
    the oldest; ties (one commit's runs) go by name."""
    shas = sorted(times)

    def recorded(path: Path) -> int:
        commit = commits.get(path.name)
        if not commit:
            return -1
        i = bisect.bisect_left(shas, commit)
        return times[shas[i]] if i < len(shas) and shas[i].startswith(commit) else -1

    return min(paths, key=lambda p: (not is_validated(p), -recorded(p), p.name))


def validation_dir(path: Path) -> Path:
    """Where `validate` wrote the run's validation: DIR/validation/ (since live mode II), else DIR itself."""
    return path / "validation" if (path / "validation" / "validation.json").is_file() else path


def is_validated(path: Path) -> bool:
    return all((validation_dir(path) / f).is_file() for f in VALIDATION_FILES)


def card(summary: dict) -> str:
    """The GPU a run was recorded on, short: "H100" of "NVIDIA H100 80GB HBM3" (summary.json's environment, or
    hardware in older runs), else the config's gpu ("h200" -> "H200"), else "?"."""
    hardware = summary.get("environment", summary.get("hardware")) if isinstance(summary, dict) else None
    name = hardware.get("gpu") if isinstance(hardware, dict) else None
    found = re.search(r"\b([A-Z]+\d+[A-Z]*)\b", str(name or "").replace("NVIDIA", ""))
    if found:
        return found.group(1)
    config = summary.get("config") if isinstance(summary, dict) else None
    gpu = config.get("gpu") if isinstance(config, dict) else None
    return str(gpu).upper() if gpu else "?"


def run_card(path: Path) -> str:
    """card() of the run directory's summary.json ("?" when it cannot be read: the page reports that run's error)."""
    try:
        return card(json.loads((Path(path) / "summary.json").read_text()))
    except (OSError, ValueError):
        return "?"


def read_requests(path: Path) -> pd.DataFrame:
    """A run's requests (requests.parquet, or requests.csv of older runs) with ids and text columns as strings."""
    df = results.read_requests(path)
    for c in _STRING_COLUMNS:
        if c in df:
            df[c] = df[c].astype(str)
    return df


def load_live_run(path: Path) -> LiveRun:
    """Read a run directory; UserError naming the directory and the missing or unreadable file. The
    validation files are read when all of them are there."""
    path = Path(path)
    missing = [f for f in RUN_FILES if not (path / f).is_file()
               and not (f == "requests.parquet" and results.requests_path(path).is_file())]
    if missing:
        raise UserError(f"{path}: not a live run directory; missing {', '.join(missing)} "
                        f"(expected {', '.join(RUN_FILES)}, and after validation {', '.join(VALIDATION_FILES)})")
    # each file read by validate's reader: a damaged, cut-short or empty file is named, in the words `python -m pagesim
    # validate` uses for it ("DIR: cannot read sim_requests.csv (No columns to parse from file); expected ...")
    where = str(path)
    run = LiveRun(path=path, summary=read_run_file(path / "summary.json", where, read_json),
                  steps=read_run_file(path / "steps.parquet", where, results.read_steps),
                  requests=read_run_file(results.requests_path(path), where, read_requests))
    if is_validated(path):
        v = validation_dir(path)

        def read(name, reader):  # validate's files: a damaged one is written again by validate
            return read_run_file(v / name, where, reader, "validate", f" (run it again: python -m pagesim validate {path})")

        run.validation = read("validation.json", read_json)
        run.validation_steps = read("validation_steps.parquet", lambda p: read_validation_steps(p, run.steps))
        run.sim_steps = read("sim_steps.parquet", results.read_steps)  # compact since round 13
        run.sim_requests = read("sim_requests.csv", read_requests)
    _check_shape(run)
    return run


def _check_shape(run: LiveRun) -> None:
    """A UserError naming the file when a JSON file is not an object, or a table lacks a column the page reads or
    has no rows."""
    for file, value in (("summary.json", run.summary), ("validation.json", run.validation)):
        if value is not None and not isinstance(value, dict):
            raise UserError(f"{run.path}: {file} holds a JSON {type(value).__name__}; expected an object, as "
                            "`python -m pagesim live` and `validate` write it")
    tables = [("steps.parquet", run.steps, STEP_COLUMNS, "live"),
              (results.requests_path(run.path).name, run.requests, REQUEST_COLUMNS, "live")]
    if run.validated:
        tables += [("validation_steps.parquet", run.validation_steps, VALIDATION_STEP_COLUMNS, "validate"),
                   ("sim_steps.parquet", run.sim_steps, STEP_COLUMNS, "validate"),
                   ("sim_requests.csv", run.sim_requests, REQUEST_COLUMNS, "validate")]
    for file, frame, columns, writer in tables:
        check_columns(str(run.path), file, frame, columns, writer)
        if frame.empty:  # the page's charts of it would be drawn empty, without a word
            rows = "requests" if "requests" in file else "steps"
            raise UserError(f"{run.path}: {file} has no rows, so there is nothing to chart; expected the {rows} "
                            f"`python -m pagesim {writer}` records, one row per {rows[:-1]}")


def extract_run_zip(content: bytes, dest: Path) -> Path:
    """Unpack a zipped run directory into dest; the folder holding summary.json. Refuses members that
    would land outside dest. UserError for a file that is not such a zip."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(content))
    except zipfile.BadZipFile:
        raise UserError("the upload is not a zip file; zip a live run directory (results/live/NAME/)") from None
    dest = Path(dest).resolve()
    with archive:
        for member in archive.namelist():
            if not (dest / member).resolve().is_relative_to(dest):
                raise UserError(f"the zip holds a path outside its folder: {member!r}")
        archive.extractall(dest)
    found = sorted((p.parent for p in dest.rglob("summary.json")), key=lambda p: len(p.parts))
    if not found:
        raise UserError(f"the zip holds no summary.json; expected a live run directory with {', '.join(RUN_FILES)}")
    return found[0]
