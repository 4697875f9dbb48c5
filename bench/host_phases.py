"""Where a step's host time goes, live against the calibration (issue #13, round 47; GPU).

bench/decode_bias.py (round 46, bench/results/decode-bias-r46.json) put part of the live windows' level in host time:
a graph decode step's wall time less its device time was 0.14-0.46 ms at 8-24 rows live against 0.09-0.18 ms in the
calibration, and in the k-shot window it grew with the waiting queue and with the rows' summed context. This times the
host-side parts of every step with perf_counter wrappers, once over calibration workloads (run_calibration, as
`calibrate` runs them) and once over a live window (`python -m pagesim live ...`, on a fresh engine), and writes the
per-step table and, per phase, the median of the decode-only steps by batch size in both:

- release: Arrivals.release at the loop's top (the step that follows);  schedule: Scheduler.schedule;
- execute: GPUExecutor.execute, of which forward (GPUExecutor._forward: the host's preparation up to the graph's
  launch), rows (GPUExecutor._table_rows), launch (CUDAGraph.replay), clock (SmClock.read); and the executor's own
  device time (gpu_time, between its CUDA events);
- finish: Scheduler.finish_step;  record: Recorder.record_step.

Each step also keeps its queue_host (GPUExecutor.last_queue_host_s), its wall time (unix) and the core its thread ran
on (cpu; round 48: bench/host_modes.sh).

Each wrapper costs ~0.3 us (measured on a 2-core CPU like CI's), the same in both settings. Round 47's committed
results (bench/results/host-phases-h100-2026-12-07-r47-*) were taken with the keying inside the timed span: their
`schedule` figures hold ~2 us of the wrapper's own bookkeeping (its sum over the step's rows) in both settings.

    python3 -m bench.host_phases --out $OUT/host-phases.json [--workloads steady-b12,steady-b24,kshot-b16-p1536] \\
        -- traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \\
           --watermark 0.01 --out $OUT/live/kshot-phases
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PHASES = ("release", "schedule", "execute", "forward", "rows", "launch", "clock", "finish", "record")
# what the summary gives per batch size: the phases, the device time, the host's queueing within it (the executor's
# last_queue_host_s) and execute's own time outside the device events
SUMMARY_COLUMNS = (*PHASES, "gpu_time", "queue_host", "host")


class Phases:
    """Per (scheduler, step) host seconds of each phase; the scheduler numbered in order of first appearance."""

    def __init__(self):
        self.rows: dict[tuple[int, int], dict] = {}
        self.schedulers: dict[int, int] = {}
        self.current: tuple[int, int] | None = None  # the step the executor runs now
        self.setting = ""

    def key(self, scheduler, step_id: int) -> tuple[int, int]:
        n = self.schedulers.setdefault(id(scheduler), len(self.schedulers))
        k = (n, step_id)
        if k not in self.rows:
            self.rows[k] = {"setting": self.setting, "run": n, "step": step_id}
        return k

    def add(self, key, phase: str, seconds: float) -> None:
        if key is not None:
            row = self.rows[key]
            row[phase] = row.get(phase, 0.0) + seconds


def timed_method(phases: Phases, cls, name: str, phase: str, key_of, clock=time.perf_counter) -> None:
    """Replace `cls.name` by a wrapper adding each call's seconds to `phase` of the step `key_of(args, result)` names
    (None: no step). The seconds are read before the keying, whose bookkeeping is not the phase's."""
    inner = getattr(cls, name)

    @functools.wraps(inner)
    def timed(*args, **kwargs):
        t = clock()
        out = inner(*args, **kwargs)
        seconds = clock() - t
        phases.add(key_of(args, out), phase, seconds)
        return out

    setattr(cls, name, timed)


