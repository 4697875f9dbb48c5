"""The engine's host offload tier: a pinned host copy of the KV-cache layout, filled and read by the plans'
`blocks_to_store` (GPU -> host) and `blocks_to_load` (host -> GPU) (pagesim/kv_offload.py decides which).

Stores: the step's blocks are gathered on the device on the compute stream, before the forward pass
(so a block freed and reused by this step is read before it is overwritten), then copied to pinned
memory on a side stream, overlapping the forward; the host scatter happens at the start of the next
step, after that copy's event (a store's blocks are loadable from the plan after the one that stores
them). Loads: the host blocks are gathered into pinned memory and copied on the compute stream,
before the forward that reads them. Copies move raw bytes (an fp8 cache too): a round trip is bit-exact.
On the CPU everything is synchronous.
"""

from __future__ import annotations

import torch

from engine.kernels.cache import swap_blocks


class HostTier:
    def __init__(self, like: torch.Tensor, num_blocks: int):
        shape = (*like.shape[:2], num_blocks, *like.shape[3:])
        self.on_cuda = like.device.type == "cuda"
        self.cache = torch.empty(shape, dtype=like.dtype, device="cpu", pin_memory=self.on_cuda)
        self.stream = torch.cuda.Stream(like.device) if self.on_cuda else None
        self._landing: tuple | None = None  # (event, pinned staging, host block ids) of the last step's stores

    def store(self, kv_cache: torch.Tensor, pairs: list[tuple[int, int]]) -> None:
        """Start copying GPU blocks pairs[i][0] to host blocks pairs[i][1]; they land by the next step."""
        self.finish()
        if not pairs:
            return
        idx = torch.tensor(pairs, dtype=torch.int64)
        if not self.on_cuda:
            swap_blocks(kv_cache, self.cache, idx)
            return
        raw = kv_cache.view(torch.uint8) if kv_cache.dtype == torch.float8_e4m3fn else kv_cache
        staged = raw.index_select(2, idx[:, 0].to(kv_cache.device))  # on the compute stream, before the forward
        self.stream.wait_stream(torch.cuda.current_stream(kv_cache.device))
        with torch.cuda.stream(self.stream):
            pinned = torch.empty(staged.shape, dtype=staged.dtype, pin_memory=True)
            pinned.copy_(staged, non_blocking=True)
            staged.record_stream(self.stream)
            event = torch.cuda.Event()
            event.record(self.stream)
        self._landing = (event, pinned, idx[:, 1])

    def finish(self) -> None:
        """Wait for the last step's stores and scatter them into the host cache."""
        if self._landing is None:
            return
        event, pinned, dst = self._landing
        event.synchronize()
        host = self.cache.view(torch.uint8) if self.cache.dtype == torch.float8_e4m3fn else self.cache
        host.index_copy_(2, dst, pinned)
        self._landing = None

    def load(self, kv_cache: torch.Tensor, pairs: list[tuple[int, int]]) -> None:
        """Copy host blocks pairs[i][0] into GPU blocks pairs[i][1], ordered before the next forward pass."""
        if pairs:
            self.finish()  # a load may read a block whose store is landing now (stored one plan earlier)
            swap_blocks(self.cache, kv_cache, torch.tensor(pairs, dtype=torch.int64))
