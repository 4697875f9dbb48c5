"""Graph mixed steps priced by the prefill kernel's own schedule (round 35): what it buys on every recorded live run.

The profile priced a graph mixed step's prefill attention by `waves` = max(query heads x key tiles walked / SMs, the
longest walk): the work spread evenly over the SMs. The engine's prefill kernels do not spread it so: their work
items (one per query tile of the longest chunk, chunk and head) go out in launch order, query tile descending, then
chunk, then head, and the Gluon kernels (the default on sm_90 since round 29) run a persistent grid of one program
per SM for chunks of at most 2048 tokens, program i taking items i, i + SMs, ... (the Triton kernel, and the Gluon
ones for longer chunks: one program per item, each SM taking the next when free). Two chunks' items interleave tile
by tile, so a short chunk after a long context runs its long walks last, behind the other chunk's short ones: a step
of 1511 tokens after 4133 cached and 111 after 17472 takes 338 key tiles where the mean says 148, and one chunk of
4-5 query tiles (128-160 items on 132 SMs) takes two rounds. `prefill_makespan` (pagesim.cost.features) is that
length; a profile fitted to rows with it prices graph mixed steps by mixed_graph_attn_makespan instead of the waves.

For each recording: its profile's calibration rows (the rows the profile was fitted to; the *-r34h bf16 runs, whose
session rows were not kept, take the r31h H100 rows, and longdoc-a the rows of longdoc-b's profile of its session,
which it was validated with) are refitted twice, as `calibrate --refit` does (whole workloads held out, 5 folds) at
the recording's profile's clock share: "waves", the rows as they are (the profile before round 35), and "makespan",
the rows with prefill_makespan added (each row's prefill chunks replayed without a GPU, bench/mixed_pricing.py, with
the kernel rule of the profile's prefill_kernel). The run is then priced step by step as `validate` does
(pagesim.validate.lockstep with the profile's prefill grid, then step_level): step MAPE overall and per kind for
both forms, beside the committed validation's. Needs no GPU.

    python -m bench.mixed_makespan --out F.json [--runs A,B,...] [--profiles DIR]

--profiles DIR writes each calibration's two refitted profiles there (DIR/<profile>-{waves,makespan}.json), for
`python -m pagesim validate RUN --cost-model P --out D`.

Result: bench/results/mixed-makespan-2026-12-06-r35.json (docs/cost-model-history.md, round 35).
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

from bench.mixed_pricing import calibration_chunks, check_walks, recordings  # noqa: E402

FORMS = ("waves", "makespan")
# runs whose own session's calibration rows were not committed or that were validated with another run's profile:
# run -> (profile whose rows and kernel stand in, why)
STAND_INS = {
    **{f"{w}-r34h": ("results/live/azure-code-600-660-r31h/profile.json",
                     "r34h's bf16 calibration rows were not kept: the r31h H100 rows")
       for w in ("azure-code-600-660", "azure-conv-600-660", "kshot-prefix-pressure", "multiturn-200",
                 "pair-conv-contiguous-max", "pair-conv-paged", "preempt-sharegpt-bursty", "swap-sharegpt-bursty",
                 "offload-kshot")},
    **{f"longdoc-a-{r}": (f"results/live/longdoc-b-{r}/profile.json", f"validated with longdoc-b-{r}'s profile")
       for r in ("r31h", "r33", "r34h")},
}


def jobs(names=None) -> list[dict]:
    """(run, profile, rows) for every recording mixed_pricing finds and the STAND_INS."""
    from bench.mixed_pricing import calibration_rows_path

    out = [r for r in recordings(names)]
    have = {r["run"] for r in out}
    for run, (source, why) in STAND_INS.items():
        if run in have or (names and run not in names):
            continue
        d = ROOT / "results/live" / run
        if not (d / "validation/validation.json").is_file():
            continue
        profile = json.loads((ROOT / source).read_text())
        rows = calibration_rows_path(ROOT / source, profile)
        out.append({"run": run, "dir": d, "validation": json.loads((d / "validation/validation.json").read_text()),
                    "source": source, "profile": profile, "rows": rows, "stand_in": why})
    return sorted(out, key=lambda r: r["run"])


def with_makespan(rows: pd.DataFrame, chunks: list, profile: dict) -> pd.DataFrame:
    """The rows with prefill_makespan by the profile's prefill kernel (as a calibration since round 35 records it)."""
    from pagesim.cost.features import prefill_grid, prefill_makespan

    grid = prefill_grid(profile["model"], profile["gpu"], profile.get("prefill_kernel"))
    return rows.assign(prefill_makespan=np.array([prefill_makespan(c, *grid) for c in chunks], dtype=np.int64))


