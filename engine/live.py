"""Live GPU mode: a trace replayed in wall-clock time through the shared scheduler and the GPU executor,
and calibration of the `profile` cost model on the same loop.

Both run the shared driver loop (pagesim.loop.drive) on the wall clock, so a
step's recorded duration covers scheduling, the forward pass and sampling; the
executor frees finished requests' state from the plans (`finished_req_ids`). Back-to-back steps
are then stitched (each step lasts until the next one starts), so the step
durations of a busy stretch add up to its wall time and the recorder's
bookkeeping is not lost between steps.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import subprocess
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.config import Config
from pagesim.cost.features import StepFeatures, shared_tokens
from pagesim.cost.profile import GRAPH_BATCH_SIZES, MIXED_GRAPH_TOKEN_SIZES, WALK_COLUMNS
from pagesim.loop import Arrivals, Hooks, WallClock, drive, run
from pagesim.metrics import prefix_cache_kwargs, summarize
from pagesim.options import non_negative_float, positive_int
from pagesim.outputs import git_commit, prepare_output_dir, prepare_output_file, provenance
from pagesim.recorder import FEATURE_COLUMNS, Recorder
from pagesim.request import Request, requests_from_trace
from pagesim.run_warnings import config_warnings, emit, result_warnings
from pagesim.scheduler import Scheduler
from pagesim.utils import cdiv, frozen_heap, paused_gc


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
    0 without moves) and the SM clock while it ran (last_sm_clock_mhz), kept by step and added to a steps frame as
    gpu_time_s, move_gpu_time_s and sm_clock_mhz (NaN where there was none: the CPU, no NVML). Live runs and
    calibration rows both carry them."""

    COLUMNS = (("gpu_time_s", "last_gpu_time_s"), ("move_gpu_time_s", "last_move_gpu_time_s"),
               ("sm_clock_mhz", "last_sm_clock_mhz"))

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
    from tqdm import tqdm

    from pagesim.errors import UserError, not_a_file
    from pagesim.replay import config_from_args, trace_from_args, write_run_dir
    from pagesim.traces import trace_from_frame, write_trace

    if not torch.cuda.is_available() and not args.allow_cpu:
        raise UserError("live mode needs a CUDA GPU (torch.cuda.is_available() is False)")
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
    warnings: list[str] = []  # printed once each, recorded in summary.json
    emit(config_warnings(config, trace), warnings)
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
    with tqdm(total=len(requests), desc=f"live {config.run_name}", unit="req") as bar:
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


def run_profile(args, executor, config: Config, out_dir: Path) -> dict | None:
    """The profile this run is validated with, copied into the run directory as profile.json.

    --calibrate fits it here, on this GPU, with this executor, before the run (calibration_s is
    recorded); --profile copies a profile fitted earlier (on this machine, ideally in the same call).
    """
    import shutil

    from engine.kernels.swap import measure_swap_bandwidth

    target = out_dir / "profile.json"
    if getattr(args, "calibrate", False):
        t0 = time.perf_counter()
        phases = {"before_s": process_age_s()}  # the command's start-up, trace and executor before the calibration
        workloads = calibration_workloads_that_fit(config)
        warm_up(executor, config)
        cal = without_prefix_caching(config).replace(preemption_mode="recompute")
        t1 = time.perf_counter()
        rows = run_calibration(executor, cal, workloads=workloads)
        rows.to_csv(out_dir / f"profile{CALIBRATION_ROWS_SUFFIX}", index=False)
        t2 = time.perf_counter()
        swap = measure_swap_bandwidth(executor.kv_cache)
        phases.update(warmup_s=t1 - t0, workloads_s=t2 - t1, swap_bandwidth_s=time.perf_counter() - t2)
        fit_and_write(rows, cal, target, {"environment": environment(), "config": cal.to_dict(),
                                          "workloads": [w for w, _ in workloads], "swap_bandwidth": swap},
                      "live --calibrate", mixed_graph_token_sizes=tuple(sorted(executor.mixed_graphs)), phases=phases)
        return {"path": target.name, "source": "live --calibrate", "calibration_s": time.perf_counter() - t0,
                "calibration_workloads": len(workloads), "calibration_phases": phases}
    if getattr(args, "profile", None):  # read and checked by live() before the model was loaded
        shutil.copyfile(args.profile, target)
        return {"path": target.name, "source": str(args.profile)}
    return None


def calibration_warnings(config: Config, fit: list) -> list[str]:
    """`live --calibrate` on a cache that leaves calibration workloads out: the profile misses their steps."""
    every = calibration_workloads(config.resolved_max_model_len)
    if len(fit) == len(every):
        return []
    return [f"--calibrate: {len(fit)} of the {len(every)} calibration workloads fit a KV cache of "
            f"{config.resolved_num_gpu_blocks} blocks (--num-gpu-blocks); the profile is fitted without the other "
            f"{len(every) - len(fit)} (the largest: long prompts, eager steps), so steps like theirs are priced least "
            f"certainly; for a full profile run `python -m pagesim calibrate --model {config.model} --out P.json` on "
            "this GPU and pass --profile P.json"]


