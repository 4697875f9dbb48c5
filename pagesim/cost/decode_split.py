"""The decode kernel's split rule, owned here and imported by both the kernel and the profile cost model.

engine/kernels/decode.py splits each sequence's keys over `num_splits` programs
per (sequence, KV head) so that rows * kv_heads * splits makes about two waves
over the SMs: ceil(2 * SMs / (rows * kv_heads)), at most MAX_SPLITS, and at
most max_context // MIN_TOKENS_PER_SPLIT when the kernel knows its table width
(the cost model leaves that cap out: at 8192 tokens it is 32, which binds for a
single row only). Torch-free: pagesim/cost/profile.py evaluates it on numpy arrays.
"""

from __future__ import annotations

import numpy as np

MAX_SPLITS = 64
MIN_TOKENS_PER_SPLIT = 256
FP8_FEW_SPLITS = 8  # an fp8 cache keeps the rule's count up to this many splits
FP8_SPLIT_FACTOR = 4  # ... and above it takes this many times more, at least MIN_TOKENS_PER_SPLIT tokens each


def num_decode_splits(rows, num_kv_heads: int, num_sms: int, max_context: int | None = None):
    """Splits per sequence for `rows` decode rows (an int, or an int numpy array); 1 when num_sms is 0 (unknown)."""
    cap = MAX_SPLITS if max_context is None else min(MAX_SPLITS, max_context // MIN_TOKENS_PER_SPLIT)
    programs = 2 * num_sms
    if isinstance(rows, np.ndarray):
        if not programs:
            return np.ones_like(rows)
        return np.maximum(1, np.minimum(-(-programs // np.maximum(rows * num_kv_heads, 1)), cap))
    if not programs:
        return 1
    return max(1, min(-(-programs // max(rows * num_kv_heads, 1)), cap))


def fp8_decode_splits(splits: int, max_context: int) -> int:
    """The split count an fp8 cache's decode runs at, from num_decode_splits(...)'s `splits` and the table width:
    a few long sequences get FP8_SPLIT_FACTOR times the splits (bench/NOTES.md, "FP8 cache: round 6"). The
    profile cost model keeps the shared count, as it leaves out the table-width cap it would need here."""
    if splits <= FP8_FEW_SPLITS:
        return splits
    return max(splits, min(FP8_SPLIT_FACTOR * splits, max_context // MIN_TOKENS_PER_SPLIT))


# Resident programs per SM of the model-dtype (bf16) decode launches of engine/kernels/decode.py (DecodeConfig's
# defaults: 4 warps, 3 stages; BLOCK_N 128 when the sequence is split, 64 when it is not), (split, unsplit), as timed
# on an H100 (132 SMs; the H200 has the same SM): a graph decode step's device time jumps by a round of programs where
# its launch's programs (rows x KV heads x splits) pass SMs x this many, and the next rows fill that round at little
# more cost. Round 40: 24 -> 25 rows of the 32-row graph at 4,096 tokens a row (2 splits: 384 -> 400 programs against
# 396), +0.58 ms where a row adds 0.15-0.19 ms; round 41: 65 -> 68 rows of the 128-row graph at 2,560 tokens (one
# split: 520 -> 544 programs against 528), +1.93 ms (bench/decode_rows.py, bench/results/decode-rows-h100-*).
# The fp8 cache's launches (other tiles and warps) are not measured: their profiles price no rounds.
DECODE_PROGRAMS_PER_SM = (3, 4)


def decode_waves(rows, num_kv_heads: int, splits, num_sms: int, per_sm: tuple[int, int]):
    """Rounds of the decode kernel's programs over the SMs: ceil(rows * kv_heads * splits / (num_sms * slots)), slots
    per_sm[0] for a split launch and per_sm[1] for an unsplit one (ints, or numpy arrays of rows and splits). The
    programs of a CUDA graph's padding rows return at once and are not counted."""
    programs = rows * num_kv_heads * splits
    if isinstance(programs, np.ndarray):
        slots = np.where(np.asarray(splits) > 1, per_sm[0], per_sm[1]) * num_sms
        return -(-programs // slots)
    return -(-programs // ((per_sm[0] if splits > 1 else per_sm[1]) * num_sms))
