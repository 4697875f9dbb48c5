"""Request state, shared by the scheduler, the KV-cache managers and both executors.

A request's tokens are its prompt followed by the tokens it has generated.
`num_computed_tokens` of them have their K/V in the cache. A step computes
`num_new_tokens` more; when it reaches `num_tokens` the step samples one token.
The K/V of the very last sampled token is never written, so a request fills at
most `final_kv_len = prompt_len + output_len - 1` slots.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

from pagesim.utils import paused_gc


class RequestStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    SWAPPED = 2
    FINISHED = 3
    REJECTED = 4


# The same members as module constants, for the per-request paths: a member looked up on its Enum class is a dear
# attribute lookup (~1k instructions on Python 3.11), three per simulated request.
WAITING, RUNNING, SWAPPED, FINISHED, REJECTED = RequestStatus


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    arrival_time: float
    prompt_len: int
    output_len: int  # tokens the request generates (the trace's true output length)
    seq_no: int = 0  # position in the trace; gives requests a stable integer identity
    # Content keys of the prompt: token ids, or per-block hash ids of the trace at `hash_block_size`.
    prompt_token_ids: tuple[int, ...] | None = None
    prefix_hash_ids: tuple[int, ...] | None = None
    hash_block_size: int | None = None
    n: int = 1
    priority: int = 0
    parent_id: str | None = None  # set on the samples forked from a request with n > 1
    sample_index: int = 0  # 0 for the request itself, i for its i-th forked sample

    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)  # GPU block table
    cpu_block_ids: list[int] = field(default_factory=list)  # where a swapped-out request's blocks are
    block_hashes: list[bytes] = field(default_factory=list)  # prefix-cache keys of full blocks (block_hash.py), memoised

    # Metrics, in the executor's clock.
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    num_preemptions: int = 0
    num_prefix_hit_tokens: int = 0  # prompt tokens found in the prefix cache at first admission
    reject_reason: str | None = None

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def final_kv_len(self) -> int:
        return self.prompt_len + self.output_len - 1

    @property
    def is_finished(self) -> bool:
        return self.status >= FINISHED  # the module constant (a member looked up on the Enum: ~1k instructions)

    @property
    def is_decoding(self) -> bool:
        """True when the next step computes exactly the last sampled token."""
        return self.num_output_tokens > 0 and self.num_computed_tokens == self.num_tokens - 1

    def block_content_key(self, index: int, block_size: int) -> tuple[bytes, tuple[int, ...]]:
        """(kind, values): what identifies the tokens of block `index`, for prefix-cache keys.

        Full prompt blocks are keyed by their token ids (kind b"T") when the
        trace has them, else by the trace's per-block hash ids (b"H") that
        overlap the block's token range (re-blocking: a simulated block of size
        b covering tokens [i*b, (i+1)*b) is keyed by the trace hash ids of
        blocks i*b // H .. ((i+1)*b - 1) // H; the chain through the parent key
        makes equal ids at different depths differ). Other full prompt blocks
        get a key of the request (b"R": trace position, block index), shared by
        its forked samples; blocks reaching into generated tokens get a key of
        the sample (b"S"). Those hit only for the same request after a preemption.
        `block_hash._extend_by_content_ids` applies the b"T" and b"H" rules to a run
        of blocks at once: a change here goes there too (tests/test_prefix_cache.py
        holds the two equal).
        """
        start, end = index * block_size, (index + 1) * block_size
        if end <= self.prompt_len:
            ids = self.prompt_token_ids
            if ids is not None and end <= len(ids):
                return b"T", ids[start:end]
            hashes, h = self.prefix_hash_ids, self.hash_block_size
            if hashes is not None and h:
                lo, hi = start // h, (end - 1) // h
                if hi < len(hashes):
                    return b"H", hashes[lo : hi + 1]
            return b"R", (self.seq_no, index)
        return b"S", (self.seq_no, index, self.sample_index)


_ARRIVAL_TIME, _TRACE_ROW = attrgetter("arrival_time"), attrgetter("seq_no")


def in_arrival_order(requests) -> list[Request]:
    """The requests sorted by arrival time, trace order among equal times: sorted stably by trace row, then by time
    (a key of one number each is compared without a tuple a request: half the instructions of one sort by both)."""
    return sorted(sorted(requests, key=_TRACE_ROW), key=_ARRIVAL_TIME)


def requests_from_trace(trace) -> list[Request]:
    """Build requests from a `pagesim.traces.Trace`, in arrival order.

    Made column by column with the cyclic garbage collector paused: the requests hold no cycles, and a
    million of them (each with its lists) would otherwise trigger collections that rescan all made so far
    (5 of the 6 s it took for 1M requests)."""
    df = trace.df
    cols = df.columns
    num = len(df)

    def optional(name: str, convert, default):
        if name not in cols:
            return repeat(default, num)
        return map(convert, df[name].tolist())

    with paused_gc():
        return list(map(
            Request,
            map(str, df["request_id"].tolist()),
            map(float, df["arrival_time_s"].tolist()),
            map(int, df["prompt_len"].tolist()),
            map(int, df["output_len"].tolist()),
            range(num),  # seq_no
            optional("prompt_token_ids", _as_tuple, None),
            optional("prefix_hash_ids", _as_tuple, None),
            repeat(trace.hash_block_size, num),
            optional("n", lambda v: int(v) if v == v else 1, 1),  # NaN: the default
            optional("priority", lambda v: int(v) if v == v else 0, 0),
        ))


def _as_tuple(value) -> tuple[int, ...] | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return tuple(int(v) for v in value)
