"""Tables the pages show and offer as CSV: built from run summaries and result files, no Streamlit."""

from __future__ import annotations

import pandas as pd


def _ms(summary: dict, metric: str, p: str) -> float | None:
    v = (summary.get(metric) or {}).get(p)
    return None if v is None else v * 1e3


def headline_table(summaries: dict[str, dict]) -> pd.DataFrame:
    """One row per run: throughput, latency percentiles, preemptions, token-state fraction, running set.

    summaries: run name -> pagesim.metrics.summarize(...) dict."""
    rows = []
    for run, s in summaries.items():
        rows.append({
            "run": run,
            "finished": s.get("num_finished"),
            "rejected": s.get("num_rejected"),
            "throughput (req/s)": s.get("request_throughput"),
            "throughput (output tok/s)": s.get("output_token_throughput"),
            "TTFT p50 (ms)": _ms(s, "ttft_s", "p50"),
            "TTFT p99 (ms)": _ms(s, "ttft_s", "p99"),
            "TPOT p50 (ms)": _ms(s, "tpot_s", "p50"),
            "TPOT p99 (ms)": _ms(s, "tpot_s", "p99"),
            "E2E p50 (ms)": _ms(s, "e2e_s", "p50"),
            "E2E p99 (ms)": _ms(s, "e2e_s", "p99"),
            "preemptions": s.get("num_preemptions"),
            "token-state fraction": s.get("token_state_fraction"),
            "external fragmentation": s.get("external_fragmentation_fraction"),
            "peak running": s.get("peak_num_running"),
            "mean running": s.get("mean_num_running"),
            "makespan (s)": s.get("makespan_s"),
        })
    return pd.DataFrame(rows).set_index("run")


def summary_frame(summaries: dict[str, dict]) -> pd.DataFrame:
    """Every figure of every summary, nested keys flattened (ttft_s.p50), one row per run: the CSV download."""
    return pd.json_normalize([{"run": run, **s} for run, s in summaries.items()]).set_index("run")


def step_level_table(validation: dict) -> pd.DataFrame:
    """The step-level and decision figures of a live run's validation.json, as label / value rows."""
    step, dec = validation.get("step_level", {}), validation.get("decisions", {})
    rows = [
        ("steps compared", step.get("n_steps")),
        ("step duration MAPE", _pct(step.get("mape"))),
        ("step duration p90 APE", _pct(step.get("p90_ape"))),
        ("steps with the same decisions", _same(dec)),
        ("steps with different decisions", dec.get("n_steps_differing")),
        ("preemptions (live)", dec.get("preemptions_live")),
        ("preemptions (simulated)", dec.get("preemptions_sim")),
    ]
    rows += [(f"step MAPE, {kind} ({k.get('n_steps')} steps)", _pct(k.get("mape")))
             for kind, k in step.get("by_kind", {}).items()]
    if "n_steps_over_2x_prediction" in step:
        rows.append(("steps slower than 2x their prediction", step["n_steps_over_2x_prediction"]))
    return pd.DataFrame(rows, columns=["figure", "value"]).astype({"value": "string"})


def _pct(v) -> str | None:
    return None if v is None else f"{v * 100:.1f}%"


def _same(dec: dict) -> str | None:
    n, d = dec.get("n_steps_compared"), dec.get("n_steps_differing")
    if n is None or d is None:
        return None
    return f"{n - d} of {n}" + (f" ({(n - d) / n:.1%})" if n else "")


def request_level_table(validation: dict) -> pd.DataFrame:
    """validation.json's request_level: one row per metric with live, simulated and relative error."""
    rows = [{"metric": name, "live": v.get("live"), "simulated": v.get("sim"), "relative error": v.get("rel_error")}
            for name, v in validation.get("request_level", {}).items()]
    return pd.DataFrame(rows, columns=["metric", "live", "simulated", "relative error"])
