"""Simulator speed: replay the Azure 2023 conversation trace (19,366 requests), Llama-3-8B on an H200.

Paged, block 16, roofline cost model, default config otherwise. Uses the real trace from
../shared/traces/azure2023 when present, else a synthetic trace with its published statistics.
Reports wall time, simulated steps per second and simulated seconds per wall second, with and
without the exact decode fast path, and writes a JSON result.

    python bench/sim_speed.py [--out bench/results/sim-speed.json] [--no-slow]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pagesim.config import Config  # noqa: E402
from pagesim.cost import make_cost_model  # noqa: E402
from pagesim.metrics import summarize_run  # noqa: E402
from pagesim.request import requests_from_trace  # noqa: E402
from pagesim.simulator import Simulation  # noqa: E402
from pagesim.traces import load_trace  # noqa: E402
from pagesim.traces.synth import synthesize  # noqa: E402

AZURE_CONV = Path(__file__).resolve().parent.parent.parent / "shared/traces/azure2023/AzureLLMInferenceTrace_conv.csv"


def load():
    if AZURE_CONV.exists():
        t = time.perf_counter()
        trace = load_trace(AZURE_CONV)
        return trace, f"{AZURE_CONV.name} (real)", time.perf_counter() - t
    return synthesize("azure-conv", num_requests=19366, rate=5.53, seed=0), "azure-conv preset (synthetic)", 0.0


def run(trace, fast: bool) -> dict:
    config = Config(model="llama-3-8b", gpu="h200", block_size=16)
    cost = make_cost_model("roofline", config)
    requests = requests_from_trace(trace)
    t = time.perf_counter()
    sim = Simulation(requests, config, cost, fast_path=fast)
    result = sim.run()
    wall = time.perf_counter() - t
    summary = summarize_run(result)
    simulated = summary["makespan_s"] + float(trace.df["arrival_time_s"].min())
    return {
        "fast_path": fast,
        "wall_s": wall,
        "num_steps": result.num_steps,
        "fast_path_steps": result.extra["fast_path_steps"],
        "steps_per_wall_s": result.num_steps / wall,
        "simulated_s": simulated,
        "simulated_s_per_wall_s": simulated / wall,
        "num_finished": summary["num_finished"],
        "num_rejected": summary["num_rejected"],
        "leaked_blocks": summary["leaked_blocks"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/sim-speed.json")
    ap.add_argument("--no-slow", action="store_true", help="skip the step-by-step (no fast path) run")
    args = ap.parse_args()
    trace, source, load_s = load()
    print(f"trace: {source}, {len(trace.df)} requests, loaded in {load_s:.2f} s")
    runs = [run(trace, True)] + ([] if args.no_slow else [run(trace, False)])
    for r in runs:
        print(f"fast_path={r['fast_path']!s:5}  wall {r['wall_s']:6.2f} s  steps {r['num_steps']:>8}  "
              f"{r['steps_per_wall_s']:>9.0f} steps/s  {r['simulated_s_per_wall_s']:>7.0f} sim s / wall s  "
              f"finished {r['num_finished']} rejected {r['num_rejected']} leaked {r['leaked_blocks']}")
    result = {
        "bench": "sim_speed",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "trace": source,
        "num_requests": len(trace.df),
        "trace_load_s": load_s,
        "runs": runs,
        "command": "python bench/sim_speed.py " + " ".join(sys.argv[1:]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
