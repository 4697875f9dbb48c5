"""Summary statistics of a trace, as `python -m pagesim trace info` prints them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pagesim.traces.schema import Trace

PERCENTILES = (50, 90, 99)


def trace_stats(trace: Trace) -> dict:
    """rows, span_s, rate (rows / span, as the Azure README defines it; None for a zero span),
    prompt_len and output_len (mean, p50, p90, p99 with linear interpolation, min, max), and
    prefix_sharing_ratio: the fraction of prompt hash blocks whose id appeared in an earlier
    request (None without prefix_hash_ids)."""
    df = trace.df
    span = float(df["arrival_time_s"].iloc[-1] - df["arrival_time_s"].iloc[0])
    return {
        "rows": len(df),
        "span_s": span,
        "rate": len(df) / span if span > 0 else None,
        "prompt_len": _lengths(df["prompt_len"]),
        "output_len": _lengths(df["output_len"]),
        "prefix_sharing_ratio": prefix_sharing_ratio(df) if "prefix_hash_ids" in df else None,
    }


def _lengths(x: pd.Series) -> dict[str, float]:
    values = x.to_numpy()
    out = {"mean": float(values.mean())}
    out.update({f"p{p}": float(v) for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES))})
    return out | {"min": int(values.min()), "max": int(values.max())}


def prefix_sharing_ratio(df: pd.DataFrame) -> float:
    """Fraction of all prompt hash blocks (in arrival order) whose id was in an earlier request's prompt."""
    blocks = df["prefix_hash_ids"].explode().dropna()
    if blocks.empty:
        return 0.0
    request = pd.Series(blocks.index.to_numpy())
    first = request.groupby(blocks.to_numpy()).transform("min")
    return float((first < request).mean())
