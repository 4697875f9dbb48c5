"""Paged prefill attention: causal attention of packed query tokens over their paged K/V.

Sequence b owns query rows cu_seqlens_q[b] : cu_seqlens_q[b+1] (q_len_b of them) and has
context_lens[b] tokens in the cache, this step's included (their K/V are stored before the call).
Query row i of sequence b sits at position context_lens[b] - q_len_b + i and attends to cached
positions 0..that position, so earlier context (prefix-cache hits, earlier prefill chunks) is read
from the paged cache.

One program per tile of BLOCK_M score rows of one sequence. Unpacked, a tile is BLOCK_M query tokens of one
query head; packed (pack_gqa), it is BLOCK_M // GROUP query tokens times the GROUP query heads that share one KV
head, so a chunk shorter than BLOCK_M still fills the tile's rows (each K/V tile is read once for all GROUP heads).
Tiles past a sequence's q_len return at once. Programs run longest first (the last query tiles of every sequence
and head have the most keys), so short tiles fill the tail of the launch; programs of the same tile index run side
by side, reading the same keys. Keys below the tile's first position need no causal mask and run in a first,
unmasked loop; the rest (the diagonal) in a second, masked loop.

PrefillConfig.persistent (off by default): min(tiles, N) programs instead, program pid walking tile ids pid,
pid + N, ... in the same order (a second entry point, _prefill_persistent_kernel; both call the one tile body,
_prefill_tile, and the default's PTX is unchanged by it), skipping empty tiles; with prefetch_q the next tile's Q
rows are loaded before the current tile's output is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from engine.kernels import prefill_gluon, prefill_gluon_fp8
from engine.kernels.cache import _round_to_e4m3
from engine.kernels.decode import LOG2E, _load_kv, _widen, dot_dtype
from engine.kernels.launch import INTERPRET, LAYER_ARGS, Launch


@dataclass(frozen=True, slots=True)
class PrefillConfig:
    """Launch parameters; the defaults were the fastest on an H200 (bench/NOTES.md)."""

    block_m: int = 128  # score rows per program (query tokens x heads when packed)
    block_n: int = 128
    num_warps: int = 8
    num_stages: int = 3
    fp8_widen: str = "bf16"  # fp8 cache only: as DecodeConfig.fp8_widen
    pack_gqa: bool = False  # a tile's rows are block_m // GROUP tokens x the GROUP query heads of one KV head
    longest_first: bool = True  # program order: last query tiles (most keys) first; else (seq, tile, head) order
    int32_offsets: bool = True  # K/V element offsets in int32 where the cache has < 2**31 elements
    qk_fp8: bool = False  # fp8 cache only: Q K^T as an e4m3 product (q quantised per row), P V widened as before
    # fp8 cache with qk_fp8 only: P V too as an e4m3 product (P * P_SCALE rounded to e4m3, V^T as stored): K and V go
    # from the cache to the tensor cores unwidened (vLLM's FA3 fp8-KV path on Hopper). P V accumulates into the running
    # output, so the product stays in flight across iterations as bf16's does, and diagonal tiles below the context's
    # last whole tile load unmasked (asynchronous copies; only the tile that reaches past the context zeroes V in
    # registers)
    pv_fp8: bool = False
    # a persistent grid: N > 0 launches min(tiles, N) programs (N about the SM count, e.g. 132 or 264 on an H200), each
    # walking tile ids pid, pid + N, ... in the order above (longest first by default): no program launched per tile,
    # and with prefetch_q a tile's epilogue overlaps the next tile's Q load; 0: one program per tile (the default)
    persistent: int = 0
    prefetch_q: bool = False  # persistent only: the next tile's Q rows are loaded before this tile's output is stored


P_SCALE = tl.constexpr(256.0)  # pv_fp8: P in [0, 1] is stored as e4m3 times this (a power of two: the rescale is exact)


# The default launch for an fp8 cache: both products in e4m3 at 2 stages, the fastest at both prefill shapes in
# bench/fp8_tune.py's r8 sweep on the H200 (bench/results/fp8-tune-h200-2026-12-01-r8.json, bench/NOTES.md; P V in
# flight since round 9: 1% faster at both shapes in two calls), its effect on the logits within the fp8 engine check's
# tolerance (tests/gpu/test_fp8_gpu.py). Head dims below 32
# (e4m3 products need K >= 32) take the widened launch, the r7 default (1 stage, int32 offsets).
FP8_PREFILL_CONFIG = PrefillConfig(block_m=128, block_n=128, num_warps=8, num_stages=2, fp8_widen="fp16",
                                   qk_fp8=True, pv_fp8=True)
FP8_WIDENED_PREFILL_CONFIG = PrefillConfig(block_m=128, block_n=128, num_warps=8, num_stages=1, fp8_widen="fp16")


@triton.jit
def _attend_tile(acc, m, l, qv, k_cache, v_cache, bt_row, kvh, n0, pos, ctx, qk_scale,
                 NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                 BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, DOT_DTYPE: tl.constexpr, FP8: tl.constexpr,
                 I32: tl.constexpr, QK_FP8: tl.constexpr, PV_FP8: tl.constexpr, PAST_END: tl.constexpr):
    """One online-softmax step over keys n0 : n0 + BLOCK_N (all valid unless CAUSAL_MASK); m is in the
    log2 domain of the scaled scores, the scale (a scalar, or with QK_FP8 one per row) applied in one multiply-add
    with the max subtraction. QK_FP8 (not None): qv is e4m3 and K stays e4m3 for Q K^T (an fp8 tensor-core
    product; QK_FP8 is the product's input type, fp32 under the interpreter, where it is exact); V is widened,
    unless PV_FP8 (not None, the same type as QK_FP8): then P * P_SCALE is rounded to e4m3 and P V is an e4m3 product
    too (no widening at all). PAST_END (PV_FP8 only; the other paths take it as CAUSAL_MASK): the tile may reach
    past the context, so its loads are masked and V's slots past the context zeroed as fp8 (through registers);
    a diagonal tile below the context's last whole tile needs neither and keeps the asynchronous copies."""
    t = n0 + tl.arange(0, BLOCK_N)
    if PV_FP8 is None:
        # int32 offsets load unmasked tiles unmasked; the int64 path keeps masking every bf16 tile, as measured before
        k, v = _load_kv(k_cache, v_cache, bt_row, kvh, n0, ctx, tl.arange(0, HEAD_DIM), NUM_KV_HEADS, HEAD_DIM,
                        BLOCK_SIZE, BLOCK_N, FP8, CAUSAL_MASK if I32 else (CAUSAL_MASK or not FP8), I32)
    if PV_FP8 is not None:
        k, v = _load_kv_fp8(k_cache, v_cache, bt_row, kvh, n0, ctx, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCK_N,
                            PAST_END, I32)
        k = k.to(QK_FP8)
        if PAST_END:  # as _widen's ZERO_V, on the fp8 bits (a run read whole may hold NaN past the context)
            v = tl.where((t < ctx)[:, None], v, tl.zeros_like(v))
        v = v.to(PV_FP8)
    elif QK_FP8 is not None:
        k = k.to(QK_FP8)
        _, v = _widen(k, v, t < ctx, DOT_DTYPE, CAUSAL_MASK)
    else:
        k, v = _widen(k, v, t < ctx, DOT_DTYPE, FP8 and CAUSAL_MASK)  # an fp8 cache widened; scales applied outside
    s = tl.dot(qv, tl.trans(k))
    if CAUSAL_MASK:
        s = tl.where((t[None, :] <= pos[:, None]) & (t[None, :] < ctx), s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1) * qk_scale)
    if QK_FP8 is not None:  # one scale per row
        p = tl.exp2(s * qk_scale[:, None] - m_new[:, None])
    else:
        p = tl.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.exp2(m - m_new)
    l = l * alpha + tl.sum(p, 1)
    if PV_FP8 is not None:
        # the running output as the product's accumulator (Triton did not fold `acc * alpha + tl.dot(...)` into the
        # e4m3 product); a product whose result is only the loop's accumulator can stay in flight (no wait each tile)
        acc = tl.dot(_p_to_e4m3(p * P_SCALE, PV_FP8), v, acc * alpha[:, None])
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l


