"""The model's fused pointwise steps, one small kernel each: (residual add +) RMSNorm, rotary
embedding (HF Llama's rotate-half convention, in place), and SwiGLU's silu(gate) * up.

They exist to cut a decode step's kernel launches (a plain-torch RoPE alone is ~8 launches per
tensor per layer). All arithmetic is fp32; results are rounded to the input dtype once.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x, residual, weight, out, residual_out, eps, stride_x, stride_r,
                     HIDDEN: tl.constexpr, HIDDEN_PAD: tl.constexpr, ADD_RESIDUAL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, HIDDEN_PAD)
    mask = cols < HIDDEN
    h = tl.load(x + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if ADD_RESIDUAL:
        h += tl.load(residual + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        h = h.to(residual_out.dtype.element_ty)  # the residual stream is kept in the model dtype
        tl.store(residual_out + row * HIDDEN + cols, h, mask=mask)
        h = h.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(h * h, 0) / HIDDEN + eps)
    w = tl.load(weight + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out + row * HIDDEN + cols, (h * inv * w).to(out.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of x [T, H] (of x + residual when given) -> (normed, new residual = x (+ residual))."""
    tokens, hidden = x.shape
    out = torch.empty((tokens, hidden), dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(out) if residual is not None else x
    if tokens:
        _rms_norm_kernel[(tokens,)](x, residual if residual is not None else x, weight, out, res_out, eps,
                                    x.stride(0), (residual if residual is not None else x).stride(0),
                                    HIDDEN=hidden, HIDDEN_PAD=triton.next_power_of_2(hidden),
                                    ADD_RESIDUAL=residual is not None, num_warps=4)
    return out, res_out


@triton.jit
def _rotate_heads(x, stride_x, token, cos, sin, NUM: tl.constexpr, NUM_PAD: tl.constexpr, HALF: tl.constexpr):
    heads = tl.arange(0, NUM_PAD)[:, None]
    cols = tl.arange(0, HALF)[None, :]
    mask = heads < NUM
    ptr = x + token * stride_x + heads * (2 * HALF) + cols
    x1 = tl.load(ptr, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(ptr + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptr, (x1 * cos - x2 * sin).to(x.dtype.element_ty), mask=mask)
    tl.store(ptr + HALF, (x2 * cos + x1 * sin).to(x.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(q, k, positions, cos_sin, stride_q, stride_k, NUM_Q: tl.constexpr, NUM_Q_PAD: tl.constexpr,
                   NUM_K: tl.constexpr, NUM_K_PAD: tl.constexpr, HALF: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions + token).to(tl.int64)
    cols = tl.arange(0, HALF)[None, :]
    cos = tl.load(cos_sin + pos * (2 * HALF) + cols)
    sin = tl.load(cos_sin + pos * (2 * HALF) + HALF + cols)
    _rotate_heads(q, stride_q, token, cos, sin, NUM_Q, NUM_Q_PAD, HALF)
    _rotate_heads(k, stride_k, token, cos, sin, NUM_K, NUM_K_PAD, HALF)


def rope_cache(head_dim: int, max_positions: int, theta: float, device: torch.device,
               scaling=None) -> torch.Tensor:
    """[max_positions, head_dim] fp32: cos(pos * f) in the first half, sin in the second, f = theta^(-2i/D),
    with f rescaled by Llama 3.1's rule when `scaling` (a pagesim.specs.RopeScaling) is given."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    if scaling is not None:
        inv_freq = llama3_scaled_frequencies(inv_freq, scaling)
    angles = torch.arange(max_positions, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=1).float()


def llama3_scaled_frequencies(inv_freq: torch.Tensor, scaling) -> torch.Tensor:
    """Llama 3.1's frequencies (HF's _compute_llama3_parameters): low frequencies / factor, high ones kept,
    a linear blend in wavelength-ratio space between them."""
    old_len = scaling.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    ratio = old_len / wavelen  # how many wavelengths fit in the original window
    smooth = ((ratio - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)).clamp(0, 1)
    return inv_freq / scaling.factor * (1 - smooth) + inv_freq * smooth


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> None:
    """Rotate q [T, Hq, D] and k [T, Hkv, D] in place by positions [T] (rows of cos_sin, see rope_cache).

    q and k may be strided over T (views into a fused QKV output); each row's [H, D] is contiguous.
    """
    tokens, num_q, head_dim = q.shape
    num_k = k.shape[1]
    assert q.stride()[1:] == (head_dim, 1) and k.stride()[1:] == (head_dim, 1)
    if tokens:
        _rotary_kernel[(tokens,)](q, k, positions, cos_sin, q.stride(0), k.stride(0),
                                  NUM_Q=num_q, NUM_Q_PAD=triton.next_power_of_2(num_q),
                                  NUM_K=num_k, NUM_K_PAD=triton.next_power_of_2(num_k), HALF=head_dim // 2)


@triton.jit
def _silu_and_mul_kernel(x, out, stride_x, INTER: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < INTER
    gate = tl.load(x + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x + row * stride_x + INTER + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out + row * INTER + cols, (gate * tl.sigmoid(gate) * up).to(out.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [T, 2I] = [gate | up] -> silu(gate) * up [T, I]."""
    tokens, inter = x.shape[0], x.shape[1] // 2
    assert x.stride(1) == 1
    out = torch.empty((tokens, inter), dtype=x.dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(inter))
    if tokens:
        _silu_and_mul_kernel[(tokens, triton.cdiv(inter, block))](x, out, x.stride(0), INTER=inter, BLOCK=block)
    return out
