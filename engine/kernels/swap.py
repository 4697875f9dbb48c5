"""Swap between the GPU's paged cache and a pinned, block-major CPU cache at the host link's speed.

The CPU cache is block-major, [num_cpu_blocks, num_layers, 2, block_size, num_kv_heads, head_dim], so one block
(every layer, K and V) is one contiguous run of host memory. A swap is one Triton kernel that reads the blocks where
they are and writes them where they go, the pinned host cache addressed directly by the GPU (zero-copy: pinned
memory is mapped into the device's address space, at the same address), one program per (block, layer, K or V) slab
of block_size * num_kv_heads * head_dim contiguous elements on both sides. So a swap costs one launch whatever its
block count, where the asynchronous copy per run of consecutive CPU blocks it replaced cost a fixed ~6 us of host
time each (a 1 MiB fp8 block paid it as often as a 2 MiB bf16 one): 64 scattered fp8 blocks now move at 47-48 GB/s
each way on the H200, 34.7 / 36.2 before (bench/NOTES.md, "Swap: one zero-copy kernel"). No host synchronisation:
the kernel is ordered on the current stream, and no one reads the CPU cache but a later swap-in on the same stream.
Bit-exact both ways (raw bytes). On a machine without CUDA the kernel runs under Triton's interpreter on the CPU
tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.cache import raw_view


def cpu_cache_shape(kv_cache_shape: tuple[int, ...], num_cpu_blocks: int) -> tuple[int, ...]:
    """Block-major CPU cache shape for a GPU cache [L, 2, num_blocks, bs, Hkv, D]."""
    layers, two, _, *rest = kv_cache_shape
    return (num_cpu_blocks, layers, two, *rest)


@triton.jit
def _swap_kernel(gpu, cpu, ids, num_gpu_blocks, SLABS: tl.constexpr, SLAB: tl.constexpr,
                 BLOCK: tl.constexpr, TO_CPU: tl.constexpr):
    """Program (i, slab): slab `slab` (layer * 2 + K/V) of GPU block ids[i, 0] <-> CPU block ids[i, 1], SLAB words
    contiguous on both sides (GPU [SLABS, num_gpu_blocks, SLAB], CPU [num_cpu_blocks, SLABS, SLAB]). The ids come
    as one [n, 2] tensor: no argument's alignment or value depends on the block count, so one variant per direction
    serves every swap (Triton specialises pointers on 16-byte alignment: two id rows of one [2, n] tensor gave odd
    counts their own variant, compiled inside a live run's first odd swap)."""
    i, slab = tl.program_id(0), tl.program_id(1)
    g = tl.load(ids + 2 * i).to(tl.int64)
    c = tl.load(ids + 2 * i + 1).to(tl.int64)
    g_base = (slab * num_gpu_blocks + g) * SLAB
    c_base = (c * SLABS + slab) * SLAB
    for w0 in tl.static_range(0, SLAB, BLOCK):
        w = w0 + tl.arange(0, BLOCK)
        ok = w < SLAB
        if TO_CPU:
            tl.store(cpu + c_base + w, tl.load(gpu + g_base + w, mask=ok), mask=ok)
        else:
            tl.store(gpu + g_base + w, tl.load(cpu + c_base + w, mask=ok), mask=ok)


def _words(cache: torch.Tensor) -> torch.Tensor:
    """The cache's bytes as the widest of int32 / int16 / uint8 that divides a row (head_dim elements)."""
    raw = raw_view(cache)
    row = raw.shape[-1] * raw.element_size()
    for dtype, size in ((torch.int32, 4), (torch.int16, 2)):
        if row % size == 0:
            return raw.view(dtype)
    return raw.view(torch.uint8)


def _swap(kv_cache: torch.Tensor, cpu_cache: torch.Tensor, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor,
          to_cpu: bool) -> None:
    assert kv_cache.is_contiguous() and cpu_cache.is_contiguous()
    assert kv_cache.device.type == "cpu" or cpu_cache.is_pinned(), "the CPU cache must be pinned (zero-copy)"
    gpu, cpu = _words(kv_cache), _words(cpu_cache)
    layers, two, num_gpu_blocks = gpu.shape[:3]
    slab = gpu[0, 0, 0].numel()
    block = min(triton.next_power_of_2(slab), 4096)
    ids = torch.stack([gpu_ids, cpu_ids], dim=1).to(kv_cache.device, torch.int64, non_blocking=True)
    _swap_kernel[(gpu_ids.numel(), layers * two)](gpu, cpu, ids, num_gpu_blocks, SLABS=layers * two,
                                                  SLAB=slab, BLOCK=block, TO_CPU=to_cpu, num_warps=4)


def swap_out(kv_cache: torch.Tensor, cpu_cache: torch.Tensor, src_dst: torch.Tensor) -> None:
    """GPU block src_dst[i, 0] -> CPU block src_dst[i, 1]."""
    if src_dst.numel():
        _swap(kv_cache, cpu_cache, src_dst[:, 0], src_dst[:, 1], True)


def swap_in(cpu_cache: torch.Tensor, kv_cache: torch.Tensor, src_dst: torch.Tensor) -> None:
    """CPU block src_dst[i, 0] -> GPU block src_dst[i, 1]."""
    if src_dst.numel():
        _swap(kv_cache, cpu_cache, src_dst[:, 1], src_dst[:, 0], False)


def measure_swap_bandwidth(kv_cache: torch.Tensor, num_blocks: int = 64, repeats: int = 5) -> dict:
    """Bytes per second of swap_out and swap_in of num_blocks scattered blocks (a pinned CPU cache of
    2 * num_blocks blocks, the GPU blocks spread over the cache); CUDA only."""
    import time

    total = kv_cache.shape[2]
    num_blocks = min(num_blocks, total)
    cpu = torch.empty(cpu_cache_shape(tuple(kv_cache.shape), 2 * num_blocks), dtype=kv_cache.dtype, pin_memory=True)
    gpu_ids = torch.linspace(0, total - 1, num_blocks).long()
    pairs = torch.stack([gpu_ids, torch.arange(0, 2 * num_blocks, 2)], dim=1)  # every other CPU block: no runs
    block_bytes = kv_cache[:, :, 0].numel() * kv_cache.element_size()
    out = {}
    for name, fn in (("swap_out", lambda: swap_out(kv_cache, cpu, pairs)),
                     ("swap_in", lambda: swap_in(cpu, kv_cache, pairs.flip(1)))):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
        out[f"{name}_bytes_per_s"] = num_blocks * block_bytes * repeats / (time.perf_counter() - t0)
    out.update(num_blocks=num_blocks, block_bytes=block_bytes)
    return out
