"""Does a step-time factor driven by the recent prefill load fix the free simulation's request percentiles? (round 25
follow-up, issue #13; no GPU needed)

The H200 reaches its power cap in bursts of long prefills and its SM clock drops (1980 -> ~1500 MHz), while the
profile prices every step at its reference clock; the free simulation (validate's request_level: the live run's
requests at their trace arrival times, step times from the profile) then drains the bursts sooner than live. This
check multiplies each predicted step time by a factor read from the prefill-token rate just before the step (an EWMA:
each step's prefill tokens enter at its end and decay with time constant tau) and, per variant, evaluates it
**leave-one-out**: each recording's factor is fitted on the other recordings only (with --loo window, the default, on
the recordings of other windows only, so a window recorded five times never sees itself), then

- the free simulation, step by step (fast_path=False), with the factor read from the *simulated* rate (plain: the same
  simulation without it, which reproduces validation.json's request_level);
- step MAPE by kind: the factor on validation_steps.parquet's predictions, read from the live rate;
- the timed lockstep (validate's timed_lockstep: live's decisions, the factored predicted times).

Variants (--variants, default all): `FAMILY-SHAPE-tTAU`, FAMILY one of
  clock   the median SM clock per rate bin of the training steps, as 1 + s x (reference / clock - 1) with the
          held-out run's profile clock share s and reference (the round-25 prototype, with an EWMA rate);
  kind    per step kind (graph decode, graph mixed, mixed, prefill): the training steps' summed measured over summed
          predicted time per rate bin, divided by that of the rest bin (under 1k tokens/s), so 1 at rest;
  prefill the same, one curve for every step with prefill tokens (graph decode steps unchanged);
  single  the same, one curve for every step;
SHAPE `bins` (the value of the rate's bin) or `smooth` (linear between the bins' median rates); TAU in seconds. Bins
with fewer than MIN_STEPS training steps are pooled with the bin below (or above, at the bottom).

Targets per run (issue #13): TTFT, TPOT, E2E p50 and p90 within 5% of live, p99 within 10%, makespan within 1%.
Recordings without SM clocks or idle_before_s in steps.parquet, or without a validation, are left out.

    python -m bench.power_cap --out F.json [--loo window|recording] [--variants kind-bins-t0.1,...] [--runs GLOB]

Prints one line per variant (plain first) and writes per-run and summary figures to F.json. Every variant, 41
recordings: about 12 minutes on one core; --ensemble 10 with two variants about 13 more. Results of 2026-12-05
(gzipped after the run, per-run figures rounded to 5 decimals): bench/results/power-cap-window-grid.json.gz (every
variant), power-cap-window-ensemble.json.gz (--ensemble 10 --variants single-smooth-t0.1,clock-bins-t0.1),
power-cap-recording.json.gz (--loo recording, five variants).

Finding (round 26): no variant moves the issue's per-run targets materially (runs meeting every percentile target:
14 of 41 plain, 13-16 with the candidates, within this check's noise); the best, clock-bins-t0.1, fixes most of Azure
code's burst error (its targets met 6 -> 16 of 20) and leaves step MAPE as it was (2.33 -> 2.31%). Not adopted in the
simulator: docs/accuracy-history.md, round 26.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pagesim.cost.graphs import runs_mixed_graph
from pagesim.outputs import check_output_file, json_text

RATE_EDGES = (0.0, 1e3, 5e3, 1e4, 2e4, 3e4, 4e4, math.inf)  # prefill tokens per second
FACTOR_KINDS = ("graph decode", "graph mixed", "mixed", "prefill")
PREFILL_KINDS = ("graph mixed", "mixed", "prefill")
MIN_STEPS = 20
TAUS = (0.1, 0.25, 0.5, 1.0)
FAMILIES = ("clock", "kind", "prefill", "single")
SHAPES = ("bins", "smooth")
PERCENTILE_METRICS = [f"{m}_{p}" for m in ("ttft_s", "tpot_s", "e2e_s") for p in ("p50", "p90", "p99")]
METRICS = PERCENTILE_METRICS + ["makespan_s"]


def target(metric: str) -> float:
    """The issue #13 bound on |relative error| of a request-level figure."""
    return 0.01 if metric == "makespan_s" else 0.10 if metric.endswith("p99") else 0.05


