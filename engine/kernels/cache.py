"""Writing tokens into the paged KV cache, and moving whole blocks (copy-on-write, swap).

Layout: see engine.kernels. ``store_kvcache`` is a Triton kernel (one program per token, ~10 lines);
``copy_blocks`` moves whole blocks with torch's gather/scatter copies, which are already
bandwidth-bound and need no kernel of our own (swaps: engine.kernels.swap). It moves raw bytes, so an
fp8 cache is copied bit-exactly like any other.

FP8 (vLLM's ``kv_cache_dtype="fp8"``): a cache of dtype float8_e4m3fn stores ``x / scale``,
saturated to e4m3's +-448, with one fp32 scale per layer for K and one for V (tensors of one
element, read on the device: no host sync, graph-capturable). Readers multiply back (decode, prefill).
An fp8 cache also stores V transposed within each block (vLLM's old paged kernel's value_cache layout):
the V bytes of a block hold [num_kv_heads, head_dim, block_size], token index fastest, so that P @ V,
which contracts over tokens, reads its operand with the contraction dim contiguous (sm_90 has no
transposed 8-bit shared-memory read). Within each 16 tokens of a block (block sizes >= 16) the V columns are
moreover permuted, FlashAttention-3's order for fp8 P V: offset 16 h + 8 a + 2 c + b (a, b in {0, 1}, c in 0..3) is
stored at column 16 h + 4 c + 2 a + b, the order in which a thread's share of P's fp32 accumulator (columns 8 a + 2 c
+ b) is the share of the e4m3 A operand it must hold (4 c .. 4 c + 3), so the e4m3 prefill reorders P by a register
renaming instead of shuffles; the readers that widen V read K's rows in the same order (``tile_tokens``). Blocks of
8 tokens cannot hold a group of 16 and keep the plain order. The tensor keeps its shape
[num_blocks, block_size, Hkv, D] and a block its bytes, so block moves need no change; ``v_token_major`` and
``v_write`` are the host's readers and writers that know the order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


FP8_E4M3_MAX = 448.0  # largest finite float8_e4m3fn


def is_fp8(cache: torch.Tensor) -> bool:
    return cache.dtype == torch.float8_e4m3fn


def v_transposed(v_cache: torch.Tensor) -> bool:
    """Whether a V cache stores each block as [Hkv, D, block_size] (an fp8 cache) instead of [block_size, Hkv, D]."""
    return is_fp8(v_cache)


V_GROUP = 16  # tokens whose V columns an fp8 cache permutes among themselves (blocks of at least this many tokens)


def v_permuted(block_size: int) -> bool:
    """Whether an fp8 V cache of this block size stores each 16 tokens' columns in the permuted order."""
    return block_size >= V_GROUP


def v_column(offset: torch.Tensor, block_size: int) -> torch.Tensor:
    """The column within its block where an fp8 cache stores V of block offset(s) `offset` (int tensor)."""
    if not v_permuted(block_size):
        return offset
    return (offset & ~15) | (offset & 1) | ((offset >> 2) & 2) | ((offset << 1) & 12)


@triton.jit
def _v_column(offset, BLOCK_SIZE: tl.constexpr):
    """v_column in a kernel."""
    if BLOCK_SIZE >= 16:
        return (offset & ~15) | (offset & 1) | ((offset >> 2) & 2) | ((offset << 1) & 12)
    return offset


@triton.jit
def _v_offset(col, BLOCK_SIZE: tl.constexpr):
    """Inverse of v_column: the block offset whose V an fp8 cache stores at column(s) `col`."""
    if BLOCK_SIZE >= 16:
        return (col & ~15) | (col & 1) | ((col << 2) & 8) | ((col >> 1) & 6)
    return col


@triton.jit
def tile_tokens(n0, BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr, V_T: tl.constexpr):
    """The tokens of the tile n0 : n0 + BLOCK_N (n0 a multiple of BLOCK_N >= 16) in the order its V^T columns hold
    them as stored: the fp8 cache's permuted order when V_T (an fp8 cache), else n0, n0 + 1, ..."""
    cols = tl.arange(0, BLOCK_N)
    if V_T:
        return n0 + _v_offset(cols, BLOCK_SIZE)
    return n0 + cols


def _v_stored(v_cache: torch.Tensor) -> torch.Tensor:
    """An fp8 V cache's bytes as a view indexed [block, column, head, dim]."""
    num_blocks, block_size, hkv, d = v_cache.shape
    return v_cache.view(num_blocks, hkv, d, block_size).permute(0, 3, 1, 2)


def v_token_major(v_cache: torch.Tensor) -> torch.Tensor:
    """V cache [num_blocks, block_size, Hkv, D] (one layer, contiguous) indexed [block, offset, head, dim] whatever its
    storage order: the cache itself, for an fp8 cache of 8-token blocks a view of its [num_blocks, Hkv, D, block_size]
    bytes, for larger fp8 blocks (whose columns are permuted) a copy. For reading; write with v_write."""
    if not v_transposed(v_cache):
        return v_cache
    stored, block_size = _v_stored(v_cache), v_cache.shape[1]
    if not v_permuted(block_size):
        return stored
    return stored[:, v_column(torch.arange(block_size, device=v_cache.device), block_size)]


def v_write(v_cache: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor, values: torch.Tensor) -> None:
    """Write V rows values [n, Hkv, D] (or one broadcast to it) to tokens (blocks[i], offsets[i]) in the cache's
    storage order (the host's store_kvcache; the kernel's writes the same bytes)."""
    if not v_transposed(v_cache):
        v_cache[blocks, offsets] = values
    else:
        _v_stored(v_cache)[blocks, v_column(offsets, v_cache.shape[1])] = values


