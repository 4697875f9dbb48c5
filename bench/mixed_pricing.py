"""Graph mixed steps priced with the prefill kernel's wave-quantised length: does one feature set fit both regimes?

The profile prices a graph mixed step's prefill attention by `waves` = max(query heads x key tiles walked / SMs,
the longest program's walk) (pagesim.cost.profile, mixed_graph_attn_waves), plus the prefill chunks' K/V reads
(mixed_graph_prefill_context, mixed_graph_prefill_shared). Live recordings show two opposite misses (README,
"Simulator accuracy", item 3): short chunks after 2-4k tokens of unshared cached context run at 0.84-0.93 of the
prediction (k-shot and offload windows), chunks after 8k+ tokens at 1.08-1.10 (longdoc-b at 32k).

The engine's prefill kernel (engine/kernels/prefill.py, default launch) runs one program per (sequence, query tile
of BLOCK_M = 128 rows, query head), longest first; each program walks its sequence's keys 0 .. its last row in
BLOCK_N = 128-key tiles; at BLOCK_M x BLOCK_N = 128 x 128, 8 warps and 3 stages a program takes one SM. So the
kernel's length in key tiles is the makespan of those programs over the SMs when each free SM takes the next longest
program (longest-processing-time list scheduling), not the mean `heads x walks / SMs`: a chunk of 5 query tiles after
17k cached tokens has 160 programs of ~140 tiles on 132 SMs, which take two rounds (~280 tiles), while the mean says
170. Below one wave (<= 132 programs) both give the longest walk.

Candidate (b), "lpt": `waves` replaced by that makespan (computed from each step's prefill chunks (cached c, new q),
which the aggregated step columns cannot give for steps of several chunks: the chunks come from replaying the
scheduler, the calibration's workloads with engine.calibration.run_calibration(NoTime()) and each live run with
validate's lockstep; both replays are checked against the recorded prefill_tile_walks). Everything else about the
profile, its fit and its other features is unchanged: the candidate goes in through the rows' walk columns
(prefill_tile_walks 0, prefill_longest_walk the makespan, so the profile's own max() gives the makespan), so the
project's fit (pagesim.cost.profile.fit_profile, held out by workload as `calibrate --refit`) and pricing
(ProfileCostModel.step_time) run as they are. Variant "lpt-noctx" also drops the two prefill-context terms (their
columns zeroed), "lpt-2" assumes two programs per SM (264 slots), as a check of the occupancy assumption, and
"lpt-tilectx" counts each chunk's K/V reads once per query tile (sum of cdiv(q, 128) (c + q); the shared reads
scaled by the same step-level ratio), the K/V traffic of the programs rather than of the chunks.

For each recording with a validation (rounds 17-25: those whose profile has a clock share; older profiles were fitted
by older code), the profile the validation used (validation.json's cost_model.source) is refitted from its own
calibration rows (never from live data) at that profile's clock share (the share the full grid chose; fitting one
share gives the same profile at a seventh of the cost), host-tier and swap link figures copied from it; (a) with the
current features must reproduce the committed validation's graph mixed MAPE (reported side by side). Reported per
recording: MAPE per step kind and overall, and graph mixed measured / predicted (summed) by the longest cached
context of the step's chunks (<1k, 1-4k, 4-8k, 8k+) and by whether its prefill programs exceed one wave; per
calibration the held-out error (whole workloads held out, 5-fold) by kind.

    python -m bench.mixed_pricing --out F.json [--variants current,lpt,lpt-noctx,lpt-2] [--runs A,B]

Needs no GPU: 8.4 min wall (7 CPU min) on 2 cores for the 41 recordings and the four default variants; output over
200 kB is written gzipped (F.json.gz). Results: bench/results/mixed-pricing-h200-2026-12-05.json.gz (41 recordings,
default variants), bench/results/mixed-pricing-h200-2026-12-05-tilectx.json (lpt-tilectx on 8 recordings).
Outcome (2026-12-05): (a) reproduces every committed validation's predictions exactly (max relative difference 0);
"lpt" takes the recordings with every kind within 5% from 34 to 36 of 41 (longdoc-b-r18, -r22c, offload-kshot-r25a
fixed; kshot-prefix-pressure-r17 4.85 -> 5.37% newly missed), the longdoc windows' graph mixed 4.2-7.6% -> 2.8-5.5%,
and leaves the short-chunks-after-unshared-context regime (offload r19pa/pb 6.7/6.9% -> 7.1/7.3%) as it was;
"lpt-noctx" fixes that regime (4.4/3.7%) and breaks the longdoc windows (up to 7.2%): still two regimes.
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BLOCK_M = BLOCK_N = 128  # engine.kernels.prefill.PrefillConfig defaults (bf16 and fp8 launches alike)
CONTEXT_BINS = (0, 1024, 4096, 8192, np.inf)
CONTEXT_LABELS = ("<1k", "1-4k", "4-8k", "8k+")
KINDS = ("graph decode", "graph mixed", "mixed", "prefill", "swap")


# ---- the kernel's programs (pure functions) -------------------------------------------------------
def program_walks(chunks, heads: int, block_m: int = BLOCK_M, block_n: int = BLOCK_N) -> list[int]:
    """Key tiles each prefill program walks, for chunks of (cached c, new q) tokens: query tile j of a chunk (rows
    up to min((j + 1) block_m, q)) walks cdiv(c + its last row, block_n) key tiles, once per query head."""
    out = []
    for c, q in chunks:
        for j in range(-(-q // block_m)):
            out += [-(-(c + min((j + 1) * block_m, q)) // block_n)] * heads
    return out


def lpt_makespan(chunks, heads: int, slots: int) -> int:
    """The prefill kernel's length in key tiles: its programs (program_walks) longest first, each taken by the slot
    (SM) free first; the longest walk when they fit in one wave. 0 without chunks."""
    walks = sorted(program_walks(chunks, heads), reverse=True)
    if len(walks) <= slots:
        return walks[0] if walks else 0
    load = [0] * slots
    for w in walks:
        heapq.heappush(load, heapq.heappop(load) + w)
    return max(load)


def tile_walks(chunks) -> tuple[int, int]:
    """(prefill_tile_walks, prefill_longest_walk) of these chunks (pagesim.cost.features.prefill_walks summed)."""
    from pagesim.cost.features import prefill_walks

    total = longest = 0
    for c, q in chunks:
        w, top = prefill_walks(c, q)
        total += w
        longest = max(longest, top)
    return total, longest


VARIANTS = {  # name -> (slots per SM, keep the prefill-context terms)
    "current": None,
    "lpt": (1, True),
    "lpt-noctx": (1, False),
    "lpt-2": (2, True),
    "lpt-tilectx": (1, "tiles"),
}


def candidate_columns(frame: pd.DataFrame, chunks: list, variant: str, heads: int, sms: int) -> pd.DataFrame:
    """The rows (calibration or live steps, with their chunks in the same order) as the variant's fit and pricing see
    them: the walk columns carry the LPT makespan (ProfileCostModel's waves = max(heads * 0 / SMs, it))."""
    spec = VARIANTS[variant]
    if spec is None:
        return frame
    per_sm, keep_ctx = spec
    out = frame.copy()
    out["prefill_tile_walks"] = 0
    out["prefill_longest_walk"] = np.array([lpt_makespan(c, heads, sms * per_sm) for c in chunks], dtype=np.int64)
    if not keep_ctx:
        out["prefill_context_tokens"] = 0
        out["prefill_shared_tokens"] = 0
    elif keep_ctx == "tiles":  # each chunk's K/V read once per query tile: sum of cdiv(q, BLOCK_M) (c + q)
        tiles = np.array([sum(-(-q // BLOCK_M) * (c + q) for c, q in ch) for ch in chunks], dtype=np.float64)
        ctx = frame["prefill_context_tokens"].to_numpy(dtype=np.float64)
        scale = np.divide(tiles, ctx, out=np.ones_like(tiles), where=ctx > 0)  # shared reads scaled alike
        out["prefill_context_tokens"] = tiles.astype(np.int64)
        out["prefill_shared_tokens"] = np.round(frame["prefill_shared_tokens"].to_numpy() * scale).astype(np.int64)
    return out


# ---- replays that give each step's chunks -----------------------------------------------------------
class _Capture:
    """StepFeatures.from_plan wrapped to keep every plan's prefill chunks (c, q) under (KEY, step id)."""

    def __init__(self):
        from pagesim.cost.features import StepFeatures

        self.chunks: dict = {}
        self.key = None
        self._cls = StepFeatures
        self._orig = StepFeatures.__dict__["from_plan"]
        orig = self._orig.__func__
        capture = self

        def from_plan(cls, plan, *args, **kwargs):  # any of from_plan's arguments (a SimExecutor passes `sharing`)
            capture.chunks[(capture.key, plan.step_id)] = tuple(
                (s.num_computed_tokens, s.num_new_tokens) for s in plan.scheduled if not s.is_decode)
            return orig(cls, plan, *args, **kwargs)

        StepFeatures.from_plan = classmethod(from_plan)

    def close(self):
        self._cls.from_plan = self._orig


def calibration_chunks(rows: pd.DataFrame, config) -> list:
    """Each calibration row's prefill chunks, by replaying its workloads without a GPU (as with_replayed_walks)."""
    import engine.calibration as cal

    named = dict(cal.calibration_workloads(config.resolved_max_model_len))
    wanted = list(dict.fromkeys(rows["workload"].astype(str)))
    cap = _Capture()
    inner, names = cal._workload_rows, iter(wanted)

    def tagged(*args, **kwargs):
        cap.key = next(names)
        return inner(*args, **kwargs)

    cal._workload_rows = tagged
    try:
        cal.run_calibration(cal.NoTime(), config, workloads=[(w, named[w]) for w in wanted], advance=False)
    finally:
        cal._workload_rows = inner
        cap.close()
    return [cap.chunks[(w, int(s))] for w, s in zip(rows["workload"].astype(str), rows["step"])]


def run_chunks(run_dir: Path) -> dict:
    """step -> prefill chunks of a live run, from validate's lockstep replay (which must match it step for step)."""
    from pagesim.validate import load_run, lockstep

    cap = _Capture()
    try:
        report, _ = lockstep(load_run(run_dir))
    finally:
        cap.close()
    if report["n_steps_differing"]:
        raise RuntimeError(f"{run_dir}: lockstep replay differs from the run ({report['first_difference']})")
    return {step: c for (_, step), c in cap.chunks.items()}


def check_walks(frame: pd.DataFrame, chunks: list, where: str) -> None:
    """The replayed chunks must give the recorded prefill walks and K/V reads of every row."""
    got = np.array([tile_walks(c) + (sum(a + b for a, b in c),) for c in chunks], dtype=np.int64).reshape(-1, 3)
    for i, col in enumerate(("prefill_tile_walks", "prefill_longest_walk", "prefill_context_tokens")):
        bad = np.flatnonzero(got[:, i] != frame[col].to_numpy(dtype=np.int64))
        if len(bad):
            raise RuntimeError(f"{where}: replayed chunks disagree with {col} at row {bad[0]}")


# ---- recordings and their profiles ----------------------------------------------------------------
def calibration_rows_path(source: Path, profile: dict) -> Path | None:
    """The calibration rows a profile was fitted to: beside it, the rows its command refitted, or those it wrote."""
    cands = [source.with_name(source.name[:-len(".json")] + ".steps.csv.gz")]
    cmd = profile.get("command", "")
    m = re.search(r"--refit (\S+)", cmd)
    if m:
        cands.append(ROOT / m.group(1))
    m = re.search(r"--out (\S+)", cmd)
    if m:
        cands.append(ROOT / "results/profiles" / (Path(m.group(1)).name[:-len(".json")] + ".steps.csv.gz"))
    return next((c for c in cands if c.is_file()), None)


def recordings(names=None) -> list[dict]:
    out = []
    for v in sorted((ROOT / "results/live").glob("*/validation/validation.json")):
        run = v.parent.parent
        if names and run.name not in names:
            continue
        val = json.loads(v.read_text())
        src = val["cost_model"].get("source")
        if not src or not (ROOT / src).is_file():
            continue
        profile = json.loads((ROOT / src).read_text())
        if not profile.get("mixed_graph_token_sizes") or "sm_clock" not in profile.get("fit", {}):
            continue  # before graph mixed steps, or fitted by code before round 17
        rows = calibration_rows_path(ROOT / src, profile)
        if rows is None:
            continue
        out.append({"run": run.name, "dir": run, "validation": val, "source": src, "profile": profile, "rows": rows})
    return out


# ---- fitting and pricing --------------------------------------------------------------------------
def refit(rows: pd.DataFrame, profile: dict, source: str):
    """The profile refitted from its rows as `calibrate --refit` does, at its own clock share; (model, report)."""
    from pagesim.cost.profile import HOST_TIER, ProfileCostModel, fit_profile

    share = float(profile["fit"]["sm_clock"]["sensitivity"])
    max_num_seqs = (profile.get("config") or {}).get("max_num_seqs", 256)
    model, report = fit_profile(rows, profile["model"], profile["gpu"], holdout="workload", max_num_seqs=max_num_seqs,
                                mixed_graph_token_sizes=tuple(profile["mixed_graph_token_sizes"]),
                                clock_sensitivities=(share,), workers=1,
                                decode_programs_per_sm=tuple(profile.get("decode_programs_per_sm", ())))
    coef = dict(model.coefficients)
    for k in ("swap_s_per_byte", *HOST_TIER):  # measured links, not fitted from the rows
        if k in profile["coefficients"]:
            coef[k] = float(profile["coefficients"][k])
    d = model.describe()
    m = ProfileCostModel(model.model, model.gpu, coef, model.knee_tokens, fit=model.fit, source=f"refit of {source}",
                         graph_batch_sizes=model.graph_batch_sizes, max_context_lanes=model.max_context_lanes,
                         decode_programs_per_sm=model.decode_programs_per_sm,
                         kv_cache_dtype=profile.get("kv_cache_dtype", "auto"),
                         mixed_graph_token_sizes=model.mixed_graph_token_sizes, after_prefill=model.after_prefill)
    assert d["coefficients"].keys() <= coef.keys()
    return m, report


def live_table(run_dir: Path) -> pd.DataFrame:
    """A run's worked steps with every feature step_level prices them by, its kind and measured duration."""
    from pagesim.cost.features import steps_since_prefill
    from pagesim.results import read_steps
    from pagesim.validate import read_validation_steps

    steps = read_steps(run_dir / "steps.parquet")
    since, last = steps_since_prefill(steps["step"], steps["num_prefill_tokens"])
    steps = steps.assign(steps_since_prefill=since, last_prefill_tokens=last)
    v = read_validation_steps(run_dir / "validation/validation_steps.parquet", steps)
    return v.merge(steps[["step", "steps_since_prefill", "last_prefill_tokens"]], on="step", validate="one_to_one")


def predict(model, table: pd.DataFrame) -> np.ndarray:
    """ProfileCostModel.step_time of every row (as validate's step_level)."""
    from pagesim.cost.features import StepFeatures
    from pagesim.validate import STEP_FEATURES

    cols = list(STEP_FEATURES) + ["steps_since_prefill", "last_prefill_tokens"]
    return np.array([model.step_time(StepFeatures(**{c: int(x) for c, x in zip(cols, vals)}))
                     for vals in table[cols].itertuples(index=False)])


def summarise(table: pd.DataFrame, predicted: np.ndarray, chunks: list, heads: int, sms: int) -> dict:
    measured = table["measured_s"].to_numpy()
    ape = np.abs(predicted / measured - 1)
    kind = table["kind"].to_numpy()
    out = {"mape": float(ape.mean()), "by_kind": {}}
    for k in KINDS:
        sel = kind == k
        if sel.any():
            out["by_kind"][k] = {"n": int(sel.sum()), "mape": float(ape[sel].mean()),
                                 "measured_over_predicted": float(measured[sel].sum() / predicted[sel].sum())}
    gm = np.flatnonzero(kind == "graph mixed")
    ctx = np.array([max((c for c, _ in chunks[i]), default=0) for i in gm])
    programs = np.array([len(program_walks(chunks[i], heads)) for i in gm])
    regimes = {}
    for lo, hi, label in zip(CONTEXT_BINS, CONTEXT_BINS[1:], CONTEXT_LABELS):
        for multi in (False, True):
            sel = gm[(ctx >= lo) & (ctx < hi) & ((programs > sms) == multi)]
            if len(sel):
                regimes[f"{label} {'over' if multi else 'within'} one wave"] = {
                    "n": int(len(sel)), "measured_over_predicted": float(measured[sel].sum() / predicted[sel].sum()),
                    "median_ratio": float(np.median(measured[sel] / predicted[sel])), "mape": float(ape[sel].mean())}
    out["graph_mixed_by_context"] = regimes
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="current,lpt,lpt-noctx,lpt-2")
    ap.add_argument("--runs", default="", help="comma-separated run names (default: every eligible recording)")
    args = ap.parse_args(argv)
    from engine.calibration import with_replayed_walks
    from pagesim.config import Config
    from pagesim.specs import get_gpu, get_model

    variants = args.variants.split(",")
    recs = recordings(set(args.runs.split(",")) if args.runs else None)
    by_rows: dict[str, list[dict]] = {}
    for r in recs:
        by_rows.setdefault((str(r["rows"]), r["source"]), []).append(r)
    result = {"variants": {v: VARIANTS[v] for v in variants}, "calibrations": {}, "recordings": {}}
    t0 = time.time()
    live_cache: dict = {}
    for (rows_path, source), group in by_rows.items():
        profile = group[0]["profile"]
        heads, sms = get_model(profile["model"]).num_heads, get_gpu(profile["gpu"]).sm_count
        rows = pd.read_csv(rows_path)
        config = Config.from_dict(profile["config"])
        rows = with_replayed_walks(rows, config, rows_path)
        chunks = calibration_chunks(rows, config)
        check_walks(rows, chunks, rows_path)
        cal = result["calibrations"].setdefault(source, {"rows": os.path.relpath(rows_path, ROOT),
                                                         "runs": [r["run"] for r in group]})
        for variant in variants:
            model, report = refit(candidate_columns(rows, chunks, variant, heads, sms), profile, source)
            mixed = {k: v for k, v in model.coefficients.items() if k.startswith("mixed_graph") and "pad" not in k}
            cal[variant] = {"held_out_mape": report["mape"],
                            "by_kind": {k: (v or {}).get("mape") for k, v in report["by_kind"].items()},
                            "mixed_coefficients": mixed, "clock_share": report["sm_clock"]["sensitivity"]}
            for r in group:
                if r["run"] not in live_cache:
                    table = live_table(r["dir"])
                    steps_chunks = run_chunks(r["dir"])
                    tchunks = [steps_chunks[int(s)] for s in table["step"]]
                    check_walks(table, tchunks, r["run"])
                    live_cache[r["run"]] = (table, tchunks)
                table, tchunks = live_cache[r["run"]]
                pred = predict(model, candidate_columns(table, tchunks, variant, heads, sms))
                rec = result["recordings"].setdefault(r["run"], {
                    "profile": source, "committed": {
                        "mape": r["validation"]["step_level"]["mape"],
                        "by_kind": {k: v["mape"] for k, v in r["validation"]["step_level"]["by_kind"].items()},
                        "reproduced_predictions_max_rel_diff": None}})
                if variant == "current":
                    rec["committed"]["reproduced_predictions_max_rel_diff"] = float(
                        np.max(np.abs(pred / table["predicted_s"].to_numpy() - 1)))
                rec[variant] = summarise(table, pred, tchunks, heads, sms)
            print(f"{time.time() - t0:6.0f} s  {source}  {variant}: held-out {report['mape']:.4f}", file=sys.stderr,
                  flush=True)
        del rows
    result["summary"] = summary(result, variants)
    text = json.dumps(result, indent=1, default=float)
    out = Path(args.out)
    if len(text) > 200_000:
        out = out.with_name(out.name + ".gz") if not out.name.endswith(".gz") else out
        with gzip.open(out, "wt") as f:
            f.write(text)
    else:
        out.write_text(text + "\n")
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def summary(result: dict, variants) -> dict:
    """Per variant: recordings with every kind within 5%, mean step MAPE, graph mixed MAPE per recording."""
    out = {}
    recs = result["recordings"]
    for v in variants:
        every = [name for name, r in recs.items() if all(k["mape"] <= 0.05 for k in r[v]["by_kind"].values())]
        out[v] = {"recordings": len(recs), "every_kind_within_5pct": len(every),
                  "missing_5pct": {name: {k: round(x["mape"], 4) for k, x in r[v]["by_kind"].items() if x["mape"] > 0.05}
                                   for name, r in recs.items() if name not in every},
                  "mean_step_mape": float(np.mean([r[v]["mape"] for r in recs.values()])),
                  "mean_graph_mixed_mape": float(np.mean([r[v]["by_kind"]["graph mixed"]["mape"] for r in recs.values()
                                                          if "graph mixed" in r[v]["by_kind"]])),
                  "held_out_calibration_mape": {s: c[v]["held_out_mape"] for s, c in result["calibrations"].items()}}
    return out


if __name__ == "__main__":
    sys.exit(main())
