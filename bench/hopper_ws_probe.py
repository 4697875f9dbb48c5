"""Does Triton warp-specialise an attention key loop on sm_90? Compile one without a GPU and compare the PTX.

    python -m bench.hopper_ws_probe

FlashAttention-3 (FlashInfer's fa3 backend, the paged-prefill target of issue #13) overlaps one warpgroup's softmax
with another's wgmma, fed by a producer warp; Triton expresses that only through `tl.range(..., warp_specialize=True)`.
This compiles a FlashAttention forward loop whose K/V tiles come by TMA (tensor descriptors, the loads Triton's warp
specialisation is built around) and, as the engine's paged prefill does, a loop of pointer loads (cp.async), each with
and without the flag, for sm_90 (Triton carries ptxas; no GPU needed), and prints counts of the instructions a
warp-specialised kernel has: setmaxnreg (registers moved between producer and consumer warps), mbarrier operations,
TMA copies, wgmma; and whether the PTX is the same with and without the flag. Then the same question of Gluon
(`triton.experimental.gluon`, Triton's lower-level language, in which a kernel names its warp partitions itself):
a kernel with a default and a worker partition, compiled for sm_90. Static counts, not timings.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # compile, never interpret (set before triton is imported)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402


@triton.jit
def _tma_loop(q_ptr, k_ptr, v_ptr, o_ptr, n_keys, qk_scale, ROWS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
              D: tl.constexpr, WS: tl.constexpr):
    pid = tl.program_id(0)
    q_desc = tl.make_tensor_descriptor(q_ptr, shape=[ROWS, D], strides=[D, 1], block_shape=[BM, D])
    k_desc = tl.make_tensor_descriptor(k_ptr, shape=[ROWS, D], strides=[D, 1], block_shape=[BN, D])
    v_desc = tl.make_tensor_descriptor(v_ptr, shape=[ROWS, D], strides=[D, 1], block_shape=[BN, D])
    o_desc = tl.make_tensor_descriptor(o_ptr, shape=[ROWS, D], strides=[D, 1], block_shape=[BM, D])
    q = q_desc.load([pid * BM, 0])
    m_i = tl.full([BM], -float("inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for start in tl.range(0, n_keys, BN, warp_specialize=WS):
        qk = tl.dot(q, k_desc.load([start, 0]).T) * qk_scale
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.bfloat16), v_desc.load([start, 0]), acc * alpha[:, None])
        m_i = m_ij
    o_desc.store([pid * BM, 0], (acc / l_i[:, None]).to(tl.bfloat16))


@triton.jit
def _pointer_loop(q_ptr, k_ptr, v_ptr, o_ptr, n_keys, qk_scale, ROWS: tl.constexpr, BM: tl.constexpr,
                  BN: tl.constexpr, D: tl.constexpr, WS: tl.constexpr):
    pid = tl.program_id(0)
    rows, keys, dims = pid * BM + tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    q = tl.load(q_ptr + rows[:, None] * D + dims[None, :])
    m_i = tl.full([BM], -float("inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for start in tl.range(0, n_keys, BN, warp_specialize=WS):
        kv = (start + keys)[:, None] * D + dims[None, :]
        qk = tl.dot(q, tl.load(k_ptr + kv).T) * qk_scale
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.bfloat16), tl.load(v_ptr + kv), acc * alpha[:, None])
        m_i = m_ij
    tl.store(o_ptr + rows[:, None] * D + dims[None, :], (acc / l_i[:, None]).to(tl.bfloat16))


def gluon_setmaxnreg() -> int:
    """setmaxnreg instructions in the sm_90 PTX of a Gluon kernel with a default and a 1-warp worker partition."""
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    @gluon.jit
    def default(ptr):
        offs = gl.arange(0, 128, gl.BlockedLayout([1], [32], [4], [0]))
        gl.store(ptr + offs, offs.to(gl.float32))

    @gluon.jit
    def worker(ptr):
        offs = gl.arange(0, 32, gl.BlockedLayout([1], [32], [1], [0]))
        gl.store(ptr + 128 + offs, offs.to(gl.float32))

    @gluon.jit
    def kernel(ptr):
        gl.warp_specialize([(default, (ptr,)), (worker, (ptr,))], [1], [24])

    src = gluon._runtime.GluonASTSource(fn=kernel, signature={"ptr": "*fp32"}, constexprs={}, attrs={})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"].count("setmaxnreg")


PATTERNS = {"setmaxnreg": "setmaxnreg", "mbarrier": "mbarrier.", "TMA copies": "cp.async.bulk.tensor",
            "cp.async": "cp.async.cg", "wgmma": "wgmma.mma_async"}


def ptx(fn, warp_specialize: bool) -> str:
    sig = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "n_keys": "i32", "qk_scale": "fp32"}
    const = dict(ROWS=4096, BM=128, BN=128, D=128, WS=warp_specialize)
    sig.update({name: "constexpr" for name in const})
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=const,
                                    attrs={(i,): [["tt.divisibility", 16]] for i in range(4)})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 2}).asm["ptx"]


def main() -> int:
    print(f"triton {triton.__version__}, sm_90, 128x128 tiles, head dim 128, 8 warps, 2 stages")
    for name, fn in (("TMA loads", _tma_loop), ("pointer loads", _pointer_loop)):
        off, on = ptx(fn, False), ptx(fn, True)
        counts = {flag: {k: text.count(p) for k, p in PATTERNS.items()} for flag, text in (("off", off), ("on", on))}
        print(f"{name}: warp_specialize off {counts['off']}; on {counts['on']}; PTX identical: {off == on}")
    print(f"Gluon warp_specialize (default + 1-warp worker partition): setmaxnreg {gluon_setmaxnreg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
