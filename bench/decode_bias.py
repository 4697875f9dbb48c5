"""Where does a window's graph decode bias come from? (issue #13, rounds 15-16)

For profiles (each with the calibration steps it was fitted to, PROFILE.steps.csv.gz or a `live --calibrate` run's
profile.steps.csv.gz) against live runs (each validated: RUN/validation/validation_steps.parquet, whose lockstep-
replayed features the predictions use), prints and writes:

- bias: per profile and run, the graph decode steps' median of measured / predicted - 1 and the total ratio;
- host: per batch size, the median host time of a decode step (duration - device time between CUDA events,
  gpu_time_s) in each calibration (rows since round 16 carry it) and each run;
- level split: the run's graph decode level (measured / predicted, summed), its device part (device time against the
  prediction less the calibration's host share) and its host share against the calibration's (round 47);
- matched: each run decode step after a decode step against the calibration's steady decode rows (after a decode
  step too) of the same batch whose summed and longest context are within 5%: the median ratio of their device
  times (the same step, timed in the two settings);
- with --clocks (a folder with the call's nvidia-smi clocks.csv.gz): each profile refitted on the rows whose lowest
  SM clock within 25 ms of the step reached a threshold (eager rows all kept), and the runs' bias under it.

Needs no GPU.

    python bench/decode_bias.py --profile P.json [--profile Q.json] --run RUN [--run RUN2] [--clocks DIR]
                                --out RESULT.json [--force]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

BATCHES = (1, 2, 4, 8, 12, 16, 24, 32)
THRESHOLDS_MHZ = (0, 1800, 1900, 1950)


def calibration_rows(profile: Path):
    import pandas as pd

    from pagesim.cost.profile import calibration_rows_beside
    from pagesim.errors import UserError

    rows = calibration_rows_beside(profile)
    if rows is None:
        raise UserError(f"--profile {profile}: no calibration steps beside it (PROFILE.steps.csv.gz)")
    return pd.read_csv(rows)


def run_rows(run: Path):
    from pagesim.errors import UserError
    from pagesim.results import read_steps
    from pagesim.validate import read_validation_steps

    val = run / "validation" / "validation_steps.parquet"
    if not val.is_file():
        raise UserError(f"--run {run}: no {val}; run `python -m pagesim validate {run}` first")
    steps = read_steps(run / "steps.parquet")
    v = read_validation_steps(val, steps)
    cols = ["step", "gpu_time_s"] + (["queue_host_s"] if "queue_host_s" in steps else [])  # since round 47
    return v.merge(steps[cols], on="step", validate="one_to_one")


def bias(model, rows) -> dict:
    import numpy as np

    pred = model.forward_times(rows)
    d = (rows["kind"] == "graph decode").to_numpy()
    measured = rows["measured_s"].to_numpy()
    e = measured / pred - 1
    return {"decode_median": float(np.median(e[d])), "total_ratio": float(measured.sum() / pred.sum()),
            "mape": float(np.abs(pred / measured - 1).mean())}  # validate's step MAPE


def step_seconds(rows):
    """Each step's time: a calibration row's duration_s, a validated run's measured_s."""
    return rows["duration_s"] if "duration_s" in rows else rows["measured_s"]


def host_ms(rows) -> dict:
    d = rows[rows["num_prefill_tokens"] == 0]
    out = {}
    for b in BATCHES:
        g = d[d["num_decode_seqs"] == b]
        if len(g) >= 5:
            out[b] = float((step_seconds(g) - g["gpu_time_s"]).median() * 1e3)
    return out


def matched_device_ratio(cal, run) -> dict:
    """Steady decode steps only on both sides: a decode step right after a prefill step runs slower in both
    (pagesim.cost.profile.fit_profile)."""
    import numpy as np

    from pagesim.cost.profile import decode_after_prefill

    c = cal[(cal["num_prefill_tokens"] == 0) & ~decode_after_prefill(cal)]
    run = run.sort_values("step")
    r = run[(run["kind"] == "graph decode") & (run["kind"].shift(1) == "graph decode")]
    ratios = []
    for b, g in r.groupby("num_decode_seqs"):
        cb = c[c["num_decode_seqs"] == b]
        if cb.empty:
            continue
        ctx, lng, t = (cb[k].to_numpy() for k in ("decode_context_tokens", "max_decode_context", "gpu_time_s"))
        for x, y, gt in zip(g["decode_context_tokens"], g["max_decode_context"], g["gpu_time_s"]):
            m = (np.abs(ctx - x) <= 0.05 * x) & (np.abs(lng - y) <= 0.05 * y)
            if m.any():
                ratios.append(gt / np.median(t[m]))
    return {"matched_steps": len(ratios), "median_ratio": float(np.median(ratios)) if ratios else None}


