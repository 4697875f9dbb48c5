"""Does a decode step's time depend on the process (the engine instance) that runs it? (GPU)

Round 19 recorded the same k-shot window twice on one H200, two minutes apart, same code, profile and clocks: its
graph decode steps ran at 0.981 and 1.013 of the profile's prediction (the same Azure window twice: 0.994 and
0.991). Each recording is a process of its own, with its own weights, KV cache and CUDA graphs in memory. This
times the same decode steps (the calibration's steady-* workloads: decode batches of 4-48 spread contexts, 64 steps
after their prefill) in several fresh processes, each building the engine twice (the second after the first is
freed) and running the workloads `--repeats` times on each: the spread across processes and engines, against the
spread of repeats on one engine, says how much of a window's level belongs to its process.

    python3 -m bench.process_level --processes 6 --engines 2 --repeats 3 --out $OUT/process-level.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

from pagesim.outputs import check_output_file

WORKLOADS = ("steady-b4", "steady-b12", "steady-b24", "steady-b48")
FAR = 16  # decode steps of each workload from this many steps after its prefill on (past the after-prefill effect)
TOP_CLOCK_MHZ = 1950  # rows at or above this SM clock count as at the top clock


def child(engines: int, repeats: int) -> dict:
    """In this process: `engines` engines one after the other, each running WORKLOADS `repeats` times; per engine,
    repeat and workload the median duration of the far decode steps (all, and at the top clock) and their clock."""
    import gc

    import numpy as np
    import torch

    from engine.live import calibration_workloads, make_executor, run_calibration, warm_up
    from pagesim.config import Config

    out = []
    for e in range(engines):
        t0 = time.perf_counter()
        try:
            executor = make_executor(Config(model="llama-3-8b", gpu="h200"))
        except Exception as err:  # a later engine that finds the first one's memory not given back: say so, go on
            if not e:
                raise
            out.append({"engine": e, "error": f"{type(err).__name__}: {err}"[:500]})
            break
        config = executor.config
        warm_up(executor, config)
        chosen = [w for w in calibration_workloads(config.resolved_max_model_len) if w[0] in WORKLOADS]
        ready_s = time.perf_counter() - t0
        reps = []
        for _ in range(repeats):
            rows = run_calibration(executor, config, workloads=chosen)
            per = {}
            for name, g in rows.groupby("workload"):
                g = g[g.num_prefill_tokens == 0].iloc[FAR:]
                top = g[g.sm_clock_mhz >= TOP_CLOCK_MHZ]
                per[name] = {"median_s": float(np.median(g.duration_s)), "n": int(len(g)),
                             "median_top_s": float(np.median(top.duration_s)) if len(top) else None,
                             "n_top": int(len(top)), "clock_median_mhz": float(np.median(g.sm_clock_mhz))}
            reps.append(per)
        out.append({"engine": e, "ready_s": ready_s, "num_gpu_blocks": config.num_gpu_blocks, "repeats": reps})
        del executor, config
        gc.collect()
        torch.cuda.empty_cache()
    return {"engines": out}


def spread(values: list[float]) -> dict:
    """max / min - 1 and the coefficient of variation, in percent."""
    return {"max_over_min_pct": 100 * (max(values) / min(values) - 1),
            "cv_pct": 100 * statistics.pstdev(values) / statistics.mean(values), "n": len(values)}


def summarize(processes: list[dict]) -> dict:
    """Per workload: the spread of repeats on one engine (the worst engine), of engines in one process (the worst
    process; each engine's median over its repeats) and of processes (each process's first engine)."""
    out = {}
    for w in WORKLOADS:
        def level(rep):
            return rep[w]["median_top_s"] or rep[w]["median_s"]
        repeats = [spread([level(r) for r in e["repeats"]]) for p in processes for e in p["engines"] if "repeats" in e]
        built = [[e for e in p["engines"] if "repeats" in e] for p in processes]
        engines = [spread([statistics.median(level(r) for r in e["repeats"]) for e in es]) for es in built if len(es) > 1]
        first = [statistics.median(level(r) for r in p["engines"][0]["repeats"]) for p in processes]
        out[w] = {"within_engine_worst": max(repeats, key=lambda s: s["max_over_min_pct"]),
                  "within_process_worst": max(engines, key=lambda s: s["max_over_min_pct"]) if engines else None,
                  "across_processes": spread(first), "process_levels_s": first}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=6)
    p.add_argument("--engines", type=int, default=2, help="engines built one after the other in each process")
    p.add_argument("--repeats", type=int, default=3, help="runs of the workloads on each engine")
    p.add_argument("--out", default=None)
    p.add_argument("--force", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    for flag in ("processes", "engines", "repeats"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} {getattr(args, flag)}: expected a positive integer")
    if args.child:
        print(json.dumps(child(args.engines, args.repeats)))
        return 0
    if args.out:
        check_output_file(p, args.out, args.force)
    processes = []
    for i in range(args.processes):
        done = subprocess.run([sys.executable, "-m", "bench.process_level", "--child", "--engines", str(args.engines),
                               "--repeats", str(args.repeats)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"process {i} failed (exit status {done.returncode}):\n{done.stderr[-3000:]}")
        processes.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {i}: " + "; ".join(
            f"engine {e['engine']} " + (e.get("error") or " ".join(
                f"{w} {1e3 * statistics.median(r[w]['median_top_s'] or r[w]['median_s'] for r in e['repeats']):.3f}ms"
                for w in WORKLOADS)) for e in processes[-1]["engines"]), flush=True)
    import torch
    result = {"bench": "process_level", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
              "command": " ".join(["python3 -m bench.process_level"] + sys.argv[1:]),
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "torch": torch.__version__, "python": platform.python_version(),
              "commit": os.environ.get("PAGESIM_GIT_COMMIT", "unknown"),
              "far_from_step": FAR, "top_clock_mhz": TOP_CLOCK_MHZ,
              "summary": summarize(processes), "processes": processes}
    for w, s in result["summary"].items():
        within_p = s["within_process_worst"]
        print(f"{w}: repeats on one engine <= {s['within_engine_worst']['max_over_min_pct']:.2f}%, "
              + (f"engines in one process <= {within_p['max_over_min_pct']:.2f}%, " if within_p else "")
              + f"processes {s['across_processes']['max_over_min_pct']:.2f}% (cv {s['across_processes']['cv_pct']:.2f}%)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
