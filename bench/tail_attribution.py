"""Where a live run's free-running request-level error comes from (issue 13's tails): a diagnostic, CPU only.

For each live run (results/live/RUN) the free-running simulation of `validate` is repeated with other step
times, each compared with live on validate's request metrics (TTFT / TPOT / E2E p50 p90 p99, makespan,
preemptions):

- model: the run's own profile (what `validate` reports), with where its plans first differ from live's;
- oracle: a step whose planned batch and features equal the live step at the same index lasts what the live
  step measured; from the first step that differs on, the model's prediction. If sim and live meant the same
  thing by a step, a release and a token's time, this reproduces live exactly up to that step;
- unbiased: the model times one scale, total measured / total predicted over the run's own lockstep step table.
  A diagnostic of how much of the error a uniform bias explains, NOT a calibration (it is fitted on the run
  it is then compared with);
- perturbed: the model times 1 +- 0.5% and 1 +- 1%: how far each metric moves when every step moves that little
  (a chaotic metric moves by more than the perturbation);
- noise: each step's time times a measured/predicted ratio drawn at random from the run's own steps (5 seeds):
  a model exactly as accurate per step, wrong on other steps;
- kinds / eager: the model times each step kind's own measured/predicted total (every kind / only the eager mixed
  and prefill steps): which kind's level a metric turns on (fitted on the run, like unbiased);
- live+-: live's own step times (the model times the live step's measured/predicted ratio at the same index) times
  1 +- 0.5% and 1 +- 1%: how far live itself would have moved on a GPU that much faster or slower;
- local51 / local501: the model times the mean measured/predicted ratio of the live steps within 25 / 250 steps
  of the same index: a model that knew live's local bias but not each step's jitter.

It also reports where the oracle run first leaves live (step, time, what differs) and why: `timing` when a
request is released before a different step than live released it (its arrival falls on the other side of a step
boundary: an idle live engine releases an arrival 50-150 us late, `wake_up_lag`, the simulator at once), `semantic`
when the same requests were released and the step still differs; the same oracle with every request released when
live released it (`oracle_at_live_releases`: no boundary can flip, so any difference is semantic); and how the
profile prices its own calibration's eager mixed steps of the live ones' shapes (`calibration_eager_mixed`).

    python bench/tail_attribution.py RUN_DIR ... --out bench/results/tail-attribution-DATE.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pagesim.cost import make_cost_model  # noqa: E402
from pagesim.cost.features import StepFeatures  # noqa: E402
from pagesim.cost.jitter import ScaledCostModel as Scaled  # noqa: E402
from pagesim.metrics import summarize_run  # noqa: E402
from pagesim.outputs import check_output_file  # noqa: E402
from pagesim.live_oracle import oracle_run  # noqa: E402
from pagesim.live_targets import tolerance  # noqa: E402
from pagesim.recorder import Recorder  # noqa: E402
from pagesim.simulator import SimExecutor  # noqa: E402
from pagesim.validate import (REQUEST_METRICS, default_cost_model, live_simulation, load_run, rel_error,  # noqa: E402
                              run_metrics, step_kinds)

METRICS = [name for name, _, _ in REQUEST_METRICS] + ["makespan_s", "num_preemptions"]
PERTURBATIONS = (-0.01, -0.005, 0.005, 0.01)
NOISE_SEEDS = 5
LOCAL_HALF_WIDTHS = (25, 250)  # local-bias windows of 51 and 501 steps
TALLIED = ("model", "unbiased", "kinds", "local51", "oracle")  # the variants whose runs within target main() counts


class Noisy(Scaled):  # (pagesim.cost.jitter.ScaledCostModel: base, scale)
    """Each step's time times a measured/predicted ratio drawn at random from the run's own step table: the
    model's per-step error without its order (bias included). A few seeds give the spread of outcomes that a
    model exactly as accurate per step, but wrong on other steps, would produce."""

    def __init__(self, cost, ratios: np.ndarray, seed: int):
        super().__init__(cost, 1.0)
        self.ratios, self.rng = ratios, np.random.default_rng(seed)

    def step_time(self, f) -> float:
        return self.base.step_time(f) * self.ratios[self.rng.integers(len(self.ratios))]

    def decode_run_times(self, *args, **kw):
        times = self.base.decode_run_times(*args, **kw)
        return times * self.ratios[self.rng.integers(len(self.ratios), size=len(times))]

    def describe(self) -> dict:
        return {**self.base.describe(), "noise": "measured/predicted ratios of the run's steps"}


class LocalBias(SimExecutor):
    """The model's time times the mean measured/predicted ratio of the live steps within `half` steps of the same
    index: a cost model that knew live's bias where the run is (its drift, its batch mix) but not each step's own
    jitter. If this misses a tail the oracle reproduces, the tail turns on individual steps' times."""

    def __init__(self, cost, sim, ratios: pd.Series, half: int):
        super().__init__(cost, sim.config.block_size, sim.clock, sim.scheduler)
        self.local = ratios.sort_index().rolling(2 * half + 1, center=True, min_periods=1).mean()
        self.last_ratio = float(self.local.iloc[-1])

    def execute(self, plan) -> float:
        return super().execute(plan) * float(self.local.get(plan.step_id, self.last_ratio))


