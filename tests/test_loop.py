"""The one driver loop (pagesim/loop.py): every mode ends, frees executor state, and never spins when stuck."""

from __future__ import annotations

import pytest

from engine.live import LiveReplay
from pagesim.config import Config
from pagesim.loop import Arrivals, Hooks, SchedulerStuck, VirtualClock, WallClock, drive, run
from pagesim.recorder import Recorder
from pagesim.cost.features import StepFeatures
from pagesim.scheduler import Scheduler
from pagesim.simulator import Simulation
from pagesim.specs import GIB
from pagesim.request import Request
from pagesim.cost import make_cost_model
from tests.helpers import assert_all_done, make_requests


def config(**kw) -> Config:
    return Config(**{"model": "toy", "block_size": 4, "num_gpu_blocks": 40, "max_model_len": 64,
                     "max_num_batched_tokens": 64, **kw})


class StatefulExecutor:
    """Keeps per-request state the way the GPU executor does, freeing it from plan.finished_req_ids."""

    last_gpu_time_s = None

    def __init__(self):
        self.state: dict[str, int] = {}
        self.freed: list[str] = []

    def execute(self, plan) -> float:
        for rid in plan.finished_req_ids:
            assert rid in self.state, f"{rid} freed but never run"
            del self.state[rid]
            self.freed.append(rid)
        for s in plan.scheduled:
            assert s.request_id not in self.freed, f"{s.request_id} scheduled after it was freed"
            self.state[s.request_id] = self.state.get(s.request_id, 0) + s.num_new_tokens
        return 0.001

    def release(self, request_id: str) -> None:  # the last step's finished requests, which no plan names
        del self.state[request_id]
        self.freed.append(request_id)


def test_plans_hand_finished_requests_to_the_executor_exactly_once():
    s = Scheduler(config(max_num_seqs=3))
    reqs = make_requests([(5, 3), (9, 6), (3, 2), (12, 4), (7, 1), (4, 8)])
    ex = StatefulExecutor()
    arrivals = Arrivals([(float(i), r) for i, r in enumerate(reqs)])
    stats = run(drive(s, ex, None, arrivals, VirtualClock()))
    assert_all_done(s, reqs)
    assert stats.num_steps > 0 and stats.fast_path_steps == 0
    finished = [r.request_id for r in s.finished]
    # Every finished request is handed over once; the last step's ones through release() when the loop ends,
    # so an executor that runs another loop next (warm-up, calibration, then the run) holds nothing stale.
    assert len(ex.freed) == len(set(ex.freed)) and set(ex.freed) == set(finished)
    assert ex.state == {} and s.finished_req_ids == []


def _break_admission(s: Scheduler) -> None:
    """A bug: the KV-cache manager refuses every admission, so nothing is ever scheduled."""
    s.kv.can_allocate = lambda *a, **k: False


def test_a_stuck_scheduler_raises_instead_of_looping_on_a_virtual_clock():
    s = Scheduler(config())
    _break_admission(s)
    with pytest.raises(SchedulerStuck, match="no progress"):
        run(drive(s, StatefulExecutor(), None, Arrivals.at_arrival_times(make_requests([(5, 3)])), VirtualClock()))


def test_a_stuck_live_run_raises_instead_of_looping_forever():
    """Live mode runs the same loop on the wall clock, so the guard protects it too (it once looped forever)."""
    run_ = LiveReplay(make_requests([(5, 3), (6, 2)]), config(), StatefulExecutor())
    _break_admission(run_.scheduler)
    with pytest.raises(SchedulerStuck):
        run_.run()


def test_a_stuck_simulation_raises():
    cfg = config()
    sim = Simulation(make_requests([(5, 3)]), cfg, make_cost_model("roofline", cfg))
    _break_admission(sim.scheduler)
    with pytest.raises(SchedulerStuck):
        sim.run()


def test_by_step_release_takes_the_next_group_at_once_when_idle():
    """Calibration and lockstep release by step; an idle engine does not wait for a step that never comes."""
    s = Scheduler(config())
    a, b = make_requests([(5, 2), (5, 2)])
    released = []
    arrivals = Arrivals([(0, a), (50, b)], by_step=True, on_release=lambda r, now, step: released.append((r.request_id, step)))
    rec = Recorder(s, StepFeatures.from_plan)
    run(drive(s, StatefulExecutor(), rec, arrivals, WallClock()))
    assert_all_done(s, [a, b])
    assert released == [("r0", 0), ("r1", 2)], released


def test_hooks_see_every_step_in_order():
    s = Scheduler(config())
    seen = []
    hooks = Hooks(plan=lambda p: seen.append(("plan", p.step_id)),
                  step=lambda p, d, o: seen.append(("step", p.step_id)))
    stats = run(drive(s, StatefulExecutor(), None, Arrivals.at_arrival_times(make_requests([(5, 3)])),
                      VirtualClock(), hooks=hooks))
    assert seen == [(kind, i) for i in range(stats.num_steps) for kind in ("plan", "step")]


def test_a_live_run_with_a_host_tier_reports_the_bytes_it_moved():
    """Live summaries once left offload_load_bytes / offload_store_bytes empty (no block size was passed)."""
    base = config(num_gpu_blocks=12, enable_prefix_caching=True, max_num_seqs=4, max_num_batched_tokens=32)
    cfg = base.replace(kv_offloading_size=30.5 * base.block_bytes / GIB)
    a, b = (0, 1) * 18 + (3,), (2,) * 36 + (3,)
    reqs = [Request(f"r{i}", 0.002 * i, len(p), 1, seq_no=i, prompt_token_ids=p) for i, p in enumerate([a, b, a, b, a])]
    out = LiveReplay(reqs, cfg, StatefulExecutor()).run()
    summary, steps = out["summary"], out["steps"]
    assert summary["offload_store_bytes"] == int(steps["num_store_blocks"].sum()) * cfg.block_bytes > 0
    assert summary["offload_load_bytes"] == int(steps["num_load_blocks"].sum()) * cfg.block_bytes
    assert summary["num_finished"] == len(reqs)


class GCObservingExecutor(StatefulExecutor):
    """Records whether the cyclic collector could run during each step; one step calls gc.collect() itself."""

    def __init__(self):
        super().__init__()
        self.enabled: list[bool] = []

    def execute(self, plan) -> float:
        import gc

        self.enabled.append(gc.isenabled())
        if len(self.enabled) == 2:
            gc.collect()
        return super().execute(plan)


def test_a_live_run_pauses_the_garbage_collector_and_counts_collections_made_anyway():
    """A full collection in a process holding torch stops the host for a step's time or more (round 9's 187 ms step
    of longdoc-a-r9 is the suspect): no step of a live run runs with the collector on, and any collection that
    still runs (an explicit gc.collect()) is counted in the summary."""
    import gc

    ex = GCObservingExecutor()
    out = LiveReplay(make_requests([(5, 3), (6, 2)]), config(), ex).run()
    assert ex.enabled and not any(ex.enabled), ex.enabled
    assert out["summary"]["gc_collections_during_run"] == 1
    assert gc.isenabled()  # restored after the run
