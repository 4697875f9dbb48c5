"""GPU kernel benchmark results (bench/results/*.json, written by `python -m bench.kernels --out ...`).

The file (bench/kernels.py):

    {"date", "gpu", "sms", "torch", "triton", "python", "flashinfer", "flashinfer_import_error", "command",
     "defaults": {...}, "ceilings": {"copy_tb_per_s", "bf16_matmul_tflop_per_s"},
     "decode": [{"batch", "context", "kv_bytes", "times_s": {method: s}, "tb_per_s": {method: TB/s},
                 "tflop_per_s": {method: TFLOP/s}, "notes": {...}, "tune"?: {...}}, ...],
     "prefill": {"tokens", "flops", "times_s", "tflop_per_s", "notes", "tune"?},
     "model_step"?: {"batch", "context", "eager_s", "graph_s", "floor_s", ...} or {"error"}}

Methods: ours, ours_graph, ours_best (with --tune), sdpa (contiguous K/V: the ceiling a paged kernel
is measured against), gather_sdpa (gather the blocks, then SDPA: the naive paged baseline), flashinfer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from pagesim.errors import UserError

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "bench" / "results"
RESULTS_DIR_ENV = "PAGESIM_KERNEL_RESULTS"  # another folder of result files (tests)


def results_root() -> Path:
    return Path(os.environ.get(RESULTS_DIR_ENV) or RESULTS_DIR)


def find_kernel_results(root: Path | None = None) -> list[Path]:
    """Result files under root, newest (by name, which carries the date) first."""
    root = results_root() if root is None else root
    return sorted(root.glob("*.json"), reverse=True) if root.is_dir() else []


def load_kernel_result(path: Path) -> dict:
    """The result file as a dict; UserError naming the file when it is not a kernel benchmark result."""
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the benchmark result ({exc})") from None
    if not isinstance(result, dict) or not isinstance(result.get("decode"), list):
        raise UserError(f"{path}: not a bench.kernels result (expected a JSON object with a 'decode' list)")
    return result


def shape_label(batch: int, context: int) -> str:
    return f"B={batch}, ctx={context}"


def decode_frame(result: dict) -> pd.DataFrame:
    """One row per (decode shape, method): shape, batch, context, method, time_us, tb_per_s, tflop_per_s,
    and vs_sdpa (time of contiguous SDPA / time of this method: 1.0 matches the ceiling)."""
    rows = []
    for case in result.get("decode", []):
        times = case.get("times_s", {})
        sdpa = times.get("sdpa")
        for method, t in times.items():
            rows.append({
                "shape": shape_label(case["batch"], case["context"]),
                "batch": case["batch"],
                "context": case["context"],
                "method": method,
                "time_us": t * 1e6,
                "tb_per_s": case.get("tb_per_s", {}).get(method),
                "tflop_per_s": case.get("tflop_per_s", {}).get(method),
                "vs_sdpa": sdpa / t if sdpa and t else None,
            })
    return pd.DataFrame(rows, columns=["shape", "batch", "context", "method", "time_us", "tb_per_s", "tflop_per_s",
                                       "vs_sdpa"])


def prefill_frame(result: dict) -> pd.DataFrame:
    """One row per prefill method: method, tokens, time_us, tflop_per_s, vs_sdpa."""
    p = result.get("prefill") or {}
    times = p.get("times_s", {})
    sdpa = times.get("sdpa")
    rows = [{"method": m, "tokens": p.get("tokens"), "time_us": t * 1e6, "tflop_per_s": p.get("tflop_per_s", {}).get(m),
             "vs_sdpa": sdpa / t if sdpa and t else None} for m, t in times.items()]
    return pd.DataFrame(rows, columns=["method", "tokens", "time_us", "tflop_per_s", "vs_sdpa"])


def measurements_table(result: dict) -> pd.DataFrame:
    """Decode and prefill rows in one table: kind, shape, method, time_us, tb_per_s, tflop_per_s, vs_sdpa."""
    decode = decode_frame(result).assign(kind="decode")
    prefill = prefill_frame(result)
    prefill = prefill.assign(kind="prefill", shape=[f"T={t}" for t in prefill["tokens"]])
    columns = ["kind", "shape", "method", "time_us", "tb_per_s", "tflop_per_s", "vs_sdpa"]
    frames = [f.reindex(columns=columns) for f in (decode, prefill) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def model_step_frame(result: dict) -> pd.DataFrame:
    """The full decode step of the 8B model (eager, CUDA graph) against its HBM floor, as label / value rows."""
    m = result.get("model_step") or {}
    if not m or "error" in m:
        return pd.DataFrame(columns=["figure", "value"])
    rows = [
        ("batch × context", f"{m['batch']} × {m['context']}"),
        ("HBM floor (weights + K/V read at the measured copy rate)", f"{m['floor_s'] * 1e3:.2f} ms"),
        ("eager step", f"{m['eager_s'] * 1e3:.2f} ms ({m['eager_ratio']:.2f}× floor)"),
        ("CUDA-graph step", f"{m['graph_s'] * 1e3:.2f} ms ({m['graph_ratio']:.2f}× floor)"),
    ]
    return pd.DataFrame(rows, columns=["figure", "value"])
