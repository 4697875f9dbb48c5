"""Paged decode attention: one query token per sequence against its paged K/V.

Grid (batch, num_kv_heads, num_splits). A program serves all query heads of one KV head (GQA:
K/V are read once per KV head, the G query heads are the rows of a small matrix product, padded to
16 rows for the tensor cores) over one split of the sequence. Every split of a sequence covers an
equal share of its context_len, rounded to BLOCK_N tokens; a split with no tokens writes an empty
partial (lse = -inf). With num_splits > 1 a second small kernel merges the partials by log-sum-exp.

Invariants: context_len 0 gives zeros, never NaN. Shapes and num_splits depend only on tensor
shapes (never on tensor values), so the call has no host sync and can be captured in a CUDA graph.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from engine.kernels.launch import INTERPRET, LAYER_ARGS, Launch
from pagesim.cost.decode_split import FP8_FEW_SPLITS, fp8_decode_splits, num_decode_splits

LOG2E = 1.4426950408889634


FP8_WIDEN = ("bf16", "fp16")
_TL = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def dot_dtype(q_dtype: torch.dtype, fp8: bool, widen: str):
    """The attention products' input type (None: q's dtype with K/V as read, no conversion).

    An fp8 cache is widened to q's dtype ("bf16", the default) or to fp16 ("fp16", q cast too). Under the
    interpreter (numpy has no bf16) products run in fp32, except the fp16 widening, which it runs as the GPU.
    """
    if widen not in FP8_WIDEN:
        raise ValueError(f"fp8_widen must be one of {FP8_WIDEN}, got {widen!r}")
    if fp8 and widen == "fp16":
        return tl.float16
    if INTERPRET:
        return tl.float32
    return _TL[q_dtype] if fp8 else None


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """Launch parameters; the defaults were the fastest on an H200 (bench/NOTES.md)."""

    block_n: int | None = None  # tokens per inner step; None: 128 when the sequence is split, else 64
    num_warps: int = 4
    num_stages: int = 3
    # fp8 cache only: "bf16" widens fp8 K/V to q's dtype; "fp16" widens them to fp16 (one native cvt per two
    # elements on sm_89+) and runs both products in fp16 (q cast once; p in [0, 1]; |q| must stay < 65504).
    fp8_widen: str = "bf16"
    # Load the next tile before computing this one (registers double-buffered by hand; meant for num_stages 1,
    # where Triton does not stage loads through shared memory and fp8 is widened in registers).
    prefetch: bool = False
    # fp8 cache only (the bf16 decode keeps int64 offsets): K/V element offsets in int32 where the cache has fewer
    # than 2**31 elements (an 8B model's fp8 layer at the H200's whole budget: 1.87e9)
    int32_offsets: bool = True


# The default launches for an fp8 cache (V stored transposed per block, its tile read one block-table entry per
# 16-token run), picked by fp8_decode_launch from the batch and table width; all widen fp8 to fp16. Timed on the
# H200 as CUDA-graph replays (bench/fp8_launch.py, bench/results/fp8-launch-h200-2026-12-01-r6.json, bench/NOTES.md).
FP8_DECODE_CONFIG = DecodeConfig(block_n=None, num_warps=2, num_stages=2, fp8_widen="fp16")  # a few splits (128)
FP8_SHORT_CONFIG = DecodeConfig(block_n=32, num_warps=1, num_stages=2, fp8_widen="fp16")  # unsplit, short tables
FP8_LONG_CONFIG = DecodeConfig(block_n=64, num_warps=2, num_stages=3, fp8_widen="fp16")  # unsplit, long tables
FP8_MANY_SPLITS_CONFIG = DecodeConfig(block_n=32, num_warps=2, num_stages=2, fp8_widen="fp16")
FP8_SHORT_CONTEXT = 2048  # table width (tokens) up to which an unsplit launch is "short"


@triton.jit
def _load_kv(k_cache, v_cache, bt_row, kvh, n0, end, d,
             NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
             V_T: tl.constexpr, MASKED: tl.constexpr, I32: tl.constexpr):
    """K and V [BLOCK_N, HEAD_DIM] of tokens n0 : n0 + BLOCK_N (n0 a multiple of BLOCK_N), as stored.

    MASKED: the tile may reach past `end` (else every token is < end and nothing is masked); K rows of tokens
    >= end are then 0. V_T (an fp8 cache): V is stored transposed per block ([Hkv, D, block_size],
    engine.kernels.cache), so it is read as V^T [HEAD_DIM, BLOCK_N] in runs of min(BLOCK_SIZE, BLOCK_N)
    contiguous tokens (16-byte loads, one block-table read per run, masked per run, so a run's slots past
    `end` hold whatever the cache holds there: _widen zeroes them) and returned transposed, a K-major
    operand for P @ V. Otherwise V rows of tokens >= end are 0. I32: element offsets in int32 (the caller
    checked that the cache has fewer than 2**31 elements): fewer registers for the tile's addresses.
    """
    t = n0 + tl.arange(0, BLOCK_N)
    valid = t < end
    if MASKED:
        block = tl.load(bt_row + t // BLOCK_SIZE, mask=valid, other=0)
    else:
        block = tl.load(bt_row + t // BLOCK_SIZE)
    if not I32:
        block = block.to(tl.int64)
    rows = ((block * BLOCK_SIZE + t % BLOCK_SIZE) * NUM_KV_HEADS + kvh) * HEAD_DIM
    if MASKED:
        k = tl.load(k_cache + rows[:, None] + d[None, :], mask=valid[:, None], other=0.0)
    else:
        k = tl.load(k_cache + rows[:, None] + d[None, :])
    if V_T:  # V^T as [HEAD_DIM, runs, RUN], one block id per run of RUN tokens
        RUN: tl.constexpr = BLOCK_SIZE if BLOCK_SIZE < BLOCK_N else BLOCK_N
        r0 = n0 + tl.arange(0, BLOCK_N // RUN) * RUN  # each run's first token
        if MASKED:
            rblock = tl.load(bt_row + r0 // BLOCK_SIZE, mask=r0 < end, other=0)
        else:
            rblock = tl.load(bt_row + r0 // BLOCK_SIZE)
        if not I32:
            rblock = rblock.to(tl.int64)
        base = (rblock * NUM_KV_HEADS + kvh) * (HEAD_DIM * BLOCK_SIZE) + r0 % BLOCK_SIZE
        v_ptrs = (v_cache + d[:, None, None] * BLOCK_SIZE + tl.multiple_of(base, RUN)[None, :, None]
                  + tl.arange(0, RUN)[None, None, :])
        if MASKED:
            vt = tl.load(v_ptrs, mask=(r0 < end)[None, :, None], other=0.0)
        else:
            vt = tl.load(v_ptrs)
        v = tl.trans(tl.reshape(vt, (HEAD_DIM, BLOCK_N)))
    elif MASKED:
        v = tl.load(v_cache + rows[:, None] + d[None, :], mask=valid[:, None], other=0.0)
    else:
        v = tl.load(v_cache + rows[:, None] + d[None, :])
    return k, v


@triton.jit
def _widen(k, v, valid, DTYPE: tl.constexpr, ZERO_V: tl.constexpr):
    """K and V as _load_kv read them, widened to DTYPE when that is not None; with ZERO_V (a masked tile of a
    transposed V), V rows of tokens that are not valid become 0: they were read with their run, and a slot
    never written may hold NaN bits, which P = 0 there would not cancel. One select per element, so only the
    tile that may reach past the end pays it."""
    if DTYPE is not None:
        k = k.to(DTYPE)
        v = v.to(DTYPE)
    if ZERO_V:
        v = tl.where(valid[:, None], v, 0.0)
    return k, v


@triton.jit
def online_softmax_step(acc, m, l, s, v):
    """Fold the scores s [rows, keys] (log2 domain) and their values v [keys, D] into the running max m,
    sum l and output acc of an online softmax (decode and prefill share it)."""
    m_new = tl.maximum(m, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m - m_new)
    l = l * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l


@triton.jit
def _attend_step(acc, m, l, qv, k, v, valid, qk_scale, MASKED: tl.constexpr):
    """One online-softmax step of the query rows qv over the tile's K and V (keys not valid skipped if MASKED)."""
    s = tl.dot(qv, tl.trans(k)) * qk_scale  # [GROUP_PAD, BLOCK_N], log2 domain
    if MASKED:
        s = tl.where(valid[None, :], s, float("-inf"))
    return online_softmax_step(acc, m, l, s, v)


