#!/usr/bin/env bash
# Round 10 (issue #14): the final H200 call of the fp8 decode slice.
#   bash bench/h200_round10_kernel.sh OUT_DIR   (from the repository root or a copy of it, e.g. .gpuwt/<copy>)
# bench.fp8, then pytest -m gpu -k "fp8 or decode" tests/gpu/. The first call of the round ("first", commit 78e27d3:
# bench.fp8_ptx "swap AB", the swap-AB GPU tests, bench.fp8_launch --grid r10; the swap-AB decode it timed has since
# been removed) is that commit's version of this script.
set -u
out=${1:?usage: h200_round10_kernel.sh OUT_DIR}
source "$(dirname "$0")/h200_lib.sh"
kernel_call "$out"
step fp8; timeout 90 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$log" 2>&1
step gpu tests
timeout 280 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or decode" tests/gpu/ >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"
tail -3 "$out/gpu_tests.txt" >>"$log"
step done
