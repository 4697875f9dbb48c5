"""What a profile's shared-read terms (graph_shared_tokens, decode_shared_tokens) buy on recorded live runs.

For each run: refit the calibration steps its profile was fitted to with decode_shared_tokens left out (a
sharing-blind profile from the same measurements), validate the run with it, and print both validations'
step MAPE (overall, graph decode) and request-level errors side by side. Needs no GPU.

    python bench/sharing_ablation.py RUN_DIR[=STEPS.csv] ... --out OUT_DIR [--force]

STEPS.csv defaults to RUN_DIR/profile.steps.csv.gz (written by `live --calibrate`); a run recorded with --profile P
needs P's steps (P with .steps.csv.gz). The run's own validation (RUN_DIR/validation/validation.json, from
`python -m pagesim validate RUN_DIR`) is the sharing side. Writes OUT_DIR/RUN/ (the blind profile and its
validation) and OUT_DIR/sharing-ablation.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

METRICS = [f"{m}_{p}" for m in ("ttft_s", "tpot_s", "e2e_s") for p in ("p50", "p90", "p99")] + ["makespan_s"]


def figures(validation: dict) -> dict:
    s, r = validation["step_level"], validation["request_level"]
    return {"mape": s["mape"], "graph_decode_mape": s["by_kind"].get("graph decode", {}).get("mape"),
            **{m: r[m]["rel_error"] for m in METRICS if m in r}}


def run_specs(description: str, *, needs_own_validation: bool = False):
    """The command line shared by the profile ablations: RUN_DIR[=STEPS.csv] ... --out OUT_DIR [--force], every input
    checked before any work. Returns [(run_dir, steps, own validation.json)], the prepared OUT_DIR and --force."""
    from pagesim.errors import UserError
    from pagesim.outputs import prepare_output_dir

    p = argparse.ArgumentParser(description=description)
    p.add_argument("runs", nargs="+", help="RUN_DIR or RUN_DIR=STEPS.csv")
    p.add_argument("--out", required=True)
    p.add_argument("--force", action="store_true", help="replace an existing OUT_DIR")
    args = p.parse_args()
    jobs = []
    for spec in args.runs:
        run_dir, _, steps = spec.partition("=")
        run_dir = Path(run_dir)
        steps = Path(steps) if steps else run_dir / "profile.steps.csv.gz"
        own = run_dir / "validation" / "validation.json"
        needed = [(steps, "calibration steps"), (run_dir / "summary.json", "summary: not a run directory")]
        if needs_own_validation:
            needed.append((own, "the run's own validation (python -m pagesim validate)"))
        for path, what in needed:
            if not path.is_file():
                raise SystemExit(f"error: {spec}: no {path} ({what})")
        jobs.append((run_dir, steps, own))
    try:
        return jobs, prepare_output_dir(args.out, args.force), args.force
    except UserError as e:
        raise SystemExit(f"error: {e}") from None  # the message names --out


def main() -> int:
    import pandas as pd

    from pagesim.cli import main as pagesim_main
    from pagesim.validate import load_run, validate

    jobs, out, force = run_specs(__doc__.splitlines()[0], needs_own_validation=True)
    result = {}
    for run_dir, steps, own in jobs:
        config = load_run(run_dir)["config"]
        d = out / run_dir.name
        d.mkdir(exist_ok=True)  # a fresh OUT_DIR, or --force
        rows = pd.read_csv(steps)
        rows.drop(columns=["decode_shared_tokens"], errors="ignore").to_csv(d / "blind.steps.csv.gz", index=False)
        code = pagesim_main(["calibrate", "--refit", str(d / "blind.steps.csv.gz"), "--out", str(d / "blind.json"),
                             "--model", config.model, "--gpu", config.gpu, "--kv-cache-dtype", config.kv_cache_dtype])
        if code:
            raise SystemExit(f"error: refitting {steps} failed")
        blind = validate(run_dir, str(d / "blind.json"), d / "validation", force=force, ensemble=0)
        result[run_dir.name] = {"steps": str(steps), "sharing": figures(json.loads(own.read_text())),
                                "blind": figures(blind)}
        a, b = result[run_dir.name]["sharing"], result[run_dir.name]["blind"]
        print(f"{run_dir.name}: step MAPE {a['mape']:.1%} with the sharing terms, {b['mape']:.1%} without "
              f"(graph decode {a['graph_decode_mape']:.1%} / {b['graph_decode_mape']:.1%}); "
              + ", ".join(f"{m} {a[m]:+.1%} / {b[m]:+.1%}" for m in METRICS if m in a and m in b))
    (out / "sharing-ablation.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / 'sharing-ablation.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
