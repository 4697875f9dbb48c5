"""A Llama-style decoder built from a ModelSpec, running attention on the paged KV cache.

Interface (flat, vLLM-style): one step is a packed batch of T tokens, all prefill tokens first
(chunks of one or more sequences), then one decode token per decoding sequence::

    hidden = model.forward(input_ids [T], positions [T], kv_cache, attn)   # [T, hidden_size]
    logits = model.compute_logits(hidden[idx])                              # [n, vocab] fp32

kv_cache is [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim] (engine.kernels), in
the model's dtype or in fp8 (kv_cache_dtype "fp8", vLLM's e4m3: the store kernel quantises with the
layer's k_scales[i] / v_scales[i], attention widens in registers; no bf16 copy of the cache exists).
The scales are 1.0, as vLLM uses when a checkpoint carries none; set them before the first step.
Each layer stores this step's K/V by attn.slot_mapping (slot < 0: padding, not stored) before
attending, so attention reads everything, earlier context included, from the cache.

The decode-only path (num_prefill_tokens == 0) has no host syncs and static shapes for given padded
inputs (padding: slot -1, context_len 0), so a decode step can be captured in a CUDA graph.

Weights: random from a seed, generated directly on the target device in the target dtype (no
host copy: the 8B model appears on an H200 in seconds), or loaded from HF Llama safetensors.
QKV and gate/up projections are fused into one matrix each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.kernels import rms_norm, rope_cache, rotary_embedding, silu_and_mul, store_kvcache
from engine.kernels.decode import decode_launches
from engine.kernels.prefill import prefill_launches
from engine.kernels import reference as ref
from pagesim.specs import ModelSpec


@dataclass(slots=True)
class AttentionMetadata:
    """What attention needs for one step. Tokens: num_prefill_tokens first, then num_decode_tokens.

    Prefill (B_p sequences): cu_seqlens_q [B_p+1] int32 offsets into the prefill tokens;
    context_lens_prefill [B_p] int32 = tokens in the cache after this step's tokens are stored;
    block_tables_prefill [B_p, max_blocks] int32; max_seqlen_q, a host int (None: read with a sync).
    Decode (B_d = num_decode_tokens sequences): context_lens_decode [B_d] int32 (this token
    included; 0 for padding rows), block_tables_decode [B_d, max_blocks] int32.
    """

    slot_mapping: torch.Tensor
    num_prefill_tokens: int
    num_decode_tokens: int
    cu_seqlens_q: torch.Tensor | None = None
    context_lens_prefill: torch.Tensor | None = None
    block_tables_prefill: torch.Tensor | None = None
    max_seqlen_q: int | None = None
    context_lens_decode: torch.Tensor | None = None
    block_tables_decode: torch.Tensor | None = None


@dataclass(slots=True)
class LayerWeights:
    input_norm: torch.Tensor  # [H]
    qkv: torch.Tensor  # [(Hq + 2 Hkv) D, H]
    o_proj: torch.Tensor  # [H, Hq D]
    post_norm: torch.Tensor  # [H]
    gate_up: torch.Tensor  # [2 I, H]
    down: torch.Tensor  # [H, I]


def kv_cache_shape(spec: ModelSpec, num_blocks: int, block_size: int) -> tuple[int, ...]:
    return (spec.num_layers, 2, num_blocks, block_size, spec.num_kv_heads, spec.head_dim)


def kv_cache_torch_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """The cache's element type for Config.kv_cache_dtype: "auto" is the model's dtype, "fp8" e4m3."""
    return torch.float8_e4m3fn if kv_cache_dtype == "fp8" else model_dtype


class LlamaModel:
    def __init__(self, spec: ModelSpec, embed: torch.Tensor, layers: list[LayerWeights], norm: torch.Tensor,
                 lm_head: torch.Tensor):
        self.spec, self.embed, self.layers, self.norm, self.lm_head = spec, embed, layers, norm, lm_head
        self.device, self.dtype = embed.device, embed.dtype
        self.scale = spec.head_dim**-0.5
        self.cos_sin = rope_cache(spec.head_dim, spec.max_position_embeddings, spec.rope_theta, self.device,
                                  spec.rope_scaling)
        # Per-layer fp8 scales (used only with an fp8 cache): cache value = K / k_scales[layer].
        self.k_scales = torch.ones(spec.num_layers, dtype=torch.float32, device=self.device)
        self.v_scales = torch.ones(spec.num_layers, dtype=torch.float32, device=self.device)
        self._layer_views = None  # (kv_cache, k_scales, v_scales, per-layer views): layer_cache()

    def ensure_positions(self, n: int) -> None:
        """Extend the RoPE table to n positions (a max_model_len beyond the model's window, allowed explicitly)."""
        if n > self.cos_sin.shape[0]:
            s = self.spec
            self.cos_sin = rope_cache(s.head_dim, n, s.rope_theta, self.device, s.rope_scaling)

    @classmethod
    def random(cls, spec: ModelSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
               seed: int = 0) -> LlamaModel:
        """Deterministic (per device) random weights: std 0.02, output projections 0.02 / sqrt(2 layers)."""
        device = torch.device(device)
        gen = torch.Generator(device=device).manual_seed(seed)

        def normal(*shape, std=0.02, mean=0.0):
            return torch.randn(shape, generator=gen, device=device, dtype=dtype).mul_(std).add_(mean)

        s, h = spec, spec.hidden_size
        out_std = 0.02 / math.sqrt(2 * s.num_layers)
        layers = [LayerWeights(input_norm=normal(h, std=0.1, mean=1.0),
                               qkv=normal((s.num_heads + 2 * s.num_kv_heads) * s.head_dim, h),
                               o_proj=normal(h, s.num_heads * s.head_dim, std=out_std),
                               post_norm=normal(h, std=0.1, mean=1.0),
                               gate_up=normal(2 * s.intermediate_size, h),
                               down=normal(h, s.intermediate_size, std=out_std))
                  for _ in range(s.num_layers)]
        embed = normal(s.vocab_size, h)
        lm_head = embed if s.tie_embeddings else normal(s.vocab_size, h)
        return cls(spec, embed, layers, normal(h, std=0.1, mean=1.0), lm_head)

    @classmethod
    def from_hf_state_dict(cls, spec: ModelSpec, tensors: dict[str, torch.Tensor],
                           device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16) -> LlamaModel:
        """Weights under HF Llama names (model.layers.{i}.self_attn.q_proj.weight, ...)."""
        device = torch.device(device)

        def get(name, *shape):
            if name not in tensors:
                raise KeyError(f"checkpoint has no tensor {name!r} (model {spec.name})")
            t = tensors[name]
            if tuple(t.shape) != shape:
                raise ValueError(f"checkpoint tensor {name!r} has shape {tuple(t.shape)}; expected {shape}")
            return t.to(device=device, dtype=dtype)

        s, h, d = spec, spec.hidden_size, spec.head_dim
        layers = []
        for i in range(s.num_layers):
            p = f"model.layers.{i}."
            qkv = [get(p + "self_attn.q_proj.weight", s.num_heads * d, h),
                   get(p + "self_attn.k_proj.weight", s.num_kv_heads * d, h),
                   get(p + "self_attn.v_proj.weight", s.num_kv_heads * d, h)]
            gate_up = [get(p + f"mlp.{n}_proj.weight", s.intermediate_size, h) for n in ("gate", "up")]
            layers.append(LayerWeights(input_norm=get(p + "input_layernorm.weight", h), qkv=torch.cat(qkv),
                                       o_proj=get(p + "self_attn.o_proj.weight", h, s.num_heads * d),
                                       post_norm=get(p + "post_attention_layernorm.weight", h),
                                       gate_up=torch.cat(gate_up),
                                       down=get(p + "mlp.down_proj.weight", h, s.intermediate_size)))
        embed = get("model.embed_tokens.weight", s.vocab_size, h)
        tied = s.tie_embeddings or "lm_head.weight" not in tensors
        lm_head = embed if tied else get("lm_head.weight", s.vocab_size, h)
        return cls(spec, embed, layers, get("model.norm.weight", h), lm_head)

    @classmethod
    def from_safetensors(cls, spec: ModelSpec, path, device="cpu", dtype=torch.bfloat16) -> LlamaModel:
        from engine.weights import load_safetensors

        return cls.from_hf_state_dict(spec, load_safetensors(path), device, dtype)

    def allocate_kv_cache(self, num_blocks: int, block_size: int, kv_cache_dtype: str = "auto") -> torch.Tensor:
        return torch.empty(kv_cache_shape(self.spec, num_blocks, block_size),
                           dtype=kv_cache_torch_dtype(kv_cache_dtype, self.dtype), device=self.device)

    def _split_qkv(self, qkv: torch.Tensor):
        s, t = self.spec, qkv.shape[0]
        nq, nk = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        return (qkv[:, :nq].view(t, s.num_heads, s.head_dim), qkv[:, nq:nq + nk].view(t, s.num_kv_heads, s.head_dim),
                qkv[:, nq + nk:].view(t, s.num_kv_heads, s.head_dim))

    def attention(self, i: int, q: torch.Tensor, kv_cache: torch.Tensor, attn: AttentionMetadata,
                  out: torch.Tensor | None = None) -> torch.Tensor:
        """Layer i's attention of q [T, Hq, D] (rows beyond the step's tokens, if any, are left as they are)."""
        out = torch.empty_like(q) if out is None else out
        for launch in self.attention_launches(q, kv_cache, attn, out, i):
            launch.run()
        return out

    def attention_launches(self, q: torch.Tensor, kv_cache: torch.Tensor, attn: AttentionMetadata,
                           out: torch.Tensor, i: int = 0) -> list:
        """The kernel launches of layer i's attention of q into out (engine.kernels.launch), not yet issued: a step
        builds them once and issues them for layer j with `launch(*model.layer_cache(kv_cache, j))`."""
        p, d = attn.num_prefill_tokens, attn.num_decode_tokens
        k_cache, v_cache, k_scale, v_scale = self.layer_cache(kv_cache, i)
        scales = {"k_scale": k_scale, "v_scale": v_scale}
        launches = []
        if p:
            launches += prefill_launches(q[:p], k_cache, v_cache, attn.cu_seqlens_q, attn.context_lens_prefill,
                                         attn.block_tables_prefill, self.scale, out[:p],
                                         max_seqlen_q=attn.max_seqlen_q, **scales)
        if d:
            launches += decode_launches(q[p : p + d], k_cache, v_cache, attn.block_tables_decode,
                                        attn.context_lens_decode, self.scale, out[p : p + d], **scales)
        return launches

    def layer_cache(self, kv_cache: torch.Tensor, i: int) -> tuple:
        """Layer i's (k_cache, v_cache, k_scale, v_scale), in engine.kernels.launch.LAYER_ARGS order: views made once
        per cache and scale tensors."""
        views = self._layer_views
        if views is None or views[0] is not kv_cache or views[1] is not self.k_scales or views[2] is not self.v_scales:
            views = self._layer_views = (kv_cache, self.k_scales, self.v_scales, [
                (kv_cache[j, 0], kv_cache[j, 1], self.k_scales[j : j + 1], self.v_scales[j : j + 1])
                for j in range(len(self.layers))])
        return views[3][i]

    # The forward pass in the pieces between attentions (the executor captures each piece as a CUDA graph):
    # embed, then per layer layer_input -> attention -> layer_output, then final_norm.
    def layer_input(self, i: int, hidden: torch.Tensor, residual: torch.Tensor | None, positions: torch.Tensor,
                    kv_cache: torch.Tensor, slot_mapping: torch.Tensor):
        """Layer i before attention: norm, QKV, RoPE, K/V stored by slot_mapping -> (q [T, Hq, D], residual)."""
        w = self.layers[i]
        x, residual = rms_norm(hidden, w.input_norm, self.spec.rms_norm_eps, residual)
        q, k, v = self._split_qkv(F.linear(x, w.qkv))
        rotary_embedding(q, k, positions, self.cos_sin)
        store_kvcache(k, v, kv_cache[i, 0], kv_cache[i, 1], slot_mapping, k_scale=self.k_scales[i : i + 1],
                      v_scale=self.v_scales[i : i + 1])
        return q, residual

    def layer_output(self, i: int, o: torch.Tensor, residual: torch.Tensor):
        """Layer i after attention: o_proj, norm, MLP -> (hidden, residual)."""
        w = self.layers[i]
        x, residual = rms_norm(F.linear(o.reshape(o.shape[0], -1), w.o_proj), w.post_norm, self.spec.rms_norm_eps,
                               residual)
        return F.linear(silu_and_mul(F.linear(x, w.gate_up)), w.down), residual

    def final_norm(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden, self.norm, self.spec.rms_norm_eps, residual)[0]

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: torch.Tensor,
                attn: AttentionMetadata) -> torch.Tensor:
        assert input_ids.shape[0] == attn.num_prefill_tokens + attn.num_decode_tokens
        hidden, residual = self.embed[input_ids], None
        for i in range(len(self.layers)):
            q, residual = self.layer_input(i, hidden, residual, positions, kv_cache, attn.slot_mapping)
            hidden, residual = self.layer_output(i, self.attention(i, q, kv_cache, attn), residual)
        return self.final_norm(hidden, residual)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.lm_head).float()


