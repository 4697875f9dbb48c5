"""One timed replay in a fresh process, for bench/sim_speed.py: run with the tree to time on PYTHONPATH.

    python bench/sim_speed_worker.py TRACE --out OUT_DIR [replay options...]  -> one JSON line on stdout

Uses only calls both the current tree and commit 9708ab1 have: load_trace, config_from_args (replay's
options), make_cost_model, Simulation(...).run(), summarize_run, write_run_dir. Simulation excludes
loading the trace and writing the results, which are timed separately. No progress bar. With
--stream (this tree only), replay's streaming path: steps written while simulating, included in sim_s.
Also times reading steps.parquet back (plain pandas, and with the derived columns).
With --stop setup|sim, the process ends after the requests are made or after the first run's simulation,
writing and printing nothing (bench/sim_instructions.py counts the two processes' instructions).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

from process_memory import peak_rss_bytes  # bench/ is sys.path[0]: this script's folder, not a tree's pagesim


def main() -> int:
    from pagesim.cost import make_cost_model
    from pagesim.metrics import summarize_run
    from pagesim.replay import add_run_options, config_from_args, run_configs, trace_from_args, write_run_dir
    from pagesim.request import requests_from_trace
    from pagesim.simulator import Simulation

    p = argparse.ArgumentParser()
    add_run_options(p)
    p.add_argument("--stream", action="store_true", help="replay's streaming path (steps written as they come)")
    p.add_argument("--stop", choices=["setup", "sim"], help="end the process after the requests are made (setup) or "
                   "after the first run's simulation (sim), writing and printing nothing: bench/sim_instructions.py")
    args = p.parse_args(sys.argv[1:])
    t = time.perf_counter()
    trace = trace_from_args(args)
    load_s = time.perf_counter() - t
    config = config_from_args(args)
    if args.stream:
        from pagesim.replay import simulate_runs

        Path(args.out).mkdir(parents=True, exist_ok=True)
        gc.collect()
        t = time.perf_counter()
        results, summaries = simulate_runs(trace, config, args.baseline, args.cost_model, Path(args.out))
        sim_s = time.perf_counter() - t
        runs = [_run(name, sim_s, s) for name, s in summaries.items()]  # sim_s: all runs, steps written included
        t = time.perf_counter()
        write_run_dir(Path(args.out), config, trace, results, summaries, {}, steps_written=True)
        return _report(args, load_s, time.perf_counter() - t, runs)
    results, summaries, runs = {}, {}, []
    for cfg in run_configs(config, args.baseline):
        cost = make_cost_model(args.cost_model, cfg)
        requests = requests_from_trace(trace)
        gc.collect()
        if args.stop is not None:
            if args.stop == "sim":
                Simulation(requests, cfg, cost).run()
            return 0
        t, cpu = time.perf_counter(), time.process_time()
        result = Simulation(requests, cfg, cost).run()
        sim_s, cpu = time.perf_counter() - t, time.process_time() - cpu
        del requests
        s = summarize_run(result)
        results[cfg.run_name], summaries[cfg.run_name] = result, s
        runs.append(dict(_run(cfg.run_name, sim_s, s), sim_cpu_s=cpu))  # CPU time: steadier on a loaded machine
    t = time.perf_counter()
    write_run_dir(Path(args.out), config, trace, results, summaries, {})
    return _report(args, load_s, time.perf_counter() - t, runs)


def _run(name: str, sim_s: float, s: dict) -> dict:
    return {"run": name, "sim_s": sim_s, "num_steps": s["num_steps"], "us_per_step": sim_s / max(s["num_steps"], 1) * 1e6,
            "num_finished": s["num_finished"], "num_rejected": s["num_rejected"],
            "num_preemptions": s["num_preemptions"], "ttft_p50_s": s["ttft_s"]["p50"], "makespan_s": s["makespan_s"]}


def _report(args, load_s: float, write_s: float, runs: list) -> int:
    peak_mb = peak_rss_bytes() / 2**20  # the worker's own, not the bench process's it was forked from
    files = {f.name: f.stat().st_size for f in sorted(Path(args.out).iterdir())}
    import pandas as pd
    import pyarrow.parquet  # noqa: F401  (imported before the clock: the first read_parquet would time its import)

    t = time.perf_counter()
    pd.read_parquet(Path(args.out) / "steps.parquet")
    read_s = time.perf_counter() - t
    try:
        from pagesim.results import read_steps

        t = time.perf_counter()
        read_steps(Path(args.out) / "steps.parquet")
        read_derived_s = time.perf_counter() - t
    except ImportError:
        read_derived_s = read_s
    print(json.dumps({"load_s": load_s, "write_s": write_s, "peak_rss_mb": peak_mb, "runs": runs, "files": files,
                      "steps_read_s": read_s, "steps_read_with_derived_s": read_derived_s}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
