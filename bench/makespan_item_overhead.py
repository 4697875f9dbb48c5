"""Would a fixed cost per work item in the prefill kernel's schedule price graph mixed steps better? (issue #13, round 36)

prefill_makespan (pagesim.cost.features) counts the prefill kernel's length in key tiles: each work item (query tile,
chunk, head) costs its walk. longdoc-b-r35ch's graph mixed steps, the one recording whose calibration recorded the
makespan, ran at 0.95 of the prediction, most of all single chunks of 200-1,100 tokens after 17-27k cached tokens
(0.82-0.90), whose items are few and long. If each item also cost a fixed O key tiles (its prologue and epilogue), the
fit would price long walks lower. This replays the makespan with O added to every non-empty item (the kernel's
launch order and grid unchanged), refits every committed calibration's rows as `calibrate --refit` does and prices
each recording step by step as `validate` does (bench.mixed_makespan's refit and step_figures, with
features.prefill_makespan replaced for the run). Needs no GPU; ~15 minutes for four values over the 77 recordings.

    python -m bench.makespan_item_overhead --overheads 0,16,30,60 --out F.json [--runs A,B,...]

Result (bench/results/makespan-item-overhead-2026-12-06-r36.json, 89 recordings): not adopted. Graph mixed MAPE's mean
over the recordings 3.17% at O = 0, 3.23 / 3.41 / 3.60% at O = 16 / 30 / 60; every kind within 5% on 79, 80, 78, 71.
O = 30 takes longdoc-b-r35ch's graph mixed 6.3 -> 3.7% and the H100 k-shot windows' by 1.5-1.8 points, but costs the
H200 long-document recordings of rounds 18-22 1.8-3.0 points (longdoc-a-r18 3.0 -> 6.0%).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pagesim.cost.features as F  # noqa: E402
from bench import mixed_makespan as MM  # noqa: E402
from bench.mixed_pricing import calibration_chunks  # noqa: E402
from pagesim.outputs import check_output_file  # noqa: E402

_exact = F.prefill_makespan


def makespan_with_overhead(chunks, heads: int, slots: int, persistent_max_q: int = 0, overhead: int = 0) -> int:
    """features.prefill_makespan with `overhead` key tiles added to every non-empty work item: a work item of a chunk
    after c cached tokens walks cdiv(c + rows, T) key tiles, so the same chunks after c + overhead x T cached tokens
    are exactly that schedule (an empty item stays empty: it depends on the chunk's own rows only)."""
    return _exact([(c + overhead * F.PREFILL_TILE, q) for c, q in chunks], heads, slots, persistent_max_q)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    ap.add_argument("--overheads", default="0,16,30,60", help="key tiles per work item, comma-separated")
    ap.add_argument("--runs", default="", help="comma-separated run names (default: every eligible recording)")
    args = ap.parse_args(argv)
    check_output_file(ap, args.out, args.force)
    from engine.calibration import with_replayed_walks
    from pagesim.config import Config

    overheads = [int(x) for x in args.overheads.split(",")]
    by_rows: dict = {}
    for r in MM.jobs(set(args.runs.split(",")) if args.runs else None):
        by_rows.setdefault((str(r["rows"]), r["source"]), []).append(r)
    runs: dict = {}
    for (rows_path, source), group in by_rows.items():
        profile = group[0]["profile"]
        config = Config.from_dict(profile["config"])
        rows = with_replayed_walks(pd.read_csv(rows_path), config, rows_path)
        chunks = calibration_chunks(rows, config)
        grid = F.prefill_grid(profile["model"], profile["gpu"], profile.get("prefill_kernel"))
        for o in overheads:
            F.prefill_makespan = lambda c, h, s, p=0, o=o: makespan_with_overhead(c, h, s, p, o)
            try:
                frame = rows.assign(prefill_makespan=[F.prefill_makespan(c, *grid) for c in chunks])
                model, report = MM.refit(frame, profile, source)
                for r in group:
                    runs.setdefault(r["run"], {})[str(o)] = {**MM.step_figures(r["dir"], model),
                                                            "held_out_mape": report["mape"]}
            finally:
                F.prefill_makespan = _exact
            print(f"{source} O={o}: " + ", ".join(
                f"{r['run']} graph mixed {runs[r['run']][str(o)]['by_kind'].get('graph mixed', float('nan')):.4f}"
                for r in group), file=sys.stderr, flush=True)
    summary = {}
    for o in map(str, overheads):
        figs = [r[o] for r in runs.values()]
        gm = [f["by_kind"]["graph mixed"] for f in figs if "graph mixed" in f["by_kind"]]
        summary[o] = {"recordings": len(figs), "mean_graph_mixed_mape": float(np.mean(gm)),
                      "every_kind_within_5pct": sum(all(v <= 0.05 for v in f["by_kind"].values()) for f in figs),
                      "step_mape_within_3pct": sum(f["mape"] <= 0.03 for f in figs)}
    Path(args.out).write_text(json.dumps({"overheads_key_tiles": overheads, "summary": summary, "runs": runs},
                                         indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
