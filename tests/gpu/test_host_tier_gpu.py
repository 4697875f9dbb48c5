"""engine/host_tier.py on a GPU: pinned host blocks, stores on a side stream overlapping later work on the
compute stream, loads ordered after them (a device-side wait) and before the next forward; every round trip
bit-exact. Skipped without CUDA.

    python -m pytest -q -p no:cacheprovider tests/gpu/test_host_tier_gpu.py
"""

from __future__ import annotations

import pytest
import torch

from engine.host_tier import HostTier

pytestmark = pytest.mark.gpu
SHAPE = (4, 2, 64, 16, 8, 128)  # [layers, K/V, blocks, block_size, kv heads, head dim]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_host_tier_round_trip_is_bit_exact_while_the_compute_stream_overwrites_the_blocks(dtype):
    kv = torch.empty(SHAPE, dtype=dtype, device="cuda")
    kv.view(torch.uint8).random_(0, 256, generator=torch.Generator(device="cuda").manual_seed(0))
    host = HostTier(kv, 32)
    assert host.cache.is_pinned() and host.stream is not None
    gpu_ids, host_ids = [3, 17, 40, 63, 0], [31, 2, 9, 0, 5]
    before = kv.view(torch.uint8)[:, :, gpu_ids].clone()
    host.store(kv, list(zip(gpu_ids, host_ids)))
    # the step's forward pass reuses the stored blocks at once: the store gathered them before, on this stream
    kv.view(torch.uint8)[:, :, gpu_ids] = 0xAA
    host.finish()
    # block-major host cache: host block i is cache[i] = [layers, K/V, block_size, kv heads, head dim]
    assert torch.equal(host.cache.view(torch.uint8)[host_ids], before.movedim(2, 0).cpu()), "a stored block changed bits"
    targets = [5, 6, 7, 8, 9]
    host.load(kv, list(zip(host_ids, targets)))
    torch.cuda.current_stream().synchronize()
    assert torch.equal(kv.view(torch.uint8)[:, :, targets], before), "a loaded block differs from the stored one"


def test_host_tier_load_of_a_block_whose_store_is_in_flight_waits_for_it():
    kv = torch.randn(SHAPE, device="cuda").to(torch.bfloat16)
    host = HostTier(kv, 16)
    want = kv[:, :, [1, 2]].clone()
    host.store(kv, [(1, 10), (2, 11)])  # copies in flight on the side stream
    host.load(kv, [(10, 20), (11, 21)])  # waits for them on the device, not on the host
    torch.cuda.synchronize()
    assert torch.equal(kv[:, :, [20, 21]], want)


def test_host_tier_sends_gathered_blocks_after_the_forward_overwrote_them():
    """The executor's order: gather before the forward, the forward overwrites the blocks, send after it; a second
    gather before a send sends the first; finish sends what is left. The host holds the gathered bytes each time."""
    kv = torch.empty(SHAPE, dtype=torch.bfloat16, device="cuda")
    kv.view(torch.uint8).random_(0, 256, generator=torch.Generator(device="cuda").manual_seed(1))
    host = HostTier(kv, 32)
    first = kv.view(torch.uint8)[:, :, [4, 5, 6]].clone()
    host.gather(kv, [(4, 20), (5, 21), (6, 3)])  # runs 3 and 20-21: two copies
    kv.view(torch.uint8)[:, :, [4, 5, 6]] = 0x55  # the forward reuses them
    host.send()
    second = kv.view(torch.uint8)[:, :, [7, 8]].clone()
    host.gather(kv, [(7, 8), (8, 9)])
    kv.view(torch.uint8)[:, :, [7, 8]] = 0x66
    third = kv.view(torch.uint8)[:, :, [9]].clone()
    host.gather(kv, [(9, 30)])  # sends the second gather first
    host.finish()  # sends the third
    cache = host.cache.view(torch.uint8)
    assert torch.equal(cache[[20, 21, 3]], first.movedim(2, 0).cpu())
    assert torch.equal(cache[[8, 9]], second.movedim(2, 0).cpu())
    assert torch.equal(cache[[30]], third.movedim(2, 0).cpu())