@functools.lru_cache(maxsize=8)
def calibration_peak_blocks(model: str, block_size: int, max_model_len: int, max_num_seqs: int,
                            max_num_batched_tokens: int, allow_long_max_model_len: bool = False) -> dict[str, int]:
    """Each calibration workload's peak of KV blocks in use, from its plans (replayed without a GPU, with a cache
    large enough for all its requests at once): most workloads release their prompts one at a time, each finishing
    before the next few, so they need far less than all their tokens."""
    every = calibration_workloads(max_model_len)
    need = max(sum(g[0] * cdiv(g[1] + g[2], block_size) for g in groups) for _, groups in every)
    config = Config(model=model, block_size=block_size, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                    max_num_batched_tokens=max_num_batched_tokens, num_gpu_blocks=need + 1,
                    allow_long_max_model_len=allow_long_max_model_len)
    return {name: int(run_calibration(NoTime(), config, workloads=[(name, groups)])["blocks_used"].max())
            for name, groups in every}


def calibration_workloads_that_fit(config: Config) -> list:
    """The calibration workloads whose peak of KV blocks in use (calibration_peak_blocks) fits 90% of the config's
    KV cache (`live --calibrate` calibrates with the run's own executor and cache); refuses a cache that leaves out
    the decode grid or half the grid."""
    from pagesim.errors import UserError

    every = calibration_workloads(config.resolved_max_model_len)
    peaks = calibration_peak_blocks(config.model, config.block_size, config.resolved_max_model_len,
                                    config.max_num_seqs, config.max_num_batched_tokens, config.allow_long_max_model_len)
    fit = [(name, groups) for name, groups in every if peaks[name] <= 0.9 * config.resolved_num_gpu_blocks]
    if len(fit) < len(every) / 2 or not any(name.startswith("decode-c") for name, _ in fit):
        raise UserError(f"--calibrate: only {len(fit)} of the {len(every)} calibration workloads fit a KV cache of "
                        f"{config.resolved_num_gpu_blocks} blocks (--num-gpu-blocks), too few to fit a profile; "
                        f"calibrate on this GPU first (python -m pagesim calibrate --model {config.model} --out P.json) "
                        "and pass --profile P.json")
    return fit


def fit_and_write(rows: pd.DataFrame, config: Config, out: Path, extras: dict, command: str,
                  mixed_graph_token_sizes: tuple[int, ...] = (), phases: dict | None = None) -> dict:
    """Fit the profile cost model to calibration steps (workloads held out in turn) and write it to out.

    mixed_graph_token_sizes: the token buckets whose mixed steps the calibrating executor replayed from
    CUDA graphs (GPUExecutor.mixed_graphs); those steps get their own coefficients. phases: the calibration's
    phases so far in seconds; the fit's is added (fit_s), and the profile records them as calibration_phases with
    calibration_wall_s, the command's wall time from its process's start to the profile written (process_age_s)."""
    from pagesim.cost.profile import fit_profile

    t_fit = time.perf_counter()
    model, report = fit_profile(rows, config.model, config.gpu, holdout="workload", max_num_seqs=config.max_num_seqs,
                                mixed_graph_token_sizes=mixed_graph_token_sizes, workers=None)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.to_json(out)
    profile = json.loads(out.read_text())
    if config.kv_cache_dtype != "auto":  # timed with that cache: make_cost_model checks it against a run's config
        profile["kv_cache_dtype"] = config.kv_cache_dtype
    swap = extras.get("swap_bandwidth")
    if swap:  # the measured host-link figure replaces the datasheet's (engine.kernels.swap.measure_swap_bandwidth)
        profile["coefficients"]["swap_s_per_byte"] = 0.5 * (1 / swap["swap_out_bytes_per_s"] + 1 / swap["swap_in_bytes_per_s"])
    profile.update(report=report, **extras, command=command)
    if phases is not None:
        phases["fit_s"] = time.perf_counter() - t_fit
        profile.update(calibration_phases=phases, calibration_wall_s=process_age_s())
    out.write_text(json.dumps(profile, indent=2) + "\n")
    return report


def _spec_dict(config: Config) -> dict:
    import dataclasses

    return dataclasses.asdict(config.model_spec)


# ---- calibration ------------------------------------------------------------------------------
DECODE_STEPS_PER_SIZE = 10  # decode steps the calibration's decode grid times at each batch size
STEADY_DECODE_STEPS = 64  # decode steps of each steady-* workload after its prefill
# The calibration's rows beside its profile (P.json -> P.steps.csv.gz; `live --calibrate`: DIR/profile.steps.csv.gz),
# gzipped (a fifth of the size; pandas reads either form, so `--refit` takes rows saved as plain CSV too).
CALIBRATION_ROWS_SUFFIX = ".steps.csv.gz"
# Most calibration workloads prefill their sequences only to decode over them: of a workload's steps that prefill at
# least ADVANCE_TOKENS tokens, the first TIMED_LARGE_STEPS are timed and the rest advanced without being computed
# (GPUExecutor.advance) and left out of the rows; the families that time large steps on purpose are timed whole.
ADVANCE_TOKENS = 4096
TIMED_LARGE_STEPS = 3
TIMED_WHOLE = ("prefill-", "eager-", "mixed-")


