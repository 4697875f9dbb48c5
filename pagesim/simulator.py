"""The discrete-event simulator: a trace replayed through the shared scheduler on a virtual clock.

The shared driver loop (pagesim/loop.py) releases each request into the
scheduler at its arrival time, loops schedule -> cost model -> finish_step and,
when there is nothing to do, jumps to the next arrival. One engine is the only
process, so its clock is a plain number (`VirtualClock`: `now + seconds`, the
sum simpy's timeouts make, so the times are the same); the multi-replica
cluster (cluster.py) runs the same loop as simpy processes.

The exact fast path: when the scheduler certifies that the next k steps are
identical pure-decode steps (`fast_path.decode_run_limit`), the engine applies
them at once (`fast_path.decode_run`) with their durations from the cost
model's vectorised `decode_run_times`, and stops the run before the step that
would start after the next arrival or snapshot. Per-request results and block
decisions equal the step-by-step simulation (tests/test_fast_path.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from pagesim.config import Config
from pagesim.cost.features import StepFeatures
from pagesim.cost.governor import Throttle
from pagesim.kv_manager import PrefixCacheStats
from pagesim.loop import Arrivals, Hooks, SchedulerStuck, VirtualClock, drive, run
from pagesim.recorder import BlockSnapshot, Recorder
from pagesim.request import Request, in_arrival_order, requests_from_trace
from pagesim.scheduler import Scheduler
from pagesim.utils import paused_gc


class SimExecutor:
    """Executes a plan by asking the cost model how long it would take.

    With a cost model that has a power governor (a profile fitted to clocked calibration rows: cost/governor.py),
    a step with prefill tokens lasts its price times the governor's factor at the load of the steps before it on
    this engine's GPU, which `clock` (the loop's: a step starts at its now()) places in time."""

    def __init__(self, cost_model, block_size: int, clock=None, scheduler=None):
        self.cost_model = cost_model
        self.last: tuple = (None, None)  # (plan, its features): the recorder asks for them right after
        # decode_shared_tokens only for a cost model that prices it (a profile fitted to steps sharing blocks); with
        # the `scheduler` that makes the plans, from its KV-cache manager's shared refs where they tell them
        self.sharing_block_size = block_size if cost_model.prices_sharing else 0
        self.scheduler = scheduler
        governor = cost_model.governor
        self.clock = clock
        self.throttle = Throttle(governor) if governor is not None else None
        if self.throttle is not None and clock is None:
            raise ValueError("a cost model with a power governor needs the loop's clock (SimExecutor(clock=...))")
        # prefill_makespan only for a cost model that prices it (a profile fitted to rows with it, round 35)
        self.prefill_grid = cost_model.prefill_grid

    def execute(self, plan) -> float:
        sched = self.scheduler
        if self.sharing_block_size and sched:
            kv = sched.kv
            sharing = (kv.num_shared_refs(), len(sched.running), kv.shared_refs())
        else:
            sharing = None
        features = StepFeatures.from_plan(plan, self.sharing_block_size, self.prefill_grid, sharing)
        self.last = (plan, features)
        seconds = self.cost_model.step_time(features)
        return seconds if self.throttle is None else self.throttle.price(self.clock.now(), seconds, features)

    def features_of(self, plan) -> StepFeatures:
        last_plan, features = self.last
        return features if last_plan is plan else StepFeatures.from_plan(plan, self.sharing_block_size, self.prefill_grid)


@dataclass
class RunResult:
    name: str
    config: Config
    steps: pd.DataFrame
    requests: pd.DataFrame
    snapshots: list[BlockSnapshot]
    sim_wall_s: float
    num_steps: int
    leaked_blocks: int
    prefix_cache: PrefixCacheStats
    extra: dict = field(default_factory=dict)


class Simulation:
    def __init__(self, requests: list[Request], config: Config, cost_model, *, fast_path: bool = True,
                 snapshot_times=(), progress=None, record_events: bool = False, steps_sink=None, on_release=None,
                 clock=None):
        """steps_sink: where the step table goes in chunks as it is recorded (results.StepsWriter.sink);
        the result's `steps` is then None. Without it the steps are kept (compactly) and returned.
        on_release(request, now, step_id): told of each request's release (loop.Arrivals).
        clock: the loop's clock (default: a VirtualClock of its own; a cluster's replicas share simpy's)."""
        self.requests = in_arrival_order(requests)
        self.config = config
        self.cost_model = cost_model
        self.fast_path = fast_path
        self.snapshot_times = sorted(snapshot_times)
        self.progress = progress
        self.clock = clock if clock is not None else VirtualClock()
        self.scheduler = Scheduler(config, record_events)
        self.executor = SimExecutor(cost_model, config.block_size, self.clock, self.scheduler)
        self.recorder = Recorder(self.scheduler, self.executor.features_of, sink=steps_sink)
        self._snaps = list(self.snapshot_times)
        self.on_release = on_release

    def _tick(self, now: float) -> float:
        """Take the snapshots that are due and report progress; returns the next snapshot time."""
        snaps = self._snaps
        while snaps and snaps[0] <= now:
            self.recorder.snapshot(now)
            snaps.pop(0)
        if self.progress is not None:
            self.progress(now)
        return snaps[0] if snaps else float("inf")

    def engine(self):
        """The shared driver loop on the virtual clock, then the snapshots after the end. The loop's tick (once a
        turn) only when there are snapshots to take or progress to report."""
        tick = self._tick if self._snaps or self.progress is not None else None
        stats = yield from drive(self.scheduler, self.executor, self.recorder,
                                 Arrivals.at_arrival_times(self.requests, ordered=True, on_release=self.on_release), self.clock,
                                 hooks=Hooks(tick=tick), fast_path=self.cost_model if self.fast_path else None)
        while self._snaps:
            self.recorder.snapshot(self.clock.now())
            self._snaps.pop(0)
        return stats

    # ---- running ----------------------------------------------------------------
    def run(self, name: str | None = None) -> RunResult:
        wall = time.perf_counter()
        with paused_gc():
            stats = run(self.engine())
            wall = time.perf_counter() - wall
            sched = self.scheduler
            unfinished = [r for r in self.requests if not r.is_finished]
            if unfinished:
                raise SchedulerStuck(f"{len(unfinished)} requests neither finished nor rejected")
            all_requests = self.requests + [r for r in sched.finished if r.parent_id is not None]
            steps = self.recorder.steps_frame()
            requests = self.recorder.requests_frame(all_requests)
        return RunResult(
            name=name or self.config.run_name,
            config=self.config,
            steps=steps,
            requests=requests,
            snapshots=self.recorder.snapshots,
            sim_wall_s=wall,
            num_steps=self.recorder.num_steps,
            leaked_blocks=sched.leaked_blocks(),
            prefix_cache=sched.kv.prefix_cache_stats,
            extra={"fast_path_steps": stats.fast_path_steps},
        )


def simulate(trace, config: Config, cost_model=None, **kwargs) -> RunResult:
    """Replay a trace (a pagesim.traces.Trace) under `config`; fresh request state every call."""
    if cost_model is None:
        from pagesim.cost import make_cost_model

        cost_model = make_cost_model("roofline", config)
    return Simulation(requests_from_trace(trace), config, cost_model, **kwargs).run()
