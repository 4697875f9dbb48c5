"""The GPU benchmarks' option checks, which run before any GPU work: on a machine without CUDA they end with a
one-line error (no traceback), and bench.kernels refuses a prefill-only result named as a full one before it starts
(the dashboard lists kernels-*.json as decode results; round 29's first such file broke its page)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def run_bench(module: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=120)


def test_a_prefill_only_kernels_result_cannot_take_a_full_results_name(tmp_path):
    done = run_bench("bench.kernels", "--prefill-only", "--out", str(tmp_path / "kernels-h100-today.json"))
    assert done.returncode == 2 and "prefill-gluon-*.json" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "kernels-h100-today.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without CUDA gets")
@pytest.mark.parametrize("module, extra", [("bench.kernels", ["--prefill-only"]), ("bench.fp8", ["--prefill-only"]),
                                           ("bench.prefill_ncu", ["--cache", "fp8"]), ("bench.fp8_decode_layers", [])])
def test_the_gpu_benchmarks_say_they_need_a_gpu(tmp_path, module, extra):
    out = ["--out", str(tmp_path / "result.json")] if module != "bench.prefill_ncu" else []
    done = run_bench(module, *extra, *out)
    assert done.returncode != 0 and "needs a CUDA GPU" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "result.json").exists()


def test_a_gluon_launch_spec_reads_as_the_config_it_names():
    """bench.fp8 --gluon: STAGES[p][sN][@N]; what a spec leaves out is the default's; a bad spec is refused with the
    form expected."""
    from bench.fp8 import gluon_fp8_config
    from engine.kernels.prefill_gluon_fp8 import DEFAULT_CONFIG

    cfg = gluon_fp8_config("2ps4@132")
    assert (cfg.num_stages, cfg.pingpong, cfg.num_staging, cfg.persistent) == (2, True, 4, 132)
    plain = gluon_fp8_config("3")
    assert (plain.pingpong, plain.num_staging, plain.persistent) == (False, DEFAULT_CONFIG.num_staging, 0)
    assert (plain.gather_regs, plain.loader_regs, plain.consumer_regs) == (
        DEFAULT_CONFIG.gather_regs, DEFAULT_CONFIG.loader_regs, DEFAULT_CONFIG.consumer_regs)
    with pytest.raises(ValueError, match=r"STAGES\[p\]\[sN\]"):
        gluon_fp8_config("3pw4")


@pytest.mark.parametrize("value", ["512", "512:x", "4096:512", "0:16"])
def test_a_bad_prefill_shape_is_refused_before_any_work(tmp_path, value):
    done = run_bench("bench.fp8", "--prefill-only", "--prefill-shape", value, "--out", str(tmp_path / "r.json"))
    assert done.returncode == 2 and "--prefill-shape" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("module, extra, flag", [
    ("bench.prefill_ncu", ["--cache", "fp8", "--shape", "4096:512"], "--shape"),
    ("bench.prefill_ncu", ["--cache", "fp8", "--gluon", "3pw4"], "--gluon: '3pw4' is not STAGES[p][sN][@N]"),
    ("bench.fp8", ["--prefill-only", "--gluon", "3p,3pf"], "--gluon: '3pf' is not STAGES[p][sN][@N]"),
    ("bench.fp8_decode_layers", ["--layers", "1"], "--layers 1: expected at least 2"),
    ("bench.fp8_decode_layers", ["--splits", "0.5,x"], "--splits '0.5,x': expected comma-separated numbers")])
def test_bad_options_are_refused_before_any_work(tmp_path, module, extra, flag):
    out = ["--out", str(tmp_path / "r.json")] if module != "bench.prefill_ncu" else []
    done = run_bench(module, *extra, *out)
    assert done.returncode == 2 and flag in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r.json").exists()
