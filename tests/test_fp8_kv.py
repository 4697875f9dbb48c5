"""The fp8 KV cache (kv_cache_dtype="fp8"): quantising store, dequantising decode and prefill, raw block moves,
and the engine end to end against the same engine with a model-dtype cache.

Under the Triton interpreter the kernels load real float8_e4m3fn tensors and cast them as the compiled
kernels do (round to nearest even, saturated at +-448 by the store), so the kernel path is the one a
GPU runs; only the dots are fp32 instead of bf16 tensor-core dots.
"""

from __future__ import annotations

import pytest
import torch

import engine.kernels as K
from engine.executor import GPUExecutor, kv_block_bytes
from engine.kernels import reference as R
from engine.kernels.decode import FP8_DECODE_CONFIG
from engine.kernels.swap import cpu_cache_shape, swap_in, swap_out
from engine.model import AttentionMetadata, LlamaModel
from pagesim.config import Config
from pagesim.request import Request
from pagesim.specs import get_model
from tests.test_kernels import assert_close, block_tables_for, gen
from tests.test_executor import BS, run_to_completion, sensitive_model

DEV = "cuda" if torch.cuda.is_available() else "cpu"
FP8 = torch.float8_e4m3fn


def fp8_cache(num_blocks, block_size, hkv, d, g, scale: float):
    """An fp8 cache holding random values of magnitude ~scale (what the store kernel would write)."""
    x = torch.randn(num_blocks, block_size, hkv, d, generator=g) * scale
    return R.quantize_fp8(x, torch.tensor(scale)).to(DEV)


def scales(k: float, v: float):
    return torch.tensor([k], device=DEV), torch.tensor([v], device=DEV)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_store_quantises_with_the_layer_scales_saturates_and_skips_padding(dtype):
    g = gen(11)
    n, block_size = 9, 8
    k_cache = torch.zeros(4, block_size, 2, 16, dtype=FP8, device=DEV)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.randperm(4 * block_size, generator=g)[:n]
    slots[3] = -1
    qkv = (torch.randn(n, 5, 2, 16, generator=g) * 3).to(DEV, dtype)
    qkv[0, 1, 0, 0] = 1e4  # beyond 448 * k_scale: saturates, never inf/NaN
    key, value = qkv[:, 1], qkv[:, 3]
    k_scale, v_scale = scales(0.05, 2.0)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    R.store_kvcache(key, value, k_ref, v_ref, slots.to(DEV), k_scale, v_scale)
    K.store_kvcache(key, value, k_cache, v_cache, slots.to(DEV, torch.int32), k_scale, v_scale)
    assert torch.equal(k_cache.view(torch.uint8), k_ref.view(torch.uint8)), "fp8 K bits differ from x / k_scale rounded"
    assert torch.equal(v_cache.view(torch.uint8), v_ref.view(torch.uint8)), "fp8 V bits differ from x / v_scale rounded"
    assert k_cache.float().abs().max() == 448.0, "a key beyond the fp8 range must saturate to 448"
    written = torch.zeros(4 * block_size, dtype=torch.bool)
    written[slots[slots >= 0]] = True
    assert (k_cache.view(-1, 2, 16)[~written.to(DEV)].float() == 0).all(), "a slot outside the mapping was written"
    # what was stored is the input to within e4m3's precision (3 mantissa bits: half an ulp is 1/16)
    keep = (slots >= 0).to(DEV)
    got = k_cache.view(-1, 2, 16)[slots[slots >= 0].to(DEV)].float() * 0.05
    want = key[keep].float().clamp(-448 * 0.05, 448 * 0.05)
    assert ((got - want).abs() <= want.abs() / 16 + 2**-9 * 0.05).all(), "fp8 store lost more than half an ulp"


