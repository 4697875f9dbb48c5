"""Small result files for the dashboard tests: a live run directory and a kernel benchmark result.

Neither is a real GPU measurement. The "live" run is a simulation with a slower cost model (1 ms of
step overhead) standing in for the GPU, so live and simulated differ the way a real run would; the
kernel result has bench/kernels.py's schema with made-up times. Both exist only so the Sim vs Live and
Kernels pages can be tested before real results are committed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pagesim.config import Config
from pagesim.cost.roofline import RooflineCostModel
from pagesim.metrics import summarize_run
from pagesim.results import requests_for_disk
from pagesim.simulator import simulate
from pagesim.traces.synth import synthesize


def write_live_run(path: Path, num_requests: int = 40) -> Path:
    """A live run directory with every file of the schema (pagesim/dashboard/live_runs.py)."""
    path.mkdir(parents=True, exist_ok=True)
    trace = synthesize("sharegpt", num_requests=num_requests, rate=20.0, seed=1)
    config = Config(num_gpu_blocks=128)
    live = simulate(trace, config, RooflineCostModel(config, step_overhead_s=1e-3))
    sim = simulate(trace, config, RooflineCostModel(config))
    live_summary, sim_summary = summarize_run(live), summarize_run(sim)
    summary = {"config": config.to_dict(),
               "trace": {"name": trace.name, "rows": len(trace.df), "span_s": float(trace.df["arrival_time_s"].max())},
               "runs": {"live": live_summary}, "hardware": {"gpu": "fixture (no GPU)"},
               "software": {"python": "3.11"}}
    (path / "summary.json").write_text(json.dumps(summary, default=float))
    live.steps.assign(run="live", gpu_time_s=live.steps["duration_s"] * 0.9).to_parquet(path / "steps.parquet")
    requests_for_disk(live.requests.assign(run="live")).to_parquet(path / "requests.parquet")
    rng = np.random.default_rng(0)
    measured = live.steps["duration_s"].to_numpy()
    predicted = measured * (1 + rng.normal(0, 0.1, len(measured)))
    validation_steps = live.steps[["step", "time_s"]].assign(measured_s=measured, predicted_s=predicted)
    validation_steps.to_parquet(path / "validation_steps.parquet")
    ape = np.abs(predicted / measured - 1)
    request_level = {}
    for metric in ("ttft_s", "e2e_s"):
        for p in ("p50", "p99"):
            a, b = live_summary[metric][p], sim_summary[metric][p]
            request_level[f"{metric}_{p}"] = {"live": a, "sim": b, "rel_error": (b - a) / a}
    validation = {
        "cost_model": {"kind": "roofline"},
        "step_level": {"mape": float(ape.mean()), "p90_ape": float(np.percentile(ape, 90)), "n_steps": len(ape)},
        "decisions": {"n_steps_compared": len(ape), "n_steps_differing": 0,
                      "preemptions_live": live_summary["num_preemptions"], "preemptions_sim": sim_summary["num_preemptions"]},
        "request_level": request_level,
    }
    (path / "validation.json").write_text(json.dumps(validation, default=float))
    sim.steps.assign(run="sim").to_parquet(path / "sim_steps.parquet")
    sim.requests.assign(run="sim").to_csv(path / "sim_requests.csv", index=False)
    return path


DECODE_SHAPES = [(1, 32768), (16, 4096), (64, 4096), (256, 1024)]
# Fraction of the copy rate each method reaches (made up); sdpa and gather_sdpa are the fastest backend.
METHOD_SPEED = {"sdpa_flash": 0.85, "sdpa_cudnn": 1.0, "gather_sdpa_flash": 0.3, "gather_sdpa_cudnn": 0.35,
                "ours": 0.95, "ours_best": 0.97, "flashinfer": 0.9}


def kernel_result(copy_tb_per_s: float = 4.3) -> dict:
    """A dict with bench/kernels.py's schema (decode shapes, prefill, ceilings, model step); made-up times."""
    decode = []
    for batch, ctx in DECODE_SHAPES:
        kv_bytes = 2 * batch * ctx * 8 * 128 * 2
        flops = 4 * batch * 32 * ctx * 128
        timings = {m: {"graph": kv_bytes / (copy_tb_per_s * 1e12 * f), "eager": kv_bytes / (copy_tb_per_s * 1e12 * f) + 2e-5}
                   for m, f in METHOD_SPEED.items()}
        timings["ours_best"].pop("eager")
        timings["sdpa"], timings["gather_sdpa"] = dict(timings["sdpa_cudnn"]), dict(timings["gather_sdpa_cudnn"])
        decode.append({"batch": batch, "context": ctx, "kv_bytes": kv_bytes, "timings": timings,
                       "notes": {"sdpa_best_backend": "cudnn", "gather_sdpa_best_backend": "cudnn", "auto_splits": 4},
                       "tb_per_s": {m: {k: kv_bytes / t / 1e12 for k, t in v.items()} for m, v in timings.items()},
                       "tflop_per_s": {m: {k: flops / t / 1e12 for k, t in v.items()} for m, v in timings.items()}})
    tokens = 4096
    pflops = 2 * tokens * tokens * 32 * 128
    ptimes = {"sdpa_flash": pflops / 275e12, "sdpa_cudnn": pflops / 500e12, "sdpa": pflops / 500e12,
              "ours": pflops / 310e12}
    return {
        "date": "2026-11-29T10:00:00+00:00", "gpu": "Fixture GPU", "sms": 132, "torch": "2.13.0", "triton": "3.7.1",
        "python": "3.11.7", "flashinfer": "0.5.3", "flashinfer_import_error": None,
        "command": "python -m bench.kernels --out fixture.json", "defaults": {},
        "ceilings": {"copy_tb_per_s": copy_tb_per_s, "bf16_matmul_tflop_per_s": 780.0},
        "decode": decode,
        "prefill": {"tokens": tokens, "flops": pflops, "times_s": ptimes, "notes": {"sdpa_best_backend": "cudnn"},
                    "tflop_per_s": {m: pflops / t / 1e12 for m, t in ptimes.items()}},
        "model_step": {"batch": 64, "context": 1024, "build_s": 3.0, "logits_finite": True,
                       "weight_bytes_read": 14e9, "kv_bytes_read": 8.6e9, "floor_s": 5.3e-3, "eager_s": 9.1e-3,
                       "graph_s": 6.2e-3, "eager_ratio": 1.72, "graph_ratio": 1.17},
    }


def write_kernel_result(folder: Path, name: str = "kernels-fixture-2026-11-29.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(kernel_result(), indent=1))
    return path
