"""A cost model fitted to step timings measured on a real GPU: small linear models, one per way a step runs.

The engine runs a step in one of three ways (engine/executor.py), and so does this model:

- graph steps: decode-only steps of at most the largest captured batch replay a CUDA graph captured
  at a PADDED batch size g, the next of `graph_batch_sizes` (1, 2, 4, ..., 256 for max_num_seqs 256);
  the padding rows run through every matmul, so the cost is the graph's own:

    graph = graph_intercept + sum of graph_pad_<s> over the sizes s <= g (s > 1) + graph_context_tokens * C
            + graph_max_context[regime of g] * longest

  graph_pad_<s> is what the graph of size s costs more than the one below it (matmuls, LM head,
  sampling over s rows; the decode-attention grid has s rows); every step between two sizes costs the
  same. C = decode_context_tokens: decode attention streams every sequence's K/V (memory-bound).
  longest = max(C / max_context_lanes, ceil(max_decode_context / num_splits(g))): see "The longest
  sequence" below.

- eager steps: steps with any prefill token (and decode batches above the largest graph) run kernel
  by kernel at their exact size, launched from Python:

    eager = intercept + num_prefill_tokens + num_prefill_seqs + num_decode_seqs + decode_context_tokens
            + max_decode_context * longest + prefill_attn_pairs + tokens_over_knee * max(0, tokens - knee)
            (each term times its coefficient)

  intercept: the weights read once plus launching every kernel of the step from the host (the launches,
  not the GPU, set the time of a small eager step: 20-25 ms on an H200 against ~5 ms for a graph replay);
  num_prefill_seqs, num_decode_seqs: per-sequence host work (input rows, prefill metadata, block-table
  rows) and per-row work below the knee; decode_context_tokens, prefill_attn_pairs: attention (K/V
  streamed by decodes, (query, key) pairs of prefill chunks); tokens_over_knee: the dense matmuls turn
  from weight-bound to compute-bound once the step has more tokens than the knee, the roofline's max()
  as a hinge. The knee is chosen from a grid by the fit. longest is the graph formula's, with the
  padded size of the decode rows where a graph covers them (else their number) for g.

The longest sequence. The decode-attention kernel (engine/kernels/decode.py) runs one program per
(sequence, KV head, split) and each program walks its share of the sequence's keys one tile after the
other; num_splits(rows) = min(64, ceil(2 * SMs / (rows * KV heads))) (1 from 33 rows up for
Llama-3-8B on an H200: 132 SMs, 8 KV heads; the engine also caps it at max_model_len // 256, which only
matters for a single row and is left out). Such a kernel lasts the longer of two times: streaming the
whole batch's K/V with the GPU full (C / lanes, lanes = how many sequences' serial programs it takes to
saturate memory) and the longest program's own walk (ceil(max_decode_context / num_splits) keys). The
feature `longest` is that max in keys; graph_max_context / max_decode_context is the time of one key
of a serial walk (all layers). With uniform batches the first term rules from `lanes` sequences up and
the second below; a batch of short sequences with one long one is ruled by the long one, which the
sums alone cannot see. Both terms only add cost as C or max_decode_context grow, so more work is never
cheaper. max_context_lanes is chosen from a grid by the fit of graph steps (lanes that fit them within 1% of the
best are told apart by the fit of eager steps, which use the same lanes).

One key of the longest walk costs differently by how many ways the kernel splits each sequence, so graphs
price it with one coefficient per split regime of their padded size: graph_max_context for 4 or more
splits (8 rows and fewer on an H200), graph_max_context_2_3_splits (16 and 32 rows), graph_max_context_1_split
(64 rows and more). On the H200 the fitted costs per key rise with the split regime's batch (0.56 / 0.60 /
0.84 us, 2026-12-01 calibration): a long sequence among short ones in a small batch runs nearly alone. On ten
recorded live runs, each validated with a profile fitted to its own session's calibration steps in both forms
(`python bench/longest_regimes.py`, bench/results/longest-regimes-2026-12-01.json), step MAPE moved 3.75% ->
3.11% on average (seven runs better, by up to 2.5 points; three worse, by 0.1 to 0.6). A profile without the two
newer coefficients prices every graph with graph_max_context, as before. Eager steps keep one coefficient, at
least the dearest graph regime's.

Rounds of programs (profiles with decode_programs_per_sm: `calibrate --decode-rounds`, opt-in since round 41). The
SMs hold a launch's programs
in rounds: per_sm[0] programs a SM at once of the split launch, per_sm[1] of the unsplit one (resident programs,
decode_split.DECODE_PROGRAMS_PER_SM, measured on an H100). A uniform batch whose programs (rows x KV heads x splits;
a graph's padding rows return at once) pass a round runs a second round of walks: 65 -> 68 rows of the 128-row graph
at 2,560 tokens a row took +1.93 ms where a row adds ~0.1 ms, and the next rows fill that round at little more cost.
Such a profile's graph steps take as `longest` also the rounds times the average program's walk,
max(C / lanes, ceil(max_decode_context / splits), rounds x C / (rows x splits)) (with_rounds): the rounds of
uniform programs, or the longest program when one sequence is longer than the rest. Eager and graph mixed steps
keep longest_keys. On round 40's and 41's H100 calibrations the held-out error fell 2.34% -> 2.21% and 1.95% ->
1.85%, and their calls' sweeps of single batch sizes (bench/decode_rows.py) 3.54% -> 3.40% and 2.58% -> 1.65%
(above 64 rows 3.03% -> 1.33%; `python bench/decode_rounds.py`); on the committed recordings, which rarely run
65-128 rows, step MAPE stays the same on average and every live-mode target is met on 19 of 100 against 22 (README,
Cost models), so the default keeps the form before it.

- graph mixed steps (profiles with `mixed_graph_token_sizes`): steps with prefill tokens (and decode
  batches above the largest decode graph) of at most the largest token bucket T_max replay piecewise
  CUDA graphs padded to the bucket t (mixed_graph_token_sizes: 16, 32, ..., 1024, 1152, ..., 4096), with each layer's
  attention launched eagerly between the pieces; no launch-bound intercept, no knee:

    mixed = mixed_graph_intercept + sum of mixed_graph_pad_<s> over the buckets s <= t (s > 16)
            + num_prefill_seqs + num_decode_seqs + decode_context_tokens + longest + prefill_attn_pairs
            + waves + (prefill_context_tokens - prefill_shared_tokens) + prefill_shared_tokens
            (each term times its mixed_graph_ coefficient; longest with the exact decode row count's
            splits: the decode launch of a mixed step is not padded; in a profile that prices shared reads,
            decode_context_tokens counts each repeated read of a shared block at the saving the graph
            coefficients give it, shared_read_discount, since the decode rows run the same kernel: round 18)

  waves = max(query heads * prefill_tile_walks / SMs, prefill_longest_walk) is the prefill attention's length in
  key tiles (StepFeatures: the prefill kernel runs one program per 128 query rows of a chunk and query head, one
  program per SM at its default launch, each walking the chunk's keys causally): the key tiles of all programs
  spread over the SMs, or the longest program's walk when the programs are too few to fill them. A chunk of 40
  tokens after a 16,800-token cached prefix has 32 programs of 132 tiles each, so it lasts 132 tiles however few
  its (query, key) pairs; prefill_attn_pairs alone priced such prefix hits at half their time on the long-document
  windows (2026-12-01, round 8: graph mixed steps 16.2% -> 6.0% on longdoc-b, held-out calibration 8.2% -> 3.2%).
  Eager steps (more tokens than the largest bucket) fill the GPU with programs and keep prefill_attn_pairs alone
  (adding waves there moved held-out calibration error 2.6% -> 2.5%: not kept).

  The prefill kernel's schedule (round 35, 2026-12-06). A profile fitted to rows with prefill_makespan (calibrations
  since round 35) prices the prefill attention by it, mixed_graph_attn_makespan per key tile, in place of waves:

    mixed = ... + prefill_makespan (instead of waves) + ...

  waves spreads the work evenly over the SMs; the kernels do not. Their work items (one per query tile of the longest
  chunk, chunk and query head; a shorter chunk's extra tiles are empty) go out in launch order, query tile
  descending, then chunk, then head, and the Gluon kernels (the default on sm_90) run a persistent grid of one
  program per SM for chunks of at most 2048 tokens, program i taking items i, i + SMs, ...; otherwise (the Triton
  kernel, or a longer chunk) one program per item, each SM taking the next item when free. prefill_makespan
  (pagesim.cost.features.prefill_makespan) is that schedule's length in key tiles. Several chunks' items interleave
  tile by tile, so a short chunk after a long context runs its long walks last, behind the other chunk's short ones:
  1511 tokens after 4133 cached beside 111 after 17472 take 338 key tiles, where waves says 148 (that longdoc-b step
  ran 22% over the waves' prediction); one chunk of 4-5 query tiles (128-160 items on 132 SMs) takes two rounds. On
  the long-document windows, each profile refitted from its own calibration rows in both forms (python -m
  bench.mixed_makespan, bench/results/mixed-makespan-2026-12-06-r35.json): graph mixed steps 5.8-6.1% -> 3.6-3.9% on
  longdoc-b r31h / r33 / r34h (Gluon, H100 and H200), 4.2-7.6% -> 2.4-5.0% on the Triton-kernel recordings; the
  recordings with every kind within 5% 57 -> 62 of 67. The makespan depends on the GPU (its SMs), the model (its
  query heads) and the kernel (the profile's prefill_kernel: persistent_max_q), so the features compute it only for
  a cost model that asks (ProfileCostModel.prefill_grid; StepFeatures.from_plan). Rows without the column (every
  calibration before round 35) are fitted with waves as before, and a profile without mixed_graph_attn_makespan
  prices by waves and asks for no makespan.

  prefill_context_tokens (mixed_graph_prefill_context) is the K/V the prefill chunks read, each chunk's cached context
  plus its own tokens, summed over the chunks: waves follows the longest program, so four 64-token chunks after
  16k-token prefixes cost it about what one does, while they read four times the K/V. Without the term the fit left
  graph mixed steps with long prefixes 8-27% over their prediction in Llama-3.1-8B's own calibration and the
  long-document windows' largest buckets 5-10% under it (round 20, 2026-12-03): held out by workload, graph mixed
  calibration steps 5.4 -> 3.3% (longdoc-b's rows), and better in all ten calibrations of rounds 17-20.
  Reads of full blocks that another row of the step reads too (prefill_shared_tokens: k-shot prefixes, recomputes
  after a preemption) have a coefficient of their own, mixed_graph_prefill_shared (served largely from L2, as
  decode_shared_tokens); with one coefficient for both the k-shot windows' graph mixed steps came out 3-7% over
  their measurement. Calibration rows saved before the column have it replayed (engine.calibration.with_replayed_walks).

  A profile without the key prices such steps as eager steps (as before the engine graphed them); one without
  mixed_graph_attn_waves or mixed_graph_prefill_context (fitted before them) prices them without it, one without
  mixed_graph_prefill_shared prices shared prefill reads as the others, and one with mixed_graph_attn_makespan has no
  mixed_graph_attn_waves (the makespan replaces it).

Swap and copy time come from PCIe and HBM bandwidth as in the roofline. A step with transfers but no
tokens pays the cheapest step's fixed cost (graph_intercept). Coefficients are non-negative, the padded
sizes only add cost, and the fit keeps eager steps at least as dear as graph steps with as many
sequences and as much context (raising intercept, decode_context_tokens or max_decode_context if
needed: on an H200 the eager launches cost far more than any graph, so this never binds), so more work
is never predicted cheaper, across the two kinds too.

The fit minimises the mean absolute relative error (the MAPE that validation reports) by iteratively
reweighted non-negative least squares: each kind's prediction is the median of the steps like it, and
a rare host pause in the calibration rows (three in the H200 rows, 0.16-2.1 s, likely JIT compiles of a
new kernel specialisation) does not pull the fit. A profile must name its `graph_batch_sizes`
(the former single model, one formula for every step, is no longer read or fitted).

On the H200 (results/profiles/h200-llama-3-8b.json, 2026-11-29 rows, refitted 2026-12-01 with the split
regimes) the fit chose max_context_lanes 64 and 0.23 / 0.62 / 0.80 us per key of the longest walk (4+ / 2-3 /
1 splits): a 64-row decode batch of short sequences with one at 6k tokens costs ~4 ms more than its total
context says. Held out by workload, graph steps are predicted to 3.5% (3.7% with one longest-walk
coefficient; 9.6% without the term, on the same rows).

Known limits: apart from the longest sequence, the model sees sums over the step, not how the context is
spread over the other sequences (the second-longest sequence matters when two long ones share the
kernel's last wave), nor K/V shared through the prefix cache (read once into L2 for many sequences:
cheaper than its bytes). Eager steps of a few hundred tokens are bound by launching kernels from Python:
on the H200 they took 14-47 ms for the same shape in the calibration, so their coefficients are the
least certain.
"""

