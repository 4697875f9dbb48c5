"""CPU time of one replay's simulation, repeated in this process: for same-session A/B timing of two trees.

    PYTHONPATH=TREE python bench/sim_speed_cpu.py TRACE [replay options] [--repeat N]

Prints the CPU seconds of each `Simulation(...).run()` (trace loading excluded, fresh requests each
time, a collection before each) and the least of them. Alternate two trees, e.g.
`for t in ../main .; do PYTHONPATH=$t python bench/sim_speed_cpu.py TRACE; done`, run twice.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time


def main() -> int:
    from pagesim.cost import make_cost_model
    from pagesim.replay import add_run_options, config_from_args, trace_from_args
    from pagesim.request import requests_from_trace
    from pagesim.simulator import Simulation

    p = argparse.ArgumentParser()
    add_run_options(p)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(sys.argv[1:] + ["--out", "unused"])
    trace, config = trace_from_args(args), config_from_args(args)
    cost = make_cost_model(args.cost_model, config)
    times = []
    for _ in range(args.repeat):
        requests = requests_from_trace(trace)
        gc.collect()
        t = time.process_time()
        Simulation(requests, config, cost).run()
        times.append(time.process_time() - t)
    print("cpu", " ".join(f"{t:.3f}" for t in times), "min", f"{min(times):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