def test_fp8_v_is_stored_transposed_within_its_block_and_k_and_model_dtype_v_token_major():
    """The cache contract (engine.kernels.cache): an fp8 cache's V bytes of a block are [Hkv, D, block_size]; K,
    and V of a model-dtype cache, are [block_size, Hkv, D]; v_token_major reads both orders as [block, offset]."""
    g = gen(21)
    n, block_size, hkv, d = 11, 8, 2, 16
    slots = torch.randperm(3 * block_size, generator=g)[:n].to(DEV)
    key, value = (torch.randn(n, hkv, d, generator=g) * 3).to(DEV), (torch.randn(n, hkv, d, generator=g) * 3).to(DEV)
    one = torch.ones(1, device=DEV)
    blk, off = (slots // block_size).long(), (slots % block_size).long()
    for dtype in (FP8, torch.float32):
        k_cache = torch.zeros(3, block_size, hkv, d, dtype=dtype, device=DEV)
        v_cache = torch.zeros_like(k_cache)
        K.store_kvcache(key, value, k_cache, v_cache, slots.to(torch.int32), one, one)
        want_k, want_v = (R.quantize_fp8(key, one), R.quantize_fp8(value, one)) if dtype == FP8 else (key, value)
        assert torch.equal(k_cache[blk, off].float(), want_k.float()), f"{dtype} K is not token-major"
        if dtype == FP8:
            stored = v_cache.view(3, hkv, d, block_size)[blk, :, :, off]  # [n, Hkv, D]
            assert torch.equal(stored.float(), want_v.float()), "fp8 V is not [Hkv, D, block_size] within its block"
        else:
            assert torch.equal(v_cache[blk, off], value), "a model-dtype V cache is not token-major"
        assert torch.equal(K.v_token_major(v_cache)[blk, off].float(), want_v.float()), "v_token_major misreads V"


def poisoned_cache(num_blocks, block_size, hkv, d, dtype):
    """A cache whose every slot holds NaN (fp8: the 0x7F pattern), as memory never written may."""
    shape = (num_blocks, block_size, hkv, d)
    if dtype == FP8:
        return torch.full(shape, 0x7F, dtype=torch.uint8, device=DEV).view(FP8)
    return torch.full(shape, float("nan"), dtype=dtype, device=DEV)


@pytest.mark.parametrize("cache_dtype", [torch.float32, FP8], ids=["model-dtype", "fp8"])
@pytest.mark.parametrize("block_size", [8, 32])
def test_stored_tokens_attend_as_the_reference_over_them_with_nan_in_unwritten_slots(cache_dtype, block_size):
    stored_tokens_attend_as_the_reference(cache_dtype, block_size)


@pytest.mark.parametrize("block_size", [8, 32])
def test_pv_fp8_prefill_over_stored_tokens_with_nan_in_unwritten_slots(block_size):
    """As above for the prefill whose two products are e4m3 (pv_fp8: V^T tiles straight from the cache, a run's
    slots past the context zeroed as fp8); e4m3 products need head dim and block_n >= 32 on the GPU."""
    stored_tokens_attend_as_the_reference(FP8, block_size, d=32, prefill=K.PrefillConfig(
        block_m=64, block_n=32, num_warps=4, fp8_widen="fp16", qk_fp8=True, pv_fp8=True))


def stored_tokens_attend_as_the_reference(cache_dtype, block_size, d=16, prefill=None):
    """Store -> decode and store -> prefill, checked against attention over the tokens as stored (fp8: rounded
    through e4m3 and scaled back), not over the cache, so a layout the store kernel and the readers both get
    wrong still fails. Every slot not written holds NaN: the readers must ignore the rest of a sequence's last
    block (the fp8 V tile is read by whole runs of tokens and zeroed past the context). Triton's interpreter
    widens fp8's NaN pattern 0x7F to 480, not NaN, so for fp8 that part bites on a GPU only
    (tests/gpu/test_fp8_gpu.py runs this test there)."""
    g = gen(block_size)
    hq, hkv = 4, 2
    ctx = [3, block_size + 5, 2 * block_size + 1]  # each ends inside a block
    num_blocks = sum(-(-n // block_size) for n in ctx) + 2
    k_cache, v_cache = poisoned_cache(num_blocks, block_size, hkv, d, cache_dtype), poisoned_cache(num_blocks, block_size, hkv, d, cache_dtype)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, g)
    keys = [torch.randn(n, hkv, d, generator=g).to(DEV) for n in ctx]
    values = [(torch.randn(n, hkv, d, generator=g) * 4).to(DEV) for n in ctx]
    slots = torch.cat([tables[b, torch.arange(n, device=DEV) // block_size] * block_size
                       + torch.arange(n, device=DEV) % block_size for b, n in enumerate(ctx)])
    ks, vs = scales(0.25, 0.5)
    K.store_kvcache(torch.cat(keys), torch.cat(values), k_cache, v_cache, slots.to(torch.int32), ks, vs)
    fp8 = cache_dtype == FP8

    def as_stored(x, scale):
        return R.dequantize(R.quantize_fp8(x, scale), scale) if fp8 else x

    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn(len(ctx), hq, d, generator=g).to(DEV)
    want = torch.stack([R._attend(q[b : b + 1], as_stored(keys[b], ks), as_stored(values[b], vs), d**-0.5)[0]
                        for b in range(len(ctx))])
    tol = variant_tol(torch.float32, None, 4.0) if fp8 else 2e-5
    for splits in (1, 3) if prefill is None else ():
        got = K.paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5, num_splits=splits,
                                       k_scale=ks, v_scale=vs, config=K.DecodeConfig(block_n=16, fp8_widen="fp16"))
        assert_close(got, want, torch.float32, f"store -> decode, {splits} splits", atol=tol)
    q_lens = [min(n, 4) for n in ctx]  # the last tokens of each sequence as new queries, the rest cached
    qp = torch.randn(sum(q_lens), hq, d, generator=g).to(DEV)
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    want = torch.cat([R._attend(qp[cu[b]:cu[b + 1]], as_stored(keys[b], ks), as_stored(values[b], vs), d**-0.5,
                                causal_offset=n - q_lens[b]) for b, n in enumerate(ctx)])
    got = K.paged_prefill_attention(qp, k_cache, v_cache, cu, lens, tables, d**-0.5, k_scale=ks, v_scale=vs,
                                    config=prefill or K.PrefillConfig(block_m=16, block_n=16, fp8_widen="fp16"))
    if prefill is not None and prefill.pv_fp8:  # q and P rounded to e4m3: within 2^-4 of max |V| (as stored)
        want = torch.cat([R._attend(rowwise_e4m3(qp)[cu[b]:cu[b + 1]], as_stored(keys[b], ks),
                                    as_stored(values[b], vs), d**-0.5, causal_offset=n - q_lens[b])
                          for b, n in enumerate(ctx)])
        tol += 2**-4 * max(as_stored(v, vs).abs().max().item() for v in values)
    assert_close(got, want, torch.float32, "store -> prefill", atol=tol)


DECODE_CASES = [  # (q dtype, block_size, hq, hkv, d, context_lens, num_splits)
    (torch.float32, 8, 4, 2, 16, [0, 1, 9, 37], 1),
    (torch.bfloat16, 16, 8, 2, 32, [15, 64, 100], 3),
    (torch.float16, 32, 4, 1, 16, [5, 97], 2),
]


# The launch variants bench/fp8_tune.py sweeps: each must compute the same attention.
DECODE_VARIANTS = {"fp8-default": None, "bf16-widen": K.DecodeConfig(), "fp16": K.DecodeConfig(fp8_widen="fp16"),
                   "bn32": K.DecodeConfig(block_n=32),
                   "fp16-bn16-w2": K.DecodeConfig(block_n=16, num_warps=2, fp8_widen="fp16"),
                   "prefetch-fp16": K.DecodeConfig(block_n=16, num_stages=1, fp8_widen="fp16", prefetch=True),
                   "prefetch": K.DecodeConfig(block_n=32, num_stages=1, prefetch=True),
                   "fp16-bn16-i64": K.DecodeConfig(block_n=16, num_warps=2, fp8_widen="fp16", int32_offsets=False),
                   "prefetch-i64": K.DecodeConfig(block_n=16, num_stages=1, fp8_widen="fp16", prefetch=True,
                                                  int32_offsets=False)}


def variant_tol(dtype, cfg, scale: float) -> float:
    """fp32 products on the CPU: fp32 rounding; fp16 products: fp16 rounding; bf16: bf16's."""
    cfg = cfg or FP8_DECODE_CONFIG
    if dtype == torch.float32 and DEV == "cpu":
        return (4e-3 if cfg.fp8_widen == "fp16" else 2e-5) * scale
    return 0.03 * scale


@pytest.mark.parametrize("variant", DECODE_VARIANTS)
@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: f"{str(c[0])[6:]}-bs{c[1]}-s{c[6]}")
def test_fp8_paged_decode_matches_the_dequantised_reference(case, variant):
    cfg = DECODE_VARIANTS[variant]
    dtype, block_size, hq, hkv, d, ctx, splits = case
    g = gen(sum(ctx))
    num_blocks = sum(-(-n // block_size) for n in ctx) + 2
    k_cache, v_cache = fp8_cache(num_blocks, block_size, hkv, d, g, 0.3), fp8_cache(num_blocks, block_size, hkv, d, g, 4.0)
    k_scale, v_scale = scales(0.3 / 16, 4.0 / 16)  # cache entries are ~16: scale back to ~0.3 and ~4
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, g)
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = (torch.randn(len(ctx), hq, d, generator=g) * 4).to(DEV, dtype)
    out = torch.full_like(q, float("nan"))
    K.paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5, num_splits=splits, out=out,
                             k_scale=k_scale, v_scale=v_scale, config=cfg)
    ref = R.paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5, k_scale, v_scale)
    tol = variant_tol(dtype, cfg, 4.0)  # V ~ 4
    assert_close(out, ref, dtype, f"fp8 decode {case}", atol=tol)
    assert (out[lens == 0] == 0).all(), "an empty context must give zeros"
    unscaled = R.paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5, *scales(1.0, 1.0))
    assert (out.float() - unscaled).abs().max() > 1.0, "the kernel ignored the fp8 scales"


