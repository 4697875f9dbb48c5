#!/usr/bin/env bash
# Round 11 (issue #14): the H200 call of the fp8 kernel slice, run from the root of main's tree with this branch's
# changed files as an overlay beside it (.gpuwt/KERNEL11, a copy of them in the same paths):
#   bash .gpuwt/KERNEL11/bench/h200_round11_kernel.sh OUT_DIR
# 1. bench.fp8 on the tree as it is (V's columns in token order) -> OUT/fp8_before.json, the same call's baseline;
# 2. the overlay copied over the tree (V's columns in FA3's order, DecodeConfig.int_widen): bench.fp8 -> OUT/fp8.json,
#    bench.fp8_launch --grid r11 (the rule's launches with and without int_widen) -> OUT/fp8_launch.json;
# 3. pytest -m gpu -k "fp8 or decode" tests/gpu/ -> OUT/gpu_tests.txt. The log is OUT/log.txt.
set -u
out=${1:?usage: h200_round11_kernel.sh OUT_DIR}
overlay=$(cd "$(dirname "$0")/.." && pwd)
source "$overlay/bench/h200_lib.sh"
kernel_call "$out"
step fp8 before; timeout 90 python3 -m bench.fp8 --out "$out/fp8_before.json" --force >>"$log" 2>&1
cp -r "$overlay/." .
step fp8; timeout 90 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$log" 2>&1
step fp8_launch
timeout 120 python3 -m bench.fp8_launch --grid r11 --rounds 5 --out "$out/fp8_launch.json" --force >>"$log" 2>&1
step gpu tests
timeout 300 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or decode" tests/gpu/ >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"
tail -3 "$out/gpu_tests.txt" >>"$log"
step done
