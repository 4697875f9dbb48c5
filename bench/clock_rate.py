"""Does the recent prefill token rate predict the step times the profile misses? (round 25; no GPU needed)

The H200 holds a lower SM clock at its power cap, which bursts of long prefills reach. This check reads a
calibration's rows (P.steps.csv.gz), takes the median SM clock per bin of the prefill token rate over the last
--window-s seconds (the tokens of the steps that ended in that window, over its length), and applies the factor
1 + share x (reference / clock - 1) (the profile's clock share and reference clock) to the predicted step times of
every validated live run under results/live (RUN/validation/validation_steps.parquet beside RUN/steps.parquet),
the clock read from the rate before each step as the live run had it. Printed per run: step MAPE, by kind, and the
summed predicted / measured time, without and with the factor; with --out, the same as JSON. Runs without
recorded clocks are left out.

    python -m bench.clock_rate [--rows P.steps.csv.gz] [--out F.json]

Without --rows the clock per rate bin comes from the live steps of the other runs (each run left out of its own).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys

import numpy as np
import pandas as pd

from pagesim.outputs import check_output_file, json_text
from pagesim.results import times_from_idle

RATE_EDGES = (-1, 1000, 5000, 10000, 20000, 30000, 50000, 1e12)  # prefill tokens per second
KINDS = ("graph decode", "graph mixed", "mixed")


def rate_before(start: np.ndarray, end: np.ndarray, prefill_tokens: np.ndarray, window_s: float) -> np.ndarray:
    """Per step: the prefill tokens of the steps that ended in the window_s seconds before it starts, per second."""
    cum = np.concatenate([[0.0], np.cumsum(prefill_tokens)])
    return (cum[np.searchsorted(end, start, side="right")] - cum[np.searchsorted(end, start - window_s)]) / window_s


def clock_table(rows: pd.DataFrame, window_s: float) -> np.ndarray:
    """The calibration rows' median SM clock per RATE_EDGES bin (their reference where a bin is empty)."""
    rows = rows.sort_values("started_unix")
    start = rows["started_unix"].to_numpy()
    rate = rate_before(start, start + rows["duration_s"].to_numpy(), rows["num_prefill_tokens"].to_numpy(float),
                       window_s)
    med = rows.groupby(pd.cut(rate, RATE_EDGES), observed=False)["sm_clock_mhz"].median().to_numpy()
    return np.where(np.isnan(med), np.nanmax(med), med)


def load_run(run: str, window_s: float) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray] | None:
    """(validation steps, live steps, the prefill rate before each step) of a validated run; None without clocks."""
    v = pd.read_parquet(f"{run}/validation/validation_steps.parquet")
    s = pd.read_parquet(f"{run}/steps.parquet")
    if len(v) != len(s) or "idle_before_s" not in s or "sm_clock_mhz" not in s or s["sm_clock_mhz"].isna().all():
        return None
    duration = s["duration_s"].to_numpy()
    end = times_from_idle(s["idle_before_s"].fillna(0).to_numpy(), duration) + duration  # a stored start restarts the sum
    return v, s, rate_before(end - duration, end, s["num_prefill_tokens"].to_numpy(float), window_s)


def runs_table(loaded: dict, leave_out: str) -> np.ndarray:
    """The median SM clock per rate bin over the live steps of every run but leave_out."""
    clocks = pd.concat([s["sm_clock_mhz"] for run, (_, s, _) in loaded.items() if run != leave_out], ignore_index=True)
    rates = np.concatenate([r for run, (_, _, r) in loaded.items() if run != leave_out])
    med = clocks.groupby(pd.cut(rates, RATE_EDGES), observed=False).median().to_numpy()
    return np.where(np.isnan(med), np.nanmax(med), med)


def check_run(run: str, loaded, table: np.ndarray, share: float, reference: float) -> dict:
    v, _, rate = loaded
    clock = table[np.searchsorted(RATE_EDGES, rate, side="left") - 1]
    measured, plain = v["measured_s"].to_numpy(), v["predicted_s"].to_numpy()
    out = {"run": run, "clock_by_rate_mhz": table.tolist()}
    for name, predicted in (("plain", plain), ("clocked", plain * (1 + share * (reference / clock - 1)))):
        ape = np.abs(predicted - measured) / measured
        out[name] = {"mape": float(ape.mean()), "predicted_over_measured": float(predicted.sum() / measured.sum()),
                     "by_kind": {k: float(ape[v["kind"].to_numpy() == k].mean()) for k in KINDS
                                 if (v["kind"] == k).any()}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", help="a calibration's rows (P.steps.csv.gz, with sm_clock_mhz) for the clock per rate; "
                   "without it, each run is checked against the clocks of the other runs' live steps")
    p.add_argument("--window-s", type=float, default=0.5)
    p.add_argument("--share", type=float, default=0.15, help="the share of a step's time that scales with the clock")
    p.add_argument("--reference-mhz", type=float, default=1980.0)
    p.add_argument("--runs", default="results/live/*", help="glob of live run folders (default: %(default)s)")
    p.add_argument("--out")
    p.add_argument("--force", action="store_true")
    a = p.parse_args(argv)
    if a.out:
        check_output_file(p, a.out, a.force)
    loaded = {run: x for run in sorted(glob.glob(a.runs)) if glob.glob(f"{run}/validation/validation_steps.parquet")
              if (x := load_run(run, a.window_s)) is not None}
    table = clock_table(pd.read_csv(a.rows), a.window_s) if a.rows else None
    if table is not None:
        print("calibration clock (MHz) by prefill tokens/s bin", RATE_EDGES, ":", np.round(table).tolist())
    else:
        print("clock (MHz) by prefill tokens/s bin", RATE_EDGES, ", all runs:", np.round(runs_table(loaded, "")).tolist())
    results = [check_run(run, x, table if table is not None else runs_table(loaded, run), a.share, a.reference_mhz)
               for run, x in loaded.items()]
    for r in results:
        print(f"{r['run']:45s} MAPE {r['plain']['mape']:.2%} -> {r['clocked']['mape']:.2%}  "
              f"predicted/measured {r['plain']['predicted_over_measured']:.4f} -> {r['clocked']['predicted_over_measured']:.4f}")
    for name in ("plain", "clocked"):
        mapes = np.array([r[name]["mape"] for r in results])
        print(f"{name}: mean step MAPE {mapes.mean():.2%}, within 3% on {(mapes <= 0.03).sum()} of {len(mapes)}")
    if a.out:
        with open(a.out, "w") as f:
            f.write(json_text({"rows": a.rows, "window_s": a.window_s, "share": a.share,
                               "reference_mhz": a.reference_mhz,
                               "clock_by_rate_mhz": (table if table is not None else runs_table(loaded, "")).tolist(),
                               "clock_from": a.rows or "the other runs' live steps",
                               "rate_edges": list(RATE_EDGES), "runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
