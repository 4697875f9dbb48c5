"""Kernels against their torch references (interpreter on CPU; tiny shapes).

The data helpers here (random caches, shuffled block tables, tolerances) are shared with
tests/gpu/test_kernels_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

import engine.kernels as K
from engine.kernels import reference as R

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # on a GPU machine the same tests run compiled
UNUSED_BLOCK = 1 << 30  # table entries past a sequence's end: reading one would fault or corrupt

# Tolerances (max |out - ref| with ref in fp32; values are O(1)). fp32 runs exact dots under the
# interpreter but tf32 (Triton's default for fp32 tl.dot) on a GPU; bf16/fp16 are one rounding of
# the output plus operand rounding.
ATOL = {torch.float32: 1e-2 if DEV == "cuda" else 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def random_cache(num_blocks, block_size, num_kv_heads, head_dim, dtype, device, gen):
    def rand():
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        return torch.randn(shape, generator=gen, device=gen.device).to(device, dtype)

    return rand(), rand()


def block_tables_for(context_lens: list[int], block_size: int, num_blocks: int, device, gen, extra: int = 1):
    """Distinct random physical blocks for each sequence; width = most blocks needed + extra."""
    need = [-(-n // block_size) for n in context_lens]
    assert sum(need) <= num_blocks, "cache too small for the test's contexts"
    perm = torch.randperm(num_blocks, generator=gen, device="cpu")
    table = torch.full((len(context_lens), max(need, default=0) + extra), UNUSED_BLOCK, dtype=torch.int32)
    used = 0
    for b, k in enumerate(need):
        table[b, :k] = perm[used:used + k]
        used += k
    return table.to(device)


def assert_close(out, ref, dtype, what: str, atol: float | None = None):
    assert not torch.isnan(out).any(), f"{what}: output has NaN (unwritten or 0/0)"
    err = (out.float() - ref.float()).abs().max().item() if out.numel() else 0.0
    tol = atol if atol is not None else ATOL[dtype]
    rel = ((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12)).item() if out.numel() else 0.0
    assert err <= tol, f"{what}: max abs error {err:.3g} > {tol:g} (relative L2 error {rel:.3g})"


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_kvcache_writes_exactly_the_mapped_slots_and_skips_padding(block_size, dtype):
    g = gen(block_size)
    k_cache, v_cache = random_cache(6, block_size, 2, 16, dtype, DEV, g)
    n = 13
    slots = torch.randperm(6 * block_size, generator=g)[:n]
    slots[[2, 7]] = -1  # padding tokens
    slots = slots.to(DEV)
    qkv = torch.randn(n, 5, 2, 16, generator=g).to(DEV, dtype)  # key/value: strided views of a fused output
    key, value = qkv[:, 1], qkv[:, 3]
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    R.store_kvcache(key, value, k_ref, v_ref, slots)
    K.store_kvcache(key, value, k_cache, v_cache, slots.to(torch.int32))
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref), "cache differs from the slot-mapped copy"


DECODE_CASES = [  # (dtype, block_size, num_heads, num_kv_heads, head_dim, context_lens, num_splits)
    (torch.float32, 8, 2, 2, 16, [0, 1, 8, 9, 37], None),
    (torch.float32, 16, 8, 2, 16, [1, 15, 16, 17, 100], 3),
    (torch.bfloat16, 16, 16, 2, 32, [0, 31, 33, 64], 4),
    (torch.float16, 32, 8, 2, 16, [5, 96, 97], 2),
    (torch.float32, 64, 8, 1, 16, [129, 1, 0], 1),
    (torch.bfloat16, 128, 4, 1, 16, [200, 3], 5),
]


@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: f"{str(c[0])[6:]}-bs{c[1]}-g{c[2] // c[3]}-s{c[6]}")
def test_paged_decode_matches_reference(case):
    dtype, block_size, hq, hkv, d, ctx, splits = case
    g = gen(sum(ctx) + block_size)
    num_blocks = sum(-(-n // block_size) for n in ctx) + 3
    k_cache, v_cache = random_cache(num_blocks, block_size, hkv, d, dtype, DEV, g)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, g)
    context_lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn(len(ctx), hq, d, generator=g).to(DEV, dtype)
    out = torch.full_like(q, float("nan"))
    K.paged_decode_attention(q, k_cache, v_cache, tables, context_lens, d**-0.5, num_splits=splits, out=out)
    ref = R.paged_decode_attention(q, k_cache, v_cache, tables, context_lens, d**-0.5)
    assert_close(out, ref, dtype, f"decode {case}")
    assert (out[context_lens == 0] == 0).all(), "an empty context must give zeros"


def test_paged_decode_reads_strided_queries_and_allocates_output():
    g = gen(7)
    k_cache, v_cache = random_cache(8, 8, 2, 16, torch.float32, DEV, g)
    tables = block_tables_for([20, 11], 8, 8, DEV, g)
    qkv = torch.randn(2, 12, 16, generator=g).to(DEV)
    q = qkv[:, :8]  # strided over the batch, like a view into a fused QKV output
    lens = torch.tensor([20, 11], dtype=torch.int32, device=DEV)
    out = K.paged_decode_attention(q, k_cache, v_cache, tables, lens, 0.3)
    assert_close(out, R.paged_decode_attention(q, k_cache, v_cache, tables, lens, 0.3),
                 torch.float32, "decode with strided q")


PREFILL_CASES = [  # (dtype, block_size, hq, hkv, d, [(q_len, context_len)], config)
    (torch.float32, 8, 2, 2, 16, [(5, 5), (1, 1), (7, 20)], (16, 16)),
    (torch.float32, 16, 8, 2, 16, [(17, 17), (3, 40), (16, 16)], (16, 16)),
    (torch.bfloat16, 16, 16, 2, 32, [(33, 47), (1, 64)], (16, 32)),
    (torch.float16, 32, 4, 1, 16, [(40, 40), (9, 73)], (32, 16)),
]


# Launch variants with their own code paths: GQA heads packed into a tile's rows, the (sequence, tile, head)
# program order, int64 K/V offsets (the int32 ones are the default), the persistent grid (3 programs: each walks
# several tiles, among them the empty tiles of the shorter sequences; with the next tile's Q prefetched, packed, in
# the other order).
PREFILL_VARIANTS = {"default": {}, "packed": {"pack_gqa": True}, "grid_order": {"longest_first": False},
                    "packed_i64": {"pack_gqa": True, "int32_offsets": False}, "persistent": {"persistent": 3},
                    "persistent_prefetch": {"persistent": 3, "prefetch_q": True},
                    "persistent_packed_grid_order": {"persistent": 3, "prefetch_q": True, "pack_gqa": True,
                                                     "longest_first": False}}


@pytest.mark.parametrize("variant", PREFILL_VARIANTS)
@pytest.mark.parametrize("case", PREFILL_CASES, ids=lambda c: f"{str(c[0])[6:]}-bs{c[1]}-g{c[2] // c[3]}")
def test_paged_prefill_matches_causal_reference_with_cached_context(case, variant):
    dtype, block_size, hq, hkv, d, seqs, (bm, bn) = case
    g = gen(block_size * 31 + len(seqs))
    ctx = [c for _, c in seqs]
    num_blocks = sum(-(-n // block_size) for n in ctx) + 2
    k_cache, v_cache = random_cache(num_blocks, block_size, hkv, d, dtype, DEV, g)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, g)
    cu = torch.tensor([0] + torch.tensor([q for q, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    context_lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn(int(cu[-1]), hq, d, generator=g).to(DEV, dtype)
    out = torch.full_like(q, float("nan"))
    K.paged_prefill_attention(q, k_cache, v_cache, cu, context_lens, tables, d**-0.5,
                              out=out, config=K.PrefillConfig(block_m=bm, block_n=bn, **PREFILL_VARIANTS[variant]))
    ref = R.paged_prefill_attention(q, k_cache, v_cache, cu, context_lens, tables, d**-0.5)
    assert_close(out, ref, dtype, f"prefill {case} {variant}")


def test_copy_blocks_copies_every_layer_k_and_v_exactly():
    g = gen(3)
    kv = torch.randn(3, 2, 10, 8, 2, 16, generator=g).to(DEV, torch.bfloat16)
    pairs = torch.tensor([[1, 7], [4, 2], [1, 9]])
    expected = kv.clone()
    R.copy_blocks(expected, pairs)
    K.copy_blocks(kv, pairs)
    assert torch.equal(kv, expected), "copy_blocks changed something other than the destination blocks"


@pytest.mark.parametrize("by_copies", [False, True], ids=["kernel", "copies"])
def test_swapped_out_blocks_come_back_bit_exact(by_copies, monkeypatch):
    """Swap-in both ways (the kernel reading the host cache; the copy engine into a staging buffer, here two blocks
    at a time so four blocks take two rounds, one with a run of consecutive host blocks)."""
    import engine.kernels.swap as swap
    from engine.kernels.swap import cpu_cache_shape, swap_in, swap_out

    monkeypatch.setattr(swap, "STAGING_BLOCKS", 2)
    g = gen(4)
    dev_cache = torch.randn(2, 2, 12, 16, 2, 16, generator=g).to(DEV, torch.bfloat16)
    host_cache = torch.randn(cpu_cache_shape(tuple(dev_cache.shape), 6), generator=g).to(torch.bfloat16)
    if DEV == "cuda":
        host_cache = host_cache.pin_memory()
    original = dev_cache.clone()
    swap_out(dev_cache, host_cache, torch.tensor([[3, 5], [8, 0], [11, 1], [9, 2]]))
    if DEV == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(host_cache[[5, 0, 1, 2]], original[:, :, [3, 8, 11, 9]].movedim(2, 0).cpu())
    dev_cache[:, :, [3, 8, 11, 9]] = torch.randn(2, 2, 4, 16, 2, 16, generator=g).to(DEV, torch.bfloat16)
    swap_in(host_cache, dev_cache, torch.tensor([[5, 1], [0, 4], [1, 6], [2, 7]]), by_copies)  # back, elsewhere
    if DEV == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(dev_cache[:, :, [1, 4, 6, 7]].view(torch.int16),
                       original[:, :, [3, 8, 11, 9]].view(torch.int16))
    untouched = [b for b in range(12) if b not in (1, 4, 6, 7, 3, 8, 11, 9)]
    assert torch.equal(dev_cache[:, :, untouched], original[:, :, untouched]), "swap-in wrote other blocks"


def test_runs_of_consecutive_ids():
    from engine.kernels.swap import runs_of

    assert runs_of([5, 0, 1, 2, 9, 8]) == [(0, 5, 1), (1, 0, 3), (4, 9, 1), (5, 8, 1)]
    assert runs_of([]) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rms_norm_with_and_without_residual(dtype):
    g = gen(5)
    x, r = torch.randn(5, 48, generator=g).to(DEV, dtype), torch.randn(5, 48, generator=g).to(DEV, dtype)
    w = (1 + 0.1 * torch.randn(48, generator=g)).to(DEV, dtype)
    for residual in (None, r):
        out, res = K.rms_norm(x, w, 1e-5, residual)
        ref_out, ref_res = R.rms_norm(x, w, 1e-5, residual)
        assert_close(out, ref_out, dtype, "rms_norm")
        assert torch.equal(res, ref_res), "the new residual must be x + residual in the model dtype"


def test_rotary_embedding_rotates_strided_q_and_k_in_place():
    g = gen(6)
    qkv = torch.randn(7, 8 * 16, generator=g).to(DEV)
    q, k = qkv[:, :64].view(7, 4, 16), qkv[:, 64:96].view(7, 2, 16)
    q_ref, k_ref = q.clone(), k.clone()
    untouched = qkv[:, 96:].clone()
    pos = torch.randint(0, 100, (7,), generator=g).to(DEV)
    cos_sin = K.rope_cache(16, 128, 10000.0, torch.device(DEV))
    K.rotary_embedding(q, k, pos, cos_sin)
    R.rotary_embedding(q_ref, k_ref, pos, cos_sin)
    assert_close(q, q_ref, torch.float32, "rope q")
    assert_close(k, k_ref, torch.float32, "rope k")
    assert torch.equal(qkv[:, 96:], untouched), "rope wrote outside q and k"


def test_silu_and_mul():
    x = torch.randn(6, 2 * 40, generator=gen(8)).to(DEV)
    assert_close(K.silu_and_mul(x), R.silu_and_mul(x), torch.float32, "silu_and_mul")


def test_default_num_splits_fills_the_gpu_for_one_long_sequence(monkeypatch):
    monkeypatch.setattr(K.decode, "_num_sms", lambda _index: 132)
    cuda = torch.device("cuda", 0)
    assert 1 * 8 * K.default_num_splits(1, 8, 32768, cuda) >= 132, "one long sequence must fill the SMs"
    assert K.default_num_splits(256, 8, 1024, cuda) == 1, "a large batch needs no split"
    assert K.default_num_splits(1, 8, 16, cuda) == 1, "a short table cannot be split below 256 tokens a split"


def test_fp8_decode_launch_splits_by_shape(monkeypatch):
    """An fp8 cache's launch depends on shapes only: the shared split count up to a few splits, 4x it (at least
    256 tokens a split) for a few long sequences, none for a full batch (pagesim.cost.decode_split)."""
    monkeypatch.setattr(K.decode, "_num_sms", lambda _index: 132)
    cuda = torch.device("cuda", 0)
    launch = K.decode.fp8_decode_launch
    assert launch(256, 8, 1024, cuda)[1] == 1 and launch(64, 8, 4096, cuda)[1] == 1
    shared = K.default_num_splits(16, 8, 4096, cuda)
    assert 1 < shared <= 8 and launch(16, 8, 4096, cuda)[1] == shared
    one = K.default_num_splits(1, 8, 32768, cuda)
    assert one > 8 and launch(1, 8, 32768, cuda)[1] == min(4 * one, 32768 // 256)
    assert launch(1, 8, 8192, cuda)[1] == 8192 // 256  # capped by the table: 256 tokens a split at least


def test_attention_launches_reissued_for_each_layer_match_that_layers_reference():
    """A step's attention launches are built once (layer 0) and re-issued per layer with the layer's cache and
    scales (engine.kernels.launch, as the graphed mixed step does): each layer's output is its own reference's,
    and the same as a fresh per-layer launch, for prefill chunks (one with a cached prefix) and split decodes."""
    import dataclasses

    from engine.model import AttentionMetadata, LlamaModel, kv_cache_shape
    from pagesim.specs import get_model

    dtype, bs = torch.float32, 8
    spec = dataclasses.replace(get_model("toy"), num_layers=5)  # scale views k_scales[j:j+1] of both alignments
    model = LlamaModel.random(spec, DEV, dtype)
    hq, hkv, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    g = gen(11)
    prefills, decodes = [(7, 20), (1, 1)], [5, 33, 17]  # (new tokens, context after them); decode contexts
    ctx = [c for _, c in prefills] + decodes
    num_blocks = sum(-(-n // bs) for n in ctx) + 2
    kv = torch.randn(kv_cache_shape(spec, num_blocks, bs), generator=g).to(DEV, dtype)
    tables = block_tables_for(ctx, bs, num_blocks, DEV, g)
    p = sum(n for n, _ in prefills)
    cu = torch.tensor([0, 7, 8], dtype=torch.int32, device=DEV)
    attn = AttentionMetadata(slot_mapping=torch.zeros(0, dtype=torch.int64, device=DEV), num_prefill_tokens=p,
                             num_decode_tokens=len(decodes), cu_seqlens_q=cu,
                             context_lens_prefill=torch.tensor([20, 1], dtype=torch.int32, device=DEV),
                             block_tables_prefill=tables[:2], max_seqlen_q=7,
                             context_lens_decode=torch.tensor(decodes, dtype=torch.int32, device=DEV),
                             block_tables_decode=tables[2:])
    q = torch.randn(p + len(decodes), hq, d, generator=g).to(DEV, dtype)
    out = torch.empty_like(q)
    launches = model.attention_launches(q, kv, attn, out)
    assert len(launches) >= 2, "the prefill launch and the decode (and its merge when split)"
    for i in range(spec.num_layers):
        out.fill_(float("nan"))
        for launch in launches:
            launch(*model.layer_cache(kv, i))
        ref_p = R.paged_prefill_attention(q[:p], kv[i, 0], kv[i, 1], cu, attn.context_lens_prefill,
                                          attn.block_tables_prefill, d**-0.5)
        ref_d = R.paged_decode_attention(q[p:], kv[i, 0], kv[i, 1], attn.block_tables_decode,
                                         attn.context_lens_decode, d**-0.5)
        assert_close(out[:p], ref_p, dtype, f"layer {i} prefill")
        assert_close(out[p:], ref_d, dtype, f"layer {i} decode")
        assert torch.equal(out, model.attention(i, q, kv, attn)), f"layer {i}: re-issued launch != fresh launch"


def test_launch_keys_at_least_as_fine_as_tritons_specialisation():
    """What a re-issued launch is keyed on: every distinction Triton compiles a variant for (integer 1, divisible
    by 16, beyond 32 bits; tensor dtype and 16-byte alignment) changes the key; the argument names are checked."""
    from engine.kernels.decode import _merge_splits_kernel
    from engine.kernels.launch import Launch, _spec

    assert len({_spec(v, False) for v in (1, 2, 16, 32, 2**31)}) == 4  # 16 and 32: the same class
    x = torch.zeros(8, dtype=torch.float32)
    assert _spec(x, False) != _spec(x[1:], False) and _spec(x, False) == _spec(x[4:], False)
    assert _spec(x, False) != _spec(x.to(torch.float16), False) and _spec(True, False) != _spec(1, False)
    assert _spec(128, True) != _spec(64, True)  # constexprs by value
    with pytest.raises(TypeError, match="num_splits"):
        Launch(_merge_splits_kernel, (1,), dict(o_part=x, lse=x, out=x, stride_ob=1, stride_oh=1,
                                                SPLITS_PAD=2, HEAD_DIM=16), {})


def test_launch_adapt_maps_what_the_caller_swaps_in():
    """Launch.adapt: a step's launch is re-issued per layer with the layer's (k_cache, v_cache, k_scale, v_scale);
    a kernel that takes other arguments for them (the Gluon prefill: TMA descriptors) maps them first."""
    import triton
    import triton.language as tl

    from engine.kernels.launch import Launch

    @triton.jit
    def _copy(src, dst, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(dst + i, tl.load(src + i))

    a, b, out = torch.arange(4.0), torch.arange(4.0) + 10, torch.zeros(4)
    launch = Launch(_copy, (1,), dict(src=a, dst=out, N=4), {}, swap=("src",), adapt=lambda x, *_: (x * 2,))
    launch.run()
    assert torch.equal(out, a)  # run() issues the launch as built
    launch(b, "v_cache", "k_scale", "v_scale")
    assert torch.equal(out, b * 2)  # the swapped value went through adapt; extra values are dropped by it


def test_gluon_prefill_descriptors_are_made_once_per_cache_and_keyed_like_triton():
    """The Gluon prefill's per-layer descriptors (built on the CPU; the kernel itself needs an sm_90 GPU): one per
    cache tensor and gone with it, [block_size, 64] boxes over [blocks * block_size, Hkv * 128], and a launch key that
    tells boxes, dtypes and alignment apart but not addresses; supported() says why a call falls back to the Triton
    kernel."""
    from engine.kernels import prefill_gluon as G
    from engine.kernels.launch import _spec

    k16, v16 = (torch.zeros(4, 16, 2, 128, dtype=torch.bfloat16) for _ in range(2))
    dk, dv = G._layer_descriptors(k16, v16, None, None)
    assert dk is G.cache_descriptor(k16) and dv is not dk
    assert list(dk.block_shape) == [16, 64] and list(dk.shape) == [64, 256]
    assert _spec(dk, False) == _spec(dv, False)  # another address, the same compiled variant
    k32 = torch.zeros(2, 32, 2, 128, dtype=torch.bfloat16)
    assert _spec(G.cache_descriptor(k32), False) != _spec(dk, False)  # another box
    assert _spec(G.cache_descriptor(k16.half()), False) != _spec(dk, False)  # another dtype
    import gc
    import weakref

    gone = weakref.ref(k32)
    del k32
    gc.collect()
    assert gone() is None, "a cache's descriptor must not keep the cache (an engine's whole KV memory) alive"
    q = torch.zeros(8, 4, 128, dtype=torch.bfloat16)
    assert "sm_90" in G.supported(q, k16)  # a CPU tensor (the dispatch itself: tests/gpu/test_prefill_gluon_gpu.py)


def test_gluon_fp8_prefill_descriptors_read_k_by_token_and_v_transposed():
    """The e4m3 prefill's descriptors: K as the 16-bit kernel's with whole 128-byte head rows ([block_size, 128]
    boxes), V by its stored order (each block [Hkv, 128, block_size]: engine.kernels.cache) as [blocks * Hkv * 128,
    block_size] with a box of one block's V^T of one head; the box at a block and head holds exactly that V^T."""
    from engine.kernels import prefill_gluon as G
    from engine.kernels import prefill_gluon_fp8 as G8
    from engine.kernels import reference as R
    from engine.kernels.launch import _spec

    x = torch.randn(3, 16, 2, 128)
    k8 = R.fp8_cache_of(x, torch.ones(1), v=False)
    v8 = R.fp8_cache_of(x, torch.ones(1), v=True)
    dk, dv, ks, vs = G8._layer_args(k8, v8, "ks", "vs")
    assert (ks, vs) == ("ks", "vs") and dk is G.cache_descriptor(k8) and dv is G.cache_descriptor(v8, v_transposed=True)
    assert list(dk.block_shape) == [16, 128] and list(dk.shape) == [48, 256]
    assert list(dv.block_shape) == [128, 16] and list(dv.shape) == [3 * 2 * 128, 16]
    assert _spec(dv, False) != _spec(dk, False)
    blk, head = 2, 1  # the box the producer copies for this block and KV head: rows (blk * Hkv + head) * 128 ..
    box = dv.base[(blk * 2 + head) * 128:(blk * 2 + head + 1) * 128]
    assert torch.equal(box.float(), R.quantize_fp8(x[blk, :, head], torch.ones(1)).float().T)
    q = torch.zeros(8, 4, 128, dtype=torch.bfloat16)
    assert "sm_90" in G8.supported(q, k8)


