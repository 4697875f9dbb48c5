"""FP8 against bf16 paged decode three ways: bench.fp8's way, with a clean L2 flush, and as the engine runs it.

    python -m bench.fp8_decode_layers --out bench/results/fp8-decode-layers-GPU-DATE.json [--layers 8]

bench.fp8 times one layer's decode (a CUDA-graph replay) with triton's do_bench, which before every repetition
clears the L2 by writing 256 MB with zeros: the timed kernel then starts with the L2 full of dirty lines, and
writes them back to memory as its K/V reads evict them (up to the L2's size, ~50 MB on an H100 or H200, in both
dtypes). This bench times the same decode at bench.kernels' four shapes
- "dirty": as bench.fp8 (do_bench median, zero-filled flush);
- "clean": the same replay after a flush that reads 256 MB (a sum), so the L2 holds clean lines only;
- "layers": a CUDA graph of `--layers` layers' decode attention back to back, each layer with its own K/V cache
  (as the engine's decode step: every layer reads a cache larger than the L2, so nothing is re-read from it),
  timed by CUDA events over whole replays, per layer; no flush.
For each, bf16 and fp8 tokens/s and the fp8 speed-up (issue #14's target: >= 1.8x). The fp8 launches are the
engine's defaults (engine.kernels.decode.fp8_decode_launch); `--splits` adds fp8 launches with other split counts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys

import torch
import triton

import engine.kernels as K
from bench.fp8 import SPEEDUP_TARGET, quantised
from bench.kernels import BF16, BS, D, DECODE_SHAPES, DEV, HKV, HQ, graph_of, seconds
from engine.kernels.decode import default_num_splits, fp8_decode_launch
from pagesim.outputs import check_output_file

FLUSH_BYTES = 256 * 2**20


def clean_seconds(fn, flush: torch.Tensor, reps: int = 100) -> float:
    """Median seconds of fn after a flush that reads FLUSH_BYTES (the L2 left holding clean lines)."""
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(5):
        fn()
    for i in range(reps):
        flush.sum()
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end)) * 1e-3


def layer_seconds(replay, layers: int, min_s: float = 0.2, rounds: int = 5) -> float:
    """Median over `rounds` of (time of n back-to-back replays of a graph of `layers` layers) / (n * layers)."""
    for _ in range(10):
        replay()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    replay()
    t1.record()
    torch.cuda.synchronize()
    n = max(3, int(min_s / max(t0.elapsed_time(t1) * 1e-3, 1e-6)))
    out = []
    for _ in range(rounds):
        t0.record()
        for _ in range(n):
            replay()
        t1.record()
        torch.cuda.synchronize()
        out.append(t0.elapsed_time(t1) * 1e-3 / (n * layers))
    return statistics.median(out)


def make_layers(batch: int, ctx: int, layers: int, seed: int):
    """(per layer: q, bf16 K, bf16 V, fp8 K, K scale, fp8 V, V scale), shared block tables and lengths."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    pages = ctx // BS
    num_blocks = batch * pages
    tables = torch.randperm(num_blocks, generator=g, device=DEV).view(batch, pages).to(torch.int32)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=DEV)
    out = []
    for _ in range(layers):
        k = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
        v = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
        q = torch.randn((batch, HQ, D), generator=g, device=DEV, dtype=BF16)
        out.append((q, k, v, *quantised(k, v=False), *quantised(v, v=True)))
    return out, tables, lens


def decode_calls(layer_data, tables, lens, fp8: bool, num_splits: int | None = None) -> list:
    """One zero-argument call per layer: that layer's decode attention into its own output (call.out)."""
    calls = []
    for q, k, v, k8, ks, v8, vs in layer_data:
        out = torch.empty_like(q)
        if fp8:
            def call(q=q, k8=k8, v8=v8, ks=ks, vs=vs, out=out):
                K.paged_decode_attention(q, k8, v8, tables, lens, D**-0.5, out=out, k_scale=ks, v_scale=vs,
                                         num_splits=num_splits)
        else:
            def call(q=q, k=k, v=v, out=out):
                K.paged_decode_attention(q, k, v, tables, lens, D**-0.5, out=out, num_splits=num_splits)
        call.out = out
        calls.append(call)
    return calls