def level_split(model, cal, run) -> dict:
    """A run's graph decode level (measured / predicted, summed) split in two: its device time against the
    prediction less the calibration's host share (what the profile fitted as device time), and its host share
    against the calibration's (the host time the profile did not see): level = device x (1 - calibration host) /
    (1 - run host), so a level away from 1 with a device part near 1 is host time. A host share is the time off the
    device plus, where both sides recorded it (round 47 on), the host's queueing within the device time. The split is
    pagesim.cost.host_share's, which `validate` reports as step_level.decode_host, here with `model`'s prediction.
    Files written before round 48 (bench/results/decode-bias-r46-level-split.json, decode-bias-r47*.json) hold the time
    off the device alone as the host shares, their queueing shares apart."""
    from pagesim.cost.host_share import decode_host_shares, run_decode_split

    d = run[run["kind"] == "graph decode"]
    readings = [c for c in ("gpu_time_s", "queue_host_s") if c in d]  # the run's, beside the table's columns
    table = d.drop(columns=readings).assign(predicted_s=model.forward_times(d))
    s = run_decode_split(table, d[["step", *readings]], decode_host_shares(cal, model.graph_batch_sizes[-1]))
    return {"level": s["level"], "steps": s["steps"], "device": s["device"],
            "calibration_host_share": s["calibration_host_share"], "run_host_share": s["run_host_share"],
            "host_excess": s["run_host_share"] - s["calibration_host_share"], "queueing_counted": s["queueing_counted"],
            "calibration_queue_host_share": s["calibration_queue_share"], "run_queue_host_share": s["run_queue_share"]}


def lowest_clock(rows, clocks):
    import numpy as np

    cu = (clocks["t"] - np.datetime64("1970-01-01")).dt.total_seconds().to_numpy()
    sm = clocks["sm_mhz"].to_numpy()
    start = (rows["started_unix"] + rows["time_s"]).to_numpy()
    lo = np.searchsorted(cu, start - 0.025)
    hi = np.searchsorted(cu, start + rows["duration_s"].to_numpy() + 0.025)
    return np.array([sm[a:b].min() if b > a else np.nan for a, b in zip(lo, hi)])


def main(argv=None) -> int:
    from clock_phases import read_clocks

    from pagesim.cost.profile import ProfileCostModel, fit_profile
    from pagesim.errors import UserError
    from pagesim.outputs import prepare_output_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", action="append", required=True, help="a profile JSON (repeatable)")
    ap.add_argument("--run", action="append", required=True, help="a validated live run directory (repeatable)")
    ap.add_argument("--clocks", help="a folder with the call's clocks.csv.gz: refit on unthrottled rows")
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = ap.parse_args(argv)
    try:
        out = prepare_output_file(args.out, args.force)
        profiles = [Path(p) for p in args.profile]
        for p in profiles:
            if not p.is_file():
                raise UserError(f"--profile {p}: no such file")
        runs = {Path(r).name: run_rows(Path(r)) for r in args.run}
        cals = {str(p): calibration_rows(p) for p in profiles}
        clocks = None
        if args.clocks:
            path = Path(args.clocks) / "clocks.csv.gz"
            if not path.is_file():
                raise UserError(f"--clocks {args.clocks}: no clocks.csv.gz in it")
            clocks = read_clocks(path)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = {"bias": [], "host_ms": {}, "matched_device_ratio": [], "level_split": [], "unthrottled_refit": []}
    for p in profiles:
        model, cal = ProfileCostModel.from_json(p), cals[str(p)]
        result["host_ms"][p.name if p.name != "profile.json" else str(p)] = host_ms(cal) if "gpu_time_s" in cal else None
        for name, rows in runs.items():
            b = bias(model, rows) | {"profile": str(p), "run": name}
            result["bias"].append(b)
            print(f"{p.name[-40:]:40s} {name:36s} decode bias {100 * b['decode_median']:+.2f}%  total "
                  f"{b['total_ratio']:.4f}  MAPE {100 * b['mape']:.2f}%")
            if "gpu_time_s" in cal:
                m = matched_device_ratio(cal, rows) | {"profile": str(p), "run": name}
                result["matched_device_ratio"].append(m)
                ratio = "-" if m["median_ratio"] is None else f"{m['median_ratio']:.4f}"
                print(f"{'':40s} {'':36s} device time run / calibration, matched steps: {ratio} "
                      f"({m['matched_steps']} steps)")
                ls = level_split(model, cal, rows) | {"profile": str(p), "run": name}
                result["level_split"].append(ls)
                print(f"{'':40s} {'':36s} graph decode level {ls['level']:.4f} = device {ls['device']:.4f}, host "
                      f"share {100 * ls['run_host_share']:.2f}% against {100 * ls['calibration_host_share']:.2f}%")
        if clocks is not None and "started_unix" in cal:
            cal = cal.assign(sm_low=lowest_clock(cal, clocks))
            mixed = tuple(json.loads(p.read_text()).get("mixed_graph_token_sizes", ()))
            for thr in THRESHOLDS_MHZ:
                # the plain fit (rows without their in-process clock), on fewer rows
                sel = cal[(cal["sm_low"] >= thr) | (cal["num_prefill_tokens"] > 0)].drop(columns="sm_clock_mhz",
                                                                                       errors="ignore")
                model_t, report = fit_profile(sel, model.model, model.gpu, holdout="rows", mixed_graph_token_sizes=mixed)
                row = {"profile": str(p), "min_sm_mhz": thr, "rows": int(len(sel)), "fit_mape": report["mape"],
                       "runs": {name: bias(model_t, rows) for name, rows in runs.items()}}
                result["unthrottled_refit"].append(row)
                print(f"  refit on rows >= {thr} MHz ({len(sel)} rows, held-out {100 * report['mape']:.2f}%): " + "  ".join(
                    f"{n} {100 * r['decode_median']:+.2f}%" for n, r in row["runs"].items()))
    for name, rows in runs.items():
        result["host_ms"][name] = host_ms(rows)
    print("host ms per decode step by batch size:")
    for name, h in result["host_ms"].items():
        if h:
            print(f"  {name[-40:]:40s} " + "  ".join(f"b{b} {v:.3f}" for b, v in h.items()))
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
