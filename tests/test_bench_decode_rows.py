"""bench/decode_rows.py --report on round 40's H100 sweep: one entry per (context, rows) with the padded graph size,
the median step and device times of the decode steps 10 or more past their prefill and the profile's prediction for
them (its forward time at the reference clock), and their ratio; an existing --out is refused before any work."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.decode_rows import FAR, main, too_large, workloads
from pagesim.cost.profile import ProfileCostModel, calibration_steps_since_prefill

REPO = Path(__file__).resolve().parent.parent
ROWS = REPO / "bench" / "results" / "decode-rows-h100-2026-12-06-r40h.steps.csv.gz"
PROFILE = REPO / "results" / "profiles" / "h100-llama-3-8b-2026-12-06-r40h.json"


def test_workloads_are_each_batch_at_each_context():
    w = workloads([1, 2, 3], [512, 2048], 40)
    assert w == [(f"rows-b{n}-c{c}", [(n, c, 40)]) for c in (512, 2048) for n in (1, 2, 3)]


def test_workloads_that_outgrow_the_cache_are_named():
    """A workload holds rows x (context + steps) tokens at its last step: over the cache it would preempt instead of
    timing its batch, so time_rows refuses it before the model loads."""
    assert too_large([128, 256], [1536, 3072], 40, 447_312) == ["256 rows x 3112 tokens = 796,672"]
    assert too_large([128], [1536], 40, 128 * 1576) == []


@pytest.mark.parametrize("argv, message", [
    (["--rows", "96,abc"], "--rows '96,abc': expected whole numbers"),
    (["--contexts", "2k"], "--contexts '2k'"),
    (["--rows", "0,8"], "at least 1"),
    (["--steps", "5"], "--steps must be over"),
])
def test_bad_options_are_refused_before_any_work(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        main(["--out", str(tmp_path / "rows.csv.gz"), *argv])


def test_report_prices_the_far_decode_steps_of_each_batch(tmp_path):
    rows = pd.read_csv(ROWS)
    keep = rows["workload"].isin(["rows-b16-c2048", "rows-b17-c2048", "rows-b24-c2048"])
    small = tmp_path / "rows.steps.csv.gz"
    rows[keep].to_csv(small, index=False)
    out = tmp_path / "report.json"
    assert main(["--report", str(small), "--profile", str(PROFILE), "--out", str(out)]) == 0
    batches = json.loads(out.read_text())["batches"]
    sub = rows[keep].reset_index(drop=True)
    since, _ = calibration_steps_since_prefill(sub)
    far = sub[(sub["num_prefill_tokens"] == 0) & (sub["num_decode_seqs"] > 0) & (since >= FAR)]
    # a workload's sequences finish a few steps apart (prefilled in different chunks): its last steps have fewer rows
    assert [(b["context"], b["rows"]) for b in batches] == [(2048, n) for n in sorted(far["num_decode_seqs"].unique())]
    model = ProfileCostModel.from_json(PROFILE)
    by_rows = {b["rows"]: b for b in batches}
    assert [by_rows[n]["padded"] for n in (16, 17, 24)] == [16, 32, 32]
    for b in batches:
        sel = far[far["num_decode_seqs"] == b["rows"]]
        assert b["steps"] == len(sel)
        assert b["gpu_ms"] == pytest.approx(np.median(sel["gpu_time_s"]) * 1e3)
        assert b["predicted_ms"] == pytest.approx(np.median(model.forward_times(sel)) * 1e3)
        assert b["measured_over_predicted"] == pytest.approx(b["duration_ms"] / b["predicted_ms"])
    with pytest.raises(SystemExit, match="exists"):
        main(["--report", str(small), "--profile", str(PROFILE), "--out", str(out)])
