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


def test_a_wrapped_call_is_timed_without_the_keying():
    """The seconds a phase gets are the call's own: the keying after it (schedule's sums over the step's rows) is
    left out. A clock that ticks once a read: the call spans one tick, the keying reads the clock once more."""
    from itertools import count

    from bench.host_phases import timed_method

    ticks = count()
    clock = lambda: float(next(ticks))  # noqa: E731

    class Work:
        def run(self, x):
            return x + 1

    p = Phases()
    sched = object()

    def key_of(args, out):
        clock()  # bookkeeping that takes time
        return p.key(sched, 7)

    timed_method(p, Work, "run", "schedule", key_of, clock=clock)
    assert Work().run(1) == 2 and Work.run.__name__ == "run"
    assert p.rows[(0, 7)]["schedule"] == 1.0


def test_the_core_a_step_ran_on_is_read_from_the_threads_stat(monkeypatch, tmp_path):
    """_cpu reads the 39th field of /proc/thread-self/stat (after the command, which may hold spaces and ')');
    -1 where the file cannot be read."""
    from pathlib import Path

    import bench.host_phases as hp

    stat = tmp_path / "stat"
    fields = ["S"] + [str(i) for i in range(4, 39)] + ["11"] + ["0"] * 13  # fields 3..52; field 39 is "11"
    stat.write_text("1234 (python3 (x) y) " + " ".join(fields) + "\n")
    real = Path

    class FakePath(type(real())):
        def __new__(cls, *a):
            return real(stat) if a == ("/proc/thread-self/stat",) else real(*a)

    monkeypatch.setattr(hp, "Path", FakePath)
    assert hp._cpu() == 11
    stat.unlink()
    assert hp._cpu() == -1
