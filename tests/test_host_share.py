"""pagesim.cost.host_share: a decode step's time off the device, in a calibration and in a run, and validate's split of
a run's graph decode level into its device part and the host's (issue #13, round 48)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from pagesim.cost import fit_profile
from pagesim.cost.host_share import decode_host_shares, level_split, run_decode_split
from pagesim.validate import _host_lines, decode_host_report, step_kinds
from tests.test_cost_models import CONFIG, calibration_grid, frame, make_cost_model


def steps(**cols) -> pd.DataFrame:
    base = {"step": [0, 1, 2, 3], "num_prefill_tokens": [512, 0, 0, 0], "num_decode_seqs": [0, 4, 4, 8],
            "duration_s": [0.030, 0.010, 0.010, 0.020], "gpu_time_s": [0.029, 0.009, 0.0095, 0.019],
            "queue_host_s": [0.003, 0.0002, 0.0003, 0.0005]}
    base.update(cols)
    return pd.DataFrame(base)


def test_shares_are_the_graph_decode_steps_time_off_the_device_and_the_hosts_queueing_within_it():
    s = decode_host_shares(steps(), 256)
    # the prefill step is left out: 0.040 s of decode steps, 0.0375 of it on the device, 0.001 of that queueing
    assert s == {"steps": 3, "off_device_share": pytest.approx(0.0025 / 0.040), "queue_share": pytest.approx(0.001 / 0.040)}
    assert decode_host_shares(steps().drop(columns="queue_host_s"), 256)["queue_share"] is None  # rows before round 47
    assert decode_host_shares(steps().drop(columns=["gpu_time_s", "queue_host_s"]), 256) is None  # no device times
    cpu = steps(gpu_time_s=[float("nan")] * 4, queue_host_s=[float("nan")] * 4)  # a CPU run's NaN readings
    assert decode_host_shares(cpu, 256) is None


def test_decode_steps_beyond_the_largest_graph_are_not_graph_decode_steps_on_either_side():
    # with graphs up to 4 sequences the 8-sequence step runs eagerly (pagesim.cost.graphs): a calibration's rows
    # and a run's steps (validate's kind 'graph decode') count the same steps
    s = decode_host_shares(steps(), 4)
    assert s == {"steps": 2, "off_device_share": pytest.approx(0.0015 / 0.020), "queue_share": pytest.approx(0.0005 / 0.020)}
    kinds = step_kinds(steps(num_swap_out_blocks=[0] * 4, num_swap_in_blocks=[0] * 4), 4)
    assert list(kinds) == ["prefill", "graph decode", "graph decode", "eager decode"]
    assert decode_host_shares(steps(num_decode_seqs=[0, 8, 8, 8]), 4) is None  # no graph decode step


def test_the_level_is_its_device_part_times_its_host_part():
    s = level_split(10.2, 10.0, 0.03, 0.02)  # the run's device seconds: 10.2 x 0.97
    assert s["level"] == pytest.approx(1.02)
    assert s["device"] == pytest.approx(10.2 * 0.97 / (10.0 * 0.98)) and s["host"] == pytest.approx(0.98 / 0.97)
    assert s["device"] * s["host"] == pytest.approx(s["level"])
    assert "device" not in level_split(10.2, 10.0, 0.03, None)  # no calibration share: the level alone


def test_a_runs_split_takes_its_graph_decode_steps_and_their_device_times():
    table = pd.DataFrame({"step": [0, 1, 2, 3], "kind": ["graph mixed", "graph decode", "graph decode", "graph decode"],
                          "num_prefill_tokens": [512, 0, 0, 0], "num_decode_seqs": [0, 4, 4, 8],
                          "measured_s": [0.030, 0.010, 0.010, 0.020], "predicted_s": [0.031, 0.0098, 0.0099, 0.021]})
    run = steps().iloc[::-1]  # merged by step, not by position
    calibration = {"steps": 100, "off_device_share": 0.05, "queue_share": 0.02}
    s = run_decode_split(table, run, calibration)
    assert s["steps"] == 3 and s["level"] == pytest.approx(0.040 / 0.0407)
    assert s["run_off_device_share"] == pytest.approx(0.0025 / 0.040) and s["run_queue_share"] == pytest.approx(0.001 / 0.040)
    assert s["device"] * s["host"] == pytest.approx(s["level"])
    assert s["calibration_off_device_share"] == 0.05 and s["calibration_queue_share"] == 0.02
    # both sides recorded the queueing: a host share is the time off the device and the device's wait for the host
    assert s["queueing_counted"] and s["run_host_share"] == pytest.approx(0.0035 / 0.040)
    assert s["calibration_host_share"] == pytest.approx(0.07)
    assert s["device"] == pytest.approx((0.0375 - 0.001) / (0.0407 * 0.93))
    older = run_decode_split(table, run, {"steps": 100, "off_device_share": 0.05, "queue_share": None})
    assert not older["queueing_counted"] and older["run_host_share"] == pytest.approx(0.0025 / 0.040)
    assert older["calibration_host_share"] == 0.05 and older["device"] * older["host"] == pytest.approx(older["level"])
    assert run_decode_split(table, run.drop(columns=["gpu_time_s", "queue_host_s"]), calibration) is None


def test_a_fit_records_its_calibrations_shares_when_its_rows_have_device_times():
    roofline = make_cost_model("roofline", CONFIG)
    rows = frame(calibration_grid(), roofline.step_time)
    plain, report = fit_profile(rows, "llama-3-8b", "h200")
    assert "decode_host" not in plain.fit and "decode_host" not in report  # rows without device times
    timed = rows.assign(gpu_time_s=rows["duration_s"] * 0.97, queue_host_s=rows["duration_s"] * 0.01)
    fitted, report = fit_profile(timed, "llama-3-8b", "h200")
    assert fitted.fit["decode_host"] == report["decode_host"] == decode_host_shares(timed, fitted.graph_batch_sizes[-1])
    assert fitted.fit["decode_host"]["off_device_share"] == pytest.approx(0.03)


def test_validate_takes_the_calibrations_shares_from_the_fit_else_from_the_rows_beside_the_profile(tmp_path):
    table = pd.DataFrame({"step": [1, 2], "kind": ["graph decode"] * 2, "num_prefill_tokens": [0, 0],
                          "num_decode_seqs": [4, 4], "measured_s": [0.010, 0.010], "predicted_s": [0.010, 0.010]})
    run = steps().iloc[1:3]
    recorded = {"steps": 9, "off_device_share": 0.04, "queue_share": None}
    r = decode_host_report(table, run, str(tmp_path / "p.json"), SimpleNamespace(fit={"decode_host": recorded}), 256)
    assert r["calibration_source"] == "the profile's fit" and r["calibration_off_device_share"] == 0.04
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({}))
    bare = SimpleNamespace(fit={})  # a profile fitted before round 48
    r = decode_host_report(table, run, str(profile), bare, 256)
    assert r["calibration_source"] is None and "device" not in r
    assert "unknown" in _host_lines(r)[0]
    steps().to_csv(tmp_path / "p.steps.csv.gz", index=False)  # its calibration rows beside it
    r = decode_host_report(table, run, str(profile), bare, 256)
    assert r["calibration_source"] == str(tmp_path / "p.steps.csv.gz")
    assert r["calibration_off_device_share"] == pytest.approx(0.0025 / 0.040)
    assert "device part" in _host_lines(r)[0]
    assert decode_host_report(table, run, "roofline", SimpleNamespace(), 256)["calibration_source"] is None


def test_damaged_calibration_rows_beside_the_profile_leave_the_split_without_them(tmp_path):
    table = pd.DataFrame({"step": [1], "kind": ["graph decode"], "num_prefill_tokens": [0], "num_decode_seqs": [4],
                          "measured_s": [0.010], "predicted_s": [0.010]})
    (tmp_path / "p.json").write_text("{}")
    (tmp_path / "p.steps.csv.gz").write_bytes(b"not gzip at all")
    r = decode_host_report(table, steps().iloc[1:2], str(tmp_path / "p.json"), SimpleNamespace(fit={}), 256)
    assert r["calibration_source"].startswith(f"unreadable: {tmp_path / 'p.steps.csv.gz'}") and "device" not in r
