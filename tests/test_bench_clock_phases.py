"""bench/clock_phases.py: the GPU's clock and power per phase of a device call, from nvidia-smi's samples."""

from __future__ import annotations

import gzip
import json

from bench.clock_phases import main

HEADER = ("timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, "
          "clocks_event_reasons.active\n")


def write(tmp_path, samples, phases):
    with gzip.open(tmp_path / "clocks.csv.gz", "wt") as f:
        f.write(HEADER)
        for t, sm, w, reason in samples:
            f.write(f"2026/12/02 18:05:{t:06.3f}, {sm} MHz, 3201 MHz, {w} W, 60, {reason}\n")
    (tmp_path / "phases.txt").write_text("".join(f"2026/12/02 18:05:{a:06.3f} {name} start\n"
                                                 f"2026/12/02 18:05:{b:06.3f} {name} end\n" for name, a, b in phases))


def test_each_phase_gets_its_busy_samples_clock_power_and_capped_share(tmp_path, capsys):
    samples = [(0.0, 345, 80.0, "0x0000000000000001")]  # idle: not counted
    samples += [(1 + 0.1 * i, 1600 + 10 * i, 650.0, "0x0000000000000004") for i in range(10)]  # capped
    samples += [(3 + 0.1 * i, 1980, 540.0, "0x0000000000000004" if i < 3 else "0x0000000000000000") for i in range(10)]
    write(tmp_path, samples, [("calibrate", 0.5, 2.5), ("kshot", 2.9, 4.5)])
    out = tmp_path / "phases.json"
    assert main([str(tmp_path), "--out", str(out)]) == 0
    rows = {r["phase"]: r for r in json.loads(out.read_text())["phases"]}
    assert rows["calibrate"]["busy_samples"] == 10 and rows["calibrate"]["power_capped_share"] == 1.0
    assert rows["calibrate"]["sm_mhz_median"] == 1645.0 and rows["calibrate"]["power_w_median"] == 650.0
    assert rows["kshot"]["sm_mhz_median"] == 1980.0 and rows["kshot"]["power_capped_share"] == 0.3
    assert "power-capped 100%" in capsys.readouterr().out
    assert main([str(tmp_path), "--out", str(out)]) == 2  # never overwritten without --force


def test_a_missing_file_is_named(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "clocks.csv.gz: no such file" in capsys.readouterr().err
