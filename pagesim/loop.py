"""The engine loop body both executors share (DESIGN.md):

    plan = scheduler.schedule()
    duration = executor.execute(plan)
    scheduler.finish_step(plan, now + duration)
    recorder.record_step(now, duration, plan)

An executor is anything with `execute(plan) -> seconds`: the simulator's asks a
cost model, the GPU engine's runs the forward pass. In simulation `now` is
simpy's clock and the step lasts what the cost model says; live, pass `clock`
(a wall clock) and the step lasts from `now` until the forward pass is done,
scheduling included.
"""

from __future__ import annotations

from pagesim.recorder import Recorder
from pagesim.scheduler import Scheduler, StepOutcome, StepPlan


class SchedulerStuck(RuntimeError):
    """Work remains but the scheduler can schedule nothing: a bug, reported rather than looped on."""


def run_step(scheduler: Scheduler, executor, recorder: Recorder, now: float,
             clock=None) -> tuple[StepPlan, float, StepOutcome]:
    plan = scheduler.schedule(now)
    num_running = len(scheduler.running)
    duration = executor.execute(plan) if not plan.is_empty else 0.0
    if clock is not None:
        duration = clock() - now
    outcome = scheduler.finish_step(plan, now + duration)
    recorder.record_step(now, duration, plan, num_running)
    return plan, duration, outcome
