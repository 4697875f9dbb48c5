"""fp8 paged decode: candidate launches (config, split multiple) timed as CUDA-graph replays at the four decode
shapes, in interleaved rounds (every candidate once per round, the median over rounds), to pick the per-shape rule
of engine.kernels.decode.fp8_decode_launch (GPU).

    python -m bench.fp8_launch --out $OUT/fp8_launch.json [--rounds 3] [--grid r9]

The same caches as bench.fp8_tune (bf16 K/V quantised by the store kernel; shuffled block tables; Llama-3-8B
heads, block size 16). Each launch's output is checked against the fp32 reference on the dequantised cache
before it is timed. do_bench medians (L2 cleared before each repetition) of graph replays; bf16 at its default
and at the best launches of earlier sweeps is timed in the same rounds, the baselines of the speed-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import statistics
import sys

import torch

import engine.kernels as K  # before triton: on a machine without CUDA it selects the interpreter
import triton
from bench.fp8_tune import OK_ATOL, Case, warm_clocks
from bench.kernels import DECODE_SHAPES, graph_of
from engine.kernels.decode import FP8_DECODE_CONFIG, fp8_decode_launch
from pagesim.outputs import check_output_file

F16 = "fp16"
# (label, config, splits as a multiple of the default split count; None: the rule's own choice), per --grid: r6's
# sweep, and round 9's launches around each shape's best (1 warp and 3-4 stages unsplit, 16-token steps, 4-8x splits)
def _grid(launches):
    return [("rule", None, None)] + [(f"bn{bn}-w{w}-s{s}-x{mult}", K.DecodeConfig(bn, w, s, F16), mult)
                                     for bn, w, s, mult in launches]


_R6 = _grid([(32, 1, 2, 1), (32, 2, 2, 1), (64, 1, 2, 1), (64, 2, 3, 1), (128, 2, 2, 1), (32, 2, 2, 2), (32, 2, 2, 4),
             (64, 2, 3, 2), (128, 2, 2, 2)])
GRIDS = {"r6": _R6[:1] + [("old-default", FP8_DECODE_CONFIG, 1)] + _R6[1:],
         "r9": _grid([(32, 1, 2, 1), (32, 1, 3, 1), (32, 1, 4, 1), (16, 1, 2, 1), (16, 1, 3, 1), (64, 1, 3, 1),
                      (32, 1, 2, 2), (32, 2, 3, 2), (64, 2, 2, 1), (128, 2, 3, 1), (128, 1, 2, 1), (64, 1, 2, 2),
                      (32, 1, 2, 4), (64, 2, 2, 4), (32, 2, 3, 4), (32, 2, 2, 8), (32, 1, 2, 8)])}
BF16_CANDIDATES = [("default", K.DecodeConfig(), 1), ("bn64-w2-s4-x2", K.DecodeConfig(64, 2, 4), 2),
                   ("bn64-w4-s4-x1", K.DecodeConfig(64, 4, 4), 1), ("bn64-w2-s3-x1", K.DecodeConfig(64, 2, 3), 1)]
BF16_GRIDS = {"r6": BF16_CANDIDATES, "r9": BF16_CANDIDATES[:1]}  # r9: the bf16 default, the speed-up's baseline


def launches(case: Case, grid: str) -> list[tuple[str, str, K.DecodeConfig | None, int | None]]:
    """(dtype, label, config, num_splits) of every candidate at this shape (config None: the fp8 default path)."""
    out = []
    for label, cfg, mult in BF16_GRIDS[grid]:
        out.append(("bf16", label, cfg, case.default_splits * mult))
    for label, cfg, mult in GRIDS[grid]:
        out.append(("fp8", label, cfg, None if mult is None else case.default_splits * mult))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--grid", choices=sorted(GRIDS), default="r9", help="the candidate launches (round 6's or 9's)")
    p.add_argument("--rep-ms", type=int, default=60, help="do_bench repetition time per timing")
    args = p.parse_args(argv)
    check_output_file(p, args.out, args.force)
    if not torch.cuda.is_available():
        print("error: bench.fp8_launch needs a CUDA GPU", file=sys.stderr)
        return 2
    from triton.testing import do_bench

    result = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "rounds": args.rounds, "grid": args.grid, "decode": []}
    warm_clocks(3.0)
    for shape in DECODE_SHAPES:
        case = Case("decode", shape)
        refs = case.references()
        rows = []
        for dtype, label, cfg, splits in launches(case, args.grid):
            fn = case.call(dtype, cfg, splits)
            case.out.fill_(float("nan"))
            fn()
            err = (case.out.float() - refs[dtype]).abs().max().item()
            row = {"dtype": dtype, "label": label, "num_splits": splits, "max_abs_err_vs_ref": err, "ok": err <= OK_ATOL,
                   "config": dataclasses.asdict(cfg) if cfg else None, "times_s": []}
            if cfg is None:
                rule_cfg, rule_splits = fp8_decode_launch(shape[0], 8, shape[1], torch.device("cuda"))
                row["rule"] = {"config": dataclasses.asdict(rule_cfg), "num_splits": rule_splits}
            row["replay"] = graph_of(fn)
            rows.append(row)
        for _ in range(args.rounds):
            for row in rows:
                row["times_s"].append(do_bench(row["replay"], warmup=10, rep=args.rep_ms, return_mode="median") * 1e-3)
        for row in rows:
            del row["replay"]
            row["seconds"] = statistics.median(row["times_s"])
            row["tokens_per_s"] = shape[0] / row["seconds"]
        bf16_default = next(r for r in rows if r["dtype"] == "bf16" and r["label"] == "default")["seconds"]
        bf16_best = min(r["seconds"] for r in rows if r["dtype"] == "bf16" and r["ok"])
        print(f"decode {tuple(shape)} (default splits {case.default_splits}): bf16 default {bf16_default * 1e6:.1f} us, "
              f"best {bf16_best * 1e6:.1f} us", flush=True)
        for r in sorted(rows, key=lambda r: r["seconds"]):
            r["speedup_vs_bf16_default"] = bf16_default / r["seconds"]
            r["speedup_vs_bf16_best"] = bf16_best / r["seconds"]
            spread = (max(r["times_s"]) - min(r["times_s"])) / r["seconds"]
            print(f"  {r['dtype']} {r['label']:22s} splits {str(r['num_splits']):>4s} {r['seconds'] * 1e6:7.1f} us "
                  f"(spread {spread:4.0%}) x{r['speedup_vs_bf16_default']:.2f} / x{r['speedup_vs_bf16_best']:.2f} bf16 "
                  f"default / best{'' if r['ok'] else '  OFF THE REFERENCE'}", flush=True)
        result["decode"].append({"shape": list(shape), "default_splits": case.default_splits,
                                 "bf16_default_s": bf16_default, "bf16_best_s": bf16_best, "launches": rows})
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
