"""CPU co-run check: the same pure-Python loop (no shared data) in 1, 2, 4, 8, 12 and 16 processes at once.
Mean seconds per process at each count; a count whose mean stays at the 1-process figure has that many
independent cores (hyperthread siblings or a shared clock budget would slow it). Used to read the sweep
scaling figure (bench/sweep_scaling.py) on the H200 machine.

    python bench/cpu_corun.py --out bench/results/cpu-corun-h200-2026-11-30.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pagesim.outputs import check_output_file  # noqa: E402


def work(_):
    t = time.perf_counter()
    s, d = 0, {}
    for i in range(6_000_000):
        s += i * i % 7
        if i % 16 == 0:
            d[i % 5000] = s
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON result")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = ap.parse_args()
    check_output_file(ap, args.out, args.force)
    counts = [n for n in (1, 2, 4, 8, 12, 16) if n <= (os.cpu_count() or 1)]
    work(0)  # warm the clock before the 1-process figure
    mean = {}
    for n in counts:
        with mp.Pool(n) as pool:
            mean[n] = sum(pool.map(work, range(n))) / n
        print(f"{n:2} processes: {mean[n]:.3f} s each, x{mean[n] / mean[1]:.3f} of one alone", flush=True)
    Path(args.out).write_text(json.dumps({"bench": "cpu_corun", "cpu_count": os.cpu_count(),
                                          "mean_s_per_process": mean, "command": "python " + " ".join(sys.argv)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
