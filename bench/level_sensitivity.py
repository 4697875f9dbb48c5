"""How far a live window's request-level figures move with the cost model's level (CPU only): the cause of the free
simulation's percentile misses.

For each live run, its free simulation (pagesim.validate.live_simulation, step by step) with the cost model its
committed validation used (validation.json's cost_model_path), every step time multiplied by one factor
(JitteredCostModel's scale, no jitter; `validate` reports the larger move at 0.99 and 1.01 itself): each of
--levels, and the run's own level, sum(measured) / sum(predicted) over its lockstep steps
(validation/validation_steps.parquet: the model's level error on that run, known only after the run), and the
run's own levels kind by kind (graph decode, graph mixed, ...: one factor each, from the same table). Per
figure (TTFT / TPOT / E2E p50 / p90 / p99, makespan): its error against live at each factor, and its slope, the
points of error per 1% of level (central difference over the two levels nearest 1 on each side). A slope of 5
means a model right to 1% can still miss a 5% target by its level alone; the error at the run's own level says
how much of the miss is the model's level on that run and how much is the schedule's own timing sensitivity. The
run's own levels are an oracle (they need the live run): a diagnosis of the misses, not a prediction.

    python bench/level_sensitivity.py RUN_DIR ... [--levels 0.98,0.99,1.01,1.02] --out bench/results/level-sensitivity.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from ensemble_windows import FIGURES, target  # noqa: E402  (bench/ is the script's own directory)
from pagesim.outputs import check_output_file, git_commit  # noqa: E402
from pagesim.cost.jitter import JitteredCostModel  # noqa: E402
from pagesim.validate import step_kinds  # noqa: E402


class KindScaledCostModel(JitteredCostModel):
    """`base`'s step times times the factor of the step's kind (pagesim.validate.step_kinds' names, told apart as it
    tells them; a kind not named keeps 1), step by step, no jitter (the run's own levels, kind by kind)."""

    def __init__(self, base, by_kind: dict[str, float], max_graph_batch: int, max_mixed_tokens: int):
        super().__init__(base, 0, 0.0, 0.0)
        self.by_kind, self.max_graph_batch, self.max_mixed_tokens = by_kind, max_graph_batch, max_mixed_tokens

    def kind(self, f) -> str:
        frame = pd.DataFrame({c: [getattr(f, c)] for c in ("num_swap_out_blocks", "num_swap_in_blocks",
                                                           "num_prefill_tokens", "num_decode_seqs")})
        return str(step_kinds(frame, self.max_graph_batch, self.max_mixed_tokens)[0])

    def step_time(self, features) -> float:
        return self.base.step_time(features) * self.by_kind.get(self.kind(features), 1.0)


def run_levels(run_dir: Path) -> tuple[float, dict[str, float]]:
    """sum(measured) / sum(predicted) over the run's lockstep steps, overall and by step kind: the factors that remove
    the model's level error on that run, as one level and kind by kind."""
    steps = pd.read_parquet(run_dir / "validation" / "validation_steps.parquet",
                            columns=["kind", "measured_s", "predicted_s"])
    by_kind = steps.groupby("kind")[["measured_s", "predicted_s"]].sum()
    return (float(steps.measured_s.sum() / steps.predicted_s.sum()),
            {str(k): float(r.measured_s / r.predicted_s) for k, r in by_kind.iterrows() if r.predicted_s > 0})


def one_run(run_dir: Path, levels: list[float]) -> dict:
    from pagesim.cost import make_cost_model
    from pagesim.metrics import summarize_run
    from pagesim.validate import live_simulation, load_run, rel_error, run_metrics

    committed = json.loads((run_dir / "validation" / "validation.json").read_text())
    run = load_run(run_dir)
    cost = make_cost_model(committed["cost_model_path"], run["config"])
    live = run_metrics(run["summary"]["runs"]["live"], run["steps"])
    own, own_by_kind = run_levels(run_dir)
    max_graph = max(getattr(cost, "graph_batch_sizes", ()) or (run["config"].max_num_seqs,))
    max_mixed = max((run["summary"].get("executor") or {}).get("mixed_graph_token_sizes") or [0])

    def simulate(model) -> dict:
        result = live_simulation(run, model, fast_path=False).run("sim")
        sim = run_metrics(summarize_run(result), result.steps)
        return {name: rel_error(sim[name], live[name]) for name in FIGURES}

    errors = {f: simulate(JitteredCostModel(cost, 0, 0.0, 0.0, f)) for f in sorted({1.0, own, *levels})}
    by_kind = simulate(KindScaledCostModel(cost, own_by_kind, max_graph, max_mixed))
    below = max(f for f in errors if f < 1.0) if any(f < 1.0 for f in errors) else None
    above = min(f for f in errors if f > 1.0) if any(f > 1.0 for f in errors) else None
    figures = {}
    for name in FIGURES:
        slope = None
        if below is not None and above is not None and None not in (errors[below][name], errors[above][name]):
            slope = (errors[above][name] - errors[below][name]) / (above - below)  # points of error per 1% of level
        figures[name] = {"errors": {f"{f:.4f}": errors[f][name] for f in errors}, "slope_per_percent": slope,
                         "at_own_level": errors[own][name], "at_own_levels_by_kind": by_kind[name],
                         "at_1": errors[1.0][name]}
    return {"run": str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir),
            "cost_model": committed["cost_model_path"], "own_level": own, "own_levels_by_kind": own_by_kind,
            "figures": figures}


