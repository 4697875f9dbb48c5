"""Kernel benchmark (GPU): paged decode and prefill attention against their ceilings, and a full
decode step of the Llama-3-8B-shaped model.

    python -m bench.kernels --out bench/results/kernels-h200-DATE.json [--tune] [--skip-model]
    python -m bench.kernels --prefill-only --prefill-configs persistent --out OUT.json   # default vs persistent grid

Shapes: Llama-3-8B attention (32 query heads, 8 KV heads, head dim 128), bf16, block size 16, random
data, block tables shuffled over the physical blocks. Decode methods, side by side on the same data:
  ours          paged_decode_attention (default config, automatic splits; --tune also sweeps configs)
  ours_graph    the same call replayed from a CUDA graph (as the engine runs decode)
  sdpa          torch SDPA on contiguous K/V [B, Hkv, ctx, D] with enable_gqa=True (no repeated KV),
                FlashAttention backend where it accepts the call (the backend used is recorded)
  gather_sdpa   gather the paged blocks into contiguous K/V, then the same SDPA (naive paged)
  flashinfer    BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True) on the same paged cache,
                when flashinfer imports (else the reason is recorded)
Prefill (PREFILL_SHAPES: 1x4096, 8x2048, 1x16384 causal tokens, each whole prompt in the paged cache):
  ours          paged_prefill_attention (default config: on an sm_90 GPU the Gluon kernel,
                engine.kernels.prefill_gluon; --tune sweeps the Triton kernel's PREFILL_CONFIGS and the persistent-grid
                variants, each launch checked; --prefill-configs persistent sweeps only the default and those)
  triton        where ours is the Gluon kernel: the Triton kernel's default (PrefillConfig()) beside it
  gluon         --prefill-gluon LAUNCHES: the Gluon kernel at each launch given (stages, ping-pong, persistent grid)
  sdpa          torch SDPA on contiguous Q/K/V with enable_gqa=True, every backend that accepts it, best kept
  flashinfer    BatchPrefillWithPagedKVCacheWrapper (causal, NHD, page size 16, backend "auto") on the same
                paged cache, when flashinfer imports
Each method's output is compared with SDPA's (max abs diff in the JSON). The JSON's "prefill_cases" lists the
three shapes; "prefill" repeats the first (1x4096), the one case older files and the dashboard read. --prefill-only
skips the rest;
--warm-flashinfer only builds FlashInfer's JIT modules (run it in the background before a timed run).
Timing: triton.testing.do_bench, median; it clears the L2 (a 256 MB write) before every repetition,
so no run reads K/V from cache. TB/s = K and V bytes read / time; TFLOP/s = 4 * B * Hq * ctx * D / time
(decode) or 2 * T^2 * Hq * D / time (causal prefill, half the square).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import engine.kernels as K
from engine.kernels import prefill_gluon
from engine.kernels.prefill import prefill_launches
from engine.model import AttentionMetadata, LlamaModel
from pagesim.outputs import check_output_file
from pagesim.specs import get_model

HQ, HKV, D, BS = 32, 8, 128, 16
BF16 = torch.bfloat16
DEV = "cuda"
DECODE_SHAPES = [(1, 32768), (16, 4096), (64, 4096), (256, 1024)]
PREFILL_SHAPES = [(1, 4096), (8, 2048), (1, 16384)]  # (prompts, tokens each), causal, whole prompt in the cache
STEP_BATCH, STEP_CONTEXT = 64, 1024
HBM_BYTES_PER_S = 4.3e12  # device-to-device copy measured on this H200 (KINDS.md), bytes read + written
DECODE_CONFIGS = [K.DecodeConfig(bn, w, s) for bn in (64, 128) for w in (4, 8) for s in (2, 3, 4)]
PREFILL_CONFIGS = [K.PrefillConfig(*c[:4], **c[4]) for c in [
    (128, 128, 8, 3, {"longest_first": False, "int32_offsets": False}), (128, 128, 8, 3, {"int32_offsets": False}),
    (128, 128, 8, 3, {}), (128, 128, 8, 2, {}), (128, 128, 8, 4, {}), (128, 64, 8, 3, {}), (64, 64, 4, 2, {}),
    (128, 128, 8, 3, {"pack_gqa": True}), (128, 128, 8, 4, {"pack_gqa": True})]]
PERSISTENT_PER_SM = (1, 2)  # the persistent-grid variants' programs per SM (132 and 264 on an H200)


def persistent_configs(sms: int) -> list:
    """The default launch with a persistent grid of sms and 2 * sms programs, each with and without the next tile's Q
    prefetched (PrefillConfig.persistent, prefetch_q)."""
    return [K.PrefillConfig(persistent=k * sms, prefetch_q=p) for k in PERSISTENT_PER_SM for p in (False, True)]


def prefill_sweep(which: str | None, tune: bool, sms: int) -> list:
    """The prefill configs timed besides the default: --prefill-configs persistent: the default and the persistent
    variants only (a short call); else with --tune PREFILL_CONFIGS and the persistent variants; else none."""
    if which == "persistent":
        return [K.PrefillConfig(), *persistent_configs(sms)]
    return [*PREFILL_CONFIGS, *persistent_configs(sms)] if tune else []


def seconds(fn, rep_ms: int = 200) -> float:
    return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median") * 1e-3


def graph_of(fn):
    """fn captured in a CUDA graph (after a warm-up run on a side stream); returns replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


