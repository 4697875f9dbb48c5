"""The one driver loop: scheduler + executor + recorder, for every mode (README, Architecture).

    release the requests that are due
    plan = scheduler.schedule(now)
    duration = executor.execute(plan)          # cost model, GPU forward pass, or a recorded time
    scheduler.finish_step(plan, now + duration)
    recorder.record_step(now, duration, plan)

`drive` runs it until every request has ended, for the simulator (simpy's
clock, the exact fast path), live mode and calibration (the wall clock),
lockstep validation and the tests (a virtual clock). It is a generator of
waits: each `yield` hands over what the clock's `wait(seconds)` returned when
that is something to wait on (simpy's timeout events; a virtual or wall clock
has waited already and returns None, and the loop goes on without yielding), so
a simpy process runs it as it is (`env.process(drive(...))`) and any other
caller runs it with `run(drive(...))`.

An executor is anything with `execute(plan) -> seconds`; a plan carries the
ids of the requests that finished since the last executed plan
(`StepPlan.finished_req_ids`), so an executor frees its own per-request state;
those of the last step, which no plan follows, go to its `release(request_id)`
when it has one (an executor that outlives the loop: warm-up, calibration, then the run).
With a clock that `measures` (the wall clock), a step lasts from its start
until the forward pass is done, scheduling included.

No-progress guard: more than `max_empty_steps` plans in a row that schedule
nothing while work remains raise SchedulerStuck, in every mode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Generator

from pagesim.request import Request, in_arrival_order
from pagesim.scheduler import Scheduler, StepOutcome, StepPlan

INF = float("inf")


class SchedulerStuck(RuntimeError):
    """Work remains but the scheduler can schedule nothing: a bug, reported rather than looped on."""


# ---- clocks -----------------------------------------------------------------------------------------
class SimClock:
    """simpy's clock: `wait` returns a timeout event for the simpy process running the loop."""

    measures = False

    def __init__(self, env):
        self.env = env

    def now(self) -> float:
        return self.env.now

    def wait(self, seconds: float):
        return self.env.timeout(seconds)

    def wait_until(self, t: float):
        """simpy's clock moves by delays only: now + (t - now), which can miss t by an ulp."""
        return self.env.timeout(t - self.env.now)


class VirtualClock:
    """A plain number that `wait` advances: steps last what the executor says, nothing sleeps."""

    measures = False

    def __init__(self, start: float = 0.0):
        self.t = start

    def now(self) -> float:
        return self.t

    def wait(self, seconds: float) -> None:
        self.t += seconds

    def wait_until(self, t: float) -> None:
        """To `t` itself: a fast-path run's end, as the step-by-step sums reach it (now + (t - now) can miss t by
        an ulp, and every later time with it)."""
        self.t = t