class LiveScaled(SimExecutor):
    """Live's own step times, all scaled by one factor: the model's time times the live step's measured/predicted
    ratio at the same index, times `scale`. While the run follows live this is live's duration times `scale`; where it
    departs, each step keeps the residual of the live step at its index. So it shows how far live itself would have
    moved had its GPU been uniformly `scale` times as fast, with the same per-step jitter: the floor any cost model
    meets on that metric."""

    def __init__(self, cost, sim, ratios: pd.Series, scale: float):
        super().__init__(cost, sim.config.block_size, sim.clock, sim.scheduler)
        self.ratios, self.scale = ratios, scale

    def execute(self, plan) -> float:
        return super().execute(plan) * float(self.ratios.get(plan.step_id, 1.0)) * self.scale


class KindScaled(SimExecutor):
    """The model's time times its step kind's total measured / total predicted over the run's own steps (validate's
    kinds), for the kinds in `kinds` (all by default): which kind's level a metric turns on. A diagnostic fitted on
    the run it is compared with, like `unbiased`."""

    def __init__(self, cost, sim, scales: dict, max_graph: int, max_mixed: int, kinds=None):
        super().__init__(cost, sim.config.block_size, sim.clock, sim.scheduler)
        self.scales = {k: v for k, v in scales.items() if kinds is None or k in kinds}
        self.max_graph, self.max_mixed = max_graph, max_mixed

    def execute(self, plan) -> float:
        predicted = super().execute(plan)
        f = self.last[1]
        cols = {c: np.array([getattr(f, c)]) for c in ("num_prefill_tokens", "num_decode_seqs", "num_swap_out_blocks",
                                                       "num_swap_in_blocks")}
        return predicted * self.scales.get(str(step_kinds(cols, self.max_graph, self.max_mixed)[0]), 1.0)


def _metrics(summary: dict, steps: pd.DataFrame) -> dict:
    """validate's request-level figures of a run (its summary and step table), the METRICS among them."""
    figures = run_metrics(summary, steps)
    return {k: figures[k] for k in METRICS}


def within_target(errors: dict) -> bool:
    """Every TTFT / TPOT / E2E percentile and the makespan within the live-mode targets (pagesim.live_targets)."""
    return all(errors[k] is not None and abs(errors[k]) <= tolerance(k) for k in METRICS if tolerance(k) is not None)


def _errors(sim: dict, live: dict) -> dict:
    return {k: rel_error(sim[k], live[k]) for k in METRICS}


def divergence(run: dict, result, diverged: dict, released: dict) -> dict:
    """Where the oracle run first differs from live and whether a release moved across a step boundary."""
    if not diverged:
        return {"step": None}
    step = diverged["step"]
    live_steps = run["steps"].set_index("step")
    sim_steps = result.steps.set_index("step")
    rel = run["releases"].set_index("request_id")
    live_rel = rel["release_step"].astype(int)
    moved = []
    for rid, live_step in live_rel.items():
        sim_step = released.get(rid)
        if (live_step <= step) != (sim_step is not None and sim_step <= step) or (
                live_step <= step and sim_step != live_step):
            moved.append({"request_id": rid, "arrival_s": float(rel.at[rid, "arrival_time_s"]),
                          "live_release_step": int(live_step), "sim_release_step": sim_step,
                          "live_released_s": float(rel.at[rid, "released_s"])})
    t_live = float(live_steps.at[step, "time_s"]) if step in live_steps.index else None
    t_sim = float(sim_steps.at[step, "time_s"]) if step in sim_steps.index else None
    out = {**diverged, "live_time_s": t_live, "sim_time_s": t_sim,
           "clock_offset_s": (t_sim - t_live) if t_live is not None and t_sim is not None else None,
           "releases_moved": moved[:10], "n_releases_moved": len(moved),
           "cause": "timing" if moved else "semantic"}
    # the clock offset just before, over the steps that took live's durations: zero when the semantics agree
    before = sim_steps.index[sim_steps.index < step]
    if len(before):
        common = before.intersection(live_steps.index)
        d = sim_steps.loc[common, "time_s"] - live_steps.loc[common, "time_s"]
        out["max_abs_clock_offset_before_s"] = float(d.abs().max())
    return out


