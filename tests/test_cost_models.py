"""Cost models: the roofline's arithmetic, the fast path's vectorised decode runs, profile files and fitting."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.cli import main as cli_main
from pagesim.config import Config
from pagesim.cost import ProfileCostModel, RooflineCostModel, StepFeatures, fit_profile, make_cost_model
from pagesim.cost.features import (PERSISTENT_MAX_Q, PREFILL_TILE, persistent_max_q, prefill_grid, prefill_makespan,
                                   prefill_walks)
from pagesim.cost.graphs import graph_batch_sizes, mixed_graph_token_sizes
from pagesim.cost.profile import (AFTER_PREFILL_EDGES, MAKESPAN, MIXED_FEATURES, WAVES, calibration_steps_since_prefill,
                                  mixed_features, num_splits, prefill_waves, shared_read_discount)
from pagesim.errors import UserError
from pagesim.request import Request
from pagesim.scheduler import ScheduledRequest, Scheduler, StepPlan

CONFIG = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=1000)
REPO = Path(__file__).resolve().parent.parent
COMMITTED_PROFILE = REPO / "results" / "profiles" / "h200-llama-3-8b.json"
SIZES = graph_batch_sizes(256)  # 1, 2, 4, ..., 256


def features(prefill=(), decode=(), shared=0, prefill_shared=0) -> StepFeatures:
    """prefill: (cached c, new q) per chunk; decode: computed tokens per sequence; shared: decode_shared_tokens;
    prefill_shared: prefill_shared_tokens."""
    walks = [prefill_walks(c, q) for c, q in prefill]
    return StepFeatures(
        num_prefill_tokens=sum(q for _, q in prefill), num_prefill_seqs=len(prefill),
        prefill_attn_pairs=sum(q * c + q * (q + 1) // 2 for c, q in prefill),
        prefill_context_tokens=sum(c + q for c, q in prefill),
        num_decode_seqs=len(decode), decode_context_tokens=sum(c + 1 for c in decode),
        max_decode_context=max(decode, default=-1) + 1, decode_shared_tokens=shared,
        prefill_tile_walks=sum(w for w, _ in walks), prefill_longest_walk=max((top for _, top in walks), default=0),
        prefill_shared_tokens=prefill_shared)


def calibration_grid() -> list[StepFeatures]:
    """Steps like a calibration run's: prefill chunks, decode batches (at graph sizes and between them), mixes."""
    steps = [features(prefill=[(c, q)]) for q in (16, 64, 256, 1024, 4096, 8192) for c in (0, 1024, 8192)]
    for n in (1, 4, 16, 64, 128, 256):
        for ctx in (128, 1024, 4096):
            steps += [features(prefill=[(0, q)], decode=[ctx] * n) for q in (128, 1024)]
    steps += [features(prefill=[(0, q)] * k, decode=[1024] * 8) for q in (32, 256, 1024) for k in (2, 4, 8)]
    for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 100, 128, 200, 256):
        steps += [features(decode=[ctx] * n) for ctx in (128, 1024, 4096)]
    return steps


def skewed_grid() -> list[StepFeatures]:
    """Short sequences with one long one (the calibration's skew workloads): the longest sets the attention time."""
    steps = []
    for n in (16, 32, 48, 64, 128):
        steps += [features(decode=[short] * (n - 1) + [long]) for short in (128, 1024) for long in (2048, 6144)]
    return steps + [features(prefill=[(0, q)], decode=[256] * 47 + [long]) for q in (64, 512) for long in (256, 4096)]


def sharing_grid() -> list[StepFeatures]:
    """Decode batches whose sequences share a prefix of p tokens (the calibration's shared-prefix workloads):
    n rows of p + c tokens read (n - 1) * p tokens of shared blocks again."""
    steps = []
    for n in (8, 16, 32, 64, 128):
        for p, c in ((1024, 256), (4096, 512), (2048, 2048)):
            steps.append(features(decode=[p + c] * n, shared=(n - 1) * p))
            steps.append(features(prefill=[(p, 256)], decode=[p + c] * n, shared=(n - 1) * p))
    return steps


def frame(steps: list[StepFeatures], duration, workload_size: int | None = None) -> pd.DataFrame:
    rows = [{name: getattr(f, name) for name in StepFeatures.__slots__} for f in steps]
    df = pd.DataFrame(rows)
    df["duration_s"] = [duration(f) for f in steps]
    if workload_size:  # consecutive rows grouped into named workloads, as run_calibration's are
        df["workload"] = [f"w{i // workload_size}" for i in range(len(df))]
    return df


@pytest.fixture(scope="module")
def roofline() -> RooflineCostModel:
    return make_cost_model("roofline", CONFIG)


@pytest.fixture(scope="module")
def profile(roofline) -> ProfileCostModel:
    """A profile with CUDA-graph decode steps (the default), fitted to the roofline."""
    return fit_profile(frame(calibration_grid() + skewed_grid(), roofline.step_time), "llama-3-8b", "h200")[0]


@pytest.fixture(scope="module")
def committed() -> ProfileCostModel:
    return make_cost_model(str(COMMITTED_PROFILE), CONFIG)


# Eager coefficients (prefill and mixed steps) and graph coefficients (decode-only steps at a padded size).
TRUTH = {"intercept": 20e-3, "num_prefill_tokens": 2e-6, "num_prefill_seqs": 1e-4, "num_decode_seqs": 2e-5,
         "decode_context_tokens": 6e-8, "prefill_attn_pairs": 1.2e-9, "tokens_over_knee": 2e-5,
         "graph_intercept": 5e-3, "graph_context_tokens": 3.5e-8, "graph_pad_2": 2e-4, "graph_pad_4": 2e-4,
         "graph_pad_8": 3e-4, "graph_pad_16": 3e-4, "graph_pad_32": 5e-4, "graph_pad_64": 5e-4,
         "graph_pad_128": 1e-3, "graph_pad_256": 2.5e-3, "graph_max_context": 1e-6, "max_decode_context": 1.2e-6}
TRUTH_KNEE = 1218  # one of the fitter's candidate knees
TRUTH_LANES = 32  # one of the fitter's candidate lanes


# Repeated reads of shared blocks cost a fraction of other reads (served from L2).
TRUTH_SHARING = {"graph_shared_tokens": 0.8e-8, "decode_shared_tokens": 1.5e-8}


def known_profile(sharing: bool = False) -> ProfileCostModel:
    truth = {**TRUTH, **TRUTH_SHARING} if sharing else TRUTH
    return ProfileCostModel("llama-3-8b", "h200", {**truth, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0}, TRUTH_KNEE,
                            graph_batch_sizes=SIZES, max_context_lanes=TRUTH_LANES)


# ---- features ---------------------------------------------------------------------------
def test_features_from_plan_count_causal_pairs_and_context():
    def sched(c, q, decode):
        return ScheduledRequest(Request("r", 0.0, 100, 10), c, q, decode)

    plan = StepPlan(0, scheduled=[sched(0, 4, False), sched(10, 3, False), sched(7, 1, True), sched(20, 1, True)],
                    blocks_to_swap_out=[(1, 2)], blocks_to_swap_in=[(3, 4), (5, 6)], blocks_to_copy=[(7, 8)])
    f = StepFeatures.from_plan(plan)
    # chunk 1: 4 new tokens, nothing cached: 1+2+3+4 = 10 pairs; chunk 2: 3 after 10: 3*10 + 1+2+3 = 36.
    assert (f.num_prefill_tokens, f.num_prefill_seqs, f.prefill_attn_pairs, f.prefill_context_tokens) == (7, 2, 46, 17)
    # decodes read their computed tokens and the new one: 8 + 21; the longest 21.
    assert (f.num_decode_seqs, f.decode_context_tokens, f.max_decode_context) == (2, 29, 21)
    assert StepFeatures.from_plan(StepPlan(1, scheduled=[sched(0, 4, False)])).max_decode_context == 0
    assert (f.num_swap_out_blocks, f.num_swap_in_blocks, f.num_copy_blocks) == (1, 2, 1)
    assert f.decode_shared_tokens == 0  # not asked for