def within(run: dict, key: str) -> bool:
    return all(f[key] is not None and abs(f[key]) <= target(name) for name, f in run["figures"].items())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="live run directories with a committed validation/ (validation.json and "
                                           "validation_steps.parquet)")
    p.add_argument("--levels", default="0.98,0.99,1.01,1.02",
                   help="comma-separated factors on every step time (default 0.98,0.99,1.01,1.02; 1 and the run's "
                        "own level are always added)")
    p.add_argument("--out", default=None)
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = p.parse_args()
    try:
        levels = [float(x) for x in args.levels.split(",") if x.strip()]
    except ValueError:
        p.error(f"--levels {args.levels!r}: expected comma-separated numbers such as 0.98,0.99,1.01,1.02")
    if not levels or any(not 0.5 <= f <= 2.0 for f in levels):
        p.error(f"--levels {args.levels!r}: expected factors between 0.5 and 2 (0.99 is 1% faster steps)")
    dirs = [Path(r) for r in args.runs]
    for d in dirs:
        for f in ("validation.json", "validation_steps.parquet"):
            if not (d / "validation" / f).is_file():
                p.error(f"{d}: no validation/{f} (validate the run first: python -m pagesim validate {d})")
    if args.out:
        check_output_file(p, args.out, args.force)
    t0, runs = time.perf_counter(), []
    for d in dirs:
        r = one_run(d.resolve(), levels)
        runs.append(r)
        shown = [n for n in FIGURES if n.endswith("_p90") or n == "makespan_s"]
        print(f"{d.name}: own level {r['own_level']:.4f}; " + "; ".join(
            f"{n} {100 * r['figures'][n]['at_1']:+.1f}% -> {100 * r['figures'][n]['at_own_level']:+.1f}% / "
            f"{100 * r['figures'][n]['at_own_levels_by_kind']:+.1f}% (slope {r['figures'][n]['slope_per_percent']:+.1f})"
            for n in shown), flush=True)
    every = {key: sum(within(r, key) for r in runs) for key in ("at_1", "at_own_level", "at_own_levels_by_kind")}
    slopes = {n: float(np.median([abs(r["figures"][n]["slope_per_percent"]) for r in runs
                                  if r["figures"][n]["slope_per_percent"] is not None] or [np.nan])) for n in FIGURES}
    print(f"runs with every figure within target: {every['at_1']} of {len(runs)} as predicted, {every['at_own_level']} "
          f"with each run's own level, {every['at_own_levels_by_kind']} with its own level kind by kind; median |slope| "
          "(points per 1% of level): "
          + ", ".join(f"{n} {s:.1f}" for n, s in slopes.items()))
    result = {"bench": "level_sensitivity", "git_commit": git_commit(), "levels": levels,
              "seconds": time.perf_counter() - t0, "runs_every_figure_within_target": every,
              "median_abs_slope_per_percent": slopes, "runs": runs}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