def refit(rows: pd.DataFrame, profile: dict, source: str):
    """The profile refitted from rows as `calibrate --refit` does, at its own clock share; (model, report)."""
    from pagesim.cost.profile import HOST_TIER, ProfileCostModel, fit_profile

    share = float(profile["fit"]["sm_clock"]["sensitivity"])
    model, report = fit_profile(rows, profile["model"], profile["gpu"], holdout="workload",
                                max_num_seqs=(profile.get("config") or {}).get("max_num_seqs", 256),
                                mixed_graph_token_sizes=tuple(profile["mixed_graph_token_sizes"]),
                                clock_sensitivities=(share,), workers=1, prefill_kernel=profile.get("prefill_kernel"),
                                decode_programs_per_sm=tuple(profile.get("decode_programs_per_sm", ())))
    coef = dict(model.coefficients)
    for k in ("swap_s_per_byte", *HOST_TIER):  # measured links, not fitted from the rows
        if k in profile["coefficients"]:
            coef[k] = float(profile["coefficients"][k])
    m = ProfileCostModel(model.model, model.gpu, coef, model.knee_tokens, fit=model.fit, source=f"refit of {source}",
                         graph_batch_sizes=model.graph_batch_sizes, max_context_lanes=model.max_context_lanes,
                         decode_programs_per_sm=model.decode_programs_per_sm,
                         kv_cache_dtype=profile.get("kv_cache_dtype", "auto"),
                         mixed_graph_token_sizes=model.mixed_graph_token_sizes, after_prefill=model.after_prefill,
                         prefill_kernel=profile.get("prefill_kernel"))
    return m, report