def wake_up_lag(run: dict) -> dict:
    """How long after its arrival a request reached an idle live engine's scheduler (sleep overshoot and the
    loop's turn): released_s - arrival_time_s of the releases before a step that followed an idle gap (or the
    first step). The simulator releases such a request at its arrival exactly."""
    steps = run["steps"]
    gap = steps["time_s"] - (steps["time_s"] + steps["duration_s"]).shift(1, fill_value=0.0)  # idle before each step
    after_idle = set(steps["step"][gap > 0])  # the first step too: live's clock starts before its first turn
    rel = run["releases"]
    lag = (rel["released_s"] - rel["arrival_time_s"])[rel["release_step"].isin(after_idle)].to_numpy(dtype=float)
    return {"n_releases": int(len(lag)), "mean_s": float(lag.mean()) if len(lag) else None,
            "p50_s": float(np.median(lag)) if len(lag) else None, "max_s": float(lag.max()) if len(lag) else None}


def requests_before(run: dict, result, t_live: float | None) -> dict:
    """Live vs oracle-sim request times for the requests that finished in live before the divergence."""
    live = run["requests"].set_index("request_id")
    sim = result.requests.set_index("request_id")
    done = live[(live["state"] == "finished") & (live["finish_s"] < (t_live if t_live is not None else np.inf))]
    common = done.index.intersection(sim.index)
    out = {"n_requests": int(len(common))}
    for col in ("first_token_s", "finish_s"):
        d = (sim.loc[common, col] - done.loc[common, col]).to_numpy(dtype=float)
        out[f"max_abs_{col}_diff_s"] = float(np.abs(d).max()) if len(d) else None
        out[f"mean_{col}_diff_s"] = float(d.mean()) if len(d) else None
    return out


def _step_table(run: dict) -> pd.DataFrame:
    """The validation's step table (measured and predicted per live step; `validate` writes it)."""
    return pd.read_parquet(run["dir"] / "validation" / "validation_steps.parquet",
                           columns=["step", "kind", "measured_s", "predicted_s"])


def lockstep_scale(run: dict) -> float:
    """Total measured / total predicted over the run's steps."""
    steps = _step_table(run)
    return float(steps["measured_s"].sum() / steps["predicted_s"].sum())


def step_ratios(run: dict) -> pd.Series:
    """measured / predicted per live step, by step index."""
    steps = _step_table(run)
    return pd.Series((steps["measured_s"] / steps["predicted_s"]).to_numpy(dtype=float), index=steps["step"])


def calibration_steps(run: dict) -> Path | None:
    """The calibration rows the run's profile was fitted to: DIR/profile.steps.csv.gz (live --calibrate) or the
    committed results/profiles/NAME.steps.csv.gz of the profile it named (a -host-tier copy shares its rows)."""
    own = run["dir"] / "profile.steps.csv.gz"
    if own.exists():
        return own
    source = Path((run["summary"].get("profile") or {}).get("source", "")).name.removesuffix(".json")
    rows = ROOT / "results" / "profiles" / f"{source.removesuffix('-host-tier')}.steps.csv.gz"
    return rows if source and rows.exists() else None


