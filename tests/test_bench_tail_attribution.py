"""bench/tail_attribution.py on a committed live run priced by a governed profile (round 38's H100 calibration):
its variants run (the step-by-step ones on the simulation's own clock and scheduler: before round 39 they were
built without a clock and failed on every profile with a power governor), its model variant is validate's free
simulation, its unbiased scale the lockstep steps' total measured / total predicted, and each variant says whether
every TTFT / TPOT / E2E percentile and the makespan are within the live-mode targets."""

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.tail_attribution import METRICS, TALLIED, attribute
from pagesim.cost import make_cost_model
from pagesim.live_targets import MAKESPAN, PERCENTILES
from pagesim.validate import default_cost_model, load_run

RUN = Path(__file__).resolve().parent.parent / "results" / "live" / "pair-conv-paged-r38h"


def test_attribution_of_a_governed_run_matches_validate_and_judges_each_variant():
    run = load_run(RUN)
    assert make_cost_model(default_cost_model(run), run["config"]).governor is not None  # what broke the executors
    rep = attribute(str(RUN))
    v = rep["variants"]
    assert {"model", "oracle", "unbiased", "kinds", "eager", "local51", "local501", "live+0.010"} <= set(v)
    committed = json.loads((RUN / "validation" / "validation.json").read_text())["request_level"]
    for k in METRICS:
        assert v["model"]["rel_error"][k] == pytest.approx(committed[k]["rel_error"], rel=1e-12, abs=1e-12), k
    steps = pd.read_parquet(RUN / "validation" / "validation_steps.parquet")
    assert v["unbiased"]["scale"] == pytest.approx(steps.measured_s.sum() / steps.predicted_s.sum(), rel=1e-12)
    assert set(TALLIED) <= set(v)
    for name, variant in v.items():
        e = variant["rel_error"]
        within = all(e[k] is not None and abs(e[k]) <= (MAKESPAN if k == "makespan_s" else PERCENTILES[k[-3:]])
                     for k in METRICS if k != "num_preemptions")
        assert variant["within_target"] == within, name
    assert not v["model"]["within_target"] and v["unbiased"]["within_target"]  # its makespan +1.2%: the level's
