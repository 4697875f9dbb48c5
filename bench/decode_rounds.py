"""What pricing the rounds of the decode kernel's programs buys (issue #13, round 41; no GPU).

A graph decode step's device time jumps where the decode launch's programs pass what the SMs hold at once
(pagesim/cost/decode_split.py, DECODE_PROGRAMS_PER_SM), which the profile's graph formula without rounds cannot
see: round 41's sweep of 40-256 rows ran 65 -> 68 rows of the 128-row graph +1.93 ms at 2,560 tokens a row, 5-11%
over that form's prediction. Each calibration is refitted from its rows in both forms: "before" (no rounds, every
profile before round 41) and "rounds" (decode_programs_per_sm = DECODE_PROGRAMS_PER_SM), at its own clock share.

- Sweeps: the calibrations with a `bench/decode_rows.py` sweep from the same call (round 40's r40h: every batch of
  1-64 rows at 512-4,096 tokens a row; round 41's r41h: 40-256 rows at 1,024-2,560), each sweep's decode steps 10 or
  more past their prefill priced: per (context, rows) the median measured / predicted, the mean |error| over the
  batches (those above 64 rows apart) and the largest; with the calibration's held-out errors by kind.
- --recordings: every committed recording with its profile's calibration rows (bench.mixed_pricing.recordings)
  validated with each refit (the free simulation; --ensemble N as bench/governor_eval.py): step MAPE, every kind,
  makespan and percentiles within the live-mode targets, and their totals.

    python bench/decode_rounds.py --out bench/results/decode-rounds-2026-12-06-r41.json [--recordings] [--jobs 2]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.decode_rows import FAR, far_decode_steps  # noqa: E402
from bench.governor_eval import figures  # noqa: E402
from bench.mixed_pricing import recordings, refit  # noqa: E402
from pagesim.cost.decode_split import DECODE_PROGRAMS_PER_SM  # noqa: E402
from pagesim.live_targets import STEP_MAPE  # noqa: E402

FORMS = {"before": [], "rounds": list(DECODE_PROGRAMS_PER_SM)}
# calibrations and the decode_rows sweeps of the same call
SWEEPS = {"results/profiles/h100-llama-3-8b-2026-12-06-r40h.json": ("r40h", "r40hb"),
          "results/profiles/h100-llama-3-8b-2026-12-06-r41h.json": ("r41h", "r41hb")}


def in_form(profile: dict, form: str) -> dict:
    """The profile JSON as if it had been fitted in `form` (bench.mixed_pricing.refit follows its key)."""
    d = {k: v for k, v in profile.items() if k != "decode_programs_per_sm"}
    return {**d, "decode_programs_per_sm": FORMS[form]} if FORMS[form] else d


def sweep_errors(model, sweeps) -> dict:
    import numpy as np
    import pandas as pd

    d = pd.concat(far_decode_steps(pd.read_csv(ROOT / f"bench/results/decode-rows-h100-2026-12-06-{name}.steps.csv.gz"),
                                   model) for name in sweeps)
    by = (d["duration_s"] / d["predicted_s"]).groupby([d["context"], d["num_decode_seqs"]]).median()
    err = (by - 1).abs()
    above = err[by.index.get_level_values(1) > 64]
    return {"batches": len(by), "mean_abs_error": float(err.mean()), "max_abs_error": float(err.max()),
            "mean_abs_error_above_64_rows": float(above.mean()) if len(above) else None,
            "measured_over_predicted": {f"{c}x{n}": float(v) for (c, n), v in by.items()},
            "p10_p90": [float(np.percentile(by, 10)), float(np.percentile(by, 90))]}


def sweeps_part() -> dict:
    import pandas as pd

    out = {}
    for source, sweeps in SWEEPS.items():
        profile = json.loads((ROOT / source).read_text())
        rows = pd.read_csv(ROOT / source.replace(".json", ".steps.csv.gz"))
        entry = {"sweeps": list(sweeps)}
        for form in FORMS:
            model, report = refit(rows, in_form(profile, form), source)
            entry[form] = {"held_out": report["mape"], "held_out_by_kind": {k: v["mape"] for k, v in report["by_kind"].items()},
                           "max_context_lanes": model.max_context_lanes, **sweep_errors(model, sweeps)}
        b, r = entry["before"], entry["rounds"]
        print(f"{Path(source).stem}: held-out {b['held_out']:.2%} -> {r['held_out']:.2%} (graph "
              f"{b['held_out_by_kind']['graph']:.2%} -> {r['held_out_by_kind']['graph']:.2%}); sweep {sweeps}: mean "
              f"|error| {b['mean_abs_error']:.2%} -> {r['mean_abs_error']:.2%}, largest {b['max_abs_error']:.1%} -> "
              f"{r['max_abs_error']:.1%}" + (f", above 64 rows {b['mean_abs_error_above_64_rows']:.2%} -> "
                                             f"{r['mean_abs_error_above_64_rows']:.2%}"
                                             if b["mean_abs_error_above_64_rows"] is not None else ""), flush=True)
        out[Path(source).stem] = entry
    return out


def one_recording(rec: dict, tmp: str, ensemble: int) -> tuple[str, dict]:
    import pandas as pd

    from pagesim.validate import validate

    rows, name = pd.read_csv(rec["rows"]), rec["dir"].name
    entry = {"profile": rec["source"]}
    for form in FORMS:
        model, report = refit(rows, in_form(rec["profile"], form), rec["source"])
        path = Path(tmp) / f"{name}-{form}.json"
        model.to_json(path)
        rep = validate(str(rec["dir"]), str(path), out=str(Path(tmp) / f"{name}-{form}"), ensemble=ensemble)
        entry[form] = {**figures(rep), "step_mape_met": rep["step_level"]["mape"] <= STEP_MAPE,
                       "calibration_held_out": report["mape"]}
    return name, entry


def recordings_part(jobs: int, ensemble: int) -> dict:
    names = sorted({Path(d).name for d in glob.glob(str(ROOT / "results/live/*"))})
    recs = recordings(names)
    tmp = tempfile.mkdtemp(prefix="decode-rounds-")
    runs = {}
    with ProcessPoolExecutor(jobs) as pool:
        for name, e in pool.map(one_recording, recs, [tmp] * len(recs), [ensemble] * len(recs)):
            runs[name] = e
            b, r = e["before"], e["rounds"]
            print(f"{name:38s} step {b['step_mape']:.2%} -> {r['step_mape']:.2%}  makespan {b['makespan']:+.2%} -> "
                  f"{r['makespan']:+.2%}  percentiles {b['percentiles_met']} -> {r['percentiles_met']}  kinds "
                  f"{b['kinds_met']} -> {r['kinds_met']}", flush=True)
    keys = ("percentiles_met", "kinds_met", "makespan_met", "step_mape_met")
    met = {}
    for form in FORMS:
        met[form] = {k: sum(e[form][k] for e in runs.values()) for k in keys}
        met[form]["every_target"] = sum(all(e[form][k] for k in keys) for e in runs.values())
        met[form]["mean_step_mape"] = sum(e[form]["step_mape"] for e in runs.values()) / len(runs)
    step = [(e["before"]["step_mape"], e["rounds"]["step_mape"]) for e in runs.values()]
    met["step_mape_better_worse"] = [sum(r < b for b, r in step), sum(r > b for b, r in step)]
    print(json.dumps(met))
    return {"runs": runs, "met": met, "n_runs": len(runs), "ensemble": ensemble}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--recordings", action="store_true", help="also validate every committed recording in both forms")
    ap.add_argument("--jobs", type=int, default=1, help="recordings at once, each in its own process (default 1)")
    ap.add_argument("--ensemble", type=int, default=0, help="jittered free simulations per validation (default 0)")
    args = ap.parse_args(argv)
    if os.path.exists(args.out):
        sys.exit(f"--out {args.out}: exists; give a new file")
    if args.jobs < 1 or args.ensemble < 0:
        sys.exit(f"--jobs {args.jobs} / --ensemble {args.ensemble}: expected a whole number from 1 / from 0")
    result = {"forms": FORMS, "far": FAR, "sweeps": sweeps_part()}
    if args.recordings:
        result["recordings"] = recordings_part(args.jobs, args.ensemble)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
