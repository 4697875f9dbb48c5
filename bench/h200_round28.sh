#!/usr/bin/env bash
# Round 28 (issue #13, the paged-prefill target): the Gluon paged prefill (engine/kernels/prefill_gluon.py, FA3's
# producer warp and two consumer warpgroups) on the H200, beside our Triton kernel, SDPA and FlashInfer.
#   bash bench/h200_round28.sh OUT_DIR
# FlashInfer 0.5.3 (+ apache-tvm-ffi 0.1.6) is carried as wheels in .gpuwt/whl and JIT-built in the background first
# (bench.kernels --warm-flashinfer); meanwhile the Gluon GPU tests run (OUT/gpu_tests.txt). Then
# `bench.kernels --prefill-only --prefill-gluon 2,3` -> OUT/kernels.json; the log is OUT/log.txt.
set -u
out=${1:?usage: h200_round28.sh OUT_DIR}
source "$(dirname "$0")/h200_lib.sh"
kernel_call "$out"
gpu_line >>"$log"
export MAX_JOBS=15 FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/fiws
step flashinfer warm-up, in the background
timeout 240 python3 -m bench.kernels --warm-flashinfer --out /dev/null >"$out/fi_warm.txt" 2>&1 &
warm=$!
step gpu tests
timeout 200 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_prefill_gluon_gpu.py >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"
tail -5 "$out/gpu_tests.txt" >>"$log"
wait $warm; echo "flashinfer warm-up rc $?" >>"$log"
step bench
timeout 300 python3 -m bench.kernels --prefill-only --prefill-gluon "${STAGES:-2,2p,3,3p}" --commit "${PAGESIM_GIT_COMMIT:-unknown}" \
    --out "$out/kernels.json" --force >>"$log" 2>&1
echo "bench rc $?" >>"$log"
step done