def calibration_eager(run: dict, cost) -> dict | None:
    """How the run's profile prices its own calibration's eager mixed steps of under 3,000 tokens with decode rows
    (the shapes of the live runs' eager mixed steps): measured / predicted in sum, and the median by workload family
    (none in calibrations since the mixed steps were graphed: n_rows 0, the sum None)."""
    path = calibration_steps(run)
    if path is None:
        return None
    rows = pd.read_csv(path)
    rows = rows[(rows["num_prefill_tokens"] > 0) & (rows["num_decode_seqs"] > 0) & (rows["num_prefill_tokens"] < 3000)]
    max_graph = max(getattr(cost, "graph_batch_sizes", ()) or (run["config"].max_num_seqs,))
    max_mixed = max(getattr(cost, "mixed_graph_token_sizes", ()) or (0,))
    rows = rows[step_kinds(rows, max_graph, max_mixed) == "mixed"]
    fields = list(StepFeatures.__dataclass_fields__)
    predicted = np.array([cost.step_time(StepFeatures(**{c: int(getattr(r, c)) for c in fields if hasattr(r, c)}))
                          for r in rows.itertuples()])
    ratio = rows["duration_s"].to_numpy() / predicted
    family = rows["workload"].str.split("-").str[0].to_numpy()
    return {"rows": str(path.resolve().relative_to(ROOT)), "n_rows": int(len(rows)),
            "measured_over_predicted_sum": float(rows["duration_s"].sum() / predicted.sum()) if len(rows) else None,
            "median_by_family": {f: {"n": int((family == f).sum()), "median": float(np.median(ratio[family == f]))}
                                 for f in sorted(set(family))}}


def attribute(run_dir: str, cost_spec: str | None = None) -> dict:
    run = load_run(run_dir)
    spec = cost_spec or default_cost_model(run)
    cost = make_cost_model(spec, run["config"])
    live = _metrics(run["summary"]["runs"]["live"], run["steps"])
    report = {"run": run_dir, "cost_model_path": spec, "live": live, "variants": {}}

    def variant(name: str, result, **extra) -> None:
        m = _metrics(summarize_run(result), result.steps)
        errors = _errors(m, live)
        report["variants"][name] = {"sim": m, "rel_error": errors, "within_target": within_target(errors), **extra}

    # the model's own run step by step (the fast path's equal), watched for the first plan that differs from live's
    result, diverged, released = oracle_run(run, cost, take_live=False)
    variant("model", live_simulation(run, cost).run("sim"), divergence=divergence(run, result, diverged, released))
    result, diverged, released = oracle_run(run, cost)
    div = divergence(run, result, diverged, released)
    variant("oracle", result, divergence=div,
            requests_before_divergence=requests_before(run, result, div.get("live_time_s")))
    # the same with each request released when live released it (its arrival_time moved to released_s, so only
    # the absolute times are compared, not TTFT): no boundary can flip, so this checks the whole run's semantics
    result, diverged, released = oracle_run(run, cost, released_times=True)
    div = divergence(run, result, diverged, released)
    report["oracle_at_live_releases"] = {"divergence": div,
                                         "requests": requests_before(run, result, div.get("live_time_s"))}
    report["wake_up_lag"] = wake_up_lag(run)
    ratios = step_ratios(run)
    for seed in range(NOISE_SEEDS):
        variant(f"noise{seed}", live_simulation(run, Noisy(cost, ratios.to_numpy(), seed)).run("sim"))
    def with_executor(make):
        """The free simulation step by step with the executor `make(simulation)` builds (on its clock and scheduler:
        a governed profile prices a step by the clock, shared reads come from the scheduler's KV-cache manager)."""
        sim = live_simulation(run, cost, fast_path=False)
        sim.executor = executor = make(sim)
        sim.recorder = Recorder(sim.scheduler, executor.features_of)
        return sim.run("sim")

    for half in LOCAL_HALF_WIDTHS:
        variant(f"local{2 * half + 1}", with_executor(lambda sim: LocalBias(cost, sim, ratios, half)),
                window_steps=2 * half + 1)
    for eps in PERTURBATIONS:
        variant(f"live{eps:+.3f}", with_executor(lambda sim: LiveScaled(cost, sim, ratios, 1 + eps)), scale=1 + eps)
    sums = _step_table(run).groupby("kind")[["measured_s", "predicted_s"]].sum()
    kind_scales = (sums["measured_s"] / sums["predicted_s"]).to_dict()
    max_graph = max(getattr(cost, "graph_batch_sizes", ()) or (run["config"].max_num_seqs,))
    max_mixed = max((run["summary"].get("executor") or {}).get("mixed_graph_token_sizes") or [0])
    for name, kinds in (("kinds", None), ("eager", ("mixed", "prefill"))):
        variant(name, with_executor(lambda sim: KindScaled(cost, sim, kind_scales, max_graph, max_mixed, kinds)),
                kind_scales={k: v for k, v in kind_scales.items() if kinds is None or k in kinds})
    scale = lockstep_scale(run)
    variant("unbiased", live_simulation(run, Scaled(cost, scale)).run("sim"), scale=scale)
    for eps in PERTURBATIONS:
        variant(f"scale{eps:+.3f}", live_simulation(run, Scaled(cost, 1 + eps)).run("sim"), scale=1 + eps)
    report["sensitivity"] = sensitivity(report["variants"], live)
    report["calibration_eager_mixed"] = calibration_eager(run, cost)
    return report


