"""The simulator's exact fast path equals step-by-step simulation on every bundled trace.

"Equal" means: the same per-request results (times to floating-point
rounding), the same per-step table, and the same block decisions (the same
sequence of blocks allocated, freed and evicted from the prefix cache).
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import swap_space_for
from pagesim.block_pool import STORED
from pagesim.config import Config
from pagesim.cost import make_cost_model
from pagesim.request import Request, requests_from_trace
from pagesim.simulator import Simulation
from pagesim.traces import load_trace

TRACES = sorted((Path(__file__).resolve().parent.parent / "traces").glob("*.jsonl"))
LIMIT = 400  # requests per trace: enough for preemption and prefix hits, quick without the fast path

CONFIGS = {
    "paged": dict(),
    "paged-pressure-prefix": dict(num_gpu_blocks=600, enable_prefix_caching=True),
    "paged-pressure-swap": dict(num_gpu_blocks=600, preemption_mode="swap", swap_space=0.05),
    # a host tier: a prefill's full prompt blocks are stored in the next step, which no decode run may absorb
    "paged-pressure-offload": dict(num_gpu_blocks=600, enable_prefix_caching=True, kv_offloading_size=0.5),
    "contiguous-max": dict(num_gpu_blocks=3000, kv_layout="contiguous", reserve_policy="max"),
}


def run(trace, fast: bool, cost=None, **overrides):
    cfg = Config(model="llama-3-8b", gpu="h200", max_model_len=8192, **overrides)
    sim = Simulation(requests_from_trace(trace), cfg, cost or make_cost_model("roofline", cfg), fast_path=fast,
                     record_events=True)
    result = sim.run()
    events = [e for e in sim.scheduler.kv.events if e[0] != STORED]
    return result, events


def test_bundled_traces_exist():
    assert len(TRACES) >= 3, f"expected bundled traces in traces/, found {TRACES}"


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_fast_path_equals_step_by_step(path, name):
    trace = load_trace(path, limit=LIMIT)
    slow, slow_events = run(trace, False, **CONFIGS[name])
    fast, fast_events = run(trace, True, **CONFIGS[name])
    assert fast.num_steps == slow.num_steps, "the fast path changed the number of steps"
    assert fast_events == slow_events, "the fast path made different block decisions"
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True,
                                  check_dtype=False)
    assert fast.leaked_blocks == slow.leaked_blocks == 0
    # The fast path must actually be taken on these traces, or the test proves nothing.
    assert fast.extra["fast_path_steps"] > fast.num_steps / 4, fast.extra
    assert slow.extra["fast_path_steps"] == 0


def test_a_decode_run_goes_on_through_finishes_when_nothing_is_due():
    """Three requests admitted together that finish one after another, with no arrival after them: the
    driver loop takes one turn for the prefill and one for all the decode steps (the run goes on
    through the first two finishes), and the result equals step-by-step simulation."""
    from pagesim.traces import trace_from_frame

    df = pd.DataFrame({"request_id": ["a", "b", "c"], "arrival_time_s": [0.0, 0.0, 0.0],
                       "prompt_len": [100, 200, 300], "output_len": [10, 40, 90]})
    trace = trace_from_frame(df, "three")
    cfg = Config(model="llama-3-8b", gpu="h200", max_model_len=8192)
    turns = []  # progress is reported at the top of every turn of the loop
    fast = Simulation(requests_from_trace(trace), cfg, make_cost_model("roofline", cfg), progress=turns.append).run()
    slow, _ = run(trace, False)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True, check_dtype=False)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert fast.num_steps == 90 and fast.extra["fast_path_steps"] == 89
    assert len(turns) == 3, f"expected prefill, one decode run through both finishes, end; loop turns at {turns}"


def sharing_profile():
    """The committed H200 profile with prices for repeated reads of shared blocks (StepFeatures.decode_shared_tokens)."""
    from pagesim.cost import ProfileCostModel

    base = ProfileCostModel.from_json(Path(__file__).resolve().parent.parent / "results/profiles/h200-llama-3-8b.json")
    coefficients = {**base.coefficients, "graph_shared_tokens": 0.3 * base.coefficients["graph_context_tokens"],
                    "decode_shared_tokens": 0.5 * base.coefficients["decode_context_tokens"]}
    return ProfileCostModel(base.model, base.gpu, coefficients, base.knee_tokens, graph_batch_sizes=base.graph_batch_sizes,
                            max_context_lanes=base.max_context_lanes)


def fast_and_plain(trace_file: str, cost, overrides: dict):
    """The trace simulated with `cost` step by step and with the fast path, asserted the same (steps, requests, block
    events), and with the fast path priced by the committed profile: (fast, plain)."""
    root = Path(__file__).resolve().parent.parent
    trace = load_trace(root / "traces" / trace_file, limit=LIMIT)
    slow, slow_events = run(trace, False, cost, **overrides)
    fast, fast_events = run(trace, True, cost, **overrides)
    assert fast_events == slow_events and fast.num_steps == slow.num_steps
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True, check_dtype=False)
    assert fast.extra["fast_path_steps"] > fast.num_steps / 4
    plain, _ = run(trace, True, make_cost_model(str(root / "results/profiles/h200-llama-3-8b.json"),
                                                Config(model="llama-3-8b", gpu="h200")), **overrides)
    return fast, plain


@pytest.mark.parametrize("overrides", [dict(num_gpu_blocks=600, enable_prefix_caching=True),
                                       dict(enable_prefix_caching=True)], ids=["pressure", "roomy"])
def test_fast_path_equals_step_by_step_when_the_cost_model_prices_shared_reads(overrides):
    """A decode run prices its shared reads once (its new blocks are its own): the same as step by step."""
    fast, plain = fast_and_plain("kshot-shared-prefix-500.jsonl", sharing_profile(), overrides)
    # sharing changed the timings: the same run priced without it is slower
    assert fast.steps["duration_s"].sum() < plain.steps["duration_s"].sum()


def after_prefill_profile():
    """The committed H200 profile with after-prefill factors (StepFeatures.steps_since_prefill)."""
    from dataclasses import replace

    from pagesim.cost import ProfileCostModel

    base = ProfileCostModel.from_json(Path(__file__).resolve().parent.parent / "results/profiles/h200-llama-3-8b.json")
    return replace(base, after_prefill=((1.025, 1.01, 1.004, 1.0, 1.0), (1.07, 1.04, 1.025, 1.012, 1.004)))


@pytest.mark.parametrize("overrides", [dict(num_gpu_blocks=300, watermark=0.01), dict(max_num_batched_tokens=512)],
                         ids=["preempting", "chunked"])
def test_fast_path_equals_step_by_step_when_decode_steps_after_a_prefill_cost_more(overrides):
    """A decode run prices each step by its steps since the last prefill, as the step-by-step plans are priced."""
    fast, plain = fast_and_plain("sharegpt-bursty-1k.jsonl", after_prefill_profile(), overrides)
    first = plain.steps["duration_s"].iloc[:50].to_numpy()  # the same plans until the first decode after a prefill
    assert (fast.steps["duration_s"].iloc[:50].to_numpy() >= first).all() and (fast.steps["duration_s"].iloc[:50] > first).any()


def test_plans_carry_the_steps_since_prefill_their_step_table_gives():
    """The scheduler stamps each plan with its steps since the last step with prefill tokens and that step's prefill
    tokens; validation and the calibration's fit compute the same from a step table (StepFeatures)."""
    from pagesim.cost.features import steps_since_prefill

    trace = load_trace(Path(__file__).resolve().parent.parent / "traces/sharegpt-bursty-1k.jsonl", limit=LIMIT)
    cfg = Config(model="llama-3-8b", gpu="h200", num_gpu_blocks=300, watermark=0.01)
    sim = Simulation(requests_from_trace(trace), cfg, make_cost_model("roofline", cfg), fast_path=False)
    stamped, execute = {}, sim.executor.execute

    def spy(plan):
        stamped[plan.step_id] = (plan.steps_since_prefill, plan.last_prefill_tokens)
        return execute(plan)

    sim.executor.execute = spy
    steps = sim.run().steps
    since, tokens = steps_since_prefill(steps["step"], steps["num_prefill_tokens"])
    assert [stamped[s] for s in steps["step"]] == list(zip(since.tolist(), tokens.tolist()))
    assert since.max() > 20 and (since == 1).sum() > 10 and len(set(tokens)) > 10


