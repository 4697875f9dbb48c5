"""bench/decode_rounds.py: a sweep's batches priced by a profile (each (context, rows) the median measured /
predicted of its far decode steps, the errors summarised), and a profile JSON put in either form."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.decode_rounds import FORMS, in_form, sweep_errors
from bench.decode_rows import far_decode_steps
from pagesim.cost.profile import ProfileCostModel

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "results" / "profiles" / "h100-llama-3-8b-2026-12-06-r41h.json"
SWEEP = REPO / "bench" / "results" / "decode-rows-h100-2026-12-06-r41hb.steps.csv.gz"


def test_a_sweeps_batches_are_the_median_ratio_of_their_far_decode_steps():
    model = ProfileCostModel.from_json(PROFILE)
    out = sweep_errors(model, ["r41hb"])
    d = far_decode_steps(pd.read_csv(SWEEP), model)
    groups = d.groupby(["context", "num_decode_seqs"])
    assert out["batches"] == groups.ngroups == len(out["measured_over_predicted"])
    for (c, n), g in groups:
        assert out["measured_over_predicted"][f"{c}x{n}"] == pytest.approx(np.median(g["duration_s"] / g["predicted_s"]))
    errors = [abs(v - 1) for v in out["measured_over_predicted"].values()]
    assert out["mean_abs_error"] == pytest.approx(np.mean(errors)) and out["max_abs_error"] == pytest.approx(max(errors))
    above = [abs(v - 1) for k, v in out["measured_over_predicted"].items() if int(k.split("x")[1]) > 64]
    assert above and out["mean_abs_error_above_64_rows"] == pytest.approx(np.mean(above))


def test_a_profile_is_put_in_either_form():
    profile = json.loads(PROFILE.read_text())
    assert "decode_programs_per_sm" not in in_form({**profile, "decode_programs_per_sm": [3, 4]}, "before")
    assert in_form(profile, "rounds")["decode_programs_per_sm"] == FORMS["rounds"] == [3, 4]
