"""Which steps the engine replays as CUDA graphs, and at which sizes: one rule for the executor (which captures and
replays them), the profile and its fit (which price graph steps apart from eager ones), `validate`'s step kinds and
the host share of decode steps (pagesim.cost.host_share), so that all of them mean the same steps.

A decode-only step of at most the largest decode graph's sequences replays a decode graph (padded to the next
batch size); any other step of at most the largest token bucket's tokens replays the mixed-step graphs (padded to
the next token bucket, piecewise around attention); the rest run eagerly.
"""

from __future__ import annotations

# The padded decode batch sizes the engine captures CUDA graphs at.
GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# The packed token counts the engine captures piecewise CUDA graphs of mixed and prefill steps at (a step of T
# tokens runs padded to the next size; beyond the last one it runs eagerly). Above 1024 tokens the buckets are 128
# tokens apart to 2048 and 512 apart to 4096, so padding adds at most an eighth of a step's tokens up to 2048 and a
# quarter above. Round 14 graphed steps of 1025-4096 tokens, which ran eagerly before: such eager steps varied by
# 20-50% for one shape, the GPU waiting on Python's launches and on host pauses inside cuBLAS calls (round 13,
# bench/eager_jitter.py).
MIXED_GRAPH_TOKEN_SIZES = (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024,
                           1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048, 2560, 3072, 3584, 4096)


def graph_batch_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """The CUDA-graph batch sizes: the common sizes below max_num_seqs, then max_num_seqs (at most 256)."""
    sizes = [b for b in GRAPH_BATCH_SIZES if b < max_num_seqs]
    return tuple(sizes + [min(max_num_seqs, GRAPH_BATCH_SIZES[-1])])


def mixed_graph_token_sizes(max_num_batched_tokens: int) -> tuple[int, ...]:
    """The mixed-step token buckets: the sizes below max_num_batched_tokens, then it (at most 4096)."""
    largest = min(max_num_batched_tokens, MIXED_GRAPH_TOKEN_SIZES[-1])
    return tuple([t for t in MIXED_GRAPH_TOKEN_SIZES if t < largest] + [largest])


def runs_decode_graph(p_tokens, d_seqs, max_graph_batch: int):
    """Whether a step replays a decode graph (scalars or numpy arrays / pandas columns): no prefill tokens, and
    decode rows, at most the largest decode graph's."""
    return (p_tokens == 0) & (d_seqs > 0) & (d_seqs <= max_graph_batch)


def runs_mixed_graph(p_tokens, d_seqs, max_graph_batch: int, max_mixed_tokens: int):
    """Whether a step replays the mixed-step graphs (scalars or numpy arrays): it has prefill tokens, or more decode
    rows than the largest decode graph, in at most the largest token bucket's tokens (max_mixed_tokens 0: none
    does)."""
    return ((p_tokens > 0) | (d_seqs > max_graph_batch)) & (p_tokens + d_seqs <= max_mixed_tokens)