def _cpu() -> int:
    """The CPU this thread ran on last (/proc/thread-self/stat's 39th field; -1 where unreadable): read after a
    step's timed spans, to tell whether a slow stretch of host time follows the thread to another core."""
    try:
        return int(Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return -1


def install(phases: Phases) -> None:
    """Wrap the loop's parts (the classes' methods, so every scheduler and executor made after is timed)."""
    import torch

    import engine.live
    from engine.executor import GPUExecutor
    from engine.sm_clock import SmClock
    from pagesim.loop import Arrivals
    from pagesim.recorder import Recorder
    from pagesim.scheduler import Scheduler

    def wrap(cls, name, phase, key_of):
        timed_method(phases, cls, name, phase, key_of)

    wrap(Arrivals, "release", "release", lambda a, out: phases.key(a[1], a[1].step_id))

    def schedule_key(a, plan):
        sched = a[0]
        k = phases.key(sched, plan.step_id)
        row = phases.rows[k]
        row.update(batch=len(plan.scheduled), prefill_tokens=plan.num_prefill_tokens,
                   decode_tokens=plan.num_decode_tokens, waiting=len(sched.waiting), running=len(sched.running),
                   context=sum(s.num_computed_tokens for s in plan.scheduled))
        phases.current = k
        return k

    wrap(Scheduler, "schedule", "schedule", schedule_key)
    wrap(Scheduler, "finish_step", "finish", lambda a, out: phases.key(a[0], a[1].step_id))
    wrap(Recorder, "record_step", "record", lambda a, out: phases.key(a[0].sched, a[3].step_id))

    def execute_key(a, out):
        k = phases.current
        if k is not None:
            phases.rows[k].update(gpu_time=getattr(a[0], "last_gpu_time_s", None),
                                  queue_host=getattr(a[0], "last_queue_host_s", None), unix=time.time(), cpu=_cpu())
        return k

    wrap(GPUExecutor, "execute", "execute", execute_key)
    warm = engine.live.warm_up

    @functools.wraps(warm)
    def tagged_warm_up(*args, **kwargs):  # its steps apart from the measured ones
        setting, phases.setting = phases.setting, "warm-up"
        try:
            return warm(*args, **kwargs)
        finally:
            phases.setting = setting

    engine.live.warm_up = tagged_warm_up
    for cls, name, phase in ((GPUExecutor, "_forward", "forward"), (GPUExecutor, "_table_rows", "rows"),
                             (torch.cuda.CUDAGraph, "replay", "launch"), (SmClock, "read", "clock")):
        wrap(cls, name, phase, lambda a, out: phases.current)


def run_workloads(names: list[str], max_model_len: int | None) -> None:
    """The named calibration workloads on an engine of the calibration's default config, as `calibrate` runs them."""
    import torch

    import engine.live
    from engine.calibration import calibration_workloads, run_calibration
    from engine.device_gpu import device_gpu
    from pagesim.config import Config

    config = Config(model="llama-3-8b", gpu=device_gpu(None, "calibrate")[0])
    if max_model_len:
        config = config.replace(max_model_len=max_model_len)
    every = dict(calibration_workloads(config.resolved_max_model_len))
    missing = [n for n in names if n not in every]
    if missing:
        raise SystemExit(f"--workloads: no calibration workload {', '.join(missing)}; expected some of {', '.join(every)}")
    executor = engine.live.make_executor(config)
    engine.live.warm_up(executor, executor.config)
    run_calibration(executor, executor.config, workloads=[(n, every[n]) for n in names])
    del executor
    gc.collect()
    torch.cuda.empty_cache()


def summary(frame) -> dict:
    """Per setting and decode batch size: the decode-only steps' count and median milliseconds of each phase."""
    d = frame[(frame["prefill_tokens"] == 0) & (frame["decode_tokens"] > 0)].copy()
    d["host"] = d["execute"] - d["gpu_time"]
    cols = [c for c in SUMMARY_COLUMNS if c in d]
    out = {}
    d = d[d["setting"] != "warm-up"]
    for (setting, batch), g in d.groupby(["setting", "batch"]):
        med = (g[cols].fillna(0.0).median() * 1e3).round(4).to_dict()
        med.update(steps=len(g), context_median=float(g["context"].median()), waiting_median=float(g["waiting"].median()))
        out.setdefault(setting, {})[int(batch)] = med
    return out


def main() -> int:
    argv = sys.argv[1:]
    live_args = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the result JSON; its per-step table beside it (.steps.parquet)")
    ap.add_argument("--workloads", default="steady-b12,steady-b24,kshot-b16-p1536,kshot-b32-p1536,served-b24",
                    help="calibration workloads to time (comma-separated; '' for none)")
    ap.add_argument("--max-model-len", type=int, default=None, help="the calibration engine's max_model_len")
    args = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    import pandas as pd

    from pagesim.cli import main as pagesim_main
    from pagesim.outputs import check_output_file

    check_output_file(ap, args.out)
    phases = Phases()
    install(phases)
    names = [n for n in args.workloads.split(",") if n]
    if names:
        phases.setting = "calibration"
        run_workloads(names, args.max_model_len)
    if live_args:
        phases.setting = "live"
        rc = pagesim_main(["live", *live_args])
        if rc:
            return rc
    frame = pd.DataFrame(list(phases.rows.values()))
    frame.to_parquet(Path(args.out).with_suffix(".steps.parquet"), index=False)
    import torch

    from pagesim.outputs import git_commit

    result = {"bench": "host_phases", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "commit": git_commit(),
              "live_args": live_args, "workloads": names, "decode_ms_by_batch": summary(frame)}
    Path(args.out).write_text(json.dumps(result, indent=1))
    for setting, by_batch in result["decode_ms_by_batch"].items():
        print(setting)
        for b, med in sorted(by_batch.items()):
            print(f"  {b:3d} rows, {med['steps']:5d} steps: " + " ".join(f"{k} {med[k]:.3f}" for k in SUMMARY_COLUMNS if k in med))
    return 0


if __name__ == "__main__":
    sys.exit(main())