SDPA_TRIES = [("flash", [SDPBackend.FLASH_ATTENTION]), ("cudnn", [SDPBackend.CUDNN_ATTENTION]),
              ("efficient", [SDPBackend.EFFICIENT_ATTENTION]), ("math", [SDPBackend.MATH])]


def sdpa(backends, q, k, v, causal):
    with sdpa_kernel(backends):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def sdpa_variants(q, k, v, causal) -> dict:
    """{backend name: fn} for every SDPA backend (not math) that accepts (q, k, v) with enable_gqa."""
    out = {}
    for name, backends in SDPA_TRIES[:-1]:
        try:
            sdpa(backends, q, k, v, causal)
            torch.cuda.synchronize()
            out[name] = lambda backends=backends: sdpa(backends, q, k, v, causal)
        except Exception:  # noqa: BLE001 (a backend that refuses the call is left out)
            continue
    return out


def timed(fn, rep_ms: int = 200) -> dict:
    """Median seconds of eager calls and of CUDA-graph replays (None where capture fails)."""
    out = {"eager": seconds(fn, rep_ms)}
    try:
        out["graph"] = seconds(graph_of(fn), rep_ms)
    except Exception as e:  # noqa: BLE001 (recorded, not fatal)
        out["graph"], out["graph_error"] = None, f"{type(e).__name__}: {str(e)[:200]}"
    return out


def load_flashinfer():
    try:
        import flashinfer
        return flashinfer, None
    except Exception as e:  # noqa: BLE001 (any import failure is recorded, not fatal)
        return None, f"{type(e).__name__}: {e}"


def flashinfer_decode(flashinfer, q, k_cache, v_cache, tables, scale, graph: bool):
    batch, pages = tables.shape
    indptr = torch.arange(batch + 1, dtype=torch.int32, device=DEV) * pages
    indices = tables.flatten().contiguous()
    last = torch.full((batch,), BS, dtype=torch.int32, device=DEV)
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device=DEV)
    extra = dict(use_cuda_graph=True, paged_kv_indptr_buffer=indptr.clone(), paged_kv_indices_buffer=indices.clone(),
                 paged_kv_last_page_len_buffer=last.clone()) if graph else {}
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True, **extra)
    wrapper.plan(indptr, indices, last, HQ, HKV, D, BS, pos_encoding_mode="NONE", q_data_type=BF16,
                 kv_data_type=BF16, sm_scale=scale)
    return lambda: wrapper.run(q, (k_cache, v_cache))


