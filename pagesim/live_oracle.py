"""The oracle replay of a live run: the simulator driven by live's own step durations (issue #13's tail attribution).

A step planned exactly as live planned the step at the same index (same batch, same features) lasts what live
measured; from the first step that differs on, the cost model's prediction. If the simulator and live mean the same
by a step, a release and a token's time, this reproduces live's request times exactly up to that step, so it
separates what a cost model gets wrong from what the simulator itself does differently (tests/test_validate.py holds
it to live on a preemption-heavy window; bench/tail_attribution.py builds its diagnostics on it).
"""

from __future__ import annotations

import pandas as pd

from pagesim.recorder import FEATURE_COLUMNS, Recorder
from pagesim.simulator import SimExecutor, Simulation
from pagesim.validate import live_simulation


class OracleExecutor(SimExecutor):
    """Live's measured duration for a step planned as live planned it at the same index, until the first that is not
    (`take_live` False: the model's always, only watching where the plans first differ)."""

    def __init__(self, cost, block_size: int, live_steps: pd.DataFrame, live_batches: pd.Series,
                 take_live: bool = True, clock=None):
        super().__init__(cost, block_size, clock)
        self.live = live_steps
        self.batches = live_batches
        self.take_live = take_live
        self.diverged: dict | None = None

    def execute(self, plan) -> float:
        predicted = super().execute(plan)
        if self.diverged is not None:
            return predicted
        scheduled = " ".join(s.request_id for s in plan.scheduled)
        step = plan.step_id
        if step not in self.live.index:
            self.diverged = {"step": int(step), "fields": ["extra step"]}
            return predicted
        f = self.last[1]
        row = self.live.loc[step]
        fields = [c for c in FEATURE_COLUMNS if int(row[c]) != getattr(f, c)]
        if scheduled != self.batches.get(step, ""):
            fields.append("scheduled")
        if fields:
            self.diverged = {"step": int(step), "fields": fields, "sim_scheduled": scheduled,
                             "live_scheduled": self.batches.get(step, "")}
            return predicted
        return float(row["duration_s"]) if self.take_live else predicted


def oracle_run(run: dict, cost, released_times: bool = False, take_live: bool = True) -> tuple[object, dict, dict]:
    """The oracle replay of a loaded live run -> (RunResult, where the plans first differed ({} if never), the step
    before which each request was released)."""
    live_steps = run["steps"].set_index("step")
    batches = run["batches"].set_index("step")["scheduled"]
    released = {}

    def note(req, now, step_id) -> None:
        released[req.request_id] = step_id

    sim = live_simulation(run, cost, fast_path=False, released_times=released_times, on_release=note)
    ex = OracleExecutor(cost, run["config"].block_size, live_steps, batches, take_live, sim.clock)
    sim.executor = ex
    sim.recorder = Recorder(sim.scheduler, ex.features_of)
    return sim.run("sim"), ex.diverged or {}, released
