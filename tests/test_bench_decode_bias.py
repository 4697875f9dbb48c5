"""bench/decode_bias.py: a window's graph decode bias against profiles, split into host and device time."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.decode_bias import main, matched_device_ratio

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "results/profiles/h200-llama-3-8b-2026-12-03-r16.json"
RUN = ROOT / "results/live/preempt-sharegpt-bursty-r16c"


def test_matched_steps_compare_device_time_of_the_same_batch_and_context():
    cal = pd.DataFrame({"num_prefill_tokens": [0, 0, 0, 512], "num_decode_seqs": [4, 4, 8, 4],
                        "decode_context_tokens": [4000, 4100, 4000, 4000], "max_decode_context": [1000, 1020, 500, 1000],
                        "gpu_time_s": [0.0050, 0.0052, 0.0090, 0.0200]})
    run = pd.DataFrame({"step": [0, 1, 2, 3, 4], "kind": ["graph mixed", "graph decode", "graph decode", "graph decode",
                                                          "graph decode"],
                        "num_decode_seqs": [4, 4, 4, 4, 2], "decode_context_tokens": [4000, 4000, 4050, 8000, 4000],
                        "max_decode_context": [1000, 1000, 1010, 2000, 2000],
                        "gpu_time_s": [0.009, 0.0049, 0.00459, 0.0060, 0.0040]})
    m = matched_device_ratio(cal, run.iloc[::-1])
    # steps 1 (after a mixed step: not steady) and 3, 4 (no calibration row near them) are not matched; step 2 is,
    # with the two decode rows of 4 within 5% (not the 8-row one, not the prefill)
    assert m["matched_steps"] == 1 and m["median_ratio"] == pytest.approx(0.00459 / 0.0051)


@pytest.mark.skipif(not RUN.is_dir(), reason="the committed round-16 window is not in this checkout")
def test_the_bias_is_the_validations_own_prediction_and_clocks_refit(tmp_path, capsys):
    out = tmp_path / "bias.json"
    assert main(["--profile", str(PROFILE), "--run", str(RUN), "--clocks",
                 str(ROOT / "bench/results/clocks-h200-2026-12-03-r16"), "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    v = pd.read_parquet(RUN / "validation/validation_steps.parquet")
    (b,) = r["bias"]
    assert b["total_ratio"] == pytest.approx(v["measured_s"].sum() / v["predicted_s"].sum(), rel=1e-9)
    assert b["decode_median"] < 0  # this window's decode steps ran under the profile's prediction
    assert [x["min_sm_mhz"] for x in r["unthrottled_refit"]] == [0, 1800, 1900, 1950]
    assert r["unthrottled_refit"][0]["rows"] > r["unthrottled_refit"][-1]["rows"]  # fewer rows at higher clocks
    assert set(r["host_ms"][RUN.name]) >= {"1", "2", "4", "8"} and 0 < r["host_ms"][RUN.name]["4"] < 1
    assert "device time run / calibration" in capsys.readouterr().out
    (ls,) = r["level_split"]  # the level is its device part and the host shares, exactly
    d = v[v["kind"] == "graph decode"]
    assert ls["steps"] == len(d) and 0 < ls["calibration_host_share"] < 0.1 and 0 < ls["run_host_share"] < 0.1
    assert ls["level"] == pytest.approx(ls["device"] * (1 - ls["calibration_host_share"]) / (1 - ls["run_host_share"]))
    assert ls["host_excess"] == pytest.approx(ls["run_host_share"] - ls["calibration_host_share"])
    assert main(["--profile", str(PROFILE), "--run", str(RUN), "--out", str(out)]) == 2  # never overwritten


def test_a_run_without_its_validation_is_named(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert main(["--profile", str(PROFILE), "--run", str(tmp_path / "run"), "--out", str(tmp_path / "x.json")]) == 2
    assert "pagesim validate" in capsys.readouterr().err
