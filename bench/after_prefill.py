"""Decode steps after a prefill (issue #13, round 18): measured / predicted of decode-only steps by how many steps
they come after the last step with prefill tokens (StepFeatures.steps_since_prefill), in live runs (each validated:
RUN/validation/validation_steps.parquet, or the folder --validation names) and in calibrations (a profile's
PROFILE.steps.csv.gz against that profile, at each row's own SM clock). Needs no GPU.

    python bench/after_prefill.py [--run RUN[=VALIDATION_DIR] ...] [--profile P.json ...] --out RESULT.json [--force]

A flat row means the profile prices the steps after a prefill as they ran; a row falling with the steps since it
means they ran slower than the steps far from one (the profile's after_prefill factors, fit_profile, remove that).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BINS = (1, 2, 3, 5, 8, 12, 20, 35, 60, 100)


def by_bucket(ratio: np.ndarray, since: np.ndarray) -> dict:
    """Median ratio and count per bucket of steps_since_prefill ([1, 2), ..., [100, inf))."""
    cut = pd.cut(since, list(BINS) + [np.inf], right=False)
    g = pd.Series(ratio).groupby(cut, observed=True)
    return {str(k): {"median": round(float(m), 4), "n": int(n)} for (k, m), n in zip(g.median().items(), g.size())}


def run_ratios(run: Path, validation: Path) -> tuple[np.ndarray, np.ndarray]:
    from pagesim.cost.features import steps_since_prefill
    from pagesim.results import read_steps
    from pagesim.validate import read_validation_steps

    steps = read_steps(run / "steps.parquet")
    v = read_validation_steps(validation / "validation_steps.parquet", steps).sort_values("step")
    since = steps_since_prefill(steps["step"], steps["num_prefill_tokens"])[0]
    v = v.merge(pd.DataFrame({"step": steps["step"], "since": since}), on="step", validate="one_to_one")
    decode = v[(v["num_prefill_tokens"] == 0) & (v["num_decode_seqs"] > 0)]
    return (decode["measured_s"] / decode["predicted_s"]).to_numpy(), decode["since"].to_numpy()


def calibration_ratios(profile: Path) -> tuple[np.ndarray, np.ndarray]:
    from pagesim.cost.profile import ProfileCostModel, calibration_steps_since_prefill

    model = ProfileCostModel.from_json(profile)
    rows = pd.read_csv(profile.with_suffix(".steps.csv.gz"))
    rows["steps_since_prefill"], rows["last_prefill_tokens"] = calibration_steps_since_prefill(rows)
    clock = model.fit.get("sm_clock")
    at_own_clock = model.forward_times(rows)
    if clock and "sm_clock_mhz" in rows:
        at_own_clock = at_own_clock * (1 + clock["sensitivity"] * (clock["reference_mhz"] / rows["sm_clock_mhz"] - 1))
    decode = ((rows["num_prefill_tokens"] == 0) & (rows["num_decode_seqs"] > 0)).to_numpy()
    return (rows["duration_s"].to_numpy() / np.asarray(at_own_clock))[decode], rows["steps_since_prefill"].to_numpy()[decode]


def main(argv=None) -> int:
    from pagesim.errors import UserError
    from pagesim.outputs import check_output_file

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", action="append", default=[], help="RUN or RUN=VALIDATION_DIR")
    p.add_argument("--profile", action="append", default=[], help="a profile beside its PROFILE.steps.csv.gz")
    p.add_argument("--out", required=True)
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    check_output_file(p, args.out, args.force)
    out = {}
    try:
        for spec in args.run:
            run, _, val = spec.partition("=")
            out[Path(run).name] = by_bucket(*run_ratios(Path(run), Path(val) if val else Path(run) / "validation"))
        for prof in args.profile:
            out[Path(prof).name] = by_bucket(*calibration_ratios(Path(prof)))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, row in out.items():
        print(f"{name:48s} " + " ".join(f"{k}:{v['median']:.3f}({v['n']})" for k, v in row.items()))
    Path(args.out).write_text(json.dumps({"bins": list(BINS), "median_measured_over_predicted": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