@triton.jit
def _decode_split_kernel(q, k_cache, v_cache, block_tables, context_lens, o, lse, qk_scale, k_scale, v_scale,
                         stride_qb, stride_qh, stride_bt, stride_ob, stride_oh, stride_os,
                         NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                         GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                         STORE_LSE: tl.constexpr, DOT_DTYPE: tl.constexpr, FP8: tl.constexpr,
                         PREFETCH: tl.constexpr, I32: tl.constexpr):
    """DOT_DTYPE: the products' input type (None: q's dtype, K/V read as they are).

    An fp8 cache (not PREFETCH) runs the split's whole tiles unmasked and its last, partial tile masked; a
    model-dtype cache runs every tile masked (one loop, as before the fp8 layout)."""
    b, kvh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    num_splits = tl.num_programs(2)
    ctx = tl.load(context_lens + b)
    chunk = tl.cdiv(tl.cdiv(ctx, num_splits), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = tl.minimum(start + chunk, ctx)

    g = tl.arange(0, GROUP_PAD)
    heads = kvh * GROUP + g
    d = tl.arange(0, HEAD_DIM)
    if FP8:  # K's scale folds into the score scale, V's into the output: the loop only widens fp8
        qk_scale = qk_scale * tl.load(k_scale)
    qv = tl.load(q + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=g[:, None] < GROUP, other=0.0)
    if DOT_DTYPE is not None:
        qv = qv.to(DOT_DTYPE)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    bt_row = block_tables + b * stride_bt
    masked_start = start
    if FP8 and not PREFETCH:
        masked_start = start + tl.maximum(end - start, 0) // BLOCK_N * BLOCK_N
        for n0 in range(start, masked_start, BLOCK_N):
            k, v = _load_kv(k_cache, v_cache, bt_row, kvh, n0, end, d,
                            NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCK_N, FP8, False, I32)
            k, v = _widen(k, v, None, DOT_DTYPE, False)
            acc, m, l = _attend_step(acc, m, l, qv, k, v, None, qk_scale, False)
    if PREFETCH:  # the first tile, as read (widened where it is used)
        k_next, v_next = _load_kv(k_cache, v_cache, bt_row, kvh, start, end, d,
                                  NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCK_N, FP8, True, I32)
    for n0 in range(masked_start, end, BLOCK_N):
        valid = n0 + tl.arange(0, BLOCK_N) < end
        if PREFETCH:  # registers double-buffered by hand: the next tile's loads are in flight during this one
            k, v = k_next, v_next
            k_next, v_next = _load_kv(k_cache, v_cache, bt_row, kvh, n0 + BLOCK_N, end, d,
                                      NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCK_N, FP8, True, I32)
        else:
            k, v = _load_kv(k_cache, v_cache, bt_row, kvh, n0, end, d,
                            NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, BLOCK_N, FP8, True, I32)
        k, v = _widen(k, v, valid, DOT_DTYPE, FP8)
        acc, m, l = _attend_step(acc, m, l, qv, k, v, valid, qk_scale, True)

    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    if FP8:
        out = out * tl.load(v_scale)
    o_rows = o + b * stride_ob + heads[:, None] * stride_oh + split * stride_os
    tl.store(o_rows + d[None, :], out.to(o.dtype.element_ty), mask=g[:, None] < GROUP)
    if STORE_LSE:
        part_lse = tl.where(l > 0, m + tl.log2(tl.where(l > 0, l, 1.0)), float("-inf"))
        tl.store(lse + (b * NUM_KV_HEADS * GROUP + heads) * num_splits + split, part_lse, mask=g < GROUP)


@triton.jit
def _merge_splits_kernel(o_part, lse, out, stride_ob, stride_oh, num_splits,
                         SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    b, h = tl.program_id(0), tl.program_id(1)
    row = b * tl.num_programs(1) + h  # o_part [B, Hq, S, D] and lse [B, Hq, S] are contiguous
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM)
    x = tl.load(lse + row * num_splits + s, mask=s < num_splits, other=float("-inf"))
    top = tl.max(x, 0)
    w = tl.exp2(x - tl.where(top == float("-inf"), 0.0, top))  # empty splits weigh 0
    parts = tl.load(o_part + (row * num_splits + s[:, None]) * HEAD_DIM + d[None, :],
                    mask=s[:, None] < num_splits, other=0.0)
    total = tl.sum(w, 0)
    merged = tl.sum(parts * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(out + b * stride_ob + h * stride_oh + d, merged.to(out.dtype.element_ty))


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def default_num_splits(batch: int, num_kv_heads: int, max_context: int, device: torch.device) -> int:
    """Enough splits that batch * num_kv_heads * splits makes about two waves over the SMs
    (pagesim.cost.decode_split, the rule the profile cost model shares).

    Depends only on shapes (max_context = block table width * block_size), never on values.
    """
    sms = _num_sms(device.index or 0) if device.type == "cuda" else 4
    return num_decode_splits(batch, num_kv_heads, sms, max_context)


def fp8_decode_launch(batch: int, num_kv_heads: int, max_context: int,
                      device: torch.device) -> tuple[DecodeConfig, int]:
    """The default launch (config, num_splits) for an fp8 cache at a shape (never values: graph-capturable), as
    vLLM's and FlashInfer's decode heuristics pick tiles by batch and context; chosen from bench/fp8_tune.py's
    sweep and bench/fp8_launch.py's graph-replay timings on the H200 (bench/NOTES.md).

    Unsplit (enough sequences to fill the GPU): 32-token steps on 1 warp for short tables, 64 on 2 warps
    otherwise. A few splits: 128-token steps on 2 warps. Many splits (a few long sequences): 4x the shared rule's
    splits, at least 256 tokens each, 32-token steps (pagesim.cost.decode_split.fp8_decode_splits, where the
    profile cost model's note on it is)."""
    splits = default_num_splits(batch, num_kv_heads, max_context, device)
    if splits == 1:
        return (FP8_SHORT_CONFIG if max_context <= FP8_SHORT_CONTEXT else FP8_LONG_CONFIG), 1
    if splits <= FP8_FEW_SPLITS:
        return FP8_DECODE_CONFIG, splits
    return FP8_MANY_SPLITS_CONFIG, fp8_decode_splits(splits, max_context)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float, *,
                           num_splits: int | None = None, out: torch.Tensor | None = None,
                           config: DecodeConfig | None = None, k_scale: torch.Tensor | None = None,
                           v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of q [B, Hq, D] over each sequence's first context_lens[b] cached tokens -> [B, Hq, D].

    block_tables [B, max_blocks] int32 (entries past a sequence's last block are never read),
    context_lens [B] int32 (0 allowed: zeros out). q may be strided over B and Hq; its last dim
    must be contiguous. out, if given, is [B, Hq, D] with a contiguous last dim. An fp8 cache
    (engine.kernels.cache) needs the layer's k_scale and v_scale; it is read as fp8 and widened in
    registers, never copied.
    """
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    for launch in decode_launches(q, k_cache, v_cache, block_tables, context_lens, scale, out, num_splits=num_splits,
                                  config=config, k_scale=k_scale, v_scale=v_scale):
        launch.run()
    return out


def decode_launches(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    context_lens: torch.Tensor, scale: float, out: torch.Tensor, *, num_splits: int | None = None,
                    config: DecodeConfig | None = None, k_scale: torch.Tensor | None = None,
                    v_scale: torch.Tensor | None = None) -> list[Launch]:
    """paged_decode_attention's kernel launches into `out` (the split kernel, then the merge when split), not yet
    issued; the split kernel's cache and scales can be swapped per call (engine.kernels.launch: a step's layers,
    which run one after the other on one stream and so share the split partials allocated here)."""
    fp8 = k_cache.dtype == torch.float8_e4m3fn
    batch, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    cfg = config or DecodeConfig()
    if fp8 and config is None:
        cfg, fp8_splits = fp8_decode_launch(batch, num_kv_heads, block_tables.shape[1] * block_size, q.device)
        num_splits = fp8_splits if num_splits is None else num_splits
    group = num_heads // num_kv_heads
    assert num_heads == group * num_kv_heads and q.stride(2) == 1 and head_dim & (head_dim - 1) == 0
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and block_tables.stride(1) == 1
    assert not fp8 or (k_scale is not None and v_scale is not None), "an fp8 cache needs k_scale and v_scale"
    if num_splits is None:
        num_splits = default_num_splits(batch, num_kv_heads, block_tables.shape[1] * block_size, q.device)
    assert out.shape == q.shape and out.stride(2) == 1
    if batch == 0:
        return []
    if num_splits == 1:
        o, lse, (sob, soh, sos) = out, out, (out.stride(0), out.stride(1), 0)
    else:
        o = torch.empty((batch, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
        lse = torch.empty((batch, num_heads, num_splits), dtype=torch.float32, device=q.device)
        sob, soh, sos = o.stride()[:3]
    block_n = cfg.block_n or (128 if num_splits > 1 else 64)
    split = dict(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, context_lens=context_lens, o=o,
                 lse=lse, qk_scale=scale * LOG2E, k_scale=k_scale, v_scale=v_scale,
                 stride_qb=q.stride(0), stride_qh=q.stride(1), stride_bt=block_tables.stride(0),
                 stride_ob=sob, stride_oh=soh, stride_os=sos,
                 NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim, BLOCK_SIZE=block_size, GROUP=group,
                 GROUP_PAD=max(16, triton.next_power_of_2(group)), BLOCK_N=block_n, STORE_LSE=num_splits > 1,
                 DOT_DTYPE=dot_dtype(q.dtype, fp8, cfg.fp8_widen), FP8=fp8, PREFETCH=cfg.prefetch,
                 I32=fp8 and cfg.int32_offsets and k_cache.numel() < 2**31)
    launches = [Launch(_decode_split_kernel, (batch, num_kv_heads, num_splits), split,
                       {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}, swap=LAYER_ARGS)]
    if num_splits > 1:
        merge = dict(o_part=o, lse=lse, out=out, stride_ob=out.stride(0), stride_oh=out.stride(1),
                     num_splits=num_splits, SPLITS_PAD=max(2, triton.next_power_of_2(num_splits)), HEAD_DIM=head_dim)
        launches.append(Launch(_merge_splits_kernel, (batch, num_heads), merge, {"num_warps": 4}))
    return launches
