#!/usr/bin/env bash
# Round 29: the engine's Gluon prefills on an H200 (bf16: engine/kernels/prefill_gluon.py, the default since round
# 28; e4m3: engine/kernels/prefill_gluon_fp8.py, the fp8 default on sm_90 since this round).
#   bash bench/h200_round29.sh OUT_DIR k    # kernels: the GPU tests of the Gluon prefills and the fp8 cache
#                                           # (OUT/gpu_tests.txt), `bench.fp8 --prefill-only` (OUT/fp8.json), the
#                                           # GPU tests of the kernels, executor (its graphs) and host tier
#                                           # (OUT/gpu_tests2.txt), `bench.kernels --prefill-only` beside
#                                           # FlashInfer (OUT/kernels.json); any sm_90 GPU
#   bash bench/h200_round29.sh OUT_DIR f    # the e4m3 Gluon prefill alone: its GPU tests, then `bench.fp8
#                                           # --prefill-only --gluon ${GLUON:-3p,3ps2,2p,3p@132}` (OUT/fp8.json)
#   bash bench/h200_round29.sh OUT_DIR l    # live (H200 only): longdoc-b with its own `live --calibrate`
#                                           # (Llama-3.1-8B at 32k), then longdoc-a with that profile (OUT/results.tgz)
# Then on any CPU: python -m pagesim validate RUN --ensemble 16 --force. Log: OUT/log.txt. Commit OUT/kernels.json (a
# --prefill-only result) as bench/results/prefill-gluon-GPU-DATE-SUFFIX.json, never kernels-*.json.
set -u
out=${1:?usage: h200_round29.sh OUT_DIR k|f|l}
MODE=${2:?usage: h200_round29.sh OUT_DIR k|f|l}
source "$(dirname "$0")/h200_lib.sh"
kernel_call "$out"
gpu_line >>"$log"
if [ "$MODE" = f ]; then  # f: the e4m3 Gluon prefill alone: its GPU tests, then bench.fp8 with launch variants
  step gpu tests of the e4m3 Gluon prefill
  timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_prefill_gluon_gpu.py -k fp8 \
      >"$out/gpu_tests.txt" 2>&1
  echo "pytest rc $?" >>"$out/gpu_tests.txt"; grep -E "passed|failed|Error" "$out/gpu_tests.txt" | tail -8 >>"$log"
  step fp8 bench
  timeout 200 python3 -m bench.fp8 --prefill-only --gluon "${GLUON:-3p,3ps2,2p,3p@132}" --out "$out/fp8.json" \
      --force 2>&1 | grep -v "UserWarning\|return F.scaled" >>"$log"
  echo "fp8 bench rc $?" >>"$log"
  step done
  exit 0
fi
if [ "$MODE" = k ]; then
  export MAX_JOBS=15 FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/fiws
  step flashinfer warm-up, in the background
  timeout 200 python3 -m bench.kernels --warm-flashinfer --out /dev/null >"$out/fi_warm.txt" 2>&1 &
  warm=$!
  step gpu tests of the two Gluon prefills and the fp8 cache
  timeout ${TEST_BUDGET:-240} python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_prefill_gluon_gpu.py \
      tests/gpu/test_fp8_gpu.py >"$out/gpu_tests.txt" 2>&1
  echo "pytest rc $?" >>"$out/gpu_tests.txt"; grep -E "passed|failed|Error" "$out/gpu_tests.txt" | tail -8 >>"$log"
  step fp8 bench
  timeout 100 python3 -m bench.fp8 --prefill-only --out "$out/fp8.json" --force 2>&1 | grep -v "UserWarning\|return F.scaled" >>"$log"
  echo "fp8 bench rc $?" >>"$log"
  step gpu tests of the kernels, the executor and the host tier
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_kernels_gpu.py \
      tests/gpu/test_executor_gpu.py tests/gpu/test_host_tier_gpu.py >"$out/gpu_tests2.txt" 2>&1
  echo "pytest rc $?" >>"$out/gpu_tests2.txt"; grep -E "passed|failed|Error" "$out/gpu_tests2.txt" | tail -8 >>"$log"
  wait $warm; echo "flashinfer warm-up rc $?" >>"$log"
  step kernels bench
  timeout 90 python3 -m bench.kernels --prefill-only --commit "${PAGESIM_GIT_COMMIT:-unknown}" \
      --out "$out/kernels.json" --force 2>&1 | grep -v "UserWarning\|return F.scaled" >>"$log"
  echo "kernels bench rc $?" >>"$log"
  step done
  exit 0
fi
OUT=$out; longdoc_windows r29
step done
