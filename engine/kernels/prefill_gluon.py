"""Paged prefill attention for Hopper (sm_90) written in Gluon, Triton's lower-level language (issue #13's
paged-prefill target: at or above FlashInfer's FA3 paged prefill).

The same contract as engine.kernels.prefill.paged_prefill_attention (bf16 or fp16 cache, head_dim 128, cache
blocks of 8-128 tokens). A work item is 128 query rows of one head; items run longest first, one program each, or
with a persistent grid N programs walking them. What Triton's own language could not express on sm_90
(bench/NOTES.md, "Paged prefill against FlashInfer" and "Paged prefill in Gluon"), written out here as FA3 does it:

- Three partitions: a 1-warp producer and two consumer warpgroups of 64 rows each (registers moved to the consumers
  by setmaxnreg).
- The producer loads K/V tiles by TMA, one bulk copy per cache block and half head (64 columns: one 128-byte swizzle
  atom), so a 128-token tile of 16-token blocks is 16 copies for K and 16 for V, counted on an expect-tx mbarrier per
  stage (NUM_STAGES buffers each for K and V); it refills a stage once both consumers have arrived on its `empty`
  barrier, i.e. the product that read it has retired in both.
- Each consumer issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} as asynchronous wgmma, then runs S_j's softmax while
  the P V product is still on the tensor cores (FA3's intra-warpgroup overlap); P stays in registers as the A
  operand. With ping-pong the two warpgroups take turns issuing their products (an mbarrier hand-off).
- The pipeline's stage and phase counters carry from one work item to the next, so with a persistent grid the
  producer loads the next item's first tiles while the consumers finish the current one.

Stale slots past the context (the last block's tail) are zeroed in the last V tile before P V reads it, as the
Triton kernel's masked loads do, so a NaN left in a never-written slot cannot reach the output.

Gluon kernels compile for a GPU only (no TRITON_INTERPRET), so CI cannot run this file's kernel; the GPU tests
(tests/gpu/test_prefill_gluon_gpu.py) check it against SDPA and the Triton kernel, and `bench.kernels
--prefill-gluon` times it beside them.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from dataclasses import dataclass

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from engine.kernels.decode import LOG2E
from engine.kernels.launch import Launch

# a CTA-wide barrier: gl.barrier in triton 3.7, gl.thread_barrier in 3.6 (the device image's)
_cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier

HALF = gl.constexpr(64)  # columns per TMA copy and per shared-memory tile: one 128-byte swizzle atom of a 16-bit type


@dataclass(frozen=True, slots=True)
class GluonPrefillConfig:
    block_m: int = 128  # query rows per work item (two consumer warpgroups of 64 rows)
    block_n: int = 128  # keys per tile
    num_stages: int = 2  # K and V buffers each (3 fits 224 KiB of shared memory at head_dim 128)
    producer_regs: int = 40  # registers per thread of the one TMA-issuing warp (setmaxnreg)
    consumer_regs: int = 232  # of the second consumer warpgroup (the first, the default partition, takes the rest)
    # FA3's ping-pong: the two warpgroups take turns issuing their tile's products (an mbarrier hand-off), so one's
    # softmax runs while the other's products occupy the tensor cores
    pingpong: bool = False
    # a persistent grid: N > 0 launches min(work items, N) programs (N about the SM count, 132 on an H200), each
    # walking work items pid, pid + N, ... in the longest-first order, its producer loading the next item's first
    # key tiles while the consumers finish the current one; 0: one program per work item
    persistent: int = 0


# the default launch (paged_prefill_attention with no config on an sm_90 GPU): three stages and ping-pong, the fastest
# at 1 x 4096 and 1 x 16384 tokens in round 28's H200 calls (bench/NOTES.md); with a persistent grid of one program
# per SM where no sequence has more than PERSISTENT_MAX_Q query tokens (short work items, whose start and end the
# persistent producer hides: 8 x 2048 tokens 411-413 -> 430 TFLOP/s, while 1 x 4096 lost 505 -> 484)
DEFAULT_CONFIG = GluonPrefillConfig(num_stages=3, pingpong=True)
PERSISTENT_MAX_Q = 2048


def persistent_for_short_chunks(cfg, device: torch.device, max_seqlen_q: int):
    """cfg (either Gluon prefill's config) with a persistent grid of one program per SM when no sequence has more than
    PERSISTENT_MAX_Q query tokens; cfg itself otherwise."""
    if max_seqlen_q <= PERSISTENT_MAX_Q:
        return dataclasses.replace(cfg, persistent=_sm_count(device))
    return cfg


def default_config(device: torch.device, max_seqlen_q: int) -> GluonPrefillConfig:
    """The launch paged_prefill_attention uses with no config: DEFAULT_CONFIG, persistent for short chunks."""
    return persistent_for_short_chunks(DEFAULT_CONFIG, device, max_seqlen_q)


@functools.cache
def _capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)  # asked once per device, not at every step's launch


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def supported(q: torch.Tensor, k_cache: torch.Tensor, cfg: GluonPrefillConfig | None = None) -> str | None:
    """Why this kernel cannot take the call (None: it can)."""
    cfg = cfg or GluonPrefillConfig()
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    if not q.is_cuda or _capability(q.device)[0] != 9:
        return "needs an sm_90 GPU"
    if k_cache.dtype not in (torch.bfloat16, torch.float16) or q.dtype != k_cache.dtype:
        return "needs a 16-bit cache of the query's dtype"
    if head_dim != 2 * HALF.value:
        return "needs head_dim 128"
    if block_size < 8 or cfg.block_n % block_size:
        return f"needs cache blocks of 8..{cfg.block_n} tokens dividing block_n"
    if q.stride(2) != 1 or q.stride(1) != head_dim:
        return "needs each token's heads packed (stride over heads = head_dim)"
    if q.data_ptr() % 16 or q.stride(0) * q.element_size() % 16:
        return "needs q's rows 16-byte aligned (a TMA descriptor's)"
    return None


@gluon.jit
def _causal_mask(s, key0, cols, rows, ctx):
    """Scores s of the key tile starting at key0 with the keys a row may not see as -inf: those after its position
    (`rows`) and those at or past the context's end (both Gluon prefills' consumers, on the tiles that need it)."""
    key = key0 + cols[None, :]
    return gl.where((key <= rows[:, None]) & (key < ctx), s, float("-inf"))


@gluon.jit
def _work(t, cu_seqlens_q, context_lens, batch, num_tiles, NUM_HEADS: gl.constexpr, BLOCK_M: gl.constexpr,
          BLOCK_N: gl.constexpr):
    """Work item t: its (query tile, sequence, head), longest first (tile index descending, then sequence, then
    head); the sequence's first query row, query rows and context; the tile's first row position and key tiles (0
    for a tile past the sequence's rows: nothing to do)."""
    per_tile = batch * NUM_HEADS
    tile = num_tiles - 1 - t // per_tile
    b = t % per_tile // NUM_HEADS
    head = t % NUM_HEADS
    q_start = gl.load(cu_seqlens_q + b)
    q_len = gl.load(cu_seqlens_q + b + 1) - q_start
    ctx = gl.load(context_lens + b)
    first = ctx - q_len + tile * BLOCK_M  # position of the tile's first query row
    n_kv = gl.where(tile * BLOCK_M < q_len, gl.cdiv(gl.minimum(first + BLOCK_M, ctx), BLOCK_N), 0)
    return tile, b, head, q_start, q_len, ctx, first, n_kv


@gluon.jit
def _producer(k_desc, v_desc, kbuf, vbuf, k_ready, v_ready, k_empty, v_empty, cu_seqlens_q, context_lens,
              block_tables, stride_bt, batch, num_tiles, NUM_HEADS: gl.constexpr, GROUP: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_SIZE: gl.constexpr, NUM_STAGES: gl.constexpr):
    """One warp: for each work item of this program and each of its key tiles, once the tile's stage is free, the
    tile's block ids (one load) and its TMA copies, one per cache block and half head, K then V, each counted on its
    stage's ready barrier. `c` counts the key tiles loaded across work items (stage and phase), as the consumers
    count them. Block-table entries past the sequence's blocks read block 0 (finite data; those keys are masked and
    V's rows zeroed)."""
    NB: gl.constexpr = BLOCK_N // BLOCK_SIZE
    ids_layout: gl.constexpr = gl.BlockedLayout([NB], [32], [1], [0])
    slots = gl.arange(0, NB, layout=ids_layout)
    nbytes: gl.constexpr = 2 * BLOCK_N * HALF * k_desc.dtype.primitive_bitwidth // 8
    c = 0
    for t in range(gl.program_id(0), batch * num_tiles * NUM_HEADS, gl.num_programs(0)):
        tile, b, head, q_start, q_len, ctx, first, n_kv = _work(t, cu_seqlens_q, context_lens, batch, num_tiles,
                                                                NUM_HEADS, BLOCK_M, BLOCK_N)
        bt_row = block_tables + b * stride_bt
        n_blocks = gl.cdiv(ctx, BLOCK_SIZE)
        kv_col = head // GROUP * (2 * HALF)
        for j in range(n_kv):
            stage = c % NUM_STAGES
            phase = c // NUM_STAGES & 1
            idx = j * NB + slots
            rows = gl.load(bt_row + idx, mask=idx < n_blocks, other=0) * BLOCK_SIZE
            for which in gl.static_range(2):
                desc = k_desc if which == 0 else v_desc
                buf = kbuf if which == 0 else vbuf
                ready = k_ready if which == 0 else v_ready
                mbarrier.wait((k_empty if which == 0 else v_empty).index(stage), phase ^ 1)
                mbarrier.expect(ready.index(stage), nbytes)
                for i in gl.static_range(NB):
                    row = gl.sum(gl.where(slots == i, rows, 0), 0)
                    for h in gl.static_range(2):
                        tma.async_copy_global_to_shared(desc, [row, kv_col + h * HALF], ready.index(stage),
                                                        buf.index(2 * stage + h).slice(i * BLOCK_SIZE, BLOCK_SIZE))
            c += 1


@gluon.jit
def _consumer(q_desc, o, q_smem, qbar, kbuf, vbuf, k_ready, v_ready, k_empty, v_empty, turn, cu_seqlens_q,
              context_lens, qk_scale, stride_ot, stride_oh, batch, num_tiles, NUM_HEADS: gl.constexpr,
              WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
              PINGPONG: gl.constexpr):
    """One warpgroup: rows WG * BLOCK_M // 2 .. of each work item's tile. S_j = Q K_j^T and O += P_{j-1} V_{j-1} in
    flight together, S_j's softmax while P V runs; each stage released (its empty barrier) once the product that
    read it has retired. `c` counts key tiles across work items as the producer does."""
    ROWS: gl.constexpr = BLOCK_M // 2
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    col_o: gl.constexpr = gl.SliceLayout(0, o_layout)
    zl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    qlo = q_smem.index(2 * WG)
    qhi = q_smem.index(2 * WG + 1)
    cols = gl.arange(0, BLOCK_N, layout=col_s)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    c = 0
    qi = 0
    for t in range(gl.program_id(0), batch * num_tiles * NUM_HEADS, gl.num_programs(0)):
        tile, b, head, q_start, q_len, ctx, first, n_kv = _work(t, cu_seqlens_q, context_lens, batch, num_tiles,
                                                                NUM_HEADS, BLOCK_M, BLOCK_N)
        if n_kv > 0:
            mbarrier.expect(qbar.index(WG), 2 * ROWS * HALF * dtype.primitive_bitwidth // 8)
            for h in gl.static_range(2):
                tma.async_copy_global_to_shared(q_desc, [q_start + tile * BLOCK_M + WG * ROWS,
                                                         head * (2 * HALF) + h * HALF], qbar.index(WG),
                                                q_smem.index(2 * WG + h))
            rows = first + WG * ROWS + gl.arange(0, ROWS, layout=row_s)  # each row's position
            n_unmasked = (first + WG * ROWS + 1) // BLOCK_N  # key tiles every row sees whole
            o_lo = gl.zeros([ROWS, HALF], gl.float32, o_layout)
            o_hi = gl.zeros([ROWS, HALF], gl.float32, o_layout)
            mbarrier.wait(qbar.index(WG), qi & 1)
            qi += 1

            sk = c % NUM_STAGES  # tile 0: scores and softmax (its P V is the loop's first)
            mbarrier.wait(k_ready.index(sk), c // NUM_STAGES & 1)
            if PINGPONG:  # warpgroup 0 goes first (parity 1 of a fresh barrier counts as complete)
                mbarrier.wait(turn.index(WG), (c & 1) ^ (1 - WG))
            s = warpgroup_mma(qlo, kbuf.index(2 * sk).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            s = warpgroup_mma(qhi, kbuf.index(2 * sk + 1).permute((1, 0)), s, is_async=True)
            if PINGPONG:
                mbarrier.arrive(turn.index(1 - WG), count=1)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
            mbarrier.arrive(k_empty.index(sk), count=1)
            if n_unmasked == 0:
                s = _causal_mask(s, 0, cols, rows, ctx)
            m_i = gl.max(s, 1) * qk_scale
            p = gl.exp2(s * qk_scale - m_i[:, None])
            l_i = gl.sum(p, 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)

            for j in range(1, n_kv):
                sk = (c + j) % NUM_STAGES
                sv = (c + j - 1) % NUM_STAGES
                mbarrier.wait(k_ready.index(sk), (c + j) // NUM_STAGES & 1)
                mbarrier.wait(v_ready.index(sv), (c + j - 1) // NUM_STAGES & 1)
                if PINGPONG:
                    mbarrier.wait(turn.index(WG), ((c + j) & 1) ^ (1 - WG))
                s = warpgroup_mma(qlo, kbuf.index(2 * sk).permute((1, 0)), zero_s, use_acc=False,
                                  is_async=True)
                s = warpgroup_mma(qhi, kbuf.index(2 * sk + 1).permute((1, 0)), s, is_async=True)
                o_lo = warpgroup_mma(p_op, vbuf.index(2 * sv), o_lo, is_async=True)
                o_hi = warpgroup_mma(p_op, vbuf.index(2 * sv + 1), o_hi, is_async=True)
                if PINGPONG:
                    mbarrier.arrive(turn.index(1 - WG), count=1)
                s = warpgroup_mma_wait(num_outstanding=2, deps=(s,))
                mbarrier.arrive(k_empty.index(sk), count=1)
                if j >= n_unmasked:
                    s = _causal_mask(s, j * BLOCK_N, cols, rows, ctx)
                m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
                p = gl.exp2(s * qk_scale - m_new[:, None])
                alpha = gl.exp2(m_i - m_new)
                l_i = l_i * alpha + gl.sum(p, 1)
                m_i = m_new
                o_lo, o_hi, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(o_lo, o_hi, p_op))
                mbarrier.arrive(v_empty.index(sv), count=1)
                a_o = gl.convert_layout(alpha, row_o)[:, None]
                o_lo = o_lo * a_o
                o_hi = o_hi * a_o
                p_op = gl.convert_layout(p.to(dtype), p_layout)

            last = n_kv - 1
            sv = (c + last) % NUM_STAGES
            mbarrier.wait(v_ready.index(sv), (c + last) // NUM_STAGES & 1)
            if (last + 1) * BLOCK_N > ctx:
                # the tile reaches past the context: V's stale slots to 0 (P is 0 there, but a never-written slot
                # may hold NaN). Both warpgroups write the same zeros; each fences its own writes before its product
                # reads them.
                keep = (last * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, zl)) < ctx)[:, None]
                for h in gl.static_range(2):
                    part = vbuf.index(2 * sv + h)
                    part.store(gl.where(keep, part.load(zl), gl.zeros([BLOCK_N, HALF], dtype, zl)))
                fence_async_shared()
                _cta_barrier()
            o_lo = warpgroup_mma(p_op, vbuf.index(2 * sv), o_lo, is_async=True)
            o_hi = warpgroup_mma(p_op, vbuf.index(2 * sv + 1), o_hi, is_async=True)
            o_lo, o_hi = warpgroup_mma_wait(num_outstanding=0, deps=(o_lo, o_hi))
            mbarrier.arrive(v_empty.index(sv), count=1)
            c += n_kv

            inv = gl.convert_layout(1.0 / l_i, row_o)[:, None]
            r = tile * BLOCK_M + WG * ROWS + gl.arange(0, ROWS, layout=row_o)
            d = gl.arange(0, HALF, layout=col_o)
            ptrs = o + (q_start + r).to(gl.int64)[:, None] * stride_ot + head * stride_oh + d[None, :]
            ok = (r < q_len)[:, None]
            gl.store(ptrs, (o_lo * inv).to(dtype), mask=ok)
            gl.store(ptrs + HALF, (o_hi * inv).to(dtype), mask=ok)


@gluon.jit
def barriers(N: gl.constexpr, COUNT: gl.constexpr):
    """N mbarriers in shared memory, each completing a phase after COUNT arrivals."""
    bars = gl.allocate_shared_memory(gl.int64, [N, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(N):
        mbarrier.init(bars.index(i), count=COUNT)
    return bars


@gluon.jit
def pipeline_barriers(NUM_STAGES: gl.constexpr):
    """The key-tile pipeline's barriers, NUM_STAGES of each: K's and V's ready (the producer's, one arrival or TMA
    transaction count) and empty (one arrival per consumer warpgroup); and the two ping-pong turns."""
    return (barriers(NUM_STAGES, 1), barriers(NUM_STAGES, 1), barriers(NUM_STAGES, 2), barriers(NUM_STAGES, 2),
            barriers(2, 1))


@gluon.jit(do_not_specialize=["batch", "num_tiles"])  # shape counts that vary per step: one compiled variant
def _gluon_prefill_kernel(q_desc, k_desc, v_desc, o, cu_seqlens_q, context_lens, block_tables, qk_scale,
                          stride_ot, stride_oh, stride_bt, batch, num_tiles,
                          NUM_HEADS: gl.constexpr, GROUP: gl.constexpr, BLOCK_SIZE: gl.constexpr,
                          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                          PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr, PINGPONG: gl.constexpr):
    """Work items (query tile, sequence, head) pid, pid + programs, ...: one each with the default grid (one program
    per work item), several with a persistent grid."""
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [4, BLOCK_M // 2, HALF], q_desc.layout)
    kbuf = gl.allocate_shared_memory(dtype, [2 * NUM_STAGES, BLOCK_N, HALF], k_desc.layout)
    vbuf = gl.allocate_shared_memory(dtype, [2 * NUM_STAGES, BLOCK_N, HALF], v_desc.layout)
    qbar = barriers(2, 1)
    k_ready, v_ready, k_empty, v_empty, turn = pipeline_barriers(NUM_STAGES)
    fence_async_shared()
    WG0: gl.constexpr = 0
    WG1: gl.constexpr = 1
    gl.warp_specialize([
        (_consumer, (q_desc, o, q_smem, qbar, kbuf, vbuf, k_ready, v_ready, k_empty, v_empty, turn, cu_seqlens_q,
                     context_lens, qk_scale, stride_ot, stride_oh, batch, num_tiles, NUM_HEADS, WG0, BLOCK_M,
                     BLOCK_N, NUM_STAGES, PINGPONG)),
        (_consumer, (q_desc, o, q_smem, qbar, kbuf, vbuf, k_ready, v_ready, k_empty, v_empty, turn, cu_seqlens_q,
                     context_lens, qk_scale, stride_ot, stride_oh, batch, num_tiles, NUM_HEADS, WG1, BLOCK_M,
                     BLOCK_N, NUM_STAGES, PINGPONG)),
        (_producer, (k_desc, v_desc, kbuf, vbuf, k_ready, v_ready, k_empty, v_empty, cu_seqlens_q, context_lens,
                     block_tables, stride_bt, batch, num_tiles, NUM_HEADS, GROUP, BLOCK_M, BLOCK_N, BLOCK_SIZE,
                     NUM_STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


KERNEL = _gluon_prefill_kernel  # what this module launches (default_prefill_kernel names it)


def cache_descriptor(cache: torch.Tensor, *, v_transposed: bool = False) -> TensorDescriptor:
    """A layer's K or V cache [blocks, block_size, Hkv, 128] as [blocks * block_size, Hkv * 128] with boxes of one
    cache block's 128 bytes of a head ([block_size, 64] of a 16-bit cache, one half head; [block_size, 128] of an
    e4m3 cache); v_transposed: an e4m3 V cache, whose blocks hold [Hkv, 128, block_size] (engine.kernels.cache), as
    [blocks * Hkv * 128, block_size] with [128, block_size] boxes (one block's V^T of a head), unswizzled. Made once
    per cache tensor (a step's launch re-issues per layer: 0.6 us a lookup against 3.5 to make one). Kept while the
    cache tensor lives and no longer: the descriptor's base is a view of a detached alias, which holds the storage but
    not the tensor it is keyed by (a view of the tensor itself would keep it, and every KV cache an engine ever had,
    alive)."""
    key = (id(cache), v_transposed)
    entry = _CACHE_DESCRIPTORS.get(key)
    if entry is not None and entry[0]() is cache:
        return entry[1]
    num_blocks, block_size, num_kv_heads, head_dim = cache.shape
    if v_transposed:  # unswizzled: the fp8 kernel's gathering warps read these copies, not the tensor cores
        shape, box = [num_blocks * num_kv_heads * head_dim, block_size], [head_dim, block_size]
        layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8)
    else:
        shape, box = [num_blocks * block_size, num_kv_heads * head_dim], [block_size, 128 // cache.element_size()]
        layout = _smem_layout(*box, cache.dtype)
    desc = TensorDescriptor(cache.detach().view(shape), shape, [shape[1], 1], box, layout)
    _CACHE_DESCRIPTORS[key] = (weakref.ref(cache), desc)
    weakref.finalize(cache, _CACHE_DESCRIPTORS.pop, key, None)
    return desc


# (id(cache tensor), v_transposed) -> (a weak reference to it, its descriptor); the entry goes when the tensor does (a
# dict keyed by the tensor itself would compare tensors with ==, and a WeakKeyDictionary does, on every lookup)
_CACHE_DESCRIPTORS: dict[tuple[int, bool], tuple[weakref.ref, TensorDescriptor]] = {}


@functools.cache
def _smem_layout(rows: int, cols: int, dtype: torch.dtype) -> gl.NVMMASharedLayout:
    """The shared-memory layout of a [rows, cols] TMA box (the widest swizzle its rows allow: 128 bytes for a row of
    64 16-bit or 128 e4m3 values)."""
    gdt = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float8_e4m3fn: gl.float8e4nv}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gdt)


def _layer_descriptors(k_cache, v_cache, *_scales):
    """Launch.adapt: a layer's (k_cache, v_cache, k_scale, v_scale) as the kernel's (k_desc, v_desc)."""
    return cache_descriptor(k_cache), cache_descriptor(v_cache)


def gluon_launch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                 context_lens: torch.Tensor, block_tables: torch.Tensor, scale: float, out: torch.Tensor, *,
                 max_seqlen_q: int, config: GluonPrefillConfig | None = None) -> Launch:
    """The kernel's launch into `out`, not yet issued (engine.kernels.launch; `supported` must hold); calls swap in a
    layer's caches (LAYER_ARGS order) as their descriptors."""
    cfg = config or GluonPrefillConfig()
    total, num_heads, head_dim = q.shape
    batch = cu_seqlens_q.shape[0] - 1
    num_tiles = triton.cdiv(max_seqlen_q, cfg.block_m)
    items = batch * num_tiles * num_heads
    box = [cfg.block_m // 2, HALF.value]  # one consumer warpgroup's rows, half a head
    q_desc = TensorDescriptor(q.as_strided((total, num_heads * head_dim), (q.stride(0), 1)),
                              [total, num_heads * head_dim], [q.stride(0), 1], box, _smem_layout(*box, q.dtype))
    args = dict(q_desc=q_desc, k_desc=cache_descriptor(k_cache), v_desc=cache_descriptor(v_cache), o=out,
                cu_seqlens_q=cu_seqlens_q, context_lens=context_lens, block_tables=block_tables,
                qk_scale=scale * LOG2E, stride_ot=out.stride(0), stride_oh=out.stride(1),
                stride_bt=block_tables.stride(0), batch=batch, num_tiles=num_tiles,
                NUM_HEADS=num_heads, GROUP=num_heads // k_cache.shape[2], BLOCK_SIZE=k_cache.shape[1],
                BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, NUM_STAGES=cfg.num_stages,
                PRODUCER_REGS=cfg.producer_regs, CONSUMER_REGS=cfg.consumer_regs, PINGPONG=cfg.pingpong)
    grid = (min(items, cfg.persistent) if cfg.persistent else items,)
    return Launch(_gluon_prefill_kernel, grid, args, {"num_warps": 4}, swap=("k_desc", "v_desc"),
                  adapt=_layer_descriptors)


def gluon_paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                        context_lens: torch.Tensor, block_tables: torch.Tensor, scale: float, *, max_seqlen_q: int,
                        out: torch.Tensor | None = None, config: GluonPrefillConfig | None = None) -> torch.Tensor:
    """engine.kernels.prefill.paged_prefill_attention's result by this file's kernel (`supported` must hold)."""
    cfg = config or GluonPrefillConfig()
    why = supported(q, k_cache, cfg)
    if why:
        raise ValueError(f"gluon prefill: {why}")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if q.shape[0] and cu_seqlens_q.shape[0] > 1:
        gluon_launch(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_tables, scale, out,
                     max_seqlen_q=max_seqlen_q, config=cfg).run()
    return out