PREFILL_CASES = [  # (q dtype, block_size, hq, hkv, d, [(q_len, context_len)], (block_m, block_n))
    (torch.float32, 8, 4, 2, 16, [(5, 5), (7, 20)], (16, 16)),
    (torch.bfloat16, 16, 8, 2, 32, [(33, 47), (1, 64)], (16, 32)),
    (torch.float32, 8, 4, 2, 16, [(20, 90), (3, 70), (1, 16)], (16, 16)),  # up to 5 whole key tiles before the diagonal
    (torch.float32, 8, 4, 2, 32, [(20, 90), (3, 70), (1, 16)], (16, 32)),  # as above, e4m3 products' K >= 32
    (torch.float32, 8, 4, 2, 32, [(40, 100), (33, 64)], (16, 32)),  # diagonal tiles below and past the last whole one
]


# int32 offsets are the default of both configs (for an fp8 cache too); "i64" is the r6 fp8 path
PREFILL_VARIANTS = {"bf16": {}, "fp16": {"fp8_widen": "fp16"}, "fp16-i64": {"fp8_widen": "fp16", "int32_offsets": False},
                    "qk-fp8": {"fp8_widen": "fp16", "qk_fp8": True},
                    "qk-fp8-i64": {"fp8_widen": "fp16", "qk_fp8": True, "int32_offsets": False},
                    "pv-fp8": {"fp8_widen": "fp16", "qk_fp8": True, "pv_fp8": True},
                    "pv-fp8-i64": {"fp8_widen": "fp16", "qk_fp8": True, "pv_fp8": True, "int32_offsets": False},
                    # the persistent grid (3 programs walking several tiles each, empty ones too; see test_kernels)
                    "fp16-persistent": {"fp8_widen": "fp16", "persistent": 3},
                    "pv-fp8-persistent-prefetch": {"fp8_widen": "fp16", "qk_fp8": True, "pv_fp8": True,
                                                   "persistent": 3, "prefetch_q": True}}


