"""Content-addressed prefix-cache keys, vLLM style: a block's key hashes its parent's key and its content.

`hash_block_tokens(parent, kind, values)` is XXH3-128 (the 16-byte digest) of
`parent (16 bytes) | kind (1 byte) | encoding (1 byte) | values`, where the
values are packed as signed 64-bit integers (or, for larger ones, as decimal
text under another encoding byte), as vLLM's `xxhash` prefix-caching hash. The
input is unambiguous, so two blocks get the same key only if their whole chains
of content are equal or the 128-bit hash collides (~n^2 / 2^129 for n distinct
blocks: 2.5e-27 for a 10k-request k-shot replay's 1.3M). It is not a cryptographic
hash: a trace built to collide could; nothing a simulator replays is. Keys are
bytes: the same in every process, whatever PYTHONHASHSEED is. (BLAKE2b-128 until
round 49: ~0.5 us a block against ~0.13 us, a fifth of a prefix-heavy replay.)

What a block's content is (token ids, a trace's hash ids, or a key unique to
the request) is `Request.block_content_key`'s decision. Keys are computed once
per full block and kept on the request (`request.block_hashes`).

`ideal_prefix_cache_hit_rate` is the hit rate with unlimited memory, computed
from the keys alone: requests in arrival order, each finding the leading blocks
of its prompt that any earlier request's prompt held.
"""

from __future__ import annotations

from array import array
from xxhash import xxh3_128_digest

from pagesim.request import Request, in_arrival_order

BlockHash = bytes
ROOT_HASH: BlockHash = bytes(16)  # the parent of a request's first block


def hash_block_tokens(parent: BlockHash, kind: bytes, values: tuple[int, ...]) -> BlockHash:
    """The key of a block whose content is `values` of the given one-byte `kind`, following `parent`."""
    try:
        data = b"q" + array("q", values).tobytes()
    except OverflowError:  # an id beyond int64: spell it out
        data = b"s" + ",".join(map(str, values)).encode()
    return xxh3_128_digest(parent + kind + data)


def request_block_hashes(request: Request, num_blocks: int, block_size: int) -> list[BlockHash]:
    """Keys of (at least) the request's first `num_blocks` blocks, memoised on the request."""
    hashes = request.block_hashes
    if len(hashes) < num_blocks:
        _extend_by_content_ids(request, hashes, num_blocks, block_size)
        parent = hashes[-1] if hashes else ROOT_HASH
        content = request.block_content_key
        for i in range(len(hashes), num_blocks):
            parent = hash_block_tokens(parent, *content(i, block_size))
            hashes.append(parent)
    return hashes


def _extend_by_content_ids(request: Request, hashes: list[BlockHash], num_blocks: int, block_size: int) -> None:
    """Append the keys of the next blocks whose content is a run of the request's token ids (b"T") or trace hash ids
    (b"H"), as `hash_block_tokens` makes them, with the ids packed once for the whole run (rather than block by block:
    1.3M blocks in a 10k-request k-shot replay). Blocks `block_content_key` keys otherwise, and ids
    beyond int64, are left to the per-block path."""
    first, prompt_len = len(hashes), request.prompt_len
    if first >= prompt_len // block_size:  # past the full prompt blocks (asked again as decode tokens fill blocks)
        return
    ids = request.prompt_token_ids
    if ids is not None:
        kind, last = b"T", min(num_blocks, min(prompt_len, len(ids)) // block_size)
        lo, hi = first * block_size, last * block_size
        step = 8 * block_size
        bounds = [(j, j + step) for j in range(0, (last - first) * step, step)]
    else:
        ids, h = request.prefix_hash_ids, request.hash_block_size
        if ids is None or not h:
            return
        kind, last = b"H", min(num_blocks, prompt_len // block_size, len(ids) * h // block_size)
        lo, hi = first * block_size // h, ((last * block_size - 1) // h + 1) if last > first else 0
        bounds = [(8 * (i * block_size // h - lo), 8 * (((i + 1) * block_size - 1) // h + 1 - lo))
                  for i in range(first, last)]
    if last <= first:
        return
    try:
        raw = array("q", ids[lo:hi]).tobytes()
    except OverflowError:
        return
    head, append = kind + b"q", hashes.append
    parent = hashes[-1] if hashes else ROOT_HASH
    for start, end in bounds:  # byte offsets into raw
        parent = xxh3_128_digest(parent + head + raw[start:end])
        append(parent)


def ideal_prefix_cache_hit_rate(requests: list[Request], block_size: int) -> float | None:
    """Prompt tokens found in the cache / prompt tokens, with unlimited memory and nothing evicted.

    Requests are taken in arrival order (ties by trace position); each hits the
    longest run of leading full blocks, at most `prompt_len - 1` tokens (the last
    prompt token is always computed), whose keys some earlier request's prompt
    held, and then adds its own full prompt blocks. This is the simulator's
    `prefix_cache_hit_rate` when memory never runs out and each request arrives
    after the earlier ones have computed their prompts; it bounds it otherwise.
    None for an empty trace. The requests' memoised keys are filled in.
    """
    seen: set[BlockHash] = set()
    prompt_tokens = hit_tokens = 0
    for r in in_arrival_order(requests):
        full = r.prompt_len // block_size
        hashes = request_block_hashes(r, full, block_size)[:full]
        hits = 0
        for h in hashes[: (r.prompt_len - 1) // block_size]:
            if h not in seen:
                break
            hits += 1
        prompt_tokens += r.prompt_len
        hit_tokens += hits * block_size
        seen.update(hashes)
    return hit_tokens / prompt_tokens if prompt_tokens else None
