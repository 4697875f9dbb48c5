"""Is the live windows' decode level the profile's clock share? (issue #13, round 33)

A calibration runs much of its time at the power cap (decode steps at ~1.8 GHz median) while a window holds the top
SM clock, and `fit_profile` brings every calibration step to the top clock with one share s of its time scaling with
the clock (pagesim/cost/profile.py). If decode steps scale less than s says, a window's decode steps are priced too
fast. Two checks, from committed calibration rows and live runs only (no GPU):

- slope: each calibration's graph decode rows' measured / predicted (its own refitted profile) against
  reference / clock - 1, within each workload (the workload's mean taken out): the decode steps' own share; the same
  for the rows with prefill tokens;
- share 0: each session's rows refitted as `calibrate --refit` does, and again with the graph decode rows' clocks set
  to the reference (so the fit leaves them as measured: a share of 0 for them, the other rows' share chosen as
  before), each window of that session validated with both profiles (`validate --cost-model`).

    python bench/decode_clock_share.py --out RESULT.json [--force]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pagesim.live_targets import PERCENTILES  # noqa: E402
from pagesim.outputs import check_output_file  # noqa: E402

# bf16 calibrations with clocks, each with the committed windows recorded with it (the run's summary names it)
SESSIONS = {
    "h200-llama-3-8b-2026-12-03-r17": ["kshot-prefix-pressure-r17", "preempt-sharegpt-bursty-r17"],
    "h200-llama-3-8b-2026-12-03-r17c": ["kshot-prefix-pressure-r17c", "multiturn-200-r17c", "preempt-sharegpt-bursty-r17c"],
    "h200-llama-3-8b-2026-12-03-r18": ["azure-code-600-660-r18", "azure-conv-600-660-r18", "pair-conv-contiguous-max-r18",
                                       "pair-conv-paged-r18", "swap-sharegpt-bursty-r18"],
    "h200-llama-3-8b-2026-12-03-r18c": ["azure-conv-600-660-r18c", "kshot-prefix-pressure-r18c", "multiturn-200-r18c",
                                        "preempt-sharegpt-bursty-r18c"],
    "h200-llama-3-8b-2026-12-03-r19": ["azure-conv-600-660-r19a", "azure-conv-600-660-r19b", "kshot-prefix-pressure-r19a",
                                       "kshot-prefix-pressure-r19b"],
    "h200-llama-3-8b-2026-12-03-r19p": ["preempt-sharegpt-bursty-r19pa", "preempt-sharegpt-bursty-r19pb",
                                        "swap-sharegpt-bursty-r19pa", "swap-sharegpt-bursty-r19pb"],
    "h200-llama-3-8b-2026-12-05-r25w": ["azure-conv-600-660-r25w", "azure-code-600-660-r25w", "kshot-prefix-pressure-r25w",
                                        "preempt-sharegpt-bursty-r25w"],
    "h100-llama-3-8b-2026-12-05-r31h": ["azure-code-600-660-r31h", "azure-conv-600-660-r31h", "kshot-prefix-pressure-r31h",
                                        "multiturn-200-r31h", "pair-conv-contiguous-max-r31h", "pair-conv-paged-r31h",
                                        "preempt-sharegpt-bursty-r31h", "swap-sharegpt-bursty-r31h"],
}


def graph_decode(rows, max_graph: int = 256):
    return (rows["num_prefill_tokens"] == 0) & (rows["num_decode_seqs"] > 0) & (rows["num_decode_seqs"] <= max_graph)


def slopes(rows, profile_path: Path) -> dict:
    """Within-workload slope of measured / predicted - 1 on reference / clock - 1, graph decode and prefill rows."""
    from pagesim.cost.profile import ProfileCostModel, calibration_steps_since_prefill

    model = ProfileCostModel.from_json(profile_path)
    rows = rows.copy()
    rows["steps_since_prefill"], rows["last_prefill_tokens"] = calibration_steps_since_prefill(rows)
    x = rows["sm_clock_mhz"].max() / rows["sm_clock_mhz"] - 1
    y = rows["duration_s"] / model.forward_times(rows) - 1
    moves = (rows[[c for c in ("num_swap_out_blocks", "num_swap_in_blocks", "num_copy_blocks") if c in rows]]
             .sum(axis=1) == 0)
    out = {}
    for kind, sel in (("graph_decode", graph_decode(rows) & (rows["steps_since_prefill"] != 1)),
                      ("prefill", rows["num_prefill_tokens"] > 0)):
        sel = sel & moves
        w = rows.loc[sel, "workload"]
        xd = x[sel] - x[sel].groupby(w).transform("mean")
        yd = y[sel] - y[sel].groupby(w).transform("mean")
        out[kind] = {"slope": float((xd * yd).sum() / (xd ** 2).sum()), "rows": int(sel.sum())}
    return out


def refit(rows_path: Path, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "pagesim", "calibrate", "--refit", str(rows_path), "--out", str(out),
                    "--force"], check=True, capture_output=True, cwd=ROOT)


def validate(run: str, profile: Path, out: Path) -> dict:
    import pandas as pd

    subprocess.run([sys.executable, "-m", "pagesim", "validate", str(ROOT / "results/live" / run), "--cost-model",
                    str(profile), "--out", str(out), "--force", "--ensemble", "0"], check=True, capture_output=True,
                   cwd=ROOT)  # request_level only: no ensemble
    v = json.loads((out / "validation.json").read_text())
    steps = pd.read_parquet(out / "validation_steps.parquet", columns=["kind", "measured_s", "predicted_s"])
    decode = steps[steps["kind"] == "graph decode"]
    request = v["request_level"]
    missed = [k for k, e in request.items()
              if k.split("_")[0] in ("ttft", "tpot", "e2e") and abs(e["rel_error"]) > PERCENTILES[k.rsplit("_", 1)[1]]]
    return {"step_mape": v["step_level"]["mape"],
            "worst_kind_mape": max(d["mape"] for d in v["step_level"]["by_kind"].values()),
            "decode_level": float((decode["measured_s"] / decode["predicted_s"]).median()),
            "makespan_error": request["makespan_s"]["rel_error"], "percentiles_missed": missed}


def tally(results: list[dict]) -> dict:
    return {"windows": len(results),
            "step_mape_within_3pct": sum(r["step_mape"] <= 0.03 for r in results),
            "every_kind_within_5pct": sum(r["worst_kind_mape"] <= 0.05 for r in results),
            "makespan_within_1pct": sum(abs(r["makespan_error"]) <= 0.01 for r in results),
            "every_percentile_within_target": sum(not r["percentiles_missed"] for r in results),
            "mean_step_mape": sum(r["step_mape"] for r in results) / len(results)}


def main() -> int:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = p.parse_args()
    out = check_output_file(p, args.out, args.force)
    report = {"sessions": {}}
    every = {"fitted_share": [], "graph_decode_share_0": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, runs in SESSIONS.items():
            rows_path = ROOT / "results/profiles" / f"{name}.steps.csv.gz"
            rows = pd.read_csv(rows_path)
            fitted, zero_dir = tmp / f"{name}.json", tmp / "share0"
            zero_dir.mkdir(exist_ok=True)
            refit(rows_path, fitted)
            # the same rows with the graph decode steps at the reference clock, beside a copy of their own profile
            # (refit reads the model, GPU and engine buckets from it)
            zero_rows = zero_dir / rows_path.name
            rows.assign(sm_clock_mhz=rows["sm_clock_mhz"].where(~graph_decode(rows), rows["sm_clock_mhz"].max())
                        ).to_csv(zero_rows, index=False)
            (zero_dir / f"{name}.json").write_text((ROOT / "results/profiles" / f"{name}.json").read_text())
            zero = tmp / f"{name}-share0.json"
            refit(zero_rows, zero)
            share = json.loads(fitted.read_text())["fit"]["sm_clock"]["sensitivity"]
            session = {"fitted_share": share, "slopes": slopes(rows, fitted), "windows": {}}
            for run in runs:
                both = {k: validate(run, prof, tmp / f"v-{k}-{run}")
                        for k, prof in (("fitted_share", fitted), ("graph_decode_share_0", zero))}
                session["windows"][run] = both
                for k, r in both.items():
                    every[k].append(r)
                print(f"{run:32s} step MAPE {both['fitted_share']['step_mape']:.2%} -> "
                      f"{both['graph_decode_share_0']['step_mape']:.2%}, decode level "
                      f"{both['fitted_share']['decode_level']:.4f} -> {both['graph_decode_share_0']['decode_level']:.4f}, "
                      f"makespan {both['fitted_share']['makespan_error']:+.2%} -> "
                      f"{both['graph_decode_share_0']['makespan_error']:+.2%}", flush=True)
            session["tally"] = {k: tally([w[k] for w in session["windows"].values()]) for k in every}
            report["sessions"][name] = session
            s = session["slopes"]
            print(f"{name}: share {share}, slopes graph decode {s['graph_decode']['slope']:.3f} prefill "
                  f"{s['prefill']['slope']:.3f}; mean step MAPE {session['tally']['fitted_share']['mean_step_mape']:.2%}"
                  f" -> {session['tally']['graph_decode_share_0']['mean_step_mape']:.2%}", flush=True)
    report["tally"] = {k: tally(v) for k, v in every.items()}
    print(json.dumps(report["tally"], indent=1))
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
