"""Launch-config sweep for the paged attention kernels with an fp8 (e4m3) and a bf16 KV cache (GPU).

    python -m bench.fp8_tune --out $OUT/fp8_tune.json [--budget-s 240]
    python -m bench.fp8_tune --out /tmp/t.json --smoke      # CPU check of the script (interpreter, tiny shapes)

Decode, at bench.kernels' four shapes (Llama-3-8B heads: 32 query, 8 KV, head dim 128; block size 16;
shuffled block tables), for each dtype: stage 1 times every config of the grid (block_n, num_warps,
num_stages and, for fp8, fp8_widen) at the default split count; stage 2 times the three best
configs of each dtype at other split counts. Prefill (fp8 and bf16, 4096 new tokens, and 512 after a
3584-token prefix): block_m, block_n, num_warps, num_stages (and fp8_widen). Every timed config's output
is checked against a torch fp32 reference on the same cache (for fp8: the dequantised cache), and the
fp8 reference is compared with the bf16 one (the quantisation error, reported, not a pass criterion).

Timing: triton.testing.do_bench (warm-up runs excluded, L2 cleared before each repetition), median.
Compilation happens first, in parallel worker processes that fill Triton's cache, so the sweep fits
its budget; configs left when --budget-s runs out are recorded as skipped, never silently dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import multiprocessing as mp
import os
import platform
import sys
import time

import torch

import engine.kernels as K  # before triton: on a machine without CUDA it selects the interpreter
import triton
from engine.kernels import reference as R
from pagesim.outputs import check_output_file

from bench.fp8 import FP8, quantised  # noqa: E402  (after engine.kernels: it imports triton)
from bench.kernels import BF16, BS, D, DECODE_SHAPES, HKV, HQ  # noqa: E402
from engine.kernels.prefill import FP8_PREFILL_CONFIG  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # --smoke runs on the CPU (bench.kernels assumes CUDA)
PREFILL_SHAPES = [(4096, 4096), (512, 4096)]  # (new tokens, context)
SMOKE_DECODE, SMOKE_PREFILL = [(2, 64)], [(32, 48)]
OK_ATOL = 2e-2  # a config whose output differs from the reference by more is marked not ok


GRID = "full"  # "small" (--grid small): the neighbourhood of the fp8 defaults, with 1 and 2 warps; "narrow": below
# "r7": the fp8 prefill's load path (int32 offsets, e4m3 Q K^T) x stages, and each fp8 decode default launch against
# itself with the other offset width (int32 / int64; no split sweep); "r8": the fp8 prefill with both products in e4m3
# (pv_fp8) x tiles and stages, and the decode defaults only


def decode_grid(dtype: str, smoke: bool) -> list[K.DecodeConfig]:
    if GRID in ("r7", "r8") and not smoke:  # the default launch and its int32 twin only (sweep_shape)
        return []
    if GRID == "narrow" and not smoke:  # the fp8 winners of --grid small: 1-2 warps, 2-3 stages, fp16 widening
        if dtype == "bf16":
            return [K.DecodeConfig(bn, w, s) for bn in (64, 128) for w in (2, 4) for s in (3, 4)]
        return [K.DecodeConfig(bn, w, s, "fp16") for bn in (32, 64, 128) for w in (1, 2) for s in (2, 3)]
    if GRID == "small" and not smoke:
        if dtype == "bf16":
            return [K.DecodeConfig(bn, w, s) for bn in (64, 128) for w in (2, 4) for s in (3, 4)]
        return ([K.DecodeConfig(bn, w, s, "fp16") for bn in (32, 64, 128) for w in (1, 2, 4) for s in (2, 3)]
                + [K.DecodeConfig(256, 4, 2, "fp16"), K.DecodeConfig(128, 8, 2, "fp16")])
    if smoke:
        return [K.DecodeConfig(), K.DecodeConfig(block_n=32, fp8_widen="fp16" if dtype == "fp8" else "bf16")]
    block_ns = (64, 128, 256) if dtype == "fp8" else (64, 128)
    widens = ("bf16", "fp16") if dtype == "fp8" else ("bf16",)
    return [K.DecodeConfig(bn, w, s, widen) for bn, w, s, widen in
            itertools.product(block_ns, (2, 4, 8), (2, 3, 4), widens)]


def prefill_grid(dtype: str, smoke: bool) -> list[K.PrefillConfig]:
    if GRID == "r8" and not smoke:  # both products in e4m3 (pv_fp8) x tiles and stages, against qk_fp8 alone
        if dtype == "bf16":
            return []
        e4m3 = dict(fp8_widen="fp16", qk_fp8=True, pv_fp8=True)
        return ([K.PrefillConfig(128, 128, 8, s, **e4m3) for s in (1, 2, 3, 4)]
                + [K.PrefillConfig(128, 64, 8, 3, **e4m3), K.PrefillConfig(128, 64, 4, 3, **e4m3),
                   K.PrefillConfig(64, 128, 4, 3, **e4m3), K.PrefillConfig(64, 64, 4, 3, **e4m3),
                   K.PrefillConfig(128, 128, 8, 1, fp8_widen="fp16", qk_fp8=True)])
    if GRID == "r7" and not smoke:
        if dtype == "bf16":
            return []
        f16 = dict(fp8_widen="fp16", int32_offsets=True)
        # the r7 call (commit a44e65d) ran these less int64 at 2-3 stages, plus register-prefetch configs since removed
        return ([K.PrefillConfig(128, 128, 8, s, fp8_widen="fp16", int32_offsets=i32) for s in (1, 2, 3)
                 for i32 in (True, False)]
                + [K.PrefillConfig(128, 128, 8, s, **f16, qk_fp8=True) for s in (1, 2, 3)]
                + [K.PrefillConfig(128, 64, 4, 1, **f16)])
    if GRID == "small" and not smoke:
        if dtype == "bf16":
            return [K.PrefillConfig(128, 128, 8, s) for s in (3, 4)]
        return [K.PrefillConfig(bm, bn, w, s, "fp16") for bm, bn, w in ((128, 128, 8), (128, 64, 8), (64, 128, 4))
                for s in (1, 2, 3)]
    if smoke:
        return [K.PrefillConfig(16, 16, 4, 2, "fp16" if dtype == "fp8" else "bf16")]
    tiles = [(128, 128, 8, 3), (128, 128, 8, 2), (128, 128, 8, 4), (128, 64, 8, 3), (128, 64, 4, 3), (64, 128, 4, 3),
             (128, 128, 4, 3), (64, 64, 4, 3)]
    widens = ("bf16", "fp16") if dtype == "fp8" else ("bf16",)
    return [K.PrefillConfig(*t, widen) for t in tiles for widen in widens]


def split_candidates(default: int) -> list[int]:
    return sorted({1, max(1, default // 2), default * 2, default * 4, default * 8} - {default})


# ---- the cases: one cache per shape, quantised by the store kernel (per-tensor scale amax / 448) ---------------
def _reference(q, k, v, causal_offset=None) -> torch.Tensor:
    """fp32 attention of q [B, n, Hq, D] over k/v [B, m, Hkv, D] (GQA), one batch row at a time."""
    outs = []
    for b in range(q.shape[0]):
        outs.append(R._attend(q[b], k[b], v[b], D**-0.5, causal_offset))
    return torch.stack(outs)


class Case:
    """Caches (bf16 and fp8), tables, queries and references for one shape; `call(dtype, cfg, splits)` runs it."""

    def __init__(self, kind: str, shape: tuple[int, int]):
        self.kind, self.shape = kind, shape
        g = torch.Generator(device=DEV).manual_seed(sum(shape) + (kind == "prefill"))
        if kind == "decode":
            batch, ctx = shape
            q_rows, seqs = batch, batch
        else:
            q_len, ctx = shape
            q_rows, seqs = q_len, 1
        pages = -(-ctx // BS)
        num_blocks = seqs * pages
        cache_dtype = BF16 if DEV == "cuda" else torch.float32
        self.k = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV).to(cache_dtype)
        self.v = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV).to(cache_dtype)
        (self.k8, self.ks), (self.v8, self.vs) = quantised(self.k, v=False), quantised(self.v, v=True)
        self.tables = torch.randperm(num_blocks, generator=g, device=DEV).view(seqs, pages).to(torch.int32)
        self.lens = torch.full((seqs,), ctx, dtype=torch.int32, device=DEV)
        self.q = torch.randn((q_rows, HQ, D), generator=g, device=DEV).to(cache_dtype)
        self.cu = torch.tensor([0, q_rows], dtype=torch.int32, device=DEV)
        self.out = torch.empty_like(self.q)
        self.kv_bytes = {"bf16": 2 * seqs * ctx * HKV * D * 2, "fp8": 2 * seqs * ctx * HKV * D}
        self.default_splits = (K.default_num_splits(seqs, HKV, pages * BS, torch.device(DEV))
                               if kind == "decode" else None)

    def references(self) -> dict[str, torch.Tensor]:
        seqs = self.tables.shape[0]
        ctx = self.shape[1]
        offset = None if self.kind == "decode" else ctx - self.shape[0]

        def gathered(cache, scale=None, gather=R.gather_kv):
            return torch.stack([R.dequantize(gather(cache, self.tables[b], ctx), scale) for b in range(seqs)])

        q = self.q.view(seqs, -1, HQ, D)
        ref = {"bf16": _reference(q, gathered(self.k), gathered(self.v, gather=R.gather_v), offset),
               "fp8": _reference(q, gathered(self.k8, self.ks), gathered(self.v8, self.vs, R.gather_v), offset)}
        return {name: r.view(self.q.shape) for name, r in ref.items()}

    def call(self, dtype: str, cfg, splits: int | None = None):
        k, v, scales = (self.k8, self.v8, {"k_scale": self.ks, "v_scale": self.vs}) if dtype == "fp8" else (self.k, self.v, {})
        if self.kind == "decode":
            return lambda: K.paged_decode_attention(self.q, k, v, self.tables, self.lens, D**-0.5, num_splits=splits,
                                                    out=self.out, config=cfg, **scales)
        return lambda: K.paged_prefill_attention(self.q, k, v, self.cu, self.lens, self.tables, D**-0.5,
                                                 max_seqlen_q=self.shape[0], out=self.out, config=cfg, **scales)


def jobs(smoke: bool) -> list[tuple]:
    """(kind, shape, dtype, config, splits) launches that compile every kernel the sweep runs. The kernels'
    specialisation does not depend on the decode or prefill shape here (same heads, block size and
    16-divisible strides), so one shape per kind compiles them all; splits 1 and 2 are the two
    specialisations (partials and log-sum-exp, or the output directly)."""
    decode_shape = (SMOKE_DECODE if smoke else DECODE_SHAPES)[-1]
    prefill_shape = (SMOKE_PREFILL if smoke else PREFILL_SHAPES)[-1]
    out = []
    for dtype in ("bf16", "fp8"):
        for cfg in decode_grid(dtype, smoke):
            out += [("decode", decode_shape, dtype, cfg, 1), ("decode", decode_shape, dtype, cfg, 2)]
    if GRID == "r7" and not smoke:  # the defaults and their int32 twins, at each shape's own splits
        for shape in DECODE_SHAPES:
            cfg, splits = _fp8_default(shape)
            out += [("decode", shape, "fp8", c, splits) for c in (cfg, dataclasses.replace(cfg, int32_offsets=False))]
            out.append(("decode", shape, "bf16", K.DecodeConfig(), None))
    if GRID in ("r7", "r8") and not smoke:
        out += [("prefill", prefill_shape, "fp8", cfg, None) for cfg in prefill_grid("fp8", smoke)]
    if not smoke:  # the defaults, where the grid leaves them out
        out += [("prefill", prefill_shape, "bf16", K.PrefillConfig(), None),
                ("prefill", prefill_shape, "fp8", FP8_PREFILL_CONFIG, None)]
    return out


def _fp8_default(shape) -> tuple[K.DecodeConfig, int]:
    from engine.kernels.decode import fp8_decode_launch

    batch, ctx = shape
    return fp8_decode_launch(batch, HKV, -(-ctx // BS) * BS, torch.device(DEV))


_CASES: dict = {}


def _case(kind, shape) -> Case:
    if (kind, shape) not in _CASES:
        _CASES.clear()  # one shape's tensors at a time per process
        _CASES[(kind, shape)] = Case(kind, shape)
    return _CASES[(kind, shape)]


def _warm(job) -> str | None:
    """Compile one job's kernels (a worker process fills Triton's on-disk cache); the error text if it fails."""
    kind, shape, dtype, cfg, splits = job
    try:
        _case(kind, shape).call(dtype, cfg, splits)()
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001 (a config that does not compile is recorded by the main process)
        return f"{type(e).__name__}: {str(e)[:300]}"


def precompile(all_jobs: list[tuple], workers: int) -> float:
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(workers) as pool:
        errors = [e for e in pool.map(_warm, all_jobs, chunksize=1) if e]
    print(f"precompiled {len(all_jobs)} launches in {time.perf_counter() - t0:.0f} s with {workers} workers; "
          f"{len(errors)} failed" + (f" (first: {errors[0]})" if errors else ""), flush=True)
    return time.perf_counter() - t0


def warm_clocks(seconds: float = 2.0) -> None:
    """Keep the GPU busy for a while before the first timing (the first shape's first configs ran at ramping
    clocks in the first H200 run: bf16 (1, 32768) at 79 us there, 52 us later in the same run)."""
    x = torch.empty(1 << 28, dtype=torch.uint8, device=DEV)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        x.add_(1)
        torch.cuda.synchronize()


def measure(fn, smoke: bool) -> float:
    if smoke:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    from triton.testing import do_bench

    return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e-3


def run_config(case: Case, refs: dict, dtype: str, cfg, splits, smoke: bool) -> dict:
    row = {"dtype": dtype, "config": dataclasses.asdict(cfg), "num_splits": splits or case.default_splits}
    try:
        fn = case.call(dtype, cfg, splits)
        case.out.fill_(float("nan"))
        fn()
        diff = (case.out.float() - refs[dtype]).abs()
        err = diff.max().item()
        row.update(mean_abs_err_vs_ref=diff.mean().item(),  # and against attention over the unquantised cache:
                   max_abs_err_vs_bf16_ref=(case.out.float() - refs["bf16"]).abs().max().item(),
                   mean_abs_err_vs_bf16_ref=(case.out.float() - refs["bf16"]).abs().mean().item())
        t = measure(fn, smoke)
    except Exception as e:  # noqa: BLE001 (a config that fails to compile or run is recorded)
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        return row
    row.update(seconds=t, max_abs_err_vs_ref=err, ok=err <= OK_ATOL,
               kv_tb_per_s=case.kv_bytes[dtype] / t / 1e12)
    if case.kind == "decode":
        row["tokens_per_s"] = case.shape[0] / t
    return row


def best_of(rows: list[dict], dtype: str) -> dict | None:
    good = [r for r in rows if r["dtype"] == dtype and r.get("ok")]
    return min(good, key=lambda r: r["seconds"]) if good else None


def sweep_shape(kind: str, shape, smoke: bool, deadline: float) -> dict:
    case = Case(kind, shape)
    refs = case.references()
    quant = (refs["fp8"] - refs["bf16"]).abs()
    out = {"shape": list(shape), "default_splits": case.default_splits, "kv_bytes": case.kv_bytes,
           "fp8_quantisation_error_vs_bf16_ref": {"max_abs": quant.max().item(), "mean_abs": quant.mean().item(),
                                                   "ref_mean_abs": refs["bf16"].abs().mean().item()},
           "results": [], "skipped": []}
    grid = decode_grid if kind == "decode" else prefill_grid
    from engine.kernels.decode import fp8_decode_launch
    from engine.kernels.prefill import FP8_PREFILL_CONFIG

    if kind == "decode":
        seqs, pages = case.tables.shape
        fp8_default, fp8_splits = fp8_decode_launch(seqs, HKV, pages * BS, torch.device(DEV))
        defaults = {"bf16": K.DecodeConfig(), "fp8": fp8_default}
        default_splits = {"bf16": None, "fp8": fp8_splits}
    else:
        defaults = {"bf16": K.PrefillConfig(), "fp8": FP8_PREFILL_CONFIG}
        default_splits = {"bf16": None, "fp8": None}
    for dtype in ("bf16", "fp8"):
        configs = [defaults[dtype]] + [c for c in grid(dtype, smoke) if c != defaults[dtype]]
        if GRID == "r7" and kind == "decode" and dtype == "fp8" and not smoke:
            configs.append(dataclasses.replace(defaults[dtype], int32_offsets=not defaults[dtype].int32_offsets))
        for i, cfg in enumerate(configs):
            if time.perf_counter() > deadline and i:
                out["skipped"].append({"dtype": dtype, "config": dataclasses.asdict(cfg), "reason": "budget"})
                continue
            splits = default_splits[dtype] if i == 0 or (GRID == "r7" and kind == "decode") else None
            row = run_config(case, refs, dtype, cfg, splits, smoke)
            row["default"] = i == 0
            out["results"].append(row)
    if kind == "decode" and GRID not in ("r7", "r8"):  # stage 2: other split counts for the three best configs of each dtype
        for dtype in ("bf16", "fp8"):
            top = sorted((r for r in out["results"] if r["dtype"] == dtype and r.get("ok")), key=lambda r: r["seconds"])[:3]
            for r in top:
                cfg = type(defaults[dtype])(**r["config"])
                for c, splits in [(cfg, splits) for splits in split_candidates(case.default_splits)]:
                    if time.perf_counter() > deadline:
                        out["skipped"].append({"dtype": dtype, "config": dataclasses.asdict(c), "num_splits": splits,
                                               "reason": "budget"})
                        continue
                    out["results"].append(run_config(case, refs, dtype, c, splits, smoke))
    for dtype in ("bf16", "fp8"):
        out[f"best_{dtype}"] = best_of(out["results"], dtype)
        out[f"default_{dtype}"] = next((r for r in out["results"] if r["dtype"] == dtype and r.get("default")), None)
    b, f = out["best_bf16"], out["best_fp8"]
    db, df = out["default_bf16"], out["default_fp8"]
    if b and f:
        out["fp8_speedup_best_vs_best"] = b["seconds"] / f["seconds"]
    if db and df and "seconds" in db and "seconds" in df:
        out["fp8_speedup_default"] = db["seconds"] / df["seconds"]
    return out


def describe(r: dict | None) -> str:
    if not r:
        return "none ok"
    c = r["config"]
    keys = ("block_n", "num_warps", "num_stages", "fp8_widen", "prefetch", "int32_offsets") if "block_m" not in c \
        else ("block_m", "block_n", "num_warps", "num_stages", "fp8_widen", "int32_offsets", "qk_fp8", "pv_fp8")
    return (f"{r['seconds'] * 1e6:8.1f} us {r['kv_tb_per_s']:.2f} TB/s [" + " ".join(f"{k}={c[k]}" for k in keys)
            + f" splits={r['num_splits']}]")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--budget-s", type=float, default=240.0, help="stop timing new configs after this many seconds")
    p.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)),
                   help="compile worker processes")
    p.add_argument("--smoke", action="store_true", help="tiny shapes and two configs (runs on the CPU interpreter)")
    p.add_argument("--grid", choices=["full", "small", "narrow", "r7", "r8"], default="full",
                   help="small: around the fp8 defaults, fp16 widening only, 1-4 warps, 2-3 stages; narrow: decode "
                        "1-2 warps, block_n 32-128, 2-3 stages; r7: fp8 prefill load paths (int32 offsets, "
                        "qk_fp8) x stages, fp8 decode defaults against their other offset width; r8: the prefill "
                        "with both products in e4m3 (pv_fp8) x tiles and stages (decode: the defaults only)")
    p.add_argument("--decode-only", action="store_true", help="skip the prefill sweep")
    p.add_argument("--prefill-only", action="store_true", help="skip the decode sweep")
    args = p.parse_args(argv)
    global GRID
    GRID = args.grid
    check_output_file(p, args.out, args.force)
    if DEV != "cuda" and not args.smoke:
        print("error: bench.fp8_tune needs a CUDA GPU (or --smoke for a CPU check of the script)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    deadline = t0 + args.budget_s
    result = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)",
              "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
              "smoke": args.smoke, "ok_atol": OK_ATOL, "budget_s": args.budget_s, "decode": [], "prefill": []}
    result["grid"] = args.grid
    if DEV == "cuda":
        result["precompile_s"] = precompile([j for j in jobs(args.smoke) if not (j[0] == "prefill" and args.decode_only)
                                             and not (j[0] == "decode" and args.prefill_only)], args.workers)
        warm_clocks()
    kinds = (("decode", SMOKE_DECODE if args.smoke else DECODE_SHAPES),
             ("prefill", SMOKE_PREFILL if args.smoke else PREFILL_SHAPES))
    for kind, shapes in kinds[:1] if args.decode_only else kinds[1:] if args.prefill_only else kinds:
        for shape in shapes:
            row = sweep_shape(kind, shape, args.smoke, deadline)
            result[kind].append(row)
            errors = sum("error" in r for r in row["results"])
            bad = sum(r.get("ok") is False for r in row["results"])
            print(f"{kind} {tuple(shape)}: {len(row['results'])} timed, {errors} errors, {bad} off the reference, "
                  f"{len(row['skipped'])} skipped; quantisation max|fp8 ref - bf16 ref| "
                  f"{row['fp8_quantisation_error_vs_bf16_ref']['max_abs']:.3g}", flush=True)
            for dtype in ("bf16", "fp8"):
                print(f"  {dtype} default {describe(row[f'default_{dtype}'])}", flush=True)
                print(f"  {dtype} best    {describe(row[f'best_{dtype}'])}", flush=True)
            if "fp8_speedup_best_vs_best" in row:
                print(f"  fp8 speed-up: default x{row.get('fp8_speedup_default', float('nan')):.2f}, "
                      f"best vs best x{row['fp8_speedup_best_vs_best']:.2f}", flush=True)
            result["elapsed_s"] = time.perf_counter() - t0
            with open(args.out, "w") as f:  # after every shape: a run cut short keeps what it measured
                json.dump(result, f, indent=1)
    result["elapsed_s"] = time.perf_counter() - t0
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out} ({result['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