def variant(row: dict, name: str, calls: list, reference: list, flush: torch.Tensor) -> None:
    """Time another fp8 launch into row["fp8_variants"][name], with its largest difference from the default's output."""
    t = times(calls, flush)
    torch.cuda.synchronize()
    diff = max((c.out.float() - r.out.float()).abs().max().item() for c, r in zip(calls, reference))
    row["fp8_variants"][name] = {"seconds": t, "speedup": {m: row["seconds"]["bf16"][m] / t[m] for m in t},
                                 "max_abs_diff_vs_default": diff}


def times(calls: list, flush: torch.Tensor) -> dict:
    one = graph_of(calls[0])
    whole = graph_of(lambda: [c() for c in calls])
    return {"dirty": seconds(one), "clean": clean_seconds(one, flush), "layers": layer_seconds(whole, len(calls))}


def case(batch: int, ctx: int, layers: int, flush: torch.Tensor, split_factors: list[float]) -> dict:
    """One shape's timings; `split_factors`: fp8 also at these multiples of its split count, where it splits."""
    layer_data, tables, lens = make_layers(batch, ctx, layers, seed=batch * 7 + ctx)
    splits = default_num_splits(batch, HKV, ctx, torch.device(DEV))
    fp8_cfg, fp8_splits = fp8_decode_launch(batch, HKV, ctx, torch.device(DEV))
    row = {"batch": batch, "context": ctx, "layers": layers, "bf16_splits": splits, "fp8_splits": fp8_splits,
           "fp8_config": [fp8_cfg.block_n, fp8_cfg.num_warps, fp8_cfg.num_stages], "fp8_variants": {}}
    bf16_calls, fp8_calls = decode_calls(layer_data, tables, lens, False), decode_calls(layer_data, tables, lens, True)
    row["seconds"] = {"bf16": times(bf16_calls, flush), "fp8": times(fp8_calls, flush)}
    row["fp8_speedup"] = {m: row["seconds"]["bf16"][m] / row["seconds"]["fp8"][m] for m in row["seconds"]["bf16"]}
    row["kv_tb_per_s"] = {dt: {m: 2 * batch * ctx * HKV * D * elem / t / 1e12 for m, t in row["seconds"][dt].items()}
                          for dt, elem in (("bf16", 2), ("fp8", 1))}
    extra = sorted({max(1, round(fp8_splits * f)) for f in split_factors}) if fp8_splits > 1 else []
    for s in extra:
        if s != fp8_splits:
            variant(row, f"splits {s}", decode_calls(layer_data, tables, lens, True, num_splits=s), fp8_calls, flush)
    del layer_data
    torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--layers", type=int, default=8, help="layers in the back-to-back graph (default 8)")
    p.add_argument("--splits", default="", help="also time fp8 at these split counts where the shape splits, "
                   "comma-separated multiples of its default (e.g. 0.5,2)")
    args = p.parse_args(argv)
    check_output_file(p, args.out, args.force)
    if args.layers < 2:
        p.error(f"--layers {args.layers}: expected at least 2 (each layer's cache must leave the L2 before it is read again)")
    try:
        factors = [float(x) for x in args.splits.split(",") if x]
    except ValueError:
        p.error(f"--splits {args.splits!r}: expected comma-separated numbers, e.g. 0.5,2")
    if not torch.cuda.is_available():
        print("error: bench.fp8_decode_layers needs a CUDA GPU", file=sys.stderr)
        return 2
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=DEV).fill_(1.0)
    busy = torch.randn((8192, 8192), device=DEV, dtype=BF16)
    t_end = datetime.datetime.now() + datetime.timedelta(seconds=2)
    while datetime.datetime.now() < t_end:  # clocks up before the first timing
        busy @ busy
    torch.cuda.synchronize()
    del busy
    result = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "speedup_target": SPEEDUP_TARGET, "decode": []}
    for batch, ctx in DECODE_SHAPES:
        row = case(batch, ctx, args.layers, flush, factors)
        result["decode"].append(row)
        s = row["fp8_speedup"]
        print(f"decode B={batch:4d} ctx={ctx:6d} splits bf16 {row['bf16_splits']} fp8 {row['fp8_splits']}: "
              + "  ".join(f"{m} bf16 {row['seconds']['bf16'][m] * 1e6:7.1f} us fp8 {row['seconds']['fp8'][m] * 1e6:7.1f}"
                          f" us x{s[m]:.3f}" for m in s)
              + "".join(f"  | fp8 {k}: " + " ".join(f"{m} x{v:.3f}" for m, v in o["speedup"].items())
                        + f" (diff {o['max_abs_diff_vs_default']:.2g})" for k, o in row["fp8_variants"].items()),
              flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
