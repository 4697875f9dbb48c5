"""What a cost model sees of a step: a handful of counts, computed once per step from its StepPlan."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate, chain

import numpy as np

from pagesim.scheduler import StepPlan
from pagesim.specs import get_gpu, get_model


@dataclass(slots=True)
class StepFeatures:
    """The work of one step.

    A prefill chunk of q query tokens after c cached tokens attends causally to
    q*c + q*(q+1)/2 (query, key) pairs and reads the K/V of c + q tokens. A
    decode sequence with c computed tokens reads the K/V of c + 1 tokens (its
    own new one included). Recompute after preemption is no special case: it is
    the prefill it causes.

    max_decode_context is the longest of those decode reads (0 without decodes):
    the engine's decode kernel walks each sequence's keys serially within a
    program, so a step lasts at least as long as its longest sequence takes,
    which the sums cannot show.

    decode_shared_tokens counts the K/V tokens of those decode reads that another
    decode row of the step reads too: every read of a full block after its first
    in the step (prefix-cache hits and forked samples share blocks). The GPU
    serves such repeated reads largely from L2, so they cost less than their bytes.
    It is computed only when asked (`from_plan(plan, block_size)`: for a cost model
    that prices sharing, and in validation's replay); it is not a recorded column.

    prefill_shared_tokens counts the K/V tokens the prefill chunks read from full blocks
    that another row of the step reads too (a decode row, or an earlier prefill chunk:
    k-shot prefixes, recomputed requests after a preemption): as decode_shared_tokens,
    largely served from L2, and computed only when asked (from_plan with block_size).

    prefill_tile_walks and prefill_longest_walk describe the prefill attention
    kernel's programs (engine.kernels.prefill: one program per PREFILL_TILE query
    rows of a chunk and query head, walking the chunk's keys causally in
    PREFILL_TILE-key tiles): the key tiles all programs of one head walk, summed
    (padded rows included), and the longest single walk. A short chunk after a long
    context has few programs, each walking the whole context, so it lasts as long
    as that walk however few its (query, key) pairs. Not recorded columns either
    (validation's replay and calibration fill them in from the plans).

    prefill_makespan is the prefill kernel's length in key tiles as the kernel itself hands its work items to the
    SMs (prefill_makespan below): items in launch order (query tile descending, then chunk, then head), each SM taking
    every `slots`-th item (the Gluon kernel's persistent grid, for chunks of at most PERSISTENT_MAX_Q tokens) or the
    next item when it is free (one program per item). Several chunks' items interleave tile by tile, so a short chunk
    after a long context runs its long walks last, behind the other chunk's short ones: two chunks of 1511 tokens
    after 4133 cached and 111 after 17472 last 338 tiles where the mean over the SMs says 148. It depends on the GPU
    and the kernel, so it is computed only when asked (from_plan's prefill_grid: a cost model that prices it, its
    query heads, SMs and persistent rule), and is not a recorded column.

    steps_since_prefill is how many steps the step comes after the last step with prefill
    tokens (1: right after it; 0 for a step with prefill tokens or with none before it:
    StepPlan.steps_since_prefill), last_prefill_tokens that step's prefill tokens. On the H200 a
    decode step right after a prefill of 1k tokens or more runs 6-9% slower than the same step a
    dozen steps later, ~2% five steps on; after a smaller prefill ~2.5%, for a step or two
    (docs/accuracy-history.md, round 18). Functions of the step sequence (steps_since_prefill
    below), not recorded columns.
    """

    num_prefill_tokens: int = 0
    num_prefill_seqs: int = 0
    prefill_attn_pairs: int = 0  # sum of q*c + q*(q+1)/2 over prefill chunks
    prefill_context_tokens: int = 0  # sum of c + q over prefill chunks (K/V read)
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0  # sum of c + 1 over decode sequences (K/V read)
    max_decode_context: int = 0  # max of c + 1 over decode sequences (0 if none)
    num_swap_out_blocks: int = 0
    num_swap_in_blocks: int = 0
    num_copy_blocks: int = 0
    num_load_blocks: int = 0  # host tier -> GPU (kv_offloading_size)
    num_store_blocks: int = 0  # GPU -> host tier
    decode_shared_tokens: int = 0  # repeated reads of shared full blocks by decode rows (see above)
    prefill_tile_walks: int = 0  # key tiles walked by the prefill programs of one query head (see above)
    prefill_longest_walk: int = 0  # key tiles of the longest prefill program's walk (see above)
    steps_since_prefill: int = 0  # steps after the last step with prefill tokens (see above)
    last_prefill_tokens: int = 0  # that step's prefill tokens (see above)
    prefill_shared_tokens: int = 0  # prefill chunks' reads of full blocks another row also reads (see above)
    prefill_makespan: int = 0  # the prefill kernel's key tiles as it schedules its work items (see above)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_seqs

    @classmethod
    def from_plan(cls, plan: StepPlan, block_size: int = 0, prefill_grid: tuple[int, int, int] | None = None,
                  sharing: tuple[int, int, Mapping[int, int]] | None = None) -> "StepFeatures":
        """The step's features; block_size (nonzero): with the shared reads; prefill_grid (query heads, SMs, the
        kernel's persistent_max_q: ProfileCostModel.prefill_grid): with prefill_makespan. `sharing`, when known: (the
        KV-cache manager's num_shared_refs, the number of running requests, its shared_refs) as the plan was made;
        the shared reads are then 0 without a pass over the block tables when no block is shared, and come from the
        shared refs and the prefill rows' tables alone when the step's rows are all the running requests (only
        running requests hold blocks: shared_tokens_by_refs)."""
        p_tokens = p_seqs = p_pairs = p_ctx = d_seqs = d_ctx = d_max = walks = longest = 0
        decodes, prefills = [], []
        group = plan.decode_group  # decode rows without a ScheduledRequest (the fast path's), first in order
        tables = block_size and (sharing is None or sharing[0])  # the shared reads need the rows' tables
        by_refs = tables and sharing is not None and len(group) + len(plan.scheduled) == sharing[1]
        decode_tables = tables and not by_refs
        if group:
            d_seqs = len(group)
            d_ctx = plan.decode_group_computed + d_seqs
            d_max = plan.decode_group_max_computed + 1
            if decode_tables:
                decodes = [r.block_ids for r in group]
        for s in plan.scheduled:
            c, q = s.num_computed_tokens, s.num_new_tokens
            if s.is_decode:
                d_seqs += 1
                d_ctx += c + q
                if c + q > d_max:
                    d_max = c + q
                if decode_tables:
                    decodes.append(s.request.block_ids)
            else:
                p_tokens += q
                p_seqs += 1
                p_pairs += q * c + q * (q + 1) // 2
                p_ctx += c + q
                w, top = prefill_walks(c, q)
                walks += w
                if top > longest:
                    longest = top
                if tables:
                    prefills.append(s.request.block_ids)
        if by_refs:
            shared = shared_tokens_by_refs(prefills, sharing[2], sharing[0], block_size)
        else:
            shared = shared_tokens(decodes, prefills, block_size) if decodes or prefills else (0, 0)
        makespan = 0
        if prefill_grid is not None and p_seqs:
            makespan = prefill_makespan([(s.num_computed_tokens, s.num_new_tokens) for s in plan.scheduled
                                         if not s.is_decode], *prefill_grid)
        return cls(p_tokens, p_seqs, p_pairs, p_ctx, d_seqs, d_ctx, d_max,
                   len(plan.blocks_to_swap_out), len(plan.blocks_to_swap_in), len(plan.blocks_to_copy),
                   len(plan.blocks_to_load), len(plan.blocks_to_store),
                   shared[0], walks, longest, plan.steps_since_prefill, plan.last_prefill_tokens, shared[1], makespan)


# The engine's prefill tile (engine.kernels.prefill.PrefillConfig: block_m query rows by block_n keys, both this
# size in every default launch, bf16 and fp8; a test holds them equal).
PREFILL_TILE = 128


def prefill_walks(c: int, q: int) -> tuple[int, int]:
    """(key tiles walked by all programs of one query head, the longest walk) for a chunk of q query tokens after
    c computed ones: query tile j (rows up to min((j + 1) T, q)) walks cdiv(c + its last row, T) key tiles."""
    t = PREFILL_TILE
    n = -(-q // t)
    base = -(-c // t)  # with T-row and T-key tiles, tile j < n - 1 walks base + j + 1 tiles
    longest = -(-(c + q) // t)
    return (n - 1) * base + n * (n - 1) // 2 + longest, longest


# The Gluon prefill kernels (engine.kernels.prefill_gluon, _fp8) launch a persistent grid of one program per SM when
# no chunk has more than this many query tokens, else one program per work item; the Triton kernel always the latter
# (engine.kernels.prefill_gluon.PERSISTENT_MAX_Q; a test holds them equal).
PERSISTENT_MAX_Q = 2048


def persistent_max_q(prefill_kernel: str | None) -> int:
    """The longest chunk (query tokens) that the named prefill kernel (a profile's or run's `prefill_kernel`) runs on
    a persistent grid: PERSISTENT_MAX_Q for the Gluon kernels, 0 (never) for the Triton kernel, and for None (a
    profile timed before the kernel was recorded, round 29: the Triton kernel)."""
    return PERSISTENT_MAX_Q if prefill_kernel and "gluon" in prefill_kernel else 0


def prefill_grid(model: str, gpu: str, prefill_kernel: str | None) -> tuple[int, int, int]:
    """The (query heads, SMs, persistent_max_q) that prefill_makespan schedules a step's chunks on, for this model on
    this GPU with the named prefill kernel (StepFeatures.from_plan's prefill_grid)."""
    return get_model(model).num_heads, get_gpu(gpu).sm_count, persistent_max_q(prefill_kernel)


def prefill_makespan(chunks, heads: int, slots: int, persistent_max_q: int = 0) -> int:
    """The prefill kernel's length in key tiles for chunks of (cached c, new q) tokens, as it schedules its work items
    (StepFeatures.prefill_makespan): one item per query tile of the longest chunk, chunk and query head (a chunk's
    tiles past its own rows are empty: 0 tiles), in launch order, query tile descending, then chunk, then head; tile j
    of a chunk walks cdiv(c + min((j + 1) T, q), T) key tiles. With every chunk at most persistent_max_q tokens the
    kernel runs `slots` programs, program i taking items i, i + slots, ... (the Gluon kernels' persistent grid): the
    longest such sum. Otherwise one program per item, each taken by the SM that is free first in launch order (the
    `heads` equal items of one tile and chunk go to the `heads` least loaded SMs): the most loaded SM. 0 without
    chunks, or without SMs (a GPU whose SM count is unknown).

    Computed without a per-SM array (~18k calls a replay of Azure conv with a profile that prices it): the
    persistent grid by where each tile's run of `heads` items starts and ends on the programs, the greedy one on the
    SMs' loads as a multiset (which of two equally loaded SMs takes an item never changes it). A plain
    per-item schedule is the tests' reference."""
    if not chunks or slots <= 0:
        return 0
    t = PREFILL_TILE
    longest_q = max(q for _, q in chunks)
    # each tile's walk, in launch order
    walks = [-(-(c + min((j + 1) * t, q)) // t) if j * t < q else 0
             for j in range(-(-longest_q // t) - 1, -1, -1) for c, q in chunks]
    full, part = divmod(heads, slots)  # a tile's items: `full` on every program or SM, then `part` more
    if persistent_max_q and longest_q <= persistent_max_q:
        # tile m's items are items m x heads ... on: they add its walk to `part` programs from (m x heads) % slots
        # on, circularly; the loads are sums of these runs (delta: where each starts and ends)
        base = full * sum(walks)
        if not part:
            return base
        delta = [0] * (slots + 1)
        start = 0
        for w in walks:
            if w:
                end = start + part
                delta[start] += w
                if end <= slots:
                    delta[end] -= w
                else:
                    delta[slots] -= w
                    delta[0] += w
                    delta[end - slots] -= w
            start = (start + heads) % slots
        return base + max(accumulate(delta[:slots]))
    # the SMs' loads above `offset`, as groups of equal load in ascending order (loads[i] held by counts[i] SMs):
    # each tile's `part` items go to the least loaded SMs
    offset = 0
    loads, counts = [0], [slots]
    for w in walks:
        if not w:
            continue
        offset += full * w
        need, taken = part, []
        while need:
            if counts[0] <= need:
                need -= counts[0]
                taken.append((loads.pop(0) + w, counts.pop(0)))
            else:
                counts[0] -= need
                taken.append((loads[0] + w, need))
                need = 0
        for load, n in taken:
            i = bisect_left(loads, load)
            if i < len(loads) and loads[i] == load:
                counts[i] += n
            else:
                loads.insert(i, load)
                counts.insert(i, n)
    return offset + loads[-1]


def shared_tokens(decode_tables, prefill_tables, block_size: int) -> tuple[int, int]:
    """(decode_shared_tokens, prefill_shared_tokens) of a step's block tables, in one pass: block_size per reference
    to a block an earlier table already holds, the decode rows' tables first (a decode row's read of a block another
    decode row reads too), then the prefill chunks' (a read a decode row or an earlier chunk makes too).

    A decoding request reads all its blocks (num_computed_tokens + 1 tokens fill them); blocks are shared only when
    full (prefix-cache hits, forked samples, recomputes), so each repeat is a whole block.
    """
    seen: set[int] = set()
    total = 0
    for ids in decode_tables:
        total += len(ids)
        seen.update(ids)
    decode = (total - len(seen)) * block_size
    repeats = 0
    for ids in prefill_tables:
        repeats += sum(1 for b in ids if b in seen)
        seen.update(ids)
    return decode, repeats * block_size


def shared_tokens_by_refs(prefill_tables, shared_refs, num_shared_refs: int, block_size: int) -> tuple[int, int]:
    """shared_tokens of a step whose tables are all the tables holding blocks (every running request a row), from
    the prefill tables and the blocks' reference counts alone: `shared_refs`, block id -> tables holding it beyond
    the first (KVCacheManager.shared_refs), `num_shared_refs` their sum.

    A table holds a block at most once. With c tables holding block b, p of them prefill tables, shared_tokens
    counts c - 1 repeats of it: the prefill tables' p, or p - 1 when no decode table holds it (c == p: the first
    prefill table's entry is then its first read), and the decode tables' the rest. So the prefill part is the
    prefill tables' entries less one per block of theirs with c == p, the decode part the rest of num_shared_refs."""
    held = Counter(chain.from_iterable(prefill_tables))  # block -> p
    get = shared_refs.get
    firsts = sum(1 for b, p in held.items() if get(b, 0) + 1 == p)
    repeats = sum(map(len, prefill_tables)) - firsts
    return (num_shared_refs - repeats) * block_size, repeats * block_size


def steps_since_prefill(step_ids, prefill_tokens, anchors=None, anchor_tokens: int = 0
                        ) -> tuple[np.ndarray, np.ndarray]:
    """StepFeatures.steps_since_prefill and last_prefill_tokens of steps in order (their ids and prefill tokens), as
    the scheduler stamps them on its plans (both 0 for a step with prefill tokens or with none before it); `anchors`
    (booleans, optional): steps that come right after a step of `anchor_tokens` prefill tokens that is not among
    them (a calibration's advanced steps)."""
    step = np.asarray(step_ids, dtype=np.int64)
    tokens = np.asarray(prefill_tokens, dtype=np.int64)
    pre = tokens > 0
    anchored = ~pre & (np.asarray(anchors, dtype=bool) if anchors is not None else False)
    mark_step = np.where(anchored, step - 1, step)
    mark_tokens = np.where(anchored, anchor_tokens, tokens)
    pos = np.where(pre | anchored, np.arange(len(step)), -1)
    last = np.maximum.accumulate(pos) if len(pos) else pos
    after = ~pre & (last >= 0)
    at = np.maximum(last, 0)
    return np.where(after, step - mark_step[at], 0), np.where(after, mark_tokens[at], 0)
