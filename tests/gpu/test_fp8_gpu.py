"""The fp8 KV cache on a GPU: compiled kernels at Llama-3-8B head shapes, and the Llama-3-8B-shaped engine
(random bf16 weights) with an fp8 cache against the same engine with a bf16 cache. Skipped without CUDA.

    python -m pytest -q -s -p no:cacheprovider tests/gpu/test_fp8_gpu.py

Stated tolerances (the -s output prints what was measured):
  kernels   fp8 decode / prefill (every launch variant bench/fp8_tune.py sweeps) vs the fp32 reference on the
            same dequantised cache: per query row, max |err| <= 2^-7 * max |ref| + 1e-3; the quantisation
            error (the same reference on the bf16 K/V the cache was quantised from) is printed, not asserted;
            the store kernel's bits equal torch's x / scale -> float8_e4m3fn cast (round to nearest even);
  engine    fp8 vs bf16 engine logits (teacher forced, Llama-3-8B shapes at 2 and 32 layers, calibrated
            scales) against the same comparison in a torch emulation of the fp8 cache: mean relative L2 at
            most 1.5x the emulation's + 0.01, top-1 agreement at least the emulation's - 0.05.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import engine.kernels as K
from engine.kernels import reference as R
from engine.kernels.prefill import FP8_PREFILL_CONFIG
from engine.model import LlamaModel
from pagesim.specs import get_model
from tests.test_fp8_kv import rowwise_e4m3
from tests.test_kernels import assert_close, block_tables_for

pytestmark = pytest.mark.gpu
DEV = "cuda"
HQ, HKV, D = 32, 8, 128
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn


def fp8_cache(num_blocks, block_size, g, amax: float):
    x = torch.randn((num_blocks, block_size, HKV, D), generator=g, device=DEV) * (amax / 4)
    scale = torch.tensor([amax / 448.0], device=DEV)
    return R.quantize_fp8(x, scale), scale


def sourced_fp8_cache(num_blocks, block_size, g, amax: float, *, v: bool):
    """(bf16 source x, its fp8 K (v False) or V (v True) cache with per-tensor scale amax / 448, the scale): the
    quantisation error is fp8 attention against attention over x."""
    x = (torch.randn((num_blocks, block_size, HKV, D), generator=g, device=DEV) * (amax / 4)).to(BF16)
    scale = (x.abs().amax().float() / 448.0).reshape(1)
    return x, R.fp8_cache_of(x, scale, v=v), scale


# the launch variants bench/fp8_tune.py sweeps (None: the fp8 defaults, FP8_DECODE_CONFIG / FP8_PREFILL_CONFIG)
DECODE_VARIANTS = {"fp8-default": None, "bf16-widen": K.DecodeConfig(),
                   "bn256-w8": K.DecodeConfig(block_n=256, num_warps=8),
                   "fp16-bn256": K.DecodeConfig(block_n=256, num_warps=8, fp8_widen="fp16"),
                   "bn64-w4-s2": K.DecodeConfig(block_n=64, num_warps=4, num_stages=2),
                   "prefetch-fp16-s1": K.DecodeConfig(block_n=128, num_stages=1, fp8_widen="fp16", prefetch=True),
                   "stages1-fp16": K.DecodeConfig(block_n=128, num_stages=1, fp8_widen="fp16"),
                   "many-splits-bn32-w2": K.DecodeConfig(block_n=32, num_warps=2, num_stages=2, fp8_widen="fp16"),
                   "short-bn32-w1": K.DecodeConfig(block_n=32, num_warps=1, num_stages=2, fp8_widen="fp16"),
                   "short-bn32-w1-i64": K.DecodeConfig(block_n=32, num_warps=1, num_stages=2, fp8_widen="fp16",
                                                       int32_offsets=False),
                   "bn128-w2-i64": K.DecodeConfig(block_n=128, num_warps=2, num_stages=2, fp8_widen="fp16",
                                                  int32_offsets=False)}


def assert_kernel_close(out, ref, what: str):
    """Per query row: max |out - ref| <= 2^-7 * max |ref| + 1e-3 (two bf16 half-ulps of the row's largest value,
    for the bf16 (or fp16) products and the bf16 output), so a short context's large outputs do not loosen a
    long context's small ones."""
    assert not torch.isnan(out).any(), f"{what}: output has NaN"
    err = (out.float() - ref).abs().amax(-1)
    tol = 2**-7 * ref.abs().amax(-1) + 1e-3
    bad = err > tol
    at = err.flatten().argmax()
    assert not bad.any(), (f"{what}: {int(bad.sum())} query rows off the reference; worst max|err| "
                           f"{err.flatten()[at].item():.3g} with tolerance {tol.flatten()[at].item():.3g} there")


