"""Token ids for requests whose trace carries no text, consistent with the scheduler's prefix-cache keys.

Prompt position p of a request gets its id from what identifies its content in
`Request.block_content_key`, so that a prefix-cache hit in the scheduler is a
hit on identical tokens in the engine:

1. `prompt_token_ids[p] % vocab_size` when the trace has token ids (real ids of
   a tokenizer for this vocabulary pass through unchanged);
2. else mix(trace hash id of block p // hash_block_size, p % hash_block_size)
   when the trace's hash ids cover p: two requests sharing a trace hash block
   get the same tokens there, whatever else differs;
3. else mix(seq_no, p): the request's own tokens (its forked samples share the
   seq_no and so the prompt).

The mix is splitmix64 (Steele et al., 2014), vectorised over numpy uint64 (which
wraps modulo 2**64), then taken modulo vocab_size. Each kind of key has its own
tag, so a hash-id key and a seq_no key never give the same stream.
"""

from __future__ import annotations

import numpy as np

from pagesim.request import Request

_MASK64 = (1 << 64) - 1
_TAG_HASH = np.uint64(0x9E3779B97F4A7C15)
_TAG_SEQ = np.uint64(0xD1B54A32D192ED03)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of each uint64 in x (a bijection of 64-bit integers)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _as_u64(values) -> np.ndarray:
    return np.array([int(v) & _MASK64 for v in values], dtype=np.uint64)


def _mixed_ids(keys: np.ndarray, offsets: np.ndarray, tag: np.uint64, vocab_size: int) -> np.ndarray:
    return (splitmix64(splitmix64(keys ^ tag) + offsets.astype(np.uint64)) % np.uint64(vocab_size)).astype(np.int64)


def prompt_token_ids(request: Request, vocab_size: int) -> np.ndarray:
    """The request's prompt as int64 token ids in [0, vocab_size), length prompt_len."""
    n = request.prompt_len
    out = np.empty(n, dtype=np.int64)
    p = np.arange(n, dtype=np.int64)
    todo = np.ones(n, dtype=bool)
    ids = request.prompt_token_ids
    if ids is not None:
        k = min(len(ids), n)
        out[:k] = _as_u64(ids[:k]) % np.uint64(vocab_size)
        todo[:k] = False
    hashes, h = request.prefix_hash_ids, request.hash_block_size
    if hashes is not None and h:
        covered = todo & (p < len(hashes) * h)
        if covered.any():
            pos = p[covered]
            keys = _as_u64(hashes)[pos // h]
            out[covered] = _mixed_ids(keys, pos % h, _TAG_HASH, vocab_size)
            todo &= ~covered
    if todo.any():
        pos = p[todo]
        keys = np.full(len(pos), int(request.seq_no) & _MASK64, dtype=np.uint64)
        out[todo] = _mixed_ids(keys, pos, _TAG_SEQ, vocab_size)
    return out
