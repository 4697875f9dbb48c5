"""The GPU's power governor: how far a run of heavy steps pulls the SM clock down, and what that costs a step.

A fitted profile prices steps at the calibration's top SM clock (profile.fit_profile: each calibration row brought
to that clock as if a share s of its time scaled with the clock). A serving GPU holds that clock while its load is
light, but a burst of large prefill chunks back to back drives it to its power cap, and the governor lowers the
clock: on an H100 from 1,980 MHz to 1,500-1,600 MHz within a few hundred milliseconds of such a burst, recovering as
fast once decode steps follow. Steps then run slower than the profile prices them, by s (reference / clock - 1):
Azure code's burst of eager 8k-token steps ran 3.6% over its prediction on an H100 (round 34), which made the
simulation get ahead of live and cut smaller chunks; longdoc-b's eager steps 4.7%.

The clock follows the recent compute rate. `load` is an exponential average over time (time constant tau_s) of
the compute rate of the steps with prefill tokens, in TFLOP/s (step_flops / the step's duration; decode-only steps
and idle time count as 0: they are memory-bound and draw far less), taken at each step's start. Over the
calibration rows of an H100 and the live windows recorded with them, the SM clock read during a step correlates
with that load at -0.77 to -0.85 (tau 0.1-0.2 s), and decode-only steps count as 0 without losing any of it
(round 35, docs/cost-model-history.md). The governor's curve is `slowdown(load)` = E[reference / clock - 1] at that
load, fitted to the calibration's own rows (an isotonic, non-decreasing fit at the tau that fits them best, kept as
GOVERNOR_KNOTS points), so a profile knows the card it was calibrated on: no live run is used.

A step with prefill tokens then lasts its profile time x (1 + s slowdown(load at its start)). Decode-only steps are
priced as before: the fitted share s overstates how the clock moves a memory-bound graph replay (+1% at 1.6 GHz in
the same windows), and leaving them alone keeps the exact fast path's decode runs (fast_path.py) untouched: the
load only decays over them, which `Throttle` computes when the next step with prefill tokens starts. The state is
one engine's (one GPU's): each SimExecutor has its own Throttle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pagesim.specs import ModelSpec

GOVERNOR_TAUS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5)  # seconds: the time constants a fit chooses from
GOVERNOR_KNOTS = 24  # points of the fitted curve kept in a profile
GOVERNOR_MIN_ROWS = 200  # rows with prefill tokens a calibration needs for a governor of its own


def flops_rates(spec: ModelSpec) -> tuple[float, float]:
    """FLOPs (2 per multiply-add) per token (the matmuls) and per (query, key) pair (attention's QK^T and PV)."""
    return float(spec.flops_per_token), float(4 * spec.head_dim * spec.num_heads * spec.num_layers)


def step_flops(per_token: float, per_pair: float, prefill_tokens, decode_seqs, prefill_attn_pairs,
               decode_context_tokens):
    """A step's FLOPs: every token's matmuls, every (query, key) pair's attention (the decode rows' included); the two
    rates from flops_rates. Floats or arrays."""
    return per_token * (prefill_tokens + decode_seqs) + per_pair * (prefill_attn_pairs + decode_context_tokens)


class Load:
    """The load: an exponential average over time (time constant tau) of the compute rate of the steps it takes in,
    each rate held over its step and 0 between them (and over the steps it is not given). The fit and the simulation
    keep it alike."""

    __slots__ = ("tau", "value", "until")

    def __init__(self, tau: float):
        self.tau, self.value, self.until = tau, 0.0, None

    def at(self, start: float) -> float:
        """Its value at `start` (no earlier than the last step taken in began)."""
        if self.until is None or start <= self.until:
            return self.value
        return self.value * math.exp(-(start - self.until) / self.tau)

    def take(self, start: float, seconds: float, rate: float, value: float) -> None:
        """A step from `start` for `seconds` at `rate` (TFLOP/s), the load having been `value` (at(start)) as it began."""
        self.value = rate + (value - rate) * math.exp(-seconds / self.tau)
        self.until = start + seconds


def load_at_starts(starts: np.ndarray, durations: np.ndarray, tflops: np.ndarray, tau: float) -> np.ndarray:
    """The load at each step's start, the steps in time order (`tflops` 0 for a step that counts as idle)."""
    load, out = Load(tau), np.empty(len(starts))
    for i, (start, duration, rate) in enumerate(zip(starts.tolist(), durations.tolist(), tflops.tolist())):
        out[i] = value = load.at(start)
        if rate:
            load.take(start, duration, rate, value)
    return out


@dataclass(frozen=True)
class ClockGovernor:
    """The fitted curve: slowdown (reference / clock - 1) at each knot of load (TFLOP/s), the time constant tau_s
    of the load's average, the profile's clock share s that turns a slowdown into step time, and the model's FLOPs
    per token and per (query, key) pair that make a step's compute rate (flops_rates)."""

    tau_s: float
    loads: tuple[float, ...]
    slowdowns: tuple[float, ...]
    sensitivity: float
    flops_per_token: float
    flops_per_pair: float

    def factor(self, load: float) -> float:
        """A step's time at that load over its time at the reference clock."""
        return 1.0 + self.sensitivity * float(np.interp(load, self.loads, self.slowdowns))

    def to_json(self) -> dict:
        return {"tau_s": self.tau_s, "load_tflops": list(self.loads), "slowdown": list(self.slowdowns),
                "sensitivity": self.sensitivity, "flops_per_token": self.flops_per_token,
                "flops_per_pair": self.flops_per_pair}

    @classmethod
    def from_json(cls, d) -> "ClockGovernor":
        """From a profile's `clock_governor` entry; ValueError naming what is wrong."""
        expected = ("expected {\"tau_s\": seconds > 0, \"load_tflops\": non-decreasing numbers, \"slowdown\": as many "
                    "non-decreasing numbers >= 0, \"sensitivity\": a number from 0 to 1, \"flops_per_token\" and "
                    "\"flops_per_pair\": numbers > 0}")
        try:
            tau, loads, slow, s = d["tau_s"], d["load_tflops"], d["slowdown"], d["sensitivity"]
            per_token, per_pair = d["flops_per_token"], d["flops_per_pair"]
            if any(isinstance(v, (bool, str)) for v in (tau, s, per_token, per_pair, *loads, *slow)):
                raise TypeError
            loads, slow = tuple(float(x) for x in loads), tuple(float(x) for x in slow)
            tau, s, per_token, per_pair = float(tau), float(s), float(per_token), float(per_pair)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{d!r}: {expected}") from None
        values = (tau, s, per_token, per_pair, *loads, *slow)
        if (not all(math.isfinite(v) for v in values) or tau <= 0 or not 0 <= s <= 1 or per_token <= 0
                or per_pair <= 0 or not loads or len(loads) != len(slow) or min(slow) < 0
                or any(np.diff(loads) < 0) or any(np.diff(slow) < 0)):
            raise ValueError(f"{d!r}: {expected}")
        return cls(tau, loads, slow, s, per_token, per_pair)

    @classmethod
    def fit(cls, rows, spec: ModelSpec, reference_mhz: float, sensitivity: float) -> "tuple[ClockGovernor | None, dict]":
        """The governor of a calibration's rows (with `started_unix`, `time_s`, `duration_s` and `sm_clock_mhz`), and
        a report (tau, the clock's error at each tau, rows); None when the rows lack the columns or have fewer than
        GOVERNOR_MIN_ROWS steps with prefill tokens."""
        from scipy.optimize import isotonic_regression

        needed = ("started_unix", "time_s", "duration_s", "sm_clock_mhz", "num_prefill_tokens")
        if any(c not in rows for c in needed) or rows["started_unix"].isna().any():
            return None, {"skipped": "the rows have no start times (calibrations before round 17)"}
        starts = np.asarray(rows["started_unix"], dtype=np.float64) + np.asarray(rows["time_s"], dtype=np.float64)
        order = np.argsort(starts, kind="stable")
        starts = starts[order] - starts[order][0]
        durations = np.asarray(rows["duration_s"], dtype=np.float64)[order]
        prefill = np.asarray(rows["num_prefill_tokens"])[order] > 0
        if int(prefill.sum()) < GOVERNOR_MIN_ROWS:
            return None, {"skipped": f"{int(prefill.sum())} rows with prefill tokens (< {GOVERNOR_MIN_ROWS})"}
        col = {c: np.asarray(rows[c], dtype=np.float64)[order] for c in
               ("num_prefill_tokens", "num_decode_seqs", "prefill_attn_pairs", "decode_context_tokens")}
        per_token, per_pair = flops_rates(spec)
        flops = step_flops(per_token, per_pair, col["num_prefill_tokens"], col["num_decode_seqs"],
                           col["prefill_attn_pairs"], col["decode_context_tokens"])
        tflops = np.where(prefill, flops / durations / 1e12, 0.0)
        slow = reference_mhz / np.asarray(rows["sm_clock_mhz"], dtype=np.float64)[order] - 1
        errors, fits = {}, {}
        for tau in GOVERNOR_TAUS:
            load = load_at_starts(starts, durations, tflops, tau)[prefill]
            by_load = np.argsort(load, kind="stable")
            curve = isotonic_regression(slow[prefill][by_load], increasing=True).x
            errors[tau] = float(np.mean(np.abs(curve - slow[prefill][by_load])))
            fits[tau] = (load[by_load], curve)
        tau = min(errors, key=lambda t: (errors[t], t))
        load, curve = fits[tau]
        # the curve at GOVERNOR_KNOTS quantiles of the load (0 and the largest included): non-decreasing both ways
        at = np.unique(np.quantile(load, np.linspace(0, 1, GOVERNOR_KNOTS)))
        knots = np.maximum.accumulate(np.maximum(np.interp(at, load, curve), 0.0))
        governor = cls(float(tau), tuple(float(x) for x in at), tuple(float(x) for x in knots), float(sensitivity),
                       per_token, per_pair)
        report = {"tau_s": tau, "clock_mae_by_tau": {str(t): e for t, e in errors.items()},
                  "rows": int(prefill.sum()), "max_factor": governor.factor(float(at[-1]))}
        return governor, report


class Throttle:
    """One GPU's governor state while a simulation runs (or validation prices a run's steps): its Load."""

    __slots__ = ("governor", "load")

    def __init__(self, governor: ClockGovernor):
        self.governor = governor
        self.load = Load(governor.tau_s)

    def price(self, start: float, seconds: float, f) -> float:
        """The time of a step (StepFeatures f) starting at `start` that the profile prices at `seconds`: a step with
        prefill tokens at the governor's factor for the load then, which then takes it in; any other as priced."""
        if not f.num_prefill_tokens:
            return seconds
        g, load = self.governor, self.load
        value = load.at(start)
        t = seconds * g.factor(value)
        flops = step_flops(g.flops_per_token, g.flops_per_pair, f.num_prefill_tokens, f.num_decode_seqs,
                           f.prefill_attn_pairs, f.decode_context_tokens)
        load.take(start, t, flops / t / 1e12, value)
        return t
