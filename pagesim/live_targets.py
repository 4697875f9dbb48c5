"""The live-mode targets (README, Simulator accuracy) judged on one run's validation.json: met or missed. Their
thresholds' one home: the Sim vs Live page and the accuracy benches (bench/ensemble_windows.py,
bench/decode_clock_share.py) read them here.

The simulator makes live's decisions (0 differing lockstep steps); no step over 2x its prediction; step MAPE <= 3%
and each step kind's <= 5%; makespan within 1%; TTFT, TPOT and E2E p50 / p90 within 5% and p99 within 10% in the
free-running simulation: its prediction, which for a timing-sensitive percentile is the median of an ensemble of
jittered free simulations where the validation ran one (validate runs one by itself where a percentile is
timing-sensitive: request_level_prediction), else the deterministic simulation's figure. A figure the validation lacks (an older validate) is shown as not judged, never as
met.
"""

from __future__ import annotations

import pandas as pd

STEP_MAPE = 0.03
KIND_MAPE = 0.05
MAKESPAN = 0.01
PERCENTILES = {"p50": 0.05, "p90": 0.05, "p99": 0.10}
LATENCIES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
COLUMNS = ["target", "this run", "verdict"]
NOT_JUDGED = "not judged"


def _row(target: str, shown: str | None, met: bool | None) -> dict:
    return {"target": target, "this run": "–" if shown is None else shown,
            "verdict": NOT_JUDGED if met is None else ("met" if met else "missed")}


def tolerance(name: str) -> float | None:
    """The live-mode target's relative tolerance for one of validate's request-level figures: MAKESPAN for
    makespan_s, PERCENTILES' for a TTFT / TPOT / E2E percentile (ttft_s_p90: 0.05); None for a figure without a
    target (ITL, throughput, preemptions). bench/tail_attribution.py and bench/governor_eval.py judge by it."""
    if name == "makespan_s":
        return MAKESPAN
    metric, _, p = name.rpartition("_")
    return PERCENTILES.get(p) if metric in LATENCIES else None


def _within(value, limit: float, sign: bool = False) -> tuple[str | None, bool | None]:
    if value is None:
        return None, None
    return f"{value * 100:+.2f}%" if sign else f"{value * 100:.2f}%", abs(value) <= limit


def target_table(validation: dict) -> pd.DataFrame:
    """One row per target: what it asks, the run's figure and "met" / "missed" ("not judged" without the figure)."""
    step, dec = validation.get("step_level", {}), validation.get("decisions", {})
    request = validation.get("request_level", {})
    predicted = validation.get("request_level_prediction", {})
    differing = dec.get("n_steps_differing")
    rows = [_row("steps with different decisions (lockstep) = 0", None if differing is None else f"{differing:,}",
                 None if differing is None else differing == 0)]
    if "n_steps_over_2x_prediction" in step:
        over = step["n_steps_over_2x_prediction"]
        rows.append(_row("steps slower than 2x their prediction = 0", f"{over:,}", over == 0))
    rows.append(_row(f"step duration MAPE <= {STEP_MAPE:.0%}", *_within(step.get("mape"), STEP_MAPE)))
    rows += [_row(f"step MAPE, {kind} <= {KIND_MAPE:.0%}", *_within(k.get("mape"), KIND_MAPE))
             for kind, k in step.get("by_kind", {}).items()]
    makespan = (request.get("makespan_s") or {}).get("rel_error")
    rows.append(_row(f"makespan within {MAKESPAN:.0%} (free simulation)", *_within(makespan, MAKESPAN, sign=True)))
    for metric, word in LATENCIES.items():
        for p, limit in PERCENTILES.items():
            name = f"{metric}_{p}"
            error = (predicted.get(name) or request.get(name) or {}).get("rel_error")
            if error is None and name not in request:
                continue  # a validation that does not compare this percentile
            source = (predicted.get(name) or {}).get("from", "free simulation")
            rows.append(_row(f"{word} {p} within {limit:.0%} ({source})", *_within(error, limit, sign=True)))
    return pd.DataFrame(rows, columns=COLUMNS)


def verdict_line(table: pd.DataFrame) -> str:
    """"**12 of 16 targets met**; missed: step MAPE, graph mixed <= 5% (5.90%), ..." (targets not judged named apart)."""
    judged = table[table["verdict"] != NOT_JUDGED]
    missed = judged[judged["verdict"] == "missed"]
    line = f"**{len(judged) - len(missed)} of {len(judged)} targets met**"
    if len(missed):
        line += "; missed: " + ", ".join(f"{t} ({v})" for t, v in zip(missed["target"], missed["this run"]))
    unjudged = table[table["verdict"] == NOT_JUDGED]
    if len(unjudged):
        line += f"; not judged (not in validation.json): {', '.join(unjudged['target'])}"
    return line
