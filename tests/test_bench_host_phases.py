"""bench/host_phases.py: a step's host-side phases, by setting and decode batch size."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.host_phases import Phases, summary


def test_summary_takes_decode_only_steps_of_each_setting_and_leaves_the_warm_up_out():
    frame = pd.DataFrame({
        "setting": ["warm-up", "calibration", "calibration", "live", "live", "live"],
        "batch": [4, 4, 4, 4, 4, 8],
        "prefill_tokens": [0, 0, 0, 0, 512, 0],
        "decode_tokens": [4, 4, 4, 4, 4, 8],
        "context": [100, 1000, 3000, 2000, 2000, 9000],
        "waiting": [0, 0, 0, 5, 5, 7],
        "schedule": [1.0, 10e-6, 30e-6, 50e-6, 1.0, 60e-6],
        "execute": [1.0, 7.1e-3, 7.3e-3, 7.2e-3, 1.0, 7.5e-3],
        "gpu_time": [1.0, 7.0e-3, 7.2e-3, 7.1e-3, 1.0, 7.4e-3],
    })
    out = summary(frame)
    assert set(out) == {"calibration", "live"}
    cal, live = out["calibration"][4], out["live"]
    assert cal["steps"] == 2 and cal["schedule"] == pytest.approx(0.02) and cal["host"] == pytest.approx(0.1)
    assert cal["context_median"] == 2000
    assert live[4]["steps"] == 1 and live[4]["schedule"] == pytest.approx(0.05)  # the mixed step is not a decode step
    assert live[8]["waiting_median"] == 7


def test_phases_are_kept_per_scheduler_and_step():
    p = Phases()
    a, b = object(), object()
    p.setting = "live"
    k = p.key(a, 3)
    p.add(k, "schedule", 1e-5)
    p.add(p.key(a, 3), "schedule", 2e-5)
    p.add(p.key(b, 3), "schedule", 5e-5)
    p.add(None, "schedule", 1.0)  # outside any step: dropped
    assert p.rows[(0, 3)]["schedule"] == pytest.approx(3e-5) and p.rows[(1, 3)]["schedule"] == pytest.approx(5e-5)
    assert p.rows[(0, 3)]["setting"] == "live" and len(p.rows) == 2
