"""The GPU's SM clock and power in each phase of a device call (`bash bench/h200_round14.sh OUT d`): nvidia-smi's
samples (clocks.csv.gz, every 100 ms) against the phases' start and end times (phases.txt). Samples above 300 W count
as busy; for each phase: busy samples, median and 10th-percentile SM clock, median power and temperature, and the
share of busy samples with the software power cap active (clocks_event_reasons bit 0x4). Needs no GPU.

    python bench/clock_phases.py bench/results/clocks-h200-2026-12-02-r14d [--out FILE.json] [--force]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUSY_W = 300.0
SW_POWER_CAP = 0x4


def read_clocks(path: Path):
    import pandas as pd

    c = pd.read_csv(path, skipinitialspace=True)
    c.columns = ["t", "sm_mhz", "mem_mhz", "power_w", "temp_c", "reasons"]
    c["t"] = pd.to_datetime(c["t"], format="%Y/%m/%d %H:%M:%S.%f")
    for col, unit in (("sm_mhz", " MHz"), ("mem_mhz", " MHz"), ("power_w", " W")):
        c[col] = c[col].astype(str).str.replace(unit, "", regex=False).astype(float)
    c["power_capped"] = c["reasons"].map(lambda r: bool(int(str(r), 16) & SW_POWER_CAP))
    return c


def read_phases(path: Path) -> dict[str, tuple]:
    import pandas as pd

    marks: dict[str, dict[str, object]] = {}
    for line in path.read_text().splitlines():
        day, time, name, edge = line.split()
        marks.setdefault(name, {})[edge] = pd.Timestamp(f"{day.replace('/', '-')} {time}")
    return {name: (m["start"], m["end"]) for name, m in marks.items() if "start" in m and "end" in m}


def phase_table(clocks, phases) -> list[dict]:
    out = []
    for name, (start, end) in phases.items():
        busy = clocks[(clocks["t"] >= start) & (clocks["t"] <= end) & (clocks["power_w"] > BUSY_W)]
        out.append({"phase": name, "seconds": (end - start).total_seconds(), "busy_samples": int(len(busy)),
                    "sm_mhz_median": float(busy["sm_mhz"].median()), "sm_mhz_p10": float(busy["sm_mhz"].quantile(0.1)),
                    "power_w_median": float(busy["power_w"].median()), "temp_c_median": float(busy["temp_c"].median()),
                    "power_capped_share": float(busy["power_capped"].mean())})
    return out


def main(argv=None) -> int:
    from pagesim.errors import UserError
    from pagesim.outputs import prepare_output_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a folder with clocks.csv.gz and phases.txt")
    ap.add_argument("--out", help="write the table as JSON here")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = ap.parse_args(argv)
    try:
        out = prepare_output_file(args.out, args.force) if args.out else None
        d = Path(args.dir)
        for name in ("clocks.csv.gz", "phases.txt"):
            if not (d / name).is_file():
                raise UserError(f"{d / name}: no such file; expected the clocks and phases of `h200_round14.sh OUT d`")
        rows = phase_table(read_clocks(d / "clocks.csv.gz"), read_phases(d / "phases.txt"))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for r in rows:
        print(f"{r['phase']:10s} {r['seconds']:6.1f} s  busy {r['busy_samples']:4d}  SM median {r['sm_mhz_median']:6.0f} "
              f"MHz (p10 {r['sm_mhz_p10']:4.0f})  power {r['power_w_median']:5.0f} W  {r['temp_c_median']:.0f} C  "
              f"power-capped {100 * r['power_capped_share']:.0f}%")
    if out is not None:
        out.write_text(json.dumps({"dir": args.dir, "busy_above_w": BUSY_W, "phases": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
