"""Did advancing the calibration's context-building steps change the steps it still times? (issue #13, round 9)

Compares two calibrations of the same workloads made one after the other in one device call: TIMED with every
step timed (engine.calibration.ADVANCE_TOKENS out of reach, as before round 9) and ADVANCED as `calibrate` runs now
(`bash bench/h200_round9.sh OUT ab`). Rows are paired by (workload, step): the plans are the same, so every row
ADVANCED kept is in TIMED. For each step kind, the median duration ratio ADVANCED / TIMED of the rows in workloads
with advanced steps, against rows in workloads without any (the run-to-run drift of the two calibrations), and of
the rows right after an advanced step. Needs no GPU.

    python bench/calibration_ab.py TIMED.steps.csv.gz ADVANCED.steps.csv.gz --out RESULT.json [--force]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def compare(timed, advanced, largest_bucket: int = 1024) -> list[dict]:
    """largest_bucket: the calibrated engine's largest mixed-step token bucket (1024 before round 14)."""
    import numpy as np

    from pagesim.cost.graphs import GRAPH_BATCH_SIZES, runs_mixed_graph

    m = timed.merge(advanced, on=["workload", "step"], suffixes=("_t", "_a"), validate="one_to_one")
    timed_keys, kept = set(zip(timed["workload"], timed["step"])), set(zip(advanced["workload"], advanced["step"]))
    gone = timed_keys - kept
    p, n = m["num_prefill_tokens_t"].to_numpy(), m["num_decode_seqs_t"].to_numpy()
    m["kind"] = np.where(p == 0, "graph decode", np.where(
        runs_mixed_graph(p, n, GRAPH_BATCH_SIZES[-1], largest_bucket), "graph mixed", "eager"))
    m["ratio"] = m["duration_s_a"] / m["duration_s_t"]
    m["workload_advanced"] = m["workload"].isin({w for w, _ in gone})
    m["right_after"] = [(w, s - 1) in gone for w, s in zip(m["workload"], m["step"])]
    out = []
    for (kind, adv, after), g in m.groupby(["kind", "workload_advanced", "right_after"]):
        out.append({"kind": kind, "workload_has_advanced_steps": bool(adv), "right_after_an_advanced_step": bool(after),
                    "rows": int(len(g)), "median_ratio": float(g["ratio"].median()), "mean_ratio": float(g["ratio"].mean())})
    return out


def main(argv=None) -> int:
    import pandas as pd

    from pagesim.errors import UserError
    from pagesim.outputs import prepare_output_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timed")
    ap.add_argument("advanced")
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    ap.add_argument("--largest-bucket", type=int, default=1024,
                    help="the calibrated engine's largest mixed-step token bucket (1024 before round 14, 4096 since)")
    args = ap.parse_args(argv)
    try:
        out = prepare_output_file(args.out, args.force)
        frames = []
        for flag, path in (("TIMED", args.timed), ("ADVANCED", args.advanced)):
            if not Path(path).is_file():
                raise UserError(f"{flag} {path}: no such file; expected a calibration's *.steps.csv.gz")
            frames.append(pd.read_csv(path))
        rows = compare(*frames, largest_bucket=args.largest_bucket)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for r in rows:
        print(f"{r['kind']:13s} workload advanced {r['workload_has_advanced_steps']!s:5s} right after "
              f"{r['right_after_an_advanced_step']!s:5s} rows {r['rows']:5d}  median {r['median_ratio']:.4f}")
    out.write_text(json.dumps({"timed": args.timed, "advanced": args.advanced, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
