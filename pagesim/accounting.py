"""Memory accounting: every KV slot of the GPU cache is in exactly one category.

The words follow the README (Architecture, Memory accounting) and Fig. 2 of the PagedAttention paper:

- used: holds live K/V of a token;
- reserved: allocated to a request for tokens it will still produce;
- internal_fragmentation: allocated to a request but never to be filled;
- external_fragmentation: free, but in pieces too small for the request at the
  head of the queue (contiguous baseline only);
- free;
- cached: free for allocation but still holding a reusable prefix block.

The six always sum to `total`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from operator import attrgetter

_computed = attrgetter("num_computed_tokens")

CATEGORIES = ("used", "reserved", "internal_fragmentation", "external_fragmentation", "free", "cached")


@dataclass(slots=True)  # a value, never changed after it is made (not frozen: a frozen init costs 2.5x, once per step)
class MemoryAccounting:
    used: int
    reserved: int
    internal_fragmentation: int
    external_fragmentation: int
    free: int
    cached: int
    total: int

    def __post_init__(self) -> None:
        # every category >= 0 and the six sum to total (written out: the recorder builds one per step)
        used, reserved, internal, external, free, cached = (self.used, self.reserved, self.internal_fragmentation,
                                                            self.external_fragmentation, self.free, self.cached)
        if (used < 0 or reserved < 0 or internal < 0 or external < 0 or free < 0 or cached < 0
                or used + reserved + internal + external + free + cached != self.total):
            raise AssertionError(f"memory accounting broken: {self}")

    @property
    def allocated(self) -> int:
        return self.used + self.reserved + self.internal_fragmentation

    @property
    def token_state_fraction(self) -> float:
        """Used slots / allocated slots (PagedAttention's 'token states' share); 1.0 when nothing is allocated."""
        return self.used / self.allocated if self.allocated else 1.0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def internal_slots(request, block_size: int) -> int:
    """Slots of the request's block table past its final length (final_kv_len): its internal fragmentation.
    The managers keep the sum over the tables they hand out as the tables change (one term per change)."""
    b = len(request.block_ids) * block_size - request.prompt_len - request.output_len + 1
    return b if b > 0 else 0


def num_computed(running) -> int:
    """Tokens with live K/V summed over the requests (a C-level sum: it runs at every recorded step)."""
    return sum(map(_computed, running))


def request_slots(running, block_size: int) -> tuple[int, int]:
    """(tokens with live K/V, allocated slots beyond the final length) summed over requests' block tables.

    Shared blocks are counted once per table that holds them; callers correct for sharing. (The managers'
    accounting keeps the second sum as the tables change; this full pass is the reference the tests hold it to.)
    """
    used = internal = 0
    for r in running:
        used += r.num_computed_tokens
        # slots beyond final_kv_len (= prompt_len + output_len - 1, inlined: this runs every step)
        b = len(r.block_ids) * block_size - r.prompt_len - r.output_len + 1
        if b > 0:
            internal += b
    return used, internal
