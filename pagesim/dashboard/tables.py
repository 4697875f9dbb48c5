"""Tables the pages show and offer as CSV: built from run summaries and result files, no Streamlit."""

from __future__ import annotations

import pandas as pd


def _ms(summary: dict, metric: str, p: str) -> float | None:
    v = (summary.get(metric) or {}).get(p)
    return None if v is None else v * 1e3


def prefix_cache_hit_rate(summary: dict) -> float | None:
    """The prefix-cache hit rate under whichever key the summary has (older runs: prefix_hit_rate)."""
    for key in ("prefix_cache_hit_rate", "prefix_hit_rate"):
        if summary.get(key) is not None:
            return summary[key]
    return None


def headline_table(summaries: dict[str, dict]) -> pd.DataFrame:
    """One row per run: requests finished and rejected, throughput, latency percentiles in ms, preemptions,
    memory shares, prefix-cache hit rate, running set and makespan (every figure: summary_frame).

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
            "prefix-cache hit rate": prefix_cache_hit_rate(s),
            "peak running": s.get("peak_num_running"),
            "mean running": s.get("mean_num_running"),
            "makespan (s)": s.get("makespan_s"),
        })
    return pd.DataFrame(rows).set_index("run")


def headline_format(column: str) -> str:
    """The display precision of a headline_table column (printf style, for st.column_config.NumberColumn): latencies
    to 0.1 ms, fractions and rates to 0.001, counts whole, other figures to 0.01. Display only: the CSV download
    (summary_frame) keeps every digit."""
    if column.endswith("(ms)"):
        return "%.1f"
    if "fraction" in column or "rate" in column:
        return "%.3f"
    if column in ("finished", "rejected", "preemptions", "peak running"):
        return "%d"
    return "%.2f"


REJECTION_KINDS = (  # (words in the scheduler's reason, what the banner says)
    ("max_model_len", "prompt reaches max_model_len {max_model_len:,} (no room for an output token)"),
    ("parallel samples", "more parallel samples than max_num_seqs"),
    ("KV blocks", "needs more KV blocks than the whole cache holds"),
)


def rejections(requests: pd.DataFrame, max_model_len: int) -> list[tuple[int, str]]:
    """(count, why) per kind of rejection, largest first: the scheduler's per-request reasons grouped."""
    rejected = requests[requests["state"] == "rejected"]
    if not len(rejected):
        return []
    kinds = []
    for reason in rejected["reason"].astype(str):
        kind = next((text for words, text in REJECTION_KINDS if words in reason), reason)
        kinds.append(kind.format(max_model_len=max_model_len))
    counts = pd.Series(kinds).value_counts()
    return [(int(n), why) for why, n in counts.items()]


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
    host = step.get("decode_host")
    if host:  # the graph decode level split into device and host (pagesim.cost.host_share, round 48)
        rows.append(("graph decode: measured / predicted", f"{host['level']:.3f}"))
        rows.append(("graph decode: host share, live / calibration",
                     f"{_pct(host['run_host_share'])} / {_pct(host.get('calibration_host_share')) or 'unknown'}"))
        if host.get("device") is not None:
            rows.append(("graph decode: device part x host part", f"{host['device']:.3f} x {host['host']:.3f}"))
    return pd.DataFrame(rows, columns=["figure", "value"]).astype({"value": "string"})


WORST_STEP_COLUMNS = {"step": "step", "kind": "kind", "ape": "APE", "measured_s": "measured (ms)",
                      "predicted_s": "predicted (ms)", "time_s": "time (s)"}


def worst_steps_table(validation: dict) -> pd.DataFrame:
    """validation.json's worst steps: what ranks them first (step, kind, APE as a fraction, measured and predicted in
    ms, when), then their features as validate stored them."""
    worst = pd.DataFrame(validation.get("step_level", {}).get("worst_steps", []))
    worst = worst.assign(**{c: worst[c] * 1e3 for c in ("measured_s", "predicted_s") if c in worst})
    first = [c for c in WORST_STEP_COLUMNS if c in worst]
    return worst[first + [c for c in worst if c not in first]].rename(columns=WORST_STEP_COLUMNS)


def _pct(v) -> str | None:
    return None if v is None else f"{v * 100:.1f}%"