@triton.jit
def _load_kv_fp8(k_cache, v_cache, bt_row, kvh, n0, end, NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                 BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, I32: tl.constexpr):
    """K [BLOCK_N, HEAD_DIM] and V [BLOCK_N, HEAD_DIM] of an fp8 cache, both as stored, for the
    e4m3 products: V^T [HEAD_DIM, BLOCK_N] is read as one 2-D tile whose token offsets are contiguous in runs of
    BLOCK_SIZE (said to the compiler, so its copies are 16-byte cp.async straight into the layout the tensor cores
    read), then transposed (a view). MASKED: as _load_kv (K rows and V runs of tokens >= end read as 0, except a
    partial run's tail, which the caller zeroes). I32: as _load_kv (else int64 offsets: a cache of 2**31 elements or
    more)."""
    t = n0 + tl.arange(0, BLOCK_N)
    d = tl.arange(0, HEAD_DIM)
    valid = t < end
    if MASKED:
        block = tl.load(bt_row + t // BLOCK_SIZE, mask=valid, other=0)
    else:
        block = tl.load(bt_row + t // BLOCK_SIZE)
    if not I32:
        block = block.to(tl.int64)
    rows = ((block * BLOCK_SIZE + t % BLOCK_SIZE) * NUM_KV_HEADS + kvh) * HEAD_DIM
    cols = (block * NUM_KV_HEADS + kvh) * (HEAD_DIM * BLOCK_SIZE) + t % BLOCK_SIZE
    RUN: tl.constexpr = BLOCK_SIZE if BLOCK_SIZE < BLOCK_N else BLOCK_N
    cols = tl.max_contiguous(tl.multiple_of(cols, RUN), RUN)
    k_ptrs = k_cache + rows[:, None] + d[None, :]
    v_ptrs = v_cache + d[:, None] * BLOCK_SIZE + cols[None, :]
    if MASKED:
        k = tl.load(k_ptrs, mask=valid[:, None], other=0.0)
        vt = tl.load(v_ptrs, mask=(t // RUN * RUN < end)[None, :], other=0.0)  # whole runs: 16-byte copies
    else:
        k = tl.load(k_ptrs)
        vt = tl.load(v_ptrs)
    return k, tl.trans(vt)


@triton.jit
def _p_to_e4m3(x, DTYPE: tl.constexpr):
    """x (fp32, 0 <= x <= P_SCALE) rounded to e4m3, in DTYPE: the hardware's round-to-nearest cast on the GPU (DTYPE
    e4m3); under the interpreter (DTYPE fp32) the same rounding done exactly (engine.kernels.cache._round_to_e4m3)."""
    if DTYPE == tl.float32:
        return _round_to_e4m3(x)
    return x.to(DTYPE)


@triton.jit
def _tile_of(pid, batch, num_tiles, NUM_PROGRAM_HEADS: tl.constexpr, LONGEST_FIRST: tl.constexpr):
    """Tile id pid's (sequence, query tile, program head): longest first (tile index descending, then sequence, then
    head), else the (sequence, tile, head) grid order, sequence fastest."""
    if LONGEST_FIRST:
        per_tile = batch * NUM_PROGRAM_HEADS
        tile = num_tiles - 1 - pid // per_tile
        b = pid % per_tile // NUM_PROGRAM_HEADS
        hp = pid % NUM_PROGRAM_HEADS
    else:
        b = pid % batch
        tile = pid // batch % num_tiles
        hp = pid // (batch * num_tiles)
    return b, tile, hp


@triton.jit
def _q_tile(q, stride_qt, stride_qh, q_start, q_len, tile, hp, valid, HEAD_DIM: tl.constexpr, GROUP: tl.constexpr,
            BLOCK_M: tl.constexpr, PACK_GQA: tl.constexpr):
    """The raw Q rows [BLOCK_M, HEAD_DIM] of a tile (rows past q_len, and all rows unless `valid`, read as 0): the
    persistent grid's prefetch of its next tile (the tile body computes the same offsets)."""
    HEADS_PER_TILE: tl.constexpr = GROUP if PACK_GQA else 1
    TILE_TOKENS: tl.constexpr = BLOCK_M // HEADS_PER_TILE
    rows = tl.arange(0, BLOCK_M)
    r = tile * TILE_TOKENS + rows // HEADS_PER_TILE
    head = hp * HEADS_PER_TILE + rows % HEADS_PER_TILE
    tok = (q_start + r).to(tl.int64)
    row_ok = ((r < q_len) & valid)[:, None]
    d = tl.arange(0, HEAD_DIM)
    return tl.load(q + tok[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :], mask=row_ok, other=0.0)


@triton.jit
def _prefill_tile(qv, q, k_cache, v_cache, o, context_lens, block_tables, qk_scale, k_scale, v_scale,
                  stride_qt, stride_qh, stride_ot, stride_oh, stride_bt, b, tile, hp, q_start, q_len,
                  NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                  GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_DTYPE: tl.constexpr,
                  FP8: tl.constexpr, PACK_GQA: tl.constexpr, I32: tl.constexpr,
                  QK_FP8: tl.constexpr, PV_FP8: tl.constexpr, Q_LOADED: tl.constexpr):
    """One non-empty tile (sequence b, query tile `tile`, program head hp; its sequence's rows start at q_start, q_len
    of them): its output rows with their pointers and row mask; the caller stores them. Q_LOADED: qv
    holds the tile's raw Q rows (_q_tile, prefetched); else (qv unused) they are loaded here. The output is fp32
    (the caller casts it at the store, after the pointers, the default's order)."""
    HEADS_PER_TILE: tl.constexpr = GROUP if PACK_GQA else 1
    TILE_TOKENS: tl.constexpr = BLOCK_M // HEADS_PER_TILE
    ctx = tl.load(context_lens + b)
    first = ctx - q_len + tile * TILE_TOKENS  # position of the tile's first query token
    rows = tl.arange(0, BLOCK_M)
    r = tile * TILE_TOKENS + rows // HEADS_PER_TILE  # each row's query token within the sequence
    head = hp * HEADS_PER_TILE + rows % HEADS_PER_TILE
    pos = ctx - q_len + r
    d = tl.arange(0, HEAD_DIM)
    tok = (q_start + r).to(tl.int64)
    if FP8:  # K's scale folds into the score scale, V's into the output
        qk_scale = qk_scale * tl.load(k_scale)
    kvh = hp if PACK_GQA else hp // GROUP
    bt_row = block_tables + b * stride_bt
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    unmasked_end = (first // BLOCK_N) * BLOCK_N  # keys before every row of the tile
    end = tl.minimum(first + TILE_TOKENS, ctx)
    row_ok = (r < q_len)[:, None]
    if not Q_LOADED:
        qv = tl.load(q + tok[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :], mask=row_ok, other=0.0)
    if QK_FP8 is not None:  # q to e4m3 with one scale per row (token, head), folded into that row's score scale
        qf = qv.to(tl.float32)
        amax = tl.max(tl.abs(qf), 1)
        q_scale = tl.where(amax > 0, amax / 448.0, 1.0)
        qv = _round_to_e4m3(tl.clamp(qf / q_scale[:, None], -448.0, 448.0)).to(tl.float8e4nv)
        qv = qv.to(QK_FP8)
        qk_scale = qk_scale * q_scale
    elif DOT_DTYPE is not None:
        qv = qv.to(DOT_DTYPE)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for n0 in range(0, unmasked_end, BLOCK_N):
        acc, m, l = _attend_tile(acc, m, l, qv, k_cache, v_cache, bt_row, kvh, n0, pos, ctx, qk_scale,
                                 NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCK_N, False, DOT_DTYPE, FP8, I32, QK_FP8,
                                 PV_FP8, False)
    past_end = unmasked_end  # the diagonal: tiles from here on may reach past the context
    if PV_FP8 is not None:  # diagonal tiles below the context's last whole tile first, with unmasked loads
        past_end = tl.maximum(unmasked_end, ctx // BLOCK_N * BLOCK_N)
        for n0 in range(unmasked_end, tl.minimum(end, past_end), BLOCK_N):
            acc, m, l = _attend_tile(acc, m, l, qv, k_cache, v_cache, bt_row, kvh, n0, pos, ctx, qk_scale,
                                     NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCK_N, True, DOT_DTYPE, FP8, I32, QK_FP8,
                                     PV_FP8, False)
    for n0 in range(past_end, end, BLOCK_N):
        acc, m, l = _attend_tile(acc, m, l, qv, k_cache, v_cache, bt_row, kvh, n0, pos, ctx, qk_scale,
                                 NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCK_N, True, DOT_DTYPE, FP8, I32, QK_FP8,
                                 PV_FP8, True)
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    if FP8:
        out = out * tl.load(v_scale)
    if PV_FP8 is not None:
        out = out * (1.0 / P_SCALE)
    return out, o + tok[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :], row_ok


@triton.jit(do_not_specialize=["batch", "num_tiles"])  # shape counts that vary per step: one compiled variant
def _prefill_kernel(q, k_cache, v_cache, o, cu_seqlens_q, context_lens, block_tables, qk_scale, k_scale, v_scale,
                    stride_qt, stride_qh, stride_ot, stride_oh, stride_bt, batch, num_tiles,
                    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_DTYPE: tl.constexpr,
                    FP8: tl.constexpr, PACK_GQA: tl.constexpr, LONGEST_FIRST: tl.constexpr, I32: tl.constexpr,
                    QK_FP8: tl.constexpr, PV_FP8: tl.constexpr):
    """One program per tile (the default grid)."""
    HEADS_PER_TILE: tl.constexpr = GROUP if PACK_GQA else 1
    TILE_TOKENS: tl.constexpr = BLOCK_M // HEADS_PER_TILE
    NUM_PROGRAM_HEADS: tl.constexpr = NUM_KV_HEADS if PACK_GQA else NUM_KV_HEADS * GROUP
    b, tile, hp = _tile_of(tl.program_id(0), batch, num_tiles, NUM_PROGRAM_HEADS, LONGEST_FIRST)
    q_start = tl.load(cu_seqlens_q + b)
    q_len = tl.load(cu_seqlens_q + b + 1) - q_start
    if tile * TILE_TOKENS >= q_len:
        return
    out, o_ptrs, row_ok = _prefill_tile(q, q, k_cache, v_cache, o, context_lens, block_tables, qk_scale, k_scale,
                                        v_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_bt, b, tile, hp,
                                        q_start, q_len, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, GROUP, BLOCK_M, BLOCK_N,
                                        DOT_DTYPE, FP8, PACK_GQA, I32, QK_FP8, PV_FP8, False)
    tl.store(o_ptrs, out.to(o.dtype.element_ty), mask=row_ok)


@triton.jit(do_not_specialize=["batch", "num_tiles"])
def _prefill_persistent_kernel(q, k_cache, v_cache, o, cu_seqlens_q, context_lens, block_tables, qk_scale, k_scale,
                               v_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_bt, batch, num_tiles,
                               NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                               GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               DOT_DTYPE: tl.constexpr, FP8: tl.constexpr, PACK_GQA: tl.constexpr,
                               LONGEST_FIRST: tl.constexpr, I32: tl.constexpr, QK_FP8: tl.constexpr,
                               PV_FP8: tl.constexpr, PREFETCH_Q: tl.constexpr):
    """PrefillConfig.persistent: program pid walks tile ids pid, pid + nprog, ... (the default grid's order, so
    the programs together still go longest first), skipping tiles past their sequence's q_len. PREFETCH_Q: the
    next tile's Q rows are loaded before this tile's output is stored (carried to the next iteration)."""
    HEADS_PER_TILE: tl.constexpr = GROUP if PACK_GQA else 1
    TILE_TOKENS: tl.constexpr = BLOCK_M // HEADS_PER_TILE
    NUM_PROGRAM_HEADS: tl.constexpr = NUM_KV_HEADS if PACK_GQA else NUM_KV_HEADS * GROUP
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    total = batch * num_tiles * NUM_PROGRAM_HEADS
    qv = q  # unused unless PREFETCH_Q
    if PREFETCH_Q:
        b, tile, hp = _tile_of(pid, batch, num_tiles, NUM_PROGRAM_HEADS, LONGEST_FIRST)
        q_start = tl.load(cu_seqlens_q + b)
        qv = _q_tile(q, stride_qt, stride_qh, q_start, tl.load(cu_seqlens_q + b + 1) - q_start, tile, hp, True,
                     HEAD_DIM, GROUP, BLOCK_M, PACK_GQA)
    for t in range(pid, total, nprog):
        b, tile, hp = _tile_of(t, batch, num_tiles, NUM_PROGRAM_HEADS, LONGEST_FIRST)
        q_start = tl.load(cu_seqlens_q + b)
        q_len = tl.load(cu_seqlens_q + b + 1) - q_start
        if PREFETCH_Q:
            nxt = t + nprog
            has_next = nxt < total
            nb, ntile, nhp = _tile_of(tl.minimum(nxt, total - 1), batch, num_tiles, NUM_PROGRAM_HEADS, LONGEST_FIRST)
            nq_start = tl.load(cu_seqlens_q + nb)
            nq_len = tl.load(cu_seqlens_q + nb + 1) - nq_start
            if tile * TILE_TOKENS < q_len:
                out, o_ptrs, row_ok = _prefill_tile(qv, q, k_cache, v_cache, o, context_lens, block_tables, qk_scale,
                                                    k_scale, v_scale, stride_qt, stride_qh, stride_ot, stride_oh,
                                                    stride_bt, b, tile, hp, q_start, q_len, NUM_KV_HEADS, HEAD_DIM,
                                                    BLOCK_SIZE, GROUP, BLOCK_M, BLOCK_N, DOT_DTYPE, FP8, PACK_GQA,
                                                    I32, QK_FP8, PV_FP8, True)
                qv = _q_tile(q, stride_qt, stride_qh, nq_start, nq_len, ntile, nhp, has_next, HEAD_DIM, GROUP,
                             BLOCK_M, PACK_GQA)
                tl.store(o_ptrs, out.to(o.dtype.element_ty), mask=row_ok)
            else:  # a second load site (one after the `if`, the store still last, spilled more registers)
                qv = _q_tile(q, stride_qt, stride_qh, nq_start, nq_len, ntile, nhp, has_next, HEAD_DIM, GROUP,
                             BLOCK_M, PACK_GQA)
        else:
            if tile * TILE_TOKENS < q_len:
                out, o_ptrs, row_ok = _prefill_tile(q, q, k_cache, v_cache, o, context_lens, block_tables, qk_scale,
                                                    k_scale, v_scale, stride_qt, stride_qh, stride_ot, stride_oh,
                                                    stride_bt, b, tile, hp, q_start, q_len, NUM_KV_HEADS, HEAD_DIM,
                                                    BLOCK_SIZE, GROUP, BLOCK_M, BLOCK_N, DOT_DTYPE, FP8, PACK_GQA,
                                                    I32, QK_FP8, PV_FP8, False)
                tl.store(o_ptrs, out.to(o.dtype.element_ty), mask=row_ok)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            cu_seqlens_q: torch.Tensor, context_lens: torch.Tensor, block_tables: torch.Tensor,
                            scale: float, *, max_seqlen_q: int | None = None, out: torch.Tensor | None = None,
                            config: PrefillConfig | None = None, k_scale: torch.Tensor | None = None,
                            v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of packed queries q [T, Hq, D] over the paged cache -> [T, Hq, D].

    cu_seqlens_q [B+1] int32, context_lens [B] int32 (each >= its q_len), block_tables [B, max_blocks]
    int32. max_seqlen_q (a host int) sizes the grid; when None it is read from cu_seqlens_q with
    a host sync. q may be strided over T and Hq (last dim contiguous). An fp8 cache needs the
    layer's k_scale and v_scale (see paged_decode_attention); by default (head_dim >= 32) its two products run in
    e4m3 with q rounded per row and P rounded to e4m3 (FP8_PREFILL_CONFIG, PrefillConfig.pv_fp8).
    """
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    for launch in prefill_launches(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_tables, scale, out,
                                   max_seqlen_q=max_seqlen_q, config=config, k_scale=k_scale, v_scale=v_scale):
        launch.run()
    return out


def _gluon_module(q: torch.Tensor, k_cache: torch.Tensor, config: PrefillConfig | None):
    """The Gluon prefill module (engine.kernels.prefill_gluon, or prefill_gluon_fp8 for an e4m3 cache) that runs a
    call with this query, cache and config; None: this file's Triton kernel runs it."""
    if config is not None or INTERPRET:
        return None
    gluon = prefill_gluon_fp8 if k_cache.dtype == torch.float8_e4m3fn else prefill_gluon
    return gluon if gluon.supported(q, k_cache) is None else None


def default_prefill_kernel(kv_cache: torch.Tensor, num_heads: int, dtype: torch.dtype) -> str:
    """The name of the kernel paged_prefill_attention runs with no config over an engine's cache
    [num_layers, 2, num_blocks, block_size, Hkv, head_dim] for `num_heads` query heads of `dtype` (prefill_launches'
    own choice). A run's summary and a profile record it: a profile timed on one prefill kernel mispredicts the steps
    of another (`pagesim validate` warns)."""
    k_cache = kv_cache[0, 0]
    q = torch.empty((1, num_heads, k_cache.shape[-1]), dtype=dtype, device=kv_cache.device)
    gluon = _gluon_module(q, k_cache, None)
    return (_prefill_kernel if gluon is None else gluon.KERNEL).__name__


def prefill_launches(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     context_lens: torch.Tensor, block_tables: torch.Tensor, scale: float, out: torch.Tensor, *,
                     max_seqlen_q: int | None = None, config: PrefillConfig | None = None,
                     k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> list[Launch]:
    """paged_prefill_attention's kernel launch into `out`, not yet issued (none: nothing to compute), as
    decode_launches gives the decode's; its cache and scales can be swapped per call (engine.kernels.launch).
    With no `config`, a call a Gluon kernel takes (an sm_90 GPU, head_dim 128: engine.kernels.prefill_gluon for a
    16-bit cache, engine.kernels.prefill_gluon_fp8 for an e4m3 one) runs that kernel; any PrefillConfig, and everything
    else, this file's Triton kernel."""
    fp8 = k_cache.dtype == torch.float8_e4m3fn
    gluon = _gluon_module(q, k_cache, config)
    if gluon is not None:
        if cu_seqlens_q.shape[0] < 2 or q.shape[0] == 0:
            return []
        if max_seqlen_q is None:
            max_seqlen_q = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
        cfg = gluon.default_config(q.device, max_seqlen_q)
        if fp8:
            assert k_scale is not None and v_scale is not None, "an fp8 cache needs k_scale and v_scale"
            return [gluon.gluon_fp8_launch(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_tables, scale, out,
                                           k_scale, v_scale, max_seqlen_q=max_seqlen_q, config=cfg)]
        return [gluon.gluon_launch(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_tables, scale, out,
                                   max_seqlen_q=max_seqlen_q, config=cfg)]
    total, num_heads, head_dim = q.shape
    cfg = config or (PrefillConfig() if not fp8 else FP8_PREFILL_CONFIG if head_dim >= 32
                     else FP8_WIDENED_PREFILL_CONFIG)
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    assert num_heads == group * num_kv_heads and q.stride(2) == 1 and block_tables.stride(1) == 1
    assert k_cache.is_contiguous() and v_cache.is_contiguous()
    assert not fp8 or (k_scale is not None and v_scale is not None), "an fp8 cache needs k_scale and v_scale"
    assert fp8 or not cfg.qk_fp8, "qk_fp8 is an option of an fp8 cache"
    assert cfg.qk_fp8 or not cfg.pv_fp8, "pv_fp8 needs qk_fp8"
    assert not cfg.pv_fp8 or min(head_dim, cfg.block_n) >= 32, "pv_fp8 (e4m3 products) needs head_dim, block_n >= 32"
    pack = cfg.pack_gqa and group > 1
    assert not pack or cfg.block_m % group == 0, "pack_gqa needs block_m to be a multiple of the GQA group"
    batch = cu_seqlens_q.shape[0] - 1
    if total == 0 or batch == 0:
        return []
    if max_seqlen_q is None:
        max_seqlen_q = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
    num_tiles = triton.cdiv(max_seqlen_q, cfg.block_m // group if pack else cfg.block_m)
    product_fp8 = tl.float32 if INTERPRET else tl.float8e4nv
    assert cfg.persistent >= 0 and (cfg.persistent or not cfg.prefetch_q), "prefetch_q needs a persistent grid"
    tiles = batch * num_tiles * (num_kv_heads if pack else num_heads)
    args = dict(q=q, k_cache=k_cache, v_cache=v_cache, o=out, cu_seqlens_q=cu_seqlens_q, context_lens=context_lens,
                block_tables=block_tables, qk_scale=scale * LOG2E, k_scale=k_scale, v_scale=v_scale,
                stride_qt=q.stride(0), stride_qh=q.stride(1), stride_ot=out.stride(0), stride_oh=out.stride(1),
                stride_bt=block_tables.stride(0), batch=batch, num_tiles=num_tiles,
                NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim, BLOCK_SIZE=block_size, GROUP=group,
                BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                DOT_DTYPE=dot_dtype(q.dtype, fp8, cfg.fp8_widen), FP8=fp8, PACK_GQA=pack,
                LONGEST_FIRST=cfg.longest_first,
                I32=cfg.int32_offsets and k_cache.numel() < 2**31,
                QK_FP8=product_fp8 if cfg.qk_fp8 else None, PV_FP8=product_fp8 if cfg.pv_fp8 else None)
    options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    if cfg.persistent:
        return [Launch(_prefill_persistent_kernel, (min(tiles, cfg.persistent),), dict(args, PREFETCH_Q=cfg.prefetch_q),
                       options, swap=LAYER_ARGS)]
    return [Launch(_prefill_kernel, (tiles,), args, options, swap=LAYER_ARGS)]