class ContextBuilding:
    """One calibration workload's executor: runs each step on `executor`, or advances it (module constants above);
    `advanced` holds the step ids it advanced."""

    def __init__(self, executor, timed_whole: bool):
        self.executor, self.timed_whole = executor, timed_whole
        self.large = 0
        self.advanced: set[int] = set()

    def execute(self, plan) -> float:
        if plan.num_prefill_tokens >= ADVANCE_TOKENS and not self.timed_whole:
            self.large += 1
            if self.large > TIMED_LARGE_STEPS:
                self.advanced.add(plan.step_id)
                return self.executor.advance(plan)
        return self.executor.execute(plan)


def calibration_workloads(max_model_len: int) -> list[tuple[str, list[tuple[int, ...]]]]:
    """Synthetic workloads as (name, [(count, prompt_len, output_len[, release_step[, prefix_len, prefix_id]]), ...]).

    A group is released before the workload's step `release_step` (0, the default: at the start);
    with prefix_len, its requests' first prefix_len prompt tokens are one shared prefix per prefix_id
    (the same content; the workload runs with prefix caching, so later requests hit it).
    Decode grid: per context 128..4096, a batch that grows through the CUDA-graph sizes 1, 2, 4, ...,
    up to 256 sequences (capped at 256k cached tokens): the sequences that take it to the next size
    are released once it has decoded DECODE_STEPS_PER_SIZE steps at this one, so each sequence is
    prefilled once for every batch size; prefill grid: single prompts 16..8192
    tokens; mixed: long prompts arriving into running decodes (chunked prefill packs them with the
    decode tokens); skew: b short sequences (128 or 1024 tokens) decoding with one long one (2k-6k),
    b + 1 = 16..128 rows, so that the longest sequence and the total context vary apart (the decode
    kernel's time follows the longest sequence once it stops splitting sequences, profile.py); arrive:
    small prompts (64-512 tokens) released one at a time into a running decode batch (some with a long
    sequence in it): small eager mixed steps; shared: b sequences reading g shared prefixes of p tokens
    plus c tokens of their own (decode rows that read the same blocks: decode_shared_tokens), the g
    first ones released ahead to compute the prefixes; spread: b sequences whose contexts are spread
    evenly from lo to hi tokens (a serving batch: neither uniform nor one long among short ones; without
    them the fit cannot tell how many sequences saturate memory, the profile's max_context_lanes); served:
    b sequences with contexts spread log-uniformly and outputs of different lengths, so the batch shrinks
    through the sizes between the graph sizes, as served batches do; steady: b spread contexts decoding
    STEADY_DECODE_STEPS steps after their prefill (decode steps long past a prefill, as a window's mostly are);
    buckets: prompts released one at a time into a small decode batch, sized so that each step lands in a mixed-step token bucket (graph
    mixed steps, 16..4096 tokens), two of each; eager: the same, with steps of 4.3k-8.1k tokens (eager mixed
    steps above the largest bucket, up to the budget); prefix: the buckets' steps
    with a cached prefix of 2k-4k tokens before each chunk (prefix-cache hits); multi: 2, 4 or 8 prompts released
    together into a small decode batch, from scratch and after a cached prefix (graph mixed steps with several
    prefill sequences, as recomputes after preemption make).
    """
    out = []
    budget = 8192  # the calibration's max_num_batched_tokens: the batch is prefilled in ceil(tokens / budget) steps
    for b in (15, 31, 63, 127):
        for short in (128, 1024):
            for long in (2048, 4096, 6144):
                if long + 24 <= max_model_len:
                    out.append((f"skew-b{b}-s{short}-l{long}", [(1, long, 24), (b, short, 24)]))
    for b, c, long in ((8, 1024, 0), (32, 512, 0), (32, 512, 4096), (64, 1024, 0), (63, 256, 6144), (128, 512, 0),
                       (127, 512, 4096), (200, 256, 0)):
        if max(c, long) + 48 > max_model_len:
            continue
        first = -(-(b * c + long) // budget) + 2  # a couple of decode-only steps before the first arrival
        groups = ([(1, long, 48)] if long else []) + [(b, c, 48)]
        groups += [(1, p, 3, first + 4 * i) for i, p in enumerate((64, 128, 256, 512) * 2)]
        out.append((f"arrive-b{b}-c{c}" + (f"-l{long}" if long else ""), groups))
    # Prompts released one at a time into a small running decode batch, so that each lands in a step of a chosen
    # packed size, twice: buckets, one in each mixed-step token bucket (16..4096 tokens: graph mixed steps); eager,
    # steps above the largest bucket up to the budget (4.3k-8.1k tokens: eager mixed steps); prefix, bucket-sized
    # prompt suffixes after a cached prefix of `pre` tokens (computed by a first request at the start): chunks that
    # attend to far more keys than their own, as prefix-cache hits do (each prompt as long as the window allows).
    largest = MIXED_GRAPH_TOKEN_SIZES[-1]
    for kind, totals, shapes in (
            ("buckets", MIXED_GRAPH_TOKEN_SIZES, ((4, 512, 0), (24, 1024, 0))),
            ("eager", [round(largest * f) for f in (1.05, 1.15, 1.25, 1.35, 1.5, 1.65, 1.8, 1.98)],
             ((4, 512, 0), (24, 1024, 0))),
            ("prefix", MIXED_GRAPH_TOKEN_SIZES, ((4, 512, 2048), (16, 1024, 4096)))):
        for b, c, pre in shapes:
            if max(c, pre + 16) + 48 > max_model_len:
                continue
            first = -(-(b * c + pre) // budget) + 2
            prompts = [max(1, t - b - 2) for t in totals if b + 2 < t <= max_model_len - 2 - pre and t <= budget] * 2
            shared = (pre, 0) if pre else ()
            out.append((f"{kind}-b{b}-c{c}" + (f"-p{pre}" if pre else ""), [(b, c, 3 * len(prompts) + 12)]
                        + ([(1, pre + 16, 2, 0, pre, 0)] if pre else [])
                        + [(1, pre + p, 2, first + 3 * i, *shared) for i, p in enumerate(prompts)]))
    # Several prompts released in the same step into a small running decode batch: graph mixed steps with 2-8
    # prefill sequences (as recomputed requests make after preemptions; the workloads above release one at a time),
    # from scratch (in every bucket from 64 tokens) and after a cached prefix (in the buckets up to 2048 tokens; the
    # larger ones have their prefix-hit rows from prefix-*, and the calibration's time stays within its target).
    for b, c, pre in ((8, 512, 0), (8, 512, 2048)):
        if max(c, pre + 16) + 48 > max_model_len:
            continue
        first = -(-(b * c + pre) // budget) + 2
        releases = [(k, (t - b - 2) // k) for k in (2, 4, 8) for t in MIXED_GRAPH_TOKEN_SIZES[2:]
                    if t - b - 2 >= k and t <= (2048 if pre else largest) and pre + (t - b - 2) // k + 2 <= max_model_len]
        shared = (pre, 0) if pre else ()
        out.append((f"multi-b{b}-c{c}" + (f"-p{pre}" if pre else ""), [(b, c, 3 * len(releases) + 12)]
                    + ([(1, pre + 16, 2, 0, pre, 0)] if pre else [])
                    + [(k, pre + p, 2, first + 3 * i, *shared) for i, (k, p) in enumerate(releases)]))
    for c in (128, 512, 1024, 2048, 4096):
        sizes = [b for b in GRAPH_BATCH_SIZES if b * c <= 256 * 1024]
        release, levels = 0, []
        for smaller, b in zip([0] + sizes, sizes):
            levels.append((b - smaller, release))
            # the new sequences' prefill (decode rows take their share of the budget), then the decode steps
            release += -(-(b - smaller) * c // (budget - smaller)) + 1 + DECODE_STEPS_PER_SIZE
        if c + release <= max_model_len:  # every sequence decodes until the last size's steps are done
            out.append((f"decode-c{c}", [(n, c, release - r, r) for n, r in levels]))
    for p in (16, 64, 256, 1024, 2048, 4096, 8000):
        if p + 2 <= max_model_len:
            out.append((f"prefill-{p}", [(1, p, 2)] * 3))
    for b, p in ((8, 2048), (32, 1024), (64, 4096), (128, 512)):
        if p + 48 <= max_model_len:
            out.append((f"mixed-b{b}-p{p}", [(b, 256, 48), (4, p, 4)]))
    # Long context (a model with a long window): chunked prefills over long contexts, long decodes.
    for p in (16384, 30000):
        if p + 2 <= max_model_len:
            out.append((f"prefill-{p}", [(1, p, 2)]))
    for b, c in ((4, 16384), (16, 12288)):
        if c + 24 <= max_model_len:
            out.append((f"decode-b{b}-c{c}", [(b, c, 24)]))
    if 24576 + 24 <= max_model_len:
        out.append(("skew-b31-s1024-l24576", [(1, 24576, 24), (31, 1024, 24)]))
    for b, lo, hi in ((8, 256, 4096), (16, 256, 4096), (32, 256, 4096), (8, 1024, 8192), (16, 1024, 8192),
                      (4, 4096, 24576)):
        if hi + 24 <= max_model_len:
            out.append((f"spread-b{b}-{lo}-{hi}", [(1, lo + (hi - lo) * i // (b - 1), 24) for i in range(b)]))
    for b, p, c, g in ((8, 4096, 256, 1), (16, 1024, 1024, 1), (16, 512, 2048, 1), (32, 2048, 512, 2), (64, 1024, 256, 1),
                       (32, 8192, 512, 1), (64, 4096, 1024, 4), (128, 2048, 256, 8), (4, 16384, 256, 1),
                       (8, 12288, 1024, 2),
                       # k-shot-like: 8-32 rows over 4 prefixes of ~1.5k tokens, a third to two thirds of reads repeats
                       (8, 1536, 512, 4), (16, 1536, 512, 4), (24, 1536, 768, 4), (32, 1536, 384, 4)):
        if p + c + 64 > max_model_len:
            continue
        first = -(-g * (p + c) // budget) + 1  # the g prefixes computed (whole prompts of their first requests)
        groups = []
        for j in range(g):
            groups += [(1, p + c, 24 + first, 0, p, j), ((b - g) // g + (j < (b - g) % g), p + c, 24, first, p, j)]
        out.append((f"shared-b{b}-p{p}-c{c}" + (f"-g{g}" if g > 1 else ""), groups))
    # Served-like: b sequences whose contexts spread log-uniformly over 256..6144 tokens in a scrambled order and
    # whose outputs end at different steps, so the batch shrinks through sizes between the graph sizes
    # (live batches are rarely a graph size, nor uniform, nor one long among short ones).
    for b in (6, 12, 24, 48):
        hi = min(6144, max_model_len - 40)
        frac = [(i * 0.6180339887) % 1 for i in range(b)]
        out.append((f"served-b{b}", [(1, round(256 * (hi / 256) ** f), 8 + (i * 7) % 25) for i, f in enumerate(frac)]))
    # Steady: b sequences with contexts spread log-uniformly over 256..4096 tokens decoding STEADY_DECODE_STEPS steps
    # after one prefill. A decode step runs slower for several steps after a step with prefill tokens (2-7% right
    # after, ~1% ten steps on, in calibrations and windows alike: README, Simulator accuracy, round 18), and a serving
    # window's decode steps are mostly tens of steps past one; the decode grid's are at most DECODE_STEPS_PER_SIZE.
    for b in (4, 12, 24, 48):
        hi = min(4096, max_model_len - STEADY_DECODE_STEPS - 2)
        frac = [(i * 0.6180339887) % 1 for i in range(b)]
        out.append((f"steady-b{b}", [(1, round(256 * (hi / 256) ** f), STEADY_DECODE_STEPS) for f in frac]))
    return out


SAVE_EVERY_S = 10.0  # run_calibration hands its rows so far to on_workload at most this often (and after the last)


def run_calibration(executor, config: Config, progress=None, workloads=None, on_workload=None,
                    advance: bool = True, rest: float = 0.0, save_every_s: float = SAVE_EVERY_S) -> pd.DataFrame:
    """Run every calibration workload through the live loop; one row per step with its features and duration.

    `on_workload(rows so far)` is called after a workload when `save_every_s` have passed since the last call, and
    after the last workload (calibrate saves them as it goes, so an interrupted calibration can be refitted; saving
    after every workload rewrote the growing gzipped CSV 78 times: 7 s of a calibration on a 2-core CPU). With `advance`
    (ContextBuilding), the large steps after each workload's first TIMED_LARGE_STEPS are advanced and have no row;
    without it every step is run and has its row, as in calibrations made before round 9. The garbage collector
    runs between workloads only, on that workload's objects (the set-up is frozen out of it: frozen_heap).
    `rest` (calibrate --rest): after each timed step the GPU idles `rest` times the step's duration (left out of
    the step's own duration), so the calibration's mean power comes down to a serving engine's (bench/NOTES.md,
    "Calibration under the power cap"). Each row's `started_unix` is its workload's WallClock.started_unix.
    """
    frames = []
    if workloads is None:
        workloads = calibration_workloads(config.resolved_max_model_len)
    first_seq = 0
    last_save = time.perf_counter()
    with frozen_heap():
        for w, (name, groups) in enumerate(workloads):
            requests = _workload_requests(w, groups, first_seq, config.block_size)
            first_seq += len(requests)
            timed_whole = not advance or name.startswith(TIMED_WHOLE)
            sharing = any(len(g) > 4 for g in groups)  # a workload with shared prefixes: prefix caching on
            gc.collect()  # a fraction of a ms (frozen_heap); no collection pauses a timed step (paused_gc)
            with paused_gc():
                frames.append(_workload_rows(executor, config, requests, timed_whole, sharing, rest).assign(workload=name))
            if on_workload is not None and (w == len(workloads) - 1
                                            or time.perf_counter() - last_save >= save_every_s):
                on_workload(pd.concat(frames, ignore_index=True))
                last_save = time.perf_counter()
            if progress is not None:
                progress(1)
    return pd.concat(frames, ignore_index=True)


def _workload_requests(w: int, groups, first_seq: int, bs: int) -> list[tuple[int, Request]]:
    """Workload w's requests as (release step, request), in release order, numbered on from first_seq."""
    pending, seq = [], first_seq
    for count, p, o, *rest in groups:
        release, prefix, prefix_id = (list(rest) + [0, 0, 0])[:3]
        # a shared prefix: the same hash ids (so the same tokens and prefix-cache keys) in every request of it
        hashes = tuple(range((w * 64 + prefix_id) << 20, ((w * 64 + prefix_id) << 20) + prefix // bs)) or None
        for _ in range(count):
            seq += 1
            pending.append((release, Request(f"cal-{seq}", 0.0, p, o, seq_no=seq, prefix_hash_ids=hashes,
                                             hash_block_size=bs if hashes else None)))
    pending.sort(key=lambda x: x[0])
    return pending


def _workload_rows(executor, config: Config, pending: list[tuple[int, Request]], timed_whole: bool,
                   sharing: bool, rest: float = 0.0) -> pd.DataFrame:
    """One workload through the live loop: its timed steps' rows (advanced steps left out, ContextBuilding), each
    step followed by `rest` times its duration of idle GPU (run_calibration), taken out of its stitched duration;
    `gpu_time_s` is each step's device time (GPUExecutor.last_gpu_time_s), so a calibration's steps and a live run's
    can be told apart into device and host time, and `sm_clock_mhz` the SM clock while it ran (last_sm_clock_mhz)."""
    bs = config.block_size
    sched = Scheduler(without_prefix_caching(config).replace(enable_prefix_caching=sharing))
    tables: dict[int, tuple] = {}  # step -> its decode rows' and prefill chunks' block tables, as planned
    walks: dict[int, tuple[int, int]] = {}  # step -> its prefill programs' walks (not recorded columns)

    def planned(plan):  # inside the timed step: copies only (C speed), counted after the run
        tables[plan.step_id] = ([s.request.block_ids[:] for s in plan.scheduled if s.is_decode],
                                [s.request.block_ids[:] for s in plan.scheduled if not s.is_decode])

    def features_of(plan):  # the recorder's own call, keeping what it does not record
        f = StepFeatures.from_plan(plan)
        walks[plan.step_id] = (f.prefill_tile_walks, f.prefill_longest_walk)
        return f

    rested: dict[int, float] = {}  # step -> the idle time after it (rest)
    readings = DeviceReadings(executor)

    def stepped(plan, duration, outcome):  # after the step's recording, before the next step's schedule
        if plan.step_id not in context.advanced:
            readings.take(plan.step_id)
            if rest > 0:
                t0 = time.perf_counter()
                time.sleep(rest * duration)
                rested[plan.step_id] = time.perf_counter() - t0

    rec = Recorder(sched, features_of)
    context = ContextBuilding(executor, timed_whole)
    clock = WallClock()
    # Released before their step; an idle engine takes the next group at once (no step is ever empty).
    run(drive(sched, context, rec, Arrivals(pending, by_step=True), clock,
              hooks=Hooks(plan=planned if sharing else None, step=stepped)))
    steps = stitch_durations(rec.steps_frame(), set())
    steps["duration_s"] -= steps["step"].map(rested).fillna(0.0)
    readings.add_to(steps)  # as in a live run's steps
    steps["started_unix"] = clock.started_unix
    shared = {step: shared_tokens(d, p, bs) for step, (d, p) in tables.items()}
    for i, col in enumerate(("decode_shared_tokens", "prefill_shared_tokens")):
        steps[col] = steps["step"].map({k: v[i] for k, v in shared.items()}).fillna(0).astype(np.int64)
    for i, col in enumerate(WALK_COLUMNS):
        steps[col] = steps["step"].map({k: v[i] for k, v in walks.items()}).fillna(0).astype(np.int64)
    steps = steps.iloc[:-1]  # the last step has no successor to stitch to
    return steps[~steps["step"].isin(context.advanced)]


# what a calibration's rows hold beside the recorder's columns (StepFeatures): the prefill programs' walks and the
# prefill chunks' reads of shared blocks; rows saved before them get them by replay (with_replayed_walks)
REPLAYED_COLUMNS = (*WALK_COLUMNS, "prefill_shared_tokens")
class NoTime:
    """A stand-in executor: calibration workloads replayed for their plans only (each step 'takes' no time)."""

    def execute(self, plan) -> float:
        return 0.0

    advance = execute


def with_replayed_walks(rows: pd.DataFrame, config: Config, source: str) -> pd.DataFrame:
    """Calibration rows saved before the prefill walks (or the prefill chunks' shared reads) were kept, with
    REPLAYED_COLUMNS filled in by replaying their
    workloads through the scheduler without a GPU (releases go by step, so the plans do not depend on time);
    every row must meet its replayed step with the same recorded features."""
    from pagesim.errors import UserError

    if all(c in rows for c in REPLAYED_COLUMNS) or "workload" not in rows:
        return rows
    named = dict(calibration_workloads(config.resolved_max_model_len))
    wanted = list(dict.fromkeys(rows["workload"].astype(str)))
    unknown = [w for w in wanted if w not in named]
    if unknown:
        raise UserError(f"{source}: workload {unknown[0]!r} is not one of this version's calibration workloads, "
                        "so its prefill walks cannot be replayed; recalibrate")
    # every step replayed: rows saved before round 9 have a row for each (an advancing calibration's rows are a subset)
    replayed = run_calibration(NoTime(), config, workloads=[(w, named[w]) for w in wanted], advance=False)
    keys = ["workload", "step"]
    aligned = [c for c in FEATURE_COLUMNS if c in rows]  # every recorded feature the saved rows have
    merged = rows.drop(columns=[c for c in REPLAYED_COLUMNS if c in rows]).merge(
        replayed[keys + aligned + list(REPLAYED_COLUMNS)], on=keys, how="left", suffixes=("", "_replayed"),
        validate="one_to_one")
    for c in aligned:
        bad = merged[c + "_replayed"].isna() | (merged[c] != merged[c + "_replayed"])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UserError(f"{source}: row {i} (workload {merged.at[i, 'workload']}, step {merged.at[i, 'step']}) does "
                            f"not match its replayed step ({c}); the prefill walks cannot be filled in; recalibrate")
    return merged.drop(columns=[c + "_replayed" for c in aligned]).astype({c: np.int64 for c in REPLAYED_COLUMNS})


def check_calibration_rows(rows: pd.DataFrame, file: str) -> None:
    """--refit's rows before the fit: the columns it reads present, their counts whole numbers >= 0 and every
    duration_s a positive number of seconds; else a TraceError naming the file's line and column (line 1: header)."""
    from pagesim.cost.profile import INPUT_COLUMNS, OPTIONAL_COLUMNS, PREFILL_CONTEXT
    from pagesim.traces.errors import EMPTY, Described, TraceError
    from pagesim.traces.schema import numbers

    missing = [c for c in (*INPUT_COLUMNS, "duration_s") if c not in rows]
    if missing:
        raise TraceError(file, 1, None, f"a header of calibration steps; it lacks {', '.join(missing)}")
    if not len(rows):
        raise TraceError(file, None, None, "calibration steps", Described("a header and no rows"))
    counts = [c for c in (*INPUT_COLUMNS, *OPTIONAL_COLUMNS, PREFILL_CONTEXT, "num_swap_out_blocks",
                          "num_swap_in_blocks", "num_copy_blocks") if c in rows]
    for c in (*counts, "duration_s"):
        num = numbers(rows[c]).to_numpy()
        with np.errstate(invalid="ignore"):
            ok = (num > 0) if c == "duration_s" else (num >= 0) & (num == np.floor(num))
            ok &= np.isfinite(num)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            value = rows[c].iloc[i]
            value = value.item() if hasattr(value, "item") else value
            raise TraceError(file, i + 2, c, "a positive number of seconds" if c == "duration_s" else
                             "a whole number of at least 0", EMPTY if pd.isna(value) else value)


CALIBRATE_DEFAULTS = {"block_size": 16, "num_gpu_blocks": None, "max_num_batched_tokens": 8192, "rest": 0.0}


def calibrate(args) -> int:
    """`python -m pagesim calibrate --model M --out PROFILE.json`, or `--refit ROWS.csv` to refit saved steps.

    Both fit with whole calibration workloads held out in turn (fit_profile(holdout="workload")): the
    report's errors are those of models that never saw the step's workload. --refit needs no GPU: it
    refits the rows a calibration saved (PROFILE.steps.csv.gz) and keeps the measurement's environment,
    config and workloads from the profile already at --out (replacing it takes --force, as every --out),
    so the committed profile is reproducible.
    """
    from pagesim.errors import UserError, not_a_file

    max_num_seqs = 256  # calibration times every CUDA-graph decode size, 1..256
    command = "python -m pagesim " + " ".join(args.argv)
    out = prepare_output_file(args.out, args.force)  # --refit over an existing profile too: it is replaced
    if not args.refit:  # a calibration also writes its rows beside the profile
        prepare_output_file(out.with_suffix(CALIBRATION_ROWS_SUFFIX), args.force)

    def write(rows, config, extras: dict, mixed_sizes=(), phases=None) -> None:
        print(json.dumps(fit_and_write(rows, config, out, extras, command, mixed_sizes, phases), indent=2))

    if args.refit:
        timing = [f for f in ("block_size", "num_gpu_blocks", "max_num_batched_tokens", "rest")
                  if getattr(args, f) != CALIBRATE_DEFAULTS[f]]
        if timing:  # options of the timing, which --refit does not redo
            raise UserError(f"{', '.join('--' + f.replace('_', '-') for f in timing)}: options of a calibration's "
                            "timing; --refit refits rows timed already, so drop them")
        rows_path = Path(args.refit)
        if rows_path.resolve() == out.resolve():
            raise UserError(f"--out {args.out} is the --refit rows file itself; --out names the profile JSON to write")
        found = not_a_file(rows_path)
        if found:
            raise UserError(f"--refit {rows_path}: {found}; expected the *.steps.csv.gz a calibration saved")
        try:
            rows = pd.read_csv(rows_path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise UserError(f"--refit {rows_path}: not a CSV of calibration steps ({e})") from None
        except (OSError, EOFError, zlib.error) as e:  # *.gz that is not gzip (BadGzipFile), or cut short
            raise UserError(f"--refit {rows_path}: cannot read it as {'gzipped ' if rows_path.suffix == '.gz' else ''}"
                            f"CSV ({e}); expected the *.steps.csv.gz a calibration saved") from None
        check_calibration_rows(rows, str(rows_path))
        extras, mixed_sizes = {}, ()
        if out.is_file():  # the profile these rows came from: its measurement's records carry over
            try:
                previous = json.loads(out.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                previous = None
            if isinstance(previous, dict):
                extras = {k: previous[k] for k in ("environment", "config", "workloads", "swap_bandwidth", "calibration_s",
                                                   "calibration_rest") if k in previous}
                mixed_sizes = tuple(previous.get("mixed_graph_token_sizes", ()))  # the measured engine's buckets
            measured = extras.get("config") or {}
            if (measured.get("model", args.model), measured.get("gpu", args.gpu)) != (args.model, args.gpu):
                raise UserError(f"--out {out} holds a profile of {measured.get('model')} on {measured.get('gpu')}, "
                                f"not {args.model} on {args.gpu}; pass the matching --model/--gpu or another --out")
            max_num_seqs = measured.get("max_num_seqs", max_num_seqs)
        if "workloads" not in extras and "workload" in rows:
            extras["workloads"] = list(dict.fromkeys(rows["workload"].astype(str)))
        kv_dtype = (extras.get("config") or {}).get("kv_cache_dtype", args.kv_cache_dtype)
        if extras.get("config"):  # rows saved before the prefill walks were kept: replayed from the measured config
            rows = with_replayed_walks(rows, Config.from_dict(extras["config"]), f"--refit {rows_path}")
        write(rows, Config(model=args.model, gpu=args.gpu, max_num_seqs=max_num_seqs, num_gpu_blocks=1,
                           kv_cache_dtype=kv_dtype), extras, mixed_sizes)
        return 0

    import torch
    from tqdm import tqdm

    from engine.kernels.swap import measure_swap_bandwidth

    t_start = time.perf_counter()
    phases = {"startup_s": process_age_s()}  # imports and argument checks before the calibration's clock
    if not torch.cuda.is_available():
        raise UserError("calibration needs a CUDA GPU (torch.cuda.is_available() is False); "
                        "--refit ROWS.csv refits saved calibration steps without one")
    config = Config(model=args.model, gpu=args.gpu, block_size=args.block_size,
                    num_gpu_blocks=args.num_gpu_blocks, max_num_seqs=max_num_seqs,
                    max_num_batched_tokens=args.max_num_batched_tokens, kv_cache_dtype=args.kv_cache_dtype)
    executor = make_executor(config)
    config = executor.config
    t_exec = time.perf_counter()
    warm_up(executor, config)
    t_warm = time.perf_counter()
    workloads = calibration_workloads(config.resolved_max_model_len)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows_path = out.with_suffix(CALIBRATION_ROWS_SUFFIX)

    def save(rows_so_far: pd.DataFrame) -> None:  # every SAVE_EVERY_S, so an interrupted calibration can be refitted
        rows_so_far.to_csv(rows_path, index=False)

    with tqdm(total=len(workloads), desc="calibrate", unit="workload") as bar:
        rows = run_calibration(executor, config, progress=bar.update, workloads=workloads, on_workload=save,
                               rest=args.rest)
    # rows_path now holds every row (on_workload's last call), before the fit, so a failed fit can be refitted
    t_fit = time.perf_counter()
    swap = measure_swap_bandwidth(executor.kv_cache)
    phases.update(executor_s=t_exec - t_start, warmup_s=t_warm - t_exec, workloads_s=t_fit - t_warm,
                  swap_bandwidth_s=time.perf_counter() - t_fit)
    # calibration_s: the executor, warm-up and workloads (as recorded since round 3); calibration_wall_s (written
    # with the profile): the whole command, start-up, swap measurement and fit included
    write(rows, config, {"environment": environment(), "config": config.to_dict(),
                         "workloads": [w for w, _ in workloads], "swap_bandwidth": swap,
                         "calibration_s": t_fit - t_start, "calibration_rest": args.rest},
          tuple(sorted(executor.mixed_graphs)), phases)
    return 0


def register(sub) -> None:
    from pagesim.replay import add_run_options

    p = sub.add_parser("live", help="run a trace live on a CUDA GPU through the shared scheduler")
    add_run_options(p)
    prof = p.add_mutually_exclusive_group()
    prof.add_argument("--calibrate", action="store_true",
                      help="fit the profile cost model on this GPU before the run (recorded as DIR/profile.json)")
    prof.add_argument("--profile", metavar="PROFILE.json", default=None,
                      help="the profile this run is validated with (copied to DIR/profile.json)")
    p.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)  # tests: the toy model on the CPU
    p.set_defaults(func=live)
    c = sub.add_parser("calibrate", help="time the GPU executor on a grid of steps and fit a profile cost model")
    c.add_argument("--model", default="llama-3-8b")
    c.add_argument("--gpu", default="h200")
    c.add_argument("--block-size", type=positive_int, default=CALIBRATE_DEFAULTS["block_size"])
    c.add_argument("--num-gpu-blocks", type=positive_int, default=CALIBRATE_DEFAULTS["num_gpu_blocks"])
    c.add_argument("--max-num-batched-tokens", type=positive_int, default=CALIBRATE_DEFAULTS["max_num_batched_tokens"])
    c.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto",
                   help="the engine's KV cache dtype while timing (the profile records it; runs must match)")
    c.add_argument("--rest", type=non_negative_float, default=CALIBRATE_DEFAULTS["rest"], metavar="FRACTION",
                   help="idle the GPU for FRACTION x each timed step's duration after it (not timed), so the "
                        "calibration runs at a serving engine's power and clocks, not under the power cap (default 0)")
    c.add_argument("--out", required=True, help="the profile JSON to write")
    c.add_argument("--force", action="store_true", help="replace --out if it exists")
    c.add_argument("--refit", metavar="ROWS.csv", default=None,
                   help="refit the profile from calibration steps saved earlier (PROFILE.steps.csv.gz); no GPU needed")
    c.set_defaults(func=calibrate)
