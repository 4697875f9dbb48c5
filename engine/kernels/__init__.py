"""Triton kernels of the engine: the paged KV cache and the attention over it.

Cache layout (a fixed contract; the executor relies on it)
-----------------------------------------------------------
One tensor per engine::

    kv_cache: [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]   (dim 1: 0 = K, 1 = V)

Per layer the kernels take ``k_cache = kv_cache[l, 0]`` and ``v_cache = kv_cache[l, 1]``, each
``[num_blocks, block_size, num_kv_heads, head_dim]`` and contiguous. A token's slot is
``block_id * block_size + offset``, so the K of slot s, KV head h is the ``head_dim`` contiguous
elements at ``k_cache.view(-1, num_kv_heads, head_dim)[s, h]``; so is V, except in an fp8 cache, whose
V bytes of a block are [num_kv_heads, head_dim, block_size], each 16 tokens' columns permuted where a block holds
16 or more (``cache.v_token_major`` reads either order, ``cache.v_write`` writes it).
Block sizes 8..128 (powers of two), dtypes bf16 / fp16 (fp32 for tests). The swap and host-tier caches are
block-major, one block (every layer, K and V) one contiguous host run (``swap.cpu_cache_shape``).

GQA convention (as HF Llama): query head i reads KV head ``i // (num_heads // num_kv_heads)``.

Without CUDA the kernels run under Triton's interpreter (slow, for tests and the CLI):
TRITON_INTERPRET must be set before triton is first imported, which this module does.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from engine.kernels.cache import copy_blocks, store_kvcache, v_token_major, v_write  # noqa: E402
from engine.kernels.decode import DecodeConfig, default_num_splits, paged_decode_attention  # noqa: E402
from engine.kernels.pointwise import rms_norm, rope_cache, rotary_embedding, silu_and_mul  # noqa: E402
from engine.kernels.prefill import PrefillConfig, paged_prefill_attention  # noqa: E402

__all__ = [
    "DecodeConfig",
    "PrefillConfig",
    "copy_blocks",
    "default_num_splits",
    "paged_decode_attention",
    "paged_prefill_attention",
    "rms_norm",
    "rope_cache",
    "rotary_embedding",
    "silu_and_mul",
    "store_kvcache",
    "v_token_major",
    "v_write",
]
