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

Swap-in has a second path, through the copy engine (`swap_in(..., by_copies=True)`): GPU-initiated reads of host
memory run at what the host's root complex allows them, 45-50 GB/s on most machines but 31-34 GB/s on some H100
hosts (round 36: the swap kernel's swap-in at 31.7-33.7 GB/s where `cudaMemcpyAsync` of 2 MiB pieces reached 45 and
larger ones 53-55 on the same machine; its swap-out, posted writes, at 49-51), while the DMA engines read at the
link's rate everywhere. That path copies each run of consecutive host blocks into a device staging buffer (one
asynchronous copy per run, STAGING_BLOCKS blocks at a time) and scatters them with the same kernel, device to
device. `measure_swap_bandwidth` times both, and the executor takes the faster (GPUExecutor.swap_in_by).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.cache import raw_view


# blocks staged on the device per round of swap-in copies (64 MiB of Llama-3-8B bf16 blocks)
STAGING_BLOCKS = 32


def runs_of(ids: list[int]) -> list[tuple[int, int, int]]:
    """(position in the list, first id, length) of each run of consecutive ids."""
    out, i = [], 0
    while i < len(ids):
        j = i + 1
        while j < len(ids) and ids[j] == ids[j - 1] + 1:
            j += 1
        out.append((i, ids[i], j - i))
        i = j
    return out


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
    assert kv_cache.device.type == "cpu" or cpu_cache.is_pinned() or cpu_cache.device == kv_cache.device, (
        "the CPU cache must be pinned (zero-copy)")
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


def swap_in(cpu_cache: torch.Tensor, kv_cache: torch.Tensor, src_dst: torch.Tensor, by_copies: bool = False) -> None:
    """CPU block src_dst[i, 0] -> GPU block src_dst[i, 1]; by_copies: through the copy engine and a staging buffer
    (_swap_in_by_copies), else the kernel reads the pinned host cache itself."""
    if not src_dst.numel():
        return
    if by_copies:
        _swap_in_by_copies(cpu_cache, kv_cache, src_dst[:, 1], src_dst[:, 0])
    else:
        _swap(kv_cache, cpu_cache, src_dst[:, 1], src_dst[:, 0], False)


def _swap_in_by_copies(cpu_cache: torch.Tensor, kv_cache: torch.Tensor, gpu_ids: torch.Tensor,
                       cpu_ids: torch.Tensor) -> None:
    """Host blocks cpu_ids -> GPU blocks gpu_ids: up to STAGING_BLOCKS at a time, each run of consecutive host blocks
    one asynchronous copy into a device buffer laid out as the host cache, then the swap kernel from that buffer.
    All on the current stream, so each round's copies wait for the previous round's kernel to have read the buffer."""
    host = raw_view(cpu_cache)
    n = gpu_ids.numel()
    staging = torch.empty((min(n, STAGING_BLOCKS), *cpu_cache.shape[1:]), dtype=cpu_cache.dtype,
                          device=kv_cache.device)
    staged = raw_view(staging)
    src = cpu_ids.tolist()
    for start in range(0, n, STAGING_BLOCKS):
        part = src[start:start + STAGING_BLOCKS]
        for pos, first, k in runs_of(part):
            staged[pos:pos + k].copy_(host[first:first + k], non_blocking=True)
        _swap(kv_cache, staging[:len(part)], gpu_ids[start:start + len(part)], torch.arange(len(part)), False)


def measure_swap_bandwidth(kv_cache: torch.Tensor, num_blocks: int = 64, repeats: int = 5,
                           cpu_cache: torch.Tensor | None = None) -> dict:
    """Bytes per second of swap_out and of swap_in both ways (the kernel's reads, the copy engine's) of num_blocks
    scattered blocks (every other block of a pinned CPU cache of 2 * num_blocks blocks, the GPU blocks spread over the
    cache); CUDA only. `swap_in_bytes_per_s` is the faster swap-in, `swap_in_by` says which ("kernel" or "copies").
    `cpu_cache`: a pinned, block-major cache to time with (its blocks and the GPU cache's are overwritten; the
    executor's own, before any run), num_blocks then at most half its blocks; else one is made for the measurement."""
    import time

    total = kv_cache.shape[2]
    num_blocks = min(num_blocks, total, num_blocks if cpu_cache is None else cpu_cache.shape[0] // 2)
    cpu = cpu_cache if cpu_cache is not None else torch.empty(
        cpu_cache_shape(tuple(kv_cache.shape), 2 * num_blocks), dtype=kv_cache.dtype, pin_memory=True)
    gpu_ids = torch.linspace(0, total - 1, num_blocks).long()
    pairs = torch.stack([gpu_ids, torch.arange(0, 2 * num_blocks, 2)], dim=1)  # every other CPU block: no runs
    block_bytes = kv_cache[:, :, 0].numel() * kv_cache.element_size()
    out = {}
    for name, fn in (("swap_out", lambda: swap_out(kv_cache, cpu, pairs)),
                     ("swap_in_kernel", lambda: swap_in(cpu, kv_cache, pairs.flip(1))),
                     ("swap_in_copies", lambda: swap_in(cpu, kv_cache, pairs.flip(1), by_copies=True))):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
        out[f"{name}_bytes_per_s"] = num_blocks * block_bytes * repeats / (time.perf_counter() - t0)
    by = "copies" if out["swap_in_copies_bytes_per_s"] > out["swap_in_kernel_bytes_per_s"] else "kernel"
    out.update(swap_in_bytes_per_s=out[f"swap_in_{by}_bytes_per_s"], swap_in_by=by, num_blocks=num_blocks,
               block_bytes=block_bytes)
    return out