class _FixedStep:
    def execute(self, plan) -> float:
        return 0.01


def _step_by_step(trace, group: bool, **overrides):
    """Schedule/finish pairs with the decode group on or off (no decode runs); per step: its features, the
    scheduled ids, its preemptions; then the block events (caching included) and every request's end state."""
    from pagesim.cost.features import StepFeatures
    from pagesim.loop import Arrivals, run_step
    from pagesim.scheduler import Scheduler

    cfg = Config(model="llama-3-8b", gpu="h200", max_model_len=8192, **overrides)
    sched = Scheduler(cfg, record_events=True)
    sched.group_decodes = group
    requests = requests_from_trace(trace)
    arrivals = Arrivals([(i // 3, r) for i, r in enumerate(requests)], by_step=True)  # three new requests a step
    steps, grouped, now = [], 0, 0.0
    while not arrivals.exhausted or sched.has_work():
        arrivals.release(sched, now)
        plan, duration, outcome = run_step(sched, _FixedStep(), None, now)
        grouped += len(plan.decode_group)
        ids = [r.request_id for r in plan.decode_group] + [s.request_id for s in plan.scheduled]
        steps.append((StepFeatures.from_plan(plan, cfg.block_size), ids, plan.preempted,
                       [r.request_id for r in outcome.finished]))
        now += duration
    ends = [(r.request_id, r.num_computed_tokens, r.num_output_tokens, r.finish_time, r.num_preemptions,
             r.num_prefix_hit_tokens) for r in requests]
    return steps, sched.kv.events, ends, sched.kv.prefix_cache_stats, grouped


@pytest.mark.parametrize("overrides", [dict(), dict(num_gpu_blocks=400, enable_prefix_caching=True),
                                       dict(num_gpu_blocks=400, preemption_mode="swap", swap_space=0.05),
                                       dict(num_gpu_blocks=2000, kv_layout="contiguous", reserve_policy="max")],
                         ids=["paged", "pressure-prefix", "pressure-swap", "contiguous"])
def test_decode_group_schedules_as_request_by_request(overrides):
    """The fast path's decode group (a step's leading decodes taken as one, StepPlan.decode_group) makes the
    decisions of the request-by-request pass: the same steps (features, batch order, preemptions, finishes),
    the same block events in the same order, caching included (blocks a decode fills are cached before
    the step's admissions look them up), and the same request states."""
    trace = load_trace(Path(__file__).resolve().parent.parent / "traces/multiturn-300.jsonl", limit=200)
    plain = _step_by_step(trace, False, **overrides)
    grouped = _step_by_step(trace, True, **overrides)
    assert plain[4] == 0 and grouped[4] > 0, "the group was never taken: the test proves nothing"
    assert grouped[0] == plain[0]
    assert grouped[1] == plain[1]
    assert grouped[2] == plain[2]
    assert grouped[3] == plain[3]


@pytest.mark.parametrize("model", ["llama-3-8b", "llama-2-7b"])
def test_roofline_run_timing_equals_decode_run_times(model):
    """decode_run_until (the roofline's pass up to the cut, on floats or, from NUMPY_RUN steps, on arrays) gives
    the floats that timing the whole run with decode_run_times and a running sum gives: the same steps, start
    times, durations and end."""
    import random

    from pagesim.fast_path import FUSED_RUN, _time_run

    cfg = Config(model=model, gpu="h200")
    cost = make_cost_model("roofline", cfg)
    rng = random.Random(7)
    timed = numpy_timed = refused = 0
    for _ in range(400):
        n, k = rng.randint(1, 300), rng.randint(2, 400)
        total = n * rng.randint(1, 4000)
        now = rng.uniform(0, 3600)
        cut = rng.choice([float("inf"), now + rng.uniform(-0.01, 0.05), now + rng.uniform(0, 3)])
        window = rng.choice([100, FUSED_RUN])
        got = cost.decode_run_until(n, total, k, now, cut, window)
        m, starts, durations, end = _time_run(cost, n, total, k, total // n, 0, (0, 0), now, cut, 0)
        if got is not None:
            timed += 1
            numpy_timed += not isinstance(got[0], list)
            assert (list(got[0]), list(got[1]), got[2]) == (starts, durations, end)  # lists, or arrays (NUMPY_RUN)
        else:  # handed back only when the first step's duration bounds the steps before the cut above the window
            refused += 1
            assert m > window // 4
    assert timed > 200 and 20 < numpy_timed < timed and refused > 5


@pytest.mark.parametrize("name", ["paged", "paged-pressure-swap"])
@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_deadline_index_equals_step_by_step(path, name, monkeypatch):
    """Steps and runs that finish requests find them by the decode summary's deadline index (from
    DEADLINES_MIN running requests; here from 2, so these traces take it often), and take their blocks by its
    block-need index (from BLOCK_NEEDS_MIN, here 2 too): still equal to step-by-step simulation, and every
    decode summary left (both indexes included) equals a full pass over the running requests."""
    from pagesim import fast_path, scheduler

    for module in (scheduler, fast_path):
        monkeypatch.setattr(module, "DEADLINES_MIN", 2)
    monkeypatch.setattr(scheduler, "BLOCK_NEEDS_MIN", 2)  # summary_block_needs, for runs and groups alike
    taken = []
    finish_deadline = scheduler.finish_deadline

    def counted(sched, deadlines, step, *args):
        taken.append(len(deadlines.get(step, ())))
        return finish_deadline(sched, deadlines, step, *args)

    monkeypatch.setattr(scheduler, "finish_deadline", counted)
    monkeypatch.setattr(fast_path, "finish_deadline", counted)
    checked, needs_checked = [], []
    sched_block_size = [Config(model="llama-3-8b", gpu="h200", max_model_len=8192, **CONFIGS[name]).block_size]
    next_summary = scheduler.next_summary

    def checked_summary(previous, step_id, running, fewest, total, longest, deadlines=None, block_needs=None):
        if running:  # what a pass over the running requests gives, as they are when the summary is left
            assert fewest == min(r.output_len - r.num_output_tokens for r in running)
            assert total == sum(r.num_computed_tokens for r in running)
            assert longest == max(r.num_computed_tokens for r in running)
        if deadlines is not None:
            assert sorted(r.request_id for rs in deadlines.values() for r in rs) == sorted(r.request_id for r in running)
            for key, rs in deadlines.items():
                assert all(key == step_id + r.output_len - r.num_output_tokens - 1 for r in rs)
                assert [running.index(r) for r in rs] == sorted(running.index(r) for r in rs)  # running order
            checked.append(len(running))
        if block_needs is not None:  # each running request at the step it takes its next block; ended ones freed
            bs = sched_block_size[0]
            live = {key: [r for r in rs if r.block_ids] for key, rs in block_needs.items()}
            assert sorted(r.request_id for rs in live.values() for r in rs) == sorted(r.request_id for r in running)
            for key, rs in live.items():
                assert all(key == step_id + len(r.block_ids) * bs - r.num_computed_tokens for r in rs)
                assert [running.index(r) for r in rs] == sorted(running.index(r) for r in rs)  # running order
            needs_checked.append(len(running))
        return next_summary(previous, step_id, running, fewest, total, longest, deadlines, block_needs)

    monkeypatch.setattr(scheduler, "next_summary", checked_summary)
    monkeypatch.setattr(fast_path, "next_summary", checked_summary)
    trace = load_trace(path, limit=LIMIT)
    slow, slow_events = run(trace, False, **CONFIGS[name])
    fast, fast_events = run(trace, True, **CONFIGS[name])
    assert fast.num_steps == slow.num_steps and fast_events == slow_events
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True, check_dtype=False)
    DEADLINE_USE[name] = DEADLINE_USE.get(name, 0) + sum(taken)
    if name == "paged":  # under memory pressure, preemptions break the summaries on some traces
        assert sum(taken) > 0 and checked, "the deadline index was never used: the test proves nothing"
        assert needs_checked, "the block-need index was never kept: the test proves nothing"


DEADLINE_USE: dict[str, int] = {}


def test_deadline_index_was_used_often():
    """Over the traces above, the index finished many requests, under memory pressure too."""
    if len(DEADLINE_USE) < 2:
        pytest.skip("the deadline tests did not run in this session")
    assert DEADLINE_USE["paged"] > 1000 and DEADLINE_USE["paged-pressure-swap"] > 100, DEADLINE_USE


@pytest.mark.parametrize("overrides", [dict(), dict(num_gpu_blocks=400, preemption_mode="swap", swap_space=0.05)],
                         ids=["paged", "pressure-swap"])
def test_decode_group_with_the_deadline_index_schedules_as_request_by_request(overrides, monkeypatch):
    """Single steps whose decode group finishes requests by the deadline index and takes blocks by the block-need
    index (both from 2 running requests here) make the request-by-request pass's decisions and leave the same
    request states."""
    from pagesim import scheduler

    monkeypatch.setattr(scheduler, "DEADLINES_MIN", 2)
    monkeypatch.setattr(scheduler, "BLOCK_NEEDS_MIN", 2)
    trace = load_trace(Path(__file__).resolve().parent.parent / "traces/multiturn-300.jsonl", limit=200)
    plain = _step_by_step(trace, False, **overrides)
    taken = []
    finish_deadline = scheduler.finish_deadline
    monkeypatch.setattr(scheduler, "finish_deadline",
                        lambda sched, deadlines, step, *a: (taken.append(len(deadlines.get(step, ()))),
                                                            finish_deadline(sched, deadlines, step, *a))[1])
    grouped = _step_by_step(trace, True, **overrides)
    assert sum(taken) > 10, "the deadline index was never used: the test proves nothing"
    assert grouped[:4] == plain[:4]


# ---- decode runs that go on through finishes ----------------------------------------------------------------------
@contextmanager
def counting_parts():
    """Counts, while in the block: the decode runs the driver loop asks for (`runs`), their parts (`parts`: one per
    recorded decode run, Recorder.record_decode_run, so parts beyond runs went on through finishes), the parts after
    a finish that evicted cached blocks (`evicting`: blocks a finished request's table had left cached, among
    others)."""
    from pagesim import fast_path
    from pagesim.recorder import Recorder

    counts = Counter()
    decode_run, record_decode_run = fast_path.decode_run, Recorder.record_decode_run
    part = [0]

    def counted_run(*args, **kwargs):
        counts["runs"] += 1
        part[0] = 0
        return decode_run(*args, **kwargs)

    def counted_part(self, first_step, starts, durations, n, context_start, max_context_start, blocks, finished,
                     before):
        counts["parts"] += 1
        if part[0] and blocks[2]:  # evicted_steps (DecodeBlocks)
            counts["evicting"] += 1
        part[0] += 1
        return record_decode_run(self, first_step, starts, durations, n, context_start, max_context_start, blocks,
                                 finished, before)

    fast_path.decode_run, Recorder.record_decode_run = counted_run, counted_part
    try:
        yield counts
    finally:
        fast_path.decode_run, Recorder.record_decode_run = decode_run, record_decode_run


def assert_fast_equals_step_by_step(config: Config, make_requests, snapshot_times=()) -> Counter:
    """Simulate fresh requests with and without the fast path: the same steps, request results, block events (all
    but the registrations of full blocks, which a run makes at its end: the same blocks, in another order) and
    block snapshots. Returns counting_parts()' counts of the fast run."""
    def simulate(fast: bool):
        sim = Simulation(make_requests(), config, make_cost_model("roofline", config), fast_path=fast,
                         record_events=True, snapshot_times=snapshot_times)
        return sim.run(), sim.scheduler.kv.events

    slow, slow_events = simulate(False)
    with counting_parts() as counts:
        fast, fast_events = simulate(True)
    assert fast.num_steps == slow.num_steps
    assert [e for e in fast_events if e[0] != STORED] == [e for e in slow_events if e[0] != STORED]
    assert sorted(e for e in fast_events if e[0] == STORED) == sorted(e for e in slow_events if e[0] == STORED)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True, check_dtype=False)
    for a, b in zip(fast.snapshots, slow.snapshots, strict=True):
        assert a.request_ids == b.request_ids and (a.owner == b.owner).all() and (a.fill == b.fill).all()
        assert (a.ref_cnt == b.ref_cnt).all() and (a.cached == b.cached).all()
    assert fast.leaked_blocks == slow.leaked_blocks == 0
    return counts


@st.composite
def finishing_workloads(draw):
    """A config and requests whose decode runs often go on through finishes: up to 12 requests arriving within a
    second, with output lengths spread over 1-160 tokens, under one of: the paged cache roomy or under memory
    pressure (preemption by recompute, or by swap with a CPU pool that may run out), prefix caching over shared
    prefixes (a finished request's full blocks stay cached: later admissions hit them, later parts of a run evict
    them), with or without a host tier, chunked prefill with a small budget or none, the contiguous baseline."""
    bs = draw(st.sampled_from([4, 8, 16]))
    max_model_len = draw(st.integers(12, 40)) * bs
    layout = draw(st.sampled_from(["paged", "paged", "paged", "contiguous"]))
    chunked = draw(st.booleans())
    options = dict(model="llama-3-8b", gpu="h200", block_size=bs, max_model_len=max_model_len, kv_layout=layout,
                   num_gpu_blocks=draw(st.integers(max_model_len // bs + 1, 8 * max_model_len // bs)),
                   max_num_seqs=draw(st.integers(2, 12)), enable_chunked_prefill=chunked,
                   max_num_batched_tokens=draw(st.integers(bs, 2 * max_model_len)) if chunked else max_model_len,
                   watermark=draw(st.sampled_from([0.0, 0.0, 0.05])))
    if layout == "contiguous":
        options["reserve_policy"] = draw(st.sampled_from(["max", "pow2", "oracle"]))
    else:
        options["enable_prefix_caching"] = caching = draw(st.booleans())
        if caching and draw(st.booleans()):
            options["kv_offloading_size"] = draw(st.sampled_from([1, 4, 64])) * Config(**options).block_bytes / 2**30
    if draw(st.booleans()):
        options["preemption_mode"] = "swap"
        options["swap_space"] = swap_space_for(draw(st.integers(0, 40)), "llama-3-8b", bs)
    prefixes = draw(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=8), min_size=1, max_size=3))
    specs = []
    for _ in range(draw(st.integers(2, 12))):
        ids = tuple(draw(st.sampled_from(prefixes)) + draw(st.lists(st.integers(4, 9), max_size=3)))
        specs.append((draw(st.floats(0, 1, allow_nan=False)), draw(st.integers(1, min(len(ids) * bs, max_model_len - 1))),
                      draw(st.integers(1, 160)), ids))
    return Config(**options), specs


def make_requests(specs, block_size):
    return lambda: [Request(f"r{i}", arrival, prompt, output, seq_no=i, prefix_hash_ids=ids, hash_block_size=block_size)
                    for i, (arrival, prompt, output, ids) in enumerate(specs)]


CONTINUED: Counter = Counter()  # what the examples below exercised (test_continued_runs_were_exercised)


@settings(max_examples=int(os.environ.get("FAST_PATH_EXAMPLES", 150)), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(finishing_workloads())
def test_a_run_continued_through_finishes_equals_step_by_step(workload):
    """Decode runs go on through the finishes that end their parts (fast_path.decode_run) while the scheduler still
    certifies a run and nothing is due: equal to step-by-step simulation (steps, request results, block events and
    snapshots), whatever the layout, memory pressure, preemption mode, prefix caching and chunking."""
    config, specs = workload
    counts = assert_fast_equals_step_by_step(config, make_requests(specs, config.block_size), snapshot_times=(0.3, 2.0))
    went_on = counts["parts"] - counts["runs"]
    CONTINUED["examples"] += 1
    CONTINUED["went on"] += went_on > 0
    CONTINUED["went on, caching"] += went_on > 0 and config.enable_prefix_caching
    CONTINUED["went on, contiguous"] += went_on > 0 and config.kv_layout == "contiguous"
    CONTINUED["evicting"] += counts["evicting"]


def test_continued_runs_were_exercised():
    """The examples above went on through finishes often, and with prefix caching too. (In 25 sessions of 150
    examples: 69-108 went on, 23-77 of them with caching; in the contiguous layout, a quarter of the examples, 4-34,
    too few to require a count of: the next test covers it on fixed workloads.)"""
    if CONTINUED["examples"] < 50:
        pytest.skip("the property test did not run in this session")
    assert CONTINUED["went on"] > CONTINUED["examples"] // 4, CONTINUED
    assert CONTINUED["went on, caching"] > 5, CONTINUED


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
def test_runs_go_on_through_finishes_in_the_contiguous_layout(policy):
    """Every bundled trace (first 200 requests) in the contiguous layout, roomy (a finish under memory pressure lets
    the queue's head in, which ends the run): runs go on through finishes, and all equals step-by-step simulation."""
    config = Config(model="llama-3-8b", gpu="h200", max_model_len=8192, kv_layout="contiguous", reserve_policy=policy)
    went_on = {}
    for path in TRACES:
        trace = load_trace(path, limit=200)
        counts = assert_fast_equals_step_by_step(config, lambda: requests_from_trace(trace), snapshot_times=(5.0, 20.0))
        went_on[path.stem] = counts["parts"] - counts["runs"]
    assert sum(went_on.values()) > 100, went_on


def test_runs_go_on_through_finishes_of_cached_blocks_under_pressure():
    """Every bundled trace (first 200 requests) with prefix caching under memory pressure: runs go on through
    finishes, later parts evict blocks that finished requests left cached (100 such parts and more over the traces),
    and all equals step-by-step simulation."""
    config = Config(model="llama-3-8b", gpu="h200", max_model_len=8192, num_gpu_blocks=600, enable_prefix_caching=True)
    evicting = 0
    for path in TRACES:
        trace = load_trace(path, limit=200)
        counts = assert_fast_equals_step_by_step(config, lambda: requests_from_trace(trace), snapshot_times=(5.0, 20.0))
        assert counts["parts"] > counts["runs"], (path.stem, counts)
        evicting += counts["evicting"]
    assert evicting > 100
