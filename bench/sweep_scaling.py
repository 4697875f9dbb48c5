"""Sweep scaling on Ray: the same sweep with 1, 2, ... workers (a local Ray instance bounded to N CPUs).

The sweep is the issue's: a 2,000-request trace (traces/azure-conv-like-2k.jsonl) over a grid of block size,
max_num_seqs, max_num_batched_tokens, KV memory and preemption mode; --configs N takes the first N points of
that 1,000-point grid (all of them by default). Each worker count runs in a fresh Ray instance and a fresh output
directory; `wall_s` is the sweep alone, `ray_start_s` Ray's start-up before it. Writes a JSON result with the time and speed-up per worker count.
The target (issue 15): >= 12x faster with 16 workers than with 1 on the H200 machine's 16 cores.

    python bench/sweep_scaling.py --workers 1,2 [--configs 40] [--out bench/results/sweep-scaling-cpu2.json]
    python bench/sweep_scaling.py --workers 1,16 --out bench/results/sweep-scaling-h200.json     # 16 cores
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pagesim.outputs import check_output_file  # noqa: E402
from pagesim.cli import build_parser  # noqa: E402
from pagesim.sweep import NOT_SWEPT, parse_grid, run_sweep, start_ray  # noqa: E402
from pagesim.traces import load_trace  # noqa: E402

TRACE = ROOT / "traces" / "azure-conv-like-2k.jsonl"
GRID = ["block_size=8,16,32,64,128", "max_num_seqs=32,64,128,256,512",
        "max_num_batched_tokens=1024,2048,4096,8192,16384", "kv_cache_gib=2,4,8,16", "preemption_mode=recompute,swap"]
SLOS = ["ttft_p99=1", "tpot_p99=0.05"]



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2", help="comma-separated worker (CPU) counts")
    ap.add_argument("--configs", type=int, default=None, help="first N configurations of the 1,000 (default: all)")
    ap.add_argument("--out", default=None, help="JSON result (default: bench/results/sweep-scaling-cpu<N>.json)")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists (committed results are never replaced by default)")
    args = ap.parse_args()
    args.out = args.out or str(ROOT / "bench" / "results" / f"sweep-scaling-cpu{os.cpu_count()}.json")
    check_output_file(ap, args.out, args.force)  # before any work: committed results are never replaced by default
    workers = [int(w) for w in args.workers.split(",")]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["sweep"]
    cli = sub.parse_args([str(TRACE), "--out", "unused"] + [f"--slo={s}" for s in SLOS])
    base = {k: v for k, v in vars(cli).items() if k not in NOT_SWEPT or k == "slo"}
    points = parse_grid(GRID, sub)[: args.configs]
    trace = load_trace(str(TRACE))
    runs = []
    for n in workers:
        out = Path(tempfile.mkdtemp(prefix=f"sweep-scaling-{n}-"))
        t = time.perf_counter()
        ray = start_ray(num_cpus=n)  # as run_sweep starts one (bench/ray_start.py times the start-up alone)
        start_s = time.perf_counter() - t
        t = time.perf_counter()
        df = run_sweep(trace, base, points, out, backend="ray", progress=True)
        wall = time.perf_counter() - t
        ray.shutdown()
        errors = int((df["status"] == "error").sum())
        runs.append({"workers": n, "configs": len(df), "errors": errors, "ray_start_s": start_s, "wall_s": wall,
                     "configs_per_s": len(df) / wall, "mean_sim_wall_s": float(df["sim_wall_s"].mean())})
        print(f"{n} workers: {len(df)} configurations in {wall:.1f} s ({len(df) / wall:.2f}/s, {errors} errors; "
              f"Ray started in {start_s:.1f} s)")
        shutil.rmtree(out, ignore_errors=True)
    one = next((r for r in runs if r["workers"] == 1), None)
    for r in runs:
        r["speedup_vs_1"] = one["wall_s"] / r["wall_s"] if one else None
    result = {
        "bench": "sweep_scaling", "trace": TRACE.name, "trace_requests": int(len(trace.df)), "grid": GRID,
        "slos": SLOS, "configs": len(points), "runs": runs, "target": ">= 12x with 16 workers vs 1",
        "cpu_count": os.cpu_count(), "load_average_at_end": os.getloadavg(), "platform": platform.platform(), "python": platform.python_version(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python " + " ".join(sys.argv),
    }
    out = Path(args.out or ROOT / "bench" / "results" / f"sweep-scaling-cpu{os.cpu_count()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
