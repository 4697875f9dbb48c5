#!/usr/bin/env bash
# Round 29 (issue #13): the engine on its round-28 default (the Gluon paged prefill, persistent grid up to 2,048
# query tokens) through every GPU test and two recorded windows, in one call on an H200.
#   bash bench/h200_round29.sh OUT_DIR      # the GPU tests (the Gluon kernel's, kernels, executor with its graphs,
#                                           # host tier: OUT/gpu_tests.txt), `bench.kernels --prefill-only` beside
#                                           # FlashInfer (OUT/kernels.json), then longdoc-b with its own
#                                           # `live --calibrate` and longdoc-a with that profile (OUT/results.tgz)
#   SKIP_LIVE=1 ...                         # the tests and the bench only (any sm_90 GPU)
# Then on any CPU: python -m pagesim validate RUN --ensemble 16 --force. Log: OUT/log.txt.
set -u
out=${1:?usage: h200_round29.sh OUT_DIR}
source "$(dirname "$0")/h200_lib.sh"
kernel_call "$out"
gpu_line >>"$log"
export MAX_JOBS=15 FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/fiws
step flashinfer warm-up, in the background
timeout 200 python3 -m bench.kernels --warm-flashinfer --out /dev/null >"$out/fi_warm.txt" 2>&1 &
warm=$!
step gpu tests
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_prefill_gluon_gpu.py \
    tests/gpu/test_kernels_gpu.py tests/gpu/test_executor_gpu.py tests/gpu/test_host_tier_gpu.py >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"; tail -5 "$out/gpu_tests.txt" >>"$log"
wait $warm; echo "flashinfer warm-up rc $?" >>"$log"
step bench
timeout 120 python3 -m bench.kernels --prefill-only --commit "${PAGESIM_GIT_COMMIT:-unknown}" \
    --out "$out/kernels.json" --force 2>&1 | grep -v "UserWarning\|return F.scaled" >>"$log"
echo "bench rc $?" >>"$log"
[ -n "${SKIP_LIVE:-}" ] && { step done; exit 0; }
OUT=$out; S=r29; D=$(date -u +%F)
live_call >>"$log"
gpu_line | grep -q H200 || { echo "not an H200: $(gpu_line); nothing recorded" >>"$log"; exit 3; }
clocks_start 50
window_longdoc_b_calibrated "$S" >>"$log" 2>&1
window_longdoc_a "$S" "$R/live/longdoc-b-$S/profile.json" >>"$log" 2>&1
clocks_stop
runs_summary "$R" >>"$log"; pack
step done
