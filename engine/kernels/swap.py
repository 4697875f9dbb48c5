"""Swap between the GPU's paged cache and a pinned, block-major CPU cache at the host link's speed.

The CPU cache is block-major, [num_cpu_blocks, num_layers, 2, block_size, num_kv_heads, head_dim], so
one block (every layer, K and V) is one contiguous run of host memory. A swap gathers the blocks into
a block-major staging tensor on the GPU (one index_select), then moves each block with one
asynchronous copy between pinned host memory and the device; runs of consecutive CPU block ids are
merged into one copy. No host synchronisation: the copies are ordered on the current stream, and no
one reads the CPU cache but a later swap-in on the same stream. Bit-exact both ways.
"""

from __future__ import annotations

import torch


def cpu_cache_shape(kv_cache_shape: tuple[int, ...], num_cpu_blocks: int) -> tuple[int, ...]:
    """Block-major CPU cache shape for a GPU cache [L, 2, num_blocks, bs, Hkv, D]."""
    layers, two, _, *rest = kv_cache_shape
    return (num_cpu_blocks, layers, two, *rest)


def _runs(ids: list[int]) -> list[tuple[int, int, int]]:
    """(position in the list, first id, length) of each run of consecutive ids."""
    out, i = [], 0
    while i < len(ids):
        j = i + 1
        while j < len(ids) and ids[j] == ids[j - 1] + 1:
            j += 1
        out.append((i, ids[i], j - i))
        i = j
    return out


def _raw(cache: torch.Tensor) -> torch.Tensor:
    return cache.view(torch.uint8) if cache.dtype == torch.float8_e4m3fn else cache


def swap_out(kv_cache: torch.Tensor, cpu_cache: torch.Tensor, src_dst: torch.Tensor) -> None:
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


def swap_in(cpu_cache: torch.Tensor, kv_cache: torch.Tensor, src_dst: torch.Tensor) -> None:
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
