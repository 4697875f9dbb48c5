"""Paged prefill attention over an fp8 (e4m3) cache for Hopper (sm_90), in Gluon (issue #14: fp8 prefill not slower
than bf16, whose default on sm_90 is engine.kernels.prefill_gluon since round 28).

The same contract and numerics as the Triton kernel's fp8 default (engine.kernels.prefill.FP8_PREFILL_CONFIG: both
products in e4m3, q rounded to e4m3 with one scale per row, P * P_SCALE rounded to e4m3, K's scale folded into the
score scale and V's into the output), with prefill_gluon's structure: work items of 128 query rows of one head,
longest first, optionally a persistent grid; two consumer warpgroups of 64 rows (S_j = Q K_j^T and O += P_{j-1}
V_{j-1} as asynchronous wgmma in flight together, S_j's softmax under P V, optional ping-pong); a loader warp issuing
the TMA copies; and a gathering warpgroup (below).

What fp8 changes:
- A cache row of one head is 128 bytes, one swizzle atom: one TMA copy per cache block for K and one for V (the
  16-bit kernel needs two, one per 64-column half).
- e4m3 wgmma takes both operands K-major. Q K^T is (Q: head dim contiguous; K as stored: head dim contiguous), and
  so is P V, because an fp8 cache stores each block's V transposed ([Hkv, 128, block_size], engine.kernels.cache).
  But one TMA copy brings one block's V^T [128, block_size], whose rows of block_size bytes are narrower than the
  128-byte swizzled rows the tensor cores read a 128-key tile from. So the loader copies each block's V^T into an
  unswizzled staging slot (num_staging tiles deep), and the gathering warpgroup reads a tile's staged blocks as one
  [128, BLOCK_N] tensor (a linear shared layout: 16 bytes a thread and block) and stores it into one swizzled V^T
  tile, zeroing the keys past the context (a never-written slot may hold NaN; P is 0 there, but 0 x NaN is not).
  Copies and gather in partitions of their own: in one, the compiler, unable to tell the buffers apart, put a
  barrier of all its warps before every TMA copy (bench/NOTES.md, round 30). Cache blocks of at least 16 tokens (a
  TMA row is at least 16 bytes).
- P goes to the tensor cores as each thread holds it: the e4m3 A operand wants 4 adjacent keys of every 16 where the
  accumulator gives a thread 2 adjacent of every 8, so the 16 keys of each group are reordered (_operand_order) in P
  and, the same way, in V^T's gather; the product's sum over keys does not see the order, and no value crosses lanes.
- Each consumer rounds its 64 query rows to e4m3 itself (loaded from global memory, one scale per row, into shared
  memory for the products), so no pass over q precedes the kernel; the scales ride in the exponent's FMA (P x 256 as
  exp2(x + 8), the factor cancelling in the row sum).

Gluon kernels compile for a GPU only (no TRITON_INTERPRET): tests/gpu/test_prefill_gluon_gpu.py checks this kernel
against the Triton kernel's fp8 path and a dequantised reference; `bench.fp8` times it beside the bf16 default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from engine.kernels.decode import LOG2E
from engine.kernels.launch import Launch
from engine.kernels.prefill_gluon import (_capability, _causal_mask, _cta_barrier, _work, barriers,
                                          cache_descriptor, persistent_for_short_chunks, pipeline_barriers)

HEAD_DIM = 128  # one 128-byte swizzle atom of e4m3
HEAD: gl.constexpr = gl.constexpr(HEAD_DIM)
GATHER_WARPS: gl.constexpr = gl.constexpr(4)  # the gathering warpgroup (one warp's gather: 2.1-2.4x slower)
P_SCALE = gl.constexpr(256.0)  # as engine.kernels.prefill.P_SCALE: P in [0, 1] as e4m3 times this (a power of 2)
LOG2_P_SCALE = gl.constexpr(8.0)  # P * P_SCALE computed as exp2(x + 8); the sum l carries the factor too, so it cancels


@gluon.jit
def _operand_order(x, N: gl.constexpr):
    """x [R, N] with its last axis reordered within each 16-element group: position 4q + 2g + c takes element
    8g + 2q + c (q < 4, g < 2, c < 2). A thread of a wgmma accumulator holds, of each 16 columns, the ones an e4m3
    A operand wants at 4q..4q+3 (its lane's q = lane % 4) in this order, so P reordered so goes to the tensor cores
    with no exchange between lanes; V^T's keys are reordered the same way (the product's sum does not care)."""
    R: gl.constexpr = x.shape[0]
    y = gl.reshape(x, [R, N // 16, 2, 4, 2])
    return gl.reshape(gl.permute(y, (0, 1, 3, 2, 4)), [R, N])


@dataclass(frozen=True, slots=True)
class GluonFp8PrefillConfig:
    block_m: int = 128  # query rows per work item (two consumer warpgroups of 64 rows)
    block_n: int = 128  # keys per tile
    num_stages: int = 3  # K and V^T buffers each (16 KiB a buffer)
    # staging slots of V^T as copied: the loader runs up to num_staging tiles ahead of the gather (H100, round 30: 3
    # is 0.3-5% faster than 2)
    num_staging: int = 3
    gather_regs: int = 56  # per thread of the gathering warpgroup (setmaxnreg; a key tile's V^T is 32 of them)
    loader_regs: int = 24  # per thread of the loader warp
    consumer_regs: int = 216  # of the second consumer warpgroup (the first takes the rest)
    pingpong: bool = True  # as GluonPrefillConfig.pingpong
    persistent: int = 0  # as GluonPrefillConfig.persistent


DEFAULT_CONFIG = GluonFp8PrefillConfig()


def default_config(device: torch.device, max_seqlen_q: int) -> GluonFp8PrefillConfig:
    """The launch paged_prefill_attention uses with no config on an fp8 cache: DEFAULT_CONFIG, persistent for short
    chunks (the bf16 kernel's rule)."""
    return persistent_for_short_chunks(DEFAULT_CONFIG, device, max_seqlen_q)


def supported(q: torch.Tensor, k_cache: torch.Tensor, cfg: GluonFp8PrefillConfig | None = None) -> str | None:
    """Why this kernel cannot take the call (None: it can)."""
    cfg = cfg or DEFAULT_CONFIG
    _, block_size, _, head_dim = k_cache.shape
    if not q.is_cuda or _capability(q.device)[0] != 9:
        return "needs an sm_90 GPU"
    if k_cache.dtype != torch.float8_e4m3fn or q.dtype not in (torch.bfloat16, torch.float16):
        return "needs an e4m3 cache and a 16-bit query"
    if head_dim != HEAD.value:
        return "needs head_dim 128"
    if block_size < 16 or cfg.block_n % block_size:  # a TMA copy's rows: V^T's, a block's keys, >= 16 bytes
        return f"needs cache blocks of 16..{cfg.block_n} tokens dividing block_n"
    if q.stride(2) != 1:
        return "needs each head's dims contiguous"
    return None


@gluon.constexpr_function
def _staged_tile_layout(BLOCK_N, BLOCK_SIZE):
    """The staging buffers of one key tile ([BLOCK_N // BLOCK_SIZE blocks, HEAD, BLOCK_SIZE] bytes as the TMA copies
    left them, unswizzled) read as the tile's V^T [HEAD, BLOCK_N]: offset bits take a block row's keys, then the
    head-dim row, then the block."""
    bases = []
    for extent, unit in ((BLOCK_SIZE, [0, 1]), (HEAD_DIM, [1, 0]), (BLOCK_N // BLOCK_SIZE, [0, BLOCK_SIZE])):
        step = 1
        while step < extent:  # one offset bit per power of two of this extent
            bases.append([unit[0] * step, unit[1] * step])
            step *= 2
    return gl.SharedLinearLayout(bases)


@gluon.constexpr_function
def _gather_layout(BLOCK_SIZE):
    """16 bytes (keys of one block) a thread, a block row's 16-byte pieces on adjacent lanes, then rows, the four
    warps along rows: a warp reads 512 contiguous bytes of the staging buffers."""
    lanes_k = BLOCK_SIZE // 16
    return gl.BlockedLayout([1, 16], [32 // lanes_k, lanes_k], [GATHER_WARPS.value, 1], [1, 0])


@gluon.jit
def _gather_v(vstage, vt, staged, staging_free, vt_ready, vt_empty, c, key0, ctx, BLOCK_N: gl.constexpr,
              BLOCK_SIZE: gl.constexpr, NUM_STAGES: gl.constexpr, NUM_STAGING: gl.constexpr):
    """Key tile c (keys key0 ..): its cache blocks' V^T as copied (staging slot c % NUM_STAGING) into one swizzled
    V^T tile [128, BLOCK_N] (buffer c % NUM_STAGES) once both consumers have released it, keys in P's operand order,
    keys at or past the context as 0; then V^T's ready barrier. The staging slot goes back to the loader once read.
    One load of the whole tile, then one store (per block a load and a store made the compiler put a barrier between
    each: it cannot tell the staging buffers from the tile), the bytes moved as int8. The fence orders these generic
    accesses before the tensor cores' reads of V^T."""
    layout: gl.constexpr = _gather_layout(BLOCK_SIZE)
    s = c % NUM_STAGES
    r = c % NUM_STAGING
    mbarrier.wait(staged.index(r), c // NUM_STAGING & 1)
    src = vstage.index(r)._reinterpret(gl.int8, [HEAD, BLOCK_N], _staged_tile_layout(BLOCK_N, BLOCK_SIZE))
    tile = src.load(layout)
    mbarrier.arrive(staging_free.index(r), count=1)  # the staging slot back to the loader warp
    valid = ctx - key0  # keys of this tile before the context's end
    if valid < BLOCK_N:  # a never-written slot may hold NaN: P is 0 there, but 0 x NaN is not
        cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
        tile = gl.where((cols < valid)[None, :], tile, gl.zeros_like(tile))
    tile = gl.convert_layout(_operand_order(tile, BLOCK_N), layout)  # keys in P's operand order, within each thread
    mbarrier.wait(vt_empty.index(s), (c // NUM_STAGES & 1) ^ 1)
    vt.index(s)._reinterpret(gl.int8, [HEAD, BLOCK_N], vt.layout).store(tile)
    fence_async_shared()
    mbarrier.arrive(vt_ready.index(s), count=1)


@gluon.jit
def _loader(k_desc, v_desc, kbuf, vstage, k_ready, k_empty, staged, staging_free, cu_seqlens_q, context_lens,
            block_tables, stride_bt, batch, num_tiles, NUM_HEADS: gl.constexpr, GROUP: gl.constexpr,
            NUM_KV_HEADS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_SIZE: gl.constexpr,
            NUM_STAGES: gl.constexpr, NUM_STAGING: gl.constexpr):
    """The loader warp: each key tile's K and V^T TMA copies, one per cache block each, once the consumers have
    released K's buffer and the gathering warps the staging slot. `c` counts the key tiles across work items, as the
    other partitions count them. Block-table entries past the sequence's blocks read block 0 (finite or not: those
    keys are masked and V's slots zeroed)."""
    NB: gl.constexpr = BLOCK_N // BLOCK_SIZE
    nbytes: gl.constexpr = BLOCK_N * HEAD
    c = 0
    for t in range(gl.program_id(0), batch * num_tiles * NUM_HEADS, gl.num_programs(0)):
        tile, b, head, q_start, q_len, ctx, first, n_kv = _work(t, cu_seqlens_q, context_lens, batch, num_tiles,
                                                                NUM_HEADS, BLOCK_M, BLOCK_N)
        bt_row = block_tables + b * stride_bt
        n_blocks = gl.cdiv(ctx, BLOCK_SIZE)
        kvh = head // GROUP
        for j in range(n_kv):
            stage = c % NUM_STAGES
            r = c % NUM_STAGING
            mbarrier.wait(staging_free.index(r), (c // NUM_STAGING & 1) ^ 1)
            mbarrier.expect(staged.index(r), nbytes)
            mbarrier.wait(k_empty.index(stage), (c // NUM_STAGES & 1) ^ 1)
            mbarrier.expect(k_ready.index(stage), nbytes)
            for i in gl.static_range(NB):
                idx = j * NB + i
                blk = gl.load(bt_row + idx, mask=idx < n_blocks, other=0)
                tma.async_copy_global_to_shared(v_desc, [(blk * NUM_KV_HEADS + kvh) * HEAD, 0], staged.index(r),
                                                vstage.index(r).slice(i * HEAD, HEAD))
                tma.async_copy_global_to_shared(k_desc, [blk * BLOCK_SIZE, kvh * HEAD], k_ready.index(stage),
                                                kbuf.index(stage).slice(i * BLOCK_SIZE, BLOCK_SIZE))
            c += 1


@gluon.jit
def _gatherer(vstage, vt, staged, staging_free, vt_ready, vt_empty, cu_seqlens_q, context_lens, batch, num_tiles,
              NUM_HEADS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_SIZE: gl.constexpr,
              NUM_STAGES: gl.constexpr, NUM_STAGING: gl.constexpr):
    """The gathering warpgroup: each key tile's V^T from the staging slot into a V^T tile."""
    c = 0
    for t in range(gl.program_id(0), batch * num_tiles * NUM_HEADS, gl.num_programs(0)):
        tile, b, head, q_start, q_len, ctx, first, n_kv = _work(t, cu_seqlens_q, context_lens, batch, num_tiles,
                                                                NUM_HEADS, BLOCK_M, BLOCK_N)
        for j in range(n_kv):
            _gather_v(vstage, vt, staged, staging_free, vt_ready, vt_empty, c, j * BLOCK_N, ctx, BLOCK_N, BLOCK_SIZE,
                      NUM_STAGES, NUM_STAGING)
            c += 1


@gluon.jit
def _consumer(q, o, q_smem, kbuf, vt, k_ready, k_empty, vt_ready, vt_empty, turn, cu_seqlens_q, context_lens,
              qk_scale, k_scale, v_scale, stride_qt, stride_qh, stride_ot, stride_oh, batch, num_tiles,
              NUM_HEADS: gl.constexpr, WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr):
    """One warpgroup: rows WG * BLOCK_M // 2 .. of each work item's tile, as prefill_gluon._consumer with e4m3
    products: its q rows rounded to e4m3 (a scale per row, folded with K's into the row's score scale), P * P_SCALE
    rounded to e4m3 as the A operand, V^T from the gathering warpgroup."""
    ROWS: gl.constexpr = BLOCK_M // 2
    fp8: gl.constexpr = gl.float8e4nv
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 32])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD, 32])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    col_o: gl.constexpr = gl.SliceLayout(0, o_layout)
    q8 = q_smem.index(WG)
    cols = gl.arange(0, BLOCK_N, layout=col_s)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    base_scale = qk_scale * gl.load(k_scale)
    out_scale = gl.load(v_scale)
    c = 0
    for t in range(gl.program_id(0), batch * num_tiles * NUM_HEADS, gl.num_programs(0)):
        tile, b, head, q_start, q_len, ctx, first, n_kv = _work(t, cu_seqlens_q, context_lens, batch, num_tiles,
                                                                NUM_HEADS, BLOCK_M, BLOCK_N)
        if n_kv > 0:
            # this warpgroup's q rows to e4m3, one scale per row (the last item's products have all retired)
            qr = tile * BLOCK_M + WG * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, q_layout))
            qd = gl.arange(0, HEAD, layout=gl.SliceLayout(0, q_layout))
            qv = gl.load(q + (q_start + qr).to(gl.int64)[:, None] * stride_qt + head * stride_qh + qd[None, :],
                         mask=(qr < q_len)[:, None], other=0.0).to(gl.float32)
            amax = gl.max(gl.abs(qv), 1)
            q_scale = gl.where(amax > 0, amax / 448.0, 1.0)
            q8.store((qv * (1.0 / q_scale)[:, None]).to(fp8))
            fence_async_shared()
            _cta_barrier()
            row_scale = gl.convert_layout(q_scale, row_s) * base_scale  # the score scale of each row

            rows = first + WG * ROWS + gl.arange(0, ROWS, layout=row_s)  # each row's position
            n_unmasked = (first + WG * ROWS + 1) // BLOCK_N  # key tiles every row sees whole
            acc = gl.zeros([ROWS, HEAD], gl.float32, o_layout)

            sk = c % NUM_STAGES  # tile 0: scores and softmax (its P V is the loop's first)
            mbarrier.wait(k_ready.index(sk), c // NUM_STAGES & 1)
            if PINGPONG:  # warpgroup 0 goes first (parity 1 of a fresh barrier counts as complete)
                mbarrier.wait(turn.index(WG), (c & 1) ^ (1 - WG))
            s = warpgroup_mma(q8, kbuf.index(sk).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            if PINGPONG:
                mbarrier.arrive(turn.index(1 - WG), count=1)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
            mbarrier.arrive(k_empty.index(sk), count=1)
            if n_unmasked == 0:
                s = _causal_mask(s, 0, cols, rows, ctx)
            m_i = gl.max(s, 1) * row_scale  # the running max of the scaled scores (row_scale > 0)
            p = gl.exp2(s * row_scale[:, None] + (LOG2_P_SCALE - m_i)[:, None])  # P * P_SCALE
            l_i = gl.sum(p, 1)
            p_op = gl.convert_layout(_operand_order(p.to(fp8), BLOCK_N), p_layout)

            for j in range(1, n_kv):
                sk = (c + j) % NUM_STAGES
                sv = (c + j - 1) % NUM_STAGES
                mbarrier.wait(k_ready.index(sk), (c + j) // NUM_STAGES & 1)
                mbarrier.wait(vt_ready.index(sv), (c + j - 1) // NUM_STAGES & 1)
                if PINGPONG:
                    mbarrier.wait(turn.index(WG), ((c + j) & 1) ^ (1 - WG))
                s = warpgroup_mma(q8, kbuf.index(sk).permute((1, 0)), zero_s, use_acc=False, is_async=True)
                acc = warpgroup_mma(p_op, vt.index(sv).permute((1, 0)), acc, is_async=True)
                if PINGPONG:
                    mbarrier.arrive(turn.index(1 - WG), count=1)
                s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
                mbarrier.arrive(k_empty.index(sk), count=1)
                if j >= n_unmasked:
                    s = _causal_mask(s, j * BLOCK_N, cols, rows, ctx)
                m_new = gl.maximum(m_i, gl.max(s, 1) * row_scale)
                p = gl.exp2(s * row_scale[:, None] + (LOG2_P_SCALE - m_new)[:, None])
                alpha = gl.exp2(m_i - m_new)
                l_i = l_i * alpha + gl.sum(p, 1)
                m_i = m_new
                # (P's e4m3 registers cannot be named as a dependency: the wait's lowering takes 16- and 32-bit
                # values only; the next P is a new value, so nothing writes them before this wait)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                mbarrier.arrive(vt_empty.index(sv), count=1)
                acc = acc * gl.convert_layout(alpha, row_o)[:, None]
                p_op = gl.convert_layout(_operand_order(p.to(fp8), BLOCK_N), p_layout)

            last = n_kv - 1
            sv = (c + last) % NUM_STAGES
            mbarrier.wait(vt_ready.index(sv), (c + last) // NUM_STAGES & 1)
            acc = warpgroup_mma(p_op, vt.index(sv).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            mbarrier.arrive(vt_empty.index(sv), count=1)
            c += n_kv

            inv = gl.convert_layout(out_scale / l_i, row_o)[:, None]
            r = tile * BLOCK_M + WG * ROWS + gl.arange(0, ROWS, layout=row_o)
            d = gl.arange(0, HEAD, layout=col_o)
            ptrs = o + (q_start + r).to(gl.int64)[:, None] * stride_ot + head * stride_oh + d[None, :]
            gl.store(ptrs, (acc * inv).to(o.dtype.element_ty), mask=(r < q_len)[:, None])


@gluon.jit(do_not_specialize=["batch", "num_tiles"])  # shape counts that vary per step: one compiled variant
def _gluon_fp8_prefill_kernel(q, k_desc, v_desc, o, cu_seqlens_q, context_lens, block_tables, qk_scale, k_scale,
                              v_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_bt, batch, num_tiles,
                              NUM_HEADS: gl.constexpr, GROUP: gl.constexpr, NUM_KV_HEADS: gl.constexpr,
                              BLOCK_SIZE: gl.constexpr,
                              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                              NUM_STAGING: gl.constexpr, GATHER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                              PINGPONG: gl.constexpr, LOADER_REGS: gl.constexpr):
    """Work items (query tile, sequence, head) pid, pid + programs, ...: one each with the default grid (one program
    per work item), several with a persistent grid."""
    fp8: gl.constexpr = gl.float8e4nv
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M // 2, HEAD], fp8)
    vt_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEAD, BLOCK_N], fp8)
    q_smem = gl.allocate_shared_memory(fp8, [2, BLOCK_M // 2, HEAD], q_layout)
    kbuf = gl.allocate_shared_memory(fp8, [NUM_STAGES, BLOCK_N, HEAD], k_desc.layout)
    vstage = gl.allocate_shared_memory(fp8, [NUM_STAGING, BLOCK_N // BLOCK_SIZE * HEAD, BLOCK_SIZE], v_desc.layout)
    vt = gl.allocate_shared_memory(fp8, [NUM_STAGES, HEAD, BLOCK_N], vt_layout)
    k_ready, vt_ready, k_empty, vt_empty, turn = pipeline_barriers(NUM_STAGES)
    staged = barriers(NUM_STAGING, 1)
    staging_free = barriers(NUM_STAGING, 1)
    fence_async_shared()
    WG0: gl.constexpr = 0
    WG1: gl.constexpr = 1
    gl.warp_specialize([
        (_consumer, (q, o, q_smem, kbuf, vt, k_ready, k_empty, vt_ready, vt_empty, turn, cu_seqlens_q,
                     context_lens, qk_scale, k_scale, v_scale, stride_qt, stride_qh, stride_ot, stride_oh, batch,
                     num_tiles, NUM_HEADS, WG0, BLOCK_M, BLOCK_N, NUM_STAGES, PINGPONG)),
        (_consumer, (q, o, q_smem, kbuf, vt, k_ready, k_empty, vt_ready, vt_empty, turn, cu_seqlens_q,
                     context_lens, qk_scale, k_scale, v_scale, stride_qt, stride_qh, stride_ot, stride_oh, batch,
                     num_tiles, NUM_HEADS, WG1, BLOCK_M, BLOCK_N, NUM_STAGES, PINGPONG)),
        (_loader, (k_desc, v_desc, kbuf, vstage, k_ready, k_empty, staged, staging_free, cu_seqlens_q,
                   context_lens, block_tables, stride_bt, batch, num_tiles, NUM_HEADS, GROUP, NUM_KV_HEADS,
                   BLOCK_M, BLOCK_N, BLOCK_SIZE, NUM_STAGES, NUM_STAGING)),
        (_gatherer, (vstage, vt, staged, staging_free, vt_ready, vt_empty, cu_seqlens_q, context_lens, batch,
                     num_tiles, NUM_HEADS, BLOCK_M, BLOCK_N, BLOCK_SIZE, NUM_STAGES, NUM_STAGING)),
    ], [4, 1, GATHER_WARPS], [CONSUMER_REGS, LOADER_REGS, GATHER_REGS])


KERNEL = _gluon_fp8_prefill_kernel  # what this module launches (default_prefill_kernel names it)


def _layer_args(k_cache, v_cache, k_scale, v_scale):
    """Launch.adapt: a layer's (k_cache, v_cache, k_scale, v_scale) as the kernel's (k_desc, v_desc, scales)."""
    return cache_descriptor(k_cache), cache_descriptor(v_cache, v_transposed=True), k_scale, v_scale


def gluon_fp8_launch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     context_lens: torch.Tensor, block_tables: torch.Tensor, scale: float, out: torch.Tensor,
                     k_scale: torch.Tensor, v_scale: torch.Tensor, *, max_seqlen_q: int,
                     config: GluonFp8PrefillConfig | None = None) -> Launch:
    """The kernel's launch into `out`, not yet issued (engine.kernels.launch; `supported` must hold); calls swap in a
    layer's caches and scales (LAYER_ARGS order), the caches as their descriptors."""
    cfg = config or DEFAULT_CONFIG
    total, num_heads, head_dim = q.shape
    batch = cu_seqlens_q.shape[0] - 1
    num_tiles = triton.cdiv(max_seqlen_q, cfg.block_m)
    items = batch * num_tiles * num_heads
    args = dict(q=q, k_desc=cache_descriptor(k_cache), v_desc=cache_descriptor(v_cache, v_transposed=True), o=out,
                cu_seqlens_q=cu_seqlens_q, context_lens=context_lens, block_tables=block_tables,
                qk_scale=scale * LOG2E, k_scale=k_scale, v_scale=v_scale, stride_qt=q.stride(0),
                stride_qh=q.stride(1), stride_ot=out.stride(0), stride_oh=out.stride(1),
                stride_bt=block_tables.stride(0), batch=batch, num_tiles=num_tiles,
                NUM_HEADS=num_heads, GROUP=num_heads // k_cache.shape[2], NUM_KV_HEADS=k_cache.shape[2],
                BLOCK_SIZE=k_cache.shape[1],
                BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, NUM_STAGES=cfg.num_stages, NUM_STAGING=cfg.num_staging,
                GATHER_REGS=cfg.gather_regs, CONSUMER_REGS=cfg.consumer_regs, PINGPONG=cfg.pingpong,
                LOADER_REGS=cfg.loader_regs)
    grid = (min(items, cfg.persistent) if cfg.persistent else items,)
    return Launch(_gluon_fp8_prefill_kernel, grid, args, {"num_warps": 4},
                  swap=("k_desc", "v_desc", "k_scale", "v_scale"), adapt=_layer_args)


def gluon_fp8_paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            cu_seqlens_q: torch.Tensor, context_lens: torch.Tensor, block_tables: torch.Tensor,
                            scale: float, k_scale: torch.Tensor, v_scale: torch.Tensor, *, max_seqlen_q: int,
                            out: torch.Tensor | None = None,
                            config: GluonFp8PrefillConfig | None = None) -> torch.Tensor:
    """engine.kernels.prefill.paged_prefill_attention's result on an fp8 cache by this file's kernel (`supported`
    must hold)."""
    cfg = config or DEFAULT_CONFIG
    why = supported(q, k_cache, cfg)
    if why:
        raise ValueError(f"gluon fp8 prefill: {why}")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if q.shape[0] and cu_seqlens_q.shape[0] > 1:
        gluon_fp8_launch(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_tables, scale, out, k_scale, v_scale,
                         max_seqlen_q=max_seqlen_q, config=cfg).run()
    return out
