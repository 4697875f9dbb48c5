#!/usr/bin/env bash
# FP8 cache (issue #14) on one H200, one device call (~3.5 min):
#   bash bench/fp8_h200.sh [OUT]
# The fp8 decode's candidate launches as graph replays (bench.fp8_launch: the per-shape rule against the others),
# bench.fp8 at the defaults, and the GPU tests of the fp8 kernels and the host tier. Each step has its own timeout;
# its log is OUT/<step>.log. (The launch sweep: python3 -m bench.fp8_tune --grid narrow --decode-only.)
set -uo pipefail
export PYTHONUNBUFFERED=1
O=${1:-${OUT:-out}}
mkdir -p "$O"
step() {  # step NAME SECONDS CMD...: run CMD with a timeout, log to OUT/NAME.log, report the exit code
  local name=$1 limit=$2; shift 2
  echo "== $(date +%T) $name: $*"
  timeout "$limit" "$@" 2>&1 | tee "$O/$name.log" | tail -n 40
  echo "== $(date +%T) $name: exit ${PIPESTATUS[0]}"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$O/nvidia-smi.txt"
step fp8_launch 120 python3 -m bench.fp8_launch --out "$O/fp8_launch.json" --force --rounds 3
step fp8_bench 50 python3 -m bench.fp8 --out "$O/fp8.json" --force
step gpu_tests 75 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or host_tier" tests/gpu/
echo "== $(date +%T) done: $O"