def test_e4m3_products_are_refused_below_32_head_dims_or_keys():
    case = next(c for c in PREFILL_CASES if not e4m3_products_fit(c))
    dtype, block_size, hq, hkv, d, seqs, (bm, bn) = case
    g = gen(1)
    ctx = [c for _, c in seqs]
    num_blocks = sum(-(-n // block_size) for n in ctx) + 2
    cache = fp8_cache(num_blocks, block_size, hkv, d, g, 1.0)
    cu = torch.tensor([0] + torch.tensor([q for q, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    q = torch.randn(int(cu[-1]), hq, d, generator=g).to(DEV, dtype)
    with pytest.raises(AssertionError, match="needs head_dim, block_n >= 32"):
        K.paged_prefill_attention(q, cache, cache, cu, torch.tensor(ctx, dtype=torch.int32, device=DEV),
                                  block_tables_for(ctx, block_size, num_blocks, DEV, g), d**-0.5,
                                  config=K.PrefillConfig(block_m=bm, block_n=bn, **PREFILL_VARIANTS["pv-fp8"]),
                                  k_scale=scales(1.0, 1.0)[0], v_scale=scales(1.0, 1.0)[1])


def rowwise_e4m3(q: torch.Tensor) -> torch.Tensor:
    """q [T, Hq, D] as the qk_fp8 prefill multiplies it: each (token, head) row quantised to e4m3 with the scale
    amax / 448 (1 for an all-zero row) and scaled back."""
    amax = q.float().abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    return R.dequantize(R.quantize_fp8(q, scale), scale)


def e4m3_products_fit(case) -> bool:
    """e4m3 products (pv_fp8) need head dim and block_n >= 32; the wrapper refuses less."""
    d, (_, bn) = case[4], case[6]
    return min(d, bn) >= 32


@pytest.mark.parametrize("case, variant", [
    pytest.param(case, variant, id=f"{str(case[0])[6:]}-bs{case[1]}-{variant}")
    for case in PREFILL_CASES for variant in PREFILL_VARIANTS
    if e4m3_products_fit(case) or not PREFILL_VARIANTS[variant].get("pv_fp8", False)])
def test_fp8_paged_prefill_matches_the_dequantised_reference(case, variant):
    dtype, block_size, hq, hkv, d, seqs, (bm, bn) = case
    g = gen(block_size + 5)
    ctx = [c for _, c in seqs]
    num_blocks = sum(-(-n // block_size) for n in ctx) + 2
    k_cache, v_cache = fp8_cache(num_blocks, block_size, hkv, d, g, 0.3), fp8_cache(num_blocks, block_size, hkv, d, g, 4.0)
    k_scale, v_scale = scales(0.3 / 16, 4.0 / 16)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, g)
    cu = torch.tensor([0] + torch.tensor([q for q, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = (torch.randn(int(cu[-1]), hq, d, generator=g) * 4).to(DEV, dtype)
    out = torch.full_like(q, float("nan"))
    K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, d**-0.5, out=out,
                              config=K.PrefillConfig(block_m=bm, block_n=bn, **PREFILL_VARIANTS[variant]),
                              k_scale=k_scale, v_scale=v_scale)
    qk_fp8 = PREFILL_VARIANTS[variant].get("qk_fp8", False)
    ref = R.paged_prefill_attention(rowwise_e4m3(q) if qk_fp8 else q, k_cache, v_cache, cu, lens, tables, d**-0.5,
                                    k_scale, v_scale)
    tol = variant_tol(dtype, K.PrefillConfig(**PREFILL_VARIANTS[variant]), 4.0)
    if PREFILL_VARIANTS[variant].get("pv_fp8", False):  # each P rounded to e4m3: within 2^-4 of it, so of max |V|
        tol += 2**-4 * R.dequantize(v_cache, v_scale).abs().max().item()
        err = (out.float() - ref).abs()
        assert err.mean() < tol / 16, f"pv_fp8: mean error {err.mean():.3g}, not what rounding P gives"
    assert_close(out, ref, dtype, f"fp8 prefill {case}", atol=tol)
    if qk_fp8 and not PREFILL_VARIANTS[variant].get("pv_fp8", False):
        # the quantised q is what moved the result, not a wrong kernel: unquantised q is further off
        plain = R.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, d**-0.5, k_scale, v_scale)
        assert (out.float() - plain).abs().max() > (out.float() - ref).abs().max()


def test_fp8_qk_product_rounds_q_per_row_to_e4m3_as_the_torch_cast():
    """The qk_fp8 path's q quantisation (per (token, head) row, amax / 448, round to nearest even) is torch's
    cast: one query row per head attending to one key with value 1 gives out = 1 whatever the scores, so instead
    two keys with values 0 and 1 and K = [0, e_j] expose score q_j exactly: out = sigmoid(scale * q_j * k)."""
    g = gen(3)
    d, hq = 16, 2
    q = (torch.randn(1, hq, d, generator=g) * 3).to(DEV)
    k_cache = torch.zeros(2, 8, 1, d, dtype=FP8, device=DEV)
    v_cache = torch.zeros(2, 8, 1, d, dtype=FP8, device=DEV)
    tables = torch.tensor([[0]], dtype=torch.int32, device=DEV)
    cu = torch.tensor([0, 1], dtype=torch.int32, device=DEV)
    lens = torch.tensor([2], dtype=torch.int32, device=DEV)
    k_cache[0, 1, 0, 5] = 1.0  # key 1 = e_5: score of key 1 is q[5]; key 0 scores 0
    K.v_token_major(v_cache)[0, 1, 0, :] = 1.0  # value of key 1 is 1, of key 0 is 0
    out = K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, 1.0, k_scale=scales(1.0, 1.0)[0],
                                    v_scale=scales(1.0, 1.0)[1],
                                    config=K.PrefillConfig(block_m=16, block_n=16, fp8_widen="fp16", qk_fp8=True))
    want = torch.sigmoid(rowwise_e4m3(q)[0, :, 5])
    assert torch.allclose(out[0, :, 0].float(), want, atol=2e-3), (out[0, :, 0], want)
    assert not torch.allclose(want, torch.sigmoid(q[0, :, 5]), atol=1e-6), "the case must not be exact in e4m3"


def test_fp8_blocks_copy_and_swap_bit_exact():
    g = gen(5)
    bits = torch.randint(0, 256, (2, 2, 10, 8, 2, 16), generator=g, dtype=torch.uint8)
    kv = bits.to(DEV).view(FP8)  # every bit pattern, NaN encodings included
    original = kv.clone()
    K.copy_blocks(kv, torch.tensor([[1, 7], [4, 2]]))
    assert torch.equal(kv[:, :, [7, 2]].view(torch.uint8), original[:, :, [1, 4]].view(torch.uint8))
    host = torch.zeros(cpu_cache_shape(tuple(kv.shape), 4), dtype=FP8, pin_memory=DEV == "cuda")
    swap_out(kv, host, torch.tensor([[3, 0], [8, 3]]))
    swap_in(host, kv, torch.tensor([[0, 5], [3, 6]]))
    if DEV == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(kv[:, :, [5, 6]].view(torch.uint8), original[:, :, [3, 8]].view(torch.uint8)), \
        "an fp8 block changed bits on its way through the host cache"


def test_fp8_cache_has_half_the_block_bytes_and_twice_the_blocks():
    spec = get_model("llama-3-8b")
    assert kv_block_bytes(spec, 16, FP8) * 2 == kv_block_bytes(spec, 16, torch.bfloat16)
    bf16, fp8 = Config(), Config(kv_cache_dtype="fp8")
    assert fp8.block_bytes * 2 == bf16.block_bytes
    ratio = fp8.resolved_num_gpu_blocks / bf16.resolved_num_gpu_blocks
    assert abs(ratio - 2) <= 1 / bf16.resolved_num_gpu_blocks, f"fp8 gives {ratio:.4f}x the blocks of bf16"


def test_unknown_kv_cache_dtype_is_a_clear_error():
    from pagesim.errors import UserError

    with pytest.raises(UserError, match="kv_cache_dtype must be one of"):
        Config(kv_cache_dtype="int4")


# ---- the engine end to end: fp8 cache vs the model-dtype cache on the same plans -----------------
def engine_requests(vocab: int) -> list[Request]:
    g = torch.Generator().manual_seed(9)
    system = torch.randint(0, vocab, (3 * BS,), generator=g).tolist()  # a shared prefix: a prefix-cache hit
    reqs = []
    for i, (tail, out) in enumerate([(13, 4), (2 * BS + 3, 3), (5, 4)]):
        ids = tuple(system + torch.randint(0, vocab, (tail,), generator=g).tolist())
        reqs.append(Request(f"r{i}", 0.0, len(ids), out, seq_no=i, prompt_token_ids=ids))
    return reqs


ARRIVE = {"r0": 0, "r1": 3, "r2": 4}  # r1 and r2 arrive once r0's prompt is cached


def test_fp8_engine_logits_stay_close_to_the_model_dtype_engine():
    """Same requests, same plans (chunked prefill, a prefix hit, decodes): logits of every sampled step of
    the fp8-cache engine within 5% of the logits' range of the fp32-cache engine's, top-1 agreeing where
    the fp32 engine's top two logits are more than that apart. Measured: see the assertion message."""
    spec = get_model("toy")
    model = sensitive_model(spec, DEV, torch.float32)
    model.k_scales.fill_(0.5)  # non-unit scales: a kernel that forgot them would diverge
    model.v_scales.fill_(0.25)
    cfg = Config(model="toy", block_size=BS, max_model_len=8 * BS, max_num_seqs=4, max_num_batched_tokens=2 * BS,
                 num_gpu_blocks=24, enable_prefix_caching=True)
    runs = {}
    for dtype in ("auto", "fp8"):
        run = run_to_completion(cfg.replace(kv_cache_dtype=dtype), model, engine_requests(spec.vocab_size), ARRIVE)
        assert run.executor.kv_cache.dtype == (FP8 if dtype == "fp8" else torch.float32)
        runs[dtype] = run
    ref, got = runs["auto"].executor, runs["fp8"].executor
    assert any(r.num_prefix_hit_tokens for r in runs["fp8"].scheduler.finished), "the scenario has no prefix hit"
    worst_rel, agree, total = 0.0, 0, 0
    for req in runs["auto"].scheduler.finished:
        rid = req.request_id
        a, b = ref.tokens_of(rid), got.tokens_of(rid)
        la, lb = ref.last_logits[rid], got.last_logits[rid]
        span = (la.max() - la.min()).item()
        worst_rel = max(worst_rel, (la - lb).abs().max().item() / span)
        top2 = la.topk(2).values
        if (top2[0] - top2[1]).item() > 0.05 * span:
            total += 1
            agree += int(la.argmax() == lb.argmax())
        agree_tokens = sum(x == y for x, y in zip(a[req.prompt_len:], b[req.prompt_len:]))
        assert agree_tokens >= 1, f"{rid}: the fp8 engine's first token already differs"
    print(f"fp8 vs fp32 cache: worst logits error {worst_rel:.3%} of the range, top-1 {agree}/{total}")
    assert worst_rel <= 0.05, f"fp8 logits differ by {worst_rel:.3%} of the logit range (> 5%)"
    assert agree == total, f"top-1 agreement {agree}/{total} on clear-margin steps"


# ---- teacher-forced logits: the same tokens through an fp8-cache and a model-dtype-cache forward --------
def teacher_forced_logits(model: LlamaModel, kv_cache_dtype: str, ids: torch.Tensor, prefill_len: int,
                          block_size: int = 16, seed: int = 0) -> torch.Tensor:
    """Logits [B, L - prefill_len + 1, vocab] of sequences ids [B, L]: one prefill step of every sequence's
    first prefill_len tokens (their last row samples), then one decode step per further position, with
    the given tokens fed (teacher forcing), on shuffled physical blocks. Row j predicts token prefill_len + j."""
    b, length = ids.shape
    per_seq = -(-length // block_size)
    dev = model.device
    cache = model.allocate_kv_cache(b * per_seq, block_size, kv_cache_dtype)
    cache.view(torch.uint8).zero_()
    g = torch.Generator().manual_seed(seed)
    tables = torch.randperm(b * per_seq, generator=g).view(b, per_seq).to(dev, torch.int32)
    i32 = dict(dtype=torch.int32, device=dev)

    def slots(pos: torch.Tensor) -> torch.Tensor:  # pos [B, n] -> slot ids [B * n]
        return (tables.long().gather(1, pos // block_size) * block_size + pos % block_size).flatten()

    pos = torch.arange(prefill_len, device=dev).expand(b, -1)
    attn = AttentionMetadata(slot_mapping=slots(pos), num_prefill_tokens=b * prefill_len, num_decode_tokens=0,
                             cu_seqlens_q=torch.arange(b + 1, **i32) * prefill_len,
                             context_lens_prefill=torch.full((b,), prefill_len, **i32), block_tables_prefill=tables,
                             max_seqlen_q=prefill_len)
    hidden = model.forward(ids[:, :prefill_len].flatten(), pos.flatten(), cache, attn)
    rows = [model.compute_logits(hidden.view(b, prefill_len, -1)[:, -1])]
    for p in range(prefill_len, length):
        pos = torch.full((b, 1), p, device=dev)
        attn = AttentionMetadata(slot_mapping=slots(pos), num_prefill_tokens=0, num_decode_tokens=b,
                                 context_lens_decode=torch.full((b,), p + 1, **i32), block_tables_decode=tables)
        rows.append(model.compute_logits(model.forward(ids[:, p], pos.flatten(), cache, attn)))
    return torch.stack(rows, dim=1)


def logits_agreement(ref: torch.Tensor, got: torch.Tensor) -> dict:
    """Worst relative L2 error and cosine over the rows, max |diff|, and the top-1 agreement fraction."""
    ref, got = ref.flatten(0, -2).float(), got.flatten(0, -2).float()
    rel = ((got - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-12))
    cos = torch.nn.functional.cosine_similarity(got, ref, dim=-1)
    return {"rows": ref.shape[0], "max_rel_l2": rel.max().item(), "mean_rel_l2": rel.mean().item(),
            "min_cos": cos.min().item(),
            "max_abs": (got - ref).abs().max().item(),
            "top1_agreement": (got.argmax(-1) == ref.argmax(-1)).float().mean().item()}


def test_fp8_teacher_forced_logits_track_the_fp32_cache_at_every_position():
    """Every position (one prefill, then decodes over shuffled blocks), toy model: relative L2 error of the
    logits <= 5% per row and top-1 agreement >= 90% (measured: printed with -s)."""
    model = sensitive_model(get_model("toy"), DEV, torch.float32)
    ids = torch.randint(0, model.spec.vocab_size, (2, 32), generator=torch.Generator().manual_seed(4)).to(DEV)
    ref = teacher_forced_logits(model, "auto", ids, 24, block_size=8)
    got = teacher_forced_logits(model, "fp8", ids, 24, block_size=8)
    m = logits_agreement(ref, got)
    print(f"toy fp8 vs fp32 cache, teacher forced: {m}")
    assert m["max_rel_l2"] <= 0.05 and m["top1_agreement"] >= 0.9, f"fp8 logits drift from the fp32 cache's: {m}"


def fp8_effect(model: LlamaModel, ids: torch.Tensor, prefill_len: int, block_size: int = 16) -> dict:
    """What the fp8 cache does to the logits, measured twice on the same inputs and rows:
    engine     the engine with an fp8 cache against the engine with the model-dtype cache (teacher forced);
    emulated   a plain torch forward with K and V rounded through e4m3 (same scales) against one without.
    Quantisation perturbs a random-weight model's logits by itself (more with depth); an fp8 bug (scales,
    saturation, dequantisation, softmax scale) makes the engine's effect larger than the emulation's."""
    from engine.kv_scales import plain_forward

    engine = logits_agreement(teacher_forced_logits(model, "auto", ids, prefill_len, block_size),
                              teacher_forced_logits(model, "fp8", ids, prefill_len, block_size))
    rows = slice(prefill_len - 1, ids.shape[1])
    scales = (model.k_scales, model.v_scales)
    ref = torch.stack([model.compute_logits(plain_forward(model, r)[rows]) for r in ids])
    emu = torch.stack([model.compute_logits(plain_forward(model, r, fp8_scales=scales)[rows]) for r in ids])
    return {"engine": engine, "emulated": logits_agreement(ref, emu)}


def assert_fp8_effect_as_emulated(m: dict, top1_margin: float) -> None:
    """The engine's fp8 effect is the emulation's: mean relative L2 at most 1.5x its + 0.01, top-1 agreement at
    least its - top1_margin (the sampling noise of the row count)."""
    e, x = m["engine"], m["emulated"]
    assert e["mean_rel_l2"] <= 1.5 * x["mean_rel_l2"] + 0.01, f"fp8 engine drifts more than fp8 rounding explains: {m}"
    assert e["top1_agreement"] >= x["top1_agreement"] - top1_margin, f"fp8 engine top-1 below the emulation's: {m}"


def test_fp8_engine_effect_on_logits_is_the_torch_emulations_with_calibrated_scales():
    """Toy model, per-layer scales from the data (amax / 448, engine.kv_scales): the engine's fp8 effect on the
    logits matches a torch emulation of the fp8 cache (measured: printed with -s)."""
    from engine.kv_scales import calculate_kv_scales

    model = sensitive_model(get_model("toy"), DEV, torch.float32)
    g = torch.Generator().manual_seed(6)
    calib = torch.randint(0, model.spec.vocab_size, (2, 32), generator=g).to(DEV)
    k_scales, v_scales = calculate_kv_scales(model, calib)
    assert (k_scales != 1).all() and (v_scales != 1).all() and (k_scales > 0).all()
    ids = torch.randint(0, model.spec.vocab_size, (2, 32), generator=g).to(DEV)
    m = fp8_effect(model, ids, 24, block_size=8)
    print(f"toy fp8 effect, calibrated scales: {m}")
    assert_fp8_effect_as_emulated(m, top1_margin=0.15)


def test_calibrated_scales_are_amax_over_448():
    from engine.kv_scales import calculate_kv_scales, kv_amax

    model = sensitive_model(get_model("toy"), DEV, torch.float32)
    ids = torch.randint(0, model.spec.vocab_size, (1, 20), generator=torch.Generator().manual_seed(2)).to(DEV)
    amax = kv_amax(model, ids)
    ks, vs = calculate_kv_scales(model, ids, v_range=100.0)
    assert torch.allclose(ks, amax[:, 0] / 448) and torch.allclose(vs, amax[:, 1] / 100)
    # every K the calibration saw is representable: its cache value stays inside e4m3's range
    assert (amax[:, 0] / ks).max() <= 448 * (1 + 1e-6)


# ---- the engine's host offload tier (engine/host_tier.py) ---------------------------------------
def offload_engine_config(num_gpu_blocks: int, num_host_blocks: int, **kw) -> Config:
    base = Config(model="toy", block_size=BS, max_model_len=8 * BS, max_num_seqs=4, max_num_batched_tokens=4 * BS,
                  num_gpu_blocks=num_gpu_blocks, enable_prefix_caching=True, **kw)
    from pagesim.specs import GIB

    return base.replace(kv_offloading_size=(num_host_blocks + 0.5) * base.block_bytes / GIB)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_blocks_come_back_bit_exact_from_the_host_tier(kv_cache_dtype):
    from pagesim.scheduler import StepPlan

    model = sensitive_model(get_model("toy"), DEV, torch.float32)
    ex = GPUExecutor(offload_engine_config(12, 6, kv_cache_dtype=kv_cache_dtype), model)
    raw = ex.kv_cache.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, generator=torch.Generator().manual_seed(3), dtype=torch.uint8).to(DEV))
    original = raw[:, :, [2, 9]].clone()
    ex.execute(StepPlan(0, blocks_to_store=[(2, 4), (9, 1)]))
    raw[:, :, [2, 9]] = 0
    ex.execute(StepPlan(1, blocks_to_load=[(4, 7), (1, 0)]))  # back, into other blocks
    if DEV == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(raw[:, :, [7, 0]], original), "a block changed bits on its round trip through the host tier"


def test_engine_with_host_hits_generates_the_reference_tokens():
    """A's prefix is evicted from a 10-block GPU cache by B, then C hits it on the host: C's blocks are loaded,
    and every request's tokens are still greedy decoding by the full forward."""
    from tests.test_executor import assert_greedy_matches_reference

    model = sensitive_model(get_model("toy"), DEV, torch.float32)
    g = torch.Generator().manual_seed(12)
    a = tuple(torch.randint(0, 256, (5 * BS + 2,), generator=g).tolist())
    b = tuple(torch.randint(0, 256, (6 * BS + 1,), generator=g).tolist())
    c = a[: 5 * BS] + (7, 8, 9)
    reqs = [Request(n, 0.0, len(p), 2, seq_no=i, prompt_token_ids=p) for i, (n, p) in enumerate([("A", a), ("B", b), ("C", c)])]
    run = run_to_completion(offload_engine_config(10, 16), model, reqs, {"A": 0, "B": 4, "C": 9})
    assert any(p.blocks_to_load for p in run.plans), "C did not load its prefix from the host tier"
    assert run.scheduler.kv.prefix_cache_stats.host_hits >= BS  # measured: 2 blocks from the host, 3 from the GPU
    assert_greedy_matches_reference(run, margin=1e-4, logits_atol=1e-3)


def test_fp8_blocks_swap_out_and_in_bit_exact_through_the_executor():
    from pagesim.scheduler import StepPlan
    from pagesim.specs import GIB

    model = sensitive_model(get_model("toy"), DEV, torch.float32)
    block = get_model("toy").kv_bytes_per_block(BS, 1)
    cfg = Config(model="toy", block_size=BS, num_gpu_blocks=12, max_model_len=8 * BS, max_num_batched_tokens=8 * BS,
                 preemption_mode="swap", swap_space=4.5 * block / GIB, kv_cache_dtype="fp8")
    ex = GPUExecutor(cfg, model)
    raw = ex.kv_cache.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, generator=torch.Generator().manual_seed(5), dtype=torch.uint8).to(DEV))
    original = raw[:, :, [3, 7]].clone()
    ex.execute(StepPlan(0, blocks_to_swap_out=[(3, 2), (7, 0)]))
    raw[:, :, [3, 7]] = 0
    ex.execute(StepPlan(1, blocks_to_swap_in=[(2, 9), (0, 4)]))
    if DEV == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(raw[:, :, [9, 4]], original), "an fp8 block changed bits on its way through the swap cache"


def test_executor_warms_every_decode_variant_with_an_fp8_cache():
    """live mode's warm-up launches the decode attention at every split count; an fp8 cache needs its scales there."""
    model = sensitive_model(get_model("toy"), DEV, torch.float32)
    cfg = Config(model="toy", block_size=BS, max_model_len=8 * BS, max_num_seqs=4, max_num_batched_tokens=4 * BS,
                 num_gpu_blocks=16, kv_cache_dtype="fp8")
    ex = GPUExecutor(cfg, model)
    assert ex.kv_cache.dtype == FP8
    assert ex.warm_decode_variants() >= 1
