"""FP8 KV-cache benchmark (GPU): our paged decode and prefill kernels reading an fp8 (e4m3) cache against
the same kernels reading the bf16 cache, on the same data.

    python -m bench.fp8 --out bench/results/fp8-h200-DATE.json [--tune] [--prefill-only]

Shapes as bench.kernels: Llama-3-8B attention (32 query heads, 8 KV heads, head dim 128), block size 16,
shuffled block tables; decode at (batch, context) in DECODE_SHAPES, prefill at (query tokens, context) in
PREFILL_SHAPES (one 4096-token prompt, 512 new tokens after a 3584-token cached prefix, one 16384-token prompt).
The fp8 cache holds the bf16 cache quantised by the store kernel with per-tensor scales (amax / 448), as the
engine writes it. Timing as bench.kernels (do_bench median, L2 cleared before each repetition); decode's
primary time is a CUDA-graph replay. Reported per decode shape: tokens/s (batch / step time) for
both, the fp8 speed-up (target >= 1.8x), K/V bytes/s (fp8 reads half the bytes), and the largest
|fp8 - bf16| output difference. Prefill: the fp8/bf16 time ratio of the two defaults (target <= 1; on sm_90 both
are Gluon kernels, engine.kernels.prefill_gluon and prefill_gluon_fp8), the Triton kernels' times for both
dtypes beside them, and the Triton kernel with both products in e4m3 in the launches of E4M3_PREFILL.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys

import torch
import triton

import engine.kernels as K
from engine.kernels.prefill import FP8_PREFILL_CONFIG
from bench.kernels import BF16, BS, D, DECODE_CONFIGS, DECODE_SHAPES, DEV, HKV, HQ, seconds, timed

FP8 = torch.float8_e4m3fn
SPEEDUP_TARGET = 1.8
PREFILL_TOKENS = 4096  # one 4096-token prompt (no cached prefix), and 512 new tokens after 3584 cached
# (query tokens, context): those two, and one 16384-token prompt (bench.kernels' longest prefill shape)
PREFILL_SHAPES = ((PREFILL_TOKENS, PREFILL_TOKENS), (512, PREFILL_TOKENS), (16384, 16384))
# the prefill with both products in e4m3 (PrefillConfig.pv_fp8, the default at 2 stages), timed in these launches too
E4M3_PREFILL = {f"stages_{s}": K.PrefillConfig(num_stages=s, fp8_widen="fp16", qk_fp8=True, pv_fp8=True)
                for s in (2, 3)}
from pagesim.outputs import check_output_file


def quantised(cache: torch.Tensor, *, v: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 copy written by the store kernel, its scale [1]) of a bf16 K (v False) or V (v True) cache
    [blocks, bs, Hkv, D]; an fp8 V cache stores its blocks transposed (engine.kernels.cache)."""
    scale = (cache.abs().amax().float() / 448.0).reshape(1)
    out, scratch = (torch.empty(cache.shape, dtype=FP8, device=cache.device) for _ in range(2))
    rows = cache.view(-1, HKV, D)
    slots = torch.arange(rows.shape[0], dtype=torch.int64, device=cache.device)
    K.store_kvcache(rows, rows, *((scratch, out) if v else (out, scratch)), slots, scale, scale)
    return out, scale


def decode_case(batch: int, ctx: int, tune: bool) -> dict:
    g = torch.Generator(device=DEV).manual_seed(batch * 7 + ctx)
    pages = ctx // BS
    num_blocks = batch * pages
    k_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    v_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    (k8, ks), (v8, vs) = quantised(k_cache, v=False), quantised(v_cache, v=True)
    tables = torch.randperm(num_blocks, generator=g, device=DEV).view(batch, pages).to(torch.int32)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=DEV)
    q = torch.randn((batch, HQ, D), generator=g, device=DEV, dtype=BF16)
    scale = D**-0.5
    out_bf16, out_fp8 = torch.empty_like(q), torch.empty_like(q)

    def bf16(cfg=None):
        return lambda: K.paged_decode_attention(q, k_cache, v_cache, tables, lens, scale, out=out_bf16, config=cfg)

    def fp8(cfg=None):
        return lambda: K.paged_decode_attention(q, k8, v8, tables, lens, scale, out=out_fp8, config=cfg,
                                                k_scale=ks, v_scale=vs)

    row = {"batch": batch, "context": ctx, "timings": {"bf16": timed(bf16()), "fp8": timed(fp8())}}
    torch.cuda.synchronize()
    row["max_abs_diff_fp8_vs_bf16"] = (out_fp8.float() - out_bf16.float()).abs().max().item()
    if tune:
        best = {}
        for name, make in (("bf16", bf16), ("fp8", fp8)):
            for cfg in DECODE_CONFIGS:
                t = seconds(make(cfg))
                if name not in best or t < best[name][0]:
                    best[name] = (t, cfg)
        row["tuned"] = {name: {"eager_s": t, "config": [cfg.block_n, cfg.num_warps, cfg.num_stages]}
                        for name, (t, cfg) in best.items()}
    for dtype, elem in (("bf16", 2), ("fp8", 1)):
        t = row["timings"][dtype].get("graph") or row["timings"][dtype]["eager"]
        row[f"{dtype}_tokens_per_s"] = batch / t
        row[f"{dtype}_kv_tb_per_s"] = 2 * batch * ctx * HKV * D * elem / t / 1e12
    row["fp8_speedup"] = row["fp8_tokens_per_s"] / row["bf16_tokens_per_s"]
    row["meets_target"] = row["fp8_speedup"] >= SPEEDUP_TARGET
    return row