@triton.jit
def _round_to_e4m3(x):
    """fp32 x (|x| <= 448) rounded to the nearest e4m3 value, ties to even, still as fp32.

    The cast that follows is then exact. Why not let the cast round: Triton's interpreter rounds
    fp32 -> fp8 without carrying into the exponent (7.9999 becomes 4, not 8), so the tests would
    check a path the GPU never runs; this way the interpreter and the GPU run the same arithmetic
    (a few integer ops per element in a store kernel that is bound by its loads).
    Normals (|x| >= 2^-6) keep 3 mantissa bits by integer rounding of the fp32 bits; subnormals are
    multiples of 2^-9, rounded with the 1.5 * 2^23 trick; -0 stays -0.
    """
    bits = x.to(tl.uint32, bitcast=True)
    normal = (bits & 0x7FFFFFFF) >= 0x3C800000
    rounded = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
    sub = ((x * 512.0 + 12582912.0) - 12582912.0) / 512.0
    sub = tl.where(sub == 0.0, x * 0.0, sub)
    return tl.where(normal, rounded, sub)


@triton.jit
def _quantize(x, scale_ptr, out_ty):
    """x / scale, saturated to e4m3's +-448 (as vLLM), rounded to nearest even, in out_ty (fp8).

    The division is correctly rounded (a GPU's default fp32 '/' is not), so the bits equal torch's
    (x.float() / scale).clamp(-448, 448).to(float8_e4m3fn) on every device.
    """
    y = tl.clamp(tl.math.div_rn(x.to(tl.float32), tl.load(scale_ptr)), -448.0, 448.0)  # IEEE division, as torch
    return _round_to_e4m3(y).to(out_ty)


@triton.jit
def _store_kvcache_kernel(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale, stride_k, stride_v,
                          ROW: tl.constexpr, ROW_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, FP8: tl.constexpr):
    token = tl.program_id(0)
    slot = tl.load(slot_mapping + token).to(tl.int64)
    if slot < 0:  # padding token
        return
    cols = tl.arange(0, ROW_PAD)
    mask = cols < ROW
    k = tl.load(key + token * stride_k + cols, mask=mask)
    v = tl.load(value + token * stride_v + cols, mask=mask)
    if FP8:
        k = _quantize(k, k_scale, k_cache.dtype.element_ty)
        v = _quantize(v, v_scale, v_cache.dtype.element_ty)
    tl.store(k_cache + slot * ROW + cols, k, mask=mask)
    if FP8:  # V transposed within its block: element (head, dim) of offset o at ((head * D + dim) * BLOCK_SIZE + col),
        # col = v_column(o) (permuted within 16 tokens)
        block, offset = slot // BLOCK_SIZE, slot % BLOCK_SIZE
        tl.store(v_cache + block * (BLOCK_SIZE * ROW) + cols * BLOCK_SIZE + _v_column(offset, BLOCK_SIZE), v,
                 mask=mask)
    else:
        tl.store(v_cache + slot * ROW + cols, v, mask=mask)


def store_kvcache(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
                  v_scale: torch.Tensor | None = None) -> None:
    """Write key/value [N, Hkv, D] into the cache at ``slot_mapping`` [N]; a slot < 0 is padding, skipped.

    key/value may be strided along N (views into a fused QKV output) but each row's [Hkv, D] must be
    contiguous. Slots must be distinct (two tokens writing one slot race). An fp8 cache needs the
    layer's k_scale and v_scale (fp32 tensors of one element on the cache's device), and its V is written
    transposed within the block (see the module docstring).
    """
    n, hkv, d = key.shape
    assert value.shape == key.shape and slot_mapping.shape == (n,)
    assert key.stride()[1:] == (d, 1) and value.stride()[1:] == (d, 1), "rows of key/value must be contiguous"
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and k_cache.shape[2:] == (hkv, d)
    fp8 = is_fp8(k_cache)
    assert not fp8 or (k_scale is not None and v_scale is not None), "an fp8 cache needs k_scale and v_scale"
    if n == 0:
        return
    row = hkv * d
    _store_kvcache_kernel[(n,)](key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale,
                                key.stride(0), value.stride(0), ROW=row, ROW_PAD=triton.next_power_of_2(row),
                                BLOCK_SIZE=k_cache.shape[1], FP8=fp8)


def copy_blocks(kv_cache: torch.Tensor, src_dst: torch.Tensor) -> None:
    """Copy-on-write: block ``src_dst[i, 0]`` -> ``src_dst[i, 1]`` in every layer, K and V.

    kv_cache [L, 2, num_blocks, ...]; src_dst [M, 2] int64 on any device. Destinations must be
    distinct and not among the sources (true for CoW: a destination is freshly allocated).
    One gather and one scatter over dim 2, stream-ordered, no host sync.
    """
    if src_dst.numel() == 0:
        return
    src_dst = src_dst.to(kv_cache.device, torch.int64)
    kv_cache = raw_view(kv_cache)
    kv_cache.index_copy_(2, src_dst[:, 1], kv_cache.index_select(2, src_dst[:, 0]))


def raw_view(cache: torch.Tensor) -> torch.Tensor:
    """The same memory as uint8 for an fp8 cache (index_select/index_copy_ on float8 are not on every device)."""
    return cache.view(torch.uint8) if is_fp8(cache) else cache
