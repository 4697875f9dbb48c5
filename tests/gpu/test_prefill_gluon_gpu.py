"""The Gluon paged prefills (engine.kernels.prefill_gluon and, over an e4m3 cache, prefill_gluon_fp8; sm_90 only)
against the reference and the Triton kernel at Llama-3-8B heads: cached prefixes, chunks shorter than a tile, contexts
ending mid-block, block sizes 8-128 (16-128 for e4m3), and a cache whose slots past every context hold NaN. Skipped
without CUDA; Gluon does not run under TRITON_INTERPRET."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import engine.kernels as K
from engine.kernels.prefill import prefill_launches
from engine.kernels import reference as R
from tests.test_kernels import assert_close, block_tables_for, random_cache

pytestmark = pytest.mark.gpu
DEV = "cuda"
HQ, HKV, D = 32, 8, 128
BF16 = torch.bfloat16
SEQS = [(4096, 4096), (300, 5000), (1, 33), (129, 129), (200, 1000), (64, 64)]  # (q_len, context_len)


def hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def case(block_size: int, seqs=SEQS, poison: bool = False):
    g = torch.Generator(device=DEV).manual_seed(block_size + 7)
    ctx = [c for _, c in seqs]
    num_blocks = sum(-(-n // block_size) for n in ctx) + 4
    k_cache, v_cache = random_cache(num_blocks, block_size, HKV, D, BF16, DEV, g)
    tables = block_tables_for(ctx, block_size, num_blocks, DEV, torch.Generator().manual_seed(block_size))
    if poison:  # every slot past its sequence's context, in the sequence's last block, holds NaN
        for b, n in enumerate(ctx):
            if n % block_size:
                last = int(tables[b, (n - 1) // block_size])
                k_cache[last, n % block_size:] = float("nan")
                v_cache[last, n % block_size:] = float("nan")
    cu = torch.tensor([0] + torch.tensor([q for q, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    lens = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    q = torch.randn(int(cu[-1]), HQ, D, generator=g, device=DEV).to(BF16)
    return q, k_cache, v_cache, cu, lens, tables, max(q for q, _ in seqs)


@pytest.mark.skipif(not hopper(), reason="the Gluon prefill is sm_90 only")
@pytest.mark.parametrize("block_size, stages, pingpong, persistent", [
    (8, 2, False, 0), (16, 2, False, 0), (64, 2, False, 0), (128, 2, False, 0), (16, 3, False, 0), (16, 2, True, 0),
    (32, 3, True, 0), (16, 3, True, 132), (16, 2, False, 5), (32, 3, True, 7)])
def test_gluon_prefill_matches_the_reference_and_the_triton_kernel(block_size, stages, pingpong, persistent):
    """persistent: a program walks several work items (5 or 7 programs: dozens each, of every length, empty ones
    too), its pipeline's stages and phases carried from one to the next."""
    from engine.kernels.prefill_gluon import GluonPrefillConfig, gluon_paged_prefill

    q, k_cache, v_cache, cu, lens, tables, max_q = case(block_size)
    out = torch.full_like(q, float("nan"))
    gluon_paged_prefill(q, k_cache, v_cache, cu, lens, tables, D**-0.5, max_seqlen_q=max_q, out=out,
                        config=GluonPrefillConfig(num_stages=stages, pingpong=pingpong, persistent=persistent))
    ref = R.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, D**-0.5)
    what = f"bs={block_size} stages={stages} pingpong={pingpong} persistent={persistent}"
    assert_close(out, ref, BF16, f"gluon prefill {what}")
    triton_out = K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, D**-0.5, max_seqlen_q=max_q,
                                           config=K.PrefillConfig())
    assert_close(out, triton_out, BF16, f"gluon vs triton prefill {what}")


@pytest.mark.skipif(not hopper(), reason="the Gluon prefill is sm_90 only")
@pytest.mark.parametrize("block_size, persistent", [(16, 0), (32, 0), (16, 5)])
def test_gluon_prefill_ignores_nan_in_slots_past_the_context(block_size, persistent):
    from engine.kernels.prefill_gluon import DEFAULT_CONFIG, gluon_paged_prefill

    q, k_cache, v_cache, cu, lens, tables, max_q = case(block_size, poison=True)
    cfg = dataclasses.replace(DEFAULT_CONFIG, persistent=persistent)
    out = gluon_paged_prefill(q, k_cache, v_cache, cu, lens, tables, D**-0.5, max_seqlen_q=max_q, config=cfg)
    clean_k, clean_v = k_cache.nan_to_num(0.0), v_cache.nan_to_num(0.0)
    ref = R.paged_prefill_attention(q, clean_k, clean_v, cu, lens, tables, D**-0.5)
    assert_close(out, ref, BF16, f"gluon prefill over NaN-poisoned stale slots bs={block_size} {cfg}")