@settings(max_examples=300, deadline=None)
@given(c=st.integers(0, 40000), q=st.integers(1, 9000))
def test_prefill_walks_count_each_programs_key_tiles(c, q):
    """One program per PREFILL_TILE query rows walks the keys up to its last row, in PREFILL_TILE-key tiles."""
    t = PREFILL_TILE
    walks = [-(-(c + min((j + 1) * t, q)) // t) for j in range(-(-q // t))]
    assert prefill_walks(c, q) == (sum(walks), max(walks))


def test_features_from_plan_keep_the_prefill_programs_walks():
    def sched(c, q, decode):
        return ScheduledRequest(Request("r", 0.0, 20000, 10), c, q, decode)

    f = StepFeatures.from_plan(StepPlan(0, scheduled=[sched(16800, 40, False), sched(0, 300, False), sched(5, 1, True)]))
    # 40 tokens after 16,800: one program walking 132 tiles; 300 from scratch: tiles of 1, 2 and 3 key tiles
    assert (f.prefill_tile_walks, f.prefill_longest_walk) == (132 + 6, 132)
    assert StepFeatures.from_plan(StepPlan(1, scheduled=[sched(5, 1, True)])).prefill_longest_walk == 0


def test_prefill_tile_is_the_engines():
    from engine.kernels import prefill_gluon, prefill_gluon_fp8
    from engine.kernels.prefill import FP8_PREFILL_CONFIG, PrefillConfig

    for cfg in (PrefillConfig(), FP8_PREFILL_CONFIG):
        assert (cfg.block_m, cfg.block_n, cfg.pack_gqa) == (PREFILL_TILE, PREFILL_TILE, False)
        assert not cfg.persistent and cfg.longest_first  # one program per tile, last query tiles first
    for cfg in (prefill_gluon.DEFAULT_CONFIG, prefill_gluon_fp8.DEFAULT_CONFIG):  # the sm_90 defaults: a head a row
        assert (cfg.block_m, cfg.block_n) == (PREFILL_TILE, PREFILL_TILE) and not cfg.persistent
    # the Gluon kernels' persistent grid for short chunks, as prefill_makespan schedules it
    assert prefill_gluon.PERSISTENT_MAX_Q == PERSISTENT_MAX_Q
    assert prefill_gluon_fp8.persistent_for_short_chunks is prefill_gluon.persistent_for_short_chunks
    assert persistent_max_q(prefill_gluon.KERNEL.__name__) == persistent_max_q(prefill_gluon_fp8.KERNEL.__name__) == 2048
    assert persistent_max_q("_prefill_kernel") == persistent_max_q(None) == 0
    # the grid a profile's, a calibration's and the benches' makespans share: Llama-3-8B's 32 query heads, the SMs
    assert prefill_grid("llama-3-8b", "h200", prefill_gluon.KERNEL.__name__) == (32, 132, 2048)
    assert prefill_grid("llama-3-8b", "h100", None) == (32, 132, 0)


def kernel_items(chunks, heads):
    """The prefill kernels' work items' key tiles in launch order (engine.kernels.prefill_gluon._work, prefill._tile_of
    longest first): query tile descending, then chunk, then head; a chunk's tiles past its rows walk nothing."""
    t = PREFILL_TILE
    n = -(-max(q for _, q in chunks) // t)
    return [-(-(c + min((j + 1) * t, q)) // t) if j * t < q else 0
            for j in range(n - 1, -1, -1) for c, q in chunks for _ in range(heads)]


def kernel_schedule(chunks, heads, slots, persistent_max_q):
    """The kernels' schedule written out, its most loaded program or SM: program i of the persistent grid (every
    chunk at most persistent_max_q tokens) takes items i, i + slots, ...; otherwise the `heads` equal items of each
    tile go to the `heads` least loaded SMs in launch order (each SM one, as many rounds as heads cover the SMs)."""
    items = kernel_items(chunks, heads)
    if persistent_max_q and max(q for _, q in chunks) <= persistent_max_q:
        return max(sum(items[i::slots]) for i in range(slots))
    load = [0] * slots
    for w in items[::heads]:  # one tile's items
        left = heads
        while left:
            for sm in sorted(range(slots), key=load.__getitem__)[:min(left, slots)]:
                load[sm] += w
            left -= min(left, slots)
    return max(load)


def test_prefill_makespan_schedules_the_kernels_work_items():
    """Two chunks' items interleave tile by tile: 1511 tokens after 4133 cached (12 query tiles of 33-45 key tiles) and
    111 after 17472 (one tile of 138) run the long walks last, on the persistent grid's programs 44-107 behind three
    or four short items each, 338 tiles where the mean over 132 SMs says 148 (a longdoc-b step, 21% over the waves'
    prediction live); one chunk whose items fit one wave lasts its longest walk; one of 5 query tiles (160 items)
    takes a second round on 28 programs."""
    chunks = [(4133, 1511), (17472, 111)]
    walks = sum(prefill_walks(c, q)[0] for c, q in chunks)
    assert prefill_waves(walks, 138, 32, 132) == pytest.approx(148.36, abs=0.01)
    assert prefill_makespan(chunks, 32, 132, PERSISTENT_MAX_Q) == 338
    assert kernel_schedule(chunks, 32, 132, PERSISTENT_MAX_Q) == 338  # program i of 132 takes items i, i + 132, ...
    assert prefill_makespan([(17472, 360)], 32, 132, PERSISTENT_MAX_Q) == 140  # 96 items: one wave, the longest walk
    assert prefill_makespan([(17472, 545)], 32, 132, PERSISTENT_MAX_Q) == 141 + 138
    assert prefill_makespan([], 32, 132, PERSISTENT_MAX_Q) == 0
    assert prefill_makespan(chunks, 32, 0, PERSISTENT_MAX_Q) == 0  # a GPU whose SM count is unknown
    # one program per item (the Triton kernel; the Gluon ones for a chunk over 2048 tokens): each SM takes the next
    # item when free, so the long walks start on the SMs that finished first, and the step lasts less
    assert prefill_makespan(chunks, 32, 132, 0) == kernel_schedule(chunks, 32, 132, 0) == 255 < 338
    assert prefill_makespan([(8190, 2184)], 32, 132, PERSISTENT_MAX_Q) == prefill_makespan([(8190, 2184)], 32, 132, 0)


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.tuples(st.integers(0, 30000), st.integers(1, 5000)), min_size=1, max_size=5),
       heads=st.sampled_from([1, 3, 8, 32, 64, 140, 300]), slots=st.sampled_from([1, 5, 66, 114, 132]),
       persistent=st.sampled_from([0, 2048, 10**6]))
def test_prefill_makespan_equals_the_schedule_of_every_work_item(chunks, heads, slots, persistent):
    """prefill_makespan (work items' runs on the persistent grid, the SMs' loads as a multiset) against the kernels'
    schedule written out (kernel_schedule), with any number of heads against the SMs."""
    assert prefill_makespan(chunks, heads, slots, persistent) == kernel_schedule(chunks, heads, slots, persistent)


def test_features_from_plan_give_the_prefill_makespan_when_asked():
    def sched(c, q, decode):
        return ScheduledRequest(Request("r", 0.0, 20000, 10), c, q, decode)

    plan = StepPlan(0, scheduled=[sched(4133, 1511, False), sched(9, 1, True), sched(17472, 111, False)])
    assert StepFeatures.from_plan(plan).prefill_makespan == 0  # not asked: a cost model that does not price it
    assert StepFeatures.from_plan(plan, 0, (32, 132, PERSISTENT_MAX_Q)).prefill_makespan == 338
    assert StepFeatures.from_plan(plan, 0, (32, 132, 0)).prefill_makespan == 255
    assert StepFeatures.from_plan(StepPlan(1, scheduled=[sched(9, 1, True)]), 0, (32, 132, 2048)).prefill_makespan == 0


@pytest.mark.parametrize("caching", [True, False])
def test_decode_shared_tokens_count_repeated_reads_of_shared_prefix_blocks(caching):
    """Three requests with the same 64-token prompt (4 blocks of 16), admitted one step apart: with the prefix
    cache the later two hit the first 3 blocks (the last prompt token is always computed, as in vLLM), so a
    decode step of all three reads 2 x 48 tokens a second time; without it nothing is shared."""
    cfg = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=64, enable_prefix_caching=caching)
    sched = Scheduler(cfg)
    reqs = [Request(f"r{i}", 0.0, 64, 20, prefix_hash_ids=(7, 8, 9, 10), hash_block_size=16, seq_no=i) for i in range(3)]
    t, shared = 0.0, []
    for i in range(6):
        if i < 3:
            sched.add_request(reqs[i])
        plan = sched.schedule(t)
        f = StepFeatures.from_plan(plan, cfg.block_size)
        shared.append((f.num_decode_seqs, f.decode_shared_tokens))
        sched.finish_step(plan, t := t + 0.01)
    assert shared[-1] == (3, 2 * 48 if caching else 0), shared
    assert shared[1] == (1, 0)  # one decode row shares with nobody
    # the manager's shared refs tell the same when every running request decodes (SimExecutor's shortcut)
    assert sched.kv.num_shared_refs() * cfg.block_size == shared[-1][1]
    plan, kv = sched.schedule(t), sched.kv
    assert StepFeatures.from_plan(plan, cfg.block_size, None, (kv.num_shared_refs(), 3, kv.shared_refs())) == \
        StepFeatures.from_plan(plan, cfg.block_size)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.lists(st.integers(1, 12), unique=True, max_size=8), st.booleans()), max_size=8),
       group=st.integers(0, 8))
def test_shared_reads_from_the_ref_counts_equal_the_pass_over_every_table(rows, group):
    """When the step's rows hold every referenced block (all running requests are rows), the shared reads from the
    blocks' reference counts and the prefill rows' tables alone (shared_tokens_by_refs) equal shared_tokens' pass
    over every table: rows of random tables (a block at most once in each, as the pool holds them) over few blocks,
    decode and prefill in random order, the leading decode rows as a decode group; from_plan gives the same features
    with `sharing` as without, and with it when a running request is no row (the pass over every table)."""
    from pagesim.cost.features import shared_tokens, shared_tokens_by_refs

    # decode [1, 2], [1, 3]; prefill [1, 2, 4], [4, 5]: blocks 1 and 2 re-read by a chunk after a decode row, block 4
    # by the second chunk after the first, block 1 by the second decode row
    assert shared_tokens_by_refs([[1, 2, 4], [4, 5]], {1: 2, 2: 1, 4: 1}, 4, 16) == \
        shared_tokens([[1, 2], [1, 3]], [[1, 2, 4], [4, 5]], 16) == (16, 3 * 16)
    refs = {b: n - 1 for b, n in Counter(b for ids, _ in rows for b in ids).items() if n > 1}  # the pool's
    decodes = [ids for ids, prefill in rows if not prefill]
    prefills = [ids for ids, prefill in rows if prefill]
    expected = shared_tokens(decodes, prefills, 16)
    assert shared_tokens_by_refs(prefills, refs, sum(refs.values()), 16) == expected
    requests = [Request(f"r{i}", 0.0, 200, 10) for i in range(len(rows))]
    for r, (ids, _) in zip(requests, rows):
        r.block_ids = ids
    lead = 0  # the leading decode rows, at most `group` of them, as the fast path's decode group
    while lead < min(group, len(rows)) and not rows[lead][1]:
        lead += 1
    plan = StepPlan(0, decode_group=requests[:lead], decode_group_computed=40 * lead, decode_group_max_computed=40,
                    scheduled=[ScheduledRequest(r, 40 if prefill else 39, 1 if not prefill else 16, not prefill)
                               for r, (_, prefill) in zip(requests[lead:], rows[lead:])])
    plain = StepFeatures.from_plan(plan, 16)
    assert (plain.decode_shared_tokens, plain.prefill_shared_tokens) == expected
    for running in (len(rows), len(rows) + 1):
        assert StepFeatures.from_plan(plan, 16, None, (sum(refs.values()), running, refs)) == plain


@pytest.mark.parametrize("num_gpu_blocks", [None, 1200])
def test_a_profile_priced_replay_is_the_same_with_shared_reads_from_the_ref_counts(monkeypatch, num_gpu_blocks):
    """A replay of a k-shot trace with prefix caching, priced by a profile that prices shared reads (round 36's H100
    profile), gives the same steps and requests with the shared reads from the pool's reference counts (SimExecutor's
    `sharing`, on steps with prefill rows too) as with a pass over every table in every step; roomy, and under
    memory pressure (preemptions)."""
    import pagesim.cost.features as features_module
    from pagesim.simulator import simulate
    from pagesim.traces.synth import synthesize

    config = Config(model="llama-3-8b", gpu="h100", enable_prefix_caching=True, num_gpu_blocks=num_gpu_blocks)
    model = make_cost_model(str(REPO / "results/profiles/h100-llama-3-8b-2026-12-06-r36h.json"), config)
    assert model.prices_sharing
    trace = synthesize("kshot", num_requests=300, rate=20.0, seed=0)
    by_refs, chunks = features_module.shared_tokens_by_refs, []

    def counted(prefill_tables, *args):
        chunks.append(len(prefill_tables))
        return by_refs(prefill_tables, *args)

    monkeypatch.setattr(features_module, "shared_tokens_by_refs", counted)
    fast = simulate(trace, config, model)
    assert sum(1 for n in chunks if n) > 100  # steps with prefill rows took it
    orig = StepFeatures.__dict__["from_plan"].__func__
    monkeypatch.setattr(StepFeatures, "from_plan", classmethod(
        lambda cls, plan, block_size=0, prefill_grid=None, sharing=None: orig(cls, plan, block_size, prefill_grid)))
    slow = simulate(trace, config, model)
    assert num_gpu_blocks is None or fast.steps["num_preemptions"].sum() > 0
    pd.testing.assert_frame_equal(fast.steps, slow.steps)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)


# ---- roofline ---------------------------------------------------------------------------
def test_roofline_batch1_decode_of_llama3_8b_on_h200_is_weight_bandwidth_bound(roofline):
    # Llama-3-8B: 8.03e9 parameters x 2 bytes = 16.06e9 bytes of weights; an H200 streams 4.8e12 B/s,
    # so reading them once takes 16.06e9 / 4.8e12 = 3.35 ms: the floor of a batch-1 decode step.
    ideal = CONFIG.model_spec.weight_bytes / CONFIG.gpu_spec.hbm_bandwidth
    assert ideal == pytest.approx(3.346e-3, rel=1e-3)
    # The model reads every matrix but the 128256 x 4096 embedding table (1.05e9 B, only gathered):
    # 15.01e9 B at 4.8e12 x 0.9 = 4.32e12 B/s -> 3.474 ms. K/V of 128 cached + 1 new token, read and
    # the new one written: 130 x 131072 B = 17 MB -> 4 us. Compute: 14.0e9 + 1.05e9 (LM head) FLOPs at
    # 989e12 x 0.7 -> 22 us, under the 3.474 ms of weight reads. Plus the 0.2 ms step overhead: 3.68 ms.
    t = roofline.step_time(features(decode=[128]))
    assert t == pytest.approx(3.474e-3 + 4e-6 + 0.2e-3, rel=2e-3)
    assert abs(t / ideal - 1) < 0.2, f"batch-1 decode {t * 1e3:.2f} ms is not within 20% of {ideal * 1e3:.2f} ms"