from __future__ import annotations

import json
import os
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from functools import partial
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pagesim.config import KV_CACHE_DTYPE_BYTES
from pagesim.cost.decode_split import decode_waves, num_decode_splits
from pagesim.cost.features import StepFeatures, prefill_grid, steps_since_prefill
from pagesim.cost.governor import ClockGovernor
from pagesim.cost.graphs import graph_batch_sizes, runs_decode_graph, runs_mixed_graph
from pagesim.cost.host_share import decode_host_shares
from pagesim.cost.roofline import MEM_EFFICIENCY, PCIE_EFFICIENCY
from pagesim.errors import UserError, not_a_file
from pagesim.specs import get_gpu, get_model

if TYPE_CHECKING:
    import pandas as pd

# Features of eager steps (and, without graphs, of every step); the values _terms computes, in order.
FEATURES = ("intercept", "num_prefill_tokens", "num_prefill_seqs", "num_decode_seqs",
            "decode_context_tokens", "max_decode_context", "prefill_attn_pairs", "tokens_over_knee")
# plus graph_pad_<size> for each size above the first
GRAPH_FEATURES = ("graph_intercept", "graph_context_tokens", "graph_max_context", "graph_max_context_2_3_splits",
                  "graph_max_context_1_split")
# The graph formula's longest-walk coefficient, one per split regime of the padded size (module docstring): the
# feature for 4 or more splits, for 2-3, for 1. A profile without the last two (fitted before them) uses the first.
GRAPH_LONGEST = GRAPH_FEATURES[2:]
# Repeated decode reads of shared blocks (StepFeatures.decode_shared_tokens), one per kind of step: in a profile
# fitted to calibration steps that share blocks; decode_context_tokens then prices the other reads only.
SHARING = ("decode_shared_tokens", "graph_shared_tokens")
TRANSFERS = ("swap_s_per_byte", "copy_s_per_byte")
HOST_TIER = ("host_store_s_per_byte", "host_load_s_per_byte")  # optional (bench/host_tier_bw.py); else the swap link
INPUT_COLUMNS = ("num_prefill_tokens", "num_prefill_seqs", "num_decode_seqs", "decode_context_tokens",
                 "prefill_attn_pairs", "max_decode_context")
# 0 where calibration rows lack them (steps saved before they existed); never recorded in a run's steps
# (validation's replay and the calibration fill them in from the plans: StepFeatures)
OPTIONAL_COLUMNS = ("decode_shared_tokens", "prefill_tile_walks", "prefill_longest_walk", "prefill_shared_tokens",
                    "prefill_makespan")
WALK_COLUMNS = ("prefill_tile_walks", "prefill_longest_walk")  # the prefill programs' walks
# The prefill kernel's length as it schedules its work items (StepFeatures.prefill_makespan): in calibration rows
# recorded since round 35; graph mixed steps of a profile fitted to such rows price it (mixed_graph_attn_makespan)
MAKESPAN_COLUMN = "prefill_makespan"
# The K/V tokens the prefill chunks read (StepFeatures.prefill_context_tokens; every step table records it): graph
# mixed steps price it (mixed_graph_prefill_context); 0 where rows lack it
PREFILL_CONTEXT = "prefill_context_tokens"
KNEES = tuple(round(16 * 2 ** (i / 4)) for i in range(33))  # 16 .. 4096 tokens, 4 per octave
LANES = tuple(round(4 * 2 ** (i / 2)) for i in range(15))  # 4 .. 512 sequences, 2 per octave
TIE_TOLERANCE = 1e-9  # relative: fits whose errors differ by less are the same fit (the knee's, the first kept)
PARALLEL_FIT_ROWS = 1000  # rows from which fit_profile fits the clock shares in parallel processes by default
CLOCK_SENSITIVITIES = tuple(i / 20 for i in range(7))  # 0 .. 0.3: the share of a step's time that scales with the clock
# Decode steps soon after a prefill (StepFeatures.steps_since_prefill) cost a factor more, one per bucket of
# steps_since_prefill, [1, 2), [2, 3), [3, 5), [5, 8), [8, 12), and per size of that prefill (fewer than
# AFTER_PREFILL_LARGE tokens, or more); from the last edge on, and for k = 0, none (fit_profile).
AFTER_PREFILL_EDGES = (1, 2, 3, 5, 8, 12)
AFTER_PREFILL_LARGE = 1024
REQUIRED_KEYS = ("kind", "model", "gpu", "features", "coefficients", "knee_tokens")
UNRECORDED_BLOCK_SIZE = 16  # what a profile without config.block_size is taken to have timed: calibrate's default
# --block-size (engine.calibration.CALIBRATE_DEFAULTS), which every calibration has run at so far


class FitRowsError(UserError):
    """Calibration rows the fit cannot use (too few of a kind, a bad duration); `args[0]` says why, and `calibrate
    --refit` names its rows file in front of it instead of "calibration rows"."""

    def __str__(self) -> str:
        return f"calibration rows: {self.args[0]}"


def graph_features(sizes, sharing: bool = False) -> tuple[str, ...]:
    return GRAPH_FEATURES + SHARING[1:] * sharing + tuple(f"graph_pad_{s}" for s in sizes[1:])


def split_regime(splits):
    """Which of GRAPH_LONGEST prices a graph's longest walk: 0 for 4+ splits, 1 for 2-3, 2 for one (ints or arrays)."""
    return (splits <= 3) * 1 + (splits == 1) * 1


def eager_features(sharing: bool = False) -> tuple[str, ...]:
    return FEATURES + SHARING[:1] * sharing


def _terms(p_tokens, p_seqs, d_seqs, d_ctx, longest, pairs, knee, maximum=max, shared=0):
    """The feature values in eager_features(True) order, for scalars or (with np.maximum) numpy arrays:
    decode_context_tokens counts the reads that are not repeats of a shared block (shared)."""
    return (1, p_tokens, p_seqs, d_seqs, d_ctx - shared, longest, pairs, maximum(p_tokens + d_seqs - knee, 0), shared)


def decode_split_programs(gpu: str) -> int:
    """How many programs the engine's decode kernel aims at (2 per SM); 0 when the SM count is unknown."""
    return 2 * get_gpu(gpu).sm_count


