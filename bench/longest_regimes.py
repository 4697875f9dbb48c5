"""What the graph formula's per-split-regime longest-walk coefficients buy on recorded live runs.

For each run: fit the calibration steps its profile was fitted to twice, with the current form (one longest-walk
coefficient per split regime: graph_max_context, graph_max_context_2_3_splits, graph_max_context_1_split) and with
the former single coefficient (every graph priced with graph_max_context), validate the run with each, and print
both validations' step MAPE (overall, graph decode) and request-level errors side by side. Needs no GPU.

    python bench/longest_regimes.py RUN_DIR[=STEPS.csv] ... --out OUT_DIR [--force]

STEPS.csv defaults to RUN_DIR/profile.steps.csv.gz (written by `live --calibrate`); a run recorded with --profile P
needs P's steps (P with .steps.csv.gz). Writes OUT_DIR/RUN/{regimes,single}.json with their validations and
OUT_DIR/longest-regimes.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.sharing_ablation import METRICS, figures, run_specs  # noqa: E402  (the same figures and command line)


def main() -> int:
    import pandas as pd

    from pagesim.cost import profile
    from pagesim.validate import load_run, validate

    jobs, out, force = run_specs(__doc__.splitlines()[0])
    result = {}
    for run_dir, steps, _ in jobs:
        config = load_run(run_dir)["config"]
        d = out / run_dir.name
        d.mkdir(exist_ok=True)
        rows = pd.read_csv(steps)
        figs = {}
        for form in ("regimes", "single"):
            # "single": every split count in regime 0, so the fit and the pricing use graph_max_context alone
            with mock.patch.object(profile, "split_regime", (lambda s: s * 0) if form == "single" else profile.split_regime):
                fitted, report = profile.fit_profile(rows, config.model, config.gpu, holdout="workload")
                fitted.kv_cache_dtype = config.kv_cache_dtype
                fitted.fit = report
                fitted.to_json(d / f"{form}.json")
                figs[form] = figures(validate(run_dir, str(d / f"{form}.json"), d / f"validation-{form}", force=force,
                                             ensemble=0))
                figs[form]["calibration_holdout_mape"] = report["mape"]
        result[run_dir.name] = {"steps": str(steps), **figs}
        a, b = figs["regimes"], figs["single"]
        print(f"{run_dir.name}: step MAPE {a['mape']:.1%} per regime, {b['mape']:.1%} single "
              f"(graph decode {a['graph_decode_mape']:.1%} / {b['graph_decode_mape']:.1%}); "
              + ", ".join(f"{m} {a[m]:+.1%} / {b[m]:+.1%}" for m in METRICS if m in a and m in b), flush=True)
    (out / "longest-regimes.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / 'longest-regimes.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
