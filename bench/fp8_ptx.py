"""Compile the fp8 paged decode kernel for sm_90 without a GPU and count what its PTX does per tile.

    python -m bench.fp8_ptx

Triton compiles for a named target on any machine (its wheel carries ptxas). For each launch variant
(Llama-3-8B heads, block size 16, BLOCK_N 128, 4 warps) this prints static counts of the instructions
that tell how the fp8 tiles reach the tensor cores: cp.async (global -> shared pipelining), byte-wide
shared loads (an 8-bit tile read element by element), ldmatrix, e4m3 -> f16x2 conversions, mma.sync.
Static counts of the unrolled loop body, not timings.
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "0"  # compile, never interpret (set before triton is imported)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from engine.kernels.decode import _decode_split_kernel  # noqa: E402

PATTERNS = {"cp.async": ("cp.async.cg", "cp.async.ca"), "ld.shared 8-bit": ("ld.shared.u8", "ld.shared.b8"), "ldmatrix": ("ldmatrix",), "cvt e4m3x2->f16x2": ("cvt.rn.f16x2.e4m3x2",),
            "mma.sync": ("mma.sync",), "prmt": ("prmt",)}
VARIANTS = [("bf16 widening, 3 stages (old default)", "bf16", 3, False),
            ("fp16 widening, 4 stages (fp8 default)", "fp16", 4, False),
            ("fp16 widening, 1 stage", "fp16", 1, False),
            ("fp16 widening, 1 stage, prefetch", "fp16", 1, True),
            ("fp16 widening, 2 stages, prefetch", "fp16", 2, True)]


def ptx(widen: str, stages: int, prefetch: bool) -> str:
    sig = {"q": "*bf16", "k_cache": "*fp8e4nv", "v_cache": "*fp8e4nv", "block_tables": "*i32", "context_lens": "*i32",
           "o": "*bf16", "lse": "*fp32", "qk_scale": "fp32", "k_scale": "*fp32", "v_scale": "*fp32",
           "stride_qb": "i32", "stride_qh": "i32", "stride_bt": "i32", "stride_ob": "i32", "stride_oh": "i32",
           "stride_os": "i32"}
    const = dict(NUM_KV_HEADS=8, HEAD_DIM=128, BLOCK_SIZE=16, GROUP=4, GROUP_PAD=16, BLOCK_N=128, STORE_LSE=False,
                 DOT_DTYPE=tl.float16 if widen == "fp16" else tl.bfloat16, FP8=True, PREFETCH=prefetch)
    sig.update({name: "constexpr" for name in const})
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(10)}
    src = triton.compiler.ASTSource(fn=_decode_split_kernel, signature=sig, constexprs=const, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": 4, "num_stages": stages}).asm["ptx"]


def main() -> int:
    print(f"triton {triton.__version__}, target sm_90; static instruction counts in the PTX")
    print(f"{'variant':42s}" + "".join(f"{name:>20s}" for name in PATTERNS))
    for label, widen, stages, prefetch in VARIANTS:
        text = ptx(widen, stages, prefetch)
        counts = [sum(text.count(p) for p in pats) for pats in PATTERNS.values()]
        print(f"{label:42s}" + "".join(f"{c:20d}" for c in counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
