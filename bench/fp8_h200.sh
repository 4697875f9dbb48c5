#!/usr/bin/env bash
# FP8 cache with V stored transposed per block (issue #14) on one H200, one device call (~3.5 min):
#   bash bench/fp8_h200.sh [OUT]
# GPU tests of the fp8 kernels and the host tier, the short launch sweep (bench.fp8_tune --grid small), and
# bench.fp8 at the fp8 defaults. Each step has its own timeout; its log is OUT/<step>.log.
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
step fp8_tune 100 python3 -m bench.fp8_tune --out "$O/fp8_tune.json" --force --budget-s 60 --grid small
step fp8_bench 50 python3 -m bench.fp8 --out "$O/fp8.json" --force
step gpu_tests 75 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or host_tier" tests/gpu/
echo "== $(date +%T) done: $O"