def gluon_fp8_config(spec: str):
    """A --gluon launch of the e4m3 Gluon prefill: STAGES, then 'p' for ping-pong, 'sN' for N staging slots of V^T,
    '@N' for a persistent grid of N programs (e.g. 3p@132, 3ps2; bench.kernels.gluon_config's form)."""
    import re

    from engine.kernels.prefill_gluon_fp8 import DEFAULT_CONFIG, GluonFp8PrefillConfig

    m = re.fullmatch(r"(\d+)(p?)(?:s(\d+))?(?:@(\d+))?", spec)
    if m is None:
        raise ValueError(f"{spec!r} is not STAGES[p][sN][@N]")
    stages, pp, staging, persistent = m.groups()
    return GluonFp8PrefillConfig(num_stages=int(stages), pingpong=bool(pp), persistent=int(persistent or 0),
                                 num_staging=int(staging or DEFAULT_CONFIG.num_staging))


def prefill_inputs(q_len: int, ctx: int):
    """One sequence's prefill of q_len query tokens over ctx context tokens (the last q_len of them its own): q, the
    bf16 caches, their fp8 copies with scales, cu_seqlens, context lengths and a shuffled block table (seeded by the
    shape: the same inputs in every process)."""
    g = torch.Generator(device=DEV).manual_seed(q_len + ctx)
    num_blocks = triton.cdiv(ctx, BS)
    k_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    v_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    (k8, ks), (v8, vs) = quantised(k_cache, v=False), quantised(v_cache, v=True)
    tables = torch.randperm(num_blocks, generator=g, device=DEV).view(1, num_blocks).to(torch.int32)
    cu = torch.tensor([0, q_len], dtype=torch.int32, device=DEV)
    lens = torch.tensor([ctx], dtype=torch.int32, device=DEV)
    q = torch.randn((q_len, HQ, D), generator=g, device=DEV, dtype=BF16)
    return q, k_cache, v_cache, k8, ks, v8, vs, cu, lens, tables


def prefill_case(q_len: int, ctx: int, gluon: dict | None = None) -> dict:
    """bench.fp8's prefill row for one shape; `gluon`: the --gluon launches to time too, spec -> config."""
    q, k_cache, v_cache, k8, ks, v8, vs, cu, lens, tables = prefill_inputs(q_len, ctx)
    scale = D**-0.5
    out_bf16, out_fp8 = torch.empty_like(q), torch.empty_like(q)
    t_bf16 = seconds(lambda: K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, scale,
                                                       max_seqlen_q=q_len, out=out_bf16))
    # the bf16 cache's Triton kernel (the bf16 default before round 28 made the Gluon kernel the default on sm_90):
    # the fp8 kernel is the same Triton kernel's, so this is the like-for-like comparison
    t_bf16_triton = seconds(lambda: K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, scale,
                                                              max_seqlen_q=q_len, out=out_bf16,
                                                              config=K.PrefillConfig()))
    t_fp8 = seconds(lambda: K.paged_prefill_attention(q, k8, v8, cu, lens, tables, scale, max_seqlen_q=q_len,
                                                      out=out_fp8, k_scale=ks, v_scale=vs))
    # the fp8 cache's Triton kernel (the fp8 default before round 29 made the Gluon kernel the default on sm_90)
    t_fp8_triton = seconds(lambda: K.paged_prefill_attention(q, k8, v8, cu, lens, tables, scale, max_seqlen_q=q_len,
                                                             out=out_bf16.clone(), k_scale=ks, v_scale=vs,
                                                             config=FP8_PREFILL_CONFIG))
    torch.cuda.synchronize()
    row = {"q_len": q_len, "context": ctx, "bf16_s": t_bf16, "bf16_triton_s": t_bf16_triton, "fp8_s": t_fp8,
           "fp8_triton_s": t_fp8_triton, "fp8_over_bf16": t_fp8 / t_bf16, "fp8_over_bf16_triton": t_fp8 / t_bf16_triton,
           "fp8_triton_over_bf16": t_fp8_triton / t_bf16, "meets_target": t_fp8 <= t_bf16,
           "max_abs_diff_fp8_vs_bf16": (out_fp8.float() - out_bf16.float()).abs().max().item(),
           "fp8_e4m3_products": {}}
    for spec, cfg in (gluon or {}).items():  # launches of the Gluon e4m3 kernel (--gluon)
        from engine.kernels.prefill_gluon_fp8 import gluon_fp8_paged_prefill

        t = seconds(lambda: gluon_fp8_paged_prefill(q, k8, v8, cu, lens, tables, scale, ks, vs, max_seqlen_q=q_len,
                                                    out=out_fp8, config=cfg))
        torch.cuda.synchronize()
        row.setdefault("fp8_gluon", {})[spec] = {"s": t, "over_bf16": t / t_bf16, "config": str(cfg),
                                                 "max_abs_diff_vs_bf16": (out_fp8.float() - out_bf16.float()).abs().max().item()}
    for name, cfg in E4M3_PREFILL.items():  # both products in e4m3 (PrefillConfig.pv_fp8), whatever the default is
        t = seconds(lambda: K.paged_prefill_attention(q, k8, v8, cu, lens, tables, scale, max_seqlen_q=q_len,
                                                      out=out_fp8, k_scale=ks, v_scale=vs, config=cfg))
        torch.cuda.synchronize()
        row["fp8_e4m3_products"][name] = {
            "s": t, "over_bf16": t / t_bf16,
            "max_abs_diff_vs_bf16": (out_fp8.float() - out_bf16.float()).abs().max().item(),
            "mean_abs_diff_vs_bf16": (out_fp8.float() - out_bf16.float()).abs().mean().item()}
    return row



