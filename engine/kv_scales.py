"""Per-layer fp8 K/V scales from the data (vLLM's calculate_kv_scales), instead of 1.0.

vLLM, with ``calculate_kv_scales=True``, sets each attention layer's scales on its first forward pass to
``amax(|K|) / K_SCALE_CONSTANT`` and ``amax(|V|) / V_SCALE_CONSTANT`` (defaults 200 and 100: headroom
for later tokens beyond the first batch's range). Here one plain causal forward pass (torch references,
no cache) over calibration tokens gives each layer's amax of K (after RoPE) and V; the scale is
amax / range with range 448 (e4m3's largest value: the calibration data spans the full fp8 range) unless
given. Values beyond range * scale later saturate at +-448 (the store kernel clamps, as vLLM).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels import reference as ref
from engine.kernels.cache import FP8_E4M3_MAX
from engine.model import LlamaModel

VLLM_K_SCALE_CONSTANT, VLLM_V_SCALE_CONSTANT = 200.0, 100.0


@torch.inference_mode()
def plain_forward(model: LlamaModel, row: torch.Tensor, amax: torch.Tensor | None = None,
                  fp8_scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Causal forward of one sequence row [T] with torch references (no cache) -> final hidden [T, H].

    amax [num_layers, 2], if given, is raised to each layer's max |K| (after RoPE) and max |V|. fp8_scales
    (k_scales, v_scales [num_layers]), if given, round K and V through e4m3 as the store kernel does
    (x / scale saturated and rounded, times scale) before attention: an fp8 cache emulated in torch.
    """
    eps, t = model.spec.rms_norm_eps, row.shape[0]
    positions = torch.arange(t, device=model.device)
    hidden, residual = model.embed[row], None
    for i, w in enumerate(model.layers):
        x, residual = ref.rms_norm(hidden, w.input_norm, eps, residual)
        q, k, v = (z.clone() for z in model._split_qkv(F.linear(x, w.qkv)))
        ref.rotary_embedding(q, k, positions, model.cos_sin)
        if amax is not None:
            amax[i, 0] = torch.maximum(amax[i, 0], k.abs().max().float())
            amax[i, 1] = torch.maximum(amax[i, 1], v.abs().max().float())
        q, k, v = q.float(), k.float(), v.float()
        if fp8_scales is not None:
            ks, vs = fp8_scales[0][i : i + 1], fp8_scales[1][i : i + 1]
            k, v = ref.dequantize(ref.quantize_fp8(k, ks), ks), ref.dequantize(ref.quantize_fp8(v, vs), vs)
        o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True,
                                           scale=model.scale, enable_gqa=True)
        o = o.transpose(0, 1).to(model.dtype).reshape(t, -1)
        x, residual = ref.rms_norm(F.linear(o, w.o_proj), w.post_norm, eps, residual)
        hidden = F.linear(ref.silu_and_mul(F.linear(x, w.gate_up)), w.down)
    return ref.rms_norm(hidden, model.norm, eps, residual)[0]


def kv_amax(model: LlamaModel, input_ids: torch.Tensor) -> torch.Tensor:
    """[num_layers, 2] max |K| and max |V| per layer over sequences input_ids [B, T] (or one [T])."""
    amax = torch.zeros(model.spec.num_layers, 2, dtype=torch.float32, device=model.device)
    for row in input_ids.view(-1, input_ids.shape[-1]):
        plain_forward(model, row, amax=amax)
    return amax


def calculate_kv_scales(model: LlamaModel, input_ids: torch.Tensor, k_range: float = FP8_E4M3_MAX,
                        v_range: float = FP8_E4M3_MAX) -> tuple[torch.Tensor, torch.Tensor]:
    """Set model.k_scales / v_scales (in place: captured graphs keep reading them) to amax / range; return them."""
    amax = kv_amax(model, input_ids).clamp_min(1e-6)  # an all-zero layer keeps a finite scale
    model.k_scales.copy_(amax[:, 0] / k_range)
    model.v_scales.copy_(amax[:, 1] / v_range)
    return model.k_scales, model.v_scales
