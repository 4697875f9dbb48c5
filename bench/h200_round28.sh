#!/usr/bin/env bash
# Round 28 (issue #13, the paged-prefill target): the Gluon paged prefill (engine/kernels/prefill_gluon.py, FA3's
# producer warp and two consumer warpgroups; the engine's default prefill on sm_90 since this round) on the H200.
#   bash bench/h200_round28.sh OUT_DIR        # kernels: GPU tests, then bench.kernels beside the Triton kernel,
#                                             # SDPA and FlashInfer
#   bash bench/h200_round28.sh OUT_DIR l      # live: longdoc-b with its own `live --calibrate` (Llama-3.1-8B at
#                                             # 32k), then longdoc-a with that profile, on the Gluon prefill
#   bash bench/h200_round28.sh OUT_DIR p      # prefill: the Gluon GPU tests, then `bench.kernels --prefill-only`
#                                             # (the default's shape-dependent launch as "ours")
#   bash bench/h200_round28.sh OUT_DIR f      # final: mode p, then mode l
# Kernels: FlashInfer 0.5.3 (+ apache-tvm-ffi 0.1.6) is carried as wheels in .gpuwt/whl and JIT-built in the
# background first (bench.kernels --warm-flashinfer) while the GPU tests run (OUT/gpu_tests.txt: the Gluon kernel's
# own, and the kernel, model, executor and host-tier tests, whose prefill is now the Gluon kernel); then
# `bench.kernels --prefill-gluon LAUNCHES` (decode, prefill, the 8B decode step) -> OUT/kernels.json; log OUT/log.txt.
# Live: OUT/results.tgz; then on any CPU: python -m pagesim validate RUN --ensemble 16 --force.
set -u
out=${1:?usage: h200_round28.sh OUT_DIR [l]}
MODE=${2:-}
source "$(dirname "$0")/h200_lib.sh"
kernel_call "$out"
gpu_line >>"$log"
export MAX_JOBS=15 FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/fiws
if [ "$MODE" = f ] || [ "$MODE" = p ]; then
  step flashinfer warm-up, in the background
  timeout 200 python3 -m bench.kernels --warm-flashinfer --out /dev/null >"$out/fi_warm.txt" 2>&1 &
  warm=$!
  if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: the bench alone (a call short of device time)
    step gpu tests
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_prefill_gluon_gpu.py >"$out/gpu_tests.txt" 2>&1
    echo "pytest rc $?" >>"$out/gpu_tests.txt"; tail -3 "$out/gpu_tests.txt" >>"$log"
  fi
  wait $warm; echo "flashinfer warm-up rc $?" >>"$log"
  step bench
  timeout 150 python3 -m bench.kernels --prefill-only --prefill-gluon 3p,3p@132 --commit "${PAGESIM_GIT_COMMIT:-unknown}" \
      --out "$out/kernels.json" --force 2>&1 | grep -v "UserWarning\|return F.scaled" >>"$log"
  echo "bench rc $?" >>"$log"
  [ "$MODE" = p ] && { step done; exit 0; }
  MODE=l
fi
if [ "$MODE" = l ]; then
  OUT=$out; longdoc_windows r28l
  step done
  exit 0
fi
step flashinfer warm-up, in the background
timeout 240 python3 -m bench.kernels --warm-flashinfer --out /dev/null >"$out/fi_warm.txt" 2>&1 &
warm=$!
step gpu tests
timeout ${TEST_BUDGET:-260} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_prefill_gluon_gpu.py \
    tests/gpu/test_kernels_gpu.py tests/gpu/test_executor_gpu.py tests/gpu/test_host_tier_gpu.py >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"
tail -5 "$out/gpu_tests.txt" >>"$log"
wait $warm; echo "flashinfer warm-up rc $?" >>"$log"
step bench
timeout ${BENCH_BUDGET:-260} python3 -m bench.kernels --prefill-gluon "${LAUNCHES:-3p,2p,3p@132,2p@132,3@132}" \
    --commit "${PAGESIM_GIT_COMMIT:-unknown}" --out "$out/kernels.json" --force 2>&1 | grep -v "UserWarning\|return F.scaled" >>"$log"
echo "bench rc $?" >>"$log"
step done
