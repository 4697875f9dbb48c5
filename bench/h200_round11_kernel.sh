#!/usr/bin/env bash
# Round 11 (issue #14): the H200 calls of the fp8 kernel slice, run from the root of main's tree with this branch's
# changed files as an overlay beside it (.gpuwt/KERNEL11, a copy of them in the same paths):
#   bash .gpuwt/KERNEL11/bench/h200_round11_kernel.sh OUT_DIR
# The final call: the overlay copied over the tree; bench.fp8 -> OUT/fp8.json; the fp8 decode GPU tests
# (pytest -m gpu -k decode tests/gpu/test_fp8_gpu.py) -> OUT/gpu_tests.txt; the log is OUT/log.txt. The first call
# (commit 038b0ad's version of this script) also ran bench.fp8 on main's tree before the overlay, bench.fp8_launch
# --grid r11 (the int widening, since removed) and pytest -m gpu -k "fp8 or decode" tests/gpu/.
set -u
out=${1:?usage: h200_round11_kernel.sh OUT_DIR}
overlay=$(cd "$(dirname "$0")/.." && pwd)
source "$overlay/bench/h200_lib.sh"
kernel_call "$out"
cp -r "$overlay/." .
step fp8; timeout 90 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$log" 2>&1
step gpu tests
timeout 130 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k decode tests/gpu/test_fp8_gpu.py >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"
tail -3 "$out/gpu_tests.txt" >>"$log"
step done
