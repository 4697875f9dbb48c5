"""Trace loading at scale: a generated N-row Azure-format CSV through `load_trace`, in a fresh process.

Target (issue #11 item 3): 5M rows load in <= 5 s and <= 3x the file's size in RAM (peak RSS of the
loading process, interpreter and imports included). Prints wall time, CPU time (user + system; on a
shared machine wall time includes waiting for a core), the machine's load average, peak RSS, and
writes a JSON result. The CSV is written to /tmp (seeded, reused when present), never committed.

    python bench/trace_load.py [--rows 5000000] [--out bench/results/trace-load.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from pagesim.outputs import check_output_file  # noqa: E402

CHILD = """
import json, os, sys, time
sys.path.insert(0, {repo!r})
from bench.process_memory import peak_rss_bytes
from pagesim.traces import load_trace
t, c = time.perf_counter(), os.times()
trace = load_trace({path!r})
wall, c2 = time.perf_counter() - t, os.times()
print(json.dumps({{"rows": len(trace.df), "wall_s": wall, "cpu_s": c2.user - c.user + c2.system - c.system,
                  "peak_rss_bytes": peak_rss_bytes()}}))
"""


def write_csv(path: Path, rows: int) -> None:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    start = pd.Timestamp("2023-11-16 18:15:46")
    stamps = (start + pd.to_timedelta(np.cumsum(rng.integers(1, 100_000_000, rows)), unit="ns")).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
    pd.DataFrame({"TIMESTAMP": stamps, "ContextTokens": rng.integers(1, 8000, rows),
                  "GeneratedTokens": rng.integers(1, 800, rows)}).to_csv(path, index=False)




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--out", default="bench/results/trace-load.json")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists (committed results are never replaced by default)")
    args = ap.parse_args()
    check_output_file(ap, args.out, args.force)  # before any work: committed results are never replaced by default
    path = Path(f"/tmp/pagesim-azure-{args.rows}.csv")
    if not path.exists():
        write_csv(path, args.rows)
    size = path.stat().st_size
    done = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), path=str(path))],
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    result.update(file=str(path), file_bytes=size, rss_over_file=result["peak_rss_bytes"] / size,
                  load_average=os.getloadavg(), cpus=os.cpu_count(), platform=platform.platform(),
                  when=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    print(f"{result['rows']:,} rows, {size / 1e6:,.0f} MB: wall {result['wall_s']:.2f} s, CPU {result['cpu_s']:.2f} s, "
          f"peak RSS {result['peak_rss_bytes'] / 1e6:,.0f} MB ({result['rss_over_file']:.2f}x the file); "
          f"load average {result['load_average'][0]:.1f} on {result['cpus']} CPUs")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
