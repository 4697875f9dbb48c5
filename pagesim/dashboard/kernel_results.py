"""GPU kernel benchmark results (bench/results/*.json, written by `python -m bench.kernels --out ...`).

The file (bench/kernels.py):

    {"date", "gpu", "sms", "torch", "triton", "python", "flashinfer", "flashinfer_import_error", "command",
     "defaults", "ceilings": {"copy_tb_per_s", "bf16_matmul_tflop_per_s"},
     "decode": [{"batch", "context", "kv_bytes", "timings": {method: {"graph": s, "eager": s}},
                 "tb_per_s": {method: {mode: TB/s}}, "tflop_per_s": {method: {mode: TFLOP/s}},
                 "notes": {"sdpa_best_backend", ...}, "ratios_graph", "tune"?}, ...],
     "prefill": {"tokens", "flops", "times_s": {method: s}, "tflop_per_s": {method: TFLOP/s}, "notes", "tune"?},
     "model_step"?: {"batch", "context", "eager_s", "graph_s", "floor_s", ...} or {"error"}}

Decode methods: ours, ours_best (with --tune), flashinfer, sdpa_<backend> and gather_sdpa_<backend> for
each SDPA backend that accepts the call, and sdpa / gather_sdpa = the fastest backend: SDPA on
contiguous K/V is the ceiling a paged kernel is measured against, gather + SDPA (copy the blocks into
place, then SDPA) the naive way to run a paged cache. CUDA-graph replay ("graph") is the primary
time; "eager" includes Python launch overhead. A bare number instead of {mode: s} (older files, and
prefill) is an eager time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from pagesim.dashboard.json_shape import number, shape_problem
from pagesim.errors import UserError

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "bench" / "results"
RESULTS_DIR_ENV = "PAGESIM_KERNEL_RESULTS"  # another folder of result files (tests)


def results_root() -> Path:
    return Path(os.environ.get(RESULTS_DIR_ENV) or RESULTS_DIR)


def find_kernel_results(root: Path | None = None) -> list[Path]:
    """Kernel result files (`kernels-*.json`) under root, newest (by name, which carries the date) first.

    Other benchmarks write their results beside them (bench/results/sim-speed.json); they are not listed.
    """
    root = results_root() if root is None else root
    return sorted(root.glob("kernels-*.json"), reverse=True) if root.is_dir() else []


def load_kernel_result(path: Path) -> dict:
    """The result file as a dict; UserError naming the file when it is not a kernel benchmark result."""
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the benchmark result ({exc})") from None
    if not isinstance(result, dict) or not isinstance(result.get("decode"), list):
        raise UserError(f"{path}: not a bench.kernels result (expected a JSON object with a 'decode' list)")
    problem = shape_problem(result, RESULT_SCHEMA)
    if problem:
        raise UserError(f"{path}: not a bench.kernels result: {problem}")
    return result


# What the page reads of a result file (the module docstring's layout), as a JSON Schema (json_shape): a hand-edited or
# another tool's file is refused naming the first field it cannot read.
_TIMINGS = {"type": "object", "expected": "an object {method: seconds or {mode: seconds}}",
            "additionalProperties": {"anyOf": [{"type": "number"},
                                               {"type": "object", "additionalProperties": number(null=True)}],
                                     "expected": "seconds or {mode: seconds}"}}
_HAS_TIMINGS = {"anyOf": [{"required": ["timings"]}, {"required": ["times_s"]}]}
_OBJECT = {"type": ["object", "null"], "expected": "an object"}
MODEL_STEP_FIELDS = ("batch", "context", "floor_s", "eager_s", "eager_ratio", "graph_s", "graph_ratio")
RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "decode": {"type": "array", "minItems": 1, "expected": "at least one decode shape",
                   "items": {"type": "object", "expected": "an object with batch, context and timings",
                             "required": ["batch", "context"], **_HAS_TIMINGS,
                             "properties": {"batch": number(), "context": number(), "kv_bytes": number(null=True),
                                            "notes": _OBJECT, "tflop_per_s": _OBJECT, "timings": _TIMINGS,
                                            "times_s": _TIMINGS}}},
        "ceilings": {"type": ["object", "null"], "additionalProperties": number(null=True),
                     "expected": "an object with copy_tb_per_s and bf16_matmul_tflop_per_s"},
        "prefill": {"type": ["object", "null"], "expected": "an object with tokens, flops and times_s",
                    "properties": {"tokens": number(null=True), "flops": number(null=True), "timings": _TIMINGS,
                                   "times_s": _TIMINGS},
                    "if": {"type": "object", "minProperties": 1}, "then": _HAS_TIMINGS},
        "model_step": {"type": ["object", "null"],
                       "expected": "an object with " + ", ".join(MODEL_STEP_FIELDS[:-1]) + " and " + MODEL_STEP_FIELDS[-1],
                       # {"error": ...} when the step could not be timed; {} or null: none
                       "if": {"type": "object", "minProperties": 1, "not": {"required": ["error"]}},
                       "then": {"required": list(MODEL_STEP_FIELDS),
                                "properties": {f: number() for f in MODEL_STEP_FIELDS}}},
    },
}


def shape_label(batch: int, context: int) -> str:
    return f"B={batch}, ctx={context}"


DECODE_COLUMNS = ["shape", "batch", "context", "method", "mode", "time_us", "tb_per_s", "tflop_per_s", "vs_sdpa"]


def _modes(value) -> dict[str, float]:
    """{mode: seconds} from {"graph": s, "eager": s}, or from a bare number (an eager time)."""
    if isinstance(value, dict):
        return {m: float(v) for m, v in value.items() if isinstance(v, (int, float)) and v}
    return {"eager": float(value)} if isinstance(value, (int, float)) and value else {}


def decode_frame(result: dict) -> pd.DataFrame:
    """One row per (decode shape, method, timing mode): time_us, tb_per_s (K/V bytes read / time),
    tflop_per_s, and vs_sdpa (contiguous SDPA's time / this time, same mode: 1.0 matches the ceiling)."""
    rows = []
    for case in result.get("decode", []):
        timings = case.get("timings") or case.get("times_s") or {}
        sdpa = _modes(timings.get("sdpa"))
        flops = case.get("tflop_per_s", {})
        for method, value in timings.items():
            for mode, t in _modes(value).items():
                tflop = _modes(flops.get(method)).get(mode)
                rows.append({
                    "shape": shape_label(case["batch"], case["context"]), "batch": case["batch"],
                    "context": case["context"], "method": method, "mode": mode, "time_us": t * 1e6,
                    "tb_per_s": case["kv_bytes"] / t / 1e12 if case.get("kv_bytes") else None,
                    "tflop_per_s": tflop, "vs_sdpa": sdpa[mode] / t if mode in sdpa else None,
                })
    return pd.DataFrame(rows, columns=DECODE_COLUMNS)


def primary_mode(frame: pd.DataFrame) -> str:
    """The timing mode a chart shows: CUDA-graph replay when the file has it, else eager."""
    return "graph" if (frame["mode"] == "graph").any() else "eager"


def sdpa_backends(result: dict) -> dict[str, str]:
    """The SDPA backend that set the ceiling, per decode shape (notes.sdpa_best_backend)."""
    return {shape_label(c["batch"], c["context"]): c.get("notes", {}).get("sdpa_best_backend")
            for c in result.get("decode", []) if c.get("notes", {}).get("sdpa_best_backend")}


def prefill_frame(result: dict) -> pd.DataFrame:
    """One row per prefill method and timing mode: method, mode, tokens, time_us, tflop_per_s, vs_sdpa."""
    p = result.get("prefill") or {}
    timings = p.get("timings") or p.get("times_s") or {}
    sdpa = _modes(timings.get("sdpa"))
    rows = []
    for method, value in timings.items():
        for mode, t in _modes(value).items():
            rows.append({"method": method, "mode": mode, "tokens": p.get("tokens"), "time_us": t * 1e6,
                         "tflop_per_s": p["flops"] / t / 1e12 if p.get("flops") else None,
                         "vs_sdpa": sdpa[mode] / t if mode in sdpa else None})
    return pd.DataFrame(rows, columns=["method", "mode", "tokens", "time_us", "tflop_per_s", "vs_sdpa"])


def measurements_table(result: dict) -> pd.DataFrame:
    """Decode and prefill rows in one table: kind, shape, method, time_us, tb_per_s, tflop_per_s, vs_sdpa."""
    decode = decode_frame(result).assign(kind="decode")
    prefill = prefill_frame(result)
    prefill = prefill.assign(kind="prefill", shape=[f"T={t}" for t in prefill["tokens"]])
    columns = ["kind", "shape", "method", "mode", "time_us", "tb_per_s", "tflop_per_s", "vs_sdpa"]
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
