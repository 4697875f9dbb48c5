"""`python -m pagesim replay TRACE ...`: the paged configuration and each baseline on one trace.

Writes DIR/summary.json (config, trace, runs), DIR/steps.parquet and
DIR/requests.parquet (one row per step / request, with a `run` column; see
pagesim/results.py, which also reads them back), and prints
a comparison table. The run options are shared with `live` (engine/live.py).
"""

from __future__ import annotations

import argparse
import platform
from contextlib import nullcontext
from pathlib import Path

import pandas as pd

from pagesim.config import Config
from pagesim.errors import FlagError, OptionError, UserError
from pagesim.metrics import summarize_run
from pagesim.options import (MAX_REPLICAS, fraction, fraction_below_one, non_negative_float, positive_float, positive_int,
                             readable, replica_count)
from pagesim.outputs import prepare_output_dir, provenance
from pagesim.run_warnings import (baseline_warnings, cluster_warnings, config_warnings, emit, profile_warnings,
                                  result_warnings, slo_warnings)
from pagesim.specs import DEFAULT_GPU, GPUS, MODELS
from pagesim.traces.load import FORMATS, TRACE_FILE_HELP


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Trace and engine options shared by `replay` and `live`; each value is checked as it is parsed (options.py)."""
    p.add_argument("trace", help=TRACE_FILE_HELP)
    p.add_argument("--format", default="auto", choices=FORMATS, help="trace format; auto detects it from the content")
    p.add_argument("--limit", type=positive_int, default=None, help="first N requests only")
    p.add_argument("--start-s", type=non_negative_float, default=None, help="time window start (s from the first arrival)")
    p.add_argument("--end-s", type=positive_float, default=None, help="time window end (s from the first arrival)")
    p.add_argument("--time-scale", type=positive_float, default=1.0, help="replay at this multiple of the recorded rate")
    p.add_argument("--rate", type=positive_float, default=None, help="rescale arrivals to this mean rate (req/s)")
    p.add_argument("--model", default="llama-3-8b", choices=sorted(MODELS), help="model whose KV cache is simulated")
    p.add_argument("--gpu", default=DEFAULT_GPU, choices=sorted(GPUS), help="GPU whose memory and speed are simulated")
    p.add_argument("--block-size", type=positive_int, default=16, help="tokens per KV-cache block")
    mem = p.add_mutually_exclusive_group()
    mem.add_argument("--num-gpu-blocks", type=positive_int, default=None,
                     help="GPU KV-cache blocks (default: from --gpu-memory-utilization)")
    mem.add_argument("--gpu-memory-utilization", type=fraction, default=0.9,
                     help="share of GPU memory for weights and KV cache")
    p.add_argument("--max-model-len", type=positive_int, default=None,
                   help="longest prompt + output (default: the model's window)")
    p.add_argument("--allow-long-max-model-len", action="store_true",
                   help="accept a --max-model-len beyond the model's window (as vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN)")
    p.add_argument("--tensor-parallel-size", type=positive_int, default=1,
                   help="GPUs per replica: weights and KV heads are split over them")
    p.add_argument("--max-num-seqs", type=positive_int, default=256, help="most requests running at once")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192, help="most tokens per step")
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                   help="split long prompts over several steps")
    p.add_argument("--enable-prefix-caching", action="store_true", help="reuse KV blocks of shared prompt prefixes")
    p.add_argument("--preemption-mode", choices=["recompute", "swap"], default="recompute",
                   help="what happens to a preempted request's KV blocks")
    p.add_argument("--policy", choices=["fcfs", "priority"], default="fcfs",
                   help="scheduling policy, as vLLM's: fcfs, or priority (the trace's priority field, lower first; "
                        "preempts the running request with the largest (priority, arrival))")
    p.add_argument("--swap-space", type=non_negative_float, default=4.0, help="GiB of CPU memory for swapped blocks")
    p.add_argument("--watermark", type=fraction_below_one, default=0.0,
                   help="share of GPU blocks kept free when admitting requests")
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto",
                   help="KV-cache storage: auto (the model's dtype) or fp8 (e4m3, per-layer K/V scales; half the bytes)")
    p.add_argument("--kv-offloading-size", type=non_negative_float, default=0.0, metavar="GIB",
                   help="GiB of host memory for a CPU tier behind the GPU prefix cache (0: off; needs "
                        "--enable-prefix-caching)")
    p.add_argument("--baseline", action="append", choices=["max", "pow2", "oracle"], default=[],
                   help="also run this contiguous baseline (repeatable)")
    p.add_argument("--cost-model", default="roofline", help="'roofline' or a profile JSON from `pagesim calibrate`")
    p.add_argument("--out", required=True, help="output directory (new, or empty; see --force)")
    p.add_argument("--force", action="store_true", help="write into an existing --out directory, replacing its files")


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """Options of the simulated deployment: replicas, router, SLOs (`replay`, `sweep`)."""
    from pagesim.cluster import ROUTERS

    p.add_argument("--replicas", type=replica_count, default=1,
                   help=f"engines behind the router (each with --tensor-parallel-size GPUs; at most {MAX_REPLICAS:,}, "
                        "their KV blocks together within the simulator's block limit)")
    p.add_argument("--router", choices=ROUTERS, default="round-robin", help="how requests are spread over the replicas")
    p.add_argument("--slo", action="append", default=[], metavar="METRIC_PCT=SECONDS",
                   help="latency SLO, e.g. ttft_p99=1 or tpot_p99=0.05 (repeatable); adds goodput and attainment")


def simulate_run(trace, config: Config, *, cost_model: str = "roofline", replicas: int = 1,
                 router: str = "round-robin", slos=(), progress=None, steps_writer=None):
    """One run of `config` (over `replicas` replicas when > 1): the RunResult and its summary (with SLO figures).

    With `steps_writer` (results.StepsWriter; one replica only) the step table goes to disk in chunks as it is
    recorded and the result keeps only the columns the summary reads.
    """
    from pagesim import slo
    from pagesim.cluster import ClusterSimulation
    from pagesim.cost import make_cost_model
    from pagesim.request import requests_from_trace
    from pagesim.simulator import Simulation

    if replicas < 1:
        raise UserError(f"--replicas must be at least 1, got {replicas}")
    cost = make_cost_model(cost_model, config)
    if replicas == 1:
        sink = steps_writer.sink(config.run_name) if steps_writer is not None else None
        result = Simulation(requests_from_trace(trace), config, cost, progress=progress, steps_sink=sink).run()
        if steps_writer is not None:
            result.steps = steps_writer.summary_steps(config.run_name)
    else:
        result = ClusterSimulation(requests_from_trace(trace), config, cost, num_replicas=replicas,
                                   router=router, progress=progress).run()
    summary = summarize_run(result)
    summary["cost_model"] = cost.describe()
    summary["num_replicas"] = replicas
    summary["num_gpus"] = replicas * config.tensor_parallel_size
    if replicas > 1:
        summary["router"] = router
        summary["replicas"] = result.extra["replicas"]
    if slos:
        summary["slos"] = [str(s) for s in slos]
        summary.update(slo.evaluate(result.requests, list(slos), summary["makespan_s"]))
    return result, summary


def config_from_args(args) -> Config:
    """The run's Config; a bad combination of options is reported with the flags' names."""
    try:
        return _config(args)
    except OptionError as exc:
        raise FlagError(exc) from None


def _config(args) -> Config:
    return Config(
        model=args.model,
        gpu=args.gpu,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        tensor_parallel_size=args.tensor_parallel_size,
        allow_long_max_model_len=getattr(args, "allow_long_max_model_len", False),
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_chunked_prefill=args.enable_chunked_prefill,
        enable_prefix_caching=args.enable_prefix_caching,
        preemption_mode=args.preemption_mode,
        policy=getattr(args, "policy", "fcfs"),
        swap_space=args.swap_space,
        watermark=args.watermark,
        kv_cache_dtype=args.kv_cache_dtype,
        kv_offloading_size=args.kv_offloading_size,
    )


def trace_from_args(args):
    from pagesim.traces import load_trace
    from pagesim.traces.load import MAX_ARRIVAL_S

    return load_trace(args.trace, args.format, limit=args.limit, start_s=args.start_s, end_s=args.end_s,
                      time_scale=args.time_scale, rate=args.rate, max_span_s=MAX_ARRIVAL_S)


def run_configs(config: Config, baselines) -> list[Config]:
    """The paged config, then one contiguous config per baseline policy."""
    return [config] + [config.replace(kv_layout="contiguous", reserve_policy=b) for b in dict.fromkeys(baselines)]


def trace_info(trace) -> dict:
    df = trace.df
    span = float(df["arrival_time_s"].max()) if len(df) else 0.0
    return {"name": trace.name, "rows": int(len(df)), "span_s": span, "load_summary": str(trace.summary)}


def write_run_dir(out: Path, config: Config, trace, results: dict, summaries: dict, extra: dict | None = None,
                  steps_written: bool = False) -> None:
    """summary.json, steps.parquet (unless `steps_written`) and requests.parquet for named runs (pagesim/results.py)."""
    from pagesim.results import write_run_files

    summary = {"config": config.to_dict(), "trace": trace_info(trace), "runs": summaries}
    summary.update(extra or {})
    write_run_files(out, config, trace, results, summary, steps_written)


def comparison_table(summaries: dict) -> str:
    def ms(d, k):
        v = d[k]["p50"]
        return f"{v * 1000:.0f}" if v is not None else "-"

    rows = []
    for name, s in summaries.items():
        rows.append(
            {
                "run": name,
                "finished": s["num_finished"],
                "rejected": s["num_rejected"],
                "req/s": s["request_throughput"],
                "tok/s": s["output_token_throughput"],
                "TTFT p50 ms": ms(s, "ttft_s"),
                "TPOT p50 ms": ms(s, "tpot_s"),
                "E2E p50 ms": ms(s, "e2e_s"),
                "preempt": s["num_preemptions"],
                "token states": s["token_state_fraction"],
                "mean running": s["mean_num_running"],
                "leaked": s["leaked_blocks"],
            }
        )
        if "slo_met" in s:
            rows[-1].update({"goodput": s["goodput"], "SLO attain": s["slo_attainment"],
                             "SLOs": "met" if s["slo_met"] else "missed"})
    return _printed(rows)


def _printed(rows: list[dict]) -> str:
    """A table of figures as replay prints it: "-" where a run gives no figure (None: every request rejected)."""
    rows = [{k: float("nan") if v is None else v for k, v in row.items()} for row in rows]
    return pd.DataFrame(rows).to_string(index=False, float_format=readable, na_rep="-")


def simulate_runs(trace, config: Config, baselines, cost_model: str, out: Path, *, replicas: int = 1,
                  router: str = "round-robin", slos=(), progress: bool = False):
    """Simulate the paged config and each baseline: ({run name: RunResult}, {run name: summary}).

    With one replica the step tables stream to out/steps.parquet in chunks as they are recorded, and each
    result keeps only the columns its summary reads (write_run_dir(..., steps_written=True) then).
    """
    from pagesim.progress import sim_progress
    from pagesim.results import StepsWriter, run_geometry

    configs = run_configs(config, baselines)
    span = trace_info(trace)["span_s"]
    results, summaries = {}, {}
    stream = replicas == 1
    geometry = run_geometry(config, {cfg.run_name: type("R", (), {"config": cfg}) for cfg in configs})
    with StepsWriter(out / "steps.parquet", config, trace, geometry) if stream else nullcontext() as writer:
        for cfg in configs:
            with sim_progress(span, cfg.run_name) if progress else nullcontext() as report:
                results[cfg.run_name], summaries[cfg.run_name] = simulate_run(
                    trace, cfg, cost_model=cost_model, replicas=replicas, router=router, slos=slos,
                    progress=report, steps_writer=writer)
    return results, summaries


def replay(args) -> int:
    from pagesim.cluster import check_replicas
    from pagesim.cost import make_cost_model
    from pagesim.slo import parse_slos

    config = config_from_args(args)
    check_replicas(config, args.replicas)
    slos = parse_slos(args.slo)
    cost = make_cost_model(args.cost_model, config)  # a bad --cost-model: an error now, not after the trace is read
    out = prepare_output_dir(args.out, args.force)  # before any work: a finished run is never lost to a bad --out
    trace = trace_from_args(args)
    print(trace.summary.report())
    warnings: list[str] = []
    emit(trace.summary.warnings + config_warnings(config, trace, typed=getattr(args, "typed", None)) + baseline_warnings(config, args.baseline)
         + profile_warnings(config, cost) + cluster_warnings(config, args.replicas, args.router)
         + slo_warnings(config, trace, slos), warnings)
    results, summaries = simulate_runs(trace, config, args.baseline, args.cost_model, out, replicas=args.replicas,
                                       router=args.router, slos=slos, progress=True)
    for name, result in results.items():
        emit(result_warnings(name, result.requests), warnings)
    write_run_dir(out, config, trace, results, summaries,
                  {"platform": platform.platform(), "python": platform.python_version(), **provenance(args.argv),
                   "warnings": warnings}, steps_written=args.replicas == 1)
    print(comparison_table(summaries))
    if args.replicas > 1:
        print(replica_table(summaries))
    print(f"wrote {args.out}/summary.json, steps.parquet, requests.parquet")
    return 0


def replica_table(summaries: dict) -> str:
    rows = []
    for name, s in summaries.items():
        for k, r in enumerate(s.get("replicas", [])):
            ttft = r["ttft_s"]["p50"]
            rows.append({"run": name, "replica": k, "requests": r["num_requests"], "finished": r["num_finished"],
                         "rejected": r["num_rejected"], "preempt": r["num_preemptions"],
                         "prefix hit rate": r["prefix_cache_hit_rate"], "token states": r["token_state_fraction"],
                         "TTFT p50 ms": f"{ttft * 1000:.0f}" if ttft is not None else "-", "leaked": r["leaked_blocks"]})
    return _printed(rows)


def register(sub) -> None:
    p = sub.add_parser("replay", help="simulate a trace: paged against contiguous baselines")
    add_run_options(p)
    add_cluster_options(p)
    p.set_defaults(func=replay)