def test_the_recorded_prefill_kernel_is_the_dispatchs_choice(monkeypatch):
    """default_prefill_kernel names the kernel prefill_launches picks for an engine's cache (runs and profiles record
    it): here the Triton kernel (the interpreter), and with the Gluon kernels' checks passing (an sm_90 GPU, made up
    here) the Gluon kernel of the cache's dtype."""
    import engine.kernels.prefill as P
    from engine.kernels import prefill_gluon, prefill_gluon_fp8

    bf16 = torch.zeros(2, 2, 4, 16, 2, 128, dtype=torch.bfloat16)
    fp8 = torch.zeros(2, 2, 4, 16, 2, 128, dtype=torch.float8_e4m3fn)
    assert P.default_prefill_kernel(bf16, 8, torch.bfloat16) == "_prefill_kernel"
    monkeypatch.setattr(P, "INTERPRET", False)
    monkeypatch.setattr(prefill_gluon, "supported", lambda q, k, cfg=None: None)
    monkeypatch.setattr(prefill_gluon_fp8, "supported", lambda q, k, cfg=None: None)
    assert P.default_prefill_kernel(bf16, 8, torch.bfloat16) == "_gluon_prefill_kernel"
    assert P.default_prefill_kernel(fp8, 8, torch.bfloat16) == "_gluon_fp8_prefill_kernel"
    monkeypatch.setattr(prefill_gluon_fp8, "supported", lambda q, k, cfg=None: "needs cache blocks of 16..128 tokens")
    assert P.default_prefill_kernel(fp8, 8, torch.bfloat16) == "_prefill_kernel"
