"""Live GPU mode: a trace replayed in wall-clock time through the shared scheduler and the GPU executor.

It runs the shared driver loop (pagesim.loop.drive) on the wall clock, so a
step's recorded duration covers scheduling, the forward pass and sampling; the
executor frees finished requests' state from the plans (`finished_req_ids`). Back-to-back steps
are then stitched (each step lasts until the next one starts), so the step
durations of a busy stretch add up to its wall time and the recorder's
bookkeeping is not lost between steps. Calibration (engine.calibration) times its
workloads on the same loop with the helpers here: the executor, its warm-up, the
stitching and the device readings.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import subprocess
import time
from pathlib import Path

import pandas as pd

from pagesim.config import Config
from pagesim.cost.features import StepFeatures
from pagesim.loop import Arrivals, Hooks, WallClock, drive, run
from pagesim.metrics import prefix_cache_kwargs, summarize
from pagesim.outputs import git_commit, prepare_output_dir, provenance
from pagesim.recorder import Recorder
from pagesim.request import Request, requests_from_trace
from pagesim.run_warnings import config_warnings, emit, result_warnings
from pagesim.scheduler import Scheduler
from pagesim.utils import paused_gc


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc/self/stat's start time against /proc/uptime), so a
    command's wall time counts its start-up (imports, CUDA initialisation) too; None where /proc is absent."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def environment() -> dict:
    """Hardware and software of this run, for the run directory."""
    import torch
    import triton

    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),  # PyTorch sets LAZY when unset
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_bytes=props.total_memory, sm_count=props.multi_processor_count)
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    info["git_commit"] = git_commit()  # PAGESIM_GIT_COMMIT when the code runs from a copy inside another checkout
    return info


def stitch_durations(steps: pd.DataFrame, idle_after: set[int]) -> pd.DataFrame:
    """Each step lasts until the next starts, unless the engine went idle after it."""
    steps = steps.sort_values("step", ignore_index=True)
    nxt = steps["time_s"].shift(-1)
    busy = ~steps["step"].isin(idle_after) & nxt.notna()
    steps["exec_s"] = steps["duration_s"]
    steps.loc[busy, "duration_s"] = (nxt - steps["time_s"])[busy]
    return steps


class DeviceReadings:
    """What the executor read of each step on the device: its time between CUDA events (last_gpu_time_s), the part
    of it its block moves took before the forward (last_move_gpu_time_s: host-tier stores and loads, copies, swaps;
    0 without moves), the host's time from its start event to its work queued (last_queue_host_s: within the
    device time, the device waiting for the host) and the SM clock while it ran (last_sm_clock_mhz), kept by step and
    added to a steps frame as gpu_time_s, move_gpu_time_s, queue_host_s and sm_clock_mhz (NaN where there was none:
    the CPU, no NVML). Live runs and calibration rows both carry them (queue_host_s since round 47)."""

    COLUMNS = (("gpu_time_s", "last_gpu_time_s"), ("move_gpu_time_s", "last_move_gpu_time_s"),
               ("queue_host_s", "last_queue_host_s"), ("sm_clock_mhz", "last_sm_clock_mhz"))

    def __init__(self, executor):
        self.executor = executor
        self.by_step: dict[int, tuple] = {}

    def take(self, step_id: int) -> None:
        """After the step ran, before the next one (its values are overwritten then)."""
        self.by_step[step_id] = tuple(getattr(self.executor, attr, None) for _, attr in self.COLUMNS)

    def add_to(self, steps: pd.DataFrame) -> None:
        for i, (column, _) in enumerate(self.COLUMNS):
            steps[column] = steps["step"].map({k: v[i] for k, v in self.by_step.items()}).astype("float64")


class LiveReplay:
    """One trace through the scheduler and a GPU executor, arrivals released on the wall clock."""

    def __init__(self, requests: list[Request], config: Config, executor, progress=None):
        self.requests = sorted(requests, key=lambda r: (r.arrival_time, r.seq_no))
        self.config = config
        self.executor = executor
        self.scheduler = Scheduler(config)
        self.recorder = Recorder(self.scheduler, StepFeatures.from_plan)
        self.progress = progress
        self.releases: list[tuple[str, float, float, int]] = []  # id, trace arrival, released at, release step
        self.batches: list[tuple[int, str, str]] = []  # step, scheduled ids, preempted ids
        self.readings = DeviceReadings(executor)
        self.idle_after: set[int] = set()

    def run(self) -> dict:
        from engine.compile_counter import CompileCounter

        captures_before = getattr(self.executor, "num_graph_captures", 0)
        gc.collect()  # what the set-up left, before the clock; no collection pauses a step after it
        with paused_gc() as gc_count, CompileCounter() as compiles:
            out = self._run()
        out["summary"]["gc_collections_during_run"] = gc_count.collections
        out["summary"]["compilations_during_run"] = compiles.count
        out["summary"]["compiled_kernels_during_run"] = sorted(set(compiles.kernels))
        out["summary"]["graph_captures_during_run"] = getattr(self.executor, "num_graph_captures", 0) - captures_before
        return out

    def _run(self) -> dict:
        sched, rec, ex = self.scheduler, self.recorder, self.executor
        clock = WallClock()
        last_step = None

        def released(req: Request, t: float, step: int) -> None:
            self.releases.append((req.request_id, req.arrival_time, t, step))

        def idle(t: float) -> None:
            if last_step is not None:
                self.idle_after.add(last_step)

        def stepped(plan, duration, outcome) -> None:
            nonlocal last_step
            last_step = plan.step_id
            self.readings.take(plan.step_id)
            self.batches.append((plan.step_id, " ".join(s.request_id for s in plan.scheduled), " ".join(plan.preempted)))
            if self.progress is not None and outcome.finished:
                self.progress(len(outcome.finished))

        run(drive(sched, ex, rec, Arrivals.at_arrival_times(self.requests, on_release=released), clock,
                  hooks=Hooks(step=stepped, idle=idle)))
        now = clock.now
        wall = now()
        steps = stitch_durations(rec.steps_frame(), self.idle_after)
        self.readings.add_to(steps)
        all_requests = self.requests + [r for r in sched.finished if r.parent_id is not None]
        requests = rec.requests_frame(all_requests)
        summary = summarize(steps, requests, leaked_blocks=sched.leaked_blocks(), sim_wall_s=wall,
                            block_bytes=self.config.block_bytes, **prefix_cache_kwargs(sched.kv.prefix_cache_stats))
        summary["wall_s"] = wall
        summary["clock_started_unix"] = clock.started_unix  # step time_s + this = time.time() at the step's start
        return {"steps": steps, "requests": requests, "summary": summary}

    def releases_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.releases, columns=["request_id", "arrival_time_s", "released_s", "release_step"])

    def batches_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.batches, columns=["step", "scheduled", "preempted"])


def without_prefix_caching(config: Config) -> Config:
    """The config with prefix caching off, and so the host offload tier too (it is keyed by prefix hashes)."""
    return config.replace(enable_prefix_caching=False, kv_offloading_size=0.0)


def warm_up(executor, config: Config) -> dict:
    """Build every kernel variant and graph a run can need before the clock starts; returns what it did.

    CUDA graphs for the padded decode sizes and the pieces of the mixed-step token buckets are captured
    when the executor is made (their kernels built then). Here: a few
    requests through the real loop (a short prefill, a chunked prefill of a full token budget, mixed
    prefill + decode steps, recompute of nothing: just the shapes), then the decode attention at every
    split count an eager step can pick (GPUExecutor.warm_decode_variants), then the swap kernel in each direction
    the run's swap cache and host tier use (GPUExecutor.warm_transfers). Pointer alignment cannot pick a variant
    (the executor packs its uploads aligned; the swap kernel takes its ids as one tensor), so this covers every
    Triton variant.
    """
    from engine.compile_counter import CompileCounter

    if not getattr(executor, "is_cuda", False):
        return {"warmup_s": 0.0}  # nothing to compile ahead on the CPU (the interpreter runs kernels as Python)
    t0 = time.perf_counter()
    cfg = without_prefix_caching(config).replace(preemption_mode="recompute")
    sched = Scheduler(cfg)
    rec = Recorder(sched, StepFeatures.from_plan)
    longest = min(cfg.max_num_batched_tokens + 100, cfg.resolved_max_model_len - 8)
    lengths = [(7, 3), (300, 5), (min(2048, cfg.resolved_max_model_len - 8), 3), (33, 9), (longest, 2)]
    requests = [Request(f"warmup-{i}", 0.0, p, o, seq_no=-1 - i) for i, (p, o) in enumerate(lengths)]
    with CompileCounter() as compiles:
        run(drive(sched, executor, rec, Arrivals([(0, r) for r in requests], by_step=True), WallClock()))
        split_variants = executor.warm_decode_variants()
        transfers = executor.warm_transfers()
    return {"warmup_s": time.perf_counter() - t0, "warmup_compilations": compiles.count,
            "warmup_decode_split_variants": split_variants, "warmup_transfer_round_trips": transfers,
            "graph_captures_at_start": getattr(executor, "num_graph_captures", 0)}


def make_executor(config: Config):
    """A GPU executor over a model with random weights; num_gpu_blocks measured on the device unless given.

    On a machine without CUDA (tests), the model runs in fp32 on the CPU with the Triton interpreter.
    """
    import torch

    from engine.executor import GPUExecutor, config_for_device
    from engine.model import LlamaModel

    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if cuda else torch.float32
    model = LlamaModel.random(config.model_spec, "cuda" if cuda else "cpu", dtype, config.seed)
    if cuda:
        config = config_for_device(config, model)
    return GPUExecutor(config, model, cuda_graphs=cuda)


def live(args) -> int:
    """`python -m pagesim live TRACE ...`: see README, Live mode."""
    import torch

    from engine.calibration import calibration_warnings, calibration_workloads_that_fit, run_profile
    from engine.device_gpu import device_gpu
    from pagesim.errors import UserError, not_a_file
    from pagesim.progress import counted
    from pagesim.replay import config_from_args, trace_from_args, write_run_dir
    from pagesim.specs import DEFAULT_GPU
    from pagesim.traces import trace_from_frame, write_trace

    if not torch.cuda.is_available() and not args.allow_cpu:
        raise UserError("live mode needs a CUDA GPU (torch.cuda.is_available() is False)")
    warnings: list[str] = []  # printed once each, recorded in summary.json
    if torch.cuda.is_available():  # --gpu left out: the device's spec; given, it must be the device's
        args.gpu, device_warnings = device_gpu(args.gpu, "live")
        emit(device_warnings, warnings)
    else:  # the CPU tests' toy engine
        args.gpu = args.gpu or DEFAULT_GPU
    config = config_from_args(args)
    if len(set(args.baseline)) > 1:
        raise UserError(f"live runs one engine: pass at most one --baseline, got {', '.join(dict.fromkeys(args.baseline))}")
    if args.baseline:
        config = config.replace(kv_layout="contiguous", reserve_policy=args.baseline[0])
    if args.cost_model != "roofline":
        raise UserError("--cost-model does not apply to live (it times the engine); pass --profile PROFILE.json or "
                        "--calibrate for the profile the run is validated with")
    if args.profile:  # a bad file: an error now, not after the model is loaded
        from pagesim.cost.profile import ProfileCostModel

        found = not_a_file(args.profile)
        if found:
            raise UserError(f"--profile {args.profile}: {found}; expected a profile JSON from `python -m pagesim calibrate`")
        ProfileCostModel.from_json(args.profile)
    out_dir = prepare_output_dir(args.out, args.force)  # before any work
    trace = trace_from_args(args)
    emit(config_warnings(config, trace, typed=getattr(args, "typed", None)), warnings)
    if args.calibrate and config.num_gpu_blocks is not None:
        # refuses a cache too small to calibrate in, before any work; warns when it leaves workloads out
        emit(calibration_warnings(config, calibration_workloads_that_fit(config)), warnings)
    executor = make_executor(config)
    config = executor.config  # num_gpu_blocks as really allocated
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = run_profile(args, executor, config, out_dir)
    warm = warm_up(executor, config)  # after a calibration too: the run starts from the same warm state
    requests = requests_from_trace(trace)
    with counted(None, len(requests), f"live {config.run_name}", "req") as bar:
        run = LiveReplay(requests, config, executor, progress=bar.update)
        out = run.run()
    name = "live"
    out["summary"].update(warm)
    emit(result_warnings(name, out["requests"]), warnings)
    result = type("Result", (), {"steps": out["steps"], "requests": out["requests"]})
    write_run_dir(out_dir, config, trace, {name: result}, {name: out["summary"]},
                  {"environment": environment(), "model_spec": _spec_dict(config), "time_scale": args.time_scale,
                   "run_name": config.run_name, "executor": executor.describe(), "profile": profile,
                   "warnings": warnings, **provenance(args.argv)})
    releases = run.releases_frame()
    releases.to_csv(out_dir / "releases.csv", index=False)
    run.batches_frame().to_parquet(out_dir / "batches.parquet", index=False)
    # The arrivals as actually released: a recorded trace in the project's own format.
    df = trace.df.set_index("request_id").loc[releases["request_id"]].reset_index()
    df["arrival_time_s"] = releases["released_s"].to_numpy() - releases["released_s"].min()
    recorded = trace_from_frame(df, f"{trace.name}-live-{config.run_name}", trace.hash_block_size)
    write_trace(recorded, out_dir / "arrivals.jsonl")
    print(f"wrote {out_dir}: {out['summary']['num_finished']} finished, {out['summary']['num_rejected']} rejected, "
          f"{len(out['steps'])} steps in {out['summary']['wall_s']:.1f} s")
    return 0


def _spec_dict(config: Config) -> dict:
    import dataclasses

    return dataclasses.asdict(config.model_spec)


def register(sub) -> None:
    from pagesim.replay import add_run_options

    p = sub.add_parser("live", help="run a trace live on a CUDA GPU through the shared scheduler")
    add_run_options(p)
    p.set_defaults(gpu=None)  # the device's spec (engine.device_gpu); replay's default is h200
    prof = p.add_mutually_exclusive_group()
    prof.add_argument("--calibrate", action="store_true",
                      help="fit the profile cost model on this GPU before the run (recorded as DIR/profile.json)")
    prof.add_argument("--profile", metavar="PROFILE.json", default=None,
                      help="the profile this run is validated with (copied to DIR/profile.json)")
    p.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)  # tests: the toy model on the CPU
    p.set_defaults(func=live)
