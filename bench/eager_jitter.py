"""Eager steps of one shape, repeated: how much their time varies from one run to the next, and what moves with it.

The calibrations of round 13 timed the same eager mixed step (a prompt of 1.1k-6k tokens beside 4 or 24 decode rows)
twice in each `eager-*` workload and got up to 25% apart (1,274 tokens: 36.7 and 29.6 ms); live runs price such
steps 5-30% low. This bench runs those workloads (engine.calibration.calibration_workloads, through the live loop as
`calibrate` does) REPEATS times on one executor after the usual warm-up and records, for every step the executor runs
eagerly (no decode graph, more tokens than the largest mixed-step bucket): its wall time (execute()), its device span (CUDA
events around the step's device work), the caching allocator's device mallocs and frees and its alloc retries
during the step, the device memory reserved, and its start on the wall clock, so that the SM clock and power that
`nvidia-smi -lms` logs beside it (bench/h200_round13.sh OUT c) can be matched to it. It writes the rows and, per
(workload, prefill tokens, decode rows), the spread of each time.

    python3 -m bench.eager_jitter --out $OUT/eager-jitter.json [--repeats 3] [--sync]

--sync waits for the device before every step (a step then never starts behind the previous one's tail).
--sweep N runs, after those, N prompt lengths never run before (1,090 + 7 i tokens beside the same 4 decode rows),
each twice in a row: whether a first run is slow for every new token count or only for the first few.
--trace DIR profiles the sweep (torch.profiler, CUDA kernels; a marker kernel before every step) and adds to each of
its eager steps where the device time went: GEMMs, attention, the rest, and the gaps between kernels; with
--trace-cpu the trace holds the host's activity too, and the GPU's gaps of 1 ms or more are charged to the host op
that spanned them (host_stalls).
What it found on the H200 (2026-12-02, bench/results/eager-jitter-h200-2026-12-02/): the first runs of the workloads'
shapes in a process are slow (up to 2x), with no allocator event and no compilation, and CUDA_MODULE_LOADING=EAGER
does not remove it; the sweep shows steps of one shape moving 20-50% within a minute, first run or not, at full
clocks, and its profile puts the whole variation in gaps between kernels: the host stalling 3.5-4.5 ms inside cuBLAS
GEMM calls (docs/accuracy-history.md, round 13).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import time

import torch

from engine.calibration import calibration_workloads, run_calibration
from engine.live import environment, make_executor, warm_up
from pagesim.config import Config
from pagesim.cost.graphs import runs_mixed_graph
from pagesim.outputs import check_output_file

WORKLOADS = ("eager-b4-c512", "eager-b24-c1024")
ALLOCATOR = ("num_device_alloc", "num_device_free", "num_alloc_retries")


class Probe:
    """The executor, with one row per executed eager step (everything else passes through)."""

    def __init__(self, executor, sync: bool):
        self.executor, self.sync, self.rows, self.label = executor, sync, [], ""
        self.marked: list[int | None] = None  # with --trace: per step since marking began, its row (None: graphed)

    def __getattr__(self, name):
        return getattr(self.executor, name)

    def execute(self, plan) -> float:
        ex = self.executor
        p, d = plan.num_prefill_tokens, plan.num_decode_tokens
        graphed = (not p and d <= ex.decode_sizes[-1]) or runs_mixed_graph(
            p, d, ex.decode_sizes[-1], ex.mixed_sizes[-1] if ex.mixed_sizes else 0)
        if self.marked is not None:
            torch.cuda._sleep(1)  # a marker kernel: the profile's kernels split into steps at it
            self.marked.append(None if graphed else len(self.rows))
        if graphed:
            return ex.execute(plan)
        if self.sync:
            torch.cuda.synchronize()
        before = torch.cuda.memory_stats()
        start = time.time()
        wall = ex.execute(plan)
        after = torch.cuda.memory_stats()
        self.rows.append({"run": self.label, "step": plan.step_id, "start_unix_s": start,
                          "prefill_tokens": plan.num_prefill_tokens, "decode_rows": plan.num_decode_tokens,
                          "wall_ms": 1e3 * wall, "gpu_ms": 1e3 * ex.last_gpu_time_s,
                          "reserved_bytes": after.get("reserved_bytes.all.current", 0),
                          **{k: after.get(k, 0) - before.get(k, 0) for k in ALLOCATOR}})
        return wall


def sweep_groups(n: int) -> list[tuple[int, ...]]:
    """A calibration-style workload: 4 sequences of 512 tokens decoding, and prompts of 1,090 + 7 i tokens (i < n)
    released one at a time every third step, each length twice in a row (engine.calibration.calibration_workloads'
    format)."""
    prompts = [1090 + 7 * (i // 2) for i in range(2 * n)]
    first = 3
    return [(4, 512, 3 * len(prompts) + 12)] + [(1, p, 2, first + 3 * i) for i, p in enumerate(prompts)]


def kernel_category(name: str) -> str:
    n = name.lower()
    if any(k in n for k in ("_prefill_kernel", "_decode_split_kernel", "_merge_splits_kernel")):
        return "attention"
    if any(k in n for k in ("gemm", "nvjet", "cutlass", "xmma", "cublas")):
        return "gemm"
    return "other"


def step_kernels(trace_path: str, marked: list, rows: list[dict]) -> dict:
    """Split the profile's kernels at the marker kernels into steps and add each eager step's breakdown to its row:
    device time per kernel_category, the gaps between its kernels, and its five longest kernels."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                     key=lambda e: e["ts"])
    steps, current = [], None
    for e in kernels:
        if "spin_kernel" in e["name"]:
            current = []
            steps.append(current)
        elif current is not None:
            current.append(e)
    if len(steps) != len(marked):
        return {"error": f"{len(steps)} marker kernels for {len(marked)} marked steps: no breakdown"}
    for row_index, ks in zip(marked, steps):
        if row_index is None or not ks:
            continue
        by = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
        for e in ks:
            by[kernel_category(e["name"])] += e["dur"] / 1e3
        span = (max(e["ts"] + e["dur"] for e in ks) - ks[0]["ts"]) / 1e3
        longest = sorted(ks, key=lambda e: -e["dur"])[:5]
        rows[row_index].update({f"{k}_ms": v for k, v in by.items()}, kernels=len(ks), span_ms=span,
                               gaps_ms=span - sum(by.values()),
                               longest=[(e["name"][:60], e["dur"] / 1e3) for e in longest])
    return {"steps": len(steps)}


