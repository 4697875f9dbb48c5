#!/usr/bin/env bash
# Round 10 (issue #14): the H200 calls of the swap-AB fp8 decode slice.
#   bash bench/h200_round10_kernel.sh OUT_DIR first   the swap-AB decode's PTX on the device's Triton, its GPU tests,
#                                                     and bench.fp8_launch --grid r10 (candidates beside the rule and bf16)
#   bash bench/h200_round10_kernel.sh OUT_DIR         the final call: bench.fp8 and pytest -m gpu -k "fp8 or decode"
# From the repository root or a copy of it (.gpuwt/<copy>, the carried wheels in ../whl).
set -u
out=${1:?usage: h200_round10_kernel.sh OUT_DIR [first]}
mode=${2:-final}
whl=../whl; [ -d "$whl" ] || whl=.gpuwt/whl
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site "$whl"/*.whl
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
log=$out/log.txt
step() { echo "== $(date +%T) $*" >>"$log"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$log" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$log" 2>&1
echo "commit ${PAGESIM_GIT_COMMIT:-unknown} mode $mode" >>"$log"
if [ "$mode" = first ]; then
  step ptx; timeout 45 python3 -m bench.fp8_ptx "swap AB" >"$out/ptx.txt" 2>&1
  step gpu tests swap_ab
  timeout 120 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "swap_ab or swap-ab" tests/gpu/test_fp8_gpu.py \
      >"$out/gpu_tests_first.txt" 2>&1
  echo "pytest rc $?" >>"$out/gpu_tests_first.txt"
  tail -2 "$out/gpu_tests_first.txt" >>"$log"
  step fp8_launch
  timeout 150 python3 -m bench.fp8_launch --grid r10 --rounds 3 --workers 12 --out "$out/fp8_launch.json" --force \
      >>"$log" 2>&1
else
  step fp8; timeout 90 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$log" 2>&1
  step gpu tests
  timeout 280 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or decode" tests/gpu/ >"$out/gpu_tests.txt" 2>&1
  echo "pytest rc $?" >>"$out/gpu_tests.txt"
  tail -3 "$out/gpu_tests.txt" >>"$log"
fi
step done