class RateMeter:
    """The recent prefill-token rate: each step's tokens enter at the step's end and decay as exp(-age / tau), so
    rate(now) = sum of tokens x exp(-(now - end) / tau) / tau, in tokens per second (a steady r reads about r)."""

    def __init__(self, tau: float):
        self.tau, self.x, self.t = tau, 0.0, 0.0

    def rate(self, now: float) -> float:
        return self.x * math.exp(-(now - self.t) / self.tau) / self.tau

    def add(self, end: float, tokens: float) -> None:
        self.x = self.x * math.exp(-(end - self.t) / self.tau) + tokens
        self.t = end


def ewma_rates(start: np.ndarray, duration: np.ndarray, tokens: np.ndarray, tau: float) -> np.ndarray:
    """RateMeter's rate at each step's start, the steps in order (as the simulation wrapper reads it)."""
    meter, out = RateMeter(tau), np.empty(len(start))
    for i, (s, d, p) in enumerate(zip(start.tolist(), duration.tolist(), tokens.tolist())):
        out[i] = meter.rate(s)
        if p:
            meter.add(s + d, p)
    return out


def step_kind(prefill_tokens: int, decode_seqs: int, swap_blocks: int, max_graph: int, max_mixed: int) -> str:
    """validate.step_kinds for one step."""
    if swap_blocks:
        return "swap"
    if runs_mixed_graph(prefill_tokens, decode_seqs, max_graph, max_mixed):
        return "graph mixed"
    if prefill_tokens:
        return "mixed" if decode_seqs else "prefill"
    return "graph decode" if 0 < decode_seqs <= max_graph else "eager decode"