def decode_case(batch: int, ctx: int, tune: bool, flashinfer) -> dict:
    """All methods on one (batch, context); primary times are CUDA-graph replays (GPU time, as a
    serving engine runs decode), eager times beside them (they include Python launch overhead)."""
    g = torch.Generator(device=DEV).manual_seed(batch * 7 + ctx)
    pages = ctx // BS
    num_blocks = batch * pages
    k_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    v_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    tables = torch.randperm(num_blocks, generator=g, device=DEV).view(batch, pages).to(torch.int32)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=DEV)
    q = torch.randn((batch, HQ, D), generator=g, device=DEV, dtype=BF16)
    scale = D**-0.5
    kv_bytes = 2 * batch * ctx * HKV * D * 2
    flops = 4 * batch * HQ * ctx * D
    row = {"batch": batch, "context": ctx, "kv_bytes": kv_bytes, "timings": {}, "notes": {}}
    q4 = q[:, :, None]  # [B, Hq, 1, D]

    def contiguous(cache):
        return cache[tables.long()].view(batch, ctx, HKV, D).transpose(1, 2)

    k_contig, v_contig = contiguous(k_cache).contiguous(), contiguous(v_cache).contiguous()
    variants = sdpa_variants(q4, k_contig, v_contig, causal=False)
    expected = next(iter(variants.values()))()[:, :, 0]
    for name, fn in variants.items():
        row["timings"][f"sdpa_{name}"] = timed(fn)
    del k_contig, v_contig, variants
    for name, backends in SDPA_TRIES[:-1]:
        if f"sdpa_{name}" in row["timings"]:
            row["timings"][f"gather_sdpa_{name}"] = timed(
                lambda backends=backends: sdpa(backends, q4, contiguous(k_cache), contiguous(v_cache), False))

    def ours(cfg=None, splits=None):
        return K.paged_decode_attention(q, k_cache, v_cache, tables, lens, scale, num_splits=splits, config=cfg)

    auto = K.default_num_splits(batch, HKV, pages * BS, q.device)
    row["notes"]["auto_splits"] = auto
    row["notes"]["ours_max_abs_diff_vs_sdpa"] = (ours().float() - expected.float()).abs().max().item()
    row["timings"]["ours"] = timed(ours)
    if tune:
        sweep = []
        split_options = sorted({max(1, auto // 2), auto, 2 * auto, 4 * auto} if auto > 1 else {1, 2})
        for cfg in DECODE_CONFIGS:
            for splits in split_options:
                try:
                    err = (ours(cfg, splits).float() - expected.float()).abs().max().item()
                    fn = graph_of(lambda cfg=cfg, splits=splits: ours(cfg, splits))
                    t = seconds(fn, 60) if err < 0.05 else None
                except Exception as e:  # noqa: BLE001 (a config that fails to compile is skipped)
                    err, t = repr(e)[:200], None
                sweep.append({"config": dataclasses.asdict(cfg), "splits": splits, "graph_s": t, "err": err})
        best = min((s for s in sweep if s["graph_s"]), key=lambda s: s["graph_s"])
        row["tune"] = {"sweep": sweep, "best": best}
        row["timings"]["ours_best"] = {"graph": best["graph_s"]}

    if flashinfer is not None:
        try:
            fi = flashinfer_decode(flashinfer, q, k_cache, v_cache, tables, scale, graph=False)
            row["notes"]["flashinfer_max_abs_diff_vs_sdpa"] = (fi().float() - expected.float()).abs().max().item()
            row["timings"]["flashinfer"] = {"eager": seconds(fi)}
            fig = flashinfer_decode(flashinfer, q, k_cache, v_cache, tables, scale, graph=True)
            row["timings"]["flashinfer"]["graph"] = seconds(graph_of(fig))
        except Exception as e:  # noqa: BLE001
            row["notes"]["flashinfer_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    summarize(row, kv_bytes, flops)
    return row


def summarize(row: dict, kv_bytes: int, flops: int) -> None:
    """Best SDPA / gather backend by graph time, TB/s and TFLOP/s per method and mode, target ratios."""
    t = row["timings"]
    for prefix in ("sdpa", "gather_sdpa"):
        names = [k for k in t if k.startswith(prefix + "_") and t[k].get("graph")]
        best = min(names, key=lambda k: t[k]["graph"])
        row["notes"][f"{prefix}_best_backend"] = best[len(prefix) + 1:]
        t[prefix] = dict(t[best])
    row["tb_per_s"] = {m: {mode: kv_bytes / s / 1e12 for mode, s in v.items() if isinstance(s, float)}
                       for m, v in t.items()}
    row["tflop_per_s"] = {m: {mode: flops / s / 1e12 for mode, s in v.items() if isinstance(s, float)}
                          for m, v in t.items()}
    ours = t["ours"]["graph"]
    row["ratios_graph"] = {f"ours_vs_{m}": t[m]["graph"] / ours for m in ("sdpa", "gather_sdpa", "flashinfer")
                           if t.get(m, {}).get("graph")}


def flashinfer_prefill(flashinfer, q, k_cache, v_cache, tables, t_len: int, scale: float, graph: bool):
    """BatchPrefillWithPagedKVCacheWrapper (causal, NHD, backend "auto") over the same paged cache; returns
    (run, backend chosen)."""
    batch, pages = tables.shape
    i32 = dict(dtype=torch.int32, device=DEV)
    qo_indptr = torch.arange(batch + 1, **i32) * t_len
    kv_indptr = torch.arange(batch + 1, **i32) * pages
    indices = tables.flatten().contiguous()
    last = torch.full((batch,), BS, **i32)
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device=DEV)
    extra = dict(use_cuda_graph=True, qo_indptr_buf=qo_indptr.clone(), paged_kv_indptr_buf=kv_indptr.clone(),
                 paged_kv_indices_buf=indices.clone(), paged_kv_last_page_len_buf=last.clone()) if graph else {}
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", **extra)
    wrapper.plan(qo_indptr, kv_indptr, indices, last, HQ, HKV, D, BS, causal=True, pos_encoding_mode="NONE",
                 sm_scale=scale, q_data_type=BF16, kv_data_type=BF16)
    return (lambda: wrapper.run(q, (k_cache, v_cache))), getattr(wrapper, "_backend", None)


def gluon_config(spec: str):
    """A --prefill-gluon launch: STAGES, then 'p' for ping-pong, then '@N' for a persistent grid of N programs
    (e.g. 3p@132)."""
    from engine.kernels.prefill_gluon import GluonPrefillConfig

    head, _, persistent = spec.partition("@")
    return GluonPrefillConfig(num_stages=int(head.rstrip("p")), pingpong=head.endswith("p"),
                              persistent=int(persistent or 0))


def prefill_case(batch: int, t_len: int, configs: list, flashinfer, gluon_configs: list = ()) -> dict:
    """Causal prefill of `batch` prompts of t_len tokens, each whole prompt in the paged cache (shuffled
    blocks); primary times are CUDA-graph replays, eager beside them. Every method's output (every sweep
    launch too: `configs`, none for no sweep; the Gluon kernel's `gluon_configs`, the first timed as "gluon") is
    checked against SDPA's."""
    g = torch.Generator(device=DEV).manual_seed(5 + batch * 131 + t_len)
    pages = t_len // BS
    num_blocks = batch * pages
    k_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    v_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    tables = torch.randperm(num_blocks, generator=g, device=DEV).view(batch, pages).to(torch.int32)
    q = torch.randn((batch * t_len, HQ, D), generator=g, device=DEV, dtype=BF16)
    cu = torch.arange(batch + 1, dtype=torch.int32, device=DEV) * t_len
    lens = torch.full((batch,), t_len, dtype=torch.int32, device=DEV)
    scale = D**-0.5
    flops = 2 * batch * t_len * t_len * HQ * D
    row = {"batch": batch, "tokens": t_len, "flops": flops, "timings": {}, "notes": {}}

    def contiguous(cache):
        return cache[tables.long()].view(batch, t_len, HKV, D).transpose(1, 2).contiguous()

    q4 = q.view(batch, t_len, HQ, D).transpose(1, 2).contiguous()
    variants = sdpa_variants(q4, contiguous(k_cache), contiguous(v_cache), causal=True)
    expected = next(iter(variants.values()))().transpose(1, 2).reshape(batch * t_len, HQ, D).float()

    def err(out) -> float:
        return (out.float() - expected).abs().max().item()

    for name, fn in variants.items():
        row["timings"][f"sdpa_{name}"] = timed(fn)
        row["notes"][f"sdpa_{name}_max_abs_diff_vs_first"] = err(fn().transpose(1, 2).reshape(batch * t_len, HQ, D))
    del variants

    def ours(cfg=None):
        return K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, scale, max_seqlen_q=t_len,
                                         config=cfg)

    row["notes"]["ours_max_abs_diff_vs_sdpa"] = err(ours())
    row["timings"]["ours"] = timed(ours)
    (launch,) = prefill_launches(q, k_cache, v_cache, cu, lens, tables, scale, torch.empty_like(q), max_seqlen_q=t_len)
    row["notes"]["ours_kernel"] = "gluon" if launch.fn is prefill_gluon.KERNEL else "triton"
    if row["notes"]["ours_kernel"] == "gluon":  # the Triton kernel beside it (an explicit PrefillConfig)
        row["notes"]["triton_max_abs_diff_vs_sdpa"] = err(ours(K.PrefillConfig()))
        row["timings"]["triton"] = timed(lambda: ours(K.PrefillConfig()))
    t_ours = row["timings"]["ours"]["graph"]
    if configs:
        sweep = []
        for cfg in configs:
            try:
                e = err(ours(cfg))
                t = seconds(graph_of(lambda cfg=cfg: ours(cfg)), 100) if e < 0.05 else None
            except Exception as ex:  # noqa: BLE001 (a config that fails to compile is recorded and skipped)
                e, t = f"{type(ex).__name__}: {str(ex)[:300]}", None
            sweep.append({"config": dataclasses.asdict(cfg), "graph_s": t, "err": e,
                          "tflop_per_s": flops / t / 1e12 if t else None})
            vs = f" ({t_ours / t:.3f}x the default's speed)" if t and t_ours else ""
            print(f"  ({batch}, {t_len}) {tuple(dataclasses.asdict(cfg).values())}: "
                  + (f"{flops / t / 1e12:.0f} TFLOP/s{vs}" if t else f"err {e}"), flush=True)
        best = min((s for s in sweep if s["graph_s"]), key=lambda s: s["graph_s"])
        row["tune"] = {"sweep": sweep, "best": best}
        row["timings"]["ours_best"] = {"graph": best["graph_s"]}
    for i, gcfg in enumerate(gluon_configs):
        from engine.kernels.prefill_gluon import gluon_paged_prefill

        def gluon(gcfg=gcfg):
            return gluon_paged_prefill(q, k_cache, v_cache, cu, lens, tables, scale, max_seqlen_q=t_len, config=gcfg)

        name = "gluon" if i == 0 else f"gluon_{i}"
        try:
            row["notes"][f"{name}_config"] = dataclasses.asdict(gcfg)
            row["notes"][f"{name}_max_abs_diff_vs_sdpa"] = e = err(gluon())
            if e < 0.05:
                row["timings"][name] = timed(gluon)
            print(f"  ({batch}, {t_len}) {name} {tuple(dataclasses.asdict(gcfg).values())}: err {e:.4f}"
                  + (f", {flops / row['timings'][name]['graph'] / 1e12:.0f} TFLOP/s" if name in row["timings"]
                     else ""), flush=True)
        except Exception as ex:  # noqa: BLE001 (recorded; the other methods still run)
            row["notes"][f"{name}_error"] = f"{type(ex).__name__}: {str(ex)[:500]}"
            print(f"  ({batch}, {t_len}) {name}: {row['notes'][f'{name}_error']}", flush=True)
    if flashinfer is not None:
        try:
            fi, backend = flashinfer_prefill(flashinfer, q, k_cache, v_cache, tables, t_len, scale, graph=False)
            row["notes"]["flashinfer_backend"] = backend
            row["notes"]["flashinfer_max_abs_diff_vs_sdpa"] = err(fi())
            row["timings"]["flashinfer"] = {"eager": seconds(fi)}
            fig, _ = flashinfer_prefill(flashinfer, q, k_cache, v_cache, tables, t_len, scale, graph=True)
            row["timings"]["flashinfer"]["graph"] = seconds(graph_of(fig))
        except Exception as e:  # noqa: BLE001
            row["notes"]["flashinfer_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    t = row["timings"]
    names = [k for k in t if k.startswith("sdpa_") and t[k].get("graph")]
    best_sdpa = min(names, key=lambda k: t[k]["graph"])
    row["notes"]["sdpa_best_backend"] = best_sdpa[len("sdpa_"):]
    t["sdpa"] = dict(t[best_sdpa])
    row["tflop_per_s"] = {m: {mode: flops / x / 1e12 for mode, x in v.items() if isinstance(x, float)}
                          for m, v in t.items()}
    ours_g = t["ours"]["graph"]
    row["ratios_graph"] = {f"ours_vs_{m}": t[m]["graph"] / ours_g for m in ("sdpa", "flashinfer")
                           if t.get(m, {}).get("graph")}
    for g in (k for k in t if (k.startswith("gluon") or k == "triton") and t[k].get("graph")):
        row["ratios_graph"].update({f"{g}_vs_{m}": t[m]["graph"] / t[g]["graph"]
                                    for m in ("ours", "sdpa", "flashinfer") if t.get(m, {}).get("graph")})
    return row


def warm_flashinfer() -> None:
    """Build (JIT) FlashInfer's decode and prefill modules for this benchmark's shapes on a tiny problem, so that
    a concurrent run finds them built (start it in the background before the timed run)."""
    flashinfer, error = load_flashinfer()
    if flashinfer is None:
        print("flashinfer:", error)
        return
    k_cache = torch.randn((8, BS, HKV, D), device=DEV, dtype=BF16)
    v_cache = torch.randn_like(k_cache)
    tables = torch.arange(8, dtype=torch.int32, device=DEV).view(2, 4)
    for name, fn in (("decode", lambda: flashinfer_decode(flashinfer, torch.randn((2, HQ, D), device=DEV, dtype=BF16),
                                                          k_cache, v_cache, tables, D**-0.5, False)()),
                     ("prefill", lambda: flashinfer_prefill(flashinfer, torch.randn((128, HQ, D), device=DEV, dtype=BF16),
                                                            k_cache, v_cache, tables, 64, D**-0.5, False)[0]())):
        start = datetime.datetime.now()
        try:
            fn()
            torch.cuda.synchronize()
            print(f"flashinfer {name} built in {(datetime.datetime.now() - start).total_seconds():.0f} s", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"flashinfer {name} failed: {type(e).__name__}: {str(e)[:500]}", flush=True)


def model_step_case() -> dict:
    spec = get_model("llama-3-8b")
    torch.cuda.synchronize()
    start = datetime.datetime.now()
    model = LlamaModel.random(spec, device=DEV, dtype=BF16, seed=0)
    torch.cuda.synchronize()
    build_s = (datetime.datetime.now() - start).total_seconds()
    batch, ctx = STEP_BATCH, STEP_CONTEXT
    pages = ctx // BS
    g = torch.Generator(device=DEV).manual_seed(1)
    kv_cache = model.allocate_kv_cache(batch * pages, BS).normal_(generator=g)
    tables = torch.randperm(batch * pages, generator=g, device=DEV).view(batch, pages).to(torch.int32)
    pos = torch.full((batch,), ctx - 1, dtype=torch.int64, device=DEV)
    attn = AttentionMetadata(slot_mapping=tables[:, (ctx - 1) // BS].long() * BS + (ctx - 1) % BS,
                             num_prefill_tokens=0, num_decode_tokens=batch,
                             context_lens_decode=torch.full((batch,), ctx, dtype=torch.int32, device=DEV),
                             block_tables_decode=tables)
    ids = torch.randint(0, spec.vocab_size, (batch,), generator=g, device=DEV)

    def step():
        return model.compute_logits(model.forward(ids, pos, kv_cache, attn))

    logits = step()
    finite = bool(logits.isfinite().all())
    eager = seconds(step)
    graph = seconds(graph_of(step))
    embed_bytes = spec.vocab_size * spec.hidden_size * 2  # the embedding table is not read, only 64 rows
    weight_bytes = spec.weight_bytes - embed_bytes
    kv_bytes = batch * ctx * spec.kv_bytes_per_token
    floor = (weight_bytes + kv_bytes) / HBM_BYTES_PER_S
    return {"batch": batch, "context": ctx, "build_s": build_s, "logits_finite": finite,
            "weight_bytes_read": weight_bytes, "kv_bytes_read": kv_bytes, "floor_s": floor,
            "eager_s": eager, "graph_s": graph, "eager_ratio": eager / floor, "graph_ratio": graph / floor}


def ceilings() -> dict:
    x = torch.randn(1 << 30, device=DEV, dtype=BF16)  # 2 GiB
    y = torch.empty_like(x)
    copy_s = seconds(lambda: y.copy_(x))
    del x, y
    a, b = (torch.randn(8192, 8192, device=DEV, dtype=BF16) for _ in range(2))
    mm_s = seconds(lambda: a @ b)
    return {"copy_tb_per_s": 2 * (1 << 31) / copy_s / 1e12, "bf16_matmul_tflop_per_s": 2 * 8192**3 / mm_s / 1e12}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tune", action="store_true", help="sweep kernel configs and split counts")
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--prefill-only", action="store_true", help="prefill cases only (no ceilings, decode, model)")
    parser.add_argument("--prefill-configs", choices=["persistent"], default=None,
                        help="persistent: time (at each prefill shape) only the default prefill and its persistent-"
                             "grid variants (PrefillConfig.persistent = 1 and 2 x the SM count, with and without "
                             "prefetch_q), each launch checked; without --tune's other prefill configs")
    parser.add_argument("--prefill-gluon", default=None, metavar="LAUNCHES",
                        help="also time the Gluon prefill (engine.kernels.prefill_gluon, sm_90): comma-separated "
                             "launches, each a stage count, 'p' for FA3's ping-pong and '@N' for a persistent grid of "
                             "N programs (e.g. 2,3p,3p@132; the first is reported as 'gluon'), each launch checked")
    parser.add_argument("--commit", default=None, help="the git commit measured (recorded in the JSON)")
    parser.add_argument("--warm-flashinfer", action="store_true", help="only build FlashInfer's modules, then exit")
    parser.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = parser.parse_args()
    if args.warm_flashinfer:
        warm_flashinfer()
        return
    check_output_file(parser, args.out, args.force)
    if args.prefill_only and Path(args.out).name.startswith("kernels-"):
        parser.error(f"--out {args.out}: a --prefill-only result has no decode table, and the dashboard lists "
                     "kernels-*.json as full kernel results; name it prefill-gluon-*.json (as bench/results does)")
    if not torch.cuda.is_available():
        sys.exit("error: bench.kernels needs a CUDA GPU (none is visible to torch)")
    gluon_configs = []
    if args.prefill_gluon:
        from engine.kernels.prefill_gluon import GluonPrefillConfig
        try:
            gluon_configs = [gluon_config(x) for x in args.prefill_gluon.split(",")]
        except ValueError:
            parser.error(f"--prefill-gluon {args.prefill_gluon!r}: expected launches such as 2,3p,3p@132")
    flashinfer, fi_error = load_flashinfer()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    configs = prefill_sweep(args.prefill_configs, args.tune, sms)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "gpu": torch.cuda.get_device_name(), "sms": sms,
              "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
              "flashinfer": getattr(flashinfer, "__version__", None), "flashinfer_import_error": fi_error,
              "commit": args.commit,
              "command": " ".join([sys.executable.split("/")[-1], "-m", "bench.kernels", *sys.argv[1:]]),
              "defaults": {"decode": dataclasses.asdict(K.DecodeConfig()),
                           "prefill": dataclasses.asdict(K.PrefillConfig())},
              "prefill_sweep": [dataclasses.asdict(c) for c in configs]}

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    if not args.prefill_only:
        result["ceilings"] = ceilings()
        result["decode"] = []
        for batch, ctx in DECODE_SHAPES:
            result["decode"].append(decode_case(batch, ctx, args.tune, flashinfer))
            torch.cuda.empty_cache()
            save()
    result["prefill_cases"] = []
    for batch, t_len in PREFILL_SHAPES:
        result["prefill_cases"].append(prefill_case(batch, t_len, configs, flashinfer, gluon_configs))
        result["prefill"] = result["prefill_cases"][0]  # the 1x4096 case, where readers of one case look
        torch.cuda.empty_cache()
        save()
    if not args.skip_model and not args.prefill_only:
        try:
            result["model_step"] = model_step_case()
        except Exception:  # noqa: BLE001
            result["model_step"] = {"error": traceback.format_exc()[-2000:]}
    save()
    print_table(result)


def print_table(r: dict) -> None:
    print(f"\n{r['gpu']}  torch {r['torch']}  triton {r['triton']}  flashinfer {r['flashinfer']}")
    if "ceilings" in r:
        c = r["ceilings"]
        print(f"copy {c['copy_tb_per_s']:.2f} TB/s  matmul {c['bf16_matmul_tflop_per_s']:.0f} TFLOP/s")
    cols = [("ours", "graph"), ("ours_best", "graph"), ("sdpa", "graph"), ("gather_sdpa", "graph"),
            ("flashinfer", "graph"), ("ours", "eager"), ("sdpa", "eager"), ("flashinfer", "eager")]
    if r.get("decode"):
        print("decode TB/s (graph replay | eager)  " + " ".join(f"{m[:11]:>11}" for m, _ in cols))
    for d in r.get("decode", []):
        tb = d["tb_per_s"]
        cells = " ".join(f"{tb[m][mode]:11.2f}" if mode in tb.get(m, {}) else f"{'-':>11}" for m, mode in cols)
        best = d.get("tune", {}).get("best", {})
        print(f"  ({d['batch']:>3}, {d['context']:>5})  splits {d['notes']['auto_splits']:>3}       {cells}"
              f"  sdpa={d['notes']['sdpa_best_backend']}"
              + (f" best: {best.get('splits')} {tuple(best['config'].values())}" if best else ""))
    pcols = [("ours", "graph"), ("triton", "graph"), ("gluon", "graph"), ("sdpa", "graph"), ("flashinfer", "graph"),
             ("ours", "eager"), ("sdpa", "eager"), ("flashinfer", "eager")]
    print("prefill causal TFLOP/s (graph | eager) " + " ".join(f"{m[:10]:>10}" for m, _ in pcols))
    for p in r.get("prefill_cases", []):
        tf = p["tflop_per_s"]
        cells = " ".join(f"{tf[m][mode]:10.0f}" if mode in tf.get(m, {}) else f"{'-':>10}" for m, mode in pcols)
        best = p.get("tune", {}).get("best")
        print(f"  ({p['batch']}, {p['tokens']:>5})" + " " * 23 + cells + f"  sdpa={p['notes']['sdpa_best_backend']}"
              f" fi={p['notes'].get('flashinfer_backend', p['notes'].get('flashinfer_error', '-'))}"
              + (f" best: {tuple(best['config'].values())}" if best else ""))
    m = r.get("model_step")
    if m and "error" not in m:
        print(f"8B decode step B={m['batch']} ctx={m['context']}: graph {m['graph_s'] * 1e3:.2f} ms"
              f" ({m['graph_ratio']:.2f}x floor), eager {m['eager_s'] * 1e3:.2f} ms ({m['eager_ratio']:.2f}x),"
              f" floor {m['floor_s'] * 1e3:.2f} ms; weights built in {m['build_s']:.1f} s")
    elif m:
        print("model step failed:", m["error"][-500:])

if __name__ == "__main__":
    main()