def sensitivity(variants: dict, live: dict) -> dict:
    """Per metric: the largest relative move of the model's figure, and of live's own (LiveScaled), under +-0.5% and
    under +-1% of every step time, and the range of the noise ensemble's errors against live."""
    base = variants["model"]["sim"]
    out = {}
    for k in METRICS:
        if not base[k]:
            continue

        def move(prefix, eps, ref):
            return abs(variants[f"{prefix}{eps:+.3f}"]["sim"][k] - ref) / ref

        noise = [variants[f"noise{s}"]["rel_error"][k] for s in range(NOISE_SEEDS)]
        out[k] = {"model_max_abs_move_0.5pct": max(move("scale", -0.005, base[k]), move("scale", 0.005, base[k])),
                  "model_max_abs_move_1pct": max(move("scale", -0.01, base[k]), move("scale", 0.01, base[k])),
                  "live_max_abs_move_0.5pct": max(move("live", -0.005, live[k]), move("live", 0.005, live[k])),
                  "live_max_abs_move_1pct": max(move("live", -0.01, live[k]), move("live", 0.01, live[k])),
                  "noise_rel_error_range": [min(noise), max(noise)],
                  "live_inside_noise_range": min(noise) <= 0 <= max(noise)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="live run directories (results/live/RUN)")
    p.add_argument("--cost-model", default=None, help="a profile JSON (default: each run's own profile.json)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = p.parse_args(argv)
    check_output_file(p, args.out, args.force)
    reports = []
    for r in args.runs:
        rep = attribute(r, args.cost_model)
        reports.append(rep)
        print(summary_line(rep), flush=True)
    tally = {name: sum(rep["variants"][name]["within_target"] for rep in reports) for name in TALLIED}
    print(f"runs with every TTFT / TPOT / E2E percentile and the makespan within target, of {len(reports)}: "
          + ", ".join(f"{name} {n}" for name, n in tally.items()))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(reports, indent=2, default=float))
    print(f"wrote {out}")
    return 0


def summary_line(rep: dict) -> str:
    v = rep["variants"]
    keys = ["ttft_s_p50", "tpot_s_p90", "tpot_s_p99", "e2e_s_p90", "makespan_s", "num_preemptions"]

    def fmt(name):
        e = v[name]["rel_error"]
        return " ".join(f"{k.replace('_s_', ' ')}=" + ("-" if e[k] is None else f"{100 * e[k]:+.1f}") for k in keys)

    div = v["oracle"]["divergence"]
    lines = [f"{rep['run']}"] + [f"  {name:14s} {fmt(name)}" for name in v]
    m = v["model"]["divergence"]
    lines.append(f"  model diverges at step {m.get('step')} ({m.get('cause')}; fields {m.get('fields')}; "
                 f"at live {m.get('live_time_s')} s, clock offset {m.get('clock_offset_s')}, "
                 f"{m.get('n_releases_moved')} releases moved)")
    lines.append(f"  oracle diverges at step {div.get('step')} ({div.get('cause')}; fields {div.get('fields')}; "
                 f"clock offset {div.get('clock_offset_s')}, {div.get('n_releases_moved')} releases moved); "
                 f"before: {v['oracle']['requests_before_divergence']}")
    at = rep["oracle_at_live_releases"]
    lines.append(f"  oracle at live's releases: diverges at {at['divergence'].get('step')}; {at['requests']}")
    lines.append(f"  wake-up lag: {rep['wake_up_lag']}")
    lines.append(f"  calibration's eager mixed rows: {rep['calibration_eager_mixed']}")
    s = rep["sensitivity"]
    lines.append("  moves of model / live under 0.5%, noise range: " + "; ".join(
        f"{k} {100 * s[k]['model_max_abs_move_0.5pct']:.1f}/{100 * s[k]['live_max_abs_move_0.5pct']:.1f} "
        f"[{100 * s[k]['noise_rel_error_range'][0]:+.1f},{100 * s[k]['noise_rel_error_range'][1]:+.1f}]"
        for k in keys if k in s))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