@pytest.mark.skipif(not hopper(), reason="the Gluon prefill is sm_90 only")
def test_gluon_prefill_refuses_what_it_cannot_run():
    from engine.kernels.prefill_gluon import gluon_paged_prefill, supported

    q, k_cache, v_cache, cu, lens, tables, max_q = case(16, seqs=[(16, 16)])
    assert supported(q, k_cache) is None
    launch = prefill_launches(q, k_cache, v_cache, cu, lens, tables, D**-0.5, torch.empty_like(q), max_seqlen_q=max_q)
    assert launch[0].fn.__name__ == "_gluon_prefill_kernel", "the default prefill on sm_90 is the Gluon kernel"
    explicit = prefill_launches(q, k_cache, v_cache, cu, lens, tables, D**-0.5, torch.empty_like(q),
                                  max_seqlen_q=max_q, config=K.PrefillConfig())
    assert explicit[0].fn.__name__ == "_prefill_kernel", "an explicit PrefillConfig runs the Triton kernel"
    from engine.kernels.prefill_gluon import PERSISTENT_MAX_Q, default_config

    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    assert default_config(q.device, PERSISTENT_MAX_Q).persistent == sms  # short chunks: one program per SM
    assert default_config(q.device, PERSISTENT_MAX_Q + 1).persistent == 0
    assert "head_dim" in supported(q[..., :64], k_cache[..., :64])
    assert "16-bit" in supported(q, k_cache.to(torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="gluon prefill"):
        gluon_paged_prefill(q.float(), k_cache, v_cache, cu, lens, tables, D**-0.5, max_seqlen_q=max_q)


def fp8_case(block_size: int, seqs=SEQS, poison: bool = False):
    """case() with its cache stored as the engine stores an e4m3 cache (per-tensor scales amax / 448, V's blocks
    transposed); poison: the slots past each context in its last block hold NaN bits (0x7F) in K and V."""
    q, k_cache, v_cache, cu, lens, tables, max_q = case(block_size, seqs)
    ks, vs = ((c.abs().amax().float() / 448.0).reshape(1) for c in (k_cache, v_cache))
    k8, v8 = R.fp8_cache_of(k_cache, ks, v=False), R.fp8_cache_of(v_cache, vs, v=True)
    if poison:
        from engine.kernels.cache import v_token_major

        for b, n in enumerate(lens.tolist()):
            if n % block_size:
                last = int(tables[b, (n - 1) // block_size])
                for view in (k8, v_token_major(v8)):
                    view.view(torch.uint8)[last, n % block_size:] = 0x7F
    return q, k8, v8, ks, vs, cu, lens, tables, max_q


@pytest.mark.skipif(not hopper(), reason="the Gluon prefill is sm_90 only")
@pytest.mark.parametrize("block_size, spec", [
    (16, "3p"), (16, "2s3"), (32, "3ps3"), (64, "2ps3"), (128, "3s4"), (16, "3p@132"), (16, "2@5"), (32, "3ps4@7"),
    (16, "3ps2"), (128, "2ps2@5"), (64, "3ps2")])
def test_gluon_fp8_prefill_matches_the_triton_fp8_kernel_and_the_reference(block_size, spec):
    """The same numerics as the Triton kernel's fp8 default (q and P rounded to e4m3): against the fp32 reference on
    the dequantised cache with q rounded per row, within P's rounding bound (tests/gpu/test_fp8_gpu.py), and
    against the Triton kernel's output. Launches as bench.fp8 --gluon names them."""
    from bench.fp8 import gluon_fp8_config
    from engine.kernels.prefill import FP8_PREFILL_CONFIG
    from engine.kernels.prefill_gluon_fp8 import gluon_fp8_paged_prefill
    from tests.gpu.test_fp8_gpu import assert_prefill_close
    from tests.test_fp8_kv import rowwise_e4m3

    q, k8, v8, ks, vs, cu, lens, tables, max_q = fp8_case(block_size)
    out = torch.full_like(q, float("nan"))
    cfg = gluon_fp8_config(spec)
    gluon_fp8_paged_prefill(q, k8, v8, cu, lens, tables, D**-0.5, ks, vs, max_seqlen_q=max_q, out=out, config=cfg)
    what = f"gluon fp8 prefill bs={block_size} {cfg}"
    ref = R.paged_prefill_attention(rowwise_e4m3(q), k8, v8, cu, lens, tables, D**-0.5, ks, vs)
    assert_prefill_close(out, ref, FP8_PREFILL_CONFIG, q, k8, v8, cu, lens, tables, ks, vs, what)
    triton_out = K.paged_prefill_attention(q, k8, v8, cu, lens, tables, D**-0.5, max_seqlen_q=max_q,
                                           k_scale=ks, v_scale=vs, config=FP8_PREFILL_CONFIG)
    diff = (out.float() - triton_out.float()).abs()
    print(f"\n{what}: vs the Triton fp8 kernel max |diff| {diff.max().item():.3g}, mean {diff.mean().item():.3g}")
    assert_prefill_close(out, triton_out.float(), FP8_PREFILL_CONFIG, q, k8, v8, cu, lens, tables, ks, vs,
                         f"{what} vs the Triton fp8 kernel")


@pytest.mark.skipif(not hopper(), reason="the Gluon prefill is sm_90 only")
@pytest.mark.parametrize("block_size, persistent", [(16, 0), (32, 0), (16, 5)])
def test_gluon_fp8_prefill_ignores_nan_in_slots_past_the_context(block_size, persistent):
    from engine.kernels.prefill import FP8_PREFILL_CONFIG
    from engine.kernels.prefill_gluon_fp8 import DEFAULT_CONFIG, gluon_fp8_paged_prefill
    from tests.gpu.test_fp8_gpu import assert_prefill_close
    from tests.test_fp8_kv import rowwise_e4m3

    q, k8, v8, ks, vs, cu, lens, tables, max_q = fp8_case(block_size, poison=True)
    cfg = dataclasses.replace(DEFAULT_CONFIG, persistent=persistent)
    out = gluon_fp8_paged_prefill(q, k8, v8, cu, lens, tables, D**-0.5, ks, vs, max_seqlen_q=max_q, config=cfg)
    clean_k, clean_v = (c.view(torch.uint8).masked_fill(c.view(torch.uint8) == 0x7F, 0).view(c.dtype)
                        for c in (k8, v8))
    ref = R.paged_prefill_attention(rowwise_e4m3(q), clean_k, clean_v, cu, lens, tables, D**-0.5, ks, vs)
    assert_prefill_close(out, ref, FP8_PREFILL_CONFIG, q, clean_k, clean_v, cu, lens, tables, ks, vs,
                         f"gluon fp8 prefill over NaN-poisoned stale slots bs={block_size} {cfg}")


@pytest.mark.skipif(not hopper(), reason="the Gluon prefill is sm_90 only")
def test_gluon_fp8_prefill_is_the_fp8_default_and_refuses_what_it_cannot_run():
    from engine.kernels.prefill_gluon_fp8 import gluon_fp8_paged_prefill, supported

    q, k8, v8, ks, vs, cu, lens, tables, max_q = fp8_case(16, seqs=[(16, 16)])
    assert supported(q, k8) is None
    launch = prefill_launches(q, k8, v8, cu, lens, tables, D**-0.5, torch.empty_like(q), max_seqlen_q=max_q,
                              k_scale=ks, v_scale=vs)
    assert launch[0].fn.__name__ == "_gluon_fp8_prefill_kernel", "the default fp8 prefill on sm_90 is Gluon's"
    explicit = prefill_launches(q, k8, v8, cu, lens, tables, D**-0.5, torch.empty_like(q), max_seqlen_q=max_q,
                                k_scale=ks, v_scale=vs, config=K.PrefillConfig(qk_fp8=True, pv_fp8=True))
    assert explicit[0].fn.__name__ == "_prefill_kernel", "an explicit PrefillConfig runs the Triton kernel"
    assert "16..128" in supported(q, fp8_case(8, seqs=[(16, 16)])[1])
    assert "e4m3" in supported(q, k8.to(BF16))
    with pytest.raises(ValueError, match="gluon fp8 prefill"):
        gluon_fp8_paged_prefill(q, k8.to(BF16), v8, cu, lens, tables, D**-0.5, ks, vs, max_seqlen_q=max_q)