def num_splits(rows, programs: int, kv_heads: int):
    """The decode kernel's split rule (pagesim.cost.decode_split) for `rows` decode rows (ints or an int
    array) when it aims at `programs` programs, without the table-width cap."""
    return num_decode_splits(rows, kv_heads, programs // 2)


def _splits_array(n: np.ndarray, sizes, programs: int, kv_heads: int) -> np.ndarray:
    """num_splits for arrays of decode-row counts: the padded graph size's where a graph covers them."""
    rows = np.asarray(n, dtype=np.int64)
    if sizes:
        covered = (rows > 0) & (rows <= sizes[-1])
        padded = np.asarray(sizes, dtype=np.int64)[np.minimum(np.searchsorted(sizes, rows, side="left"), len(sizes) - 1)]
        rows = np.where(covered, padded, rows)
    return num_splits(rows, programs, kv_heads)


def with_rounds(longest, d_ctx, rows, splits, kv_heads: int, sms: int, per_sm: tuple[int, int], maximum=max):
    """A graph decode step's `longest` in a profile fitted with rounds of programs (module docstring, "Rounds of
    programs"; per_sm: resident programs per SM of the split and unsplit launches): longest_keys' `longest`, and at
    least the rounds of the launch's programs times the average program's walk, d_ctx / (rows * splits); rows >= 1.
    Scalars or numpy arrays. Callers apply it only to such a profile's graph steps (none other pays for it)."""
    return maximum(longest, decode_waves(rows, kv_heads, splits, sms, per_sm) * d_ctx / (rows * splits))


def longest_keys(d_ctx, max_ctx, splits, lanes: int, maximum=max):
    """The `longest` feature (module docstring): max(d_ctx / lanes, ceil(max_ctx / splits)); 0 if lanes is 0."""
    if not lanes:
        return d_ctx * 0
    return maximum(d_ctx / lanes, -(-max_ctx // splits))


# Graph mixed steps (module docstring): their own intercept, bucket increments and attention terms.
MIXED_FEATURES = ("mixed_graph_intercept", "mixed_graph_prefill_seqs", "mixed_graph_decode_seqs",
                  "mixed_graph_context_tokens", "mixed_graph_max_context", "mixed_graph_attn_pairs",
                  "mixed_graph_attn_waves", "mixed_graph_prefill_context", "mixed_graph_prefill_shared",
                  "mixed_graph_attn_makespan")
# The prefill attention's length in a profile fitted to rows with MAKESPAN_COLUMN (round 35): the kernel's own schedule
# in place of the waves' mean over the SMs (module docstring)
MAKESPAN = MIXED_FEATURES[-1]
WAVES = MIXED_FEATURES[6]


def mixed_features(sizes, makespan: bool | None = None) -> tuple[str, ...]:
    """The graph-mixed features of a profile with these token buckets (none without buckets): with makespan True the
    ones a fit to rows with MAKESPAN_COLUMN gives (MAKESPAN, not WAVES), False the ones before it (WAVES, not
    MAKESPAN), None every one a profile may hold."""
    if not sizes:
        return ()
    names = MIXED_FEATURES if makespan is None else tuple(
        f for f in MIXED_FEATURES if f != (WAVES if makespan else MAKESPAN))
    return names + tuple(f"mixed_graph_pad_{t}" for t in sizes[1:])


def _mixed_terms(p_seqs, d_seqs, d_ctx, longest, pairs, waves, p_ctx, p_shared, makespan=0):
    """The values of MIXED_FEATURES[1:], in order (the prefill chunks' K/V reads apart: not shared, shared)."""
    return (p_seqs, d_seqs, d_ctx, longest, pairs, waves, p_ctx - p_shared, p_shared, makespan)


def shared_read_discount(coefficients: dict) -> float:
    """The share of a decode read's cost that a repeated read of a shared block saves, from the graph coefficients
    (1 - graph_shared_tokens / graph_context_tokens; 0 for a profile that does not price sharing). Graph mixed steps
    launch the same decode kernel over their decode rows, so their decode reads get the same discount."""
    ctx, shared = coefficients.get("graph_context_tokens", 0.0), coefficients.get(SHARING[1])
    return 1 - min(shared / ctx, 1.0) if shared is not None and ctx > 0 else 0.0


def prefill_waves(walks, longest_walk, heads: int, sms: int, maximum=max):
    """The prefill attention's length in key tiles (module docstring): max(heads * walks / sms, longest_walk)."""
    return maximum(walks * (heads / sms), longest_walk)


@dataclass
class ProfileCostModel:
    model: str
    gpu: str
    coefficients: dict[str, float]  # seconds per unit of each feature; TRANSFERS in seconds per byte
    knee_tokens: int
    block_size: int = 16
    fit: dict = field(default_factory=dict)
    created: str = ""
    source: str | None = None  # the file it was read from
    graph_batch_sizes: tuple[int, ...] = ()  # the engine's CUDA-graph decode sizes (required, increasing)
    max_context_lanes: int = 0  # 0: no longest-sequence term (profiles fitted before it existed)
    kv_cache_dtype: str = "auto"  # the engine's cache dtype when the timings were taken (Config.kv_cache_dtype)
    mixed_graph_token_sizes: tuple[int, ...] = ()  # the engine's mixed-step token buckets; () prices them eagerly
    # factors on decode-only steps by bucket of steps_since_prefill (AFTER_PREFILL_EDGES), after a small and after a
    # large prefill (AFTER_PREFILL_LARGE): two tuples; () for none
    after_prefill: tuple[tuple[float, ...], ...] = ()
    # the engine's prefill attention kernel when the timings were taken (calibrations record it since round 29)
    prefill_kernel: str | None = None
    # the GPU's power governor fitted to the calibration's clocks (governor.py); None: steps priced at the top clock
    governor: ClockGovernor | None = None
    # resident programs per SM of the decode kernel's split and unsplit launches when the graph steps were fitted with
    # rounds of programs (decode_split.DECODE_PROGRAMS_PER_SM; round 41); (): without (every profile before it)
    decode_programs_per_sm: tuple[int, ...] = ()
    # the block size of the calibration whose steps were timed (the file's config.block_size: calibrate and live
    # --calibrate record it); None where the file records none (made by hand, or refitted into a new --out), which
    # run_warnings.profile_warnings takes as UNRECORDED_BLOCK_SIZE
    timed_block_size: int | None = None

    def __post_init__(self):
        self.graph_batch_sizes = tuple(int(s) for s in self.graph_batch_sizes)
        if not self.graph_batch_sizes:
            raise ValueError("a profile needs graph_batch_sizes (the engine's CUDA-graph decode batch sizes)")
        self.max_context_lanes = int(self.max_context_lanes)
        self.decode_programs_per_sm = tuple(int(k) for k in self.decode_programs_per_sm)
        if self.decode_programs_per_sm and (len(self.decode_programs_per_sm) != 2 or min(self.decode_programs_per_sm) < 1):
            raise ValueError(f"decode_programs_per_sm {self.decode_programs_per_sm}: expected (split, unsplit) resident "
                             "programs per SM, two positive integers")
        coef = self.coefficients
        self.prices_sharing = SHARING[1] in coef  # fitted to steps that share blocks (decode_shared_tokens)
        self._c = tuple(float(coef.get(name, 0.0)) for name in eager_features(True))
        self._graph_shared = float(coef.get(SHARING[1], 0.0))
        self._mixed_shared_discount = shared_read_discount(coef)
        self._programs = decode_split_programs(self.gpu)
        self._kv_heads = get_model(self.model).num_kv_heads
        by_regime = [float(coef.get(GRAPH_LONGEST[0], 0.0))]
        by_regime += [float(coef.get(f, by_regime[0])) for f in GRAPH_LONGEST[1:]]
        sizes = self.graph_batch_sizes
        # Fixed cost of each graph: graph_intercept plus the increments up to its size (one sum, shared by
        # step_time and decode_run_times so both give the same float).
        base = float(coef.get("graph_intercept", 0.0))
        self._graph_base = []
        for i, s in enumerate(sizes):
            if i:
                base += float(coef.get(f"graph_pad_{s}", 0.0))
            self._graph_base.append(base)
        self._graph_max = sizes[-1]
        self._graph_ctx = float(coef.get("graph_context_tokens", 0.0))
        self._graph_splits = tuple(num_splits(s, self._programs, self._kv_heads) for s in sizes)
        self._graph_max_ctx = tuple(by_regime[split_regime(s)] for s in self._graph_splits)  # per graph size
        self._idle = self._graph_base[0]
        self._init_mixed()
        block_bytes = get_model(self.model).kv_bytes_per_block(self.block_size, KV_CACHE_DTYPE_BYTES.get(self.kv_cache_dtype))
        self.swap_s_per_block = coef["swap_s_per_byte"] * block_bytes
        self.copy_s_per_block = coef["copy_s_per_byte"] * block_bytes
        # host tier: measured by bench/host_tier_bw.py when the profile carries it, else the swap link's figure
        self.load_s_per_block = coef.get("host_load_s_per_byte", coef["swap_s_per_byte"]) * block_bytes
        self.store_s_per_block = coef.get("host_store_s_per_byte", coef["swap_s_per_byte"]) * block_bytes
        self.after_prefill = tuple(tuple(float(f) for f in row) for row in self.after_prefill)
        if self.after_prefill and [len(row) for row in self.after_prefill] != [len(AFTER_PREFILL_EDGES) - 1] * 2:
            raise ValueError(f"after_prefill: expected two rows (after a small and a large prefill) of "
                             f"{len(AFTER_PREFILL_EDGES) - 1} factors, one per bucket of {AFTER_PREFILL_EDGES}")
        # [large][k]: the factor by steps_since_prefill up to the last edge (k = 0 and from the last edge on: 1.0)
        self._after = tuple(tuple([1.0] + [row[bisect_left(AFTER_PREFILL_EDGES, k + 1) - 1]
                                           for k in range(1, AFTER_PREFILL_EDGES[-1])]) for row in self.after_prefill)

    def after_prefill_factors(self, since, prefill_tokens) -> np.ndarray:
        """The after-prefill factors of decode steps with these steps_since_prefill and last_prefill_tokens (arrays;
        1 without a table)."""
        k = np.asarray(since, dtype=np.int64)
        if not self._after:
            return np.ones(k.shape)
        table = np.asarray(self._after)
        large = (np.asarray(prefill_tokens) >= AFTER_PREFILL_LARGE).astype(np.int64)
        inside = (k > 0) & (k < table.shape[1])
        return np.where(inside, table[large, np.where(inside, k, 0)], 1.0)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return (eager_features(self.prices_sharing) + graph_features(self.graph_batch_sizes, self.prices_sharing)
                + mixed_features(self.mixed_graph_token_sizes))

    # ---- graph mixed steps (module docstring) ---------------------------------------------
    def _init_mixed(self) -> None:
        sizes = self.mixed_graph_token_sizes = tuple(int(t) for t in self.mixed_graph_token_sizes)
        coef = self.coefficients
        self._mixed_max = sizes[-1] if sizes else 0
        self._heads, self._sms = get_model(self.model).num_heads, get_gpu(self.gpu).sm_count
        # a profile fitted before mixed_graph_prefill_shared prices shared prefill reads as the others
        coef = {"mixed_graph_prefill_shared": coef.get("mixed_graph_prefill_context", 0.0), **coef}
        self._mc = tuple(float(coef.get(name, 0.0)) for name in MIXED_FEATURES[1:])
        # the features' prefill_makespan for a profile that prices it (StepFeatures.from_plan's prefill_grid: query
        # heads, SMs, the timed kernel's persistent rule); None for one fitted before it (priced by its waves)
        self.prefill_grid = (prefill_grid(self.model, self.gpu, self.prefill_kernel)
                             if MAKESPAN in self.coefficients else None)
        base, self._mixed_base = float(coef.get(MIXED_FEATURES[0], 0.0)), []
        for i, t in enumerate(sizes):
            if i:
                base += float(coef.get(f"mixed_graph_pad_{t}", 0.0))
            self._mixed_base.append(base)

    def is_mixed_graph(self, p_tokens, d_seqs):
        """Whether a step with these counts replays the mixed-step graphs (scalars or numpy arrays)."""
        return runs_mixed_graph(p_tokens, d_seqs, self._graph_max, self._mixed_max)

    def _mixed_time(self, p_tokens, p_seqs, d_seqs, d_ctx, max_ctx, pairs, walks=0, longest_walk=0, maximum=max,
                    shared=0, p_ctx=0, p_shared=0, makespan=0):
        tokens = p_tokens + d_seqs
        if isinstance(tokens, np.ndarray):
            base = np.asarray(self._mixed_base)[np.searchsorted(self.mixed_graph_token_sizes, tokens, side="left")]
            splits = num_splits(np.maximum(np.asarray(d_seqs, dtype=np.int64), 1), self._programs, self._kv_heads)
        else:
            base = self._mixed_base[bisect_left(self.mixed_graph_token_sizes, tokens)]
            splits = num_splits(max(int(d_seqs), 1), self._programs, self._kv_heads)
        longest = longest_keys(d_ctx, max_ctx, splits, self.max_context_lanes, maximum)
        waves = prefill_waves(walks, longest_walk, self._heads, self._sms, maximum)
        reads = d_ctx - self._mixed_shared_discount * shared  # repeated reads of shared blocks at their discount
        terms = _mixed_terms(p_seqs, d_seqs, reads, longest, pairs, waves, p_ctx, p_shared, makespan)
        return base + sum(c * x for c, x in zip(self._mc, terms))

    def padded_batch(self, num_decode_seqs: int) -> int | None:
        """The graph batch size a decode-only step of this many sequences replays at; None if it runs eagerly."""
        if 0 < num_decode_seqs <= self._graph_max:
            return self.graph_batch_sizes[bisect_left(self.graph_batch_sizes, num_decode_seqs)]
        return None

    def _splits(self, d_seqs: int) -> int:
        """num_splits of the decode kernel for this many decode rows: the padded size's where a graph covers it."""
        if d_seqs <= self._graph_max:
            return self._graph_splits[bisect_left(self.graph_batch_sizes, d_seqs)] if d_seqs else 1
        return num_splits(d_seqs, self._programs, self._kv_heads)

    def _eager_time(self, p_tokens, p_seqs, d_seqs, d_ctx, max_ctx, pairs, maximum=max, shared=0):
        longest = longest_keys(d_ctx, max_ctx, self._splits(d_seqs), self.max_context_lanes, maximum)
        t = 0.0
        for c, x in zip(self._c, _terms(p_tokens, p_seqs, d_seqs, d_ctx, longest, pairs, self.knee_tokens, maximum,
                                        shared)):
            t = t + c * x
        return t

    def _graph_time(self, d_seqs: int, d_ctx, max_ctx, maximum=max, shared=0):
        i = bisect_left(self.graph_batch_sizes, d_seqs)
        splits = self._graph_splits[i]
        longest = longest_keys(d_ctx, max_ctx, splits, self.max_context_lanes, maximum)
        if self.decode_programs_per_sm:
            longest = with_rounds(longest, d_ctx, d_seqs, splits, self._kv_heads, self._sms,
                                  self.decode_programs_per_sm, maximum)
        if shared:
            return (self._graph_base[i] + self._graph_ctx * (d_ctx - shared) + self._graph_shared * shared
                    + self._graph_max_ctx[i] * longest)
        return self._graph_base[i] + self._graph_ctx * d_ctx + self._graph_max_ctx[i] * longest

    def step_time(self, f: StepFeatures) -> float:
        t = ((f.num_swap_out_blocks + f.num_swap_in_blocks) * self.swap_s_per_block + f.num_copy_blocks * self.copy_s_per_block
             + f.num_load_blocks * self.load_s_per_block)
        store = f.num_store_blocks * self.store_s_per_block  # overlapped with the forward pass (roofline.py)
        if f.num_prefill_tokens or f.num_decode_seqs:
            shared = f.decode_shared_tokens if self.prices_sharing else 0
            if not f.num_prefill_tokens and f.num_decode_seqs <= self._graph_max:
                fwd = self._graph_time(f.num_decode_seqs, f.decode_context_tokens, f.max_decode_context, shared=shared)
            elif f.num_prefill_tokens + f.num_decode_seqs <= self._mixed_max:
                fwd = self._mixed_time(f.num_prefill_tokens, f.num_prefill_seqs, f.num_decode_seqs,
                                       f.decode_context_tokens, f.max_decode_context, f.prefill_attn_pairs,
                                       f.prefill_tile_walks, f.prefill_longest_walk, shared=shared,
                                       p_ctx=f.prefill_context_tokens, p_shared=f.prefill_shared_tokens,
                                       makespan=f.prefill_makespan)
            else:
                fwd = self._eager_time(f.num_prefill_tokens, f.num_prefill_seqs, f.num_decode_seqs,
                                       f.decode_context_tokens, f.max_decode_context, f.prefill_attn_pairs,
                                       shared=shared)
            if self._after and not f.num_prefill_tokens and 0 < f.steps_since_prefill < AFTER_PREFILL_EDGES[-1]:
                fwd = fwd * self._after[f.last_prefill_tokens >= AFTER_PREFILL_LARGE][f.steps_since_prefill]
            t += max(store, fwd)
        elif t or store:
            t += store + self._idle
        return t

    def decode_run_times(self, num_seqs: int, context_start: int, k: int, max_context_start: int,
                         shared: int = 0, since: int = 0, prefill_tokens: int = 0) -> np.ndarray:
        """Durations of k pure-decode steps; step j (0-based) reads context_start + num_seqs * (j + 1) keys,
        max_context_start + j + 1 of them for its longest sequence, `shared` of them repeats of shared
        blocks (decode_shared_tokens: the same in every step of a run, whose new blocks are its own); its
        steps_since_prefill is since + j (0 throughout when since is 0: no prefill before the run), after a prefill
        of prefill_tokens."""
        if num_seqs == 0:
            return np.zeros(k)
        if not self.prices_sharing:
            shared = 0
        steps = np.arange(1, k + 1, dtype=np.int64)
        ctx = context_start + num_seqs * steps
        longest = max_context_start + steps
        if num_seqs <= self._graph_max:
            t = self._graph_time(num_seqs, ctx, longest, np.maximum, shared)
        elif num_seqs <= self._mixed_max:
            t = self._mixed_time(0, 0, np.full(k, num_seqs), ctx, longest, 0, maximum=np.maximum)
        else:
            t = self._eager_time(0, 0, num_seqs, ctx, longest, 0, np.maximum, shared)
        if self._after and 0 < since < AFTER_PREFILL_EDGES[-1]:  # the factors step_time applies, one multiply a step
            t = t * self.after_prefill_factors(since + steps - 1, prefill_tokens)
        return t

    def forward_times(self, rows) -> np.ndarray:
        """Forward time of each row (a frame or dict of INPUT_COLUMNS arrays): step_time without transfers, vectorised."""
        p, ps, n, c, pairs, mx = (np.asarray(rows[col], dtype=np.float64) for col in INPUT_COLUMNS)
        sh = _optional_column(rows, "decode_shared_tokens", len(p)) if self.prices_sharing else np.zeros(len(p))
        out = np.zeros(len(p))
        eager = (p > 0) | (n > self._graph_max)
        splits = self._splits_of(n)
        lanes = self.max_context_lanes
        longest = longest_keys(c, mx, splits, lanes, np.maximum)
        eager_terms = _terms(p[eager], ps[eager], n[eager], c[eager], longest[eager], pairs[eager], self.knee_tokens,
                             np.maximum, sh[eager])
        out[eager] = sum(coef * x for coef, x in zip(self._c, eager_terms))
        graph = ~eager & (n > 0)
        if graph.any():
            idx = np.searchsorted(self.graph_batch_sizes, n[graph], side="left")
            walk = longest[graph]
            if self.decode_programs_per_sm:
                walk = with_rounds(walk, c[graph], n[graph], splits[graph], self._kv_heads, self._sms,
                                   self.decode_programs_per_sm, np.maximum)
            out[graph] = (np.asarray(self._graph_base)[idx] + self._graph_ctx * (c[graph] - sh[graph])
                          + self._graph_shared * sh[graph] + np.asarray(self._graph_max_ctx)[idx] * walk)
        mixed = self.is_mixed_graph(p, n)
        if mixed.any():
            walks, longest_walk = (_optional_column(rows, col, len(p))[mixed] for col in WALK_COLUMNS)
            out[mixed] = self._mixed_time(p[mixed], ps[mixed], n[mixed], c[mixed], mx[mixed], pairs[mixed], walks,
                                          longest_walk, np.maximum, sh[mixed],
                                          _optional_column(rows, PREFILL_CONTEXT, len(p))[mixed],
                                          _optional_column(rows, "prefill_shared_tokens", len(p))[mixed],
                                          _optional_column(rows, MAKESPAN_COLUMN, len(p))[mixed])
        if self._after and "steps_since_prefill" in rows:
            decode = (p == 0) & (n > 0)
            tokens = _optional_column(rows, "last_prefill_tokens", len(p))[decode]
            out[decode] = out[decode] * self.after_prefill_factors(np.asarray(rows["steps_since_prefill"])[decode],
                                                                   tokens)
        return out

    def _splits_of(self, n: np.ndarray) -> np.ndarray:
        """_splits for an array of decode-row counts."""
        return _splits_array(n, self.graph_batch_sizes, self._programs, self._kv_heads)

    def describe(self) -> dict:
        d = {"kind": "profile", "source": self.source, "model": self.model, "gpu": self.gpu,
             "knee_tokens": self.knee_tokens, "coefficients": dict(self.coefficients), "fit": dict(self.fit),
             "created": self.created, "graph_batch_sizes": list(self.graph_batch_sizes)}
        return self._optional_fields(d, with_cache_dtype=False)

    def _optional_fields(self, d: dict, with_cache_dtype: bool = True) -> dict:
        """`d` with the profile's optional parts that it has (the one list of them, for describe() and the file:
        a part absent from a profile is left out, so profiles written before it existed read back the same)."""
        if self.max_context_lanes:
            d["max_context_lanes"] = self.max_context_lanes
        if self.decode_programs_per_sm:
            d["decode_programs_per_sm"] = list(self.decode_programs_per_sm)
        if self.mixed_graph_token_sizes:
            d["mixed_graph_token_sizes"] = list(self.mixed_graph_token_sizes)
        if with_cache_dtype and self.kv_cache_dtype != "auto":
            d["kv_cache_dtype"] = self.kv_cache_dtype
        if self.after_prefill:
            d["after_prefill"] = after_prefill_json(self.after_prefill)
        if self.prefill_kernel:
            d["prefill_kernel"] = self.prefill_kernel
        if self.governor is not None:
            d["clock_governor"] = self.governor.to_json()
        return d

    # ---- files ---------------------------------------------------------------------
    def to_json(self, path: str | Path) -> None:
        features = [f for f in self.feature_names if f in self.coefficients]
        d = {"kind": "profile", "model": self.model, "gpu": self.gpu, "features": features,
             "graph_batch_sizes": list(self.graph_batch_sizes)}
        self._optional_fields(d)
        d.update(coefficients=self.coefficients, knee_tokens=self.knee_tokens, fit=self.fit, created=self.created)
        Path(path).write_text(json.dumps(d, indent=2) + "\n")

    @classmethod
    def from_json(cls, path: str | Path, block_size: int = 16) -> "ProfileCostModel":
        p = Path(path)
        found = not_a_file(p)
        if found:
            raise UserError(f"cost model {str(path)!r}: {found}; expected 'roofline' or a profile JSON "
                            "(written by `calibrate` or `live --calibrate`)") from None
        try:
            d = json.loads(p.read_text())
        except OSError as e:
            raise UserError(f"profile {p}: cannot read it ({e.strerror or e})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"profile {p}: not valid JSON ({e})") from None
        if not isinstance(d, dict):
            raise UserError(f"profile {p}: expected a JSON object with keys {', '.join(REQUIRED_KEYS)}")
        missing = [k for k in REQUIRED_KEYS if k not in d]
        if missing:
            raise UserError(f"profile {p}: missing key(s) {', '.join(missing)}; expected {', '.join(REQUIRED_KEYS)}")
        if d["kind"] != "profile":
            raise UserError(f"profile {p}: 'kind' is {d['kind']!r}, expected 'profile'")
        sizes = d.get("graph_batch_sizes")
        if sizes is None:
            raise UserError(f"profile {p}: no 'graph_batch_sizes'; profiles written before CUDA-graph steps were "
                            "modelled (one formula for every step) are no longer read: recalibrate, or refit "
                            "their PROFILE.steps.csv.gz with `calibrate --refit`")
        if (not isinstance(sizes, list) or not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes)
                or any(a >= b for a, b in zip(sizes, sizes[1:]))):
            raise UserError(f"profile {p}: 'graph_batch_sizes' is {sizes!r}, expected increasing positive integers "
                            "(the engine's CUDA-graph decode batch sizes)")
        mixed_sizes = d.get("mixed_graph_token_sizes", [])
        if (not isinstance(mixed_sizes, list) or any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in mixed_sizes)
                or any(a >= b for a, b in zip(mixed_sizes, mixed_sizes[1:]))):
            raise UserError(f"profile {p}: 'mixed_graph_token_sizes' is {mixed_sizes!r}, expected increasing positive "
                            "integers (the engine's mixed-step token buckets)")
        known = eager_features(True) + graph_features(sizes, True) + mixed_features(mixed_sizes)
        if not isinstance(d["features"], list):
            raise UserError(f"profile {p}: 'features' must be a list of feature names")
        unknown = [f for f in d["features"] if f not in known]
        if unknown:
            raise UserError(f"profile {p}: unknown feature(s) {unknown}; expected some of {list(known)}")
        coef = d["coefficients"]
        if not isinstance(coef, dict):
            raise UserError(f"profile {p}: 'coefficients' must be an object of feature name -> seconds")
        host = [k for k in HOST_TIER if k in coef]
        for name in [*d["features"], *TRANSFERS, *host]:
            value = coef.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise UserError(f"profile {p}: coefficients[{name!r}] is {value!r}, expected a finite number")
        if isinstance(d["knee_tokens"], bool) or not isinstance(d["knee_tokens"], int) or d["knee_tokens"] < 0:
            raise UserError(f"profile {p}: 'knee_tokens' is {d['knee_tokens']!r}, expected a non-negative integer")
        lanes = d.get("max_context_lanes", 0)
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 0:
            raise UserError(f"profile {p}: 'max_context_lanes' is {lanes!r}, expected a non-negative integer")
        uses_longest = any(f in (*GRAPH_LONGEST, "max_decode_context") for f in d["features"])
        if uses_longest and not lanes:
            raise UserError(f"profile {p}: features graph_max_context*/max_decode_context need 'max_context_lanes' "
                            "(a positive integer)")
        per_sm = d.get("decode_programs_per_sm", [])
        if not (isinstance(per_sm, list) and (not per_sm or len(per_sm) == 2) and all(
                isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in per_sm)):
            raise UserError(f"profile {p}: 'decode_programs_per_sm' is {per_sm!r}, expected [split, unsplit]: the decode "
                            "kernel's resident programs per SM, two positive integers")
        if per_sm and not lanes:
            raise UserError(f"profile {p}: 'decode_programs_per_sm' needs 'max_context_lanes' (a positive integer)")
        kv_dtype = d.get("kv_cache_dtype", "auto")
        if kv_dtype not in KV_CACHE_DTYPE_BYTES:
            raise UserError(f"profile {p}: 'kv_cache_dtype' is {kv_dtype!r}, expected one of {list(KV_CACHE_DTYPE_BYTES)}")
        after = d.get("after_prefill")
        if after is not None and not _valid_after_prefill(after):
            raise UserError(f"profile {p}: 'after_prefill' is {after!r}, expected {{\"edges\": {list(AFTER_PREFILL_EDGES)}, "
                            f"\"large_prefill_tokens\": {AFTER_PREFILL_LARGE}, \"factors\": [two lists of "
                            f"{len(AFTER_PREFILL_EDGES) - 1} numbers >= 1]}}")
        factors = after["factors"] if after else ()
        kernel = d.get("prefill_kernel")
        if kernel is not None and not isinstance(kernel, str):
            raise UserError(f"profile {p}: 'prefill_kernel' is {kernel!r}, expected the name of the engine's prefill "
                            "kernel it timed (a string)")
        timed_block_size = d["config"].get("block_size") if isinstance(d.get("config"), dict) else None
        if timed_block_size is not None and (isinstance(timed_block_size, bool) or not isinstance(timed_block_size, int)
                                             or timed_block_size < 1):
            raise UserError(f"profile {p}: 'config.block_size' is {timed_block_size!r}, expected a positive integer (the "
                            "block size the calibration timed)")
        governor = d.get("clock_governor")
        if governor is not None:
            try:
                governor = ClockGovernor.from_json(governor)
            except ValueError as e:
                raise UserError(f"profile {p}: 'clock_governor' is {e}") from None
        try:
            model, gpu = get_model(str(d["model"])).name, get_gpu(str(d["gpu"])).name
            return cls(model, gpu, {k: float(coef[k]) for k in [*d["features"], *TRANSFERS, *host]},
                       d["knee_tokens"], block_size, d.get("fit", {}), d.get("created", ""), str(p), tuple(sizes),
                       lanes, kv_dtype, tuple(mixed_sizes), tuple(map(tuple, factors)), kernel, governor,
                       tuple(per_sm), timed_block_size)
        except UserError as e:
            raise UserError(f"profile {p}: {e}") from None


def after_prefill_json(factors) -> dict:
    """A profile's `after_prefill` entry: the buckets, the size from which a prefill is large, the two rows."""
    return {"edges": list(AFTER_PREFILL_EDGES), "large_prefill_tokens": AFTER_PREFILL_LARGE,
            "factors": [list(row) for row in factors]}


def _valid_after_prefill(after) -> bool:
    if not isinstance(after, dict) or {k: v for k, v in after.items() if k != "factors"} != {
            k: v for k, v in after_prefill_json(()).items() if k != "factors"}:
        return False
    rows = after.get("factors")
    return (isinstance(rows, list) and len(rows) == 2
            and all(isinstance(row, list) and len(row) == len(AFTER_PREFILL_EDGES) - 1 for row in rows)
            and all(not isinstance(f, bool) and isinstance(f, (int, float)) and f >= 1 for row in rows for f in row))


# ---- fitting ---------------------------------------------------------------------------
def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min |a x - b| subject to x >= 0 (scipy's NNLS), columns rescaled to unit maximum first."""
    from scipy.optimize import nnls

    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    return np.maximum(nnls(a / scale, b)[0], 0.0) / scale


def _fit_relative_l1(a: np.ndarray, y: np.ndarray, iters: int = 100, floor: float = 1e-3) -> tuple[np.ndarray, float]:
    """x >= 0 minimising mean |a x / y - 1|, by reweighted least squares (weights 1 / max(|residual|, floor)).

    Returns x and its mean absolute relative error on these rows.
    """
    m = a / y[:, None]
    w = np.ones(len(y))
    best_err, best_x, previous = np.inf, np.zeros(a.shape[1]), np.inf
    for _ in range(iters):
        sw = np.sqrt(w)
        x = _nnls(m * sw[:, None], sw)
        r = np.abs(m @ x - 1)
        err = float(r.mean())
        if err < best_err:
            best_err, best_x = err, x
        if err >= previous * (1 - 1e-7):  # no longer improving
            break
        previous = err
        w = 1 / np.maximum(r, floor)
    return best_x, best_err


def _optional_column(rows, col: str, n: int) -> np.ndarray:
    """A column the rows may lack (OPTIONAL_COLUMNS, last_prefill_tokens), 0 where they do."""
    return np.asarray(rows[col], dtype=np.float64) if col in rows else np.zeros(n)


def _columns(rows) -> dict[str, np.ndarray]:
    cols = {c: np.asarray(rows[c], dtype=np.float64) for c in INPUT_COLUMNS}
    cols.update((c, _optional_column(rows, c, len(cols[INPUT_COLUMNS[0]]))) for c in OPTIONAL_COLUMNS + (PREFILL_CONTEXT,))
    return cols


def _longest(cols, sel, split, lanes) -> np.ndarray:
    """The `longest` feature of the rows in sel (split: (sizes, programs, kv_heads))."""
    return longest_keys(cols["decode_context_tokens"][sel], cols["max_decode_context"][sel],
                        _splits_array(cols["num_decode_seqs"][sel], *split), lanes, np.maximum)


def _graph_longest(cols, sel, split, lanes, sms: int, per_sm: tuple[int, ...]) -> np.ndarray:
    """The graph rows' `longest` in sel (split: (sizes, programs, kv_heads); the padded size's splits), with the
    rounds of programs when per_sm is given (with_rounds)."""
    longest = _longest(cols, sel, split, lanes)
    if not per_sm:
        return longest
    rows = cols["num_decode_seqs"][sel]
    return with_rounds(longest, cols["decode_context_tokens"][sel], rows, _splits_array(rows, *split), split[2], sms,
                       per_sm, np.maximum)


def _eager_design(cols, sel, knee, names, longest) -> np.ndarray:
    values = dict(zip(eager_features(True), _terms(
        cols["num_prefill_tokens"][sel], cols["num_prefill_seqs"][sel], cols["num_decode_seqs"][sel],
        cols["decode_context_tokens"][sel], longest, cols["prefill_attn_pairs"][sel], knee, np.maximum,
        cols["decode_shared_tokens"][sel])))
    return np.column_stack([np.broadcast_to(np.asarray(values[f], dtype=np.float64), (len(sel),)) for f in names])


def _graph_design(cols, sel, split, longest, sharing: bool = False) -> np.ndarray:
    """Columns in graph_features(sizes, sharing) order (split: (sizes, programs, kv_heads))."""
    sizes = split[0]
    n = cols["num_decode_seqs"][sel]
    g = np.asarray(sizes)[np.searchsorted(sizes, n, side="left")]
    shared = cols["decode_shared_tokens"][sel]
    regime = split_regime(_splits_array(n, *split))
    return np.column_stack([np.ones(len(n)), cols["decode_context_tokens"][sel] - shared]
                           + [longest * (regime == r) for r in range(len(GRAPH_LONGEST))]
                           + [shared] * sharing + [(g >= s) * 1.0 for s in sizes[1:]])


def _mixed_design(cols, sel, mixed_sizes, lanes, split, heads_sms: tuple[int, int], discount: float = 0.0,
                  names: tuple[str, ...] | None = None) -> np.ndarray:
    """Columns in `names` order (default mixed_features(mixed_sizes, False)), for graph mixed rows (heads_sms: query
    heads, SMs; discount: shared_read_discount of the graph coefficients)."""
    names = names or mixed_features(mixed_sizes, False)
    p, n = cols["num_prefill_tokens"][sel], cols["num_decode_seqs"][sel]
    t = np.asarray(mixed_sizes)[np.searchsorted(mixed_sizes, p + n, side="left")]
    splits = num_splits(np.maximum(n.astype(np.int64), 1), split[1], split[2])
    longest = longest_keys(cols["decode_context_tokens"][sel], cols["max_decode_context"][sel], splits, lanes, np.maximum)
    waves = prefill_waves(cols["prefill_tile_walks"][sel], cols["prefill_longest_walk"][sel], *heads_sms, np.maximum)
    reads = cols["decode_context_tokens"][sel] - discount * cols["decode_shared_tokens"][sel]
    terms = _mixed_terms(cols["num_prefill_seqs"][sel], n, reads, longest, cols["prefill_attn_pairs"][sel], waves,
                         cols[PREFILL_CONTEXT][sel], cols["prefill_shared_tokens"][sel], cols[MAKESPAN_COLUMN][sel])
    values = dict(zip(MIXED_FEATURES[1:], terms))
    return np.column_stack([np.ones(len(n))] + [values[f] for f in names if f in values]
                           + [(t >= s) * 1.0 for s in mixed_sizes[1:]])


def _is_decode_graph(cols, sel, sizes) -> np.ndarray:
    return runs_decode_graph(cols["num_prefill_tokens"][sel], cols["num_decode_seqs"][sel], sizes[-1])


def _is_mixed_graph(cols, sel, sizes, mixed_sizes) -> np.ndarray:
    return runs_mixed_graph(cols["num_prefill_tokens"][sel], cols["num_decode_seqs"][sel], sizes[-1],
                            mixed_sizes[-1] if mixed_sizes else 0)


def _fit_coefficients(cols, y, sel, sizes, knees, split, lanes_grid, mixed_sizes, heads_sms: tuple[int, int],
                      per_sm: tuple[int, ...] = ()) -> dict:
    """Every kind's coefficients from the rows in `sel` (indices); returns them with the knee, the lanes and fit details."""
    rows_idx = np.asarray(sel)
    is_graph = _is_decode_graph(cols, rows_idx, sizes)
    is_mixed = _is_mixed_graph(cols, rows_idx, sizes, mixed_sizes)
    graph_rows, eager_rows, mixed_rows = rows_idx[is_graph], rows_idx[~is_graph & ~is_mixed], rows_idx[is_mixed]
    sharing = bool(cols["decode_shared_tokens"][rows_idx].any())  # else the fit is the one without sharing
    names = eager_features(sharing)
    coefficients: dict[str, float] = {}
    dropped: list[str] = []
    raised: list[str] = []
    abs_err = []
    gnames = graph_features(sizes, sharing)
    if len(graph_rows) < 2 * len(gnames):
        raise FitRowsError(f"{len(graph_rows)} usable decode-only (CUDA-graph) steps to fit, need at "
                        f"least {2 * len(gnames)}")
    graph_fits = []
    for k in lanes_grid:
        walk = _graph_longest(cols, graph_rows, split, k, heads_sms[1], per_sm)
        x, err = _fit_relative_l1(_graph_design(cols, graph_rows, split, walk, sharing), y[graph_rows])
        graph_fits.append((err, k, x))
    if len(eager_rows) < 2 * len(names):
        raise FitRowsError(f"{len(eager_rows)} usable eager (prefill or mixed) "
                        f"training rows, need at least {2 * len(names)}")
    # lanes: the best fit of graph steps; lanes that fit them within 1% of it (a grid that the graph rows cannot tell
    # apart) are told apart by the eager steps, which use the same lanes
    best_graph_err = min(f[0] for f in graph_fits)
    best = None
    for g_err, k, g_x in graph_fits:
        if g_err > best_graph_err * 1.01:
            continue
        longest = _longest(cols, eager_rows, split, k)
        for knee in knees:
            x, err = _fit_relative_l1(_eager_design(cols, eager_rows, knee, names, longest), y[eager_rows])
            # better by more than rounding: knees the rows cannot tell apart (every eager row above them: the hinge
            # is then a line) tie to the last bits, which the machine's arithmetic decides; the first of them is kept
            if best is None or err < best[0] * (1 - TIE_TOLERANCE):
                best = (err, knee, x, g_err, k, g_x)
    err, knee, x, g_err, lanes, g_x = best
    coefficients.update(zip(gnames, map(float, g_x)))
    dropped += [f for f, v in zip(gnames, g_x) if v == 0]
    abs_err.append(g_err * len(graph_rows))
    eager = dict(zip(names, map(float, x)))
    dropped += [f for f, v in eager.items() if v == 0]
    # An eager step never costs less than a graph step with fewer sequences and less context:
    # intercept + num_decode_seqs * n (+ the hinge) covers every graph's fixed cost at n sequences,
    # and decode_context_tokens is at least graph_context_tokens.
    # With mixed graphs an eager step has more tokens than the largest bucket (smaller steps replay graphs): its
    # floor at n decode rows counts the prefill tokens that take it there.
    n = np.arange(1, sizes[-1] + 1)
    graph_base = np.cumsum([coefficients["graph_intercept"]] + [coefficients[f"graph_pad_{s}"] for s in sizes[1:]])
    tokens = np.maximum(n, mixed_sizes[-1] + 1) if mixed_sizes else n
    eager_floor = (eager["intercept"] + eager["num_decode_seqs"] * n + eager["num_prefill_tokens"] * (tokens - n)
                   + eager["num_prefill_seqs"] * (tokens > n) + eager["tokens_over_knee"] * np.maximum(tokens - knee, 0))
    shortfall = float(np.max(graph_base[np.searchsorted(sizes, n)] - eager_floor))
    if shortfall > 0:
        eager["intercept"] += shortfall
        raised.append("intercept")
    if eager["decode_context_tokens"] < coefficients["graph_context_tokens"]:
        eager["decode_context_tokens"] = coefficients["graph_context_tokens"]
        raised.append("decode_context_tokens")
    if sharing and eager[SHARING[0]] < coefficients[SHARING[1]]:
        eager[SHARING[0]] = coefficients[SHARING[1]]
        raised.append(SHARING[0])
    # Both kinds share `lanes` and the splits (the padded size's), so this makes the eager term the larger.
    top = max(coefficients[f] for f in GRAPH_LONGEST)
    if eager["max_decode_context"] < top:
        if top - eager["max_decode_context"] > 1e-9 * top + 1e-15:  # reported when it moves more than rounding
            raised.append("max_decode_context")
        eager["max_decode_context"] = top
    coefficients = {**eager, **coefficients}
    abs_err.append(err * len(eager_rows))
    if mixed_sizes:
        # rows with the kernel's schedule (MAKESPAN_COLUMN, calibrations since round 35) price the prefill attention by
        # it; rows without it (every calibration before) by the waves, as before
        mnames = mixed_features(mixed_sizes, bool(cols[MAKESPAN_COLUMN][mixed_rows].any()))
        if len(mixed_rows) < 2 * len(mnames):
            raise FitRowsError(f"{len(mixed_rows)} usable graph mixed steps (prefill tokens, at most "
                            f"{mixed_sizes[-1]} tokens) to fit, need at least {2 * len(mnames)}")
        design = _mixed_design(cols, mixed_rows, mixed_sizes, lanes, split, heads_sms, shared_read_discount(coefficients),
                               mnames)
        x, err = _fit_relative_l1(design, y[mixed_rows])
        coefficients.update(zip(mnames, map(float, x)))
        dropped += [f for f, v in zip(mnames, x) if v == 0]
        abs_err.append(err * len(mixed_rows))
    return {"coefficients": coefficients, "knee": knee, "lanes": lanes, "dropped": dropped, "raised": raised,
            "train_mape": float(sum(abs_err) / len(rows_idx))}


def fit_profile(rows: "pd.DataFrame", model: str, gpu: str, *,
                clock_sensitivities: tuple[float, ...] = CLOCK_SENSITIVITIES, workers: int | None = 1,
                **options) -> tuple[ProfileCostModel, dict]:
    """Fit a ProfileCostModel to measured steps (_fit_at_one_clock, whose docstring says how and takes `options`),
    priced at the SM clock of the calibration's fastest steps.

    A calibration runs much of its time at the GPU's power cap, its SM clock moving between ~1.4 and 1.98 GHz on an
    H200 while a lightly loaded serving window holds the top clock (docs/accuracy-history.md, rounds 15-17). When
    the rows carry the clock each step ran at (`sm_clock_mhz`, recorded since round 17), each duration is brought to
    the reference clock (the rows' highest) as if a share s of it scaled with the clock:
    duration / (1 + s (reference / clock - 1)); s is the one in `clock_sensitivities` whose fit has the least
    held-out error (measured at each row's own clock, which the scaling leaves unchanged), so the calibration alone
    chooses it. The model then prices steps at the reference clock; the report's `sm_clock` says which s, at what
    reference, and the held-out error of each s. Rows without a clock for every step are fitted as they are.

    Rows with clocks (round 17 on) also price the decode steps that follow a prefill. A decode-only step right
    after a step of 1k prefill tokens or more (or after steps the calibration advanced untimed) runs 6-9% slower than
    the same step a dozen steps later, 3-5% two steps on, 1-2% five on; after a smaller prefill 2-3%, for a step or
    two; in calibrations and live windows alike (docs/accuracy-history.md, round 18), and a calibration's decode
    rows sit nearer their prefill than a window's do. So: the clock share is chosen on the rows without the decode
    steps right after a prefill (as in round 17); the decode rows' measured / predicted of that fit, by bucket of
    steps_since_prefill (AFTER_PREFILL_EDGES) and size of that prefill (AFTER_PREFILL_LARGE), over that of the same
    workload's rows AFTER_PREFILL_EDGES[-1] or more steps on, gives one factor per bucket and size
    (_after_prefill_table); then every row is fitted again with its decode duration divided by its factor, and the
    model multiplies decode steps by it (StepFeatures.steps_since_prefill, last_prefill_tokens). The report's
    `after_prefill` gives the factors and the rows behind them.

    The fits of the clock shares are independent: with `workers` > 1 (None: one per CPU, at most one per share, for
    rows of a whole calibration, PARALLEL_FIT_ROWS or more; `calibrate` and `live --calibrate` pass None) they run in
    that many fresh (spawned) processes, with the same result as one after the other (tests); the fit is part of a
    calibration's time (<= 120 s on an H200 machine). A script that passes workers != 1 needs the usual
    `if __name__ == "__main__":` guard of multiprocessing's spawn.
    """
    clocks = _row_clocks(rows)
    if clocks is None:
        return _with_decode_host(*_fit_at_one_clock(rows, model, gpu, **options), rows)
    if not clock_sensitivities:
        raise UserError("clock_sensitivities: expected at least one share of a step's time (0 for none)")
    since, last_tokens = calibration_steps_since_prefill(rows)
    decode = (np.asarray(rows["num_prefill_tokens"]) == 0) & (np.asarray(rows["num_decode_seqs"]) > 0)
    steady = ~(decode & (since == 1))  # decode_after_prefill, from the steps already counted
    reference = float(clocks.max())
    duration = np.asarray(rows["duration_s"], dtype=np.float64)
    shares = [float(s) for s in clock_sensitivities]
    jobs = [rows[steady].assign(duration_s=(duration / (1 + s * (reference / clocks - 1)))[steady]) for s in shares]
    if workers is None:
        workers = min(len(shares), os.cpu_count() or 1) if len(rows) >= PARALLEL_FIT_ROWS else 1
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn, not fork: a calibrating process holds a CUDA context, which a forked child must not inherit
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = list(pool.map(partial(_fit_at_one_clock, model=model, gpu=gpu, **options), jobs))
    else:
        done = [_fit_at_one_clock(job, model, gpu, **options) for job in jobs]
    fits = dict(zip(shares, done))
    best = min(fits, key=lambda s: (fits[s][1]["mape"], s))  # the least held-out error; ties to the smaller share
    profile, report = fits[best]
    at_top = duration / (1 + best * (reference / clocks - 1))
    ratio = at_top[decode] / profile.forward_times(rows[decode])
    workload = np.asarray(rows["workload"])[decode] if "workload" in rows else np.zeros(int(decode.sum()))
    factors, counts, n_far = _after_prefill_table(ratio, since[decode], last_tokens[decode], workload)
    if factors:
        row_factor = np.ones(len(rows))
        row_factor[decode] = replace(profile, after_prefill=factors).after_prefill_factors(since[decode],
                                                                                           last_tokens[decode])
        profile, report = _fit_at_one_clock(rows.assign(duration_s=at_top / row_factor), model, gpu, **options)
        profile = replace(profile, after_prefill=factors)
    clock = {"reference_mhz": reference, "sensitivity": best, "median_mhz": float(np.median(clocks[steady])),
             "held_out_mape_by_sensitivity": {str(s): fits[s][1]["mape"] for s in fits}}
    governor, governed = ClockGovernor.fit(rows, get_model(model), reference, best) if best else (None, {
        "skipped": "clock share 0: the clock moves no step time"})
    profile = replace(profile, governor=governor)
    profile.fit["sm_clock"] = report["sm_clock"] = clock
    profile.fit["clock_governor"] = report["clock_governor"] = governed
    profile.fit["after_prefill"] = report["after_prefill"] = {**after_prefill_json(factors), "rows": counts,
                                                              "far_rows": n_far}
    return _with_decode_host(profile, report, rows)


# The calibration's rows beside its profile (P.json -> P.steps.csv.gz; `live --calibrate`: DIR/profile.steps.csv.gz),
# gzipped (a fifth of the size; pandas reads either form, so `--refit` takes rows saved as plain CSV too).
CALIBRATION_ROWS_SUFFIX = ".steps.csv.gz"


def calibration_rows_beside(profile_path: str | Path) -> Path | None:
    """The calibration rows saved beside a profile JSON (P.steps.csv.gz, or a `live --calibrate` run's
    DIR/profile.steps.csv.gz); None when there are none."""
    path = Path(profile_path)
    for rows in (path.with_suffix(CALIBRATION_ROWS_SUFFIX), path.parent / f"profile{CALIBRATION_ROWS_SUFFIX}"):
        if rows.is_file():
            return rows
    return None


def _with_decode_host(profile: "ProfileCostModel", report: dict, rows: "pd.DataFrame") -> tuple["ProfileCostModel", dict]:
    """The fit with its calibration's graph decode steps' host shares recorded (fit["decode_host"], rows with device
    times only): validate compares a run's with them (pagesim.cost.host_share)."""
    shares = decode_host_shares(rows, profile.graph_batch_sizes[-1])
    if shares is not None:
        profile.fit["decode_host"] = report["decode_host"] = shares
    return profile, report


AFTER_PREFILL_MIN_ROWS = 15  # decode rows a bucket needs for a factor of its own
AFTER_PREFILL_MIN_FAR = 5  # far decode rows a workload needs for its rows to count


def _after_prefill_table(ratio: np.ndarray, since: np.ndarray, last_tokens: np.ndarray, workload: np.ndarray
                         ) -> tuple[tuple[tuple[float, ...], ...], list[list[int]], int]:
    """(factors per bucket of AFTER_PREFILL_EDGES after a small and a large prefill, each bucket's rows, the far rows)
    from decode rows' measured / predicted `ratio`, steps_since_prefill, last_prefill_tokens and workload
    (fit_profile): each row's ratio over the median of its own workload's far rows (AFTER_PREFILL_EDGES[-1] or more
    steps on; workloads with fewer than AFTER_PREFILL_MIN_FAR of them left out), so that what the model misprices in
    a workload as a whole does not count; a bucket's factor is the median of its rows' (at least 1, and 1 for fewer
    than AFTER_PREFILL_MIN_ROWS rows); no factors when none is above 1."""
    edges = AFTER_PREFILL_EDGES
    bucket = np.searchsorted(edges, since, side="right") - 1  # -1 for 0; len(edges) - 1 from the last edge on
    far = bucket == len(edges) - 1
    relative = np.full(len(ratio), np.nan)
    for w in np.unique(workload):
        mine = workload == w
        if (mine & far).sum() >= AFTER_PREFILL_MIN_FAR:
            relative[mine] = ratio[mine] / np.median(ratio[mine & far])
    counted = ~np.isnan(relative)
    large = last_tokens >= AFTER_PREFILL_LARGE
    counts = [[int((counted & (large == size) & (bucket == i)).sum()) for i in range(len(edges) - 1)]
              for size in (False, True)]
    factors = tuple(tuple(max(1.0, float(np.median(relative[counted & (large == size) & (bucket == i)])))
                          if n >= AFTER_PREFILL_MIN_ROWS else 1.0 for i, n in enumerate(row))
                    for size, row in zip((False, True), counts))
    return (factors if any(f > 1 for row in factors for f in row) else ()), counts, int((counted & far).sum())


def calibration_steps_since_prefill(rows) -> tuple[np.ndarray, np.ndarray]:
    """StepFeatures.steps_since_prefill and last_prefill_tokens of calibration rows (by `workload`, in order of
    `step`), a step after one not in the rows (advanced untimed: ContextBuilding, always a prefill of
    engine.calibration.ADVANCE_TOKENS or more) counting as right after a large prefill; all 0 for rows without
    `workload` and `step`."""
    since, tokens = np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows), dtype=np.int64)
    if "workload" not in rows or "step" not in rows:
        return since, tokens
    step = np.asarray(rows["step"], dtype=np.int64)
    prefill = np.asarray(rows["num_prefill_tokens"])
    for idx in rows.groupby("workload", sort=False).indices.values():
        gap = np.diff(step[idx], prepend=step[idx][0] - 2) != 1  # the first row too
        since[idx], tokens[idx] = steps_since_prefill(step[idx], prefill[idx], gap, AFTER_PREFILL_LARGE)
    return since, tokens


def decode_after_prefill(rows) -> np.ndarray:
    """Decode-only rows right after a step with prefill tokens or one not in the rows (advanced, ContextBuilding),
    or first in their workload (calibration_steps_since_prefill 1); all False without `workload` and `step`."""
    if "workload" not in rows or "step" not in rows:
        return np.zeros(len(rows), dtype=bool)
    decode = (np.asarray(rows["num_prefill_tokens"]) == 0) & (np.asarray(rows["num_decode_seqs"]) > 0)
    return decode & (calibration_steps_since_prefill(rows)[0] == 1)


def _row_clocks(rows) -> np.ndarray | None:
    """The rows' SM clocks in MHz, or None unless every row has one (calibrations before round 17 have none)."""
    if "sm_clock_mhz" not in rows:
        return None
    c = np.asarray(rows["sm_clock_mhz"], dtype=np.float64)
    return c if len(c) and np.isfinite(c).all() and (c > 0).all() else None


def _fit_at_one_clock(rows: "pd.DataFrame", model: str, gpu: str, *, test_fraction: float = 0.2, seed: int = 0,
                      knees: tuple[int, ...] = KNEES, holdout: str = "rows",
                      max_num_seqs: int = 256, lanes: tuple[int, ...] = LANES,
                      mixed_graph_token_sizes: tuple[int, ...] = (), prefill_kernel: str | None = None,
                      decode_programs_per_sm: tuple[int, ...] = ()) -> tuple[ProfileCostModel, dict]:
    """Fit a ProfileCostModel to measured steps; returns it and a report of its error on held-out steps.

    `rows` has the INPUT_COLUMNS and `duration_s` (seconds of the step). Rows without tokens or with
    swaps/copies are left out (transfer costs come from the bandwidths). Each kind of step (graph,
    eager; see the module docstring) gets its own coefficients, fitted to the least mean absolute
    relative error; the knee is the one in `knees` with the least training error, and max_context_lanes
    the one in `lanes` with the least training error of graph steps. The graph sizes are the executor's
    for `max_num_seqs` (the calibrated engine's). With `mixed_graph_token_sizes` (the calibrated engine's
    token buckets, when it graphed its mixed steps) graph mixed steps get their own coefficients; rows with
    prefill_makespan (MAKESPAN_COLUMN: calibrations since round 35, computed with the timed engine's prefill kernel,
    `prefill_kernel`, which the profile records) price their prefill attention by it (mixed_graph_attn_makespan).
    With `decode_programs_per_sm` (the decode launches' resident programs per SM, split and unsplit) graph steps
    price the rounds of the decode kernel's programs (with_rounds), and the profile records it.

    holdout="rows": a seeded permutation holds back `test_fraction` of the rows, and the model is
    fitted on the rest. holdout="workload" (needs a `workload` column): whole workloads are held out,
    round(1 / test_fraction) folds of them in turn (cross-validation), so each reported error is that
    of a model that never saw the step's workload; the returned model is then fitted on every row.
    """
    missing = [c for c in (*INPUT_COLUMNS, "duration_s") if c not in rows]
    if missing:
        raise UserError(f"calibration rows lack column(s) {', '.join(missing)}; expected {', '.join(INPUT_COLUMNS)}, duration_s")
    if holdout not in ("rows", "workload"):
        raise UserError(f"holdout {holdout!r}: expected 'rows' or 'workload'")
    if holdout == "workload" and "workload" not in rows:
        raise UserError("holdout='workload' needs a 'workload' column naming each row's calibration workload")
    if not 0 <= test_fraction < 1:
        raise UserError(f"test_fraction {test_fraction}: expected at least 0 and below 1")
    m, g = get_model(model), get_gpu(gpu)
    sizes = graph_batch_sizes(max_num_seqs)
    split = (sizes, decode_split_programs(g.name), m.num_kv_heads)
    if not lanes or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in lanes):
        raise UserError(f"lanes {lanes!r}: expected positive integers")
    cols = _columns(rows)
    keep = (cols["num_prefill_tokens"] + cols["num_decode_seqs"]) > 0
    for c in ("num_swap_out_blocks", "num_swap_in_blocks", "num_copy_blocks"):
        if c in rows:
            keep &= np.asarray(rows[c]) == 0
    idx = np.flatnonzero(keep)
    y = np.asarray(rows["duration_s"], dtype=np.float64)
    bad = idx[~(y[idx] > 0) | ~np.isfinite(y[idx])]
    if len(bad):
        raise FitRowsError(f"duration_s must be a positive number of seconds; row {bad[0]} has {y[bad[0]]!r}")
    transfers = {"swap_s_per_byte": 1 / (g.pcie_bandwidth * PCIE_EFFICIENCY),
                 "copy_s_per_byte": 2 / (g.hbm_bandwidth * MEM_EFFICIENCY)}

    def make(fitted, fit=None):
        return ProfileCostModel(m.name, g.name, {**fitted["coefficients"], **transfers}, fitted["knee"], fit=fit or {},
                                created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                graph_batch_sizes=sizes, max_context_lanes=fitted["lanes"],
                                mixed_graph_token_sizes=mixed_sizes, prefill_kernel=prefill_kernel,
                                decode_programs_per_sm=per_sm)

    mixed_sizes = tuple(int(t) for t in mixed_graph_token_sizes)
    per_sm = tuple(int(k) for k in decode_programs_per_sm)

    def fit(sel):
        return _fit_coefficients(cols, y, sel, sizes, knees, split, lanes, mixed_sizes, (m.num_heads, g.sm_count),
                                 per_sm)

    predicted = np.full(len(y), np.nan)
    if holdout == "rows":
        n_test = int(round(len(idx) * test_fraction))
        perm = np.random.default_rng(seed).permutation(idx)
        test, train = perm[:n_test], perm[n_test:]
        final = fit(train)
        scored = test if len(test) else train
        predicted[scored] = make(final).forward_times({c: v[scored] for c, v in cols.items()})
        folds = n_workloads = fold_workloads = None
    else:
        names = np.asarray(rows["workload"]).astype(str)[idx]
        workloads = np.unique(names)
        n_workloads = len(workloads)
        folds = min(n_workloads, max(2, int(round(1 / test_fraction)))) if test_fraction else 0
        if folds and n_workloads < 2:
            raise FitRowsError(f"{n_workloads} workload(s); holding out whole workloads needs at least 2")
        order = np.random.default_rng(seed).permutation(workloads)
        fold_workloads = [sorted(order[f::folds].tolist()) for f in range(folds)]
        for held_out in fold_workloads:
            out = np.isin(names, held_out)
            part = fit(idx[~out])
            predicted[idx[out]] = make(part).forward_times({c: v[idx[out]] for c, v in cols.items()})
        final = fit(idx)
        if not folds:  # nothing held out: the training error
            predicted[idx] = make(final).forward_times({c: v[idx] for c, v in cols.items()})
        train = scored = idx
        n_test = len(idx) if folds else 0
    ape = np.abs(predicted[scored] / y[scored] - 1)
    is_graph = _is_decode_graph(cols, scored, sizes)
    is_mixed = _is_mixed_graph(cols, scored, sizes, mixed_sizes)

    def summary(a):
        return {"mape": float(a.mean()), "p90_ape": float(np.percentile(a, 90)), "n": int(len(a))} if len(a) else None

    fit = {"mape": float(ape.mean()), "p90_ape": float(np.percentile(ape, 90)), "n_train": int(len(train)),
           "n_test": int(n_test), "holdout": holdout}
    if folds is not None:
        fit.update(folds=folds, n_workloads=n_workloads)
    fit["by_kind"] = {"graph": summary(ape[is_graph]), "eager": summary(ape[~is_graph & ~is_mixed])}
    if mixed_sizes:
        fit["by_kind"]["graph mixed"] = summary(ape[is_mixed])
    profile = make(final, fit)
    report = dict(fit, knee_tokens=final["knee"], dropped=final["dropped"], raised=final["raised"],
                  n_left_out=int((~keep).sum()), train_mape=final["train_mape"],
                  objective="mean absolute relative error", graph_batch_sizes=list(sizes),
                  max_context_lanes=final["lanes"])
    if per_sm:
        report["decode_programs_per_sm"] = list(per_sm)
    if mixed_sizes:
        report["mixed_graph_token_sizes"] = list(mixed_sizes)
    if fold_workloads:
        report["fold_workloads"] = fold_workloads
    return profile, report