def _same(dec: dict) -> str | None:
    n, d = dec.get("n_steps_compared"), dec.get("n_steps_differing")
    if n is None or d is None:
        return None
    return f"{n - d} of {n}" + (f" ({(n - d) / n:.1%})" if n else "")


METRIC_WORDS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL", "e2e_s": "E2E"}
OTHER_LABELS = {"makespan_s": "makespan (s)", "request_throughput": "throughput (req/s)",
                "output_token_throughput": "throughput (output tok/s)", "num_preemptions": "preemptions",
                "mean_num_running": "mean running requests", "peak_num_running": "peak running requests"}


def metric_label(key: str) -> str:
    """validation.json's request-level keys in words: ttft_s_p50 -> "TTFT p50 (ms)"."""
    for prefix, word in METRIC_WORDS.items():
        if key.startswith(prefix + "_"):
            return f"{word} {key.removeprefix(prefix + '_')} (ms)"
    return OTHER_LABELS.get(key, key.replace("_", " "))


REPLICATE_COLUMNS = ["replicate live", "live vs live", "within live spread"]


LOCKSTEP_COLUMNS = ["live decisions, predicted times", "its relative error"]


ENSEMBLE_COLUMNS = ["ensemble median", "band low", "band high", "live in band", "ensemble error"]


SENSITIVITY_COLUMN = "span within 1% of level"  # points of its own figure spanned at 0.99-1.01 of the level


def request_level_table(validation: dict) -> pd.DataFrame:
    """validation.json's request_level: one row per metric with live, simulated (in ms for latencies) and
    the relative error; with the timed lockstep replay (request_level_timed_lockstep: the live run's own decisions,
    each step at its predicted time), its figure and error; with an ensemble of jittered simulations
    (request_level_ensemble), their median, its error and band, and whether live lies in it; with a replicate
    recording (live_repeatability), also its live figure, the two recordings' relative difference and whether the
    simulation's error is within it; with the level sensitivity (request_level_sensitivity), the points of its own
    figure the free simulation spans at levels within 1% of the cost model's."""
    again = validation.get("live_repeatability", {}).get("metrics", {})
    spans = validation.get("request_level_sensitivity", {}).get("span_points", {})
    timed = validation.get("request_level_timed_lockstep", {})
    ensemble = validation.get("request_level_ensemble", {}).get("metrics", {})
    rows = []
    for name, v in validation.get("request_level", {}).items():
        scale = 1e3 if any(name.startswith(p + "_") for p in METRIC_WORDS) else 1.0
        live, sim = v.get("live"), v.get("sim")
        row = {"metric": metric_label(name), "live": None if live is None else live * scale,
               "simulated": None if sim is None else sim * scale, "relative error": v.get("rel_error")}
        if timed:
            t = timed.get(name, {})
            replay = t.get("replay")
            row.update({LOCKSTEP_COLUMNS[0]: None if replay is None else replay * scale,
                        LOCKSTEP_COLUMNS[1]: t.get("rel_error")})
        if ensemble:
            e = ensemble.get(name, {})
            scaled = {k: None if e.get(k) is None else e[k] * scale for k in ("median", "low", "high")}
            row.update({"ensemble median": scaled["median"], "ensemble error": e.get("rel_error"),
                        "band low": scaled["low"], "band high": scaled["high"], "live in band": e.get("live_in_band")})
        if again:
            r = again.get(name, {})
            other = r.get("replicate_live")
            row.update({"replicate live": None if other is None else other * scale,
                        "live vs live": r.get("live_rel_diff"), "within live spread": r.get("sim_within_live_spread")})
        if spans:
            row[SENSITIVITY_COLUMN] = spans.get(name)
        rows.append(row)
    # the ensemble's band and verdict next to the simulation's error, before the lockstep replay's columns (not a
    # target: the live run's own decisions), so a page of ordinary width shows them without scrolling
    # how far the model's level moves the free simulation's figure: beside its error and the ensemble's band
    return pd.DataFrame(rows, columns=["metric", "live", "simulated", "relative error"]
                        + (ENSEMBLE_COLUMNS if ensemble else []) + ([SENSITIVITY_COLUMN] if spans else [])
                        + (LOCKSTEP_COLUMNS if timed else []) + (REPLICATE_COLUMNS if again else []))
