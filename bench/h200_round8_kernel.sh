#!/usr/bin/env bash
# Round 8 (issue #14): the fp8 prefill with both products in e4m3 (PrefillConfig.pv_fp8) on the H200, in one call:
# the r8 sweep, then bench.fp8 (decode defaults; prefill default and pv_fp8 at 2 and 3 stages), then the GPU tests.
#   bash bench/h200_round8_kernel.sh $OUT      (run from the repository root or a copy of it)
set -u
out=${1:?usage: h200_round8_kernel.sh OUT_DIR}
python3 -m pip install -q --no-index --no-deps --target /tmp/site ../whl/*.whl 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps --target /tmp/site ../../.gpuwt/whl/*.whl
export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/log.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$out/log.txt" 2>&1
timeout 100 python3 -m bench.fp8_tune --grid r8 --prefill-only --budget-s 60 --out "$out/fp8_tune_r8.json" --force \
    >>"$out/log.txt" 2>&1
timeout 60 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$out/log.txt" 2>&1
timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_fp8_gpu.py \
    -k "prefill or nan or engine_effect" >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"
tail -5 "$out/gpu_tests.txt" >>"$out/log.txt"
