#!/usr/bin/env bash
# Issue #14 (FP8 KV cache, host offload tier) on one H200. Everything is written under OUT ($OUT on the device).
#   bash bench/h200_round3.sh bench [OUT]   # fp8_tune sweep, host-tier bandwidth, fp8/host_tier GPU tests, bench.fp8 (~8 min)
#   bash bench/h200_round3.sh live  [OUT]   # fp8 calibration, one live FP8 run and one live offload run on a
#                                           #   prefix-heavy window, each followed by `pagesim validate` (~7 min)
#   bash bench/h200_round3.sh all   [OUT]   # both (more than one 10-minute device call: run them separately there)
#   bash bench/h200_round3.sh final [OUT]   # one call: fp8_tune --grid small, bench.fp8 at the fp8 defaults, GPU tests,
#                                           #   host-tier bandwidth, the live part (~8 min)
# Each step has its own timeout, so one that hangs does not take the others with it; its log is OUT/<step>.log.
set -uo pipefail
export PYTHONUNBUFFERED=1
PART=${1:-bench}
O=${2:-${OUT:-out}}
P=results/profiles/h200-llama-3-8b-2026-11-30.json
TRACE=traces/kshot-shared-prefix-500.jsonl   # 4 shared 1-2k-token prefixes, 90% prefix share
mkdir -p "$O/live"
step() {  # step NAME SECONDS CMD...: run CMD with a timeout, log to OUT/NAME.log, report the exit code
  local name=$1 limit=$2; shift 2
  echo "== $(date +%T) $name: $*"
  timeout "$limit" "$@" 2>&1 | grep -v "req/s\]\|it/s\]\|sim s/s\]" | tee "$O/$name.log"
  echo "== $(date +%T) $name: exit ${PIPESTATUS[0]}"
}
fp8_tune() { step fp8_tune "$1" python3 -m bench.fp8_tune --out "$O/fp8_tune.json" --force --budget-s "$2" "${@:3}"; }
host_tier_bw() {
  step host_tier_bw 60 python3 -m bench.host_tier_bw --out "$O/host_tier_bw.json" --force \
      --profile "$P" --profile-out "$O/profile-host-tier.json"
}
gpu_tests() {
  step gpu_tests 170 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or host_tier" tests/gpu/ \
      --junitxml="$O/gpu_tests.xml"
}
fp8_bench() { step fp8_bench 90 python3 -m bench.fp8 --out "$O/fp8.json" --force; }
live_runs() {
  # Prefix-heavy window: 600 GPU blocks keep the 4 shared prefixes under pressure; the host tier is 4x that (4.7 GiB
  # of bf16 blocks). Simulated beforehand (pagesim replay, same options): GPU-only hit rate 0.82, with the host tier
  # 0.885 (0.066 from the host). The fp8 run needs a profile timed with an fp8 cache (make_cost_model refuses a
  # bf16 one), so it is calibrated first; the offload run's profile carries the measured host-tier bandwidth.
  step calibrate_fp8 240 python3 -m pagesim calibrate --model llama-3-8b --kv-cache-dtype fp8 \
      --out "$O/profile-fp8.json" --force
  [ -f "$O/profile-host-tier.json" ] || host_tier_bw
  step live_fp8 150 python3 -m pagesim live "$TRACE" --limit 150 --enable-prefix-caching --num-gpu-blocks 600 \
      --watermark 0.01 --kv-cache-dtype fp8 --profile "$O/profile-fp8.json" --out "$O/live/fp8-kshot" --force
  step validate_fp8 90 python3 -m pagesim validate "$O/live/fp8-kshot" --force
  step live_offload 150 python3 -m pagesim live "$TRACE" --limit 150 --enable-prefix-caching --num-gpu-blocks 600 \
      --watermark 0.01 --kv-offloading-size 4.7 --profile "$O/profile-host-tier.json" --out "$O/live/offload-kshot" --force
  step validate_offload 90 python3 -m pagesim validate "$O/live/offload-kshot" --force
}
case "$PART" in
  bench) nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$O/nvidia-smi.txt"
         fp8_tune 270 210; host_tier_bw; gpu_tests; fp8_bench ;;
  live) live_runs ;;
  all) fp8_tune 270 210; host_tier_bw; gpu_tests; fp8_bench; live_runs ;;
  final)  # one 10-minute call: a short sweep (num_stages 1, prefetch), the defaults' benchmark, GPU tests, live runs
    fp8_tune 150 100 --grid small; fp8_bench; gpu_tests; host_tier_bw; live_runs ;;
  *) echo "usage: bash bench/h200_round3.sh bench|live|all|final [OUT]"; exit 2 ;;
esac
echo "== $(date +%T) done: $O"
