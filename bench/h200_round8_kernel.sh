#!/usr/bin/env bash
# Round 8 (issue #14): the fp8 prefill with both products in e4m3 (PrefillConfig.pv_fp8) on the H200, in one call:
# bench.fp8 (decode defaults; prefill default and pv_fp8 at 2-4 stages), the GPU tests, then the r8 sweep.
#   bash bench/h200_round8_kernel.sh OUT_DIR [first]   (from the repository root or a copy of it; "first": the first
#   call's order and selection: sweep, bench.fp8, tests/gpu/test_fp8_gpu.py -k "prefill or nan or engine_effect")
set -u
out=${1:?usage: h200_round8_kernel.sh OUT_DIR [first]}
whl=../whl; [ -d "$whl" ] || whl=.gpuwt/whl  # the carried wheels (simpy ...): from .gpuwt/<copy> or the repo root
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$whl"/*.whl
export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/log.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$out/log.txt" 2>&1
sweep() { timeout "$1" python3 -m bench.fp8_tune --grid r8 --prefill-only --budget-s 40 --out "$out/fp8_tune_r8.json" \
    --force >>"$out/log.txt" 2>&1; }
if [ "${2:-}" = first ]; then
    sweep 100
    timeout 60 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$out/log.txt" 2>&1
    timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_fp8_gpu.py \
        -k "prefill or nan or engine_effect" >"$out/gpu_tests.txt" 2>&1
else
    timeout 60 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$out/log.txt" 2>&1
    timeout 125 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or prefill or kernel" tests/gpu/ \
        >"$out/gpu_tests.txt" 2>&1
fi
echo "pytest rc $?" >>"$out/gpu_tests.txt"
tail -3 "$out/gpu_tests.txt" >>"$out/log.txt"
[ "${2:-}" = first ] || sweep 45