def host_stalls(trace_path: str, min_gap_ms: float = 1.0) -> dict:
    """From a profile with the host's activity (--trace-cpu): each GPU gap of at least min_gap_ms, charged to the
    innermost host op that spans it up to the launch of the kernel after it (the host was inside that op while the
    GPU waited), or to the launch call itself; summed by op name, with the gaps' count."""
    import bisect
    import gzip as gz

    opener = gz.open if trace_path.endswith(".gz") else open
    with opener(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                     key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    starts = [e["ts"] for e in ops]
    by: dict[str, list] = {}
    end = kernels[0]["ts"] + kernels[0]["dur"] if kernels else 0
    for prev, e in zip(kernels, kernels[1:]):
        gap, gap_start = e["ts"] - end, end
        end = max(end, e["ts"] + e["dur"])
        if gap < 1e3 * min_gap_ms or "spin_kernel" in e["name"] or "spin_kernel" in prev["name"]:
            continue  # a marker's gaps are the bench's own (the host prepares the next step after it)
        launch = launches.get(e.get("args", {}).get("correlation"))
        if launch is None:
            name = "(no launch recorded)"
        else:
            lo, hi = bisect.bisect_left(starts, gap_start - 1e5), bisect.bisect_right(starts, launch["ts"])
            spanning = [o for o in ops[lo:hi] if o["ts"] + o["dur"] >= gap_start and o["dur"] >= 0.8 * gap]
            name = min(spanning, key=lambda o: o["dur"])["name"] if spanning else launch["name"]
        total = by.setdefault(name, [0, 0.0])
        total[0] += 1
        total[1] += gap / 1e3
    return {name: {"gaps": n, "ms": round(ms, 2)} for name, (n, ms) in sorted(by.items(), key=lambda kv: -kv[1][1])}


def spread(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["run"].split("#")[0], r["prefill_tokens"], r["decode_rows"]), []).append(r)
    out = []
    for (workload, p, d), rs in sorted(groups.items()):
        wall, gpu = [r["wall_ms"] for r in rs], [r["gpu_ms"] for r in rs]
        out.append({"workload": workload, "prefill_tokens": p, "decode_rows": d, "n": len(rs),
                    "wall_ms_median": statistics.median(wall), "wall_max_over_min": max(wall) / min(wall),
                    "gpu_ms_median": statistics.median(gpu), "gpu_max_over_min": max(gpu) / min(gpu),
                    "steps_with_allocator_events": sum(1 for r in rs if any(r[k] for k in ALLOCATOR))})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sync", action="store_true", help="wait for the device before every eager step")
    p.add_argument("--sweep", type=int, default=0, metavar="N", help="then N new prompt lengths, each twice in a row")
    p.add_argument("--trace", metavar="DIR", default=None, help="profile the sweep's kernels (writes DIR/sweep-trace.json.gz)")
    p.add_argument("--trace-cpu", action="store_true", help="with --trace: the host's activity too (CPU ops, CUDA API)")
    p.add_argument("--kv-cache-dtype", default="auto", choices=("auto", "fp8"))
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = p.parse_args()
    check_output_file(p, args.out, args.force)
    config = Config(model="llama-3-8b", gpu="h200", max_num_seqs=256, kv_cache_dtype=args.kv_cache_dtype)
    t_setup = time.perf_counter()
    executor = make_executor(config)
    config = executor.config
    warm_up(executor, config)
    setup_s = time.perf_counter() - t_setup
    named = dict(calibration_workloads(config.resolved_max_model_len))
    probe = Probe(executor, args.sync)
    t0 = time.perf_counter()
    # one calibration run over all repeats, so that request ids never repeat; the label follows the workload
    runs = [(w, rep) for rep in range(args.repeats) for w in WORKLOADS]
    labels = iter([f"{w}#{rep}" for w, rep in runs[1:]])
    probe.label = f"{runs[0][0]}#0"

    prof = None

    def next_label(rows_so_far) -> None:
        nonlocal prof
        probe.label = next(labels, "")
        if args.trace and probe.label.startswith("sweep"):
            from torch.profiler import ProfilerActivity, profile

            probe.marked = []
            prof = profile(activities=[ProfilerActivity.CUDA] + [ProfilerActivity.CPU] * args.trace_cpu)
            prof.start()

    workloads = [(w, named[w]) for w, _ in runs]
    if args.sweep:
        workloads.append(("sweep-b4-c512", sweep_groups(args.sweep)))
        labels = iter([f"{w}#{rep}" for w, rep in runs[1:]] + ["sweep-b4-c512#0"])
    run_calibration(probe, config, workloads=workloads, on_workload=next_label)
    rows = probe.rows
    breakdown = None
    if prof is not None:
        prof.stop()
        os.makedirs(args.trace, exist_ok=True)
        path = os.path.join(args.trace, "sweep-trace.json")
        prof.export_chrome_trace(path)
        breakdown = step_kernels(path, probe.marked, rows)
        if args.trace_cpu:
            breakdown["host_stalls"] = host_stalls(path)
        with open(path, "rb") as fi, gzip.open(path + ".gz", "wb") as fo:
            shutil.copyfileobj(fi, fo)
        os.remove(path)
    summary = spread(rows)
    for s in summary:
        print(f"{s['workload']:>16} p={s['prefill_tokens']:5d} d={s['decode_rows']:3d} n={s['n']}  wall "
              f"{s['wall_ms_median']:6.1f} ms (max/min {s['wall_max_over_min']:.3f})  gpu {s['gpu_ms_median']:6.1f} ms "
              f"(max/min {s['gpu_max_over_min']:.3f})  allocator events in {s['steps_with_allocator_events']}")
    sweep = [r for r in rows if r["run"].startswith("sweep") and r["decode_rows"] == 4]
    for first, second in zip(sweep[::2], sweep[1::2]):
        print(f"sweep p={first['prefill_tokens']:5d}: first {first['gpu_ms']:6.1f} ms, again {second['gpu_ms']:6.1f} ms"
              + "".join(f"  | {r.get('gemm_ms', 0):5.1f} gemm {r.get('attention_ms', 0):4.1f} attn "
                        f"{r.get('other_ms', 0):4.1f} other {r.get('gaps_ms', 0):5.1f} gaps" for r in (first, second)
                        if "gemm_ms" in r))
    if breakdown is not None:
        print("trace:", breakdown)
    result = {"bench": "eager_jitter", "sweep": args.sweep, "trace": breakdown, "sync": args.sync, "repeats": args.repeats,
              "kv_cache_dtype": args.kv_cache_dtype, "seconds": time.perf_counter() - t0, "setup_s": setup_s,
              **environment(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "summary": summary,
              "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"CUDA_MODULE_LOADING={result['cuda_module_loading']}: set-up (model, graphs, warm-up) {setup_s:.1f} s; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
