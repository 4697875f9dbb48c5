"""Where a graphed mixed step's wall time goes beyond its kernels' time (issue #13: wall <= 1.3x GPU-only).

For a few cases of bench/mixed_graphs.py (a prefill chunk of P tokens + D decode rows of 512 tokens, replayed from the
piecewise CUDA graphs of its token bucket) this measures, on warm executors, the host time of each part of
GPUExecutor.execute (perf_counter around the executor's own methods, no synchronisation added: launches are
asynchronous, so each figure is what the host spends issuing that part), and writes a torch.profiler chrome trace of
a few steps per case (CPU and CUDA activity) for a timeline of where the GPU waits.

    python3 -m bench.mixed_graph_gaps --out $OUT/gaps.json --traces $OUT
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import shutil
import statistics
import time

import torch

from bench.mixed_graphs import Plans, bench_engine, step
from engine.executor import GPUExecutor
from pagesim.outputs import check_output_file

CASES = [(16, 0, 16), (16, 0, 64), (64, 0, 16), (64, 0, 64), (256, 0, 64)]


class HostTimer:
    """Wraps methods of objects (and functions of modules) so each call's host time is summed under a name."""

    def __init__(self):
        self.total = collections.defaultdict(float)
        self.calls = collections.Counter()

    def wrap(self, obj, attr: str, name: str) -> None:
        orig = getattr(obj, attr)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                self.total[name] += time.perf_counter() - t0
                self.calls[name] += 1

        setattr(obj, attr, timed)

    def reset(self) -> None:
        self.total.clear()
        self.calls.clear()


def kernel_gaps(trace_path: str) -> dict:
    """From a chrome trace: GPU kernel/memcpy busy time, the span from first to last, and the 10 largest idle gaps
    with the name of the kernel after each."""
    with open(trace_path) as f:
        ev = json.load(f)["traceEvents"]
    gpu = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])
    if not gpu:
        return {}
    busy = sum(e["dur"] for e in gpu)
    gaps = []
    end = gpu[0]["ts"] + gpu[0]["dur"]
    for e in gpu[1:]:
        if e["ts"] > end:
            gaps.append((e["ts"] - end, e["name"][:80]))
        end = max(end, e["ts"] + e["dur"])
    gaps.sort(reverse=True)
    by_name = collections.defaultdict(float)
    for g, name in gaps:
        by_name[name.split("(")[0][:60]] += g
    return {"gpu_busy_us": busy, "gpu_span_us": end - gpu[0]["ts"], "idle_us": sum(g for g, _ in gaps),
            "num_kernels": len(gpu), "largest_gaps": gaps[:10],
            "idle_before": sorted(by_name.items(), key=lambda kv: -kv[1])[:12]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--traces", default=None, help="folder for the gzipped chrome traces")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = p.parse_args()
    check_output_file(p, args.out, args.force)
    cfg, model = bench_engine()
    ex = GPUExecutor(cfg, model)
    ex.kv_cache.normal_()
    plans = Plans()
    timer = HostTimer()
    for attr in ("_step_inputs", "_sample", "_forward", "_move_blocks"):
        timer.wrap(ex, attr, attr)
    timer.wrap(model, "attention_launches", "model.attention_launches")
    timer.wrap(model, "layer_cache", "model.layer_cache")
    import engine.kernels.launch as kl
    import engine.model as em
    timer.wrap(em, "prefill_launches", "build prefill launch")
    timer.wrap(em, "decode_launches", "build decode launches")
    timer.wrap(kl.Launch, "__call__", "issue a launch")
    for gs in ex.mixed_graphs.values():
        for g in gs:
            timer.wrap(g, "replay", "graph.replay")
    rows = []
    for case in CASES:
        for _ in range(5):
            step(ex, plans, case)
        timer.reset()
        wall = [step(ex, plans, case) for _ in range(args.reps)]
        host = {k: 1e6 * v / args.reps for k, v in timer.total.items()}
        calls = {k: v / args.reps for k, v in timer.calls.items()}
        row = {"prefill_tokens": case[0], "cached_tokens": case[1], "decode_rows": case[2],
               "wall_ms": 1e3 * statistics.median(wall), "host_us_per_step": host, "calls_per_step": calls}
        if args.traces:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    step(ex, plans, case)
            path = os.path.join(args.traces, f"trace-P{case[0]}-D{case[2]}.json")
            prof.export_chrome_trace(path)
            row["gaps"] = kernel_gaps(path)
            with open(path, "rb") as fi, gzip.open(path + ".gz", "wb") as fo:
                shutil.copyfileobj(fi, fo)
            os.remove(path)
        rows.append(row)
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()
                          if k != "gaps"}), flush=True)
        if "gaps" in row:
            g = row["gaps"]
            print(f"  3 steps: busy {g['gpu_busy_us']:.0f} us, span {g['gpu_span_us']:.0f}, idle {g['idle_us']:.0f}; "
                  f"idle before: {g['idle_before'][:6]}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"bench": "mixed_graph_gaps", "date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
                   "torch": torch.__version__, "commit": os.environ.get("PAGESIM_GIT_COMMIT"), "cases": rows}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
