#!/usr/bin/env bash
# Round 9 (issue #14): the final H200 call of the fp8 / swap slice.
#   bash bench/h200_round9_kernel.sh OUT_DIR   (from the repository root or a copy of it)
# bench.fp8, the host tier bench (with the calibration's swap measurement on bf16 and fp8 Llama-3-8B caches), then pytest -m gpu -k "fp8 or prefill or swap or host_tier" tests/gpu/. The first call of the round
# ("first", commit 0fb515b: bench.swap_compare, since removed, the GPU swap tests, bench.fp8 with the prefill variants,
# bench.fp8_launch --grid r9, bench.host_tier_bw) is that commit's version of this script.
set -u
out=${1:?usage: h200_round9_kernel.sh OUT_DIR}
source "$(dirname "$0")/h200_lib.sh"
kernel_call "$out"
step fp8; timeout 70 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$log" 2>&1
step host_tier_bw; timeout 60 python3 -m bench.host_tier_bw --out "$out/host_tier_bw.json" --force >>"$log" 2>&1
step gpu tests
timeout 200 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or prefill or swap or host_tier" tests/gpu/ \
    >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"
tail -3 "$out/gpu_tests.txt" >>"$log"
step done
