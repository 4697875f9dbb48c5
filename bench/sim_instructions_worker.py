"""One process for bench/sim_instructions.py, run under cachegrind with the tree to count on PYTHONPATH.

    python bench/sim_instructions_worker.py TRACE {setup,replay} [replay options...]

setup: load the trace, make the config, the cost model and the requests; replay: the same, then the simulation
(what sim_speed_worker.py times). The bench subtracts the first count from the second. Uses only calls both the
current tree and commit 9708ab1 have.
"""

from __future__ import annotations

import argparse
import gc
import sys


def main() -> int:
    from pagesim.cost import make_cost_model
    from pagesim.replay import add_run_options, config_from_args, run_configs, trace_from_args
    from pagesim.request import requests_from_trace
    from pagesim.simulator import Simulation

    trace_path, mode = sys.argv[1], sys.argv[2]
    p = argparse.ArgumentParser()
    add_run_options(p)
    args = p.parse_args([trace_path, "--out", "unused"] + sys.argv[3:])
    trace = trace_from_args(args)
    cfg = list(run_configs(config_from_args(args), args.baseline))[0]
    cost = make_cost_model(args.cost_model, cfg)
    requests = requests_from_trace(trace)
    gc.collect()
    if mode == "replay":
        Simulation(requests, cfg, cost).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
