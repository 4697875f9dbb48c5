"""The kernel and model checks at real sizes on a GPU: Llama-3-8B attention heads (32 query heads,
8 KV heads, head dim 128), bf16, contexts up to 32k, shuffled physical blocks. Skipped without CUDA."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import engine.kernels as K
from engine.kernels import reference as R
from engine.kernels.swap import cpu_cache_shape, swap_in, swap_out
from engine.model import AttentionMetadata, LlamaModel
from pagesim.specs import get_model
from tests.test_kernels import assert_close, block_tables_for, random_cache
from tests.test_model import paged_vs_full_errors

pytestmark = pytest.mark.gpu
DEV = "cuda"
HQ, HKV, D = 32, 8, 128
BF16 = torch.bfloat16


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device=DEV).manual_seed(seed)


@pytest.mark.parametrize("block_size", [8, 16, 128])
@pytest.mark.parametrize("num_splits", [None, 1, 7])
def test_decode_llama_heads_long_contexts(block_size, num_splits):
    ctx = [32768, 4097, 1, 0, block_size, 1000, 2 * block_size + 1]
    g = gen(block_size)
    num_blocks = sum(-(-n // block_size) for n in ctx) + 8
    k_cache, v_cache = random_cache(num_blocks, block_size, HKV, D, BF16, DEV, g)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, torch.Generator().manual_seed(block_size))
    context_lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn(len(ctx), HQ, D, generator=g, device=DEV).to(BF16)
    out = torch.full_like(q, float("nan"))
    K.paged_decode_attention(q, k_cache, v_cache, tables, context_lens, D**-0.5, num_splits=num_splits, out=out)
    ref = R.paged_decode_attention(q, k_cache, v_cache, tables, context_lens, D**-0.5)
    assert_close(out, ref, BF16, f"decode bs={block_size} splits={num_splits}")
    assert (out[3] == 0).all(), "an empty context must give zeros"


@pytest.mark.parametrize("config", [None, K.PrefillConfig(pack_gqa=True)], ids=["default", "packed"])
@pytest.mark.parametrize("block_size", [16, 64])
def test_prefill_llama_heads_with_cached_prefix(block_size, config):
    seqs = [(4096, 4096), (300, 5000), (1, 33), (129, 129)]  # (q_len, context_len)
    g = gen(block_size + 1)
    ctx = [c for _, c in seqs]
    num_blocks = sum(-(-n // block_size) for n in ctx) + 4
    k_cache, v_cache = random_cache(num_blocks, block_size, HKV, D, BF16, DEV, g)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, torch.Generator().manual_seed(block_size))
    cu = torch.tensor([0] + torch.tensor([q for q, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    context_lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn(int(cu[-1]), HQ, D, generator=g, device=DEV).to(BF16)
    out = torch.full_like(q, float("nan"))
    K.paged_prefill_attention(q, k_cache, v_cache, cu, context_lens, tables, D**-0.5, out=out, config=config)
    ref = R.paged_prefill_attention(q, k_cache, v_cache, cu, context_lens, tables, D**-0.5)
    assert_close(out, ref, BF16, f"prefill bs={block_size} {config}")


def test_store_copy_and_swap_at_real_size():
    g = gen(9)
    kv = torch.randn(4, 2, 256, 16, HKV, D, generator=g, device=DEV).to(BF16)
    n = 3000
    slots = torch.randperm(256 * 16, device=DEV)[:n]
    slots[::97] = -1
    kv_in = torch.randn(n, 3, HKV, D, generator=g, device=DEV).to(BF16)
    expected = kv[1].clone()
    R.store_kvcache(kv_in[:, 0], kv_in[:, 2], expected[0], expected[1], slots)
    K.store_kvcache(kv_in[:, 0], kv_in[:, 2], kv[1, 0], kv[1, 1], slots)
    assert torch.equal(kv[1], expected), "store_kvcache wrote the wrong slots"

    pairs = torch.tensor([[3, 200], [17, 5], [3, 100]])
    expected = kv.clone()
    R.copy_blocks(expected, pairs)
    K.copy_blocks(kv, pairs)
    assert torch.equal(kv, expected), "copy_blocks"

    host = torch.empty(cpu_cache_shape(tuple(kv.shape), 32), dtype=BF16, pin_memory=True)
    original = kv[:, :, [7, 99, 250]].clone()
    swap_out(kv, host, torch.tensor([[7, 31], [99, 0], [250, 12]]))
    kv[:, :, [7, 99, 250]] = torch.randn(original.shape, device=DEV).to(BF16)
    swap_in(host, kv, torch.tensor([[31, 1], [0, 2], [12, 3]]))
    torch.cuda.synchronize()
    assert torch.equal(kv[:, :, [1, 2, 3]].view(torch.int16), original.view(torch.int16)), "swap is not bit-exact"


def test_pointwise_kernels_at_llama_sizes():
    g = gen(10)
    x, r = (torch.randn(77, 4096, generator=g, device=DEV).to(BF16) for _ in range(2))
    w = (1 + 0.1 * torch.randn(4096, generator=g, device=DEV)).to(BF16)
    out, res = K.rms_norm(x, w, 1e-5, r)
    ref_out, ref_res = R.rms_norm(x, w, 1e-5, r)
    assert_close(out, ref_out, BF16, "rms_norm", atol=0.07)
    assert torch.equal(res, ref_res), "the new residual must be x + residual in bf16"
    qkv = torch.randn(77, 48 * D, generator=g, device=DEV).to(BF16)
    q, k = qkv[:, :HQ * D].view(77, HQ, D), qkv[:, HQ * D:40 * D].view(77, HKV, D)
    q_ref, k_ref = q.clone(), k.clone()
    pos = torch.randint(0, 8192, (77,), device=DEV)
    cos_sin = K.rope_cache(D, 8192, 500000.0, torch.device(DEV))
    K.rotary_embedding(q, k, pos, cos_sin)
    R.rotary_embedding(q_ref, k_ref, pos, cos_sin)
    assert_close(q, q_ref, BF16, "rope q", atol=0.07)
    assert_close(k, k_ref, BF16, "rope k", atol=0.07)
    gu = torch.randn(77, 2 * 14336, generator=g, device=DEV).to(BF16)
    assert_close(K.silu_and_mul(gu), R.silu_and_mul(gu), BF16, "silu_and_mul", atol=0.07)


def small_llama(num_layers: int = 2) -> LlamaModel:
    spec = dataclasses.replace(get_model("llama-3-8b"), num_layers=num_layers, vocab_size=4096)
    return LlamaModel.random(spec, device=DEV, dtype=BF16, seed=11)


def test_model_paged_steps_match_full_forward_llama_shapes_bf16():
    for name, err in paged_vs_full_errors(small_llama()).items():
        assert err < 0.15, f"sequence {name}: paged bf16 forward differs from the full forward by {err:.3g}"


def test_decode_step_replays_from_a_cuda_graph():
    model = small_llama()
    batch, width, bs = 8, 64, 16  # 1024-token tables: 4 splits
    kv = torch.randn(model.allocate_kv_cache(batch * width, bs).shape, device=DEV).to(BF16)
    ids = torch.zeros(batch, dtype=torch.int64, device=DEV)
    pos = torch.zeros(batch, dtype=torch.int64, device=DEV)
    attn = AttentionMetadata(slot_mapping=torch.full((batch,), -1, dtype=torch.int64, device=DEV),
                             num_prefill_tokens=0, num_decode_tokens=batch,
                             context_lens_decode=torch.zeros(batch, dtype=torch.int32, device=DEV),
                             block_tables_decode=torch.arange(batch * width, dtype=torch.int32,
                                                              device=DEV).view(batch, width))
    model.forward(ids, pos, kv, attn)  # warm up (compiles)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        hidden = model.forward(ids, pos, kv, attn)
    lens = torch.tensor([1, 17, 1000, 0, 100, 64, 3, 555], dtype=torch.int32, device=DEV)
    ids.copy_(torch.randint(0, 4096, (batch,), device=DEV))
    pos.copy_((lens - 1).clamp_min(0))
    attn.context_lens_decode.copy_(lens)
    slots = attn.block_tables_decode[torch.arange(batch, device=DEV), pos // bs].long() * bs + pos % bs
    attn.slot_mapping.copy_(torch.where(lens > 0, slots, -1))
    graph.replay()
    eager = model.forward(ids, pos, kv, attn)
    assert torch.equal(hidden, eager), "graph replay differs from the eager decode step"