class WallClock:
    """Seconds since construction on time.perf_counter; `wait` sleeps. Steps are measured, not waited for.
    `started_unix`: the construction's time.time(), so samples taken outside the process (nvidia-smi's clocks and
    power) can be matched to steps."""

    measures = True

    def __init__(self):
        self.started_unix = time.time()
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def wait(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


# ---- arrivals ---------------------------------------------------------------------------------------
@dataclass
class Arrivals:
    """Requests to release into the scheduler, in order, each when `due`.

    By time (default): a request is released at the first loop turn at or
    after its due time, and an idle engine waits for the next one. `by_step`:
    due is a step number; a request is released before that step, and an idle
    engine takes the next one at once. `on_release(request, now, step_id)` is
    told of each release.
    """

    pending: list[tuple[float, Request]]
    by_step: bool = False
    on_release: Callable | None = None
    next_index: int = 0

    @classmethod
    def at_arrival_times(cls, requests: list[Request], ordered: bool = False, **kw) -> "Arrivals":
        """`ordered`: the requests are in arrival order already (in_arrival_order's), so not sorted again."""
        if not ordered:
            requests = in_arrival_order(requests)
        return cls([(r.arrival_time, r) for r in requests], **kw)

    @property
    def exhausted(self) -> bool:
        return self.next_index >= len(self.pending)

    def next_time(self) -> float:
        """When the next request is due (inf when none is left, or when releases go by step)."""
        return INF if self.by_step or self.exhausted else self.pending[self.next_index][0]

    def release(self, sched: Scheduler, now: float) -> bool:
        """Release the requests that are due; whether there were any."""
        pending, i, n = self.pending, self.next_index, len(self.pending)
        if not self.by_step and (i >= n or pending[i][0] > now):  # nothing due (most turns)
            return False
        due = sched.step_id if self.by_step else now
        while i < n and (pending[i][0] <= due or (self.by_step and not sched.has_work())):
            req = pending[i][1]
            sched.add_request(req)
            if self.on_release is not None:
                self.on_release(req, now, sched.step_id)
            i += 1
        released, self.next_index = i > self.next_index, i
        return released


# ---- the loop -----------------------------------------------------------------------------------------
def run_step(scheduler: Scheduler, executor, recorder, now: float, clock=None,
             on_plan=None) -> tuple[StepPlan, float, StepOutcome]:
    """One step: schedule, execute (not an empty plan), finish, record (unless `recorder` is None).

    With `clock` (a function of time) the duration is measured from `now`; `on_plan(plan)` sees the
    plan before the executor does."""
    plan = scheduler.schedule(now)
    if on_plan is not None:
        on_plan(plan)
    num_running = len(scheduler.running)
    duration = executor.execute(plan) if not plan.is_empty else 0.0
    if clock is not None:
        duration = clock() - now
    outcome = scheduler.finish_step(plan, now + duration)
    if recorder is not None:
        recorder.record_step(now, duration, plan, num_running)
    return plan, duration, outcome


def _hand_over_last_finished(scheduler: Scheduler, executor) -> None:
    """The requests that ended in the last step, which no plan will name: to the executor's release()."""
    release = getattr(executor, "release", None)
    if release is not None:
        for request_id in scheduler.finished_req_ids:
            release(request_id)
        scheduler.finished_req_ids = []


@dataclass(slots=True)
class LoopStats:
    num_steps: int = 0
    fast_path_steps: int = 0  # of num_steps, applied by the fast path


@dataclass
class Hooks:
    """Optional observers of the loop (each may be None).

    tick(now) -> float: at the top of every turn; returns the next time the
        caller must see (a snapshot), so a fast-path run stops before it;
    plan(plan): right after schedule(), before the executor runs it;
    step(plan, duration, outcome): after finish_step() and recording;
    idle(now): when the engine goes idle waiting for an arrival.
    """

    tick: Callable[[float], float] | None = None
    plan: Callable[[StepPlan], None] | None = None
    step: Callable[[StepPlan, float, StepOutcome], None] | None = None
    idle: Callable[[float], None] | None = None


def drive(scheduler: Scheduler, executor, recorder, arrivals: Arrivals, clock, *, hooks: Hooks = Hooks(),
          fast_path=None, max_empty_steps: int = 2) -> Generator[object, None, LoopStats]:
    """Run until every request has been released and has ended; yields the clock's waits, returns LoopStats.

    `fast_path` (the simulator's cost model, or None) enables the exact fast
    path of pagesim/fast_path.py: runs of identical decode steps applied at
    once, cut before the next arrival or the time `hooks.tick` returned (on a
    simulated clock, which `wait_until`s a run's end; live mode has none); and
    sets `scheduler.group_decodes` to match (a single step's leading decodes
    scheduled as one group, StepPlan.decode_group; off for every other caller).
    """
    from pagesim import fast_path as fp

    empty = 0
    stats = LoopStats()
    scheduler.group_decodes = fast_path is not None  # the fast path's decode groups within single steps
    # After an arrival the loop takes a single step without asking for a run (the arrival is usually admitted, and
    # otherwise the step is the one a run would have made first). Not with prefix caching: a run and a single step
    # register full blocks at different moments, so the block events would come in another order.
    skip_after_release = not scheduler.kv.caches_full_blocks
    measure = clock.now if clock.measures else None
    while True:
        now = clock.now()
        seen_until = hooks.tick(now) if hooks.tick is not None else INF
        released = arrivals.release(scheduler, now)
        if not scheduler.has_work():
            if arrivals.exhausted:
                _hand_over_last_finished(scheduler, executor)
                return stats
            if hooks.idle is not None:
                hooks.idle(now)
            if (wait := clock.wait(arrivals.next_time() - now)) is not None:
                yield wait
            continue
        if fast_path is not None and not (released and skip_after_release):
            k, total, longest = fp.plan_decode_run(scheduler)
            if k >= 2:
                # The run goes on through the finishes that end its parts while nothing is due before the cut
                # (fp.decode_run): what the loop's next turns would do, without their tick, release and wait.
                cut = arrivals.next_time()
                k, end = fp.decode_run(scheduler, recorder, fast_path, k, now, seen_until if seen_until < cut else cut,
                                       (total, longest))
                stats.num_steps += k
                stats.fast_path_steps += k
                empty = 0
                # A clock with nothing to hand over (virtual, wall) returns None: no yield, the next turn at once.
                if (wait := clock.wait_until(end)) is not None:
                    yield wait
                continue
        plan, duration, outcome = run_step(scheduler, executor, recorder, now, measure, hooks.plan)
        stats.num_steps += 1
        if hooks.step is not None:
            hooks.step(plan, duration, outcome)
        if plan.is_empty:
            empty += 1
            if empty > max_empty_steps:
                raise SchedulerStuck(f"no progress: {empty} steps in a row scheduled nothing with "
                                     f"{scheduler.num_unfinished} unfinished requests at t={now:.6g}")
            continue
        empty = 0
        if not clock.measures and (wait := clock.wait(duration)) is not None:
            yield wait


def run(loop: Generator) -> LoopStats:
    """Run a `drive` loop outside simpy (its waits already happened when yielded); returns its LoopStats."""
    while True:
        try:
            next(loop)
        except StopIteration as stop:
            return stop.value
