"""Plain-torch references for every kernel: slow, obvious, computed in fp32 (or the input's wider
dtype). Tests compare the kernels against these; the model's reference_forward uses them too.
"""

from __future__ import annotations

import torch

from engine.kernels.cache import v_token_major, v_write


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` tokens of one sequence from a paged cache [blocks, bs, Hkv, D] -> [length, Hkv, D].

    The cache is indexed [block, offset, head, dim]: pass a V cache through gather_v (an fp8 V is transposed)."""
    block_size = cache.shape[1]
    t = torch.arange(length, device=cache.device)
    blocks = block_table.to(cache.device).long()[t // block_size]
    return cache[blocks, t % block_size]


def gather_v(v_cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """gather_kv for a V cache, in whatever order it stores its blocks (engine.kernels.cache.v_token_major)."""
    return gather_kv(v_token_major(v_cache), block_table, length)


def quantize_fp8(x, scale) -> torch.Tensor:
    """x / scale saturated to e4m3's range, as float8_e4m3fn (what the store kernel writes)."""
    return (x.float() / scale.float()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def fp8_cache_of(x: torch.Tensor, scale: torch.Tensor, *, v: bool) -> torch.Tensor:
    """The fp8 cache [blocks, bs, Hkv, D] the store kernel would write for K (v False) or V (v True) given
    token-major x [blocks, bs, Hkv, D]: x / scale quantised, V in its transposed (and permuted) per-block order."""
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    if not v:
        out.copy_(quantize_fp8(x, scale))
        return out
    num_blocks, block_size = x.shape[:2]
    blocks = torch.arange(num_blocks, device=x.device).repeat_interleave(block_size)
    offsets = torch.arange(block_size, device=x.device).repeat(num_blocks)
    v_write(out, blocks, offsets, quantize_fp8(x, scale).flatten(0, 1))
    return out


def dequantize(cache, scale) -> torch.Tensor:
    """A cache (or part of one) in fp32: fp8 entries times their scale; others as they are."""
    return cache.float() * scale.float() if cache.dtype == torch.float8_e4m3fn else cache


def store_kvcache(key, value, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    if k_cache.dtype == torch.float8_e4m3fn:
        key, value = quantize_fp8(key, k_scale), quantize_fp8(value, v_scale)
    block_size = k_cache.shape[1]
    k_cache.view(-1, *k_cache.shape[2:])[slots] = key[keep]
    v_write(v_cache, slots // block_size, slots % block_size, value[keep])


def _attend(q, k, v, scale, causal_offset=None):
    """q [n, Hq, D], k/v [m, Hkv, D] -> [n, Hq, D] in fp32; query i sees keys <= causal_offset + i."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,mhd->hnm", q.float(), k) * scale
    if causal_offset is not None:
        allowed = torch.arange(k.shape[0])[None, :] <= causal_offset + torch.arange(q.shape[0])[:, None]
        scores = scores.masked_fill(~allowed.to(scores.device), float("-inf"))
    return torch.einsum("hnm,mhd->nhd", scores.softmax(-1), v)


def paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale, k_scale=None,
                           v_scale=None) -> torch.Tensor:
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for b, n in enumerate(context_lens.tolist()):
        if n:
            k = dequantize(gather_kv(k_cache, block_tables[b], n), k_scale)
            v = dequantize(gather_v(v_cache, block_tables[b], n), v_scale)
            out[b] = _attend(q[b : b + 1], k, v, scale)[0]
    return out


def paged_prefill_attention(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_tables, scale, k_scale=None,
                            v_scale=None) -> torch.Tensor:
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    cu = cu_seqlens_q.tolist()
    for b, n in enumerate(context_lens.tolist()):
        lo, hi = cu[b], cu[b + 1]
        k = dequantize(gather_kv(k_cache, block_tables[b], n), k_scale)
        v = dequantize(gather_v(v_cache, block_tables[b], n), v_scale)
        out[lo:hi] = _attend(q[lo:hi], k, v, scale, causal_offset=n - (hi - lo))
    return out


def copy_blocks(kv_cache, src_dst) -> None:
    for src, dst in src_dst.tolist():
        kv_cache[:, :, dst] = kv_cache[:, :, src].clone()


def rms_norm(x, weight, eps, residual=None):
    if residual is not None:
        x = (x.float() + residual.float()).to(x.dtype)
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype), x


def rotary_embedding(q, k, positions, cos_sin) -> None:
    half = q.shape[-1] // 2
    cos, sin = cos_sin[positions.long(), :half][:, None], cos_sin[positions.long(), half:][:, None]
    for x in (q, k):
        x1, x2 = x[..., :half].float(), x[..., half:].float()
        x.copy_(torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1))


def silu_and_mul(x) -> torch.Tensor:
    gate, up = x.float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up).to(x.dtype)