@pytest.mark.parametrize("variant", DECODE_VARIANTS)
@pytest.mark.parametrize("num_splits", [None, 1, 7])
def test_fp8_decode_variants_match_the_dequantised_reference(variant, num_splits):
    """Kernel correctness (tight: the same dequantised K/V in an fp32 reference) and, reported, the
    quantisation error (the same attention over the bf16 K/V the cache was quantised from)."""
    ctx = [32768, 4097, 1, 0, 16, 1000]
    g = torch.Generator(device=DEV).manual_seed(3)
    num_blocks = sum(-(-n // 16) for n in ctx) + 8
    (xk, k8, ks), (xv, v8, vs) = (sourced_fp8_cache(num_blocks, 16, g, 8.0, v=False),
                                  sourced_fp8_cache(num_blocks, 16, g, 12.0, v=True))
    tables = block_tables_for(ctx, 16, num_blocks, DEV, torch.Generator().manual_seed(3))
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn((len(ctx), HQ, D), generator=g, device=DEV).to(BF16)
    out = torch.full_like(q, float("nan"))
    K.paged_decode_attention(q, k8, v8, tables, lens, D**-0.5, num_splits=num_splits, out=out, k_scale=ks, v_scale=vs,
                             config=DECODE_VARIANTS[variant])
    ref = R.paged_decode_attention(q, k8, v8, tables, lens, D**-0.5, ks, vs)
    exact = R.paged_decode_attention(q, xk, xv, tables, lens, D**-0.5)
    quant = (ref - exact).abs()
    print(f"\nfp8 decode {variant} splits={num_splits}: kernel vs dequantised ref max|err| "
          f"{(out.float() - ref).abs().max().item():.3g}; quantisation (ref on fp8 vs on bf16 K/V) max "
          f"{quant.max().item():.3g}, mean {quant.mean().item():.3g}, |out| mean {exact.abs().mean().item():.3g}")
    assert_kernel_close(out, ref, f"fp8 decode {variant} splits={num_splits}")
    assert (out[3] == 0).all(), "an empty context must give zeros"


PREFILL_VARIANTS = {"fp8-default": None, "bf16-widen": {}, "fp16": {"fp8_widen": "fp16"},
                    "fp16-64x64-w4": {"fp8_widen": "fp16", "block_m": 64, "block_n": 64,
                                           "num_warps": 4},
                    "fp16-i64-s1": {"fp8_widen": "fp16", "num_stages": 1, "int32_offsets": False},
                    "qk-fp8-s1": {"fp8_widen": "fp16", "num_stages": 1, "qk_fp8": True},
                    "qk-fp8-s2": {"fp8_widen": "fp16", "num_stages": 2, "qk_fp8": True}}
PREFILL_VARIANTS.update({f"pv-fp8-s{s}": {"fp8_widen": "fp16", "num_stages": s, "qk_fp8": True, "pv_fp8": True}
                         for s in (1, 2, 3)})
PREFILL_VARIANTS["pv-fp8-64x128-w4-s3"] = {"fp8_widen": "fp16", "block_m": 64, "num_warps": 4, "num_stages": 3,
                                           "qk_fp8": True, "pv_fp8": True}


def abs_v(v_cache: torch.Tensor) -> torch.Tensor:
    """The fp8 cache with every value's sign cleared (same layout): attention over it is the P-weighted |V|."""
    return (v_cache.view(torch.uint8) & 0x7F).view(FP8)


@pytest.mark.parametrize("variant", PREFILL_VARIANTS)
def test_fp8_prefill_variants_match_the_dequantised_reference(variant):
    seqs = [(4096, 4096), (300, 5000), (1, 33)]
    g = torch.Generator(device=DEV).manual_seed(5)
    ctx = [c for _, c in seqs]
    num_blocks = sum(-(-n // 16) for n in ctx) + 4
    (xk, k8, ks), (xv, v8, vs) = (sourced_fp8_cache(num_blocks, 16, g, 8.0, v=False),
                                  sourced_fp8_cache(num_blocks, 16, g, 12.0, v=True))
    tables = block_tables_for(ctx, 16, num_blocks, DEV, torch.Generator().manual_seed(5))
    cu = torch.tensor([0] + torch.tensor([q for q, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn((int(cu[-1]), HQ, D), generator=g, device=DEV).to(BF16)
    out = torch.full_like(q, float("nan"))
    K.paged_prefill_attention(q, k8, v8, cu, lens, tables, D**-0.5, out=out, k_scale=ks, v_scale=vs,
                              config=None if PREFILL_VARIANTS[variant] is None
                              else K.PrefillConfig(**PREFILL_VARIANTS[variant]))
    # "bf16-widen" is {} (the bf16 defaults on the fp8 cache): only None means the fp8 default launch
    cfg = FP8_PREFILL_CONFIG if PREFILL_VARIANTS[variant] is None else K.PrefillConfig(**PREFILL_VARIANTS[variant])
    ref = R.paged_prefill_attention(rowwise_e4m3(q) if cfg.qk_fp8 else q, k8, v8, cu, lens, tables, D**-0.5, ks, vs)
    exact = R.paged_prefill_attention(q, xk, xv, cu, lens, tables, D**-0.5)
    quant = (ref - exact).abs()
    total = (out.float() - exact).abs()
    print(f"\nfp8 prefill {variant}: kernel vs dequantised ref max|err| {(out.float() - ref).abs().max().item():.3g};"
          f" quantisation max {quant.max().item():.3g}, mean {quant.mean().item():.3g}; kernel vs the bf16 source"
          f" max {total.max().item():.3g}, mean {total.mean().item():.3g}")
    assert_prefill_close(out, ref, cfg, q, k8, v8, cu, lens, tables, ks, vs, f"fp8 prefill {variant}")


def assert_prefill_close(out, ref, cfg, q, k8, v8, cu, lens, tables, ks, vs, what: str):
    """assert_kernel_close, or for a launch with P rounded to e4m3 (pv_fp8): each P moves its term by at most 2^-4
    of it, so |err| <= 2^-4 * (P-weighted |V|) + the bf16 tolerance, elementwise (the measured ratio is printed)."""
    if not cfg.pv_fp8:
        assert_kernel_close(out, ref, what)
        return
    bound = 2**-4 * R.paged_prefill_attention(rowwise_e4m3(q), k8, abs_v(v8), cu, lens, tables, D**-0.5, ks, vs)
    err = (out.float() - ref).abs()
    print(f"{what}: max err / (2^-4 P-weighted |V|) {(err / bound).max().item():.3g}, mean |err| "
          f"{err.mean().item():.3g} (P-weighted |V| mean {bound.mean().item() * 16:.3g})")
    assert not torch.isnan(out).any(), f"{what}: output has NaN"
    assert (err <= bound + 2**-7 * ref.abs().amax(-1, keepdim=True) + 1e-3).all(), f"{what}: beyond P's rounding"


@pytest.mark.parametrize("block_size", [8, 32])
def test_fp8_store_then_attend_ignores_nan_in_unwritten_slots(block_size):
    """The CPU test compiled: the fp8 V tile is read in whole runs of tokens, and a run's slots past the context
    hold NaN (0x7F) here, which the GPU widens to NaN (the interpreter does not): the kernels must zero them."""
    from tests.test_fp8_kv import test_stored_tokens_attend_as_the_reference_over_them_with_nan_in_unwritten_slots as check

    check(FP8, block_size)


@pytest.mark.parametrize("block_size", [8, 32])
def test_pv_fp8_prefill_ignores_nan_in_unwritten_slots(block_size):
    """As above for the prefill with both products in e4m3 (the fp8 default): V^T runs go to the tensor cores as
    stored, so the tile that reaches past the context must zero the slots there (NaN bits) before P V."""
    from tests.test_fp8_kv import test_pv_fp8_prefill_over_stored_tokens_with_nan_in_unwritten_slots as check

    check(block_size)


def test_fp8_store_matches_torch_cast_bit_for_bit():
    g = torch.Generator(device=DEV).manual_seed(0)
    n, bs = 4096, 16
    x = torch.randn((n, 3, HKV, D), generator=g, device=DEV).to(BF16) * 20
    x[0, 1, 0, :4] = torch.tensor([1e4, -1e4, 447.9, 7.9999], device=DEV)
    k_cache = torch.empty((n // bs + 4, bs, HKV, D), dtype=FP8, device=DEV)
    v_cache = torch.empty_like(k_cache)
    slots = torch.randperm(k_cache.shape[0] * bs, generator=g, device=DEV)[:n]
    slots[::97] = -1
    ks, vs = torch.tensor([0.37], device=DEV), torch.tensor([1.0], device=DEV)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    R.store_kvcache(x[:, 1], x[:, 2], k_ref, v_ref, slots, ks, vs)
    K.store_kvcache(x[:, 1], x[:, 2], k_cache, v_cache, slots.to(torch.int32), ks, vs)
    written = slots[slots >= 0]
    for name, got, ref in (("K", k_cache, k_ref), ("V", v_cache, v_ref)):
        a, b = got.view(-1, HKV, D)[written].view(torch.uint8), ref.view(-1, HKV, D)[written].view(torch.uint8)
        assert torch.equal(a, b), f"fp8 {name}: {(a != b).sum().item()} bytes differ from torch's rounding"


@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("num_splits", [None, 1, 7])
def test_fp8_decode_llama_heads_long_contexts(block_size, num_splits):
    ctx = [32768, 4097, 1, 0, block_size, 1000]
    g = torch.Generator(device=DEV).manual_seed(block_size)
    num_blocks = sum(-(-n // block_size) for n in ctx) + 8
    (k_cache, ks), (v_cache, vs) = fp8_cache(num_blocks, block_size, g, 8.0), fp8_cache(num_blocks, block_size, g, 30.0)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, torch.Generator().manual_seed(block_size))
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn((len(ctx), HQ, D), generator=g, device=DEV).to(BF16)
    out = torch.full_like(q, float("nan"))
    K.paged_decode_attention(q, k_cache, v_cache, tables, lens, D**-0.5, num_splits=num_splits, out=out,
                             k_scale=ks, v_scale=vs)
    ref = R.paged_decode_attention(q, k_cache, v_cache, tables, lens, D**-0.5, ks, vs)
    assert_close(out, ref, BF16, f"fp8 decode bs={block_size} splits={num_splits}", atol=0.03 * 30 / 4)
    assert (out[3] == 0).all(), "an empty context must give zeros"


@pytest.mark.parametrize("block_size", [16, 64])
def test_fp8_prefill_llama_heads_with_cached_prefix(block_size):
    seqs = [(4096, 4096), (300, 5000), (1, 33), (129, 129)]
    g = torch.Generator(device=DEV).manual_seed(block_size + 1)
    ctx = [c for _, c in seqs]
    num_blocks = sum(-(-n // block_size) for n in ctx) + 4
    (k_cache, ks), (v_cache, vs) = fp8_cache(num_blocks, block_size, g, 8.0), fp8_cache(num_blocks, block_size, g, 30.0)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, torch.Generator().manual_seed(block_size))
    cu = torch.tensor([0] + torch.tensor([q for q, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn((int(cu[-1]), HQ, D), generator=g, device=DEV).to(BF16)
    out = torch.full_like(q, float("nan"))
    K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, D**-0.5, out=out, k_scale=ks, v_scale=vs)
    if FP8_PREFILL_CONFIG.qk_fp8:  # the default rounds q (and P) to e4m3: its own bound
        ref = R.paged_prefill_attention(rowwise_e4m3(q), k_cache, v_cache, cu, lens, tables, D**-0.5, ks, vs)
        assert_prefill_close(out, ref, FP8_PREFILL_CONFIG, q, k_cache, v_cache, cu, lens, tables, ks, vs,
                             f"fp8 prefill bs={block_size}")
        return
    ref = R.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, D**-0.5, ks, vs)
    assert_close(out, ref, BF16, f"fp8 prefill bs={block_size}", atol=0.03 * 30 / 4)


def test_fp8_kernels_address_a_cache_of_2_31_elements_or_more():
    """A layer's fp8 cache with 2**31 elements or more takes int64 offsets (int32 would wrap): the default decode and
    prefill over blocks at the far end of such a cache (2.1 GB each for K and V; the rest never written) give the
    reference. Round 10 found the e4m3 prefill's loader (_load_kv_fp8) computing int32 offsets whatever the cache."""
    block_size = 16
    tail = 128  # the blocks the sequences use: the last ones, past 2**31 elements
    num_blocks = 2**31 // (block_size * HKV * D) + tail
    k_cache = torch.empty((num_blocks, block_size, HKV, D), dtype=FP8, device=DEV)
    v_cache = torch.empty_like(k_cache)
    assert k_cache.numel() >= 2**31
    g = torch.Generator(device=DEV).manual_seed(31)
    seqs = [(300, 700), (1, 333)]
    ctx = [c for _, c in seqs]
    tables = block_tables_for(ctx, block_size, tail, DEV, torch.Generator().manual_seed(31))
    tables = torch.where(tables < tail, tables + num_blocks - tail, tables)
    (kx, ks), (vx, vs) = fp8_cache(tail, block_size, g, 8.0), fp8_cache(tail, block_size, g, 30.0)
    k_cache[-tail:], v_cache[-tail:] = kx, vx
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    cu = torch.tensor([0] + torch.tensor([q for q, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    q = torch.randn((int(cu[-1]), HQ, D), generator=g, device=DEV).to(BF16)
    out = torch.full_like(q, float("nan"))
    K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, D**-0.5, out=out, k_scale=ks, v_scale=vs)
    ref = R.paged_prefill_attention(rowwise_e4m3(q) if FP8_PREFILL_CONFIG.qk_fp8 else q, k_cache, v_cache, cu, lens,
                                    tables, D**-0.5, ks, vs)
    assert_prefill_close(out, ref, FP8_PREFILL_CONFIG, q, k_cache, v_cache, cu, lens, tables, ks, vs,
                         "fp8 prefill, cache of 2**31 elements")
    qd = torch.randn((len(ctx), HQ, D), generator=g, device=DEV).to(BF16)
    outd = torch.full_like(qd, float("nan"))
    K.paged_decode_attention(qd, k_cache, v_cache, tables, lens, D**-0.5, out=outd, k_scale=ks, v_scale=vs)
    assert_kernel_close(outd, R.paged_decode_attention(qd, k_cache, v_cache, tables, lens, D**-0.5, ks, vs),
                        "fp8 decode, cache of 2**31 elements")


@pytest.mark.parametrize("prefill", ["default", "widened"])
@pytest.mark.parametrize("num_layers", [2, 32])
def test_fp8_engine_effect_on_logits_is_the_emulations_llama3_8b(num_layers, prefill, monkeypatch):
    """Llama-3-8B shapes, random bf16 weights, per-layer scales from the data (amax / 448 over a separate
    calibration batch, engine.kv_scales): teacher-forced logits of 8 sequences (prefill 512, then 128 decode
    steps). The fp8 cache's effect on the logits (fp8 engine vs bf16 engine) must be what rounding K/V
    through e4m3 costs in a torch emulation on the same inputs (tests.test_fp8_kv.fp8_effect): with random
    weights that effect is large by itself (2 layers, CPU emulation in fp32: mean relative L2 0.08, top-1
    0.86; 32 layers on the H200: relative L2 0.38, top-1 0.46 against the bf16 engine), so a bare threshold
    on fp8 vs bf16 tests the random model, not the cache. Both figures are printed (-s)."""
    from engine.kv_scales import calculate_kv_scales
    from tests.test_fp8_kv import assert_fp8_effect_as_emulated, fp8_effect

    if prefill == "widened":  # the r7 default: K and V widened to fp16, q and P unrounded (default: pv_fp8)
        import engine.kernels.prefill as P

        monkeypatch.setattr(P, "FP8_PREFILL_CONFIG", P.FP8_WIDENED_PREFILL_CONFIG)
        # and not the Gluon kernel, the default on sm_90 (the same numerics as FP8_PREFILL_CONFIG's)
        monkeypatch.setattr(P.prefill_gluon_fp8, "supported", lambda *_: "widened prefill asked for")
    spec = dataclasses.replace(get_model("llama-3-8b"), num_layers=num_layers)
    model = LlamaModel.random(spec, DEV, BF16, seed=0)
    g = torch.Generator().manual_seed(1)
    calibration = torch.randint(0, spec.vocab_size, (2, 512), generator=g).to(DEV)
    ks, vs = calculate_kv_scales(model, calibration)
    ids = torch.randint(0, spec.vocab_size, (8, 640), generator=g).to(DEV)
    m = fp8_effect(model, ids, 512)
    print(f"\nllama-3-8b shapes, {num_layers} layers, {prefill} fp8 prefill, random bf16 weights, scales amax/448 "
          f"(k {ks.min().item():.3g}.."
          f"{ks.max().item():.3g}, v {vs.min().item():.3g}..{vs.max().item():.3g}): {m}")
    assert_fp8_effect_as_emulated(m, top1_margin=0.05)
