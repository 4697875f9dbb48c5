"""The power governor's effect on every committed live run whose session's calibration rows are committed.

For each recording with its profile's calibration rows (bench.mixed_pricing.recordings, the lookup
bench.mixed_makespan uses): the profile P its validation used, without a governor and with one fitted to those rows
(cost/governor.py; P's own clock share and reference clock: only the governor differs), each validated on the CPU
(`pagesim.validate`: the step level and the free simulation, or with --ensemble N the median of N jittered ones),
into a temporary folder. Writes the per-run figures and the targets met with and without the governor to --out.
bench/results/governor-eval-2026-12-06-r35.json was written by this script's first lookup (its own search for
rows), which found 60 of the recordings this one finds, with the same rows; the five it did not (longdoc-b-r35ch,
recorded after it ran, and four offload windows) are in governor-eval-2026-12-06-r35-added.json.

    python bench/governor_eval.py --out bench/results/governor-eval-2026-12-06-r35.json [--runs GLOB,...] [--ensemble N]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.mixed_pricing import recordings  # noqa: E402
from pagesim.live_targets import KIND_MAPE, tolerance  # noqa: E402
from pagesim.cost.governor import ClockGovernor  # noqa: E402
from pagesim.specs import get_model  # noqa: E402
from pagesim.validate import validate  # noqa: E402

REQUEST = [f"{m}_s_{p}" for m in ("ttft", "tpot", "e2e") for p in ("p50", "p90", "p99")]


def figures(report: dict) -> dict:
    step = report["step_level"]
    # the ensemble's median when there is one: a preemption-heavy window's single free simulation moves with any
    # change of step times (validate --ensemble)
    req = report.get("request_level_ensemble", {}).get("metrics") or report["request_level"]
    out = {"step_mape": step["mape"], "by_kind": {k: v["mape"] for k, v in step["by_kind"].items()},
           "kind_totals": {k: v["predicted_total_s"] / v["measured_total_s"] - 1 for k, v in step["by_kind"].items()},
           "request": {k: req[k]["rel_error"] for k in REQUEST if k in req},
           "makespan": req["makespan_s"]["rel_error"]}
    out["percentiles_met"] = all(v is not None and abs(v) <= tolerance(k) for k, v in out["request"].items())
    out["kinds_met"] = all(v <= KIND_MAPE for v in out["by_kind"].values())
    out["makespan_met"] = abs(out["makespan"]) <= tolerance("makespan_s")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", default="results/live/*", help="run folders: globs, comma-separated (default: every run)")
    ap.add_argument("--ensemble", type=int, default=0, help="jittered free simulations per validation (default 0)")
    args = ap.parse_args(argv)
    if os.path.exists(args.out):
        sys.exit(f"--out {args.out}: exists; give a new file")
    results, skipped = {}, {}
    tmp = Path(tempfile.mkdtemp(prefix="governor-eval-"))
    names = sorted({Path(d).name for pattern in args.runs.split(",") for d in glob.glob(pattern)})
    for rec in recordings(names):  # bench.mixed_pricing: each recording with its profile's calibration rows
        run, path, profile = rec["dir"], rec["source"], rec["profile"]
        clock = profile["fit"]["sm_clock"]
        rows_path = str(rec["rows"].relative_to(ROOT))
        governor, report = ClockGovernor.fit(pd.read_csv(rec["rows"]), get_model(profile["model"]),
                                             clock["reference_mhz"], clock["sensitivity"])
        if governor is None:
            skipped[run.name] = report["skipped"]
            continue
        gp, plain = tmp / f"{run.name}-governed.json", tmp / f"{run.name}-plain.json"
        gp.write_text(json.dumps(dict(profile, clock_governor=governor.to_json())))
        plain.write_text(json.dumps({k: v for k, v in profile.items() if k != "clock_governor"}))
        entry = {"profile": path, "rows": rows_path, "governor": report}
        for name, p in (("without", str(plain)), ("with", str(gp))):
            rep = validate(str(run), p, out=str(tmp / f"{run.name}-{name}"), ensemble=args.ensemble)
            entry[name] = figures(rep)
        results[run.name] = entry
        w, g = entry["without"], entry["with"]
        print(f"{run.name:36s} step {w['step_mape']:.2%} -> {g['step_mape']:.2%}  makespan {w['makespan']:+.2%} -> "
              f"{g['makespan']:+.2%}  percentiles {w['percentiles_met']} -> {g['percentiles_met']}  "
              f"kinds {w['kinds_met']} -> {g['kinds_met']}", flush=True)
    summary = {name: {k: sum(r[name][k] for r in results.values())
                      for k in ("percentiles_met", "kinds_met", "makespan_met")} for name in ("without", "with")}
    Path(args.out).write_text(json.dumps({"runs": results, "skipped": skipped, "met": summary, "ensemble": args.ensemble,
                                          "n_runs": len(results)}, indent=1) + "\n")
    print(json.dumps(summary), f"({len(results)} runs; skipped {len(skipped)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
