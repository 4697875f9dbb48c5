"""The engine's host offload tier: a pinned, block-major host cache (one block, every layer, K and V, is one contiguous
run of host memory, as the swap path's CPU cache), filled and read by the plans' `blocks_to_store` (GPU -> host) and
`blocks_to_load` (host -> GPU) (pagesim/kv_offload.py decides which).

Stores: the step's blocks are gathered on the device on the compute stream, before the forward pass (so a block
freed and reused by this step is read before it is overwritten: `gather`), then copied straight into the pinned host
cache on a side stream, one asynchronous copy per run of consecutive host blocks, issued once the forward pass is
queued (`send`), so that the host time of issuing them overlaps the forward rather than delays its launch. Steps
with stores still run ~0.3 ms over their prediction, which prices stores as overlapped (bench/store_steps.py: every
offload window since round 18, 0.17-0.51 ms + 2.9-6.2 us a block with the copies issued before the forward; round
37's, after this change, 0.30 ms + 2.3 us): the gather before the forward (a pageable index copy, index_select, then a
block-major copy) takes ~0.18 ms of device time even for one block. Loads wait (on the
device, no host sync) for the stores in flight, then read the host blocks straight into their GPU blocks, on the
compute stream before the forward that reads them (engine.kernels.swap.swap_in: one zero-copy kernel, or with
`by_copies` the copy engine into a staging buffer and that kernel from it, where the host answers the GPU's own
reads slowly; stores stay on the copy engine, where the swap kernel would take SMs beside the forward). A load never
reads a host block a store of the same step writes (the offload manager holds loading blocks, and loads only blocks
stored in an earlier step). No host synchronisation anywhere; `finish()` waits for the stores, for readers of the
host cache on the CPU (tests, benchmarks). Copies move raw bytes (an fp8 cache too): a round trip is bit-exact. On
the CPU everything is synchronous.
"""

from __future__ import annotations

import torch

from engine.kernels.cache import raw_view
from engine.kernels.swap import cpu_cache_shape, runs_of, swap_in, swap_out


class HostTier:
    def __init__(self, like: torch.Tensor, num_blocks: int, by_copies: bool = False):
        self.on_cuda = like.device.type == "cuda"
        self.by_copies = by_copies  # loads through the copy engine (swap_in's by_copies)
        self.cache = torch.empty(cpu_cache_shape(tuple(like.shape), num_blocks), dtype=like.dtype, device="cpu",
                                 pin_memory=self.on_cuda)  # [num_blocks, L, 2, block_size, Hkv, D]
        self.stream = torch.cuda.Stream(like.device) if self.on_cuda else None
        self._stored: torch.cuda.Event | None = None  # the last stores' copies
        self._staged: tuple | None = None  # gathered blocks not yet sent: (staged, host block ids, gathered event)

    def store(self, kv_cache: torch.Tensor, pairs: list[tuple[int, int]]) -> None:
        """Copy GPU blocks pairs[i][0] to host blocks pairs[i][1]: gathered now, landing asynchronously."""
        self.gather(kv_cache, pairs)
        self.send()

    def gather(self, kv_cache: torch.Tensor, pairs: list[tuple[int, int]]) -> None:
        """The first half of `store`: GPU blocks pairs[i][0] gathered now, on the current stream (on the CPU: stored
        at once); `send` copies them to host blocks pairs[i][1]. One gather at a time: a second sends the first."""
        if not pairs:
            return
        if not self.on_cuda:
            swap_out(kv_cache, self.cache, torch.tensor(pairs, dtype=torch.int64))
            return
        self.send()
        pairs = sorted(pairs, key=lambda p: p[1])
        src = torch.tensor([p[0] for p in pairs], dtype=torch.int64).to(kv_cache.device, non_blocking=True)
        staged = raw_view(kv_cache).index_select(2, src).movedim(2, 0).contiguous()  # compute stream, before the forward
        gathered = torch.cuda.Event()
        gathered.record(torch.cuda.current_stream(kv_cache.device))
        self._staged = (staged, [p[1] for p in pairs], gathered)

    def send(self) -> None:
        """The second half of `store`: the gathered blocks' copies into the host cache, issued on the side stream
        after their gather; nothing when nothing is gathered."""
        if self._staged is None:
            return
        staged, dst, gathered = self._staged
        self._staged = None
        host = raw_view(self.cache)
        self.stream.wait_event(gathered)
        with torch.cuda.stream(self.stream):
            for pos, first, n in runs_of(dst):
                host[first:first + n].copy_(staged[pos:pos + n], non_blocking=True)
            staged.record_stream(self.stream)
            self._stored = torch.cuda.Event()
            self._stored.record(self.stream)

    def finish(self) -> None:
        """Wait (on the host) until every store so far has landed in the host cache (sending any gathered first)."""
        self.send()
        if self._stored is not None:
            self._stored.synchronize()

    def load(self, kv_cache: torch.Tensor, pairs: list[tuple[int, int]]) -> None:
        """Copy host blocks pairs[i][0] into GPU blocks pairs[i][1], ordered before the next forward pass."""
        if not pairs:
            return
        if self._stored is not None:  # a load may read a block stored one plan earlier, possibly still in flight
            torch.cuda.current_stream(kv_cache.device).wait_event(self._stored)
        swap_in(self.cache, kv_cache, torch.tensor(pairs, dtype=torch.int64), self.by_copies)