@torch.inference_mode()
def reference_forward(model: LlamaModel, input_ids: torch.Tensor) -> torch.Tensor:
    """Plain full-sequence causal forward of one sequence (torch references + SDPA, no cache) -> [T, H]."""
    s, eps, t = model.spec, model.spec.rms_norm_eps, input_ids.shape[0]
    positions = torch.arange(t, device=model.device)
    hidden, residual = model.embed[input_ids], None
    for w in model.layers:
        x, residual = ref.rms_norm(hidden, w.input_norm, eps, residual)
        q, k, v = (z.clone() for z in model._split_qkv(F.linear(x, w.qkv)))
        ref.rotary_embedding(q, k, positions, model.cos_sin)
        o = F.scaled_dot_product_attention(q.transpose(0, 1).float(), k.transpose(0, 1).float(),
                                           v.transpose(0, 1).float(), is_causal=True, scale=model.scale,
                                           enable_gqa=True)
        o = o.transpose(0, 1).to(model.dtype).reshape(t, -1)
        x, residual = ref.rms_norm(F.linear(o, w.o_proj), w.post_norm, eps, residual)
        hidden = F.linear(ref.silu_and_mul(F.linear(x, w.gate_up)), w.down)
    return ref.rms_norm(hidden, model.norm, eps, residual)[0]