def pooled_bins(rate: np.ndarray, values: np.ndarray, weights: np.ndarray | None = None,
                min_steps: int = MIN_STEPS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per RATE_EDGES bin: (median rate, sum(values) / sum(weights) or the median of values without weights, steps),
    a bin with fewer than min_steps pooled with the bins below it (the lowest ones with those above). Empty -> None."""
    b = np.searchsorted(RATE_EDGES, rate, side="right") - 1
    n_bins = len(RATE_EDGES) - 1
    counts = np.bincount(b, minlength=n_bins)
    if counts.sum() < min_steps:
        return None
    groups, current = [], []
    for i in range(n_bins):  # consecutive bins until min_steps, the thin top joining the last group
        current.append(i)
        if counts[current].sum() >= min_steps:
            groups.append(current)
            current = []
    if current:
        groups[-1] += current
    value = np.empty(n_bins)
    for g in groups:
        sel = np.isin(b, g)
        value[g] = (values[sel].sum() / weights[sel].sum()) if weights is not None else np.median(values[sel])
    mid = np.array([np.median(rate[b == i]) if counts[i] else np.nan for i in range(n_bins)])
    # an empty bin's typical rate: the middle of its edges (the top one: twice its lower edge)
    lo, hi = np.array(RATE_EDGES[:-1]), np.array(RATE_EDGES[1:])
    mid = np.where(np.isnan(mid), np.where(np.isinf(hi), 2 * lo, (lo + hi) / 2), mid)
    return mid, value, counts


@dataclass
class Factor:
    """A multiplier on predicted step times by step kind and recent prefill rate. tables: kind (or "*", every kind
    not named) -> (median rate, value) per RATE_EDGES bin; `smooth` reads linearly between the median rates (flat
    beyond them), else the value of the rate's bin. Kinds without a table get 1."""
    tau: float
    tables: dict
    smooth: bool

    def many(self, kinds: np.ndarray, rates: np.ndarray) -> np.ndarray:
        out = np.ones(len(rates))
        for kind in set(kinds.tolist()):
            table = self.tables.get(kind, self.tables.get("*"))
            if table is not None:
                sel = kinds == kind
                out[sel] = self._read(table, rates[sel])
        return out

    def __call__(self, kind: str, rate: float) -> float:
        table = self.tables.get(kind, self.tables.get("*"))
        return 1.0 if table is None else float(self._read(table, np.array([rate]))[0])

    def _read(self, table, rates: np.ndarray) -> np.ndarray:
        mid, value = table
        if self.smooth:
            return np.interp(rates, mid, value)
        return np.asarray(value)[np.searchsorted(RATE_EDGES, rates, side="right") - 1]

    def as_json(self) -> dict:
        return {"tau_s": self.tau, "smooth": self.smooth,
                "tables": {k: {"median_rate": np.round(m, 1).tolist(), "factor": np.round(v, 4).tolist()}
                           for k, (m, v) in self.tables.items()}}


def fit_factor(train: pd.DataFrame, family: str, smooth: bool, tau: float, share: float = 0.0,
               reference_mhz: float = 1980.0) -> Factor:
    """The factor from training steps (columns kind, rate, measured_s, predicted_s, sm_clock_mhz; rate with `tau`).
    family: clock (needs the held-out profile's share and reference), kind, prefill or single (module docstring)."""
    if family == "clock":
        t = train.dropna(subset=["sm_clock_mhz"])
        mid, clock, _ = pooled_bins(t["rate"].to_numpy(), t["sm_clock_mhz"].to_numpy())
        return Factor(tau, {"*": (mid, 1 + share * (reference_mhz / clock - 1))}, smooth)
    groups = {"kind": {k: (k,) for k in FACTOR_KINDS}, "prefill": {k: PREFILL_KINDS for k in PREFILL_KINDS},
              "single": {"*": FACTOR_KINDS}}[family]
    tables, fitted = {}, {}
    for name, kinds in groups.items():
        if kinds not in fitted:
            t = train[train["kind"].isin(kinds)]
            got = pooled_bins(t["rate"].to_numpy(), t["measured_s"].to_numpy(), t["predicted_s"].to_numpy())
            fitted[kinds] = None if got is None else (got[0], got[1] / got[1][0])  # 1 at rest
        if fitted[kinds] is not None:
            tables[name] = fitted[kinds]
    return Factor(tau, tables, smooth)


class LoadFactorCost:
    """A cost model: `base`'s step time x factor(kind, the simulated prefill rate before the step). Reads the
    simulation's clock (set .clock before running; the simulation must run step by step, fast_path=False)."""

    def __init__(self, base, factor: Factor, max_graph: int, max_mixed: int):
        self.base, self.factor, self.max_graph, self.max_mixed = base, factor, max_graph, max_mixed
        self.prices_sharing = base.prices_sharing
        self.prefill_grid = base.prefill_grid
        self.governor = None  # this bench's factor stands in for the clock (a governed base would count it twice)
        self.meter = RateMeter(factor.tau)
        self.clock = None

    def step_time(self, f) -> float:
        now = self.clock.now()
        kind = step_kind(f.num_prefill_tokens, f.num_decode_seqs, f.num_swap_out_blocks + f.num_swap_in_blocks,
                         self.max_graph, self.max_mixed)
        t = self.base.step_time(f) * self.factor(kind, self.meter.rate(now))
        if f.num_prefill_tokens:
            self.meter.add(now + t, f.num_prefill_tokens)
        return t

    def describe(self) -> dict:
        return {"kind": "load factor", "factor": self.factor.as_json(), "base": self.base.describe()}


def window_of(name: str) -> str:
    """A recording's window: its name without the round suffix (azure-code-600-660-r25w -> azure-code-600-660)."""
    return re.sub(r"-r\d+[a-z]*$", "", name)


def parse_variant(name: str) -> tuple[str, bool, float]:
    family, shape, tau = name.split("-")
    if family not in FAMILIES or shape not in SHAPES or not tau.startswith("t"):
        raise ValueError(f"variant {name!r}: expected FAMILY-SHAPE-tTAU, FAMILY in {FAMILIES}, SHAPE in {SHAPES}")
    return family, shape == "smooth", float(tau[1:])


def load(run_dir: str) -> dict | None:
    """A validated live run with clocks: its loaded run, cost model and step table; None without clocks."""
    from pagesim import validate as V
    from pagesim.cost import make_cost_model

    raw = pd.read_parquet(f"{run_dir}/steps.parquet")
    if "idle_before_s" not in raw or "sm_clock_mhz" not in raw or raw["sm_clock_mhz"].isna().all():
        return None
    vpath = f"{run_dir}/validation/validation.json"
    run = V.load_run(run_dir)
    cost = make_cost_model(json.load(open(vpath))["cost_model_path"], run["config"])
    steps = run["steps"]
    v = pd.read_parquet(f"{run_dir}/validation/validation_steps.parquet")[["step", "kind", "measured_s", "predicted_s"]]
    table = steps[["step", "time_s", "duration_s", "num_prefill_tokens"]].merge(v, on="step", how="left",
                                                                                 validate="one_to_one")
    table["sm_clock_mhz"] = raw["sm_clock_mhz"].to_numpy()
    mixed_sizes = (run["summary"].get("executor") or {}).get("mixed_graph_token_sizes") or [0]
    clock = (getattr(cost, "fit", None) or {}).get("sm_clock") or {}
    name = os.path.basename(os.path.normpath(run_dir))
    return {"name": name, "window": window_of(name), "run": run, "cost": cost, "steps": table,
            "max_graph": max(getattr(cost, "graph_batch_sizes", ()) or (run["config"].max_num_seqs,)),
            "max_mixed": max(mixed_sizes), "share": float(clock.get("sensitivity", 0.0)),
            "reference_mhz": float(clock.get("reference_mhz", 1980.0)), "rates": {}}


def rates(r: dict, tau: float) -> np.ndarray:
    if tau not in r["rates"]:
        s = r["steps"]
        r["rates"][tau] = ewma_rates(s["time_s"].to_numpy(float), s["duration_s"].to_numpy(float),
                                     s["num_prefill_tokens"].to_numpy(float), tau)
    return r["rates"][tau]


def simulate(r: dict, factor: Factor | None, seed: int | None = None) -> dict:
    """The run's free simulation, step by step, with the factor (None: plain) and, with a seed, validate's jittered
    step times (its ensemble's sigmas): its request-level figures (validate.run_metrics)."""
    from pagesim import validate as V
    from pagesim.cost.jitter import JitteredCostModel
    from pagesim.metrics import summarize_run

    cost = r["cost"]
    if seed is not None:
        cost = JitteredCostModel(cost, seed, V.ENSEMBLE_STEP_SIGMA, V.ENSEMBLE_LEVEL_SIGMA)
    if factor is not None:
        cost = LoadFactorCost(cost, factor, r["max_graph"], r["max_mixed"])
    sim = V.live_simulation(r["run"], cost, fast_path=False)
    if factor is not None:
        cost.clock = sim.clock
    result = sim.run("sim")
    return V.run_metrics(summarize_run(result), result.steps)


def live_metrics(r: dict) -> dict:
    from pagesim import validate as V

    return V.run_metrics(r["run"]["summary"]["runs"]["live"], r["run"]["steps"])


def ensemble_errors(r: dict, factor: Factor | None, n: int) -> dict:
    """The relative errors of the median of n jittered free simulations (seeds 0..n-1, as validate --ensemble)."""
    from pagesim import validate as V

    live, draws = live_metrics(r), [simulate(r, factor, seed) for seed in range(n)]
    return {k: V.rel_error(float(np.median([d[k] for d in draws])), live[k]) for k in METRICS}


def evaluate(r: dict, factor: Factor | None) -> dict:
    """Free simulation, timed lockstep and step MAPE of one run, with the factor (None: plain)."""
    from pagesim import validate as V

    run, s = r["run"], r["steps"]
    live, simulated = live_metrics(r), simulate(r, factor)
    out = {"free": {k: V.rel_error(simulated[k], live[k]) for k in METRICS}}
    worked = s["predicted_s"].notna().to_numpy()
    predicted = s["predicted_s"].to_numpy(float)
    if factor is not None:
        predicted = np.where(worked, predicted * factor.many(s["kind"].to_numpy(), rates(r, factor.tau)), predicted)
    timed = V.timed_lockstep(run, pd.DataFrame({"step": s["step"][worked], "predicted_s": predicted[worked]}))
    ape = np.abs(predicted[worked] / s["measured_s"].to_numpy(float)[worked] - 1)
    kinds = s["kind"].to_numpy()[worked]
    return {**out, "lockstep": {k: timed[k]["rel_error"] for k in METRICS},
            "step_mape": float(ape.mean()),
            "step_ape_sum_by_kind": {k: [float(ape[kinds == k].sum()), int((kinds == k).sum())]
                                     for k in sorted(set(kinds.tolist()))}}


def rounded(o, digits: int = 5):
    """A result with its floats rounded (the per-run figures, to keep the JSON small)."""
    if isinstance(o, dict):
        return {k: rounded(v, digits) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [rounded(v, digits) for v in o]
    return round(o, digits) if isinstance(o, float) and math.isfinite(o) else o


def within(errors: dict) -> dict:
    return {k: errors[k] is not None and abs(errors[k]) <= target(k) for k in METRICS}


def summarize(results: list[dict], plain: list[dict] | None = None) -> dict:
    """Over the runs: how many meet every percentile target (and makespan), per metric, median |error|, step MAPE
    by kind (pooled over the runs' steps); against `plain`, runs whose summed |percentile error| fell / rose."""
    out = {"n_runs": len(results)}
    for mode in [m for m in ("free", "ensemble", "lockstep") if m in results[0]]:
        ok = [within(x[mode]) for x in results]
        out[mode] = {
            "runs_all_percentiles": sum(all(o[k] for k in PERCENTILE_METRICS) for o in ok),
            "runs_all_percentiles_and_makespan": sum(all(o.values()) for o in ok),
            "within_by_metric": {k: sum(o[k] for o in ok) for k in METRICS},
            "within_total": sum(sum(o.values()) for o in ok),
            "median_abs_error_pct": {k: round(100 * float(np.median([abs(x[mode][k]) for x in results])), 2)
                                     for k in METRICS},
        }
        if plain is not None:
            def total(x):
                return 100 * sum(abs(x[mode][k]) for k in PERCENTILE_METRICS)
            d = np.array([total(x) - total(p) for x, p in zip(results, plain)])
            out[mode]["runs_better_by_0.5pt"] = int((d < -0.5).sum())
            out[mode]["runs_worse_by_0.5pt"] = int((d > 0.5).sum())
    sums = {}
    for x in results:
        for k, (a, n) in x["step_ape_sum_by_kind"].items():
            sums.setdefault(k, [0.0, 0])
            sums[k][0] += a
            sums[k][1] += n
    out["step_mape_pct_by_kind"] = {k: round(100 * a / n, 3) for k, (a, n) in sorted(sums.items())}
    out["step_mape_pct_mean_over_runs"] = round(100 * float(np.mean([x["step_mape"] for x in results])), 3)
    return out


def score(summary: dict) -> tuple:
    """Variants ranked on the free simulation: targets met over all runs and metrics, then runs meeting every one."""
    f = summary["free"]
    return f["within_total"], f["runs_all_percentiles_and_makespan"], -sum(f["median_abs_error_pct"].values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="results/live/*", help="glob of live run folders (default: %(default)s)")
    p.add_argument("--loo", choices=("window", "recording"), default="window",
                   help="leave out the held-out recording's whole window (default) or the recording alone")
    p.add_argument("--variants", help="comma-separated FAMILY-SHAPE-tTAU (default: every family, shape and tau)")
    p.add_argument("--max-step-mape-rise-pt", type=float, default=0.3,
                   help="a variant is eligible only if no kind's pooled step MAPE rises by more (default %(default)s)")
    p.add_argument("--ensemble", type=int, default=0,
                   help="also N jittered free simulations per run (their median, as validate --ensemble N) for plain "
                   "and every variant (default: none; name a few --variants with it)")
    p.add_argument("--out", required=True)
    p.add_argument("--force", action="store_true")
    a = p.parse_args(argv)
    check_output_file(p, a.out, a.force)
    names = (a.variants.split(",") if a.variants else
             [f"{f}-{s}-t{t:g}" for f in FAMILIES for s in SHAPES for t in TAUS])
    variants = {n: parse_variant(n) for n in names}
    runs = [r for d in sorted(glob.glob(a.runs)) if os.path.exists(f"{d}/validation/validation_steps.parquet")
            if (r := load(d)) is not None]
    print(f"{len(runs)} recordings with clocks; leave-one-{a.loo}-out", file=sys.stderr)
    if len({r["window" if a.loo == "window" else "name"] for r in runs}) < 2:
        p.error(f"{a.runs}: leave-one-{a.loo}-out needs recordings of at least two {a.loo}s with clocks")

    def training(r: dict, tau: float) -> pd.DataFrame:
        others = [o for o in runs if (o["window"] != r["window"] if a.loo == "window" else o is not r)]
        return pd.concat([o["steps"].assign(rate=rates(o, tau)).dropna(subset=["predicted_s"]) for o in others],
                         ignore_index=True)

    per_run = {r["name"]: {"window": r["window"], "plain": evaluate(r, None)} for r in runs}
    summaries = {"plain": summarize([per_run[r["name"]]["plain"] for r in runs])}
    def line(name: str, s: dict) -> str:
        f = s["free"]
        kinds = " ".join(f"{k} {v:.2f}" for k, v in s["step_mape_pct_by_kind"].items() if k in FACTOR_KINDS)
        return (f"{name:22s} free: every percentile {f['runs_all_percentiles']:2d}, and makespan "
                f"{f['runs_all_percentiles_and_makespan']:2d}, targets met {f['within_total']:3d}; lockstep targets "
                f"{s['lockstep']['within_total']:3d}; step MAPE % by kind {kinds}")

    print(line("plain", summaries["plain"]), flush=True)
    held_out = {}
    for name, (family, smooth, tau) in variants.items():
        held_out[name] = {}
        for r in runs:
            factor = fit_factor(training(r, tau), family, smooth, tau, r["share"], r["reference_mhz"])
            held_out[name][r["name"]] = factor
            per_run[r["name"]][name] = evaluate(r, factor)
        summaries[name] = summarize([per_run[r["name"]][name] for r in runs],
                                    [per_run[r["name"]]["plain"] for r in runs])
        print(line(name, summaries[name]), flush=True)
    plain_kinds = summaries["plain"]["step_mape_pct_by_kind"]
    eligible = [n for n in variants if all(summaries[n]["step_mape_pct_by_kind"][k] <= plain_kinds[k]
                                           + a.max_step_mape_rise_pt for k in plain_kinds)]
    best = max(eligible, key=lambda n: score(summaries[n]), default=None)
    print(f"best (free-simulation targets met, step MAPE by kind within {a.max_step_mape_rise_pt} pt): {best}")
    if a.ensemble:
        for name in ("plain", *variants):
            for r in runs:
                factor = None if name == "plain" else held_out[name][r["name"]]
                per_run[r["name"]][name]["ensemble"] = ensemble_errors(r, factor, a.ensemble)
            summaries[name] = summarize([per_run[r["name"]][name] for r in runs],
                                        None if name == "plain" else [per_run[r["name"]]["plain"] for r in runs])
            e = summaries[name]["ensemble"]
            print(f"{name:22s} ensemble of {a.ensemble}: every percentile {e['runs_all_percentiles']:2d}, and makespan "
                  f"{e['runs_all_percentiles_and_makespan']:2d}, targets met {e['within_total']:3d}", flush=True)
    with open(a.out, "w") as f:
        f.write(json_text({
            "loo": a.loo, "rate_edges": list(RATE_EDGES), "min_steps": MIN_STEPS,
            "targets": {k: target(k) for k in METRICS}, "runs": [r["name"] for r in runs],
            "best": best, "eligible": eligible, "summary": summaries, "per_run": rounded(per_run),
            # the factor each run was simulated with (fitted without it), for the best variant only
            "ensemble": a.ensemble,
            "best_factor_by_run": {n: f.as_json() for n, f in held_out.get(best, {}).items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
