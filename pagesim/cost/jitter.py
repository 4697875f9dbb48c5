"""A cost model whose step times vary as a real GPU's do: for ensembles of free simulations.

A live run's step times scatter around any smooth prediction, and not only step by step: two recordings of one
window on one H200, two minutes apart at the same SM clock, ran their decode steps at 0.981 and 1.013 of the same
prediction (docs/accuracy-history.md, round 19). In a window whose schedule is sensitive to timing (preemptions,
which requests wait behind them), that scatter moves the request-level figures by more than the model's own error,
so one deterministic simulation is one draw of what the engine might do. `JitteredCostModel` multiplies each step
time of a base model by a level drawn once per run and a factor drawn per step (both log-normal, median 1);
`validate --ensemble N` runs N such simulations, each with its own seed, and reports their median and spread.

Step by step only: a jittered step is no longer identical to its neighbour, so the fast path's runs of identical
steps do not apply (the simulations are made with fast_path=False; the model has no `decode_run_times`).
"""

from __future__ import annotations

import math

import numpy as np

from pagesim.cost.features import StepFeatures
from pagesim.errors import UserError


def check_sigma(value: float, flag: str) -> float:
    """A log-normal sigma from the user: a finite number in [0, 1) (a share of the step time), else a clear error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value < 1:
        raise UserError(f"{flag} {value!r}: expected a number from 0 up to (not including) 1, the log-normal "
                        "sigma of a time factor (0.015 for about 1.5%)")
    return float(value)


class JitteredCostModel:
    """`base`'s step times times exp(N(0, level_sigma)) drawn once and exp(N(0, step_sigma)) drawn per step, from a
    generator seeded with `seed` (so a run with the same seed, steps and base model repeats exactly)."""

    def __init__(self, base, seed: int, step_sigma: float, level_sigma: float):
        self.base = base
        self.step_sigma = check_sigma(step_sigma, "step_sigma")
        self.level_sigma = check_sigma(level_sigma, "level_sigma")
        self.rng = np.random.default_rng(seed)
        self.level = float(np.exp(self.rng.normal(0.0, self.level_sigma))) if self.level_sigma else 1.0
        self.prices_sharing = base.prices_sharing  # SimExecutor asks: the base model's features, unchanged
        self.governor = base.governor  # and the base model's power governor (SimExecutor throttles the jittered time)
        self.prefill_grid = base.prefill_grid

    def step_time(self, features: StepFeatures) -> float:
        t = self.base.step_time(features) * self.level
        return t * float(np.exp(self.rng.normal(0.0, self.step_sigma))) if self.step_sigma else t

    def describe(self) -> dict:
        return {"kind": "jittered", "step_sigma": self.step_sigma, "level_sigma": self.level_sigma,
                "level": self.level, "base": self.base.describe()}


class ScaledCostModel:
    """`base`'s step times times one factor, `scale` (a level set rather than drawn: validate's sensitivity,
    bench/tail_attribution.py's variants), the fast path's runs of decode steps too (`decode_run_times`), so a
    simulation with it keeps the fast path."""

    def __init__(self, base, scale: float):
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale {scale!r}: expected a positive factor on the step times")
        self.base, self.scale = base, float(scale)
        self.prices_sharing, self.governor, self.prefill_grid = base.prices_sharing, base.governor, base.prefill_grid

    def step_time(self, features: StepFeatures) -> float:
        return self.base.step_time(features) * self.scale

    def decode_run_times(self, *args, **kwargs) -> np.ndarray:
        return self.base.decode_run_times(*args, **kwargs) * self.scale

    def describe(self) -> dict:
        return {"kind": "scaled", "scale": self.scale, "base": self.base.describe()}
