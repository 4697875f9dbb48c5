"""Compile the paged decode and prefill kernels for sm_90 without a GPU and count what their PTX does per tile.

    python -m bench.fp8_ptx

Triton compiles for a named target on any machine (its wheel carries ptxas). For each launch variant
(Llama-3-8B heads, block size 16; decode BLOCK_N 128 with 4 warps, prefill 128x128 tiles with 8 warps) this
prints static counts of the instructions that tell how the K/V tiles reach the tensor cores: cp.async
(global -> shared pipelining), byte-wide shared loads (an 8-bit tile read element by element), ldmatrix,
e4m3 -> f16x2 conversions, mma.sync / wgmma, 16-bit selects (the zeroing of an fp8 V run past the context),
prmt, shfl.sync (warp shuffles: row reductions, and the e4m3 prefill's P moved between operand layouts).
Static counts of the whole kernel (every loop once; the fp8 decode has an unmasked loop over whole tiles and a
masked one for the last tile), not timings. A bf16 cache row is the reference.
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "0"  # compile, never interpret (set before triton is imported)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from engine.kernels.decode import _decode_split_kernel  # noqa: E402
from engine.kernels.prefill import _prefill_kernel  # noqa: E402

PATTERNS = {"cp.async": ("cp.async.cg", "cp.async.ca"), "ld.shared 8-bit": ("ld.shared.u8", "ld.shared.b8"),
            "ldmatrix": ("ldmatrix",), "cvt e4m3x2->f16x2": ("cvt.rn.f16x2.e4m3x2",), "mma.sync": ("mma.sync",),
            "wgmma": ("wgmma.mma_async",), "wgmma e4m3": ("e4m3.e4m3",), "selp.b16": ("selp.b16",), "prmt": ("prmt",),
            "shfl.sync": ("shfl.sync",)}
# (label, kernel, cache, widen, num_stages, option: decode prefetch (bool); prefill None (int64 offsets), "i32", or
# "qk_fp8" (with int32 offsets), "pv_fp8" (e4m3 Q K^T and P V, int32 offsets, P V in flight since round 9))
VARIANTS = [("decode bf16 cache, 3 stages (bf16 default)", "decode", "bf16", None, 3, False),
            ("decode fp8 bf16 widening, 3 stages", "decode", "fp8", "bf16", 3, False),
            ("decode fp8 fp16 widening, 4 stages (old default)", "decode", "fp8", "fp16", 4, False),
            ("decode fp8 fp16 widening, 2 stages (fp8 default)", "decode", "fp8", "fp16", 2, False),
            ("decode fp8 fp16 widening, 1 stage", "decode", "fp8", "fp16", 1, False),
            ("decode fp8 fp16 widening, 1 stage, prefetch", "decode", "fp8", "fp16", 1, True),
            ("prefill bf16 cache, 3 stages (bf16 default)", "prefill", "bf16", None, 3, False),
            ("prefill fp8 fp16 widening, 1 stage, int64 (r6 default)", "prefill", "fp8", "fp16", 1, False),
            ("prefill fp8 fp16 widening, 1 stage, int32", "prefill", "fp8", "fp16", 1, "i32"),
            ("prefill fp8 1 stage, int32, e4m3 Q K^T", "prefill", "fp8", "fp16", 1, "qk_fp8"),
            ("prefill fp8 2 stages, int32, e4m3 Q K^T", "prefill", "fp8", "fp16", 2, "qk_fp8")]
VARIANTS += [(f"prefill fp8 {s} stage{'s' * (s > 1)}, int32, e4m3 Q K^T and P V (in flight)", "prefill", "fp8", "fp16", s,
              "pv_fp8")
             for s in (1, 2, 3)]
DOT = {None: None, "bf16": tl.bfloat16, "fp16": tl.float16}


def ptx(kernel: str, cache: str, widen: str | None, stages: int, prefetch: bool) -> str:
    elem = "*fp8e4nv" if cache == "fp8" else "*bf16"
    if kernel == "decode":
        fn, warps = _decode_split_kernel, 4
        sig = {"q": "*bf16", "k_cache": elem, "v_cache": elem, "block_tables": "*i32", "context_lens": "*i32",
               "o": "*bf16", "lse": "*fp32", "qk_scale": "fp32", "k_scale": "*fp32", "v_scale": "*fp32",
               "stride_qb": "i32", "stride_qh": "i32", "stride_bt": "i32", "stride_ob": "i32", "stride_oh": "i32",
               "stride_os": "i32"}
        const = dict(NUM_KV_HEADS=8, HEAD_DIM=128, BLOCK_SIZE=16, GROUP=4, GROUP_PAD=16, BLOCK_N=128,
                     STORE_LSE=False, DOT_DTYPE=DOT[widen], FP8=cache == "fp8", PREFETCH=prefetch, I32=False)
        pointers = 10
    else:
        fn, warps = _prefill_kernel, 8
        sig = {"q": "*bf16", "k_cache": elem, "v_cache": elem, "o": "*bf16", "cu_seqlens_q": "*i32",
               "context_lens": "*i32", "block_tables": "*i32", "qk_scale": "fp32", "k_scale": "*fp32",
               "v_scale": "*fp32", "stride_qt": "i32", "stride_qh": "i32", "stride_ot": "i32", "stride_oh": "i32",
               "stride_bt": "i32", "batch": "i32", "num_tiles": "i32"}
        const = dict(NUM_KV_HEADS=8, HEAD_DIM=128, BLOCK_SIZE=16, GROUP=4, BLOCK_M=128, BLOCK_N=128,
                     DOT_DTYPE=DOT[widen], FP8=cache == "fp8", PACK_GQA=False, LONGEST_FIRST=True,
                     I32=cache == "bf16" or bool(prefetch),
                     QK_FP8=tl.float8e4nv if prefetch in ("qk_fp8", "pv_fp8") else None,
                     PV_FP8=tl.float8e4nv if prefetch == "pv_fp8" else None)
        pointers = 10
    sig.update({name: "constexpr" for name in const})
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(pointers)}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, "num_stages": stages}).asm["ptx"]


def main() -> int:
    print(f"triton {triton.__version__}, target sm_90; static instruction counts in the PTX")
    print(f"{'variant':52s}" + "".join(f"{name:>18s}" for name in PATTERNS))
    for label, *args in VARIANTS:
        text = ptx(*args)
        counts = [sum(text.count(p) for p in pats) for pats in PATTERNS.values()]
        print(f"{label:52s}" + "".join(f"{c:18d}" for c in counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
