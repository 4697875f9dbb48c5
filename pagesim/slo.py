"""Latency SLOs, SLO attainment and goodput.

An SLO is `METRIC_PCT=SECONDS`, e.g. `ttft_p99=1` or `tpot_p99=0.05`: the
PCT-th percentile of METRIC (ttft, tpot or e2e) over the run's requests must be
at most SECONDS.

- A request *meets the SLOs* when it finished and each of its latencies is
  within every threshold (a request with one output token has no TPOT, which
  then cannot fail).
- `slo_attainment` = requests that met the SLOs / requests; `goodput` =
  requests that met the SLOs per second of makespan (DistServe's definition).
- `slo_met`: every percentile is within its threshold. Rejected and unfinished
  requests count as infinitely slow in the percentiles, so a run cannot meet a
  p99 SLO by rejecting 2% of its requests; a finished request without a value
  (TPOT of one output token) is left out of that metric's percentile, as in
  `summary.json`'s percentiles.

Only a trace's own requests count; samples forked for n > 1 ride with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pagesim.errors import UserError
from pagesim.metrics import own_requests

METRICS = ("ttft", "tpot", "e2e")
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
_PATTERN = re.compile(r"^(ttft|tpot|e2e)_(p50|p90|p99)=([0-9.eE+-]+)$")


@dataclass(frozen=True, slots=True)
class SLO:
    metric: str  # ttft | tpot | e2e
    percentile: str  # p50 | p90 | p99
    threshold_s: float

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.percentile}"

    def __str__(self) -> str:
        return f"{self.name}={self.threshold_s:g}"


def parse_slo(text: str, where: str = "--slo") -> SLO:
    """'ttft_p99=1' -> SLO('ttft', 'p99', 1.0); a UserError naming `where` it was given (the flag, or plan.json's
    slos) and the text as given otherwise."""
    m = _PATTERN.match(text.strip().lower()) if isinstance(text, str) else None
    threshold = None
    if m:
        try:
            threshold = float(m.group(3))
        except ValueError:
            pass
    if threshold is None or not threshold > 0 or threshold == float("inf"):
        raise UserError(f"{where} {text!r}: expected METRIC_PCT=SECONDS with METRIC one of {', '.join(METRICS)}, "
                        f"PCT one of {', '.join(PERCENTILES)} and SECONDS > 0, e.g. ttft_p99=1{_hint(text, where)}")
    return SLO(m.group(1), m.group(2), threshold)


def _hint(text, where: str) -> str:
    """What a refused SLO text most likely meant: several SLOs in one flag, or a threshold with a unit."""
    if not isinstance(text, str):
        return ""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if len(parts) > 1 and where.startswith("--"):
        return f"; one SLO per {where}: repeat the flag, {' '.join(f'{where} {t}' for t in parts)}"
    if re.search(r"[0-9.]\s*(ms|s|sec|seconds)$", text.strip().lower()):
        return " (a number of seconds, without a unit: 500ms is 0.5)"
    return ""


def parse_slos(texts, where: str = "--slo") -> list[SLO]:
    slos = [parse_slo(t, where) for t in texts or ()]
    names = [s.name for s in slos]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UserError(f"{where} {sorted(dup)[0]} given twice")
    return slos


def evaluate(requests: pd.DataFrame, slos: list[SLO], makespan_s: float | None) -> dict:
    """Goodput, attainment and each SLO's percentile for one run's requests frame (Recorder.requests_frame)."""
    own = own_requests(requests)
    finished = (own["state"] == "finished").to_numpy()
    met = finished.copy()
    out: dict = {}
    for slo in slos:
        raw = own[f"{slo.metric}_s"].to_numpy(dtype="float64")
        valued = ~np.isnan(raw)
        # A finished request without a value (the TPOT of one output token) cannot fail, and has no value to
        # count in the percentile (as summary.json's percentiles and vLLM's benchmark leave it out); rejected and
        # unfinished requests count as infinitely slow.
        with np.errstate(invalid="ignore"):
            met &= ~valued | (raw <= slo.threshold_s)
        values = np.where(finished, raw, np.inf)[valued | ~finished]
        value, within = None, bool(len(own))  # no values: every request finished without one, so none can fail
        if len(values):  # linear interpolation next to an infinite value gives inf (two infinite: nan -> inf)
            with np.errstate(invalid="ignore"):
                value = float(np.nan_to_num(np.percentile(values, PERCENTILES[slo.percentile]), nan=np.inf))
            within = value <= slo.threshold_s
        out[f"slo_{slo.name}_s"] = value
        out[f"slo_{slo.name}_met"] = within
    n_met = int(met.sum())
    out["slo_met"] = all(out[f"slo_{s.name}_met"] for s in slos)
    out["slo_num_met"] = n_met
    out["slo_attainment"] = n_met / len(own) if len(own) else None
    out["goodput"] = n_met / makespan_s if makespan_s else None
    return out


def missed(summary: dict, slos: list[SLO]) -> list[str]:
    """The SLOs a summary (with `evaluate`'s keys) misses, as 'ttft_p99 1.8 s > 1 s'."""
    def shown(v):
        return f"{v:.3g}" if v is not None and np.isfinite(v) else "inf"

    return [f"{s.name} {shown(summary[f'slo_{s.name}_s'])} s > {s.threshold_s:g} s"
            for s in slos if not summary[f"slo_{s.name}_met"]]
