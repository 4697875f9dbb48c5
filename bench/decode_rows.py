"""Graph decode time against the rows that are not padding, at fixed context per row (issue #13, round 40; GPU).

Live windows' graph decode steps run under their prediction just above a padded graph size and over it at the size
(docs/cost-model-history.md, round 40: 16 rows 1.012 of the prediction, 17 rows 0.986), and the calibrations' rows
have few steps between two sizes. This times them directly: for every batch of 1 to --max-rows rows and each
context in --contexts, one calibration workload of that many sequences with that prompt length decoding --steps
steps (engine.calibration.run_calibration, the executor and warm-up `calibrate` uses: every step a CUDA-graph
replay at its padded size), and writes the rows as a calibration's rows (--out, a .steps.csv.gz that `calibrate
--refit` and bench/decode_bias.py read). Then on any CPU, with the profile of the same call:

    python bench/decode_rows.py --report ROWS.steps.csv.gz --profile P.json --out RESULT.json

prints, per batch, the median device time of its decode steps 10 or more steps past the prefill and the profile's
prediction for them (at the profile's reference clock: the median SM clock of those steps is written beside). On the device:

    python bench/decode_rows.py --out OUT/decode-rows.steps.csv.gz [--max-rows 64 | --rows 96,128,256] [--contexts 512,2048] [--gpu G]

(--rows: those batch sizes only, e.g. the large batches at long context that the calibration's own grid has few of;
workloads whose rows would not fit the KV cache are refused: by the spec's estimate of the cache before the model
loads, and by the blocks the loaded engine measured before any workload runs.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FAR = 10  # decode steps past the prefill from which a step counts (a step right after a prefill runs slower)


def workloads(rows: list[int], contexts: list[int], steps: int) -> list:
    return [(f"rows-b{n}-c{c}", [(n, c, steps)]) for c in contexts for n in rows]


def too_large(rows: list[int], contexts: list[int], steps: int, capacity_tokens: int) -> list[str]:
    """The (rows, context) workloads whose sequences would not all fit the KV cache at their last step."""
    return [f"{n} rows x {c + steps} tokens = {n * (c + steps):,}" for c in contexts for n in rows
            if n * (c + steps) > capacity_tokens]


def time_rows(args) -> int:
    import pandas as pd

    from engine.calibration import CALIBRATE_DEFAULTS, run_calibration_with_bar
    from engine.device_gpu import device_gpu
    from engine.live import make_executor, warm_up
    from pagesim.config import Config

    import torch

    from pagesim.errors import UserError

    if not torch.cuda.is_available():
        sys.exit("decode_rows.py times a CUDA GPU (torch.cuda.is_available() is False); --report reads rows on any CPU")
    try:
        gpu, warnings = device_gpu(args.gpu, "calibrate")  # the card's spec, as calibrate labels its rows
    except UserError as e:
        sys.exit(str(e))
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    config = Config(model=args.model, gpu=gpu, max_num_seqs=256,
                    max_num_batched_tokens=CALIBRATE_DEFAULTS["max_num_batched_tokens"])
    if max(args.rows) > config.max_num_seqs:
        sys.exit(f"--rows: {max(args.rows)} rows exceed the engine's max_num_seqs {config.max_num_seqs}")
    def refuse_too_large(config, which: str) -> None:
        capacity = config.resolved_num_gpu_blocks * config.block_size
        over = too_large(args.rows, args.contexts, args.steps, capacity)
        if over:  # a workload that cannot hold its rows would preempt, not time them
            sys.exit(f"--rows / --contexts: these do not fit {which} KV cache of {capacity:,} tokens: {'; '.join(over)}")

    refuse_too_large(config, "the spec's estimate of the")  # before the model loads
    executor = make_executor(config)
    config = executor.config
    refuse_too_large(config, "the engine's")  # what the loaded engine holds (round 41: ~320k tokens, not the ~447k
    # estimated), before any workload runs
    warm_up(executor, config)
    rows = run_calibration_with_bar(executor, config, workloads(args.rows, args.contexts, args.steps))
    rows.to_csv(args.out, index=False)
    print(f"wrote {args.out}: {len(rows)} rows of {rows['workload'].nunique()} workloads")
    return 0


def far_decode_steps(rows, model):
    """A sweep's decode steps FAR or more past their prefill (rows written by time_rows), with each step's `context` per
    row (from its workload's name) and the profile `model`'s `predicted_s` for it."""
    from pagesim.cost.profile import calibration_steps_since_prefill

    since, _ = calibration_steps_since_prefill(rows)
    d = rows[(rows["num_prefill_tokens"] == 0) & (rows["num_decode_seqs"] > 0) & (since >= FAR)].copy()
    d["predicted_s"] = model.forward_times(d)
    d["context"] = d["workload"].str.extract(r"-c(\d+)$", expand=False).astype(int)
    return d


def report(args) -> int:
    import numpy as np
    import pandas as pd

    from pagesim.cost.profile import ProfileCostModel

    model = ProfileCostModel.from_json(args.profile)
    d = far_decode_steps(pd.read_csv(args.report), model)
    out = []
    for (c, n), g in d.groupby(["context", "num_decode_seqs"]):
        out.append({"context": int(c), "rows": int(n), "padded": model.padded_batch(int(n)), "steps": len(g),
                    "gpu_ms": float(np.median(g["gpu_time_s"]) * 1e3), "duration_ms": float(np.median(g["duration_s"]) * 1e3),
                    "predicted_ms": float(np.median(g["predicted_s"]) * 1e3),
                    "sm_clock_mhz": float(np.median(g["sm_clock_mhz"])) if "sm_clock_mhz" in g else None})
    for r in out:
        r["measured_over_predicted"] = r["duration_ms"] / r["predicted_ms"]
        print(f"c {r['context']:5d}  rows {r['rows']:3d} (graph {r['padded']:3d})  device {r['gpu_ms']:7.3f} ms  "
              f"step {r['duration_ms']:7.3f} ms  predicted {r['predicted_ms']:7.3f} ms  "
              f"{r['measured_over_predicted']:.3f}")
    Path(args.out).write_text(json.dumps({"rows": str(args.report), "profile": str(args.profile), "far": FAR,
                                          "batches": out}, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--report", help="rows written by a run of this script: report them against --profile (CPU)")
    ap.add_argument("--profile", help="with --report: the profile to price the rows with")
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--gpu", default=None, help="the GPU spec (default: the card's, as calibrate finds it)")
    ap.add_argument("--max-rows", type=int, default=64, help="every batch of 1 to this many rows (default 64)")
    ap.add_argument("--rows", help="these batch sizes instead of 1..--max-rows, comma-separated (e.g. 96,128,256)")
    ap.add_argument("--contexts", default="512,2048")
    ap.add_argument("--steps", type=int, default=40, help="decode steps of each workload (default 40)")
    args = ap.parse_args(argv)
    if os.path.exists(args.out):
        sys.exit(f"--out {args.out}: exists; give a new file")
    if args.report:
        if not args.profile:
            sys.exit("--report needs --profile P.json")
        return report(args)
    contexts, rows = args.contexts, args.rows
    try:
        args.contexts = [int(c) for c in contexts.split(",")]
        args.rows = [int(n) for n in rows.split(",")] if rows else list(range(1, args.max_rows + 1))
    except ValueError:
        sys.exit(f"--contexts {contexts!r} / --rows {rows!r}: expected whole numbers, comma-separated")
    if args.steps <= FAR or min(args.rows) < 1 or min(args.contexts) < 1:
        sys.exit(f"--steps must be over {FAR}, --max-rows / --rows and --contexts at least 1")
    return time_rows(args)


if __name__ == "__main__":
    raise SystemExit(main())