def step_figures(run_dir: Path, cost) -> dict:
    """validate's step level of the run with this cost model (lockstep replay with its prefill grid, step_level)."""
    from pagesim.validate import load_run, lockstep, step_level, with_replayed_features

    run = load_run(run_dir)
    decisions, replayed = lockstep(run, cost.prefill_grid)
    assert decisions["n_steps_differing"] == 0, run_dir
    steps, _ = with_replayed_features(run["steps"], replayed)
    mixed_sizes = (run["summary"].get("executor") or {}).get("mixed_graph_token_sizes") or [0]
    report, table = step_level(steps, cost, max(cost.graph_batch_sizes), max(mixed_sizes))
    gm = table[table["kind"] == "graph mixed"]
    ratio = gm["measured_s"] / gm["predicted_s"]
    n_prefill = gm["num_prefill_seqs"].clip(upper=2)
    return {"mape": report["mape"], "by_kind": {k: v["mape"] for k, v in report["by_kind"].items()},
            "n_by_kind": {k: v["n_steps"] for k, v in report["by_kind"].items()},
            "graph_mixed_median_measured_over_predicted_by_prefill_seqs": {
                ("2+" if k == 2 else str(int(k))): float(np.median(ratio[n_prefill == k]))
                for k in sorted(n_prefill.unique())}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", default="", help="comma-separated run names (default: every eligible recording)")
    ap.add_argument("--profiles", default="", help="a folder to write the refitted profiles to")
    args = ap.parse_args(argv)
    from engine.calibration import with_replayed_walks
    from pagesim.config import Config

    recs = jobs(set(args.runs.split(",")) if args.runs else None)
    by_rows: dict = {}
    for r in recs:
        by_rows.setdefault((str(r["rows"]), r["source"]), []).append(r)
    result = {"forms": {"waves": "the rows as they are: prefill attention priced by mixed_graph_attn_waves",
                        "makespan": "the rows with prefill_makespan: priced by mixed_graph_attn_makespan"},
              "calibrations": {}, "runs": {}}
    t0 = time.time()
    for (rows_path, source), group in by_rows.items():
        profile = group[0]["profile"]
        config = Config.from_dict(profile["config"])
        rows = with_replayed_walks(pd.read_csv(rows_path), config, rows_path)
        chunks = calibration_chunks(rows, config)
        check_walks(rows, chunks, rows_path)
        forms = {"waves": rows.drop(columns=["prefill_makespan"], errors="ignore"),
                 "makespan": with_makespan(rows, chunks, profile)}
        cal = result["calibrations"].setdefault(source, {"rows": str(Path(rows_path).relative_to(ROOT)),
                                                         "prefill_kernel": profile.get("prefill_kernel"),
                                                         "runs": [r["run"] for r in group]})
        models = {}
        for form, frame in forms.items():
            model, report = refit(frame, profile, source)
            models[form] = model
            if args.profiles:
                Path(args.profiles).mkdir(parents=True, exist_ok=True)
                model.to_json(Path(args.profiles) / f"{source.replace('/', '_')[:-len('.json')]}-{form}.json")
            cal[form] = {"held_out_mape": report["mape"],
                         "held_out_by_kind": {k: (v or {}).get("mape") for k, v in report["by_kind"].items()},
                         "mixed_coefficients": {k: v for k, v in model.coefficients.items()
                                                if k.startswith("mixed_graph") and "pad" not in k}}
        print(f"{time.time() - t0:6.0f} s  {source}: held-out {cal['waves']['held_out_mape']:.4f} -> "
              f"{cal['makespan']['held_out_mape']:.4f} (graph mixed {cal['waves']['held_out_by_kind']['graph mixed']:.4f}"
              f" -> {cal['makespan']['held_out_by_kind']['graph mixed']:.4f})", file=sys.stderr, flush=True)
        for r in group:
            committed = r["validation"]["step_level"]
            rec = {"profile": source, "rows": cal["rows"], "gpu": profile["gpu"],
                   "prefill_kernel": profile.get("prefill_kernel"),
                   "committed": {"mape": committed["mape"],
                                 "by_kind": {k: v["mape"] for k, v in committed["by_kind"].items()}}}
            if "stand_in" in r:
                rec["stand_in"] = r["stand_in"]
            for form, model in models.items():
                rec[form] = step_figures(r["dir"], model)
            result["runs"][r["run"]] = rec
            a, b = rec["waves"], rec["makespan"]
            print(f"    {r['run']}: step MAPE {a['mape']:.4f} -> {b['mape']:.4f}, graph mixed "
                  f"{a['by_kind'].get('graph mixed', float('nan')):.4f} -> {b['by_kind'].get('graph mixed', float('nan')):.4f}",
                  file=sys.stderr, flush=True)
    result["summary"] = summary(result)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def summary(result: dict) -> dict:
    """Per form: runs with every kind within 5% and step MAPE within 3%, means; the worst per-kind changes."""
    runs = result["runs"]
    out = {}
    for form in FORMS:
        out[form] = {"runs": len(runs),
                     "every_kind_within_5pct": sum(all(v <= 0.05 for v in r[form]["by_kind"].values()) for r in runs.values()),
                     "step_mape_within_3pct": sum(r[form]["mape"] <= 0.03 for r in runs.values()),
                     "mean_step_mape": float(np.mean([r[form]["mape"] for r in runs.values()])),
                     "mean_graph_mixed_mape": float(np.mean([r[form]["by_kind"]["graph mixed"] for r in runs.values()
                                                             if "graph mixed" in r[form]["by_kind"]])),
                     "missing_5pct": {n: {k: round(v, 4) for k, v in r[form]["by_kind"].items() if v > 0.05}
                                      for n, r in runs.items() if any(v > 0.05 for v in r[form]["by_kind"].values())}}
    worse = []
    for n, r in runs.items():
        for k, v in r["makespan"]["by_kind"].items():
            d = v - r["waves"]["by_kind"].get(k, v)
            if d > 0.002:
                worse.append({"run": n, "kind": k, "waves": round(r["waves"]["by_kind"][k], 4), "makespan": round(v, 4)})
    out["kinds_worse_by_over_0.2_points"] = worse
    return out


if __name__ == "__main__":
    sys.exit(main())