@pytest.mark.parametrize("kind", ["decode", "prefill chunk"])
def test_roofline_reads_each_cached_token_k_v_once(roofline, kind):
    """The K/V-read term alone: more cached context adds exactly its K/V bytes at the memory rate.

    A batch-1 decode and a 16-token chunk are bound by the weight reads (independent of the context)
    and, in attention, by K/V bytes (131072 B per cached token, 30 ns at 4.32e12 B/s, against 524288
    FLOPs per query-key pair, 0.76 ns: 0.76 ns per cached token for the decode, 12 ns for the chunk),
    so 100k more cached tokens cost 100k x 131072 B / 4.32e12 B/s = 3.03 ms. Dropping the term leaves
    the FLOP bound (0.08 ms, 1.2 ms); doubling it doubles the difference.
    """
    extra = 100_000
    if kind == "decode":
        short, long = features(decode=[2000]), features(decode=[2000 + extra])
    else:
        short, long = features(prefill=[(2000, 16)]), features(prefill=[(2000 + extra, 16)])
    expected = extra * CONFIG.model_spec.kv_bytes_per_token / (CONFIG.gpu_spec.hbm_bandwidth * 0.9)
    assert expected == pytest.approx(3.034e-3, rel=1e-3)
    assert roofline.step_time(long) - roofline.step_time(short) == pytest.approx(expected, rel=1e-9)


def test_roofline_large_prefill_is_compute_bound(roofline):
    # 8192 new tokens: 8192 x 14.0e9 dense FLOPs + 1.05e9 (one LM head row) + 33.6e6 causal pairs x
    # 524288 FLOPs = 1.32e14 FLOPs at 6.92e14 FLOP/s = 191 ms; the weights alone would take 3.5 ms.
    t = roofline.step_time(features(prefill=[(0, 8192)]))
    assert 0.18 < t < 0.2, f"a 8192-token prefill takes {t * 1e3:.0f} ms, expected ~191 ms (compute-bound)"


def test_roofline_swaps_and_copies_cost_their_bytes_over_the_links(roofline):
    block = CONFIG.block_bytes  # 16 tokens x 131072 B = 2 MiB
    f = StepFeatures(num_swap_out_blocks=3, num_swap_in_blocks=1, num_copy_blocks=2)
    expected = 4 * block / (64e9 * 0.75) + 2 * 2 * block / (4.8e12 * 0.9) + 0.2e-3
    assert roofline.step_time(f) == pytest.approx(expected, rel=1e-12)
    assert roofline.step_time(StepFeatures()) == 0.0


def test_roofline_mixed_step_pays_attention_and_matmuls_one_after_the_other(roofline):
    # 128 decodes at 4k context stream 128 x 4097 x 131072 B = 68.7 GB of K/V: 15.9 ms at 4.32e12 B/s.
    # They run in their own kernels, so they add to the 1024-token prefill's ~22 ms of matmuls instead
    # of hiding under them (one max over the whole step would give ~24 ms for both).
    prefill, decode = [(0, 1024)], [4096] * 128
    kv_stream = 128 * 4097 * CONFIG.model_spec.kv_bytes_per_token / (4.8e12 * 0.9)
    mixed = roofline.step_time(features(prefill=prefill, decode=decode))
    assert mixed >= roofline.step_time(features(prefill=prefill)) + kv_stream
    assert mixed == pytest.approx(39.6e-3, rel=0.01)


# ---- properties shared by both models ---------------------------------------------------------
counts = st.integers(0, 5000)
feature_values = st.fixed_dictionaries({name: counts for name in StepFeatures.__slots__})


@pytest.mark.parametrize("which", ["roofline", "profile", "committed"])
@settings(max_examples=200, deadline=None)
@given(base=feature_values, more=feature_values)
def test_more_work_is_never_cheaper(request, which, base, more):
    model = request.getfixturevalue(which)
    bigger = {k: base[k] + more[k] for k in base}
    bigger["prefill_attn_pairs"] += more["num_prefill_tokens"] ** 2  # pairs grow fastest
    t0, t1 = model.step_time(StepFeatures(**base)), model.step_time(StepFeatures(**bigger))
    assert t1 >= t0, f"{which}: {bigger} costs {t1} s, less than {base} at {t0} s"


@pytest.mark.parametrize("which", ["roofline", "profile", "committed", "known", "known-sharing"])
@pytest.mark.parametrize("num_seqs, context_start, longest, k", [
    (1, 0, 0, 1), (1, 100, 100, 50), (37, 12345, 4000, 300), (37, 12345, 334, 30), (64, 5000, 4000, 40),
    (65, 5000, 300, 40), (16, 20000, 6000, 30), (256, 10**6, 5000, 700), (300, 10**6, 4000, 30), (0, 0, 0, 5)])
def test_decode_run_times_equal_step_by_step(request, which, num_seqs, context_start, longest, k):
    model = known_profile(which == "known-sharing") if which.startswith("known") else request.getfixturevalue(which)
    shared = context_start // 3 if num_seqs > 1 else 0  # a model that does not price sharing ignores it
    run = model.decode_run_times(num_seqs, context_start, k, longest, shared)
    one_by_one = [model.step_time(StepFeatures(num_decode_seqs=num_seqs, decode_context_tokens=context_start + num_seqs * (j + 1),
                                               max_decode_context=(longest + j + 1) * (num_seqs > 0),
                                               decode_shared_tokens=shared))
                  for j in range(k)]
    assert isinstance(run, np.ndarray) and run.shape == (k,)
    np.testing.assert_allclose(run, one_by_one, rtol=1e-12, atol=0, err_msg=f"{which}: vectorised decode run differs")


# ---- profile: graph steps at the padded batch size ------------------------------------------
def test_graph_batch_sizes_are_the_executors():
    """The profile prices the graphs the executor captures: one rule, used by both."""
    pytest.importorskip("torch")  # engine.executor needs it
    from engine import executor

    assert executor.graph_batch_sizes is graph_batch_sizes  # values: tests/test_executor.py


def test_decode_steps_cost_what_their_padded_graph_costs():
    model = known_profile()
    ctx = 50_000

    def decode(n):
        return model.step_time(StepFeatures(num_decode_seqs=n, decode_context_tokens=ctx))

    # 33..64 sequences replay the 64-row graph: the same fixed cost, whatever the number of real rows.
    assert model.padded_batch(33) == model.padded_batch(64) == 64 and model.padded_batch(65) == 128
    assert decode(33) == decode(48) == decode(64) < decode(65) == decode(128)
    base = TRUTH["graph_intercept"] + sum(TRUTH[f"graph_pad_{s}"] for s in SIZES[1:7])
    stream = ctx / TRUTH_LANES  # no sequence longer than that: the batch's K/V stream sets the longest-term
    assert decode(40) == pytest.approx(base + TRUTH["graph_context_tokens"] * ctx + TRUTH["graph_max_context"] * stream,
                                       rel=1e-12)
    # Above the largest graph, or with any prefill token, the step runs eagerly: the eager formula.
    assert model.padded_batch(257) is None
    eager = StepFeatures(num_prefill_tokens=10, num_prefill_seqs=1, prefill_attn_pairs=55, num_decode_seqs=40,
                         decode_context_tokens=ctx)
    expected = (TRUTH["intercept"] + 10 * TRUTH["num_prefill_tokens"] + TRUTH["num_prefill_seqs"]
                + 40 * TRUTH["num_decode_seqs"] + ctx * TRUTH["decode_context_tokens"] + 55 * TRUTH["prefill_attn_pairs"]
                + stream * TRUTH["max_decode_context"])
    assert model.step_time(eager) == pytest.approx(expected, rel=1e-12)
    assert decode(300) == pytest.approx(TRUTH["intercept"] + 300 * TRUTH["num_decode_seqs"]
                                        + ctx * TRUTH["decode_context_tokens"] + stream * TRUTH["max_decode_context"],
                                        rel=1e-12)


def test_num_splits_are_the_decode_kernels(monkeypatch):
    torch = pytest.importorskip("torch")  # engine.kernels.decode needs it; pagesim duplicates its rule
    from engine.kernels import decode

    monkeypatch.setattr(decode, "_num_sms", lambda index: 132)  # an H200's SMs, without a GPU
    for rows in (1, 2, 3, 8, 9, 16, 17, 32, 33, 64, 200, 256, 300):
        assert num_splits(rows, 2 * 132, 8) == decode.default_num_splits(rows, 8, 64 * 256, torch.device("cuda", 0)), rows
    assert num_splits(33, 264, 8) == 1 and num_splits(32, 264, 8) == 2 and num_splits(16, 264, 8) == 3


def test_the_longest_sequence_sets_the_decode_attention_time():
    model = known_profile()
    c = TRUTH["graph_max_context"]
    base = TRUTH["graph_intercept"] + sum(TRUTH[f"graph_pad_{s}"] for s in SIZES[1:7])  # the 64-row graph
    # 48 sequences: one program per sequence and KV head. A uniform batch of 48 x 1000 keys streams
    # 48000 keys over 32 lanes (1500 each): longer than any one sequence's serial walk (1000).
    uniform = features(decode=[999] * 48)
    assert model.step_time(uniform) == pytest.approx(base + TRUTH["graph_context_tokens"] * 48000 + c * 1500, rel=1e-12)
    # About as many keys with one sequence at 6000: its walk (6000 keys) outlasts the stream (1499).
    skewed = features(decode=[892] * 47 + [5999])
    assert (skewed.decode_context_tokens, skewed.max_decode_context) == (47971, 6000)
    assert model.step_time(skewed) == pytest.approx(base + TRUTH["graph_context_tokens"] * 47971 + c * 6000, rel=1e-12)
    assert model.step_time(skewed) - model.step_time(uniform) > 4e-3
    # 16 rows: the kernel splits each sequence 3 ways, so the longest program walks a third of it.
    small = StepFeatures(num_decode_seqs=16, decode_context_tokens=10000, max_decode_context=6000)
    assert model.step_time(small) == pytest.approx(TRUTH["graph_intercept"] + sum(TRUTH[f"graph_pad_{s}"] for s in SIZES[1:5])
                                                   + TRUTH["graph_context_tokens"] * 10000 + c * 2000, rel=1e-12)
    # Eager steps (a prefill token) pay the same way, at their own coefficient.
    mixed = dict(num_prefill_tokens=1, num_prefill_seqs=1, prefill_attn_pairs=1, num_decode_seqs=48, decode_context_tokens=48000)
    long, short = (model.step_time(StepFeatures(**mixed, max_decode_context=m)) for m in (6000, 1000))
    assert long - short == pytest.approx(TRUTH["max_decode_context"] * (6000 - 1500), rel=1e-9)
    # A profile without the term (fitted before it existed) ignores the longest sequence.
    old = ProfileCostModel("llama-3-8b", "h200", {k: v for k, v in model.coefficients.items()
                                                  if k not in ("graph_max_context", "max_decode_context")},
                           TRUTH_KNEE, graph_batch_sizes=SIZES)
    assert old.step_time(skewed) == old.step_time(StepFeatures(num_decode_seqs=48, decode_context_tokens=47971))


