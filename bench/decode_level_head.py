"""Would a decode level measured just before a live run predict the run's level? (issue #13, round 31)

For each validated live run with enough graph decode steps: the median measured / predicted of its first HEAD graph
decode steps (what a short timing before the clock could measure at best: the same engine, minutes later) and the
total measured / predicted time of the rest, before and after dividing the predictions' level by the head's. Prints a
line per run and the mean and median |error| of the rest's total time both ways; writes them as JSON. Needs no GPU.

    python bench/decode_level_head.py [RUN ...] [--head 200] [--min-steps 1000] --out RESULT.json [--force]

RUN defaults to every run under results/live/ with a validation (validation/validation_steps.parquet).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pagesim.outputs import check_output_file  # noqa: E402


def head_level(run: Path, head: int) -> dict | None:
    """The run's head level and the rest's total ratio (None: fewer than 5 x head graph decode steps)."""
    import pandas as pd

    steps = pd.read_parquet(run / "validation" / "validation_steps.parquet", columns=["step", "kind", "measured_s",
                                                                                        "predicted_s"])
    decode = steps[steps["kind"] == "graph decode"].sort_values("step")
    if len(decode) < 5 * head:
        return None
    first, rest = decode.iloc[:head], decode.iloc[head:]
    level = float((first["measured_s"] / first["predicted_s"]).median())
    total = float(rest["measured_s"].sum() / rest["predicted_s"].sum())
    return {"run": run.name, "decode_steps": len(decode), "head_level": level, "rest_total_ratio": total,
            "rest_error_before": abs(total - 1), "rest_error_after": abs(total / level - 1)}


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", type=Path, help="live run directories (default: every validated one)")
    p.add_argument("--head", type=int, default=200, help="graph decode steps that stand for a pre-run timing")
    p.add_argument("--min-steps", type=int, default=1000, help="runs with fewer graph decode steps are left out")
    p.add_argument("--out", required=True)
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    out = check_output_file(p, args.out, args.force)
    runs = args.runs or sorted(d for d in (ROOT / "results" / "live").iterdir()
                               if (d / "validation" / "validation_steps.parquet").is_file())
    rows = [r for r in (head_level(run, args.head) for run in runs) if r and r["decode_steps"] >= args.min_steps]
    if not rows:
        p.error("no run has enough graph decode steps")
    for r in rows:
        print(f"{r['run']:36s} head {r['head_level']:.3f}  rest {r['rest_total_ratio']:.3f}  "
              f"|error| {r['rest_error_before']:.4f} -> {r['rest_error_after']:.4f}")
    before = np.array([r["rest_error_before"] for r in rows])
    after = np.array([r["rest_error_after"] for r in rows])
    summary = {"runs": len(rows), "head": args.head, "mean_error_before": before.mean(),
               "mean_error_after": after.mean(), "median_error_before": float(np.median(before)),
               "median_error_after": float(np.median(after))}
    print(f"{len(rows)} runs: rest's |error| mean {before.mean():.4f} -> {after.mean():.4f}, median "
          f"{np.median(before):.4f} -> {np.median(after):.4f}")
    out.write_text(json.dumps({"summary": summary, "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
