"""Swap path, side by side (GPU; round 9's first call): the zero-copy swap kernel (engine.kernels.swap) against the
per-block asynchronous copies it replaced (the DMA path, copied here), bf16 and fp8 Llama-3-8B blocks, batches of
scattered blocks as measure_swap_bandwidth takes them (every other CPU block: no runs), bit-exactness checked.

    python -m bench.swap_compare --out $OUT/swap_compare.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from engine.kernels.swap import _raw, _runs, cpu_cache_shape, measure_swap_bandwidth, swap_in, swap_out

LAYERS, HKV, D, BS = 32, 8, 128, 16


def swap_out_dma(kv_cache: torch.Tensor, cpu_cache: torch.Tensor, src_dst: torch.Tensor) -> None:
    """GPU block src_dst[i, 0] -> CPU block src_dst[i, 1]."""
    kv_cache, cpu_cache = _raw(kv_cache), _raw(cpu_cache)  # an fp8 cache moves as bytes
    if src_dst.numel() == 0:
        return
    pairs = src_dst.tolist()
    order = sorted(range(len(pairs)), key=lambda i: pairs[i][1])
    src = torch.tensor([pairs[i][0] for i in order], dtype=torch.int64).to(kv_cache.device, non_blocking=True)
    dst = [pairs[i][1] for i in order]
    staged = kv_cache.index_select(2, src).movedim(2, 0).contiguous()  # [M, L, 2, bs, Hkv, D]
    for pos, first, n in _runs(dst):
        cpu_cache[first:first + n].copy_(staged[pos:pos + n], non_blocking=True)


def swap_in_dma(cpu_cache: torch.Tensor, kv_cache: torch.Tensor, src_dst: torch.Tensor) -> None:
    """CPU block src_dst[i, 0] -> GPU block src_dst[i, 1]."""
    kv_cache, cpu_cache = _raw(kv_cache), _raw(cpu_cache)  # an fp8 cache moves as bytes
    if src_dst.numel() == 0:
        return
    pairs = src_dst.tolist()
    order = sorted(range(len(pairs)), key=lambda i: pairs[i][0])
    src = [pairs[i][0] for i in order]
    dst = torch.tensor([pairs[i][1] for i in order], dtype=torch.int64).to(kv_cache.device, non_blocking=True)
    staged = torch.empty((len(src), *cpu_cache.shape[1:]), dtype=cpu_cache.dtype, device=kv_cache.device)
    for pos, first, n in _runs(src):
        staged[pos:pos + n].copy_(cpu_cache[first:first + n], non_blocking=True)
    kv_cache.index_copy_(2, dst, staged.movedim(0, 2))




def timed(fn, repeats: int) -> tuple[float, float]:
    """(median wall seconds of a synchronised call, median seconds until the call returned to the host)."""
    fn()
    torch.cuda.synchronize()
    walls, enqueue = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        enqueue.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), statistics.median(enqueue)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    rows = []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        kv = torch.empty((LAYERS, 2, 512, BS, HKV, D), dtype=dtype, device="cuda")
        kv.view(torch.uint8).random_(0, 256)
        block_bytes = kv[:, :, 0].numel() * kv.element_size()
        for name in ("zero-copy", "dma"):
            calib = None
            if name == "zero-copy":
                calib = measure_swap_bandwidth(kv)
                print(f"{str(dtype)[6:]} measure_swap_bandwidth (64 blocks): out "
                      f"{calib['swap_out_bytes_per_s'] / 1e9:.1f} in {calib['swap_in_bytes_per_s'] / 1e9:.1f} GB/s",
                      flush=True)
            for n in (8, 64, 256):
                cpu = torch.empty(cpu_cache_shape(tuple(kv.shape), 2 * n), dtype=dtype, pin_memory=True)
                gpu_ids = torch.linspace(0, 511, n).long()
                pairs = torch.stack([gpu_ids, torch.arange(0, 2 * n, 2)], dim=1)
                back = torch.stack([torch.arange(0, 2 * n, 2), torch.randperm(512)[:n]], dim=1)
                out_fn, in_fn = (swap_out, swap_in) if name == "zero-copy" else (swap_out_dma, swap_in_dma)
                before = kv.view(torch.uint8)[:, :, gpu_ids].clone()
                t_out, q_out = timed(lambda: out_fn(kv, cpu, pairs), args.repeats)
                t_in, q_in = timed(lambda: in_fn(cpu, kv, back), args.repeats)
                torch.cuda.synchronize()
                exact = torch.equal(kv.view(torch.uint8)[:, :, back[:, 1].cuda()], before)
                nbytes = n * block_bytes
                row = {"dtype": str(dtype), "method": name, "blocks": n, "bytes": nbytes, "out_s": t_out,
                       "in_s": t_in, "out_enqueue_s": q_out, "in_enqueue_s": q_in,
                       "out_gb_per_s": nbytes / t_out / 1e9, "in_gb_per_s": nbytes / t_in / 1e9,
                       "round_trip_bit_exact": exact, "measure_swap_bandwidth": calib}
                rows.append(row)
                print(f"{str(dtype)[6:]:14s} {name:9s} {n:4d} blocks: out {row['out_gb_per_s']:5.1f} GB/s "
                      f"(enqueue {q_out * 1e6:6.0f} of {t_out * 1e6:6.0f} us)  in {row['in_gb_per_s']:5.1f} GB/s "
                      f"(enqueue {q_in * 1e6:6.0f} of {t_in * 1e6:6.0f} us)  exact {exact}", flush=True)
        del kv
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0 if all(r["round_trip_bit_exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