def test_the_longest_walk_is_priced_per_split_regime():
    """graph_max_context prices the longest walk of graphs whose sequences split 4+ ways (8 rows and fewer on an
    H200), graph_max_context_2_3_splits that of 16 and 32 rows, graph_max_context_1_split that of 64+; a profile
    without the last two (fitted before them) prices every graph with the first. The fit recovers all three."""
    regimes = {"graph_max_context": 0.6e-6, "graph_max_context_2_3_splits": 0.8e-6, "graph_max_context_1_split": 1.0e-6}
    known = ProfileCostModel("llama-3-8b", "h200", {**TRUTH, **regimes, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0},
                             TRUTH_KNEE, graph_batch_sizes=SIZES, max_context_lanes=TRUTH_LANES)
    old = known_profile()  # graph_max_context 1e-6 only
    for rows, splits, name in ((8, 5, "graph_max_context"), (16, 3, "graph_max_context_2_3_splits"),
                               (32, 2, "graph_max_context_2_3_splits"), (64, 1, "graph_max_context_1_split")):
        assert num_splits(rows, 264, 8) == splits
        short, long = (StepFeatures(num_decode_seqs=rows, decode_context_tokens=100 * rows + m, max_decode_context=m)
                       for m in (100, 12000))
        walk = -(-12000 // splits) - max((100 * rows + 100) / TRUTH_LANES, -(-100 // splits))  # longest keys
        extra = TRUTH["graph_context_tokens"] * 11900
        assert known.step_time(long) - known.step_time(short) == pytest.approx(extra + regimes[name] * walk, rel=1e-9), rows
        assert old.step_time(long) - old.step_time(short) == pytest.approx(extra + TRUTH["graph_max_context"] * walk,
                                                                           rel=1e-9), rows
    fitted, _ = fit_profile(frame(calibration_grid() + skewed_grid() * 2, known.step_time), "llama-3-8b", "h200")
    for name, value in regimes.items():
        assert fitted.coefficients[name] == pytest.approx(value, rel=0.05), name
    # eager steps stay at least as dear: their one coefficient covers the dearest regime
    assert fitted.coefficients["max_decode_context"] >= max(fitted.coefficients[f] for f in regimes)


def test_forward_times_equal_step_time_row_by_row(profile, committed):
    grid = calibration_grid() + skewed_grid() + [features(decode=[100] * 300), features(decode=[100] * 299 + [5000])]
    df = frame(grid, lambda f: 1.0)
    for model in (profile, committed, known_profile()):
        one_by_one = [model.step_time(f) for f in grid]
        np.testing.assert_allclose(model.forward_times(df), one_by_one, rtol=1e-12, atol=0)


# ---- profile: fitting ------------------------------------------------------------------------
def test_fit_recovers_a_known_model_with_padded_batch_structure():
    known = known_profile()
    rng = np.random.default_rng(1)
    steps = calibration_grid() * 3 + skewed_grid() * 3
    noisy = frame(steps, known.step_time)
    noisy["duration_s"] *= 1 + 0.01 * rng.standard_normal(len(noisy))  # 1% timing noise
    noisy.loc[5, "duration_s"] *= 10  # a pause (a JIT compile): the absolute-error fit ignores it
    fitted, report = fit_profile(noisy, "llama-3-8b", "h200")
    assert report["knee_tokens"] == TRUTH_KNEE and fitted.graph_batch_sizes == SIZES
    assert report["max_context_lanes"] == fitted.max_context_lanes == TRUTH_LANES
    for name, value in TRUTH.items():
        if not name.startswith("graph_pad_"):
            assert fitted.coefficients[name] == pytest.approx(value, rel=0.1), f"{name}: fitted {fitted.coefficients[name]:.3g}, true {value:.3g}"
    # Each graph's fixed cost (graph_intercept plus the increments up to its size) within the 1% noise.
    for size in SIZES:
        ours, true = (m.step_time(StepFeatures(num_decode_seqs=size)) for m in (fitted, known))
        assert ours == pytest.approx(true, rel=0.01), f"graph of {size}: fitted {ours:.4g} s, true {true:.4g} s"
    clean = frame(calibration_grid() + skewed_grid(), known.step_time)
    assert np.abs(fitted.forward_times(clean) / clean["duration_s"] - 1).mean() < 0.005
    assert report["p90_ape"] < 0.02 and report["n_test"] == round(len(steps) * 0.2)
    assert set(report["by_kind"]) == {"graph", "eager"} and report["by_kind"]["graph"]["n"] > 0
    # Decode batches between two graph sizes cost what the larger graph costs.
    for n, g in ((3, 4), (24, 32), (100, 128), (200, 256)):
        f = StepFeatures(num_decode_seqs=n, decode_context_tokens=1000 * n)
        assert fitted.step_time(f) == fitted.step_time(StepFeatures(num_decode_seqs=g, decode_context_tokens=1000 * n))


def test_fit_recovers_the_price_of_shared_reads():
    """With calibration steps whose decode rows share blocks, the fit prices repeated reads apart (cheaper);
    without such steps it fits no sharing terms, and a model without them prices shared reads as any other."""
    known = known_profile(sharing=True)
    steps = calibration_grid() + skewed_grid() + sharing_grid() * 2
    fitted, report = fit_profile(frame(steps, known.step_time), "llama-3-8b", "h200")
    assert fitted.prices_sharing and "graph_shared_tokens" in fitted.feature_names
    for name, value in {**TRUTH_SHARING, "graph_context_tokens": TRUTH["graph_context_tokens"]}.items():
        assert fitted.coefficients[name] == pytest.approx(value, rel=0.05), name
    f = features(decode=[4096 + 512] * 32, shared=31 * 4096)
    assert fitted.step_time(f) == pytest.approx(known.step_time(f), rel=0.01)
    assert fitted.step_time(f) < fitted.step_time(features(decode=[4096 + 512] * 32))
    plain, _ = fit_profile(frame(calibration_grid() + skewed_grid(), known_profile().step_time), "llama-3-8b", "h200")
    assert not plain.prices_sharing and not set(TRUTH_SHARING) & set(plain.coefficients)
    assert plain.step_time(f) == plain.step_time(features(decode=[4096 + 512] * 32))


def test_a_sharing_profile_round_trips_through_json(tmp_path):
    known = known_profile(sharing=True)
    known.to_json(tmp_path / "p.json")
    loaded = ProfileCostModel.from_json(tmp_path / "p.json")
    assert loaded.prices_sharing and set(TRUTH_SHARING) <= set(json.loads((tmp_path / "p.json").read_text())["features"])
    for f in sharing_grid():
        assert loaded.step_time(f) == known.step_time(f)


def test_fit_keeps_eager_steps_at_least_as_dear_as_graph_steps():
    # Rows where eager steps look cheaper than graph steps (noise, a bad grid): the fit raises the eager
    # intercept and context cost so adding a prefill token to a decode batch never makes it cheaper.
    cheap_eager = {**TRUTH, "intercept": 1e-3, "decode_context_tokens": 1e-8}
    model = ProfileCostModel("llama-3-8b", "h200", {**cheap_eager, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0},
                             TRUTH_KNEE, graph_batch_sizes=SIZES)
    fitted, report = fit_profile(frame(calibration_grid(), model.step_time), "llama-3-8b", "h200")
    assert set(report["raised"]) == {"intercept", "decode_context_tokens"}
    c = fitted.coefficients
    assert c["decode_context_tokens"] >= c["graph_context_tokens"]
    for n in range(1, 257):  # the eager formula at n sequences covers the graph that n sequences replay
        graph = fitted.step_time(StepFeatures(num_decode_seqs=n))
        assert c["intercept"] + n * c["num_decode_seqs"] + c["tokens_over_knee"] * max(n - fitted.knee_tokens, 0) >= graph * (1 - 1e-12)
    decode = StepFeatures(num_decode_seqs=256, decode_context_tokens=10**6)
    mixed = StepFeatures(num_prefill_tokens=1, num_prefill_seqs=1, prefill_attn_pairs=1, num_decode_seqs=256,
                         decode_context_tokens=10**6)
    assert fitted.step_time(mixed) >= fitted.step_time(decode)


def test_holdout_by_workload_is_cross_validation_over_whole_workloads():
    known = known_profile()
    rng = np.random.default_rng(2)
    steps = calibration_grid() * 2
    df = frame(steps, known.step_time, workload_size=9)
    df["duration_s"] *= 1 + 0.01 * rng.standard_normal(len(df))
    model, report = fit_profile(df, "llama-3-8b", "h200", holdout="workload", test_fraction=0.25, seed=3)
    workloads = sorted(df["workload"].unique())
    folds = report["fold_workloads"]
    assert report["holdout"] == "workload" and report["folds"] == len(folds) == 4
    assert sorted(w for fold in folds for w in fold) == workloads and all(folds)  # a partition of the workloads
    assert report["n_workloads"] == len(workloads) and report["n_train"] == report["n_test"] == len(df)
    # Each held-out row is predicted by a model fitted without its workload.
    ape = np.zeros(len(df))
    for held_out in folds:
        out = df["workload"].isin(held_out).to_numpy()
        part, _ = fit_profile(df[~out], "llama-3-8b", "h200", holdout="workload", test_fraction=0)
        ape[out] = np.abs(part.forward_times(df[out]) / df["duration_s"][out] - 1)
    assert report["mape"] == pytest.approx(ape.mean(), rel=1e-9)
    # The returned model is fitted on every row: the same as with nothing held out.
    everything, _ = fit_profile(df, "llama-3-8b", "h200", holdout="workload", test_fraction=0)
    assert model.coefficients == everything.coefficients
    with pytest.raises(UserError, match="'workload' column"):
        fit_profile(df.drop(columns="workload"), "llama-3-8b", "h200", holdout="workload")
    with pytest.raises(UserError, match="holdout 'random'"):
        fit_profile(df, "llama-3-8b", "h200", holdout="random")


def test_fit_to_the_roofline_is_close(roofline):
    # The roofline has no CUDA graphs (no padding, no eager launch cost): decode steps fit it almost exactly;
    # eager steps less closely, as the fit keeps them at least as dear as graph steps (the intercept is raised).
    _, report = fit_profile(frame(calibration_grid() + skewed_grid(), roofline.step_time), "llama-3-8b", "h200")
    assert report["by_kind"]["graph"]["mape"] < 0.01, f"graph steps miss the roofline: {report}"
    assert report["by_kind"]["eager"]["mape"] < 0.1 and report["mape"] < 0.05, f"profile misses the roofline: {report}"


def test_fit_is_deterministic_and_leaves_out_transfer_and_empty_rows(roofline):
    df = frame(calibration_grid() + [StepFeatures(num_swap_in_blocks=4), StepFeatures()], roofline.step_time)
    df.loc[len(df) - 1, "duration_s"] = 0.0  # an empty step: left out, so its zero duration is no error
    (a, ra), (b, rb) = fit_profile(df, "llama-3-8b", "h200"), fit_profile(df, "llama-3-8b", "h200")
    assert a.coefficients == b.coefficients and ra["mape"] == rb["mape"] and ra["n_left_out"] == 2


def test_fit_rejects_rows_it_cannot_use():
    with pytest.raises(UserError, match="lack column.*decode_context_tokens"):
        fit_profile(pd.DataFrame({"num_prefill_tokens": [1], "num_decode_seqs": [0], "prefill_attn_pairs": [1],
                                  "duration_s": [1e-3]}), "llama-3-8b", "h200")
    df = frame(calibration_grid(), lambda f: 1e-3)
    df.loc[3, "duration_s"] = -1.0
    with pytest.raises(UserError, match="row 3"):
        fit_profile(df, "llama-3-8b", "h200")
    prefill_only = frame([f for f in calibration_grid() if f.num_prefill_tokens], lambda f: 1e-3)
    with pytest.raises(UserError, match="decode-only .*CUDA-graph"):
        fit_profile(prefill_only, "llama-3-8b", "h200")


# ---- profile: files ------------------------------------------------------------------------
def test_profile_json_round_trip(profile, tmp_path):
    path = tmp_path / "h200.json"
    profile.to_json(path)
    d = json.loads(path.read_text())
    assert d["kind"] == "profile" and d["features"] == list(profile.feature_names)
    assert d["graph_batch_sizes"] == list(SIZES) and "graph_pad_64" in d["features"] and "prefill_step" not in d["features"]
    assert {"model", "gpu", "coefficients", "fit", "created"} <= d.keys() and {"mape", "n_train", "n_test"} <= d["fit"].keys()
    loaded = make_cost_model(str(path), CONFIG)
    assert loaded.coefficients == profile.coefficients and loaded.knee_tokens == profile.knee_tokens
    assert loaded.graph_batch_sizes == SIZES
    for f in calibration_grid()[::7] + [StepFeatures(num_swap_out_blocks=2, num_copy_blocks=1)]:
        assert loaded.step_time(f) == profile.step_time(f)
    assert loaded.describe()["kind"] == "profile" and loaded.describe()["source"] == str(path)
    assert loaded.describe()["graph_batch_sizes"] == list(SIZES)


def test_profile_without_graph_sizes_is_refused_with_the_way_out(tmp_path):
    # A profile file as written before CUDA-graph steps were modelled (one formula for every step).
    coef = {"intercept": 5e-3, "prefill_step": 2e-2, "num_prefill_tokens": 0.0, "num_decode_seqs": 1.6e-5,
            "decode_context_tokens": 3.6e-8, "prefill_attn_pairs": 1.5e-9, "tokens_over_knee": 2.2e-5}
    old = {"kind": "profile", "model": "llama-3-8b", "gpu": "h200", "features": list(coef),
           "coefficients": {**coef, "swap_s_per_byte": 2e-11, "copy_s_per_byte": 4e-13}, "knee_tokens": 1218,
           "fit": {"mape": 0.045, "n_train": 1, "n_test": 1}, "created": ""}
    with pytest.raises(UserError, match="no 'graph_batch_sizes'.*calibrate --refit"):
        make_cost_model(_write(tmp_path, json.dumps(old)), CONFIG)


def _write(tmp_path, text: str):
    path = tmp_path / "profile.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("coefficients"), "missing key.*coefficients"),
    (lambda d: d.update(kind="roofline"), "'kind' is 'roofline'"),
    (lambda d: d["coefficients"].update(intercept="fast"), r"coefficients\['intercept'\] is 'fast'"),
    (lambda d: d["coefficients"].pop("swap_s_per_byte"), r"coefficients\['swap_s_per_byte'\]"),
    (lambda d: d["features"].append("moon_phase"), "unknown feature.*moon_phase"),
    (lambda d: d["features"].append("graph_pad_512"), "unknown feature.*graph_pad_512"),
    (lambda d: d.pop("graph_batch_sizes"), "no 'graph_batch_sizes'"),
    (lambda d: d.update(graph_batch_sizes=[1, 4, 2]), "'graph_batch_sizes' is \\[1, 4, 2\\]"),
    (lambda d: d.update(graph_batch_sizes="1,2"), "'graph_batch_sizes' is '1,2'"),
    (lambda d: d.update(model="gpt-5"), "unknown model 'gpt-5'"),
    (lambda d: d.update(knee_tokens=-3), "knee_tokens"),
    (lambda d: d.update(max_context_lanes=-1), "'max_context_lanes' is -1"),
    (lambda d: d.pop("max_context_lanes"), "need 'max_context_lanes'"),
])
def test_bad_profile_files_are_named_in_the_error(profile, tmp_path, mutate, message):
    path = tmp_path / "good.json"
    profile.to_json(path)
    d = json.loads(path.read_text())
    mutate(d)
    bad = _write(tmp_path, json.dumps(d))
    with pytest.raises(UserError, match=message) as e:
        make_cost_model(bad, CONFIG)
    assert bad in str(e.value)


