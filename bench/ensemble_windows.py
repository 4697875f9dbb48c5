"""Jittered ensembles of the free simulation against the committed live windows (CPU only).

For each live run, the ensemble of `validate --ensemble` (pagesim.validate.request_level_ensemble: N free
simulations with log-normal step-time jitter, step by step) with the cost model its committed validation used
(validation.json's cost_model_path), beside that validation's deterministic free simulation. Per run and overall:
how many TTFT / TPOT / E2E percentiles and makespans are within the live-mode issue's targets (p50/p90 5%, p99 10%,
makespan 1%) for the deterministic simulation and for the ensemble's median, their mean absolute error, and how
often live lies in the ensemble's p5-p95 band.

    python bench/ensemble_windows.py RUN_DIR ... --n 16 --out bench/results/ensemble-windows.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pagesim.live_targets import MAKESPAN, PERCENTILES  # noqa: E402
from pagesim.outputs import check_output_file, git_commit  # noqa: E402

FIGURES = [f"{m}_p{p}" for m in ("ttft_s", "tpot_s", "e2e_s") for p in (50, 90, 99)] + ["makespan_s"]


def target(name: str) -> float:
    return MAKESPAN if name == "makespan_s" else PERCENTILES[name.rsplit("_", 1)[1]]


def one_run(run_dir: Path, n: int, step_sigma: float, level_sigma: float) -> dict:
    from pagesim.cost import make_cost_model
    from pagesim.validate import load_run, request_level_ensemble

    committed = json.loads((run_dir / "validation" / "validation.json").read_text())
    run = load_run(run_dir)
    cost = make_cost_model(committed["cost_model_path"], run["config"])
    ens = request_level_ensemble(run, cost, n, step_sigma, level_sigma)
    out = {}
    for name in FIGURES:
        e, d = ens["metrics"][name], committed["request_level"][name]
        out[name] = {"live": d["live"], "deterministic_error": d["rel_error"], "ensemble_error": e["rel_error"],
                     "low": e["low"], "high": e["high"], "live_in_band": e["live_in_band"]}
    return {"run": str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir),
            "cost_model": committed["cost_model_path"], "figures": out}


def in_group(run_name: str, pattern: str) -> bool:
    """--group's test: the name contains the pattern, or with a leading '!' does not contain the rest."""
    return pattern[1:] not in run_name if pattern.startswith("!") else pattern in run_name


def tally(runs: list[dict]) -> dict:
    figures = [(name, f) for r in runs for name, f in r["figures"].items()]
    percentiles = [name for name in FIGURES if name != "makespan_s"]

    def all_within(r, key):
        return all(abs(r["figures"][name][key]) <= target(name) for name in percentiles)

    return {"runs": len(runs), "figures": len(figures),
            "deterministic_within_target": sum(abs(f["deterministic_error"]) <= target(n) for n, f in figures),
            "ensemble_within_target": sum(abs(f["ensemble_error"]) <= target(n) for n, f in figures),
            "runs_every_percentile_within_target": {"deterministic": sum(all_within(r, "deterministic_error") for r in runs),
                                                    "ensemble": sum(all_within(r, "ensemble_error") for r in runs)},
            "mean_abs_error": {"deterministic": float(np.mean([abs(f["deterministic_error"]) for _, f in figures])),
                               "ensemble": float(np.mean([abs(f["ensemble_error"]) for _, f in figures]))},
            "live_in_band": float(np.mean([bool(f["live_in_band"]) for _, f in figures]))}


def main() -> int:
    from pagesim.validate import ENSEMBLE_LEVEL_SIGMA, ENSEMBLE_STEP_SIGMA

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="live run directories with a committed validation/validation.json")
    p.add_argument("--n", type=int, default=16, help="simulations per ensemble (default 16)")
    p.add_argument("--step-jitter", type=float, default=ENSEMBLE_STEP_SIGMA)
    p.add_argument("--level-jitter", type=float, default=ENSEMBLE_LEVEL_SIGMA)
    p.add_argument("--group", action="append", default=[], metavar="NAME=SUBSTRING",
                   help="also tally the runs whose name contains SUBSTRING (with a leading '!': does not contain it) "
                        "under NAME (repeatable)")
    p.add_argument("--out", default=None)
    p.add_argument("--force", action="store_true")
    args = p.parse_args()
    if args.n < 1:
        p.error(f"--n {args.n}: expected a positive number of simulations")
    dirs = [Path(r) for r in args.runs]
    for d in dirs:
        if not (d / "validation" / "validation.json").is_file():
            p.error(f"{d}: no validation/validation.json (validate the run first: python -m pagesim validate {d})")
    groups = {}
    for g in args.group:
        name, sep, sub = g.partition("=")
        if not sep or not name or not sub:
            p.error(f"--group {g!r}: expected NAME=SUBSTRING")
        groups[name] = sub
    if args.out:
        check_output_file(p, args.out, args.force)
    t0, runs = time.perf_counter(), []
    for d in dirs:
        runs.append(one_run(d.resolve(), args.n, args.step_jitter, args.level_jitter))
        print(f"{d.name}: " + " ".join(f"{name} {100 * f['deterministic_error']:+.1f}/{100 * f['ensemble_error']:+.1f}%"
                                       for name, f in runs[-1]["figures"].items()), flush=True)
    result = {"bench": "ensemble_windows", "git_commit": git_commit(), "n": args.n, "step_sigma": args.step_jitter,
              "level_sigma": args.level_jitter, "seconds": time.perf_counter() - t0, "all": tally(runs),
              "groups": {name: tally([r for r in runs if in_group(Path(r["run"]).name, sub)]) for name, sub in groups.items()},
              "runs": runs}
    for name, t in [("all", result["all"]), *result["groups"].items()]:
        print(f"{name}: {t['runs']} runs; figures within target: deterministic {t['deterministic_within_target']}, "
              f"ensemble median {t['ensemble_within_target']} of {t['figures']}; runs with every percentile within "
              f"target {t['runs_every_percentile_within_target']['deterministic']} / "
              f"{t['runs_every_percentile_within_target']['ensemble']}; mean |error| "
              f"{100 * t['mean_abs_error']['deterministic']:.2f}% / {100 * t['mean_abs_error']['ensemble']:.2f}%; "
              f"live in the p5-p95 band {100 * t['live_in_band']:.0f}%")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
