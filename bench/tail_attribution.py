"""Where a live run's free-running request-level error comes from (issue 13's tails): a diagnostic, CPU only.

For each live run (results/live/RUN) the free-running simulation of `validate` is repeated under four cost
models, each compared with live on validate's request metrics (TTFT / TPOT / E2E p50 p90 p99, makespan,
preemptions):

- model: the run's own profile (what `validate` reports);
- oracle: a step whose planned batch and features equal the live step at the same index lasts what the live
  step measured; from the first step that differs on, the model's prediction. If sim and live meant the same
  thing by a step, a release and a token's time, this reproduces live exactly up to that step;
- unbiased: the model times one scale, total measured / total predicted over the run's own lockstep step table.
  A diagnostic of how much of the error a uniform bias explains, NOT a calibration (it is fitted on the run
  it is then compared with);
- perturbed: the model times 1 +- 0.5% and 1 +- 1%: how far each metric moves when every step moves that little
  (a chaotic metric moves by more than the perturbation).

It also reports where the oracle run first leaves live (step, time, what differs) and why: `timing` when a request
is released before a different step than live released it (its arrival falls on the other side of a step
boundary, the clocks having drifted apart by the steps the oracle could not take from live), `semantic` when the
same requests were released and the step still differs.

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
from pagesim.metrics import summarize_run  # noqa: E402
from pagesim.recorder import FEATURE_COLUMNS, Recorder  # noqa: E402
from pagesim.simulator import SimExecutor, Simulation  # noqa: E402
from pagesim.validate import REQUEST_METRICS, _requests, default_cost_model, load_run  # noqa: E402

METRICS = [name for name, _, _ in REQUEST_METRICS] + ["makespan_s", "num_preemptions"]
PERTURBATIONS = (-0.01, -0.005, 0.005, 0.01)


class Scaled:
    """A cost model's times multiplied by one factor (the fast path's vectorised times too)."""

    def __init__(self, cost, scale: float):
        self.cost, self.scale = cost, scale
        self.prices_sharing = cost.prices_sharing

    def step_time(self, f) -> float:
        return self.cost.step_time(f) * self.scale

    def decode_run_times(self, *args, **kw):
        return self.cost.decode_run_times(*args, **kw) * self.scale

    def describe(self) -> dict:
        return {**self.cost.describe(), "scale": self.scale}


class OracleExecutor(SimExecutor):
    """Live's measured duration for a step planned as live planned it at the same index, until the first that is not."""

    def __init__(self, cost, block_size: int, live_steps: pd.DataFrame, live_batches: pd.Series):
        super().__init__(cost, block_size)
        self.live = live_steps
        self.batches = live_batches
        self.diverged: dict | None = None
        self.starts: list[tuple[int, str]] = []  # (step, scheduled ids) of every executed step, for the report

    def execute(self, plan) -> float:
        predicted = super().execute(plan)
        scheduled = " ".join(s.request_id for s in plan.scheduled)
        if self.diverged is not None:
            return predicted
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
        return float(row["duration_s"])


def _metrics(result) -> dict:
    s = summarize_run(result)
    out = {f"{m}_{p}": s[m][p] for _, m, p in REQUEST_METRICS}
    out["makespan_s"] = s["makespan_s"]
    out["num_preemptions"] = s["num_preemptions"]
    return out


def _errors(sim: dict, live: dict) -> dict:
    return {k: (sim[k] - live[k]) / live[k] if live[k] else None for k in METRICS}


def simulate(run: dict, cost, fast_path: bool = True, released_times: bool = False):
    sim = Simulation(_requests(run, released_times), run["config"], cost, fast_path=fast_path)
    sim.release_steps = {}
    return sim


def _run_with_release_log(sim: Simulation):
    """Run, noting the step before which each request was released (Scheduler.add_request is the release)."""
    sched = sim.scheduler
    add = sched.add_request
    released = {}

    def add_request(req, *a, **kw):
        released[req.request_id] = sched.step_id
        return add(req, *a, **kw)

    sched.add_request = add_request
    result = sim.run("sim")
    return result, released


def oracle_run(run: dict, cost) -> tuple[dict, dict, pd.DataFrame]:
    live_steps = run["steps"].set_index("step")
    batches = run["batches"].set_index("step")["scheduled"]
    sim = simulate(run, cost, fast_path=False)
    ex = OracleExecutor(cost, run["config"].block_size, live_steps, batches)
    sim.executor = ex
    sim.recorder = Recorder(sim.scheduler, ex.features_of)
    result, released = _run_with_release_log(sim)
    return result, ex.diverged or {}, released


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


def lockstep_scale(run: dict, cost) -> float:
    """Total measured / total predicted over the run's steps (the validation's step table when written)."""
    table = run["dir"] / "validation" / "validation_steps.parquet"
    steps = pd.read_parquet(table, columns=["measured_s", "predicted_s"])
    return float(steps["measured_s"].sum() / steps["predicted_s"].sum())


def attribute(run_dir: str, cost_spec: str | None = None) -> dict:
    run = load_run(run_dir)
    spec = cost_spec or default_cost_model(run)
    cost = make_cost_model(spec, run["config"])
    live = {f"{m}_{p}": run["summary"]["runs"]["live"][m][p] for _, m, p in REQUEST_METRICS}
    live["makespan_s"] = run["summary"]["runs"]["live"]["makespan_s"]
    live["num_preemptions"] = run["summary"]["runs"]["live"]["num_preemptions"]
    report = {"run": run_dir, "cost_model_path": spec, "live": live, "variants": {}}

    def variant(name: str, result, **extra) -> None:
        m = _metrics(result)
        report["variants"][name] = {"sim": m, "rel_error": _errors(m, live), **extra}

    variant("model", simulate(run, cost).run("sim"))
    result, diverged, released = oracle_run(run, cost)
    div = divergence(run, result, diverged, released)
    variant("oracle", result, divergence=div, requests_before_divergence=requests_before(run, result, div.get("live_time_s")))
    scale = lockstep_scale(run, cost)
    variant("unbiased", simulate(run, Scaled(cost, scale)).run("sim"), scale=scale)
    for eps in PERTURBATIONS:
        variant(f"scale{eps:+.3f}", simulate(run, Scaled(cost, 1 + eps)).run("sim"), scale=1 + eps)
    base = report["variants"]["model"]["sim"]
    # sensitivity: the largest relative move of each metric over the perturbations, per 1% of step time
    report["sensitivity"] = {}
    for k in METRICS:
        moves = {eps: (report["variants"][f"scale{eps:+.3f}"]["sim"][k] - base[k]) / base[k] if base[k] else None
                 for eps in PERTURBATIONS}
        worst = max((abs(v) for v in moves.values() if v is not None), default=None)
        report["sensitivity"][k] = {"moves": {f"{e:+.3f}": v for e, v in moves.items()}, "max_abs_move": worst}
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="live run directories (results/live/RUN)")
    p.add_argument("--cost-model", default=None, help="a profile JSON (default: each run's own profile.json)")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    reports = []
    for r in args.runs:
        rep = attribute(r, args.cost_model)
        reports.append(rep)
        print(summary_line(rep), flush=True)
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
    lines.append(f"  oracle diverges at step {div.get('step')} ({div.get('cause')}; fields {div.get('fields')}; "
                 f"clock offset {div.get('clock_offset_s')}, {div.get('n_releases_moved')} releases moved); "
                 f"before: {v['oracle']['requests_before_divergence']}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