def test_missing_or_non_json_profile_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such file.*'roofline'") as e:
        make_cost_model(str(tmp_path / "nope.json"), CONFIG)
    assert "nope.json" in str(e.value)
    with pytest.raises(UserError, match="not valid JSON"):
        make_cost_model(_write(tmp_path, "{'kind': profile"), CONFIG)
    with pytest.raises(UserError, match="expected a JSON object"):
        make_cost_model(_write(tmp_path, "[1, 2]"), CONFIG)


def test_profile_for_another_model_or_gpu_is_refused(profile, tmp_path):
    path = tmp_path / "h200.json"
    profile.to_json(path)
    with pytest.raises(UserError, match="fitted for llama-3-8b on h200.*llama-3-8b on h100"):
        make_cost_model(str(path), CONFIG.replace(gpu="h100"))


def test_cost_package_does_not_import_torch():
    code = "import sys, pagesim.cost; assert 'torch' not in sys.modules, 'pagesim.cost imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- calibrate --refit and the committed profile ---------------------------------------------
def test_refit_cli_writes_a_loadable_profile_without_a_gpu(tmp_path, capsys):
    known = known_profile()
    rows = frame((calibration_grid() + skewed_grid()) * 2, known.step_time, workload_size=12)
    rows["exec_s"] = rows["duration_s"]  # extra columns of a saved calibration pass through unused
    csv = tmp_path / "cal.steps.csv"
    rows.to_csv(csv, index=False)
    out = tmp_path / "profiles" / "cal.json"
    assert cli_main(["calibrate", "--refit", str(csv), "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["command"] == f"python -m pagesim calibrate --refit {csv} --out {out}"
    assert d["report"]["holdout"] == "workload" and d["report"]["mape"] < 0.02
    assert d["workloads"] == list(dict.fromkeys(rows["workload"])) and d["graph_batch_sizes"] == list(SIZES)
    loaded = make_cost_model(str(out), CONFIG)
    for f in calibration_grid()[::5]:
        assert loaded.step_time(f) == pytest.approx(known.step_time(f), rel=1e-3)
    # Was: the whole fit report printed as JSON (~223 lines for a calibration) and no "wrote" line. Now a summary;
    # the report is the profile's.
    printed = capsys.readouterr().out.splitlines()
    by_kind = d["report"]["by_kind"]
    assert len(printed) == 3 and printed[-1] == f"wrote {out} (the full fit report under 'report')"
    assert printed[0].startswith(f"held-out MAPE {100 * d['report']['mape']:.1f}% (whole workloads, "
                                 f"{d['report']['folds']} folds of {d['report']['n_workloads']}): "
                                 f"graph {100 * by_kind['graph']['mape']:.1f}% ({by_kind['graph']['n']:,} steps)")
    assert printed[1].startswith(f"knee {d['knee_tokens']} tokens, ")
    from engine.calibration import fit_summary

    r22c = json.loads((REPO / "results" / "profiles" / "h200-llama-3-8b-2026-12-04-r22c.json").read_text())
    assert fit_summary(r22c["report"], Path("p.json")).splitlines()[:2] == [
        "held-out MAPE 3.0% (whole workloads, 5 folds of 78): graph 3.0% (2,905 steps), eager 1.5% (200 steps), "
        "graph mixed 3.3% (419 steps)", "knee 32 tokens, 64 context lanes, clock share 0.15 (steps priced at 1980 MHz)"]
    # A new profile from rows timed with an fp8 cache: --kv-cache-dtype says so (nothing at --out to read it from).
    fp8_out = tmp_path / "profiles" / "cal-fp8.json"
    assert cli_main(["calibrate", "--refit", str(csv), "--out", str(fp8_out), "--kv-cache-dtype", "fp8"]) == 0
    assert json.loads(fp8_out.read_text())["kv_cache_dtype"] == "fp8"
    make_cost_model(str(fp8_out), CONFIG.replace(kv_cache_dtype="fp8"))
    capsys.readouterr()

    # Refitting over a calibration's profile keeps the records of the measurement.
    records = {"environment": {"gpu": "NVIDIA H200"}, "config": {"model": "llama-3-8b", "gpu": "h200", "max_num_seqs": 64},
               "workloads": ["a", "b"], "calibration_s": 97.5}
    out.write_text(json.dumps({**d, **records, "report": {}, "command": "old"}))
    assert cli_main(["calibrate", "--refit", str(csv), "--out", str(out), "--force"]) == 0
    d2 = json.loads(out.read_text())
    assert {k: d2[k] for k in records} == records and d2["report"]["holdout"] == "workload"
    assert d2["graph_batch_sizes"] == [1, 2, 4, 8, 16, 32, 64]  # from the measured engine's max_num_seqs
    assert cli_main(["calibrate", "--refit", str(csv), "--out", str(out), "--gpu", "h100", "--force"]) == 2
    assert "holds a profile of llama-3-8b on h200" in capsys.readouterr().err
    assert cli_main(["calibrate", "--refit", str(tmp_path / "nope.csv"), "--out", str(out), "--force"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_committed_profile_is_reproduced_by_refit(committed):
    d = json.loads(COMMITTED_PROFILE.read_text())
    assert d["graph_batch_sizes"] == list(SIZES) and d["report"]["holdout"] == "workload"
    # the command as it was run; its rows have been kept gzipped since round 9 (CALIBRATION_ROWS_SUFFIX)
    assert d["command"] == ("python -m pagesim calibrate --refit results/profiles/h200-llama-3-8b.steps.csv "
                            "--out results/profiles/h200-llama-3-8b.json")
    assert {"environment", "config", "workloads"} <= d.keys()
    rows = pd.read_csv(COMMITTED_PROFILE.with_suffix(".steps.csv.gz"))
    refitted, report = fit_profile(rows, "llama-3-8b", "h200", holdout="workload", max_num_seqs=d["config"]["max_num_seqs"])
    assert refitted.knee_tokens == committed.knee_tokens
    for name, value in committed.coefficients.items():
        assert refitted.coefficients[name] == pytest.approx(value, rel=1e-6, abs=1e-15), name
    assert report["mape"] == pytest.approx(d["report"]["mape"], rel=1e-6)


@pytest.mark.parametrize("second_knee_error, kept", [(1 - 1e-13, 2), (1 - 1e-6, 4)])
def test_knees_the_rows_cannot_tell_apart_give_the_first_of_them(monkeypatch, second_knee_error, kept):
    """Two knees whose fits differ by rounding alone (every eager row above both: the hinge is then a line) are one
    fit: the first knee is kept, whichever the machine's last bits favour (a device's calibration and a refit of its
    rows on another machine chose 38 and 91 tokens for round 50's H100 rows); a knee better by more is taken."""
    from pagesim.cost import profile as P

    design, fit_l1, knee = P._eager_design, P._fit_relative_l1, []

    def eager_design(cols, sel, k, *args):
        knee.append(k)
        return design(cols, sel, k, *args)

    def fit_relative_l1(a, y):
        x, err = fit_l1(a, y)
        return x, err * (second_knee_error if knee and knee[-1] == 4 else 1.0)  # the second knee's

    monkeypatch.setattr(P, "_eager_design", eager_design)
    monkeypatch.setattr(P, "_fit_relative_l1", fit_relative_l1)
    rows = frame(calibration_grid(), known_profile().step_time)
    _, report = fit_profile(rows, "llama-3-8b", "h200", knees=(2, 4))  # every eager row has more tokens
    assert report["knee_tokens"] == kept


@pytest.mark.parametrize("seed", range(4))
def test_relative_l1_fit_reaches_the_linear_programs_optimum(seed):
    """The reweighted least squares reaches the optimum of min mean |a x / y - 1|, x >= 0, solved as an LP."""
    from scipy.optimize import linprog

    from pagesim.cost.profile import _fit_relative_l1

    rng = np.random.default_rng(seed)
    m, n = 150, 5
    a = rng.uniform(0, 1, (m, n))
    a[:, 0] = 1
    y = a @ np.array([0.5, 2, 0, 1, 0.3]) * (1 + rng.normal(0, 0.1, m)) + 0.01
    x, err = _fit_relative_l1(a, y)
    ratio = a / y[:, None]
    lp = linprog(np.r_[np.zeros(n), np.ones(m) / m],
                 A_ub=np.block([[ratio, -np.eye(m)], [-ratio, -np.eye(m)]]), b_ub=np.r_[np.ones(m), -np.ones(m)],
                 bounds=[(0, None)] * (n + m))
    assert lp.success and (x >= 0).all()
    assert err == pytest.approx(np.abs(ratio @ x - 1).mean(), rel=1e-12)
    assert err == pytest.approx(lp.fun, rel=1e-3), f"IRLS stopped at {err}, the optimum is {lp.fun}"


# ---- graph mixed steps (piecewise CUDA graphs up to a token bucket) -----------------------------------------
MIXED_SIZES = mixed_graph_token_sizes(8192)
TRUTH_MIXED = {"mixed_graph_intercept": 4e-3, "mixed_graph_prefill_seqs": 6e-5, "mixed_graph_decode_seqs": 1e-5,
               "mixed_graph_context_tokens": 4e-8, "mixed_graph_max_context": 1e-6, "mixed_graph_attn_pairs": 1.5e-9,
               "mixed_graph_attn_waves": 8e-5, "mixed_graph_prefill_context": 2e-7, "mixed_graph_prefill_shared": 5e-8,
               **{f"mixed_graph_pad_{t}": 2e-6 * t for t in MIXED_SIZES[1:]}}


def mixed_grid() -> list[StepFeatures]:
    """Prefill chunks and mixed steps landing in every token bucket (the calibration's buckets workloads)."""
    steps = []
    for t in MIXED_SIZES:
        for d, ctx in ((0, 0), (4, 512), (12, 2048), (2, 6000)):
            q = max(1, t - d - 3)
            steps += [features(prefill=[(c, q)], decode=[ctx] * d) for c in (0, 700, 6000, 24000)]
        # two chunks after one cached prefix of c tokens (read twice: the second reads it again)
        half = max(1, (t - 3) // 2)
        steps += [features(prefill=[(c, half)] * 2, prefill_shared=c // 16 * 16) for c in (2048, 16384)]
    return steps


def eager_grid() -> list[StepFeatures]:
    """Mixed steps above the largest token bucket (the calibration's eager workloads): eager with buckets."""
    return [features(prefill=[(0, q)], decode=[512] * d) for q in (4200, 4800, 5500, 6500, 8000) for d in (0, 4, 16)]


def test_mixed_graph_token_sizes_are_the_executors():
    from engine.executor import mixed_graph_token_sizes as executor_rule

    assert executor_rule is mixed_graph_token_sizes
    assert MIXED_SIZES == (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1152, 1280, 1408, 1536, 1664, 1792, 1920,
                           2048, 2560, 3072, 3584, 4096)
    assert mixed_graph_token_sizes(2000) == MIXED_SIZES[:17] + (2000,)
    assert mixed_graph_token_sizes(300) == (16, 32, 64, 128, 192, 256, 300)
    assert mixed_graph_token_sizes(8) == (8,)


def test_fit_recovers_graph_mixed_steps_and_old_profiles_price_them_eagerly(tmp_path):
    known = ProfileCostModel("llama-3-8b", "h200", {**TRUTH, **TRUTH_MIXED, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0},
                             TRUTH_KNEE, graph_batch_sizes=SIZES, max_context_lanes=TRUTH_LANES,
                             mixed_graph_token_sizes=MIXED_SIZES)
    grid = mixed_grid() + calibration_grid() + skewed_grid() + eager_grid()
    rows = frame(grid * 2, known.step_time)
    np.testing.assert_allclose(known.forward_times(rows), [known.step_time(f) for f in grid * 2], rtol=1e-12)
    fitted, report = fit_profile(rows, "llama-3-8b", "h200", test_fraction=0.0, mixed_graph_token_sizes=MIXED_SIZES)
    assert fitted.mixed_graph_token_sizes == MIXED_SIZES and report["by_kind"]["graph mixed"]["n"] >= 2 * len(mixed_grid())
    assert report["by_kind"]["graph mixed"]["mape"] < 1e-3
    for name in mixed_features(MIXED_SIZES, False)[1:len(MIXED_FEATURES) - 1]:  # rows without prefill_makespan
        assert fitted.coefficients[name] == pytest.approx(TRUTH_MIXED[name], rel=0.05), name
    assert MAKESPAN not in fitted.coefficients and fitted.prefill_grid is None
    for t in MIXED_SIZES:  # each bucket's fixed cost: a prefill-only step filling it
        f = features(prefill=[(0, t)])
        assert fitted.step_time(f) == pytest.approx(known.step_time(f), rel=0.01), f"bucket {t}"
    # Steps between two buckets cost what the larger bucket costs; beyond the last one the eager formula applies.
    step = [fitted.step_time(features(prefill=[(0, q)])) for q in (600, 700)]  # both in the 768 bucket
    waves = [prefill_waves(*prefill_walks(0, q), 32, 132) for q in (600, 700)]  # Llama-3-8B heads, H200 SMs
    assert step[1] - step[0] == pytest.approx(fitted.coefficients["mixed_graph_attn_pairs"] * (700 * 701 - 600 * 601) / 2
                                              + fitted.coefficients["mixed_graph_attn_waves"] * (waves[1] - waves[0])
                                              + fitted.coefficients["mixed_graph_prefill_context"] * (700 - 600))
    big = features(prefill=[(0, 5000)])
    assert fitted.step_time(big) == pytest.approx(known_profile().step_time(big), rel=0.05)
    # A profile without buckets (fitted before the engine graphed mixed steps) prices them as eager steps.
    old = known_profile()
    small = features(prefill=[(0, 100)], decode=[512] * 4)
    assert old.step_time(small) == pytest.approx(old._eager_time(100, 1, 4, 4 * 513, 513, 100 * 101 // 2))
    assert known.step_time(small) < old.step_time(small)
    # The buckets and the mixed coefficients survive a JSON round trip.
    fitted.to_json(tmp_path / "p.json")
    back = ProfileCostModel.from_json(tmp_path / "p.json")
    assert back.mixed_graph_token_sizes == MIXED_SIZES
    assert [back.step_time(f) for f in grid] == [fitted.step_time(f) for f in grid]
    d = json.loads((tmp_path / "p.json").read_text())
    d["mixed_graph_token_sizes"] = [64, 16]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(UserError, match="mixed_graph_token_sizes"):
        ProfileCostModel.from_json(tmp_path / "bad.json")


def test_a_profiles_prefill_kernel_is_read_written_and_described(profile, tmp_path):
    """The prefill kernel a calibration timed (recorded since round 29; validate compares it with a run's) survives a
    JSON round trip and shows in describe(); a profile without it reads as None; a non-string is refused, named."""
    import dataclasses

    timed = dataclasses.replace(profile, prefill_kernel="_gluon_prefill_kernel")
    timed.to_json(tmp_path / "p.json")
    back = ProfileCostModel.from_json(tmp_path / "p.json")
    assert back.prefill_kernel == "_gluon_prefill_kernel" == back.describe()["prefill_kernel"]
    profile.to_json(tmp_path / "old.json")
    assert "prefill_kernel" not in json.loads((tmp_path / "old.json").read_text())
    assert ProfileCostModel.from_json(tmp_path / "old.json").prefill_kernel is None
    d = json.loads((tmp_path / "p.json").read_text()) | {"prefill_kernel": 3}
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(UserError, match=r"bad.json: 'prefill_kernel' is 3, expected"):
        ProfileCostModel.from_json(tmp_path / "bad.json")


def with_makespan(f: StepFeatures, chunks, grid=(32, 132, PERSISTENT_MAX_Q)) -> StepFeatures:
    return replace(f, prefill_makespan=prefill_makespan(chunks, *grid))


def test_graph_mixed_steps_price_the_prefill_kernels_schedule_and_older_profiles_the_waves(tmp_path):
    """A profile fitted to rows with prefill_makespan (calibrations since round 35) prices a graph mixed step's prefill
    attention by the kernel's own schedule, mixed_graph_attn_makespan per key tile of it, in place of the waves: two
    chunks of 1511 tokens after 4133 cached and 111 after 17472 pay for 338 tiles, not 148. It asks the features for
    the makespan (prefill_grid: Llama-3-8B's 32 query heads, the H200's 132 SMs, the Gluon kernel's persistent rule
    from the profile's prefill_kernel). A profile without the coefficient (every one fitted before) prices by the
    waves, as before, and asks for nothing; a fit to rows without the column gives such a profile."""
    truth = {**TRUTH, **TRUTH_MIXED, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0}
    by_makespan = {**{k: v for k, v in truth.items() if k != WAVES}, MAKESPAN: 9e-5}
    kw = dict(graph_batch_sizes=SIZES, max_context_lanes=TRUTH_LANES, mixed_graph_token_sizes=MIXED_SIZES)
    known = ProfileCostModel("llama-3-8b", "h200", by_makespan, TRUTH_KNEE, prefill_kernel="_gluon_prefill_kernel", **kw)
    old = ProfileCostModel("llama-3-8b", "h200", truth, TRUTH_KNEE, prefill_kernel="_gluon_prefill_kernel", **kw)
    assert known.prefill_grid == (32, 132, PERSISTENT_MAX_Q) and old.prefill_grid is None
    triton = ProfileCostModel("llama-3-8b", "h200", by_makespan, TRUTH_KNEE, **kw)  # timed before round 29: Triton
    assert triton.prefill_grid == (32, 132, 0)
    chunks = [(4133, 1511), (17472, 111)]
    step = with_makespan(features(prefill=chunks, decode=[27000] * 4), chunks)
    assert step.prefill_makespan == 338
    no_attention = ProfileCostModel("llama-3-8b", "h200", {**by_makespan, MAKESPAN: 0.0}, TRUTH_KNEE, **kw)
    assert known.step_time(step) - no_attention.step_time(step) == pytest.approx(338 * 9e-5, rel=1e-12)
    # the old profile: the waves, and the makespan column changes nothing
    waves = prefill_waves(step.prefill_tile_walks, step.prefill_longest_walk, 32, 132)
    assert old.step_time(step) == old.step_time(replace(step, prefill_makespan=0))
    no_waves = ProfileCostModel("llama-3-8b", "h200", {**truth, WAVES: 0.0}, TRUTH_KNEE, **kw)
    assert old.step_time(step) - no_waves.step_time(step) == pytest.approx(waves * TRUTH_MIXED[WAVES], rel=1e-12)
    # the vectorised path prices it as step_time does
    grid = [with_makespan(f, []) for f in calibration_grid()] + [step]
    np.testing.assert_allclose(known.forward_times(frame(grid, known.step_time)), [known.step_time(f) for f in grid],
                               rtol=1e-12)
    # a fit to rows with the column recovers the coefficient and has no waves; without the column, the waves
    mixed = []
    for f in mixed_grid():
        c, q = f.prefill_context_tokens - f.num_prefill_tokens, f.num_prefill_tokens
        mixed.append(with_makespan(f, [(c // f.num_prefill_seqs, q // f.num_prefill_seqs)] * f.num_prefill_seqs))
    mixed += [with_makespan(features(prefill=ch, decode=[20000] * d), ch)
              for ch in ([(4133, 1511), (17472, 111)], [(5408, 1653), (25392, 990)], [(17472, 545)], [(8384, 759), (24816, 291)])
              for d in (2, 6)]
    rows = frame((mixed + calibration_grid() + skewed_grid() + eager_grid()) * 2, known.step_time)
    fitted, report = fit_profile(rows, "llama-3-8b", "h200", test_fraction=0.0, mixed_graph_token_sizes=MIXED_SIZES,
                                 prefill_kernel="_gluon_prefill_kernel")
    assert report["by_kind"]["graph mixed"]["mape"] < 1e-3
    assert fitted.coefficients[MAKESPAN] == pytest.approx(9e-5, rel=0.05) and WAVES not in fitted.coefficients
    assert fitted.prefill_grid == (32, 132, PERSISTENT_MAX_Q)
    fitted.to_json(tmp_path / "p.json")
    back = ProfileCostModel.from_json(tmp_path / "p.json")
    assert back.prefill_grid == fitted.prefill_grid and back.step_time(step) == fitted.step_time(step)
    blind, _ = fit_profile(rows.drop(columns=["prefill_makespan"]), "llama-3-8b", "h200", test_fraction=0.0,
                           mixed_graph_token_sizes=MIXED_SIZES, prefill_kernel="_gluon_prefill_kernel")
    assert WAVES in blind.coefficients and MAKESPAN not in blind.coefficients and blind.prefill_grid is None


def test_the_simulator_asks_for_the_makespan_only_of_a_profile_that_prices_it():
    from pagesim.cost.jitter import JitteredCostModel
    from pagesim.simulator import SimExecutor

    truth = {**TRUTH, **TRUTH_MIXED, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0}
    kw = dict(graph_batch_sizes=SIZES, max_context_lanes=TRUTH_LANES, mixed_graph_token_sizes=MIXED_SIZES,
              prefill_kernel="_gluon_prefill_kernel")
    known = ProfileCostModel("llama-3-8b", "h200", {**truth, MAKESPAN: 9e-5}, TRUTH_KNEE, **kw)
    old = ProfileCostModel("llama-3-8b", "h200", truth, TRUTH_KNEE, **kw)

    def sched(c, q, decode):
        return ScheduledRequest(Request("r", 0.0, 20000, 10), c, q, decode)

    plan = StepPlan(0, scheduled=[sched(4133, 1511, False), sched(17472, 111, False), sched(9, 1, True)])
    for model, makespan in ((known, 338), (JitteredCostModel(known, 0, 0.0, 0.0), 338), (old, 0)):
        ex = SimExecutor(model, 16)
        t = ex.execute(plan)
        assert ex.features_of(plan).prefill_makespan == makespan
        assert t == model.step_time(StepFeatures.from_plan(plan, 16 if model.prices_sharing else 0, known.prefill_grid))


def test_graph_mixed_steps_price_the_kv_their_prefill_chunks_read_and_older_profiles_do_not():
    """A graph mixed step pays mixed_graph_prefill_context per K/V token its prefill chunks read (each chunk's cached
    context plus its own tokens, summed over the chunks), beside the walk of the longest program (waves): four chunks
    of 64 tokens after 16k-token prefixes read four times the K/V of one, in about as many tile waves. A profile
    fitted before the term (no such coefficient) prices the same steps as before: identically."""
    truth = {**TRUTH, **TRUTH_MIXED, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0}
    known = ProfileCostModel("llama-3-8b", "h200", truth, TRUTH_KNEE, graph_batch_sizes=SIZES,
                             max_context_lanes=TRUTH_LANES, mixed_graph_token_sizes=MIXED_SIZES)
    one = features(prefill=[(16384, 64)], decode=[2000] * 4)
    four = features(prefill=[(16384, 64)] * 4, decode=[2000] * 4)
    assert four.prefill_context_tokens == 4 * one.prefill_context_tokens == 4 * (16384 + 64)
    extra = known.step_time(four) - known.step_time(one)
    walks_and_seqs = ProfileCostModel("llama-3-8b", "h200", {**truth, "mixed_graph_prefill_context": 0.0}, TRUTH_KNEE,
                                      graph_batch_sizes=SIZES, max_context_lanes=TRUTH_LANES,
                                      mixed_graph_token_sizes=MIXED_SIZES)
    assert extra - (walks_and_seqs.step_time(four) - walks_and_seqs.step_time(one)) == pytest.approx(
        3 * (16384 + 64) * TRUTH_MIXED["mixed_graph_prefill_context"], rel=1e-9)
    # the vectorised path prices the term as step_time does
    rows = frame([one, four], known.step_time)
    np.testing.assert_allclose(known.forward_times(rows), [known.step_time(one), known.step_time(four)], rtol=1e-12)
    # a profile without the coefficient (fitted before it) prices as if the term did not exist
    old = {k: v for k, v in truth.items() if k != "mixed_graph_prefill_context"}
    before = ProfileCostModel("llama-3-8b", "h200", old, TRUTH_KNEE, graph_batch_sizes=SIZES,
                              max_context_lanes=TRUTH_LANES, mixed_graph_token_sizes=MIXED_SIZES)
    for f in (one, four):
        assert before.step_time(f) == walks_and_seqs.step_time(f) < known.step_time(f)


def test_graph_mixed_steps_read_shared_blocks_at_the_graph_steps_discount():
    """A graph mixed step's decode rows run the same decode kernel as a graph decode step, so its repeated reads of
    shared blocks cost what the graph coefficients say they save (shared_read_discount); a fit recovers the mixed
    coefficients from steps priced so."""
    truth = {**TRUTH, **TRUTH_SHARING, **TRUTH_MIXED, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0}
    known = ProfileCostModel("llama-3-8b", "h200", truth, TRUTH_KNEE, graph_batch_sizes=SIZES,
                             max_context_lanes=TRUTH_LANES, mixed_graph_token_sizes=MIXED_SIZES)
    discount = shared_read_discount(truth)
    assert discount == pytest.approx(1 - TRUTH_SHARING["graph_shared_tokens"] / TRUTH["graph_context_tokens"])
    alone = features(prefill=[(2048, 64)], decode=[2000] * 12)
    shared = replace(alone, decode_shared_tokens=11 * 1984)  # 12 rows over one 1,984-token prefix
    saved = known.step_time(alone) - known.step_time(shared)
    assert saved == pytest.approx(discount * 11 * 1984 * TRUTH_MIXED["mixed_graph_context_tokens"], rel=1e-9) and saved > 0
    no_sharing = ProfileCostModel("llama-3-8b", "h200", {k: v for k, v in truth.items() if k not in TRUTH_SHARING},
                                  TRUTH_KNEE, graph_batch_sizes=SIZES, max_context_lanes=TRUTH_LANES,
                                  mixed_graph_token_sizes=MIXED_SIZES)
    assert no_sharing.step_time(shared) == no_sharing.step_time(alone)  # a profile blind to sharing prices bytes
    mixed_shared = [replace(f, decode_shared_tokens=(f.num_decode_seqs - 1) * 512) for f in mixed_grid()
                    if f.num_decode_seqs > 1]
    grid = mixed_grid() + mixed_shared + calibration_grid() + skewed_grid() + sharing_grid() + eager_grid()
    rows = frame(grid * 2, known.step_time)
    np.testing.assert_allclose(known.forward_times(rows), [known.step_time(f) for f in grid * 2], rtol=1e-12)
    fitted, report = fit_profile(rows, "llama-3-8b", "h200", test_fraction=0.0, mixed_graph_token_sizes=MIXED_SIZES)
    assert report["by_kind"]["graph mixed"]["mape"] < 1e-3
    assert fitted.coefficients["mixed_graph_context_tokens"] == pytest.approx(TRUTH_MIXED["mixed_graph_context_tokens"],
                                                                              rel=0.05)


def test_with_mixed_graphs_the_eager_floor_counts_the_tokens_above_the_largest_bucket():
    """Eager steps of a profile with buckets carry more tokens than the largest bucket (smaller steps replay graphs):
    the fit raises their intercept only as far as such a step needs to cost at least the decode graph of its rows,
    not as far as a one-token step would (which raised the 2026-12-01 H200 eager intercept from 3.5 to 4.8 ms and
    priced live 1-2k-token prefill steps 7% too dear)."""
    # buckets up to 1024 tokens (an engine with max_num_batched_tokens 1024): eager steps from 1025 tokens, which at
    # this cheap intercept cost less than the largest decode graph
    small = mixed_graph_token_sizes(1024)
    mixed = {k: v for k, v in TRUTH_MIXED.items() if not k.startswith("mixed_graph_pad_") or int(k.split("_")[-1]) in small}
    cheap = {**TRUTH, **mixed, "intercept": 1e-3, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0}
    known = ProfileCostModel("llama-3-8b", "h200", cheap, TRUTH_KNEE, graph_batch_sizes=SIZES,
                             max_context_lanes=TRUTH_LANES, mixed_graph_token_sizes=small)
    eager = [features(prefill=[(0, q)], decode=[512] * d) for q in (1100, 1500, 2500, 4000, 6000) for d in (0, 4, 16)]
    grid = [f for f in mixed_grid() if f.num_prefill_tokens + f.num_decode_seqs <= 1024] + calibration_grid() + skewed_grid() + eager
    fitted, report = fit_profile(frame(grid * 2, known.step_time), "llama-3-8b", "h200", test_fraction=0.0,
                                 mixed_graph_token_sizes=small)
    assert "intercept" in report["raised"]
    largest = small[-1]
    gaps = []
    for n in range(1, SIZES[-1] + 1):  # the cheapest eager step with n decode rows, against the graph of n rows
        t = max(n, largest + 1)
        gaps.append(fitted._eager_time(t - n, int(t > n), n, 0, 0, 0) - fitted.step_time(StepFeatures(num_decode_seqs=n)))
    assert min(gaps) == pytest.approx(0.0, abs=1e-9)  # raised exactly as far as needed: never below, never more


def test_a_fit_with_each_steps_clock_prices_steps_at_the_calibrations_top_clock():
    """Rows timed at clocks below the top (a calibration under the power cap) take longer by a share of their time
    that scales with the clock; with the clock recorded, the fit finds that share from its own held-out error and
    prices steps at the top clock; without the clock it cannot, and prices them at the rows' average slowdown."""
    known = known_profile()
    steps = calibration_grid() * 3 + skewed_grid() * 3
    rows = frame(steps, known.step_time, workload_size=12)
    rng = np.random.default_rng(2)
    clocks = rng.choice([1400.0, 1600.0, 1800.0, 1980.0], len(rows))
    rows["duration_s"] *= (1 + 0.2 * (1980.0 / clocks - 1)) * (1 + 0.003 * rng.standard_normal(len(rows)))
    clean = frame(calibration_grid() + skewed_grid(), known.step_time)  # the steps at the top clock

    fitted, report = fit_profile(rows.assign(sm_clock_mhz=clocks), "llama-3-8b", "h200", holdout="workload")
    clock = report["sm_clock"]
    assert clock["reference_mhz"] == 1980.0 and clock["sensitivity"] == 0.2 and fitted.fit["sm_clock"] == clock
    assert set(clock["held_out_mape_by_sensitivity"]) == {"0.0", "0.05", "0.1", "0.15", "0.2", "0.25", "0.3"}
    assert np.abs(fitted.forward_times(clean) / clean["duration_s"] - 1).mean() < 0.01

    blind, blind_report = fit_profile(rows, "llama-3-8b", "h200", holdout="workload")
    assert "sm_clock" not in blind_report and "sm_clock" not in blind.fit
    assert np.median(blind.forward_times(clean) / clean["duration_s"]) > 1.015  # the throttled rows' slowdown, kept
    partial = rows.assign(sm_clock_mhz=np.where(np.arange(len(rows)) == 3, np.nan, clocks))  # a failed read
    assert "sm_clock" not in fit_profile(partial, "llama-3-8b", "h200")[1]


TRUE_AFTER = ((1.025, 1.01, 1.004, 1.0, 1.0), (1.07, 1.04, 1.025, 1.012, 1.004))  # small, large prefill; by bucket


def test_with_clocks_decode_steps_after_a_prefill_are_priced_by_steps_since_it_and_its_size():
    """A decode step runs slower for several steps after a prefill step, more and longer after a large one
    (calibrations and live windows alike); a clocked calibration's fit recovers the factor per bucket of
    steps_since_prefill and size of that prefill, measured in each workload against its own decode steps far from a
    prefill, and prices the far steps at their own cost."""
    known = replace(known_profile(), after_prefill=TRUE_AFTER)
    decodes = [f for f in calibration_grid() if f.num_prefill_tokens == 0]
    steps, names, ids = [], [], []
    for w, f in enumerate(decodes[::2] * 2):  # a workload: a prefill, then the same decode step 20 times
        q = 256 if w % 2 else 2048  # a small prefill, a large one
        for k in range(21):
            steps.append(replace(features(prefill=[(0, q)]), last_prefill_tokens=0) if k == 0
                         else replace(f, steps_since_prefill=k, last_prefill_tokens=q))
            names.append(f"w{w}")
            ids.append(k)
    rows = frame(steps, known.step_time).assign(workload=names, step=ids, sm_clock_mhz=1980.0)
    since, last_tokens = calibration_steps_since_prefill(rows)
    assert (since == rows["steps_since_prefill"]).all() and (last_tokens == rows["last_prefill_tokens"]).all()
    given = rows.drop(columns=["steps_since_prefill", "last_prefill_tokens"])
    fitted, report = fit_profile(given, "llama-3-8b", "h200", holdout="workload")
    after = report["after_prefill"]
    assert after["edges"] == list(AFTER_PREFILL_EDGES) and fitted.fit["after_prefill"] == after
    np.testing.assert_allclose(fitted.after_prefill, TRUE_AFTER, atol=0.003)
    n = len(decodes[::2])
    assert after["rows"] == [[n * k for k in (1, 1, 2, 3, 4)]] * 2 and after["far_rows"] == 2 * n * 9
    np.testing.assert_allclose(fitted.forward_times(rows) / rows["duration_s"], 1, atol=0.006)
    far = given[rows["steps_since_prefill"] >= AFTER_PREFILL_EDGES[-1]]
    np.testing.assert_allclose(fitted.forward_times(far), far["duration_s"], rtol=1e-3)
    # without clocks (calibrations before round 17) every row is fitted as it is, with no factors
    plain, plain_report = fit_profile(given.drop(columns="sm_clock_mhz"), "llama-3-8b", "h200")
    assert "after_prefill" not in plain_report and plain.after_prefill == ()


def test_after_prefill_factors_price_decode_steps_only_and_round_trip(tmp_path):
    model = replace(known_profile(), after_prefill=TRUE_AFTER)
    decode, mixed = features(decode=[1000] * 8), features(prefill=[(0, 64)], decode=[1000] * 8)
    base = known_profile().step_time(decode)
    for k, tokens, factor in ((0, 5000, 1.0), (1, 5000, 1.07), (1, 1024, 1.07), (1, 1023, 1.025), (2, 5000, 1.04),
                              (4, 5000, 1.025), (4, 100, 1.004), (7, 5000, 1.012), (11, 5000, 1.004), (12, 5000, 1.0),
                              (999, 5000, 1.0)):
        step = replace(decode, steps_since_prefill=k, last_prefill_tokens=tokens)
        assert model.step_time(step) == base * factor
    assert model.step_time(replace(mixed, steps_since_prefill=3, last_prefill_tokens=5000)) == known_profile().step_time(mixed)
    model.to_json(tmp_path / "p.json")
    assert ProfileCostModel.from_json(tmp_path / "p.json").after_prefill == TRUE_AFTER
    d = json.loads((tmp_path / "p.json").read_text())
    assert d["after_prefill"]["large_prefill_tokens"] == 1024
    good = d["after_prefill"]
    for bad in ({**good, "edges": [1, 2]}, {**good, "large_prefill_tokens": 512}, {**good, "factors": [[0.9] * 5] * 2},
                {**good, "factors": [[1.1] * 5]}, {**good, "factors": [[1.1] * 3] * 2}, [1.1]):
        (tmp_path / "bad.json").write_text(json.dumps({**d, "after_prefill": bad}))
        with pytest.raises(UserError, match="after_prefill"):
            ProfileCostModel.from_json(tmp_path / "bad.json")


@pytest.mark.parametrize("since, tokens", [(1, 4096), (3, 200), (10, 2000), (40, 4096)])
def test_decode_run_times_apply_the_after_prefill_factors_as_step_time_does(since, tokens):
    model = replace(known_profile(), after_prefill=TRUE_AFTER)
    run = model.decode_run_times(24, 24 * 900, 30, 2000, 0, since, tokens)
    one_by_one = [model.step_time(StepFeatures(num_decode_seqs=24, decode_context_tokens=24 * 900 + 24 * (j + 1),
                                               max_decode_context=2000 + j + 1, steps_since_prefill=since + j,
                                               last_prefill_tokens=tokens))
                  for j in range(30)]
    assert run.tolist() == one_by_one  # bit for bit: the fast path's steps are the step-by-step ones


def test_a_clock_fit_needs_a_share_to_try():
    rows = frame(calibration_grid(), known_profile().step_time).assign(sm_clock_mhz=1980.0)
    with pytest.raises(UserError, match="clock_sensitivities"):
        fit_profile(rows, "llama-3-8b", "h200", clock_sensitivities=())
    fitted, report = fit_profile(rows, "llama-3-8b", "h200", clock_sensitivities=(0.1,))  # one share: taken as given
    assert report["sm_clock"]["sensitivity"] == 0.1


def test_the_clock_share_fits_in_parallel_processes_give_the_serial_fit():
    """fit_profile fits each clock share independently; in spawned processes (calibrate's default, to keep the fit
    inside a calibration's time) the profile and the report are those of the fits one after the other."""
    rows = pd.read_csv("results/profiles/h200-llama-3-8b-2026-12-03-r19.steps.csv.gz")
    sizes = tuple(json.loads(Path("results/profiles/h200-llama-3-8b-2026-12-03-r19.json").read_text())
                  ["mixed_graph_token_sizes"])
    kw = dict(holdout="workload", mixed_graph_token_sizes=sizes, clock_sensitivities=(0.0, 0.1))
    serial, serial_report = fit_profile(rows, "llama-3-8b", "h200", workers=1, **kw)
    parallel, parallel_report = fit_profile(rows, "llama-3-8b", "h200", workers=2, **kw)
    assert parallel.coefficients == serial.coefficients and parallel.after_prefill == serial.after_prefill
    assert parallel_report == serial_report
    assert set(serial_report["sm_clock"]["held_out_mape_by_sensitivity"]) == {"0.0", "0.1"}


def test_prefill_reads_of_blocks_another_row_reads_are_counted_and_priced_apart():
    """prefill_shared_tokens: a prefill chunk's references to full blocks that a decode row or an earlier chunk of
    the step also holds. Graph mixed steps price them at mixed_graph_prefill_shared and the chunks' other K/V reads at
    mixed_graph_prefill_context; a profile without the first (fitted before it) prices every read at the second."""
    from pagesim.cost.features import shared_tokens

    assert shared_tokens([[1, 2, 3]], [[1, 2, 9], [1, 2, 10]], 16)[1] == (2 + 2) * 16
    assert shared_tokens([], [[1, 2, 9], [1, 2, 9]], 16)[1] == 3 * 16  # the second chunk re-reads all three
    assert shared_tokens([[1, 2, 3]], [[4, 5]], 16)[1] == 0
    assert shared_tokens([[1, 2, 3], [1, 2, 4]], [[1, 9]], 16) == (2 * 16, 16)  # both counts in one pass
    truth = {**TRUTH, **TRUTH_MIXED, "swap_s_per_byte": 0.0, "copy_s_per_byte": 0.0}
    kw = dict(graph_batch_sizes=SIZES, max_context_lanes=TRUTH_LANES, mixed_graph_token_sizes=MIXED_SIZES)
    known = ProfileCostModel("llama-3-8b", "h200", truth, TRUTH_KNEE, **kw)
    alone = features(prefill=[(2048, 64)] * 2, decode=[2000] * 4)
    shared = replace(alone, prefill_shared_tokens=2048)  # the second chunk reads the first's 2,048-token prefix
    saved = known.step_time(alone) - known.step_time(shared)
    assert saved == pytest.approx(2048 * (TRUTH_MIXED["mixed_graph_prefill_context"]
                                          - TRUTH_MIXED["mixed_graph_prefill_shared"]), rel=1e-9) and saved > 0
    rows = frame([alone, shared], known.step_time)
    np.testing.assert_allclose(known.forward_times(rows), [known.step_time(alone), known.step_time(shared)], rtol=1e-12)
    before = ProfileCostModel("llama-3-8b", "h200", {k: v for k, v in truth.items() if k != "mixed_graph_prefill_shared"},
                              TRUTH_KNEE, **kw)
    assert before.step_time(shared) == before.step_time(alone)


def test_a_profile_is_refused_for_tensor_parallelism_and_plan_skips_tp_with_one():
    """A profile times one GPU (the engine runs tp 1): with --tensor-parallel-size 2 it would give tp 2 exactly the
    step times of tp 1, so make_cost_model refuses it, and plan leaves tp > 1 out, saying why."""
    from pagesim.plan import deployments, skip_lines

    with pytest.raises(UserError, match="tensor-parallel-size 2.*roofline"):
        make_cost_model(str(COMMITTED_PROFILE), Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=1000,
                                                       tensor_parallel_size=2))
    base = {"model": "llama-3-8b", "gpu": "h200", "block_size": 16, "num_gpu_blocks": None,
            "gpu_memory_utilization": 0.9, "max_model_len": None, "max_num_seqs": 256, "tensor_parallel_size": 1,
            "max_num_batched_tokens": 8192, "enable_chunked_prefill": True, "enable_prefix_caching": False,
            "preemption_mode": "recompute", "swap_space": 4.0, "watermark": 0.01, "kv_cache_dtype": "auto",
            "kv_offloading_size": 0.0, "cost_model": str(COMMITTED_PROFILE)}
    deps, refused = deployments(base, 4, ["round-robin"])
    skipped = skip_lines(refused)
    assert {d["tensor_parallel_size"] for d in deps} == {1} and len(deps) == 4
    assert [s.split(":")[0] for s in skipped] == ["tensor_parallel_size=2", "tensor_parallel_size=4"]
    assert all("roofline" in s for s in skipped)
    deps, skipped = deployments({**base, "cost_model": "roofline"}, 4, ["round-robin"])  # nothing refused
    assert {d["tensor_parallel_size"] for d in deps} == {1, 2, 4} and not skipped