def prefill_shape(parser: argparse.ArgumentParser, value: str) -> tuple[int, int]:
    """--prefill-shape Q:CONTEXT as (query tokens, context tokens), context >= query >= 1."""
    try:
        q_len, ctx = (int(x) for x in value.split(":"))
    except ValueError:
        parser.error(f"--prefill-shape {value!r}: expected QUERY_TOKENS:CONTEXT_TOKENS, e.g. 512:4096")
    if not 1 <= q_len <= ctx:
        parser.error(f"--prefill-shape {value!r}: expected 1 <= query tokens <= context tokens")
    return q_len, ctx


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists (committed results are never replaced by default)")
    p.add_argument("--tune", action="store_true", help="also sweep decode launch configs for both dtypes")
    p.add_argument("--prefill-only", action="store_true", help="the prefill cases only (no decode)")
    p.add_argument("--gluon", default="", help="also time these launches of the e4m3 Gluon prefill, comma-separated "
                   "STAGES[p][sN][@N] (p: ping-pong, sN: N V^T staging slots, @N: persistent grid of N programs), e.g. "
                   "3p,3ps2,3p@132")
    p.add_argument("--prefill-shape", action="append", default=[], metavar="Q:CONTEXT",
                   help="time this prefill shape (query tokens : context tokens, repeatable) instead of the three "
                   "default ones")
    p.add_argument("--repeat", type=int, default=1, help="time each prefill shape this many times (a row each)")
    args = p.parse_args(argv)
    check_output_file(p, args.out, args.force)  # before any work: committed results are never replaced by default
    shapes = [prefill_shape(p, v) for v in args.prefill_shape] or list(PREFILL_SHAPES)
    if args.repeat < 1:
        p.error(f"--repeat {args.repeat}: expected a positive count")
    try:
        gluon = {spec: gluon_fp8_config(spec) for spec in args.gluon.split(",") if spec}
    except ValueError as e:
        p.error(f"--gluon: {e}")
    if not torch.cuda.is_available():
        print("error: bench.fp8 needs a CUDA GPU", file=sys.stderr)
        return 2
    result = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "speedup_target": SPEEDUP_TARGET, "decode": [], "prefill": []}
    for batch, ctx in () if args.prefill_only else DECODE_SHAPES:
        row = decode_case(batch, ctx, args.tune)
        result["decode"].append(row)
        print(f"decode B={batch:4d} ctx={ctx:6d}: bf16 {row['bf16_tokens_per_s']:10.0f} tok/s "
              f"({row['bf16_kv_tb_per_s']:.2f} TB/s)  fp8 {row['fp8_tokens_per_s']:10.0f} tok/s "
              f"({row['fp8_kv_tb_per_s']:.2f} TB/s)  x{row['fp8_speedup']:.2f} "
              f"{'meets' if row['meets_target'] else 'MISSES'} {SPEEDUP_TARGET}x  max|diff| {row['max_abs_diff_fp8_vs_bf16']:.3g}",
              flush=True)
    for q_len, ctx in [shape for shape in shapes for _ in range(args.repeat)]:
        row = prefill_case(q_len, ctx, gluon)
        result["prefill"].append(row)
        print(f"prefill q={q_len} ctx={ctx}: bf16 {row['bf16_s'] * 1e3:.3f} ms  fp8 {row['fp8_s'] * 1e3:.3f} ms  "
              f"(bf16 Triton {row['bf16_triton_s'] * 1e3:.3f}, fp8 Triton {row['fp8_triton_s'] * 1e3:.3f})  "
              f"fp8/bf16 {row['fp8_over_bf16']:.2f} {'meets' if row['meets_target'] else 'MISSES'} <= 1; e4m3 products "
              + ", ".join(f"{k} {v['over_bf16']:.2f}" for k, v in row["fp8_e4m3_products"].items())
              + "".join(f"; gluon {k} {v['over_bf16']:.3f}" for k, v in row.get("fp8_gluon", {}).items()), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
